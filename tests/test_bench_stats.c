/* iof-bench's statistics (bench/bench_stats.c): medians, paired ratios and
 * their spread, the noisy mark, and the A B A B interleaving order. */
#include "test_support.h"

#include <errno.h>
#include <math.h>
#include <string.h>

#include "bench/bench_stats.c"

static void median_odd_even_empty(void **state) {
  (void)state;
  double odd[] = {5, 1, 3};
  assert_true(bench_median(odd, 3) == 3);
  double even[] = {4, 1, 3, 2};
  assert_true(bench_median(even, 4) == 2.5);
  double one[] = {7};
  assert_true(bench_median(one, 1) == 7);
  assert_true(isnan(bench_median(one, 0)));
}

/* Load that slows both sides of a pair alike cancels out of the pair
 * ratios: the ratio is exact and the spread 1 even though each side's
 * samples vary 10x. */
static void pair_ratio_cancels_common_noise(void **state) {
  (void)state;
  double load[] = {1, 10, 2, 7, 1.5};
  double a[5], b[5];
  for (int i = 0; i < 5; i++) {
    a[i] = 100 * load[i];
    b[i] = 150 * load[i];
  }
  bench_pair_stats st;
  assert_int_equal(bench_pair_stats_compute(a, b, 5, &st), 0);
  assert_true(fabs(st.ratio - 1.5) < 1e-12);
  assert_true(fabs(st.spread - 1.0) < 1e-12);
  assert_false(bench_is_noisy(st.spread));
  assert_true(st.median_a == 200); /* 100,150,200,700,1000 */
  assert_true(st.median_b == 300);
  assert_true(st.min_b == 150 && st.max_b == 1500);
  /* The inputs are left as they were (the stats sort copies). */
  assert_true(a[1] == 1000 && b[1] == 1500);
}

/* The ratio is the median of the pair ratios, not a ratio of medians: one
 * pair hit by a burst on one side only moves neither. */
static void pair_ratio_is_median_of_ratios(void **state) {
  (void)state;
  double a[] = {10, 10, 10, 10, 10};
  double b[] = {20, 20, 200, 20, 22};
  bench_pair_stats st;
  assert_int_equal(bench_pair_stats_compute(a, b, 5, &st), 0);
  assert_true(fabs(st.ratio - 2.0) < 1e-12);
  assert_true(fabs(st.spread - 10.0) < 1e-12); /* 20 / 2 */
  assert_true(bench_is_noisy(st.spread));
  double c[] = {20, 21, 22, 23, 24};
  assert_int_equal(bench_pair_stats_compute(a, c, 5, &st), 0);
  assert_true(fabs(st.ratio - 2.2) < 1e-12);
  assert_true(fabs(st.spread - 1.2) < 1e-12);
  assert_false(bench_is_noisy(st.spread)); /* the threshold itself is fine */
  c[4] = 24.1;
  assert_int_equal(bench_pair_stats_compute(a, c, 5, &st), 0);
  assert_true(bench_is_noisy(st.spread));
}

static void pair_stats_reject_bad_input(void **state) {
  (void)state;
  double a[] = {1, 2}, b[] = {1, 0}, n[] = {1, NAN};
  bench_pair_stats st;
  assert_int_equal(bench_pair_stats_compute(a, b, 2, &st), -EINVAL);
  assert_int_equal(bench_pair_stats_compute(a, n, 2, &st), -EINVAL);
  assert_int_equal(bench_pair_stats_compute(a, a, 0, &st), -EINVAL);
  assert_true(bench_is_noisy(NAN));
  assert_true(isnan(bench_spread(b, 2)));
  assert_true(bench_spread(a, 1) == 1.0);
  assert_true(bench_spread(a, 2) == 2.0);
}

/* ---- interleaving ------------------------------------------------------ */

typedef struct order {
  char seq[64];
  int len;
  int fail_at; /* call index that fails, -1: none */
} order;

static int fake_measure(void *u, int side, double *out) {
  order *o = u;
  if (o->len == o->fail_at) return -EIO;
  o->seq[o->len++] = side ? 'B' : 'A';
  *out = side ? 2.0 * o->len : 1.0 * o->len;
  return 0;
}

static void interleave_alternates(void **state) {
  (void)state;
  order o = {.fail_at = -1};
  double a[5], b[5];
  assert_int_equal(bench_interleave(5, fake_measure, &o, a, b), 0);
  assert_string_equal(o.seq, "ABABABABAB");
  /* pair i is the (2i+1)-th and (2i+2)-th measurement */
  for (int i = 0; i < 5; i++) {
    assert_true(a[i] == 2 * i + 1);
    assert_true(b[i] == 2.0 * (2 * i + 2));
  }
}

static void interleave_stops_at_first_error(void **state) {
  (void)state;
  order o = {.fail_at = 3};
  double a[5], b[5];
  assert_int_equal(bench_interleave(5, fake_measure, &o, a, b), -EIO);
  assert_string_equal(o.seq, "ABA");
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(median_odd_even_empty),
      cmocka_unit_test(pair_ratio_cancels_common_noise),
      cmocka_unit_test(pair_ratio_is_median_of_ratios),
      cmocka_unit_test(pair_stats_reject_bad_input),
      cmocka_unit_test(interleave_alternates),
      cmocka_unit_test(interleave_stops_at_first_error),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
