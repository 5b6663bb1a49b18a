/* chat: a line-based broadcast chat server, two fibers per client.
 *
 *   chat PORT [--host ADDR] [--max-line BYTES] [--idle MS]
 *
 * Every line a client sends goes to all the others as "NAME: line".
 * Clients are named user1, user2... in order of arrival; "/nick NAME"
 * renames, "/quit" leaves. Lines are read with the buffered reader (no
 * copies, a line longer than --max-line disconnects its sender), a client
 * silent for --idle ms is dropped (a read timeout on its socket).
 *
 * Each client has a reading fiber and a writing fiber, run together by
 * iof_when_all, and an outbox between them: a channel of messages. A
 * broadcast only queues (iof_chan_try_send never waits), so a client that
 * does not read slows nobody else: it is dropped when its outbox is full,
 * or when it takes no bytes for a second (a write timeout).
 *
 * SIGINT or SIGTERM shuts down cleanly: the shared stop token cancels
 * every fiber's wait; each reader then takes its client out of the list
 * and queues a goodbye (none of which waits), and each writer sends what
 * is queued inside iof_shield_for, where waits still work although the
 * chain is stopped. */
#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <iofiber/iofiber.h>

#define MS 1000000LL
/* What may wait in one client's outbox (beyond its socket's buffers); a
 * client further behind is dropped. */
#define OUTBOX_MSGS 1024
#define OUTBOX_BYTES ((size_t)1 << 20)

/* One message, shared by every outbox it is queued in. */
typedef struct msg {
  int refs;
  size_t len;
  char data[];
} msg;

typedef struct client {
  struct client *next;
  iof_socket *sock;
  iof_chan *outbox; /* msg * for the writer; closed when the reader ends */
  size_t queued;    /* bytes in the outbox */
  bool dropped;     /* shut down already (too slow, or a write failed) */
  msg *cur;         /* the message the writer is sending, and how much of */
  size_t sent;      /* it went: a stop mid-write finishes it shielded */
  int end;          /* why the reader ended (-EMSGSIZE: line too long) */
  char name[32];
} client;

/* Every fiber runs on the one io thread, and nothing that walks or edits
 * the list waits: it needs no lock. */
static iof_io_context *io;
static iof_stop_source stop;
static client *clients;
static int next_id = 1;
static size_t max_line = 1024;
static long idle_ms = 600000;

/* A message of len bytes, to be filled in; one reference. */
static msg *msg_new(size_t len) {
  msg *m = malloc(sizeof *m + len);
  if (!m) return NULL;
  m->refs = 1;
  m->len = len;
  return m;
}

static msg *msg_text(const char *text) {
  size_t len = strlen(text);
  msg *m = msg_new(len);
  if (m) memcpy(m->data, text, len);
  return m;
}

static void msg_unref(msg *m) {
  if (--m->refs == 0) free(m);
}

/* Shuts the client's socket: its reader sees the end and leaves. */
static void drop(client *c) {
  if (!c->dropped) iof_socket_shutdown(c->sock, SHUT_RDWR);
  c->dropped = true;
}

/* Queues m for c without waiting; a full outbox drops c. */
static void queue(client *c, msg *m) {
  if (c->dropped) return;
  if (c->queued + m->len > OUTBOX_BYTES) {
    drop(c);
    return;
  }
  m->refs++;
  int r = iof_chan_try_send(c->outbox, &m);
  if (r < 0) {
    msg_unref(m);
    if (r == -EAGAIN) drop(c);
    return;
  }
  c->queued += m->len;
}

/* Queues text for c alone. */
static void tell(client *c, const char *text) {
  msg *m = msg_text(text);
  if (!m) return;
  queue(c, m);
  msg_unref(m);
}

/* Queues m for every client but `from` (NULL: for all). */
static void broadcast(client *from, msg *m) {
  for (client *c = clients; c; c = c->next)
    if (c != from) queue(c, m);
}

static void announce(client *from, const char *text) {
  msg *m = msg_text(text);
  if (!m) return;
  broadcast(from, m);
  msg_unref(m);
}

/* ---- the writing fiber ------------------------------------------------ */

/* Sends what is queued until the reader closes the outbox. A stop request
 * (-ECANCELED) leaves the message in progress in c->cur, for the shielded
 * pass to finish: cut there, the client would get half a line and then,
 * dropped, none of what follows (the goodbye included). */
