/* iof-bench framework: see bench.h. */
#include "bench.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* Per-run durations: long enough that clock resolution and one-off noise
 * (a page fault, a timer tick) vanish in the per-operation figure, short
 * enough that the whole default suite stays within seconds. */
#define BENCH_RUN_NS_FULL (60u * 1000 * 1000)
#define BENCH_RUN_NS_QUICK (8u * 1000 * 1000)
#define BENCH_RUNS_FULL 9
#define BENCH_RUNS_QUICK 5
#define BENCH_ITERS_MAX ((uint64_t)1 << 32)

typedef struct bench_row {
  const char *bench;
  const char *name;
  const char *unit;
  const char *baseline; /* NULL: a baseline row */
  double median, min, max;
  double ratio;  /* NAN when the baseline is missing */
  double target; /* 0: none */
  int error;     /* negated errno when the case failed */
} bench_row;

struct bench_ctx {
  bench_options opts;
  int runs;
  uint64_t run_ns;
  const char *suite;
  bench_row *rows;
  size_t nrows, cap;
};

uint64_t bench_now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

bench_ctx *bench_ctx_create(const bench_options *opts) {
  bench_ctx *ctx = calloc(1, sizeof *ctx);
  if (!ctx) return NULL;
  ctx->opts = *opts;
  ctx->runs = opts->runs > 0 ? opts->runs
              : opts->quick  ? BENCH_RUNS_QUICK
                             : BENCH_RUNS_FULL;
  ctx->run_ns = opts->quick ? BENCH_RUN_NS_QUICK : BENCH_RUN_NS_FULL;
  ctx->suite = "?";
  return ctx;
}

void bench_ctx_destroy(bench_ctx *ctx) {
  if (!ctx) return;
  free(ctx->rows);
  free(ctx);
}

void bench_begin_suite(bench_ctx *ctx, const char *suite) {
  ctx->suite = suite ? suite : "?";
}

bool bench_quick(const bench_ctx *ctx) {
  return ctx->opts.quick;
}

static bench_row *add_row(bench_ctx *ctx) {
  if (ctx->nrows == ctx->cap) {
    size_t cap = ctx->cap ? ctx->cap * 2 : 16;
    bench_row *r = realloc(ctx->rows, cap * sizeof *r);
    if (!r) return NULL;
    ctx->rows = r;
    ctx->cap = cap;
  }
  bench_row *row = &ctx->rows[ctx->nrows++];
  memset(row, 0, sizeof *row);
  row->bench = ctx->suite;
  row->ratio = NAN;
  return row;
}

