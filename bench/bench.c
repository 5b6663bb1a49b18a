/* iof-bench framework: see bench.h. */
#include "bench.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "bench_stats.h"

/* Per-run durations: long enough that clock resolution and one-off noise
 * (a page fault, a timer tick) vanish in the per-operation figure, short
 * enough that the whole default suite stays within minutes. */
#define BENCH_RUN_NS_FULL (60u * 1000 * 1000)
#define BENCH_RUN_NS_QUICK (8u * 1000 * 1000)
#define BENCH_RUNS_FULL 9
#define BENCH_RUNS_QUICK 5
#define BENCH_ITERS_MAX ((uint64_t)1 << 32)
#define BENCH_NOTES_MAX 12

typedef struct bench_note_kv {
  const char *key;
  double value;
} bench_note_kv;

typedef struct bench_row {
  const char *bench;
  const char *name;
  const char *unit;
  const char *baseline; /* NULL: a baseline row */
  const char *skipped;  /* why the row was not measured; NULL: it was */
  double median, min, max;
  double ratio;  /* NAN when the baseline is missing */
  double spread; /* max/min of the pair ratios (of the samples for a
                    baseline row) */
  double target; /* 0: none */
  int error;     /* negated errno when the case failed */
  bench_note_kv notes[BENCH_NOTES_MAX];
  int nnotes;
} bench_row;

/* A case measured in the current suite, kept so that later cases can run
 * interleaved with it. Its arg must stay valid until the suite returns,
 * which holds: suites keep their cases' state in locals. */
typedef struct bench_stored {
  bench_case c;
  const char *suite;
  uint64_t iters; /* calibrated */
} bench_stored;

struct bench_ctx {
  bench_options opts;
  int runs;
  uint64_t run_ns;
  const char *suite;
  bench_row *rows;
  size_t nrows, cap;
  bench_stored *cases;
  size_t ncases, ccap;
  char **strs; /* copies of row names, freed with ctx */
  size_t nstrs, scap;
};

/* Rows outlive the suite that made them (the report comes last), so they
 * keep their own copies of the names a suite may have built on its stack.
 * NULL stays NULL; an allocation failure yields "?". */
static const char *own(bench_ctx *ctx, const char *s) {
  if (!s) return NULL;
  if (ctx->nstrs == ctx->scap) {
    size_t cap = ctx->scap ? ctx->scap * 2 : 64;
    char **v = realloc(ctx->strs, cap * sizeof *v);
    if (!v) return "?";
    ctx->strs = v;
    ctx->scap = cap;
  }
  char *d = strdup(s);
  if (!d) return "?";
  ctx->strs[ctx->nstrs++] = d;
  return d;
}

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
  free(ctx->cases);
  for (size_t i = 0; i < ctx->nstrs; i++) free(ctx->strs[i]);
  free(ctx->strs);
  free(ctx);
}

void bench_begin_suite(bench_ctx *ctx, const char *suite) {
  ctx->suite = suite ? suite : "?";
  ctx->ncases = 0; /* the previous suite's args are gone */
}

bool bench_quick(const bench_ctx *ctx) {
  return ctx->opts.quick;
}

bool bench_callgrind(const bench_ctx *ctx) {
  return ctx->opts.callgrind;
}

int bench_runs(const bench_ctx *ctx) {
  return ctx->runs;
}

const char *bench_exe_dir(void) {
  static char dir[PATH_MAX];
  if (dir[0]) return dir;
  ssize_t n = readlink("/proc/self/exe", dir, sizeof dir - 1);
  if (n <= 0) {
    strcpy(dir, ".");
    return dir;
  }
  dir[n] = '\0';
  char *slash = strrchr(dir, '/');
  if (slash && slash != dir)
    *slash = '\0';
  else
    strcpy(dir, ".");
  return dir;
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
  row->spread = NAN;
  return row;
}

