/* http-hello: a minimal HTTP/1.1 server answering every request with
 * 200 "Hello, World!". One fiber per connection, blocking style.
 *
 *   http-hello PORT [--host ADDR] [--threads N] [--timeout MS]
 *
 * What it shows:
 * - a request parser on top of iof_stream_read_until: each connection has
 *   a fixed buffer; the call reads a line at a time until an empty line
 *   ends the head and leaves whatever follows in the buffer for the next
 *   request, so pipelined requests (several in one read) just work; their
 *   responses are batched into one write. Lines end in CRLF, or in a bare
 *   LF as RFC 9112 lets a server accept (printf '...\n\n' | nc works);
 * - keep-alive (HTTP/1.1 unless "Connection: close"; HTTP/1.0 only with
 *   "Connection: keep-alive"); request bodies (Content-Length or chunked)
 *   are read and dropped;
 * - timeouts from socket deadlines: a client has --timeout ms to send a
 *   request's headers (an idle keep-alive connection is closed then; one
 *   stuck mid-headers gets 408), and each later wait for its body (408
 *   when it stalls) or for it to take the response is bounded by the same;
 * - errors: headers larger than the buffer get 431, garbled ones (or
 *   HTTP/1.1 without exactly one Host) 400, an unknown transfer coding
 *   501; then the connection is closed gracefully;
 * - the same threading (--threads N: SO_REUSEPORT listeners) and clean
 *   SIGINT/SIGTERM shutdown as echo-server. */
#include <errno.h>
#include <getopt.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <iofiber/iofiber.h>

#define MAX_THREADS 256
#define HEADER_MAX 8192 /* request line + headers; more gets 431 */
#define OUT_MAX 4096    /* batched responses */

typedef struct server {
  iof_io_context *io;
  iof_socket *listener;
  pthread_t thread;
} server;

static iof_stop_source stop;             /* requested on SIGINT/SIGTERM */
static int64_t timeout_ns = 60000000000; /* --timeout */

/* ---- request parsing ----------------------------------------------------*/

typedef struct request {
  bool http10;          /* HTTP/1.0 (else 1.1) */
  bool head;            /* HEAD: no body in the response */
  bool keep_alive;      /* the connection stays open after the response */
  bool chunked;         /* the body is in chunks (Transfer-Encoding) */
  bool expect_continue; /* "Expect: 100-continue" (HTTP/1.1 only) */
  uint64_t content_len; /* request body bytes to skip */
} request;

static bool is_tchar(char c) { /* RFC 9110 token characters */
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
         (c >= '0' && c <= '9') || (c && strchr("!#$%&'*+-.^_`|~", c));
}

/* Does the comma-separated list v[0..n) contain token tok (any case)? */
static bool has_token(const char *v, size_t n, const char *tok) {
  size_t tl = strlen(tok);
  for (size_t i = 0; i < n;) {
    while (i < n && (v[i] == ' ' || v[i] == '\t' || v[i] == ',')) i++;
    size_t j = i;
    while (j < n && v[j] != ',') j++;
    size_t e = j;
    while (e > i && (v[e - 1] == ' ' || v[e - 1] == '\t')) e--;
    if (e - i == tl && strncasecmp(v + i, tok, tl) == 0) return true;
    i = j;
  }
  return false;
}

/* The length of the line ending at p (a LF): 2 for CRLF, 1 for a bare LF. */
static size_t eol_len(const char *p, const char *start) {
  return p > start && p[-1] == '\r' ? 2 : 1;
}

/* Parses the head p[0..n) (ending in an empty line). 0, or the HTTP status
 * to fail with. */
