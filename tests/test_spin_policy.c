/* The adaptive spin before parking (sched/sched_internal.h): what a spin
 * that found work, one that lost its CPU, one whose work came soon after
 * it and one followed by a long sleep do to the credit and the length. */
#include "test_support.h"

#include "sched/sched_internal.h"

#include <string.h>
#include <sys/prctl.h>
#include <time.h>

IOF_TEST_WATCHDOG(arm, disarm, 60)

/* Timed steps are tried again when a preemption stretched them: on a
 * machine busy with other tests most tries can be (each costs well under
 * a millisecond). */
#define ATTEMPTS 1000

static void nap_ns(int64_t ns) {
  struct timespec ts = {0, (long)ns};
  while (nanosleep(&ts, &ts) != 0) {
  }
}

static void found_adds_credit_up_to_the_cap(void **state) {
  (void)state;
  iof_spin_policy sp;
  memset(&sp, 0, sizeof sp);
  assert_int_equal(iof__spin_len(&sp), IOF_SPIN_NS);
  for (int i = 0; i < 3; i++) iof__spin_result(&sp, true, iof__now_ns(), 0);
  assert_int_equal(sp.credit, 3);
  for (int i = 0; i < 40; i++) iof__spin_result(&sp, true, iof__now_ns(), 0);
  assert_int_equal(sp.credit, IOF_SPIN_CREDIT_MAX);
  iof__spin_woke(&sp, 0); /* nothing was missed: no change */
  assert_int_equal(sp.credit, IOF_SPIN_CREDIT_MAX);
  assert_int_equal(iof__spin_len(&sp), IOF_SPIN_NS);
}

/* Without credit, one park in 32 probes with a spin. */
static void no_credit_probes_every_32nd_time(void **state) {
  (void)state;
  iof_spin_policy sp;
  memset(&sp, 0, sizeof sp);
  int allowed = 0;
  for (int i = 0; i < 320; i++) allowed += iof__spin_allowed(&sp);
  assert_int_equal(allowed, 10);
  sp.credit = 1;
  assert_true(iof__spin_allowed(&sp));
}

/* A spin that ended far past its length lost its CPU: credit halves and
 * the length is back to the base, whatever it had grown to. */
static void overrun_halves_and_resets(void **state) {
  (void)state;
  iof_spin_policy sp;
  memset(&sp, 0, sizeof sp);
  sp.credit = 8;
  sp.len = 100000;
  int64_t m =
      iof__spin_result(&sp, false, iof__now_ns() - 10 * IOF_SPIN_MAX_NS, 0);
  assert_true(m == 0); /* already judged */
  assert_int_equal(sp.credit, 4);
  assert_int_equal(iof__spin_len(&sp), IOF_SPIN_NS);
}

/* Work that came soon after a missed spin (the other side had to wake
 * up): the credit is at least 1 and the next spins are long enough to
 * have seen it, with margin. Timed on this thread's clock; a step that a
 * preemption stretched past the bounds is tried again. */
static void soon_after_a_miss_lengthens_the_spin(void **state) {
  (void)state;
  bool checked = false;
  for (int attempt = 0; attempt < ATTEMPTS && !checked; attempt++) {
    iof_spin_policy sp;
    memset(&sp, 0, sizeof sp);
    int64_t start = iof__now_ns() - IOF_SPIN_NS; /* a spin of the base */
    int64_t m = iof__spin_result(&sp, false, start, 0);
    if (m == 0) continue; /* preempted: read as an overrun */
    assert_true(m == start);
    nap_ns(50000); /* the answer comes 50 us later */
    int64_t before = iof__now_ns();
    iof__spin_woke(&sp, m);
    int64_t need = before - start;
    if (iof__now_ns() - start > IOF_SPIN_MAX_NS) continue; /* too late */
    assert_int_equal(sp.credit, 1);
    int64_t want = need + need / 2;
    if (want > IOF_SPIN_MAX_NS) want = IOF_SPIN_MAX_NS;
    assert_true(iof__spin_len(&sp) >= want);
    assert_true(iof__spin_len(&sp) > IOF_SPIN_NS);
    assert_true(iof__spin_len(&sp) <= IOF_SPIN_MAX_NS);
    /* Found work later: the length stays (it costs only when missing). */
    int64_t len = iof__spin_len(&sp);
    iof__spin_result(&sp, true, iof__now_ns(), 0);
    assert_int_equal(sp.credit, 2);
    assert_int_equal(iof__spin_len(&sp), len);
    checked = true;
  }
  assert_true(checked);
}