/* A measured row of the current suite, or NULL. */
static bench_row *find_row(const bench_ctx *ctx, const char *name) {
  for (size_t i = ctx->nrows; i-- > 0;) {
    bench_row *r = &ctx->rows[i];
    if (!r->error && !r->skipped && strcmp(r->bench, ctx->suite) == 0 &&
        strcmp(r->name, name) == 0)
      return r;
  }
  return NULL;
}

static bench_stored *find_case(const bench_ctx *ctx, const char *name) {
  for (size_t i = ctx->ncases; i-- > 0;)
    if (strcmp(ctx->cases[i].c.name, name) == 0 &&
        ctx->cases[i].suite == ctx->suite)
      return &ctx->cases[i];
  return NULL;
}

static bench_stored *store_case(bench_ctx *ctx, const bench_case *c,
                                uint64_t iters) {
  if (ctx->ncases == ctx->ccap) {
    size_t cap = ctx->ccap ? ctx->ccap * 2 : 16;
    bench_stored *s = realloc(ctx->cases, cap * sizeof *s);
    if (!s) return NULL;
    ctx->cases = s;
    ctx->ccap = cap;
  }
  bench_stored *s = &ctx->cases[ctx->ncases++];
  s->c = *c;
  s->suite = ctx->suite;
  s->iters = iters;
  return s;
}

double bench_median_of(const bench_ctx *ctx, const char *name) {
  const bench_row *r = find_row(ctx, name);
  return r ? r->median : NAN;
}

static uint64_t run_ns_of(const bench_ctx *ctx, const bench_case *c) {
  return c->run_ms ? (uint64_t)c->run_ms * 1000000u : ctx->run_ns;
}

static int time_body(const bench_case *c, uint64_t iters, double *ns_per_op) {
  uint64_t t0 = bench_now_ns();
  int rc = c->body(c->arg, iters);
  uint64_t dt = bench_now_ns() - t0;
  *ns_per_op = (double)(dt ? dt : 1) / (double)iters;
  return rc;
}

/* Finds an iteration count that makes one run last about run_ns. The
 * calibration runs double as warm-up (caches, pools, page faults). */