static int parse_request(const char *p, size_t n, request *req) {
  const char *end = p + n - eol_len(p + n - 1, p); /* the final empty line */
  memset(req, 0, sizeof *req);
  /* Request line: METHOD SP target SP HTTP/1.x CRLF (or LF) */
  const char *m = p;
  while (p < end && is_tchar(*p)) p++;
  if (p == m || *p != ' ') return 400;
  req->head = p - m == 4 && memcmp(m, "HEAD", 4) == 0;
  const char *t = ++p;
  while (p < end && *p != ' ' && *p != '\r' && (unsigned char)*p > ' ') p++;
  if (p == t || *p != ' ') return 400;
  p++;
  if (end - p < 9 || memcmp(p, "HTTP/1.", 7) != 0 ||
      (p[7] != '0' && p[7] != '1'))
    return 400;
  req->http10 = p[7] == '0';
  p += 8;
  if (p[0] == '\r') p++; /* a CR only before the LF (also below) */
  if (*p++ != '\n') return 400;
  bool conn_close = false, conn_keep = false, have_len = false;
  bool unknown_te = false, have_te = false;
  int hosts = 0;
  /* Header fields: name ":" OWS value OWS CRLF (or LF) */
  while (p < end) {
    const char *name = p;
    while (p < end && is_tchar(*p)) p++;
    size_t name_len = (size_t)(p - name);
    if (!name_len || *p != ':') return 400;
    p++;
    while (*p == ' ' || *p == '\t') p++;
    const char *v = p;
    while (*p != '\r' && *p != '\n' && *p) p++;
    size_t vlen = (size_t)(p - v);
    if (p[0] == '\r') p++;
    if (*p++ != '\n') return 400; /* a bare CR or a NUL (RFC 9110) */
    while (vlen && (v[vlen - 1] == ' ' || v[vlen - 1] == '\t')) vlen--;
    if (name_len == 4 && strncasecmp(name, "host", 4) == 0) {
      hosts++;
    } else if (name_len == 10 && strncasecmp(name, "connection", 10) == 0) {
      conn_close |= has_token(v, vlen, "close");
      conn_keep |= has_token(v, vlen, "keep-alive");
    } else if (name_len == 14 && strncasecmp(name, "content-length", 14) == 0) {
      uint64_t len = 0;
      if (!vlen || have_len) return 400;
      for (size_t i = 0; i < vlen; i++) {
        if (v[i] < '0' || v[i] > '9' || len > UINT64_MAX / 10 - 1) return 400;
        len = len * 10 + (uint64_t)(v[i] - '0');
      }
      req->content_len = len;
      have_len = true;
    } else if (name_len == 17 &&
               strncasecmp(name, "transfer-encoding", 17) == 0) {
      /* RFC 9112: chunked must come last; only the last field counts. */
      size_t last = vlen;
      while (last && v[last - 1] != ',') last--;
      const char *tail = v + last;
      size_t tlen = vlen - last;
      while (tlen && (*tail == ' ' || *tail == '\t')) tail++, tlen--;
      /* Anything else last ("identity" included, which RFC 9112 no longer
       * knows) leaves the body's length unknown: a Content-Length beside
       * it must not be trusted instead (RFC 9112, 6.3). */
      req->chunked = tlen == 7 && strncasecmp(tail, "chunked", 7) == 0;
      have_te = true;
      unknown_te = !req->chunked;
    } else if (name_len == 6 && strncasecmp(name, "expect", 6) == 0) {
      req->expect_continue = has_token(v, vlen, "100-continue");
    }
  }
  /* RFC 9112, 3.2: exactly one Host in HTTP/1.1, at most one in 1.0. */
  if (hosts > 1 || (hosts == 0 && !req->http10)) return 400;
  /* RFC 9110: an HTTP/1.0 client cannot take an interim response. */
  req->expect_continue &= !req->http10;
  req->keep_alive = req->http10 ? conn_keep && !conn_close : !conn_close;
  if (unknown_te) return 501;
  /* RFC 9112, 6.1: an HTTP/1.0 message with Transfer-Encoding has faulty
   * framing (1.0 has no chunks): answered, then the connection closes. */
  if (have_te && req->http10) req->keep_alive = false;
  if (req->chunked && have_len) {
    /* Both framings: the chunks win, and the connection cannot be trusted
     * for a next request (RFC 9112, 6.3). */
    req->content_len = 0;
    req->keep_alive = false;
  }
  return 0;
}

/* ---- a connection ------------------------------------------------------ */