/* The length never passes the cap, and credit already there is kept. */
static void soon_keeps_credit_and_caps_the_length(void **state) {
  (void)state;
  bool checked = false;
  for (int attempt = 0; attempt < ATTEMPTS && !checked; attempt++) {
    iof_spin_policy sp;
    memset(&sp, 0, sizeof sp);
    sp.credit = 5;
    sp.len = IOF_SPIN_MAX_NS;
    int64_t start = iof__now_ns() - (IOF_SPIN_MAX_NS - 60000);
    int64_t m = iof__spin_result(&sp, false, start, 0);
    if (m == 0) continue;
    iof__spin_woke(&sp, m);
    if (iof__now_ns() - start > IOF_SPIN_MAX_NS) continue;
    assert_int_equal(sp.credit, 5);
    assert_int_equal(iof__spin_len(&sp), IOF_SPIN_MAX_NS);
    checked = true;
  }
  assert_true(checked);
}

/* Work that came later than the longest spin would have waited: the work
 * stopped or comes slowly; spinning would only burn CPU. */
static void late_after_a_miss_halves_and_resets(void **state) {
  (void)state;
  iof_spin_policy sp;
  memset(&sp, 0, sizeof sp);
  sp.credit = 6;
  sp.len = 200000;
  int64_t m = iof__spin_result(&sp, false, iof__now_ns(), 0);
  assert_true(m != 0);
  nap_ns(IOF_SPIN_MAX_NS + 50000);
  iof__spin_woke(&sp, m);
  assert_int_equal(sp.credit, 3);
  assert_int_equal(iof__spin_len(&sp), IOF_SPIN_NS);
  /* Idle phases take the credit down to none. */
  for (int i = 0; i < 3; i++) {
    m = iof__spin_result(&sp, false, iof__now_ns(), 0);
    nap_ns(IOF_SPIN_MAX_NS + 50000);
    iof__spin_woke(&sp, m);
  }
  assert_int_equal(sp.credit, 0);
}

/* The step ends the spin once its length has passed, not before, and
 * reports how long it spun. */
static void step_honours_the_length(void **state) {
  (void)state;
  int64_t len = 200000, spun = 0;
  int64_t start = iof__now_ns();
  int i = 1;
  while (iof__spin_step(start, i, len, &spun) && i < 100000000) i++;
  int64_t took = iof__now_ns() - start;
  assert_true(took >= len);
  assert_true(spun > len && spun <= took);
  assert_true(i < 100000000);
}

/* Spinning past the base length is paid from a budget refilled at
 * 1/IOF_SPIN_SHARE of the time that passes, capped: work that keeps
 * arriving just within the long spin cannot keep a thread spinning all
 * the time. Times are given, not measured. */