static int calibrate(uint64_t run_ns, const bench_case *c, uint64_t *iters) {
  uint64_t n = 1;
  double per = 1;
  const double enough = (double)run_ns / 8;
  for (;;) {
    int rc = time_body(c, n, &per);
    if (rc < 0) return rc;
    double ns = per * (double)n;
    if (ns >= enough || n >= BENCH_ITERS_MAX) break;
    /* Grow at most 100x a step: a tiny timing is mostly noise. */
    double grow = 1.5 * enough / ns;
    if (grow < 2) grow = 2;
    if (grow > 100) grow = 100;
    n = (uint64_t)((double)n * grow);
  }
  double want = (double)run_ns / per;
  if (want < 1) want = 1;
  if (want > (double)BENCH_ITERS_MAX) want = (double)BENCH_ITERS_MAX;
  if (want < (double)c->min_iters) want = (double)c->min_iters;
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

static void row_failed(bench_row *row, int rc) {
  row->error = rc;
  fprintf(stderr, "iof-bench: %s/%s failed: %s\n", row->bench, row->name,
          strerror(-rc));
}

/* A baseline case: ctx->runs runs on its own. */
static int run_alone(bench_ctx *ctx, const bench_case *c, bench_row *row) {
  double *samples = calloc((size_t)ctx->runs, sizeof *samples);
  if (!samples) return -ENOMEM;
  uint64_t iters = 0;
  int rc = c->setup ? c->setup(c->arg) : 0;
  if (rc == 0) {
    rc = calibrate(run_ns_of(ctx, c), c, &iters);
    for (int i = 0; rc == 0 && i < ctx->runs; i++)
      rc = time_body(c, iters, &samples[i]);
    if (c->teardown) c->teardown(c->arg);
  }
  if (rc == 0) {
    row->spread = bench_spread(samples, (size_t)ctx->runs);
    row->median = bench_median(samples, (size_t)ctx->runs); /* sorts */
    row->min = samples[0];
    row->max = samples[ctx->runs - 1];
    row->ratio = 1.0;
    if (!store_case(ctx, c, iters)) rc = -ENOMEM;
  }
  free(samples);
  return rc;
}

/* ---- interleaved pairs --------------------------------------------------
 * side 0 is the baseline, side 1 the case. */

typedef struct pairing {
  const bench_case *c[2];
  uint64_t iters[2];
  uint64_t run_ns[2];
  bool exclusive; /* same arg: one side set up at a time */
} pairing;

static int pair_measure(void *u, int side, double *out) {
  pairing *p = u;
  const bench_case *c = p->c[side];
  if (!p->exclusive) return time_body(c, p->iters[side], out);
  int rc = c->setup ? c->setup(c->arg) : 0;
  if (rc < 0) return rc;
  if (p->iters[side] == 0) /* first time: calibrate (warms up too) */
    rc = calibrate(p->run_ns[side], c, &p->iters[side]);
  else /* warm-up after a fresh setup */
    rc = time_body(c, p->iters[side] / 4 + 1, out);
  if (rc == 0) rc = time_body(c, p->iters[side], out);
  if (c->teardown) c->teardown(c->arg);
  return rc;
}

static int run_pairs(bench_ctx *ctx, const bench_case *base,
                     const bench_case *c, double *a, double *b) {
  pairing p = {.c = {base, c},
               .run_ns = {run_ns_of(ctx, base), run_ns_of(ctx, c)},
               .exclusive = base->arg == c->arg || c->alone};
  if (p.exclusive) return bench_interleave(ctx->runs, pair_measure, &p, a, b);
  int rc = base->setup ? base->setup(base->arg) : 0;
  if (rc < 0) return rc;
  rc = c->setup ? c->setup(c->arg) : 0;
  if (rc < 0) {
    if (base->teardown) base->teardown(base->arg);
    return rc;
  }
  rc = calibrate(p.run_ns[0], base, &p.iters[0]);
  if (rc == 0) rc = calibrate(p.run_ns[1], c, &p.iters[1]);
  if (rc == 0) rc = bench_interleave(ctx->runs, pair_measure, &p, a, b);
  if (c->teardown) c->teardown(c->arg);
  if (base->teardown) base->teardown(base->arg);
  return rc;
}

static void fill_pair_row(bench_row *row, const bench_pair_stats *st) {
  row->median = st->median_b;
  row->min = st->min_b;
  row->max = st->max_b;
  row->ratio = st->ratio;
  row->spread = st->spread;
}

static int measure_pairs(bench_ctx *ctx, bench_row *row, const bench_case *c,
                         const char *baseline) {
  bench_stored *bs = find_case(ctx, baseline);
  if (!bs) {
    fprintf(stderr, "iof-bench: %s/%s: baseline '%s' was not measured\n",
            ctx->suite, row->name, baseline);
    return -ENOENT;
  }
  bench_case base = bs->c; /* ctx->cases may move */
  double *a = calloc((size_t)ctx->runs * 2, sizeof *a);
  if (!a) return -ENOMEM;
  double *b = a + ctx->runs;
  int rc = run_pairs(ctx, &base, c, a, b);
  if (rc == 0 && getenv("IOF_BENCH_DEBUG"))
    for (int i = 0; i < ctx->runs; i++)
      fprintf(stderr, "iof-bench: %s/%s pair %d: %s %.2f, %.2f\n", ctx->suite,
              row->name, i, baseline, a[i], b[i]);
  bench_pair_stats st;
  if (rc == 0) rc = bench_pair_stats_compute(a, b, (size_t)ctx->runs, &st);
  if (rc == 0) fill_pair_row(row, &st);
  free(a);
  return rc;
}

int bench_run_case(bench_ctx *ctx, const bench_case *c) {
  bench_row *row = add_row(ctx);
  if (!row) {
    fprintf(stderr, "iof-bench: out of memory\n");
    return -ENOMEM;
  }
  size_t idx = (size_t)(row - ctx->rows);
  row->name = own(ctx, c->name);
  row->unit = own(ctx, c->unit);
  row->baseline = own(ctx, c->baseline);
  row->target = c->target;
  bench_row tmp = *row; /* measured into a copy: add_row may move rows */
  int rc;
  if (!c->baseline) {
    rc = run_alone(ctx, c, &tmp);
  } else {
    rc = measure_pairs(ctx, &tmp, c, c->baseline);
    if (rc == 0 && !store_case(ctx, c, 0)) rc = -ENOMEM;
  }
  row = &ctx->rows[idx];
  *row = tmp;
  if (rc < 0) row_failed(row, rc);
  return rc;
}

int bench_compare(bench_ctx *ctx, const char *name, const char *of,
                  const char *baseline, double target) {
  bench_stored *src = find_case(ctx, of);
  if (!src || !find_case(ctx, baseline)) {
    fprintf(stderr, "iof-bench: %s/%s: '%s' or '%s' was not measured\n",
            ctx->suite, name, of, baseline);
    return -ENOENT;
  }
  bench_case c = src->c;
  bench_row *row = add_row(ctx);
  if (!row) return -ENOMEM;
  size_t idx = (size_t)(row - ctx->rows);
  bench_row tmp = *row;
  tmp.name = own(ctx, name);
  tmp.unit = own(ctx, c.unit);
  tmp.baseline = own(ctx, baseline);
  tmp.target = target;
  /* A fresh interleaved run of both: pairs only mean something when the
   * two sides ran back to back. */
  int rc = measure_pairs(ctx, &tmp, &c, baseline);
  row = &ctx->rows[idx];
  *row = tmp;
  if (rc < 0) row_failed(row, rc);
  return rc;
}

int bench_add_pairs(bench_ctx *ctx, const char *name, const char *unit,
                    const char *baseline, double target, const double *a,
                    const double *b, int n) {
  if (n < 1) return -EINVAL;
  bench_pair_stats st;
  int rc = bench_pair_stats_compute(baseline ? a : b, b, (size_t)n, &st);
  bench_row *row = add_row(ctx);
  if (!row) return -ENOMEM;
  row->name = own(ctx, name);
  row->unit = own(ctx, unit);
  row->baseline = own(ctx, baseline);
  row->target = target;
  if (rc < 0) {
    row_failed(row, rc);
    return rc;
  }
  fill_pair_row(row, &st);
  if (!baseline) {
    double *v = malloc((size_t)n * sizeof *v);
    row->spread =
        v ? (memcpy(v, b, (size_t)n * sizeof *v), bench_spread(v, (size_t)n))
          : NAN;
    free(v);
  }
  return 0;
}

int bench_add_value(bench_ctx *ctx, const char *name, const char *unit,
                    const char *baseline, double target, double value) {
  bench_row *row = add_row(ctx);
  if (!row) return -ENOMEM;
  row->name = own(ctx, name);
  row->unit = own(ctx, unit);
  row->baseline = own(ctx, baseline);
  row->target = target;
  row->median = row->min = row->max = value;
  row->spread = 1.0;
  set_ratio(row, ctx);
  return baseline && !isfinite(row->ratio) ? -ENOENT : 0;
}

int bench_skip(bench_ctx *ctx, const char *name, const char *why) {
  bench_row *row = add_row(ctx);
  if (!row) return -ENOMEM;
  row->name = own(ctx, name);
  row->unit = "";
  row->skipped = why ? own(ctx, why) : "skipped";
  fprintf(stderr, "iof-bench: %s/%s skipped: %s\n", ctx->suite, name,
          row->skipped);
  return 0;
}

int bench_note(bench_ctx *ctx, const char *name, const char *key,
               double value) {
  bench_row *r = find_row(ctx, name);
  if (!r) return -ENOENT;
  for (int i = 0; i < r->nnotes; i++)
    if (strcmp(r->notes[i].key, key) == 0) {
      r->notes[i].value = value;
      return 0;
    }
  if (r->nnotes == BENCH_NOTES_MAX) return -ENOSPC;
  r->notes[r->nnotes++] = (bench_note_kv){key, value};
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

static bool row_ok(const bench_row *r) {
  return !r->error && !r->skipped;
}

static void print_json(const bench_ctx *ctx) {
  for (size_t i = 0; i < ctx->nrows; i++) {
    const bench_row *r = &ctx->rows[i];
    bool ok = row_ok(r);
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
    fputs(",\"spread\":", stdout);
    json_number(ok ? r->spread : NAN, "%.4f");
    printf(",\"noisy\":%s", ok && bench_is_noisy(r->spread) ? "true" : "false");
    fputs(",\"target\":", stdout);
    json_number(r->target > 0 ? r->target : NAN, "%.4f");
    for (int k = 0; ok && k < r->nnotes; k++) {
      putchar(',');
      json_string(r->notes[k].key);
      putchar(':');
      json_number(r->notes[k].value, "%.6g");
    }
    if (r->error) {
      fputs(",\"error\":", stdout);
      json_string(strerror(-r->error));
    }
    if (r->skipped) {
      fputs(",\"skipped\":", stdout);
      json_string(r->skipped);
    }
    fputs("}\n", stdout);
  }
}

/* CSV: fixed columns, then the notes as one "key=value;..." field so that
 * every line has the same number of fields. */
static void csv_number(double v, const char *fmt) {
  if (isfinite(v)) printf(fmt, v);
}

static void print_csv(const bench_ctx *ctx) {
  puts("bench,case,unit,median,min,max,baseline,ratio,spread,noisy,target,"
       "status,notes");
  for (size_t i = 0; i < ctx->nrows; i++) {
    const bench_row *r = &ctx->rows[i];
    bool ok = row_ok(r);
    printf("%s,%s,%s,", r->bench, r->name, r->unit);
    csv_number(ok ? r->median : NAN, "%.3f");
    putchar(',');
    csv_number(ok ? r->min : NAN, "%.3f");
    putchar(',');
    csv_number(ok ? r->max : NAN, "%.3f");
    printf(",%s,", r->baseline ? r->baseline : "");
    csv_number(ok ? r->ratio : NAN, "%.4f");
    putchar(',');
    csv_number(ok ? r->spread : NAN, "%.4f");
    printf(",%d,", ok && bench_is_noisy(r->spread));
    csv_number(r->target > 0 ? r->target : NAN, "%.4f");
    printf(",%s,", r->error ? "failed" : r->skipped ? "skipped" : "ok");
    for (int k = 0; ok && k < r->nnotes; k++)
      printf("%s%s=%.6g", k ? ";" : "", r->notes[k].key, r->notes[k].value);
    for (const char *p = r->skipped; p && *p; p++) /* the reason */
      putchar(*p == ',' ? ';' : *p == '\n' ? ' ' : *p);
    putchar('\n');
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
  COL_SPREAD,
  COL_TARGET,
  COL_NOTES,
  NCOLS
};

#define CELL 160

static const char *const col_title[NCOLS] = {
    "bench",    "case",  "unit",   "median", "min",  "max",
    "baseline", "ratio", "spread", "target", "notes"};

/* Numeric columns are right-aligned. */
static const bool col_right[NCOLS] = {false, false, false, true,  true, true,
                                      false, true,  false, false, false};

static void fmt_num(char *buf, size_t n, double v) {
  double a = fabs(v);
  if (a >= 100 && a < 1e7 && v == floor(v)) {
    snprintf(buf, n, "%.0f", v);
    return;
  }
  snprintf(buf, n,
           a >= 1e7    ? "%.3g"
           : a >= 100  ? "%.1f"
           : a >= 0.01 ? "%.2f"
                       : "%.3g",
           v);
}

static void row_cells(const bench_row *r, char cell[NCOLS][CELL]) {
  for (int c = 0; c < NCOLS; c++) cell[c][0] = '\0';
  snprintf(cell[COL_BENCH], CELL, "%s", r->bench);
  snprintf(cell[COL_CASE], CELL, "%s", r->name);
  snprintf(cell[COL_UNIT], CELL, "%s", r->unit);
  snprintf(cell[COL_BASE], CELL, "%s", r->baseline ? r->baseline : "-");
  if (r->skipped) {
    snprintf(cell[COL_MEDIAN], CELL, "skipped");
    snprintf(cell[COL_NOTES], CELL, "%s", r->skipped);
    return;
  }
  if (r->error) {
    snprintf(cell[COL_MEDIAN], CELL, "FAILED");
    return;
  }
  fmt_num(cell[COL_MEDIAN], CELL, r->median);
  fmt_num(cell[COL_MIN], CELL, r->min);
  fmt_num(cell[COL_MAX], CELL, r->max);
  if (isfinite(r->ratio))
    snprintf(cell[COL_RATIO], CELL, "%.2f", r->ratio);
  else
    snprintf(cell[COL_RATIO], CELL, "?");
  if (isfinite(r->spread))
    snprintf(cell[COL_SPREAD], CELL, "%.2f%s", r->spread,
             bench_is_noisy(r->spread) ? " noisy" : "");
  if (r->target > 0 && isfinite(r->ratio))
    snprintf(cell[COL_TARGET], CELL, "<= %.2f %s", r->target,
             r->ratio <= r->target ? "met" : "MISSED");
  else if (r->target > 0)
    snprintf(cell[COL_TARGET], CELL, "<= %.2f", r->target);
  size_t len = 0;
  for (int k = 0; k < r->nnotes && len < CELL - 1; k++) {
    char v[32];
    fmt_num(v, sizeof v, r->notes[k].value);
    len += (size_t)snprintf(cell[COL_NOTES] + len, CELL - len, "%s%s=%s",
                            k ? " " : "", r->notes[k].key, v);
  }
}

static void print_line(char cell[NCOLS][CELL], const int *width) {
  char line[NCOLS * (CELL + 2)];
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
  static char cell[NCOLS][CELL];
  for (int c = 0; c < NCOLS; c++) width[c] = (int)strlen(col_title[c]);
  for (size_t i = 0; i < ctx->nrows; i++) {
    row_cells(&ctx->rows[i], cell);
    for (int c = 0; c < NCOLS; c++)
      if ((int)strlen(cell[c]) > width[c]) width[c] = (int)strlen(cell[c]);
  }

  printf("iof-bench: %d runs (A/B pairs) per case, ~%u ms per run%s\n",
         ctx->runs, (unsigned)(ctx->run_ns / 1000000),
         ctx->opts.quick ? " (quick)" : "");
  printf("ratio = median of per-pair (case / baseline) ratios; lower is "
         "better; spread = max/min of those ratios (> %.1f: noisy)\n\n",
         BENCH_NOISY_SPREAD);
  for (int c = 0; c < NCOLS; c++) snprintf(cell[c], CELL, "%s", col_title[c]);
  print_line(cell, width);
  for (size_t i = 0; i < ctx->nrows; i++) {
    row_cells(&ctx->rows[i], cell);
    print_line(cell, width);
  }
  printf("\ntargets are goals for the ratio, reported and never enforced\n");
}

int bench_report(bench_ctx *ctx) {
  if (ctx->opts.format == BENCH_JSON)
    print_json(ctx);
  else if (ctx->opts.format == BENCH_CSV)
    print_csv(ctx);
  else
    print_table(ctx);
  fflush(stdout);
  int failed = 0;
  for (size_t i = 0; i < ctx->nrows; i++)
    if (ctx->rows[i].error) failed++;
  return failed;
}
