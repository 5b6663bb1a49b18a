/* echo: ping-pong over loopback TCP against separate server processes.
 *
 * The built-in load generator (bench_net.c: epoll, non-blocking, its own
 * thread pinned away from the server's CPU) keeps one message in flight on
 * each of C connections, C = 1, 64, 1000, with 64-byte and 4 KiB messages
 * (--quick: C = 1, 64 and 64 bytes). Servers, each its own process
 * (bench/baselines/):
 *
 *   libev    hand-written libev callbacks: the baseline, and the limit of
 *            a libev-based runtime
 *   iofiber  a fiber per connection, iof_read_some / iof_write
 *   libuv    uv_read_start + uv_try_write (when libuv1-dev was installed)
 *   st       State Threads (when libst-dev was installed)
 *   threads  a blocking thread per connection
 *
 * Row names are PEER.cC.SIZE (e.g. iofiber.c64.64B), unit ns per round
 * trip, each run paired with a run of libev.cC.SIZE. Notes: round trips/s,
 * p50/p99 latency, the server's read/write-type system calls per round
 * trip (/proc/PID/io syscr+syscw; epoll_wait is not among them) and its
 * user and system CPU per round trip (/proc/PID/stat).
 *
 * The http suite runs the same matrix with HTTP/1.1 keep-alive requests
 * (PEER.cC rows, --http servers; C = 1, 64, 1000), then, when wrk is
 * installed (not with --quick), rows wrk.PEER.c64: `wrk -t1 -c64 -d1s`
 * against libev and PEER alternately, 5 pairs, ns per request.
 *
 * With --callgrind, rows ir.PEER: user-space instructions per round trip of
 * each server under valgrind --tool=callgrind (16 connections, 64 bytes):
 * the difference between a run of 12,000 and one of 2,000 round trips,
 * so start-up and connection set-up cancel out. Two goals for iofiber's:
 * ir.iofiber against raw libev (<= 1.30x), and ir.iofiber_vs_500 against
 * ir.budget_500, a fixed 500 instructions (fewer than any stackful peer
 * measured; not a measurement) (<= 1.00). */
#include "bench.h"
#include "bench_net.h"

#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define IOF_TARGET (1 / 0.95) /* >= 0.95x raw libev's round trips/s */

static const char *const peers[] = {"libev", "iofiber", "libuv", "st",
                                    "threads"};
#define NPEERS (sizeof peers / sizeof peers[0])

static char msg4k[4096];

static int run_matrix(bench_ctx *ctx, bool http) {
  static const int conns_full[] = {1, 64, 1000}, conns_quick[] = {1, 64};
  static const size_t sizes_full[] = {64, 4096}, sizes_quick[] = {64};
  static const char http_req[] =
      "GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nUser-Agent: iof-bench\r\n\r\n";
  bool quick = bench_quick(ctx);
  const int *conns = quick ? conns_quick : conns_full;
  size_t nconns = quick ? 2 : 3;
  const size_t *sizes = quick ? sizes_quick : sizes_full;
  size_t nsizes = (quick || http) ? 1 : 2;
  unsigned run_ms = quick ? 10 : 100;
  for (size_t i = 0; i < sizeof msg4k; i++)
    msg4k[i] = (char)('a' + (i * 7) % 26);

  int status = 0;
  bench_net_case *nc = calloc(NPEERS, sizeof *nc);
  if (!nc) return -ENOMEM;
  for (size_t s = 0; s < nsizes; s++) {
    for (size_t c = 0; c < nconns; c++) {
      char base[64];
      for (size_t p = 0; p < NPEERS; p++) {
        bench_net_case *n = &nc[p];
        memset(n, 0, sizeof *n);
        n->port_arg = -1;
        n->k = conns[c];
        if (http) {
          n->req = http_req;
          n->req_len = sizeof http_req - 1;
          n->resp_len = PEER_HTTP_RESPONSE_LEN;
          snprintf(n->name, sizeof n->name, "%s.c%d", peers[p], conns[c]);
        } else {
          n->req = msg4k;
          n->req_len = n->resp_len = sizes[s];
          snprintf(n->name, sizeof n->name, "%s.c%d.%s", peers[p], conns[c],
                   sizes[s] == 64 ? "64B" : "4K");
        }
        if (p == 0) snprintf(base, sizeof base, "%s", n->name);
        int argc = 0;
        n->argv[argc++] = n->path;
        if (http) n->argv[argc++] = "--http";
        n->argv[argc] = NULL;
        if (bench_peer_path(peers[p], n->path, sizeof n->path) < 0) {
          bench_skip(ctx, n->name, "peer not built (package missing?)");
          if (p == 0) goto next; /* no baseline: nothing to compare */
          continue;
        }
        bench_case bc = bench_net_case_make(
            n, p == 0 ? NULL : base,
            strcmp(peers[p], "iofiber") == 0 ? IOF_TARGET : 0, run_ms);
        if (bench_run_case(ctx, &bc) < 0) {
          status = -1;
          if (p == 0) goto next;
          continue;
        }
        bench_net_notes(ctx, n);
        if (p == 0) bench_net_notes(ctx, n); /* refreshed below too */
      }
      /* The baseline ran again with every peer: its notes cover all. */
      bench_net_notes(ctx, &nc[0]);
    next:;
    }
  }
  free(nc);
  return status;
}

