/* chat: a line-based broadcast chat server, one fiber per client.
 *
 *   chat PORT [--host ADDR] [--max-line BYTES] [--idle MS]
 *
 * Every line a client sends goes to all the others as "NAME: line".
 * Clients are named user1, user2... in order of arrival; "/nick NAME"
 * renames, "/quit" leaves. Lines are read with the buffered reader (no
 * copies, a line longer than --max-line disconnects its sender), a client
 * silent for --idle ms is dropped (a read timeout on its socket), and a
 * client too slow to take its messages for a second is dropped too (a
 * write timeout).
 *
 * SIGINT or SIGTERM shuts down cleanly: the shared stop token cancels
 * every read; each client fiber then takes itself out of the shared list
 * and says goodbye inside iof_shield_for, where the mutex and the write
 * still work although the chain is stopped. */
#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <iofiber/iofiber.h>

#define MS 1000000LL

typedef struct client {
  struct client *next;
  iof_socket *sock;
  iof_mutex write_lock; /* one message at a time on the socket */
  char name[32];
} client;

static iof_io_context *io;
static iof_stop_source stop;
static iof_mutex list_lock = IOF_MUTEX_INIT; /* guards `clients` */
static client *clients;
static int next_id = 1;
static size_t max_line = 1024;
static long idle_ms = 600000;

static int send_to(client *c, const char *msg, size_t len) {
  int r = iof_mutex_lock(&c->write_lock);
  if (r < 0) return r;
  ssize_t n = iof_write(c->sock, msg, len);
  iof_mutex_unlock(&c->write_lock);
  return n < 0 ? (int)n : 0;
}

/* Sends msg to every client but `from` (NULL: to all). A client that
 * cannot take it within its write timeout is shut down: its own fiber
 * then sees the end and leaves. */
static void broadcast(client *from, const char *msg, size_t len) {
  if (iof_mutex_lock(&list_lock) < 0) return;
  for (client *c = clients; c; c = c->next)
    if (c != from && send_to(c, msg, len) < 0)
      iof_socket_shutdown(c->sock, SHUT_RDWR);
  iof_mutex_unlock(&list_lock);
}

/* The cleanup a stop request must not skip: runs shielded. */
static int leave(void *arg) {
  client *c = arg;
  bool stopping = iof_stop_requested(iof_stop_source_token(&stop));
  int r = iof_mutex_lock(&list_lock);
  if (r < 0) return r;
  for (client **pp = &clients; *pp; pp = &(*pp)->next)
    if (*pp == c) {
      *pp = c->next;
      break;
    }
  iof_mutex_unlock(&list_lock);
  char msg[80];
  int n;
  if (stopping) {
    n = snprintf(msg, sizeof msg, "* server shutting down\n");
    send_to(c, msg, (size_t)n);
  } else {
    n = snprintf(msg, sizeof msg, "* %s left\n", c->name);
    broadcast(NULL, msg, (size_t)n);
  }
  return 0;
}

/* Reads and drops what the client still sends (see session). */
static int drain(void *arg) {
  char buf[4096];
  while (iof_read_some(arg, buf, sizeof buf) > 0) {
  }
  return 0;
}

static int session(void *arg) {
  client *c = arg;
  char line_buf[64];
  snprintf(c->name, sizeof c->name, "user%d", next_id++);
  iof_socket_set_timeout(c->sock, IOF_WRITE, 1000 * MS);
  iof_socket_set_timeout(c->sock, IOF_READ, idle_ms * MS);
  iof_reader rd;
  int r = iof_reader_init_socket(&rd, c->sock, NULL, max_line);
  if (r == 0 && iof_mutex_lock(&list_lock) == 0) {
    c->next = clients;
    clients = c;
    iof_mutex_unlock(&list_lock);
    int n = snprintf(line_buf, sizeof line_buf, "* you are %s\n", c->name);
    send_to(c, line_buf, (size_t)n);
    n = snprintf(line_buf, sizeof line_buf, "* %s joined\n", c->name);
    broadcast(c, line_buf, (size_t)n);
    iof_bytes line;
    while ((r = iof_reader_read_line(&rd, &line)) == 1) {
      if (line.len == 5 && memcmp(line.data, "/quit", 5) == 0) break;
      if (line.len > 6 && line.len < 6 + sizeof c->name &&
          memcmp(line.data, "/nick ", 6) == 0) {
        memcpy(c->name, line.data + 6, line.len - 6);
        c->name[line.len - 6] = 0;
        continue;
      }
      /* name + ": " + line + "\n" in one write, through a small stack
       * buffer or one heap block for long lines. */
      size_t nl = strlen(c->name), len = nl + 2 + line.len + 1;
      char small[256], *msg = len <= sizeof small ? small : malloc(len);
      if (!msg) break;
      memcpy(msg, c->name, nl);
      memcpy(msg + nl, ": ", 2);
      memcpy(msg + nl + 2, line.data, line.len);
      msg[len - 1] = '\n';
      broadcast(c, msg, len);
      if (msg != small) free(msg);
    }
    if (r == -EMSGSIZE) send_to(c, "* line too long\n", 16);
    if (r == -ETIMEDOUT) send_to(c, "* idle for too long\n", 20);
    /* Stopped or not, the client must leave the list: shielded, and
     * bounded so that a stuck peer cannot hold the shutdown. */
    iof_shield_for(2000 * MS, leave, c);
    /* The rest of a too long line is still unread: closing now would make
     * the kernel answer it with a reset, which destroys "* line too long"
     * (and everything before it) in the client's receive queue. Stop
     * writing, then drop its input for at most a second. */
    if (r == -EMSGSIZE && iof_socket_shutdown(c->sock, SHUT_WR) == 0)
      iof_with_deadline(1000 * MS, drain, c->sock);
  }
  iof_reader_destroy(&rd);
  iof_socket_free(c->sock);
  iof_mutex_destroy(&c->write_lock);
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
        fprintf(stderr, "chat: accept: %s (backing off)\n", iof_strerror(r));
      reported = r;
      if (iof_sleep_for(20 * MS) < 0) break;
      continue;
    }
    client *c = calloc(1, sizeof *c);
    if (!c || iof_mutex_init(&c->write_lock) < 0) {
      free(c);
      iof_socket_free(s);
      continue;
    }
    c->sock = s;
    if (iof_run_async(iof_io_context_executor(io), &opts, session, c) < 0) {
      iof_socket_free(s);
      iof_mutex_destroy(&c->write_lock);
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
        fprintf(stderr, "chat: --max-line wants 16..%d\n", 1 << 20);
        return 2;
      }
      max_line = (size_t)v;
      break;
    case 'i':
      if (!parse_long(optarg, 1, 86400000, &idle_ms)) {
        fprintf(stderr, "chat: --idle wants 1..86400000\n");
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
    fprintf(stderr, "chat: listen on %s:%s: %s\n", host, argv[optind],
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
  fprintf(stderr, "chat: listening on %s:%d\n", host,
          iof_socket_local_port(listener));
  iof_io_context_run(io); /* returns once every client has left */
  iof_io_context_destroy(io);
  iof_stop_source_destroy(&stop);
  return 0;
}
