/* iof-bench statistics: medians, paired ratios and their spread, and the
 * A/B interleaving order. Pure functions with no timing of their own, so
 * tests/test_bench_stats.c checks them directly. */
#ifndef IOF_BENCH_STATS_H
#define IOF_BENCH_STATS_H

#include <stdbool.h>
#include <stddef.h>

/* A row whose pair ratios spread wider than this (max/min) is "noisy". */
#define BENCH_NOISY_SPREAD 1.2

/* Median of v[0..n) (sorts v in place); NAN when n is 0. */
double bench_median(double *v, size_t n);

/* What a set of paired samples says: a[i] and b[i] were measured one right
 * after the other (pair i), so machine-wide noise hits both alike. */
typedef struct bench_pair_stats {
  double median_a, median_b; /* medians of each side on its own */
  double min_b, max_b;       /* range of b's samples */
  double ratio;              /* median of b[i] / a[i] */
  double spread;             /* max / min of those ratios (>= 1) */
} bench_pair_stats;

/* Fills *out from n pairs. 0, or -EINVAL when n is 0 or a sample is not
 * a positive finite number. */
int bench_pair_stats_compute(const double *a, const double *b, size_t n,
                             bench_pair_stats *out);

/* max/min of v[0..n) (positive samples), 1 when n < 2; NAN on bad input. */
double bench_spread(const double *v, size_t n);

/* Is this spread over the noisy threshold? */
bool bench_is_noisy(double spread);

/* Runs `pairs` interleaved pairs: measure(u, 0, &a[i]) then
 * measure(u, 1, &b[i]), for i = 0..pairs-1 (A B A B ...). Stops at the
 * first negative return of measure and returns it; 0 when all ran. */
int bench_interleave(int pairs, int (*measure)(void *u, int side, double *out),
                     void *u, double *a, double *b);

#endif