typedef struct conn {
  iof_socket *sock;
  iof_socket_stream ss;
  iof_stream *st;
  char in[HEADER_MAX];
  size_t filled; /* bytes in `in`, the next request first */
  char out[OUT_MAX];
  size_t out_len; /* responses not yet written */
} conn;

static void append(conn *c, const char *s) {
  size_t n = strlen(s);
  memcpy(c->out + c->out_len, s, n);
  c->out_len += n;
}

/* Adds the response to `out` (the caller keeps room for one). */
static void respond(conn *c, const request *req) {
  append(c, "HTTP/1.1 200 OK\r\n"
            "Server: iofiber\r\n"
            "Content-Type: text/plain\r\n"
            "Content-Length: 13\r\n");
  if (!req->keep_alive)
    append(c, "Connection: close\r\n");
  else if (req->http10) /* it asked for keep-alive: confirm */
    append(c, "Connection: keep-alive\r\n");
  append(c, "\r\n");
  if (!req->head) append(c, "Hello, World!");
}

static int flush(conn *c) {
  ssize_t r = c->out_len ? iof_write(c->sock, c->out, c->out_len) : 0;
  c->out_len = 0;
  return r < 0 ? (int)r : 0;
}

/* Drops the first n bytes of the input buffer. */
static void consume(conn *c, size_t n) {
  memmove(c->in, c->in + n, c->filled - n);
  c->filled -= n;
}

/* Skips a request body of len bytes: first what is buffered, then reads. */
static int skip_body(conn *c, uint64_t len) {
  while (len) {
    if (!c->filled) {
      ssize_t n = iof_read_some(c->sock, c->in, sizeof c->in);
      if (n <= 0) return n < 0 ? (int)n : -ECONNRESET;
      c->filled = (size_t)n;
    }
    size_t take = c->filled < len ? c->filled : (size_t)len;
    consume(c, take);
    len -= take;
  }
  return 0;
}

static int hex_digit(char ch) {
  if (ch >= '0' && ch <= '9') return ch - '0';
  if (ch >= 'a' && ch <= 'f') return ch - 'a' + 10;
  if (ch >= 'A' && ch <= 'F') return ch - 'A' + 10;
  return -1;
}

/* Reads one line at `off` in the buffer (what comes before stays): its
 * length with the CRLF or LF; 0 at the end of the stream; -ENOBUFS when
 * the buffer is full without one; or the read's error. */
static ssize_t read_line_at(conn *c, size_t off) {
  if (off == sizeof c->in) return -ENOBUFS;
  size_t rest = c->filled - off;
  ssize_t n = iof_stream_read_until(c->st, c->in + off, sizeof c->in - off,
                                    &rest, "\n", 1);
  c->filled = off + rest;
  return n;
}

/* Is the line of n bytes at p empty ("\r\n" or "\n")? */
static bool empty_line(const char *p, ssize_t n) {
  return n == 1 || (n == 2 && p[0] == '\r');
}

/* Reads a request head, line by line, up to its empty line: its length;
 * empty lines before it are dropped (RFC 9112, 2.2); else as read_line_at. */
static ssize_t read_head(conn *c) {
  size_t off = 0;
  for (;;) {
    ssize_t n = read_line_at(c, off);
    if (n <= 0) return n;
    if (empty_line(c->in + off, n)) {
      if (off) return (ssize_t)off + n;
      consume(c, (size_t)n);
      continue;
    }
    off += (size_t)n;
  }
}

/* Does the buffer already hold another whole request head? */
static bool have_head(const conn *c) {
  const char *p = c->in, *end = c->in + c->filled;
  while (p < end && (*p == '\r' || *p == '\n')) p++; /* empty lines */
  for (const char *nl; (nl = memchr(p, '\n', (size_t)(end - p))); p = nl + 1)
    if (nl + 1 < end &&
        (nl[1] == '\n' || (nl[1] == '\r' && nl + 2 < end && nl[2] == '\n')))
      return true;
  return false;
}