/* ---- instructions per round trip (callgrind) ----------------------------- */

#define CG_CONNS 16
#define CG_SHORT 2000
#define CG_LONG 12000

/* Total instructions ("totals:" or "summary:" line) of a callgrind file. */
static double cg_total(const char *file) {
  FILE *f = fopen(file, "r");
  if (!f) return -1;
  char line[512];
  double v = -1;
  while (fgets(line, sizeof line, f)) {
    unsigned long long x;
    if (sscanf(line, "totals: %llu", &x) == 1 ||
        (v < 0 && sscanf(line, "summary: %llu", &x) == 1))
      v = (double)x;
  }
  fclose(f);
  return v;
}

/* Instructions of one server process doing `rts` round trips. */
static int cg_run(const char *valgrind, const char *peer_path, uint64_t rts,
                  double *ir) {
  char out[128];
  snprintf(out, sizeof out, "/tmp/iof-bench-cg.%d.out", (int)getpid());
  char opt[160];
  snprintf(opt, sizeof opt, "--callgrind-out-file=%s", out);
  bench_net_case nc;
  memset(&nc, 0, sizeof nc);
  snprintf(nc.name, sizeof nc.name, "cg");
  char *argv[] = {
      (char *)valgrind, "--tool=callgrind", "-q", opt, (char *)peer_path, NULL};
  memcpy(nc.argv, argv, sizeof argv);
  nc.port_arg = -1;
  nc.k = CG_CONNS;
  nc.req = msg4k;
  nc.req_len = nc.resp_len = 64;
  nc.start_timeout_s = 60;
  unlink(out);
  int rc = bench_peer_start(&nc.peer, nc.argv, 0, 60);
  if (rc == 0) {
    rc = bench_gen_open(&nc.gen, nc.peer.port, nc.k, nc.req, nc.req_len,
                        nc.resp_len);
    if (rc == 0) rc = bench_gen_run(&nc.gen, rts);
    bench_gen_close(&nc.gen);
    bench_peer_stop(&nc.peer);
  }
  if (rc < 0) return rc;
  *ir = cg_total(out);
  unlink(out);
  return *ir > 0 ? 0 : -EPROTO;
}

static int run_callgrind(bench_ctx *ctx) {
  char valgrind[4096];
  if (bench_find_program("valgrind", valgrind, sizeof valgrind) < 0) {
    bench_skip(ctx, "ir.libev", "valgrind not installed");
    return 0;
  }
  int status = 0;
  for (size_t p = 0; p < NPEERS; p++) {
    char name[32], path[4096];
    snprintf(name, sizeof name, "ir.%s", peers[p]);
    if (bench_peer_path(peers[p], path, sizeof path) < 0) {
      bench_skip(ctx, name, "peer not built (package missing?)");
      continue;
    }
    double a, b;
    int rc = cg_run(valgrind, path, CG_SHORT, &a);
    if (rc == 0) rc = cg_run(valgrind, path, CG_LONG, &b);
    if (rc == -ECHILD && strcmp(peers[p], "st") == 0) {
      /* st_init raises RLIMIT_NOFILE, which Valgrind refuses (EPERM). */
      bench_skip(ctx, name, "State Threads does not start under Valgrind");
      continue;
    }
    if (rc < 0) {
      fprintf(stderr, "iof-bench: echo/%s: callgrind run failed: %s\n", name,
              strerror(-rc));
      status = -1;
      continue;
    }
    double per = (b - a) / (CG_LONG - CG_SHORT);
    bool ours = strcmp(peers[p], "iofiber") == 0;
    bench_add_value(ctx, name, "Ir/roundtrip", p == 0 ? NULL : "ir.libev",
                    ours ? 1.3 : 0, per);
    if (ours && bench_add_value(ctx, "ir.budget_500", "Ir/roundtrip", NULL, 0,
                                500) == 0)
      bench_add_value(ctx, "ir.iofiber_vs_500", "Ir/roundtrip", "ir.budget_500",
                      1.0, per);
  }
  return status;
}

