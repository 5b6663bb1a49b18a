/* idle: memory per idle connection. Each server process (the echo peers;
 * iofiber with a 1 KiB and a 4 KiB read buffer in the fiber's frame, and
 * with a 1 KiB buffer from malloc, as the callback servers must have it:
 * see peer.h) gets N = 10,000
 * connections (--quick: 1,000), each of which echoes one 64-byte message
 * so that the server has accepted it and sits in its read; the row is
 * (RSS after - RSS before) / N in KiB per connection, ratio to raw
 * libev's. Then the budget row: iofiber with 1 KiB buffers against
 * 4.5 KiB per connection. One reading per server (memory does not jitter
 * like time), so the spread is 1. */
#include "bench.h"
#include "bench_net.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#define BUDGET_KIB 4.5

typedef struct idle_peer {
  const char *name;  /* row */
  const char *peer;  /* iof-bench-PEER */
  const char *buf;   /* --buf */
  bool heap;         /* --heap-buf */
  const char *limit; /* when it fails: a known limit of the peer */
} idle_peer;

static const idle_peer peers[] = {
    {"libev", "libev", "1024", false, NULL},
    {"iofiber.1K", "iofiber", "1024", false, NULL},
    {"iofiber.4K", "iofiber", "4096", false, NULL},
    {"iofiber.1K.heap", "iofiber", "1024", true, NULL},
    {"libuv", "libuv", "1024", false, NULL},
    {"st", "st", "1024", false,
     "libst polls with select() (Debian's build): at most FD_SETSIZE "
     "connections"},
    {"threads", "threads", "1024", false, NULL},
};

static int measure(const idle_peer *ip, int n, double *kib) {
  char path[4096];
  if (bench_peer_path(ip->peer, path, sizeof path) < 0) return -ENOENT;
  char *argv[] = {path, "--buf", (char *)ip->buf,
                  ip->heap ? "--heap-buf" : NULL, NULL};
  bench_peer p = {0};
  int rc = bench_peer_start(&p, argv, 0, 10);
  if (rc < 0) return rc;
  usleep(50000); /* let start-up allocations settle */
  long before = bench_proc_rss_kib(p.pid);
  static char msg[64];
  memset(msg, 'i', sizeof msg);
  bench_gen g;
  rc = bench_gen_open(&g, p.port, n, msg, sizeof msg, sizeof msg);
  if (rc == 0) {
    g.timeout_ms = 60000; /* a server may be slow to take N connections */
    rc = bench_gen_run(&g, (uint64_t)n); /* one round trip each */
    long after = bench_proc_rss_kib(p.pid);
    if (rc == 0 && (before < 0 || after < 0)) rc = -EIO;
    if (rc == 0) *kib = (double)(after - before) / n;
    bench_gen_close(&g);
  }
  bench_peer_stop(&p);
  return rc;
}

int bench_suite_idle(bench_ctx *ctx) {
  int n = bench_quick(ctx) ? 1000 : 10000;
  /* N client sockets here, N in the server (which raises its own limit). */
  struct rlimit rl;
  if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
    rl.rlim_cur = rl.rlim_max;
    setrlimit(RLIMIT_NOFILE, &rl);
  }
  if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < (rlim_t)n + 64) {
    n = (int)rl.rlim_cur - 64;
    fprintf(stderr, "iof-bench: idle: open-file limit %llu, %d connections\n",
            (unsigned long long)rl.rlim_cur, n);
  }
  int status = 0;
  bool have_base = false;
  for (size_t i = 0; i < sizeof peers / sizeof peers[0]; i++) {
    double kib = 0;
    int rc = measure(&peers[i], n, &kib);
    if (rc == -ENOENT) {
      bench_skip(ctx, peers[i].name, "peer not built (package missing?)");
      continue;
    }
    if (rc < 0 && peers[i].limit) {
      bench_skip(ctx, peers[i].name, peers[i].limit);
      continue;
    }
    if (rc < 0) {
      fprintf(stderr, "iof-bench: idle/%s failed: %s\n", peers[i].name,
              strerror(-rc));
      status = -1;
      continue;
    }
    if (i == 0) have_base = true;
    bench_add_value(ctx, peers[i].name, "KiB/conn",
                    i == 0 || !have_base ? NULL : "libev", 0, kib);
    bench_note(ctx, peers[i].name, "conns", n);
  }
  if (!isnan(bench_median_of(ctx, "iofiber.1K"))) {
    bench_add_value(ctx, "budget_4.5KiB", "KiB/conn", NULL, 0, BUDGET_KIB);
    bench_add_value(ctx, "iofiber.1K_vs_budget", "KiB/conn", "budget_4.5KiB",
                    1.0, bench_median_of(ctx, "iofiber.1K"));
  }
  return status;
}