/* Reads one line of a chunked body into the buffer: its length with the
 * CRLF or LF; 400 as a negative number when none fits, or the read's
 * error. */
static ssize_t read_line(conn *c) {
  ssize_t n = read_line_at(c, 0);
  if (n == -ENOBUFS) return -400;
  return n == 0 ? -ECONNRESET : n;
}

/* Reads and drops a chunked body (RFC 9112, 7.1): size lines (extensions
 * ignored), data, then the trailer fields up to an empty line. 0; -400 on
 * a malformed body; or the read's error. */
static int skip_chunked(conn *c) {
  for (;;) {
    ssize_t n = read_line(c);
    if (n < 0) return (int)n;
    size_t len = (size_t)n - eol_len(c->in + n - 1, c->in); /* no CR/LF */
    uint64_t size = 0;
    size_t i = 0;
    for (int d; i < len && (d = hex_digit(c->in[i])) >= 0; i++) {
      if (size > UINT64_MAX >> 4) return -400;
      size = size << 4 | (uint64_t)d;
    }
    /* chunk-size [ BWS ";" chunk-ext ] CRLF: after the digits and any
     * blanks, only an extension or the line's end ("5 6" is no size 5). */
    size_t j = i;
    while (c->in[j] == ' ' || c->in[j] == '\t') j++;
    if (!i || (c->in[j] != ';' && j != len)) return -400;
    consume(c, (size_t)n);
    if (!size) break;
    int r = skip_body(c, size);
    if (r < 0) return r;
    n = read_line(c); /* the CRLF after the data */
    if (n < 0) return (int)n;
    if (!empty_line(c->in, n)) return -400;
    consume(c, (size_t)n);
  }
  for (;;) { /* trailer fields */
    ssize_t n = read_line(c);
    if (n < 0) return (int)n;
    bool last = empty_line(c->in, n);
    consume(c, (size_t)n);
    if (last) return 0;
  }
}

/* Writes what is batched, then the error response. */
static void send_error(conn *c, int status) {
  if (flush(c) < 0) return;
  const char *reason = status == 431   ? "Request Header Fields Too Large"
                       : status == 501 ? "Not Implemented"
                       : status == 408 ? "Request Timeout"
                                       : "Bad Request";
  int n = snprintf(c->out, sizeof c->out,
                   "HTTP/1.1 %d %s\r\nContent-Type: text/plain\r\n"
                   "Content-Length: %zu\r\nConnection: close\r\n\r\n%s\n",
                   status, reason, strlen(reason) + 1, reason);
  c->out_len = (size_t)n;
  flush(c);
}

/* A graceful close: stop writing, then read and drop what the client still
 * sends (for at most a second) so that the kernel does not answer it with
 * a reset that could destroy our last response in flight. */
static void lingering_close(conn *c) {
  iof_socket_close_graceful(c->sock, 1000 * 1000 * 1000);
}

