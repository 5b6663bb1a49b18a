/* What every iof-bench peer server shares: the command line, the listening
 * socket, the "ready" line, the HTTP response and request framing. The
 * servers (iofiber.c, libev.c, libuv.c, st.c, threads.c) each run as their
 * own process so that iof-bench can read their CPU time and system calls
 * from /proc without counting its own load generator.
 *
 *   iof-bench-PEER [--http] [--buf BYTES] [--heap-buf] [--port N]
 *                  [--stack BYTES]
 *
 * prints "port N" on stdout once it accepts connections, then serves until
 * SIGTERM (exit status 0). --http answers each HTTP/1.1 request (keep-alive)
 * with PEER_HTTP_RESPONSE; otherwise bytes are echoed back.
 *
 * Where the read buffer lives: the blocking-style servers (iofiber, st,
 * threads) keep it in the connection's stack frame, as code in that style
 * does, unless --heap-buf (or a buffer above PEER_STACK_BUF_MAX) makes them
 * malloc it per connection; the callback servers (libev, libuv) have no
 * frame that outlives a callback and always malloc it. */
#ifndef IOF_BENCH_PEER_H
#define IOF_BENCH_PEER_H

#include <stdbool.h>
#include <stddef.h>

typedef struct peer_opts {
  bool http;
  size_t buf;    /* read buffer per connection; default 4096 */
  int port;      /* 0: any free port */
  size_t stack;  /* stack per connection (threads, st); default 64 KiB */
  bool heap_buf; /* malloc the buffer even in blocking-style servers */
} peer_opts;

/* The largest buffer a blocking-style server keeps on its stack (64 KiB
 * stacks by default): larger ones are malloc'ed. */
#define PEER_STACK_BUF_MAX 16384

/* Whether a blocking-style server keeps its buffer on the stack. */
static inline bool peer_buf_on_stack(const peer_opts *o) {
  return !o->heap_buf && o->buf <= PEER_STACK_BUF_MAX;
}

/* Parses argv; on a usage error prints it and exits with status 2. Also
 * raises RLIMIT_NOFILE to its hard limit and makes SIGTERM exit(0). */
void peer_init(int argc, char **argv, const char *name, peer_opts *o);

/* A listening TCP socket on 127.0.0.1:o->port (SO_REUSEADDR, backlog
 * 4096), non-blocking unless `blocking`. Exits with status 1 on error. */
int peer_listen(const peer_opts *o, bool blocking, int *port);

/* Prints "port N" on stdout and flushes it. */
void peer_ready(int port);

/* TCP_NODELAY, as every peer does on each connection. */
void peer_nodelay(int fd);

#define PEER_HTTP_RESPONSE                                                     \
  "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: "            \
  "13\r\n\r\nHello, World!"
#define PEER_HTTP_RESPONSE_LEN (sizeof PEER_HTTP_RESPONSE - 1)

/* Request framing for the benchmark's requests (no bodies): counts the
 * ends of headers ("\r\n\r\n") in p[0..n), carrying the partial match in
 * *state across calls. Returns the number of complete requests. */
unsigned peer_http_feed(unsigned *state, const char *p, size_t n);

/* Fills out (cap bytes) with min(k, cap / response) responses; returns the
 * bytes written and sets *done to the number of responses written. */
size_t peer_http_responses(char *out, size_t cap, unsigned k, unsigned *done);

#endif
