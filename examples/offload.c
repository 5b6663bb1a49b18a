/* offload: CPU work on a thread pool, I/O on the io_context, one fiber
 * per connection going back and forth with iof_run.
 *
 *   offload PORT [--host ADDR] [--threads N] [--rounds R]
 *
 * A client sends lines; for each line the server answers with a 64-bit
 * hash of it, as 16 hex digits and a newline (a line over 4 KiB gets
 * "error: line too long" and the end). The hash (FNV-1a over the
 * line, then R more rounds over the previous hash's 8 bytes, little
 * endian) is deliberately slow for large R: it runs on a pool of N
 * threads through iof_run, which moves the calling fiber to the pool and
 * back to the io_context when done, so the io_context's thread only does
 * I/O. With --verbose each answer also says on which thread the hash ran.
 *
 * SIGINT or SIGTERM stops it cleanly (exit status 0), hashes in progress
 * or queued on the pool included. */
#include <errno.h>
#include <getopt.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <iofiber/iofiber.h>

#define MS 1000000LL
#define LINE_MAX_BYTES 4096 /* a line and its newline; more is refused */

static iof_io_context *io;
static iof_thread_pool *pool;
static iof_stop_source stop;
static long rounds = 100000;
static bool verbose;
static pthread_t io_thread;

typedef struct job {
  const char *data;
  size_t len;
  uint64_t hash;
  bool on_pool; /* it ran off the io_context's thread */
} job;

static uint64_t fnv1a(uint64_t h, const void *p, size_t n) {
  const unsigned char *b = p;
  for (size_t i = 0; i < n; i++) {
    h ^= b[i];
    h *= 1099511628211ull;
  }
  return h;
}

/* Runs on a pool thread (iof_run moved the fiber there). CPU work is no
 * wait a stop can cancel: it looks at the fiber's token itself, or a
 * SIGTERM would wait for every job already on the pool (seconds each at
 * large --rounds). -ECANCELED then. */
static int hash_job(void *arg) {
  job *j = arg;
  iof_stop_token tok = iof_env_current()->stop_token;
  uint64_t h = fnv1a(14695981039346656037ull, j->data, j->len);
  for (long r = 0; r < rounds; r++) {
    if (r % 4096 == 0 && iof_stop_requested(tok)) return -ECANCELED;
    unsigned char le[8];
    for (int i = 0; i < 8; i++) le[i] = (unsigned char)(h >> (8 * i));
    h = fnv1a(14695981039346656037ull, le, 8);
  }
  j->hash = h;
  j->on_pool = !pthread_equal(pthread_self(), io_thread);
  return 0;
}

static int session(void *arg) {
  iof_socket *s = arg;
  iof_reader rd;
  if (iof_reader_init_socket(&rd, s, NULL, LINE_MAX_BYTES) == 0) {
    iof_bytes line;
    int r;
    while ((r = iof_reader_read_line(&rd, &line)) == 1) {
      /* The view stays valid: nothing reads the reader meanwhile. */
      job j = {line.data, line.len, 0, false};
      r = iof_run(iof_thread_pool_executor(pool), NULL, hash_job, &j);
      if (r < 0) break; /* stopping, or -ESHUTDOWN: the pool is going away */
      char out[64];
      int n = verbose ? snprintf(out, sizeof out, "%016llx %s\n",
                                 (unsigned long long)j.hash,
                                 j.on_pool ? "pool" : "io")
                      : snprintf(out, sizeof out, "%016llx\n",
                                 (unsigned long long)j.hash);
      r = (int)iof_write(s, out, (size_t)n);
      if (r < 0) break;
    }
    /* A line that does not fit: say so, then stop writing and drop the
     * rest of it for at most a second. Closing with it unread would make
     * the kernel send a reset, which destroys the answers still in the
     * client's receive queue. */
    static const char too_long[] = "error: line too long\n";
    if (r == -EMSGSIZE &&
        iof_write(s, too_long, sizeof too_long - 1) == sizeof too_long - 1)
      iof_socket_close_graceful(s, 1000 * MS);
    iof_reader_destroy(&rd);
  }
  iof_socket_free(s);
  return 0;
}