static int connection(void *arg) {
  conn *c = calloc(1, sizeof *c);
  if (!c) {
    iof_socket_free(arg);
    return -ENOMEM;
  }
  c->sock = arg;
  c->st = iof_socket_stream_init(&c->ss, c->sock);
  /* Every wait for the client's bytes, or for it to take ours, is bounded;
   * the headers of each request have one deadline on top. */
  iof_socket_set_timeout(c->sock, IOF_READ | IOF_WRITE, timeout_ns);
  for (;;) {
    iof_socket_set_deadline(c->sock, IOF_READ, iof_deadline_after(timeout_ns));
    ssize_t n = read_head(c);
    iof_socket_set_deadline(c->sock, IOF_READ, 0);
    if (n == -ENOBUFS) { /* no end of headers in HEADER_MAX bytes */
      send_error(c, 431);
      lingering_close(c);
      break;
    }
    if (n == -ETIMEDOUT && c->filled) { /* stuck in the middle of headers */
      send_error(c, 408);
      lingering_close(c);
      break;
    }
    if (n <= 0) break; /* closed, reset, idle, or -ECANCELED on stop */
    request req;
    int status = parse_request(c->in, (size_t)n, &req);
    if (status) {
      send_error(c, status);
      lingering_close(c);
      break;
    }
    consume(c, (size_t)n);
    /* A client that sent "Expect: 100-continue" holds its body back until
     * we say so (curl waits a second, then sends anyway): say so, ahead of
     * the response, unless the body is already here. */
    if (req.expect_continue && (req.chunked || req.content_len > c->filled)) {
      append(c, "HTTP/1.1 100 Continue\r\n\r\n");
      if (flush(c) < 0) break;
    }
    int r = req.chunked       ? skip_chunked(c)
            : req.content_len ? skip_body(c, req.content_len)
                              : 0;
    if (r == -400 || r == -ETIMEDOUT) { /* a garbled or stalled body */
      send_error(c, r == -400 ? 400 : 408);
      lingering_close(c);
      break;
    }
    if (r < 0) break;
    respond(c, &req);
    /* Pipelining: while another whole request is already buffered and
     * there is room for its response, answer it in the same write. */
    bool more = have_head(c);
    if (!req.keep_alive || !more || OUT_MAX - c->out_len < 256) {
      if (flush(c) < 0) break;
    }
    if (!req.keep_alive) {
      lingering_close(c);
      break;
    }
  }
  iof_socket_free(c->sock);
  free(c);
  return 0;
}

static int acceptor(void *arg) {
  server *sv = arg;
  iof_launch_opts opts = {.stop_token = iof_stop_source_token(&stop)};
  bool reported_emfile = false, reported_other = false;
  for (;;) {
    iof_socket *client;
    int r = iof_accept(sv->listener, &client, NULL, NULL);
    if (r == -ECANCELED || r == -EBADF) break; /* stopping */
    if (r == -EMFILE || r == -ENFILE || r == -ENOBUFS || r == -ENOMEM) {
      /* Out of descriptors: back off instead of spinning on a listener
       * that stays readable. */
      if (!reported_emfile)
        fprintf(stderr, "iof-http-hello: accept: %s (backing off)\n",
                iof_strerror(r));
      reported_emfile = true;
      iof_sleep_for(20 * 1000 * 1000); /* 20 ms */
      continue;
    }
    if (r < 0) {
      if (!reported_other)
        fprintf(stderr, "iof-http-hello: accept: %s\n", iof_strerror(r));
      reported_other = true;
      continue;
    }
    iof_socket_set_nodelay(client, true);
    if (iof_run_async(iof_io_context_executor(sv->io), &opts, connection,
                      client) < 0)
      iof_socket_free(client);
  }
  iof_socket_free(sv->listener);
  sv->listener = NULL;
  return 0;
}

typedef struct watch {
  iof_io_context *io;
  int signo;
} watch;

/* The first of SIGINT/SIGTERM requests the stop; that cancels the other
 * watcher, every accept and every connection. */
static int watch_signal(void *arg) {
  watch *w = arg;
  if (iof_signal_wait(w->io, w->signo) == w->signo)
    iof_stop_source_request(&stop);
  return 0;
}

static void *run_thread(void *arg) {
  iof_io_context_run(((server *)arg)->io);
  return NULL;
}

/* ---- command line -------------------------------------------------------*/

static void usage(FILE *out) {
  fprintf(out, "usage: iof-http-hello PORT [--host ADDR] [--threads N] "
               "[--timeout MS]\n"
               "\n"
               "HTTP/1.1 server answering every request with 200 \"Hello, "
               "World!\".\n"
               "\n"
               "  --host ADDR  address to listen on (default 127.0.0.1)\n"
               "  --threads N  N io_contexts on N threads, SO_REUSEPORT "
               "listeners (default 1)\n"
               "  --timeout MS time a client has to send a request's headers, "
               "and\n"
               "               the longest wait for its body or for it to take "
               "the\n"
               "               response (default 60000)\n"
               "  --help       show this help\n"
               "\n"
               "SIGINT or SIGTERM stops it (exit status 0).\n");
}

