/* iof-bench framework: timing, interleaved runs, statistics and the result
 * table. Every figure is reported as a ratio against a baseline case that
 * is measured in the same process, so results compare across machines.
 *
 * A case with a baseline runs interleaved with it (A B A B ..., one pair
 * per run): its ratio is the median of the per-pair ratios and its spread
 * the max/min of those ratios, so a load burst that slows both sides of a
 * pair cancels out, and a row whose pairs disagree is marked noisy.
 *
 * A suite is a function `int bench_suite_NAME(bench_ctx *ctx)` in its own
 * file bench_NAME.c, listed once in suites.h. It measures cases with
 * bench_run_case() (baseline first) and may add comparison rows with
 * bench_compare(). Cases whose figure comes from elsewhere (an external
 * tool, one reading) are added with bench_add_pairs()/bench_add_value(). */
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
  unsigned run_ms;      /* per timed run; 0: the framework's (~60 ms, or
                           ~8 ms with --quick) */
  uint64_t min_iters;   /* calibration never picks fewer (e.g. enough round
                           trips for every connection to take part) */
  bool alone;           /* never set up while its baseline is (cases whose
                           state would slow each other down) */
  void *arg;            /* passed to setup, body and teardown. A case and
                           its baseline with different args are both set up
                           for the whole interleaved run; with the same arg
                           (or `alone`) each run gets its own
                           setup+warm-up+teardown */
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

/* Adds a row from externally measured pairs: a[i] (the baseline's) and
 * b[i] (this case's) were measured one after the other. `baseline` names
 * the baseline row (added earlier, e.g. with bench_add_pairs(..., NULL,
 * ...) of a[]) or NULL for a baseline row made of b[]. 0 or -EINVAL. */
int bench_add_pairs(bench_ctx *ctx, const char *name, const char *unit,
                    const char *baseline, double target, const double *a,
                    const double *b, int n);

/* Adds a row holding a single reading (no spread: 1.00); its ratio is
 * value / the baseline row's median. 0 or -ENOMEM/-ENOENT. */
int bench_add_value(bench_ctx *ctx, const char *name, const char *unit,
                    const char *baseline, double target, double value);

/* Adds a row that was not measured, with the reason (e.g. a peer that is
 * not installed). Not a failure. */
int bench_skip(bench_ctx *ctx, const char *name, const char *why);

/* Adds (or replaces) a named figure on the current suite's row `name`: an
 * extra column in the table, a key in JSON and CSV. The key must be a
 * static string. 0 or -ENOENT/-ENOSPC. */
int bench_note(bench_ctx *ctx, const char *name, const char *key, double value);

/* The median of the current suite's row `name`; NAN if not measured. */
double bench_median_of(const bench_ctx *ctx, const char *name);

/* Runs (pairs) per case. */
int bench_runs(const bench_ctx *ctx);

/* True with --callgrind (the echo suite measures instructions). */
bool bench_callgrind(const bench_ctx *ctx);

/* The directory holding the iof-bench executable ("." if unknown). */
const char *bench_exe_dir(void);

/* True in --quick mode (suites may shrink their own setup work). */
bool bench_quick(const bench_ctx *ctx);

/* Nanoseconds of CLOCK_MONOTONIC. */
uint64_t bench_now_ns(void);

/* Keeps the compiler from proving a value unused. */
static inline void bench_keep(void *p) {
  __asm__ volatile("" : : "r"(p) : "memory");
}

/* ---- used by main.c ---------------------------------------------------- */

typedef enum bench_format { BENCH_TABLE, BENCH_JSON, BENCH_CSV } bench_format;

typedef struct bench_options {
  bool quick;
  bool callgrind;
  bench_format format;
  int runs; /* 0: the mode's default */
} bench_options;

bench_ctx *bench_ctx_create(const bench_options *opts);
void bench_ctx_destroy(bench_ctx *ctx);
/* Names the suite that following rows belong to. */
void bench_begin_suite(bench_ctx *ctx, const char *suite);
/* Prints every row (table, JSON lines or CSV) on stdout. Returns the number of
 * failed rows. */
int bench_report(bench_ctx *ctx);

/* The suite registry: one declaration per line of suites.h. */
#define BENCH_SUITE(name, desc) int bench_suite_##name(bench_ctx *ctx);
#include "suites.h"
#undef BENCH_SUITE

#endif
