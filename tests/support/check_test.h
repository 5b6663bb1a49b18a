/* Failure recording for checks made inside fibers (cmocka asserts
 * longjmp, never from a fiber): CHECK counts and prints, the test then
 * asserts the count on the main stack. Header-only. */
#ifndef IOF_CHECK_TEST_H
#define IOF_CHECK_TEST_H

#include "test_support.h"

#include <iofiber/iofiber.h>

#include <pthread.h>
#include <sched.h>
#include <stdbool.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

static atomic_int failures;

/* Counts a failed check and prints the first 20. */
static inline void fail_at(const char *file, int line, const char *expr) {
  if (atomic_fetch_add(&failures, 1) < 20)
    fprintf(stderr, "%s:%d: check failed: %s\n", file, line, expr);
}

#define CHECK(c)                                                               \
  do {                                                                         \
    if (!(c)) fail_at(__FILE__, __LINE__, #c);                                 \
  } while (0)

#define assert_no_failures() assert_int_equal(atomic_load(&failures), 0)

/* Fixture body: clears the failure count and arms a plain alarm. */
static inline void checks_begin(unsigned seconds) {
  atomic_store(&failures, 0);
  alarm(seconds);
}

/* Defines static cmocka fixtures setup (checks_begin(secs)) and teardown
 * (cancels the alarm). */
#define IOF_TEST_CHECK_FIXTURES(setup, teardown, secs)                         \
  static int setup(void **state) {                                             \
    (void)state;                                                               \
    checks_begin(secs);                                                        \
    return 0;                                                                  \
  }                                                                            \
  static int teardown(void **state) {                                          \
    (void)state;                                                               \
    alarm(0);                                                                  \
    return 0;                                                                  \
  }

/* Spins (yielding the CPU) until *flag is nonzero; false after ms. */
static inline bool wait_flag_ms(atomic_int *flag, long ms) {
  uint64_t deadline = iof_test_now_ns() + (uint64_t)ms * 1000000u;
  while (!atomic_load(flag)) {
    if (iof_test_now_ns() > deadline) return false;
    sched_yield();
  }
  return true;
}

/* A tracking allocator's stats, CHECKed to be readable. */
static inline iof_tracking_stats tstats(iof_frame_allocator *t) {
  iof_tracking_stats s;
  memset(&s, 0, sizeof s);
  CHECK(iof_tracking_allocator_stats(t, &s) == 0);
  return s;
}

/* pthread_self() is declared const: read it opaquely after a switch. */
static __attribute__((noinline, unused)) pthread_t self_thread(void) {
  pthread_t t = pthread_self();
  __asm__ volatile("" : : : "memory");
  return t;
}

/* A fresh io_context, asserted non-NULL. */
static inline iof_io_context *new_io(void) {
  iof_io_context *io = iof_io_context_create();
  assert_non_null(io);
  return io;
}

/* Runs fibers a, b and c (b, c may be NULL) on a fresh io_context until
 * all have ended. */
static inline void run_fibers3(iof_fn a, iof_fn b, iof_fn c) {
  iof_io_context *io = new_io();
  iof_executor_ref ex = iof_io_context_executor(io);
  assert_int_equal(iof_run_async(ex, NULL, a, NULL), 0);
  if (b) assert_int_equal(iof_run_async(ex, NULL, b, NULL), 0);
  if (c) assert_int_equal(iof_run_async(ex, NULL, c, NULL), 0);
  assert_true(iof_io_context_run(io) >= 0);
  assert_int_equal(iof_io_context_destroy(io), 0);
}

#endif