static void long_spins_are_paid_from_a_budget(void **state) {
  (void)state;
  const int64_t extra = IOF_SPIN_MAX_NS - IOF_SPIN_NS;
  iof_spin_policy sp;
  memset(&sp, 0, sizeof sp);
  assert_int_equal(iof__spin_begin(&sp, 5000000), IOF_SPIN_NS); /* base */
  sp.len = IOF_SPIN_MAX_NS;
  sp.filled_at = 1000000000;
  /* Nothing earned yet: the base length only. */
  assert_int_equal(iof__spin_begin(&sp, 1000000000), IOF_SPIN_NS);
  /* Not quite enough earned: still the base (no partial long spin). */
  int64_t t = 1000000000 + IOF_SPIN_SHARE * (extra - 1000);
  assert_int_equal(iof__spin_begin(&sp, t), IOF_SPIN_NS);
  /* Enough: the whole wanted length. */
  t += IOF_SPIN_SHARE * 1000;
  assert_int_equal(iof__spin_begin(&sp, t), IOF_SPIN_MAX_NS);
  /* That spin used it all (found work at its end). */
  iof__spin_result(&sp, true, t, IOF_SPIN_MAX_NS);
  assert_int_equal(sp.budget, 0);
  assert_int_equal(iof__spin_begin(&sp, t), IOF_SPIN_NS);
  /* A long pause earns no more than the cap. */
  t += 1000000000;
  assert_int_equal(iof__spin_begin(&sp, t), IOF_SPIN_MAX_NS);
  assert_int_equal(sp.budget, IOF_SPIN_BUDGET_NS);
  /* A short spin (found before the base length passed) costs nothing. */
  iof__spin_result(&sp, true, t, IOF_SPIN_NS / 2);
  assert_int_equal(sp.budget, IOF_SPIN_BUDGET_NS);
  /* A trickle: work every 200 us, found only by a long spin. Over 1 s the
   * spinning past the base stays within 1/IOF_SPIN_SHARE plus the cap. */
  int64_t spent = 0;
  for (int k = 0; k < 5000; k++) {
    t += 200000;
    int64_t len = iof__spin_begin(&sp, t);
    int64_t spun = len < 180000 ? len : 180000;
    spent += spun - IOF_SPIN_NS;
    iof__spin_result(&sp, true, t, spun);
  }
  assert_true(spent <= 1000000000 / IOF_SPIN_SHARE + IOF_SPIN_BUDGET_NS);
  assert_true(spent >= 1000000000 / IOF_SPIN_SHARE / 2);
}

/* With the budget spent, work that came soon after a miss no longer
 * keeps the thread spinning: it stops as after a late one. */
static void soon_without_budget_stops(void **state) {
  (void)state;
  bool checked = false;
  for (int attempt = 0; attempt < ATTEMPTS && !checked; attempt++) {
    iof_spin_policy sp;
    memset(&sp, 0, sizeof sp);
    sp.credit = 4;
    int64_t start = iof__now_ns() - IOF_SPIN_NS;
    sp.filled_at = start;
    sp.budget = -IOF_SPIN_BUDGET_NS; /* spent, and then some */
    int64_t m = iof__spin_result(&sp, false, start, IOF_SPIN_NS);
    if (m == 0) continue; /* preempted: read as an overrun */
    nap_ns(50000);
    iof__spin_woke(&sp, m);
    if (iof__now_ns() - start > 10000000) continue; /* refilled meanwhile */
    assert_int_equal(sp.credit, 2);
    assert_int_equal(iof__spin_len(&sp), IOF_SPIN_NS);
    checked = true;
  }
  assert_true(checked);
}

#define T(f) cmocka_unit_test_setup_teardown(f, arm, disarm)

int main(void) {
  /* Naps as short as asked: the default 50 us of slack is the size of the
   * gaps these tests time. */
  (void)prctl(PR_SET_TIMERSLACK, 1UL, 0, 0, 0);
  const struct CMUnitTest tests[] = {
      T(found_adds_credit_up_to_the_cap),
      T(no_credit_probes_every_32nd_time),
      T(overrun_halves_and_resets),
      T(soon_after_a_miss_lengthens_the_spin),
      T(soon_keeps_credit_and_caps_the_length),
      T(late_after_a_miss_halves_and_resets),
      T(step_honours_the_length),
      T(long_spins_are_paid_from_a_budget),
      T(soon_without_budget_stops),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
