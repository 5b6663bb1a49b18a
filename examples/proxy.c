/* proxy: a TCP proxy, one fiber per connection.
 *
 *   proxy LISTEN_PORT TARGET_HOST TARGET_PORT [--host ADDR] [--idle MS]
 *         [--connect-timeout MS] [--verbose]
 *
 * Each accepted client gets a fiber that connects to the target (bounded
 * by a connect deadline) and then pumps bytes both ways with
 * iof_stream_relay: a half-close on one side is passed on to the other,
 * and a connection with no traffic in either direction for --idle
 * milliseconds is closed. Failures are reported with iof_strerror, which
 * also names resolution failures (e.g. "no such host or service").
 *
 * SIGINT or SIGTERM stops it: the shared stop token cancels the accept and
 * every relay, and run() returns once all fibers have unwound. */
#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <iofiber/iofiber.h>

#define MS 1000000LL

static iof_io_context *io;
static iof_stop_source stop;
static const char *target_host, *target_port;
static long idle_ms = 60000, connect_ms = 5000;
static bool verbose;
static int connect_reported; /* the last connect error reported */

static int connection(void *arg) {
  iof_socket *client = arg;
  iof_socket *server = NULL;
  int r = iof_tcp_connect_deadline(io, target_host, target_port,
                                   iof_now_ns() + connect_ms * MS, &server);
  if (r < 0) {
    /* Once in a row: out of descriptors, every client accepted with the
     * last one fails here (and is closed, which frees the descriptor: a
     * client waiting for one would hold it while the others wait too). */
    if (r != -ECANCELED && r != connect_reported)
      fprintf(stderr, "iof-proxy: connect to %s:%s: %s\n", target_host,
              target_port, iof_strerror(r));
    connect_reported = r;
    iof_socket_free(client);
    return r;
  }
  connect_reported = 0;
  iof_socket_set_nodelay(server, true);
  iof_socket_stream cs, ss;
  iof_copy_opts opts = {0};
  opts.buf_len = 16 * 1024; /* per direction, one allocation */
  opts.idle_ns = idle_ms * MS;
  uint64_t up = 0, down = 0;
  r = iof_stream_relay(iof_socket_stream_init(&cs, client),
                       iof_socket_stream_init(&ss, server), &opts, &up, &down);
  if (verbose)
    fprintf(stderr,
            "iof-proxy: connection done: %llu bytes up, %llu down (%s)\n",
            (unsigned long long)up, (unsigned long long)down,
            r == 0 ? "closed" : iof_strerror(r));
  iof_socket_free(server);
  iof_socket_free(client);
  return 0;
}

static int acceptor(void *arg) {
  iof_socket *listener = arg;
  iof_launch_opts opts = {0};
  opts.stop_token = iof_stop_source_token(&stop);
  int reported = 0; /* the last error reported */
  for (;;) {
    iof_socket *client;
    int r = iof_accept(listener, &client, NULL, NULL);
    if (r == -ECANCELED || r == -EBADF) break;
    if (r < 0) { /* out of descriptors and the like: back off a little */
      /* Once per kind of error: out of descriptors, this loop comes back
       * every 20 ms for as long as it lasts. */
      if (r != reported)
        fprintf(stderr, "iof-proxy: accept: %s (backing off)\n",
                iof_strerror(r));
      reported = r;
      if (iof_sleep_for(20 * MS) < 0) break;
      continue;
    }
    iof_socket_set_nodelay(client, true);
    if (iof_run_async(iof_io_context_executor(io), &opts, connection, client) <
        0)
      iof_socket_free(client);
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
          "usage: iof-proxy LISTEN_PORT TARGET_HOST TARGET_PORT [--host ADDR]\n"
          "                 [--idle MS] [--connect-timeout MS] [--verbose]\n"
          "\n"
          "TCP proxy: relays every client to TARGET_HOST:TARGET_PORT.\n"
          "\n"
          "  --host ADDR           address to listen on (default 127.0.0.1)\n"
          "  --idle MS             close a connection idle in both\n"
          "                        directions for MS ms (default 60000)\n"
          "  --connect-timeout MS  deadline for reaching the target\n"
          "                        (default 5000)\n"
          "  --verbose             one line per finished connection\n"
          "  --help                show this help\n"
          "\n"
          "LISTEN_PORT 0 picks a free port (printed on stderr). SIGINT or\n"
          "SIGTERM stops it (exit status 0).\n");
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
  static const struct option longopts[] = {
      {"host", required_argument, NULL, 'H'},
      {"idle", required_argument, NULL, 'i'},
      {"connect-timeout", required_argument, NULL, 'c'},
      {"verbose", no_argument, NULL, 'v'},
      {"help", no_argument, NULL, 'h'},
      {NULL, 0, NULL, 0}};
  int c;
  while ((c = getopt_long(argc, argv, "hv", longopts, NULL)) != -1) {
    switch (c) {
    case 'H':
      host = optarg;
      break;
    case 'i':
      if (!parse_long(optarg, 1, 86400000, &idle_ms)) {
        fprintf(stderr, "iof-proxy: --idle wants 1..86400000\n");
        return 2;
      }
      break;
    case 'c':
      if (!parse_long(optarg, 1, 86400000, &connect_ms)) {
        fprintf(stderr, "iof-proxy: --connect-timeout wants 1..86400000\n");
        return 2;
      }
      break;
    case 'v':
      verbose = true;
      break;
    case 'h':
      usage(stdout);
      return 0;
    default:
      usage(stderr);
      return 2;
    }
  }
  long port;
  if (optind != argc - 3 || !parse_long(argv[optind], 0, 65535, &port)) {
    usage(stderr);
    return 2;
  }
  target_host = argv[optind + 1];
  target_port = argv[optind + 2];
  long tport; /* a number must be a port; a name is the resolver's */
  bool numeric = *target_port >= '0' && *target_port <= '9';
  if (!*target_host) {
    fprintf(stderr, "iof-proxy: TARGET_HOST is empty\n");
    return 2;
  }
  if (!*target_port ||
      (numeric && !parse_long(target_port, 1, 65535, &tport))) {
    fprintf(stderr, "iof-proxy: TARGET_PORT wants 1..65535 or a service\n");
    return 2;
  }

  if (iof_stop_source_init(&stop) < 0) return 1;
  io = iof_io_context_create();
  if (!io) return 1;
  iof_socket *listener;
  int r = iof_tcp_listen(io, host, argv[optind], 0, 0, &listener);
  if (r < 0) {
    fprintf(stderr, "iof-proxy: listen on %s:%s: %s\n", host, argv[optind],
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
  fprintf(stderr, "iof-proxy: listening on %s:%d, relaying to %s:%s\n", host,
          iof_socket_local_port(listener), target_host, target_port);
  iof_io_context_run(io); /* returns once everything has unwound */
  iof_io_context_destroy(io);
  iof_stop_source_destroy(&stop);
  return 0;
}