static int acceptor(void *arg) {
  iof_socket *listener = arg;
  iof_launch_opts opts = {0};
  opts.stop_token = iof_stop_source_token(&stop);
  int reported = 0; /* the last error reported */
  for (;;) {
    iof_socket *c;
    int r = iof_accept(listener, &c, NULL, NULL);
    if (r == -ECANCELED || r == -EBADF) break;
    if (r < 0) { /* out of descriptors and the like: back off a little */
      /* Once per kind of error: out of descriptors, this loop comes back
       * every 20 ms for as long as it lasts. */
      if (r != reported)
        fprintf(stderr, "iof-offload: accept: %s (backing off)\n",
                iof_strerror(r));
      reported = r;
      if (iof_sleep_for(20 * MS) < 0) break;
      continue;
    }
    if (iof_run_async(iof_io_context_executor(io), &opts, session, c) < 0)
      iof_socket_free(c);
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
          "usage: iof-offload PORT [--host ADDR] [--threads N] [--rounds R] "
          "[--verbose]\n"
          "\n"
          "Answers each line with its hash (16 hex digits), computed on a\n"
          "thread pool while the io_context keeps serving.\n"
          "\n"
          "  --host ADDR   address to listen on (default 127.0.0.1)\n"
          "  --threads N   pool threads (default 2)\n"
          "  --rounds R    extra hash rounds per line (default 100000)\n"
          "  --verbose     say where each hash ran (pool or io)\n"
          "  --help        show this help\n"
          "\n"
          "PORT 0 picks a free port (printed on stderr). SIGINT or SIGTERM\n"
          "stops it (exit status 0).\n");
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
  long threads = 2, port;
  static const struct option longopts[] = {
      {"host", required_argument, NULL, 'H'},
      {"threads", required_argument, NULL, 't'},
      {"rounds", required_argument, NULL, 'r'},
      {"verbose", no_argument, NULL, 'v'},
      {"help", no_argument, NULL, 'h'},
      {NULL, 0, NULL, 0}};
  int c;
  while ((c = getopt_long(argc, argv, "hv", longopts, NULL)) != -1) {
    switch (c) {
    case 'H':
      host = optarg;
      break;
    case 't':
      if (!parse_long(optarg, 1, 256, &threads)) {
        fprintf(stderr, "iof-offload: --threads wants 1..256\n");
        return 2;
      }
      break;
    case 'r':
      if (!parse_long(optarg, 0, 1000000000, &rounds)) {
        fprintf(stderr, "iof-offload: --rounds wants 0..1000000000\n");
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
  if (optind != argc - 1 || !parse_long(argv[optind], 0, 65535, &port)) {
    usage(stderr);
    return 2;
  }
  if (iof_stop_source_init(&stop) < 0) return 1;
  io_thread = pthread_self();
  io = iof_io_context_create();
  pool = iof_thread_pool_create((size_t)threads);
  if (!io || !pool) {
    fprintf(stderr, "iof-offload: %s\n", iof_strerror(-errno));
    return 1;
  }
  iof_socket *listener;
  int r = iof_tcp_listen(io, host, argv[optind], 0, 0, &listener);
  if (r < 0) {
    fprintf(stderr, "iof-offload: listen on %s:%s: %s\n", host, argv[optind],
            iof_strerror(r));
    iof_thread_pool_destroy(pool);
    iof_io_context_destroy(io);
    return 1;
  }
  iof_launch_opts opts = {0};
  opts.stop_token = iof_stop_source_token(&stop);
  static int sigs[2] = {SIGINT, SIGTERM};
  iof_run_async(iof_io_context_executor(io), &opts, acceptor, listener);
  for (int i = 0; i < 2; i++)
    iof_run_async(iof_io_context_executor(io), &opts, watch_signal, &sigs[i]);
  fprintf(stderr, "iof-offload: listening on %s:%d (%ld pool threads)\n", host,
          iof_socket_local_port(listener), threads);
  iof_io_context_run(io); /* returns once every fiber is done */
  iof_thread_pool_destroy(pool);
  iof_io_context_destroy(io);
  iof_stop_source_destroy(&stop);
  return 0;
}
