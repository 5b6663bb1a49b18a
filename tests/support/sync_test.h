/* Helpers shared by the sync tests (test_mutex, test_cond, test_sem,
 * test_event, test_chan, test_when): a watchdog and chain runners.
 * Header-only. */
#ifndef IOF_SYNC_TEST_H
#define IOF_SYNC_TEST_H

#include "test_support.h"

#include <iofiber/iofiber.h>

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#if defined(__SANITIZE_THREAD__)
#define SYNC_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define SYNC_TSAN 1
#endif
#endif
#ifndef SYNC_TSAN
#define SYNC_TSAN 0
#endif

/* ---- watchdog ----------------------------------------------------------- */

/* cmocka setup: arms the shared watchdog (longer under TSan). */
static inline int sync_test_arm(void **state) {
  (void)state;
  iof_test_watchdog_arm(SYNC_TSAN ? 240 : 60);
  return 0;
}

/* cmocka teardown: cancels the watchdog. */
static inline int sync_test_disarm(void **state) {
  (void)state;
  alarm(0);
  return 0;
}

/* ---- runners ------------------------------------------------------------ */

/* Launches fn(arg) on a fresh io_context, runs it to the end, destroys it.
 * Returns fn's status (via on_done). */
static void sync_test_done(void *user, int status) {
  *(int *)user = status;
}

static inline int run_io(iof_fn fn, void *arg) {
  iof_io_context *io = iof_io_context_create();
  assert_non_null(io);
  int status = -12345;
  iof_launch_opts o = {0};
  o.on_done = sync_test_done;
  o.user = &status;
  assert_int_equal(iof_run_async(iof_io_context_executor(io), &o, fn, arg), 0);
  assert_true(iof_io_context_run(io) >= 0);
  assert_int_equal(iof_io_context_destroy(io), 0);
  return status;
}

#endif
