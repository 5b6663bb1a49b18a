/* legacy: the same unmodified blocking echo server (examples/legacy-echo.c)
 * built two ways, side by side, with the echo suite's generator (64-byte
 * messages, 1 and 64 connections; --quick: 64):
 *
 *   threads      legacy-echo-threads: a thread per connection, plain libc
 *                (the baseline)
 *   fibers       legacy-echo-fibers: the same source on the compat layer,
 *                a fiber per connection
 *   iofiber-run  `iofiber-run legacy-echo-threads`: the unmodified binary
 *                under the preload hook
 *
 * The programs are looked up next to iof-bench, in ../examples, ../compat,
 * ../tools, .. and $PATH; each is given a free port as its only argument
 * and is ready once it accepts a connection. Missing programs are reported
 * as skipped rows. */
#include "bench.h"
#include "bench_net.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static char msg[64];

typedef struct legacy_peer {
  const char *row;
  const char *prog;    /* looked up */
  const char *wrapped; /* run under prog, or NULL */
} legacy_peer;

static const legacy_peer peers[] = {
    {"threads", "legacy-echo-threads", NULL},
    {"fibers", "legacy-echo-fibers", NULL},
    {"iofiber-run", "iofiber-run", "legacy-echo-threads"},
};
#define NPEERS (sizeof peers / sizeof peers[0])

int bench_suite_legacy(bench_ctx *ctx) {
  static const int conns_full[] = {1, 64}, conns_quick[] = {64};
  bool quick = bench_quick(ctx);
  const int *conns = quick ? conns_quick : conns_full;
  size_t nconns = quick ? 1 : 2;
  memset(msg, 'L', sizeof msg);
  bench_net_case *nc = calloc(NPEERS, sizeof *nc);
  if (!nc) return -ENOMEM;
  int status = 0;
  for (size_t c = 0; c < nconns; c++) {
    char base[64] = "";
    for (size_t p = 0; p < NPEERS; p++) {
      bench_net_case *n = &nc[p];
      memset(n, 0, sizeof *n);
      snprintf(n->name, sizeof n->name, "%s.c%d", peers[p].row, conns[c]);
      n->k = conns[c];
      n->req = msg;
      n->req_len = n->resp_len = sizeof msg;
      static char wrapped[NPEERS][4096];
      int argc = 0;
      char why[160];
      if (bench_find_program(peers[p].prog, n->path, sizeof n->path) < 0) {
        snprintf(why, sizeof why, "%s not found (see docs/bench.md)",
                 peers[p].prog);
        bench_skip(ctx, n->name, why);
        continue;
      }
      n->argv[argc++] = n->path;
      if (peers[p].wrapped) {
        if (bench_find_program(peers[p].wrapped, wrapped[p],
                               sizeof wrapped[p]) < 0) {
          snprintf(why, sizeof why, "%s not found", peers[p].wrapped);
          bench_skip(ctx, n->name, why);
          continue;
        }
        n->argv[argc++] = wrapped[p];
      }
      n->port_arg = argc;
      n->argv[argc++] = NULL; /* the port, set by each setup */
      n->argv[argc] = NULL;
      if (p == 0) snprintf(base, sizeof base, "%s", n->name);
      if (p > 0 && !base[0]) {
        bench_skip(ctx, n->name, "no baseline (legacy-echo-threads)");
        continue;
      }
      bench_case bc =
          bench_net_case_make(n, p == 0 ? NULL : base, 0, quick ? 10 : 100);
      if (bench_run_case(ctx, &bc) < 0) {
        status = -1;
        if (p == 0) base[0] = '\0';
        continue;
      }
      bench_net_notes(ctx, n);
    }
    if (base[0]) bench_net_notes(ctx, &nc[0]);
  }
  free(nc);
  return status;
}