/* A measured row of the current suite, or NULL. */
static const bench_row *find_row(const bench_ctx *ctx, const char *name) {
  for (size_t i = ctx->nrows; i-- > 0;) {
    const bench_row *r = &ctx->rows[i];
    if (!r->error && strcmp(r->bench, ctx->suite) == 0 &&
        strcmp(r->name, name) == 0)
      return r;
  }
  return NULL;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

static int time_body(const bench_case *c, uint64_t iters, uint64_t *ns) {
  uint64_t t0 = bench_now_ns();
  int rc = c->body(c->arg, iters);
  uint64_t dt = bench_now_ns() - t0;
  *ns = dt ? dt : 1;
  return rc;
}

/* Finds an iteration count that makes one run last about ctx->run_ns. The
 * calibration runs double as warm-up (caches, pools, page faults). */
static int calibrate(const bench_ctx *ctx, const bench_case *c,
                     uint64_t *iters) {
  uint64_t n = 1, ns = 1;
  const uint64_t enough = ctx->run_ns / 8;
  for (;;) {
    int rc = time_body(c, n, &ns);
    if (rc < 0) return rc;
    if (ns >= enough || n >= BENCH_ITERS_MAX) break;
    /* Grow at most 100x a step: a tiny timing is mostly noise. */
    double grow = 1.5 * (double)enough / (double)ns;
    if (grow < 2) grow = 2;
    if (grow > 100) grow = 100;
    n = (uint64_t)((double)n * grow);
  }
  double want = (double)ctx->run_ns * (double)n / (double)ns;
  if (want < 1) want = 1;
  if (want > (double)BENCH_ITERS_MAX) want = (double)BENCH_ITERS_MAX;
  *iters = (uint64_t)want;
  return 0;
}

static void set_ratio(bench_row *row, const bench_ctx *ctx) {
  if (!row->baseline) {
    row->ratio = 1.0;
    return;
  }
  const bench_row *base = find_row(ctx, row->baseline);
  if (base && base->median > 0)
    row->ratio = row->median / base->median;
  else
    fprintf(stderr, "iof-bench: %s/%s: baseline '%s' was not measured\n",
            row->bench, row->name, row->baseline);
}

int bench_run_case(bench_ctx *ctx, const bench_case *c) {
  double *samples = calloc((size_t)ctx->runs, sizeof *samples);
  bench_row *row = add_row(ctx);
  if (!samples || !row) {
    free(samples);
    fprintf(stderr, "iof-bench: out of memory\n");
    return -ENOMEM;
  }
  row->name = c->name;
  row->unit = c->unit;
  row->baseline = c->baseline;
  row->target = c->target;

  int rc = c->setup ? c->setup(c->arg) : 0;
  if (rc == 0) {
    uint64_t iters = 0;
    rc = calibrate(ctx, c, &iters);
    for (int i = 0; rc == 0 && i < ctx->runs; i++) {
      uint64_t ns;
      rc = time_body(c, iters, &ns);
      samples[i] = (double)ns / (double)iters;
    }
    if (c->teardown) c->teardown(c->arg);
  }
  if (rc < 0) {
    row->error = rc;
    fprintf(stderr, "iof-bench: %s/%s failed: %s\n", row->bench, row->name,
            strerror(-rc));
    free(samples);
    return rc;
  }

  qsort(samples, (size_t)ctx->runs, sizeof *samples, cmp_double);
  int n = ctx->runs;
  row->min = samples[0];
  row->max = samples[n - 1];
  row->median =
      n % 2 ? samples[n / 2] : (samples[n / 2 - 1] + samples[n / 2]) / 2;
  free(samples);
  set_ratio(row, ctx);
  return 0;
}

int bench_compare(bench_ctx *ctx, const char *name, const char *of,
                  const char *baseline, double target) {
  const bench_row *src = find_row(ctx, of);
  if (!src || !find_row(ctx, baseline)) {
    fprintf(stderr, "iof-bench: %s/%s: '%s' or '%s' was not measured\n",
            ctx->suite, name, of, baseline);
    return -ENOENT;
  }
  size_t src_idx = (size_t)(src - ctx->rows); /* add_row may move rows */
  bench_row *row = add_row(ctx);
  if (!row) return -ENOMEM;
  src = &ctx->rows[src_idx];
  row->name = name;
  row->unit = src->unit;
  row->baseline = baseline;
  row->target = target;
  row->median = src->median;
  row->min = src->min;
  row->max = src->max;
  set_ratio(row, ctx);
  return 0;
}

/* ---- output ------------------------------------------------------------ */

static void json_string(const char *s) {
  putchar('"');
  for (; *s; s++) {
    unsigned char ch = (unsigned char)*s;
    if (ch == '"' || ch == '\\')
      printf("\\%c", ch);
    else if (ch < 0x20)
      printf("\\u%04x", ch);
    else
      putchar(ch);
  }
  putchar('"');
}

static void json_number(double v, const char *fmt) {
  if (isfinite(v))
    printf(fmt, v);
  else
    fputs("null", stdout);
}

static void print_json(const bench_ctx *ctx) {
  for (size_t i = 0; i < ctx->nrows; i++) {
    const bench_row *r = &ctx->rows[i];
    bool ok = !r->error;
    fputs("{\"bench\":", stdout);
    json_string(r->bench);
    fputs(",\"case\":", stdout);
    json_string(r->name);
    fputs(",\"unit\":", stdout);
    json_string(r->unit);
    fputs(",\"median\":", stdout);
    json_number(ok ? r->median : NAN, "%.3f");
    fputs(",\"min\":", stdout);
    json_number(ok ? r->min : NAN, "%.3f");
    fputs(",\"max\":", stdout);
    json_number(ok ? r->max : NAN, "%.3f");
    fputs(",\"baseline\":", stdout);
    if (r->baseline)
      json_string(r->baseline);
    else
      fputs("null", stdout);
    fputs(",\"ratio\":", stdout);
    json_number(ok ? r->ratio : NAN, "%.4f");
    if (!ok) {
      fputs(",\"error\":", stdout);
      json_string(strerror(-r->error));
    }
    fputs("}\n", stdout);
  }
}

enum {
  COL_BENCH,
  COL_CASE,
  COL_UNIT,
  COL_MEDIAN,
  COL_MIN,
  COL_MAX,
  COL_BASE,
  COL_RATIO,
  COL_TARGET,
  NCOLS
};

static const char *const col_title[NCOLS] = {"bench",    "case",  "unit",
                                             "median",   "min",   "max",
                                             "baseline", "ratio", "target"};

/* Numeric columns are right-aligned. */
static const bool col_right[NCOLS] = {false, false, false, true, true,
                                      true,  false, true,  false};

static void fmt_ns(char *buf, size_t n, double v) {
  snprintf(buf, n, v < 100 ? "%.2f" : "%.1f", v);
}

static void row_cells(const bench_row *r, char cell[NCOLS][48]) {
  snprintf(cell[COL_BENCH], 48, "%s", r->bench);
  snprintf(cell[COL_CASE], 48, "%s", r->name);
  snprintf(cell[COL_UNIT], 48, "%s", r->unit);
  snprintf(cell[COL_BASE], 48, "%s", r->baseline ? r->baseline : "-");
  if (r->error) {
    snprintf(cell[COL_MEDIAN], 48, "FAILED");
    cell[COL_MIN][0] = cell[COL_MAX][0] = cell[COL_RATIO][0] = '\0';
    cell[COL_TARGET][0] = '\0';
    return;
  }
  fmt_ns(cell[COL_MEDIAN], 48, r->median);
  fmt_ns(cell[COL_MIN], 48, r->min);
  fmt_ns(cell[COL_MAX], 48, r->max);
  if (isfinite(r->ratio))
    snprintf(cell[COL_RATIO], 48, "%.2f", r->ratio);
  else
    snprintf(cell[COL_RATIO], 48, "?");
  if (r->target > 0 && isfinite(r->ratio))
    snprintf(cell[COL_TARGET], 48, "<= %.2f %s", r->target,
             r->ratio <= r->target ? "met" : "MISSED");
  else if (r->target > 0)
    snprintf(cell[COL_TARGET], 48, "<= %.2f", r->target);
  else
    cell[COL_TARGET][0] = '\0';
}

static void print_line(char cell[NCOLS][48], const int *width) {
  char line[NCOLS * 50];
  size_t len = 0;
  for (int c = 0; c < NCOLS; c++)
    len +=
        (size_t)snprintf(line + len, sizeof line - len,
                         col_right[c] ? "%*s  " : "%-*s  ", width[c], cell[c]);
  /* Empty trailing cells would leave blanks at the end of the line. */
  while (len > 0 && line[len - 1] == ' ') len--;
  line[len] = '\0';
  puts(line);
}

static void print_table(const bench_ctx *ctx) {
  int width[NCOLS];
  char cell[NCOLS][48];
  for (int c = 0; c < NCOLS; c++) width[c] = (int)strlen(col_title[c]);
  for (size_t i = 0; i < ctx->nrows; i++) {
    row_cells(&ctx->rows[i], cell);
    for (int c = 0; c < NCOLS; c++)
      if ((int)strlen(cell[c]) > width[c]) width[c] = (int)strlen(cell[c]);
  }

  printf("iof-bench: %d runs per case, ~%u ms per run%s\n", ctx->runs,
         (unsigned)(ctx->run_ns / 1000000), ctx->opts.quick ? " (quick)" : "");
  printf("ratio = median / baseline's median, same run; lower is better\n\n");
  for (int c = 0; c < NCOLS; c++) snprintf(cell[c], 48, "%s", col_title[c]);
  print_line(cell, width);
  for (size_t i = 0; i < ctx->nrows; i++) {
    row_cells(&ctx->rows[i], cell);
    print_line(cell, width);
  }
  printf("\ntargets are goals for the ratio, reported and never enforced\n");
}

int bench_report(bench_ctx *ctx) {
  if (ctx->opts.json)
    print_json(ctx);
  else
    print_table(ctx);
  fflush(stdout);
  int failed = 0;
  for (size_t i = 0; i < ctx->nrows; i++)
    if (ctx->rows[i].error) failed++;
  return failed;
}
