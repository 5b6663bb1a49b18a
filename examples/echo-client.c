/* echo-client: load generator and checker for echo-server.
 *
 *   echo-client HOST PORT [--connections N] [--size BYTES] [--duration SECONDS]
 *
 * N fibers on one io_context each connect, then loop "write a message, read
 * exactly as many bytes back, compare" until the duration is over. Every
 * message carries a different pattern (connection number, sequence
 * number), so a byte echoed to the wrong connection or out of order is
 * caught. At the end it prints the round trips, the rate and the errors.
 * Exit status: 0 if every connection ran without an error, 1 otherwise,
 * 2 for a usage error. SIGINT ends the run early (and still reports). */
#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <iofiber/iofiber.h>

static iof_io_context *io;
static const char *host, *port;
static size_t msg_size = 64;
static iof_stop_source stop; /* the end of the run */
static int64_t start_ns, stop_ns;
static long running; /* connection fibers still going */

/* Totals (every fiber runs on the one io_context thread: no locking). */
static uint64_t round_trips, connect_errors, io_errors, mismatches;
static long stalled; /* connections that completed no round trip */

static void finish(void) {
  if (iof_stop_source_request(&stop)) stop_ns = iof_now_ns();
}

/* The bytes of message `seq` on connection `id`. */
static void fill(unsigned char *p, size_t n, long id, uint64_t seq) {
  uint32_t x = (uint32_t)(id * 2654435761u) ^ (uint32_t)seq;
  for (size_t i = 0; i < n; i++) {
    x = x * 1103515245u + 12345u;
    p[i] = (unsigned char)(x >> 16);
  }
}

/* Sends the message and reads its echo, CHUNK bytes at a time: the
 * server cannot send a large echo back while we are still writing and not
 * reading, so at most one chunk is in flight (no deadlock when the message
 * is larger than what the socket buffers hold). msg_size or the failure. */
#define CHUNK ((size_t)64 * 1024)
static ssize_t round_trip(iof_socket *sock, const unsigned char *out,
                          unsigned char *in) {
  for (size_t off = 0; off < msg_size; off += CHUNK) {
    size_t len = msg_size - off < CHUNK ? msg_size - off : CHUNK;
    ssize_t n = iof_write(sock, out + off, len);
    if (n >= 0) n = iof_read(sock, in + off, len);
    if (n != (ssize_t)len) return n < 0 ? n : (ssize_t)off + n;
  }
  return (ssize_t)msg_size;
}

static bool stopping(void) {
  return iof_stop_requested(iof_env_current()->stop_token);
}

static int connection(void *arg) {
  long id = (long)(intptr_t)arg;
  unsigned char *out = malloc(msg_size), *in = malloc(msg_size);
  iof_socket *sock = NULL;
  int r = out && in ? iof_tcp_connect(io, host, port, &sock) : -ENOMEM;
  if (r < 0) {
    if (r != -ECANCELED && connect_errors++ == 0) /* report the first */
      fprintf(stderr, "iof-echo-client: connect %s:%s: %s\n", host, port,
              iof_strerror(r));
  } else {
    iof_socket_set_nodelay(sock, true);
  }
  uint64_t seq = 0;
  while (r == 0 && !stopping()) {
    fill(out, msg_size, id, seq);
    ssize_t n = round_trip(sock, out, in);
    if (n == -ECANCELED && stopping()) break; /* the run is over */
    if (n != (ssize_t)msg_size) {
      if (io_errors++ == 0)
        fprintf(stderr, "iof-echo-client: connection %ld: %s\n", id,
                n < 0 ? strerror((int)-n) : "closed by the server");
      r = n < 0 ? (int)n : -EPIPE;
    } else if (memcmp(in, out, msg_size) != 0) {
      if (mismatches++ == 0)
        fprintf(stderr, "iof-echo-client: connection %ld: wrong bytes echoed\n",
                id);
      r = -EPROTO;
    } else {
      round_trips++;
      seq++;
    }
  }
  if (r == 0 && seq == 0) stalled++; /* connected, never got an echo */
  if (sock) iof_socket_free(sock);
  free(out);
  free(in);
  if (--running == 0) finish(); /* nobody left: do not wait for the timer */
  return 0;
}

