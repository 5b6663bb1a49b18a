/* iof-bench framework: timing, repeated runs, statistics and the result
 * table. Every figure is reported as a ratio against a baseline case that
 * is measured in the same process, so results compare across machines.
 *
 * A suite is a function `int bench_suite_NAME(bench_ctx *ctx)` in its own
 * file bench_NAME.c, listed once in suites.h. It measures cases with
 * bench_run_case() (baseline first) and may add comparison rows with
 * bench_compare(). */
#ifndef IOF_BENCH_H
#define IOF_BENCH_H

#include <stdbool.h>
#include <stdint.h>

typedef struct bench_ctx bench_ctx;

/* One measured case. The body performs `iters` operations and returns 0, or
 * a negated errno to abort the case. setup/teardown (optional) run once
 * around all runs of the case, outside the timed region. */
typedef struct bench_case {
  const char *name;
  const char *unit;     /* per-operation unit, e.g. "ns/spawn" */
  const char *baseline; /* a case of the same suite measured earlier;
                           NULL: this case is a baseline */
  double target;        /* ratio the case should stay at or below; 0: none.
                           Reported only, never enforced. */
  void *arg;            /* passed to setup, body and teardown */
  int (*setup)(void *arg);
  int (*body)(void *arg, uint64_t iters);
  void (*teardown)(void *arg);
} bench_case;

/* Calibrates the iteration count, runs the case ctx's number of times and
 * records a row (bench = the current suite). 0, or the body's/setup's
 * negative error (the row is then recorded as failed). */
int bench_run_case(bench_ctx *ctx, const bench_case *c);

/* Adds a row `name` that reports the samples of the already measured case
 * `of` against another baseline case: for a case with two interesting
 * baselines. 0, or -ENOENT if either case is missing or failed. */
int bench_compare(bench_ctx *ctx, const char *name, const char *of,
                  const char *baseline, double target);

/* True in --quick mode (suites may shrink their own setup work). */
bool bench_quick(const bench_ctx *ctx);

/* Nanoseconds of CLOCK_MONOTONIC. */
uint64_t bench_now_ns(void);

/* Keeps the compiler from proving a value unused. */
static inline void bench_keep(void *p) {
  __asm__ volatile("" : : "r"(p) : "memory");
}

/* ---- used by main.c ---------------------------------------------------- */

typedef struct bench_options {
  bool quick;
  bool json;
  int runs; /* 0: the mode's default */
} bench_options;

bench_ctx *bench_ctx_create(const bench_options *opts);
void bench_ctx_destroy(bench_ctx *ctx);
/* Names the suite that following rows belong to. */
void bench_begin_suite(bench_ctx *ctx, const char *suite);
/* Prints every row (table or JSON lines) on stdout. Returns the number of
 * failed rows. */
int bench_report(bench_ctx *ctx);

/* The suite registry: one declaration per line of suites.h. */
#define BENCH_SUITE(name, desc) int bench_suite_##name(bench_ctx *ctx);
#include "suites.h"
#undef BENCH_SUITE

#endif