static bool parse_long(const char *s, long lo, long hi, long *out) {
  char *end;
  errno = 0;
  long v = strtol(s, &end, 10);
  if (errno || end == s || *end || v < lo || v > hi) return false;
  *out = v;
  return true;
}

int main(int argc, char **argv) {
  const char *host = "127.0.0.1";
  long threads = 1, port;
  static const struct option longopts[] = {
      {"host", required_argument, NULL, 'H'},
      {"threads", required_argument, NULL, 't'},
      {"timeout", required_argument, NULL, 'T'},
      {"help", no_argument, NULL, 'h'},
      {NULL, 0, NULL, 0}};
  int c;
  while ((c = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
    switch (c) {
    case 'H':
      host = optarg;
      break;
    case 't':
      if (!parse_long(optarg, 1, MAX_THREADS, &threads)) {
        fprintf(stderr, "iof-http-hello: --threads wants 1..%d\n", MAX_THREADS);
        return 2;
      }
      break;
    case 'T': {
      long ms;
      if (!parse_long(optarg, 1, 86400000, &ms)) {
        fprintf(stderr, "iof-http-hello: --timeout wants 1..86400000\n");
        return 2;
      }
      timeout_ns = ms * 1000000LL;
      break;
    }
    case 'h':
      usage(stdout);
      return 0;
    default:
      usage(stderr);
      return 2;
    }
  }
  if (optind != argc - 1 || !parse_long(argv[optind], 0, 65535, &port)) {
    usage(stderr);
    return 2;
  }

  if (iof_stop_source_init(&stop) < 0) return 1;
  server *sv = calloc((size_t)threads, sizeof *sv);
  int status = sv ? 0 : 1;
  long created = 0;
  char port_str[16];
  snprintf(port_str, sizeof port_str, "%ld", port);
  int flags = threads > 1 ? IOF_LISTEN_REUSEPORT : 0;
  for (; status == 0 && created < threads; created++) {
    server *s = &sv[created];
    s->io = iof_io_context_create();
    int r = s->io
                ? iof_tcp_listen(s->io, host, port_str, 0, flags, &s->listener)
                : -errno;
    if (r < 0) {
      fprintf(stderr, "iof-http-hello: listen on %s:%s: %s\n", host, port_str,
              iof_strerror(r));
      status = 1;
    } else { /* port 0: the others listen on the port the first one got */
      snprintf(port_str, sizeof port_str, "%d",
               iof_socket_local_port(s->listener));
    }
  }

  watch watches[2] = {{NULL, SIGINT}, {NULL, SIGTERM}};
  if (status == 0) {
    iof_launch_opts opts = {.stop_token = iof_stop_source_token(&stop)};
    for (long i = 0; i < threads; i++)
      iof_run_async(iof_io_context_executor(sv[i].io), &opts, acceptor, &sv[i]);
    for (int i = 0; i < 2; i++) { /* signals: on the first io_context */
      watches[i].io = sv[0].io;
      iof_run_async(iof_io_context_executor(sv[0].io), &opts, watch_signal,
                    &watches[i]);
    }
    /* A URL to paste: an IPv6 address goes in brackets (RFC 3986). */
    bool v6 = strchr(host, ':') != NULL;
    fprintf(stderr,
            "iof-http-hello: listening on http://%s%s%s:%s/ (%ld thread%s)\n",
            v6 ? "[" : "", host, v6 ? "]" : "", port_str, threads,
            threads > 1 ? "s" : "");
    long started = 1;
    for (; started < threads; started++)
      if (pthread_create(&sv[started].thread, NULL, run_thread, &sv[started]) !=
          0) {
        fprintf(stderr, "iof-http-hello: cannot start thread %ld\n", started);
        iof_stop_source_request(&stop);
        status = 1;
        break;
      }
    iof_io_context_run(sv[0].io); /* returns once everything has unwound */
    for (long i = 1; i < started; i++) pthread_join(sv[i].thread, NULL);
  }

  for (long i = 0; i < created; i++)
    if (sv[i].io) iof_io_context_destroy(sv[i].io);
  free(sv);
  iof_stop_source_destroy(&stop);
  return status;
}
