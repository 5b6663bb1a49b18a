/* echo-server: a TCP echo server, one fiber per connection, written in
 * blocking style.
 *
 *   echo-server PORT [--host ADDR] [--buffer BYTES] [--threads N]
 *               [--idle MS]
 *
 * Every connection gets its own fiber that loops "read what is there, write
 * it back" until the peer closes. With --threads N, N io_contexts run on N
 * threads, each with its own SO_REUSEPORT listener on the same port: the
 * kernel spreads new connections over them. With --idle MS a connection
 * that neither sends nor takes its echo for MS ms is closed (a timeout on
 * each wait of its socket); without it, waits have no limit and stay on
 * the fastest path.
 *
 * SIGINT or SIGTERM stops the server cleanly: one shared stop source is
 * requested, every fiber was launched with its token, so each blocked
 * accept, read or write completes with -ECANCELED and the fibers unwind;
 * each io_context's run() then returns because no work is left.
 *
 * SIGUSR1 prints the live fibers (iof_fiber_dump) on stderr. */
#include <errno.h>
#include <getopt.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <iofiber/iofiber.h>

#define MAX_THREADS 256

/* One per thread: an io_context and its listener. */
typedef struct server {
  iof_io_context *io;
  iof_socket *listener;
  pthread_t thread;
} server;

static iof_stop_source stop;      /* requested on SIGINT/SIGTERM */
static size_t buffer_size = 4096; /* --buffer */
static int64_t idle_ns;           /* --idle; 0: none */

/* ---- the server proper ------------------------------------------------- */

static int connection(void *arg) {
  iof_socket *sock = arg;
  if (idle_ns) iof_socket_set_timeout(sock, IOF_READ | IOF_WRITE, idle_ns);
  char *buf = malloc(buffer_size);
  while (buf) {
    ssize_t n = iof_read_some(sock, buf, buffer_size);
    if (n <= 0) break; /* 0: closed; < 0: reset, idle, -ECANCELED on stop */
    if (iof_write(sock, buf, (size_t)n) < 0) break;
  }
  free(buf);
  iof_socket_free(sock);
  return 0;
}

static int acceptor(void *arg) {
  server *sv = arg;
  iof_launch_opts opts = {.stop_token = iof_stop_source_token(&stop),
                          .name = "connection"};
  bool reported_emfile = false, reported_other = false;
  for (;;) {
    iof_socket *client;
    int r = iof_accept(sv->listener, &client, NULL, NULL);
    if (r == -ECANCELED || r == -EBADF) break; /* stopping */
    if (r == -EMFILE || r == -ENFILE || r == -ENOBUFS || r == -ENOMEM) {
      /* Out of descriptors: the pending connection stays in the backlog
       * and the listener stays readable; retrying at once would spin. */
      if (!reported_emfile)
        fprintf(stderr, "iof-echo-server: accept: %s (backing off)\n",
                iof_strerror(r));
      reported_emfile = true;
      iof_sleep_for(20 * 1000 * 1000); /* 20 ms; -ECANCELED on stop */
      continue;
    }
    if (r < 0) { /* e.g. EPERM from a firewall: drop it, keep serving */
      if (!reported_other)
        fprintf(stderr, "iof-echo-server: accept: %s\n", iof_strerror(r));
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

/* Waits for one signal; the first one to arrive stops everything (the
 * other watcher is then cancelled by the same stop request). */
typedef struct watch {
  iof_io_context *io;
  int signo;
} watch;

static int watch_signal(void *arg) {
  watch *w = arg;
  if (iof_signal_wait(w->io, w->signo) == w->signo)
    iof_stop_source_request(&stop);
  return 0;
}

/* SIGUSR1 lists every live fiber on stderr (docs/debugging.md): name,
 * state, executor, and what it waits on. */
static int dump_on_usr1(void *arg) {
  iof_io_context *io = arg;
  while (iof_signal_wait(io, SIGUSR1) == SIGUSR1) iof_fiber_dump(stderr);
  return 0;
}

static void *run_thread(void *arg) {
  iof_io_context_run(((server *)arg)->io);
  return NULL;
}

/* ---- command line -------------------------------------------------------*/

static void usage(FILE *out) {
  fprintf(out, "usage: iof-echo-server PORT [--host ADDR] [--buffer BYTES] "
               "[--threads N] [--idle MS]\n"
               "\n"
               "TCP echo server: one fiber per connection.\n"
               "\n"
               "  --host ADDR     address to listen on (default 127.0.0.1)\n"
               "  --buffer BYTES  read buffer per connection (default 4096)\n"
               "  --threads N     N io_contexts on N threads, SO_REUSEPORT\n"
               "                  listeners (default 1)\n"
               "  --idle MS       close a connection that neither sends nor\n"
               "                  reads for MS ms (default: never)\n"
               "  --help          show this help\n"
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
  long threads = 1, buf = 4096, port;
  static const struct option longopts[] = {
      {"host", required_argument, NULL, 'H'},
      {"buffer", required_argument, NULL, 'b'},
      {"threads", required_argument, NULL, 't'},
      {"idle", required_argument, NULL, 'i'},
      {"help", no_argument, NULL, 'h'},
      {NULL, 0, NULL, 0}};
  int c;
  while ((c = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
    switch (c) {
    case 'H':
      host = optarg;
      break;
    case 'b':
      if (!parse_long(optarg, 1, 64L << 20, &buf)) {
        fprintf(stderr, "iof-echo-server: --buffer wants 1..%ld\n", 64L << 20);
        return 2;
      }
      break;
    case 't':
      if (!parse_long(optarg, 1, MAX_THREADS, &threads)) {
        fprintf(stderr, "iof-echo-server: --threads wants 1..%d\n",
                MAX_THREADS);
        return 2;
      }
      break;
    case 'i': {
      long ms;
      if (!parse_long(optarg, 1, 86400000, &ms)) {
        fprintf(stderr, "iof-echo-server: --idle wants 1..86400000\n");
        return 2;
      }
      idle_ns = ms * 1000000LL;
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
  buffer_size = (size_t)buf;

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
      fprintf(stderr, "iof-echo-server: listen on %s:%s: %s\n", host, port_str,
              iof_strerror(r));
      status = 1;
    } else { /* port 0: the others listen on the port the first one got */
      snprintf(port_str, sizeof port_str, "%d",
               iof_socket_local_port(s->listener));
    }
  }

  watch watches[2] = {{NULL, SIGINT}, {NULL, SIGTERM}};
  if (status == 0) {
    iof_launch_opts opts = {.stop_token = iof_stop_source_token(&stop),
                            .name = "acceptor"};
    for (long i = 0; i < threads; i++)
      iof_run_async(iof_io_context_executor(sv[i].io), &opts, acceptor, &sv[i]);
    /* A signal is watched by one io_context: the first one. */
    opts.name = "signals";
    for (int i = 0; i < 2; i++) {
      watches[i].io = sv[0].io;
      iof_run_async(iof_io_context_executor(sv[0].io), &opts, watch_signal,
                    &watches[i]);
    }
    opts.name = "sigusr1-dump";
    iof_run_async(iof_io_context_executor(sv[0].io), &opts, dump_on_usr1,
                  sv[0].io);
    fprintf(stderr, "iof-echo-server: listening on %s:%s (%ld thread%s)\n",
            host, port_str, threads, threads > 1 ? "s" : "");
    long started = 1;
    for (; started < threads; started++)
      if (pthread_create(&sv[started].thread, NULL, run_thread, &sv[started]) !=
          0) {
        fprintf(stderr, "iof-echo-server: cannot start thread %ld\n", started);
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