int bench_suite_echo(bench_ctx *ctx) {
  int status = run_matrix(ctx, false);
  if (bench_callgrind(ctx) && run_callgrind(ctx) < 0) status = -1;
  return status;
}

/* ---- wrk ------------------------------------------------------------------
 */

#define WRK_CONNS 64
#define WRK_PAIRS 5

/* Runs wrk against port for 1 s, pinned to the generator's CPU; 0 and
 * requests per second, or a negative errno. */
static int wrk_run(const char *wrk, int port, double *rps) {
  char url[64];
  snprintf(url, sizeof url, "http://127.0.0.1:%d/", port);
  int pfd[2];
  if (pipe2(pfd, O_CLOEXEC) < 0) return -errno;
  fflush(NULL);
  pid_t pid = fork();
  if (pid < 0) {
    close(pfd[0]);
    close(pfd[1]);
    return -errno;
  }
  if (pid == 0) {
    bench_pin_process(bench_client_cpu());
    dup2(pfd[1], STDOUT_FILENO);
    execl(wrk, wrk, "-t1", "-c64", "-d1s", url, (char *)NULL);
    _exit(127);
  }
  close(pfd[1]);
  char out[4096];
  size_t len = 0;
  ssize_t n;
  while ((n = read(pfd[0], out + len, sizeof out - 1 - len)) > 0) len += n;
  close(pfd[0]);
  out[len] = '\0';
  int st;
  waitpid(pid, &st, 0);
  const char *r = strstr(out, "Requests/sec:");
  if (!WIFEXITED(st) || WEXITSTATUS(st) != 0 || !r ||
      sscanf(r, "Requests/sec: %lf", rps) != 1 || *rps <= 0)
    return -EPROTO;
  return 0;
}

static int run_wrk(bench_ctx *ctx) {
  char wrk[4096], base_path[4096];
  char bname[32];
  snprintf(bname, sizeof bname, "wrk.libev.c%d", WRK_CONNS);
  if (bench_find_program("wrk", wrk, sizeof wrk) < 0) {
    bench_skip(ctx, bname, "wrk not installed");
    return 0;
  }
  if (bench_quick(ctx)) {
    bench_skip(ctx, bname, "wrk rows are not in --quick");
    return 0;
  }
  if (bench_peer_path("libev", base_path, sizeof base_path) < 0) return 0;
  int status = 0;
  bool have_base = false;
  for (size_t p = 1; p < NPEERS; p++) {
    char name[32], path[4096];
    snprintf(name, sizeof name, "wrk.%s.c%d", peers[p], WRK_CONNS);
    if (bench_peer_path(peers[p], path, sizeof path) < 0) {
      bench_skip(ctx, name, "peer not built (package missing?)");
      continue;
    }
    char *av[] = {base_path, "--http", NULL}, *bv[] = {path, "--http", NULL};
    bench_peer a = {0}, b = {0};
    double ra[WRK_PAIRS], rb[WRK_PAIRS];
    int rc = bench_peer_start(&a, av, 0, 10);
    if (rc == 0) rc = bench_peer_start(&b, bv, 0, 10);
    for (int i = 0; rc == 0 && i < WRK_PAIRS; i++) {
      double x = 0, y = 0;
      rc = wrk_run(wrk, a.port, &x);
      if (rc == 0) rc = wrk_run(wrk, b.port, &y);
      ra[i] = 1e9 / x; /* ns per request, like every other row */
      rb[i] = 1e9 / y;
    }
    bench_peer_stop(&a);
    bench_peer_stop(&b);
    if (rc < 0) {
      fprintf(stderr, "iof-bench: http/%s: wrk failed: %s\n", name,
              strerror(-rc));
      status = -1;
      continue;
    }
    if (!have_base) {
      bench_add_pairs(ctx, bname, "ns/request", NULL, 0, ra, ra, WRK_PAIRS);
      bench_note(ctx, bname, "req_s", 1e9 / bench_median_of(ctx, bname));
      have_base = true;
    }
    bench_add_pairs(ctx, name, "ns/request", bname,
                    strcmp(peers[p], "iofiber") == 0 ? IOF_TARGET : 0, ra, rb,
                    WRK_PAIRS);
    bench_note(ctx, name, "req_s", 1e9 / bench_median_of(ctx, name));
  }
  return status;
}

int bench_suite_http(bench_ctx *ctx) {
  int status = run_matrix(ctx, true);
  if (run_wrk(ctx) < 0) status = -1;
  return status;
}
