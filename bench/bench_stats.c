/* iof-bench statistics: see bench_stats.h. */
#include "bench_stats.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>

static int cmp_double(const void *x, const void *y) {
  double p = *(const double *)x, q = *(const double *)y;
  return (p > q) - (p < q);
}

double bench_median(double *v, size_t n) {
  if (n == 0) return NAN;
  qsort(v, n, sizeof *v, cmp_double);
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

static bool good(double x) {
  return isfinite(x) && x > 0;
}

double bench_spread(const double *v, size_t n) {
  if (n == 0) return NAN;
  double lo = v[0], hi = v[0];
  for (size_t i = 0; i < n; i++) {
    if (!good(v[i])) return NAN;
    if (v[i] < lo) lo = v[i];
    if (v[i] > hi) hi = v[i];
  }
  return hi / lo;
}

bool bench_is_noisy(double spread) {
  return !(spread <= BENCH_NOISY_SPREAD); /* NAN counts as noisy */
}

/* Small n (pairs per row): a fixed buffer keeps this allocation-free. */
#define PAIRS_MAX 1000

int bench_pair_stats_compute(const double *a, const double *b, size_t n,
                             bench_pair_stats *out) {
  if (n == 0 || n > PAIRS_MAX) return -EINVAL;
  double ra[PAIRS_MAX], rb[PAIRS_MAX], r[PAIRS_MAX];
  for (size_t i = 0; i < n; i++) {
    if (!good(a[i]) || !good(b[i])) return -EINVAL;
    ra[i] = a[i];
    rb[i] = b[i];
    r[i] = b[i] / a[i];
  }
  out->spread = bench_spread(r, n);
  out->ratio = bench_median(r, n);
  out->median_a = bench_median(ra, n);
  out->median_b = bench_median(rb, n); /* rb is sorted now */
  out->min_b = rb[0];
  out->max_b = rb[n - 1];
  return 0;
}

int bench_interleave(int pairs, int (*measure)(void *u, int side, double *out),
                     void *u, double *a, double *b) {
  for (int i = 0; i < pairs; i++) {
    int rc = measure(u, 0, &a[i]);
    if (rc < 0) return rc;
    rc = measure(u, 1, &b[i]);
    if (rc < 0) return rc;
  }
  return 0;
}