static int timer(void *arg) {
  if (iof_sleep_for(*(int64_t *)arg) == 0) finish();
  return 0;
}

static int watch_sigint(void *arg) {
  (void)arg;
  if (iof_signal_wait(io, SIGINT) == SIGINT) finish();
  return 0;
}

static void usage(FILE *out) {
  fprintf(out,
          "usage: iof-echo-client HOST PORT [--connections N] [--size BYTES] "
          "[--duration SECONDS]\n"
          "\n"
          "Echo load generator: N connections, each writing a message\n"
          "and checking its echo, for the duration.\n"
          "\n"
          "  --connections N     concurrent connections (default 64)\n"
          "  --size BYTES        message size (default 64)\n"
          "  --duration SECONDS  how long to run (default 5; decimals "
          "allowed)\n"
          "  --help              show this help\n"
          "\n"
          "Exit status 0 when no connection saw an error.\n");
}

int main(int argc, char **argv) {
  long connections = 64;
  double duration = 5;
  static const struct option longopts[] = {
      {"connections", required_argument, NULL, 'c'},
      {"size", required_argument, NULL, 's'},
      {"duration", required_argument, NULL, 'd'},
      {"help", no_argument, NULL, 'h'},
      {NULL, 0, NULL, 0}};
  int c;
  while ((c = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
    char *end;
    errno = 0;
    switch (c) {
    case 'c':
      connections = strtol(optarg, &end, 10);
      if (errno || *end || end == optarg || connections < 1 ||
          connections > 100000) {
        fprintf(stderr, "iof-echo-client: --connections wants 1..100000\n");
        return 2;
      }
      break;
    case 's': {
      long v = strtol(optarg, &end, 10);
      if (errno || *end || end == optarg || v < 1 || v > (64L << 20)) {
        fprintf(stderr, "iof-echo-client: --size wants 1..%ld\n", 64L << 20);
        return 2;
      }
      msg_size = (size_t)v;
      break;
    }
    case 'd':
      duration = strtod(optarg, &end);
      if (errno || *end || end == optarg || !(duration > 0) ||
          duration > 86400) {
        fprintf(stderr, "iof-echo-client: --duration wants seconds in (0, "
                        "86400]\n");
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
  if (optind != argc - 2) {
    usage(stderr);
    return 2;
  }
  host = argv[optind];
  port = argv[optind + 1];

  io = iof_io_context_create();
  if (!io || iof_stop_source_init(&stop) < 0) {
    perror("iof-echo-client");
    return 1;
  }
  iof_launch_opts opts = {.stop_token = iof_stop_source_token(&stop)};
  iof_executor_ref ex = iof_io_context_executor(io);
  int64_t duration_ns = (int64_t)(duration * 1e9);
  running = connections;
  for (long i = 0; i < connections; i++)
    if (iof_run_async(ex, &opts, connection, (void *)(intptr_t)i) < 0) {
      fprintf(stderr, "iof-echo-client: cannot start connection %ld\n", i);
      connect_errors++;
      running--;
    }
  if (running == 0) finish();
  iof_run_async(ex, &opts, timer, &duration_ns);
  iof_run_async(ex, &opts, watch_sigint, NULL);
  start_ns = iof_now_ns();
  iof_io_context_run(io);
  iof_io_context_destroy(io);
  iof_stop_source_destroy(&stop);

  double secs = (double)(stop_ns - start_ns) / 1e9;
  uint64_t errors = connect_errors + io_errors + mismatches;
  printf("connections:  %ld x %zu-byte messages, %.2f s\n", connections,
         msg_size, secs);
  printf("round trips:  %llu\n", (unsigned long long)round_trips);
  printf("throughput:   %.0f round trips/s, %.2f MB/s each way\n",
         (double)round_trips / secs,
         (double)round_trips * (double)msg_size / secs / 1e6);
  if (stalled)
    printf("stalled:      %ld connections completed no round trip\n", stalled);
  printf("errors:       %llu (connect %llu, i/o %llu, verification %llu)\n",
         (unsigned long long)errors, (unsigned long long)connect_errors,
         (unsigned long long)io_errors, (unsigned long long)mismatches);
  return errors == 0 && round_trips > 0 ? 0 : 1;
}