static int send_queued(void *arg) {
  client *c = arg;
  for (;;) {
    if (!c->cur) {
      if (iof_chan_recv(c->outbox, &c->cur) < 0) return 0;
      c->sent = 0;
      c->queued -= c->cur->len;
    }
    msg *m = c->cur;
    while (!c->dropped && c->sent < m->len) {
      ssize_t n = iof_write_some(c->sock, m->data + c->sent, m->len - c->sent);
      if (n == -ECANCELED) return (int)n;
      if (n < 0)
        drop(c);
      else
        c->sent += (size_t)n;
    }
    c->cur = NULL;
    msg_unref(m);
  }
}

static int writer(void *arg) {
  client *c = arg;
  send_queued(c);
  /* Stopped: the goodbye is still to come; bounded, so that a stuck peer
   * cannot hold the shutdown. */
  if (iof_stop_requested(iof_stop_source_token(&stop)))
    iof_shield_for(2000 * MS, send_queued, c);
  if (c->cur) { /* the shield's time ran out mid-write */
    drop(c);
    msg_unref(c->cur);
    c->cur = NULL;
  }
  return 0;
}

/* ---- the reading fiber ------------------------------------------------ */

/* The cleanup a stop request must not skip. Nothing in it waits (the
 * queueing never does), so a stop cannot cut it short. */
static void leave(client *c) {
  for (client **pp = &clients; *pp; pp = &(*pp)->next)
    if (*pp == c) {
      *pp = c->next;
      break;
    }
  char text[80];
  if (iof_stop_requested(iof_stop_source_token(&stop))) {
    tell(c, "* server shutting down\n");
  } else {
    snprintf(text, sizeof text, "* %s left\n", c->name);
    announce(NULL, text);
  }
  iof_chan_close(c->outbox); /* the writer sends the rest and ends */
}

static int reader(void *arg) {
  client *c = arg;
  char text[64];
  iof_reader rd;
  int r = iof_reader_init_socket(&rd, c->sock, NULL, max_line);
  if (r < 0) {
    iof_chan_close(c->outbox);
    return 0;
  }
  c->next = clients;
  clients = c;
  snprintf(text, sizeof text, "* you are %s\n", c->name);
  tell(c, text);
  snprintf(text, sizeof text, "* %s joined\n", c->name);
  announce(c, text);
  iof_bytes line;
  while ((r = iof_reader_read_line(&rd, &line)) == 1) {
    if (line.len == 5 && memcmp(line.data, "/quit", 5) == 0) break;
    if (line.len > 6 && line.len < 6 + sizeof c->name &&
        memcmp(line.data, "/nick ", 6) == 0) {
      memcpy(c->name, line.data + 6, line.len - 6);
      c->name[line.len - 6] = 0;
      continue;
    }
    /* "name: " + line + "\n", built once for every outbox. */
    size_t nl = strlen(c->name);
    msg *m = msg_new(nl + 2 + line.len + 1);
    if (!m) break;
    memcpy(m->data, c->name, nl);
    memcpy(m->data + nl, ": ", 2);
    memcpy(m->data + nl + 2, line.data, line.len);
    m->data[m->len - 1] = '\n';
    broadcast(c, m);
    msg_unref(m);
    /* A flood of buffered lines would otherwise be queued without a pause
     * for the writers, and fill the outboxes of clients that keep up. */
    iof_yield();
  }
  c->end = r;
  if (r == -EMSGSIZE) tell(c, "* line too long\n");
  if (r == -ETIMEDOUT) tell(c, "* idle for too long\n");
  leave(c);
  iof_reader_destroy(&rd);
  return 0;
}

static int session(void *arg) {
  client *c = arg;
  snprintf(c->name, sizeof c->name, "user%d", next_id++);
  iof_socket_set_timeout(c->sock, IOF_WRITE, 1000 * MS);
  iof_socket_set_timeout(c->sock, IOF_READ, idle_ms * MS);
  const iof_fn fns[2] = {reader, writer};
  void *const args[2] = {c, c};
  int r = iof_when_all(2, fns, args, NULL);
  /* A child that could not start leaves the outbox open or filled. */
  if (!iof_chan_closed(c->outbox)) iof_chan_close(c->outbox);
  msg *m;
  while (iof_chan_try_recv(c->outbox, &m) == 0) msg_unref(m);
  /* The rest of a too long line is still unread: closing now would make
   * the kernel answer it with a reset, which destroys "* line too long"
   * (and everything before it) in the client's receive queue. Stop
   * writing, then drop its input for at most a second. */
  if (r == 0 && c->end == -EMSGSIZE && !c->dropped)
    iof_socket_close_graceful(c->sock, 1000 * MS);
  iof_chan_destroy(c->outbox);
  iof_socket_free(c->sock);
  free(c);
  return 0;
}

static int acceptor(void *arg) {
  iof_socket *listener = arg;
  iof_launch_opts opts = {0};
  opts.stop_token = iof_stop_source_token(&stop);
  int reported = 0; /* the last error reported */
  for (;;) {
    iof_socket *s;
    int r = iof_accept(listener, &s, NULL, NULL);
    if (r == -ECANCELED || r == -EBADF) break;
    if (r < 0) { /* out of descriptors and the like: back off a little */
      /* Once per kind of error: out of descriptors, this loop comes back
       * every 20 ms for as long as it lasts. */
      if (r != reported)
        fprintf(stderr, "iof-chat: accept: %s (backing off)\n",
                iof_strerror(r));
      reported = r;
      if (iof_sleep_for(20 * MS) < 0) break;
      continue;
    }
    client *c = calloc(1, sizeof *c);
    if (c) c->outbox = iof_chan_create(sizeof(msg *), OUTBOX_MSGS);
    if (!c || !c->outbox) {
      free(c);
      iof_socket_free(s);
      continue;
    }
    c->sock = s;
    if (iof_run_async(iof_io_context_executor(io), &opts, session, c) < 0) {
      iof_socket_free(s);
      iof_chan_destroy(c->outbox);
      free(c);
    }
  }
  return 0;
}

static int watch_signal(void *arg) {
  int signo = *(int *)arg;
  if (iof_signal_wait(io, signo) == signo) iof_stop_source_request(&stop);
  return 0;
}

static void usage(FILE *out) {
  fprintf(out,
          "usage: iof-chat PORT [--host ADDR] [--max-line BYTES] [--idle MS]\n"
          "\n"
          "Line-based broadcast chat server. Commands: /nick NAME, "
          "/quit.\n"
          "\n"
          "  --host ADDR       address to listen on (default 127.0.0.1)\n"
          "  --max-line BYTES  longest line accepted (default 1024)\n"
          "  --idle MS         drop a client silent for MS ms\n"
          "                    (default 600000)\n"
          "  --help            show this help\n"
          "\n"
          "PORT 0 picks a free port (printed on stderr). SIGINT or "
          "SIGTERM\nshuts down cleanly (exit status 0).\n");
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
  long v;
  static const struct option longopts[] = {
      {"host", required_argument, NULL, 'H'},
      {"max-line", required_argument, NULL, 'm'},
      {"idle", required_argument, NULL, 'i'},
      {"help", no_argument, NULL, 'h'},
      {NULL, 0, NULL, 0}};
  int c;
  while ((c = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
    switch (c) {
    case 'H':
      host = optarg;
      break;
    case 'm':
      if (!parse_long(optarg, 16, 1 << 20, &v)) {
        fprintf(stderr, "iof-chat: --max-line wants 16..%d\n", 1 << 20);
        return 2;
      }
      max_line = (size_t)v;
      break;
    case 'i':
      if (!parse_long(optarg, 1, 86400000, &idle_ms)) {
        fprintf(stderr, "iof-chat: --idle wants 1..86400000\n");
        return 2;
      }
      break;
    case 'h':
      usage(stdout);
      return 0;
    default:
      usage(stderr);
      return 2;
    }
  }
  if (optind != argc - 1 || !parse_long(argv[optind], 0, 65535, &v)) {
    usage(stderr);
    return 2;
  }
  if (iof_stop_source_init(&stop) < 0) return 1;
  io = iof_io_context_create();
  if (!io) return 1;
  iof_socket *listener;
  int r = iof_tcp_listen(io, host, argv[optind], 0, 0, &listener);
  if (r < 0) {
    fprintf(stderr, "iof-chat: listen on %s:%s: %s\n", host, argv[optind],
            iof_strerror(r));
    iof_io_context_destroy(io);
    return 1;
  }
  iof_launch_opts opts = {0};
  opts.stop_token = iof_stop_source_token(&stop);
  static int sigs[2] = {SIGINT, SIGTERM};
  iof_run_async(iof_io_context_executor(io), &opts, acceptor, listener);
  for (int i = 0; i < 2; i++)
    iof_run_async(iof_io_context_executor(io), &opts, watch_signal, &sigs[i]);
  fprintf(stderr, "iof-chat: listening on %s:%d\n", host,
          iof_socket_local_port(listener));
  iof_io_context_run(io); /* returns once every client has left */
  iof_io_context_destroy(io);
  iof_stop_source_destroy(&stop);
  return 0;
}
