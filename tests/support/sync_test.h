/* Helpers shared by the sync tests (test_mutex, test_cond, test_sem,
 * test_event, test_chan, test_when): a watchdog, chain runners, and a
 * stand-in timer provider for sched's timer hook (sched/timer_hook.h) so
 * that fiber timed waits can be tested without io/. Header-only. */
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

#include "sched/timer_hook.h"

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

/* ---- a stand-in timer provider ----------------------------------------- */
/* One background thread; armed timers in an unsorted list (tests arm a
 * handful). cancel waits for a fire in progress. */

typedef struct test_tnode {
  struct test_tnode *prev, *next;
  int64_t deadline;
  iof__timer *t;
} test_tnode;

_Static_assert(sizeof(test_tnode) <= IOF__TIMER_IMPL, "impl too small");

static struct {
  pthread_mutex_t m;
  pthread_cond_t c;
  test_tnode *head;
  iof__timer *firing;
  pthread_t thr;
  int started;
  int quit;
  atomic_int arms;
} test_timers = {PTHREAD_MUTEX_INITIALIZER,
                 PTHREAD_COND_INITIALIZER,
                 NULL,
                 NULL,
                 0,
                 0,
                 0,
                 0};

static void *test_timer_thread(void *arg) {
  (void)arg;
  pthread_mutex_lock(&test_timers.m);
  while (!test_timers.quit) {
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    int64_t t = (int64_t)now.tv_sec * 1000000000 + now.tv_nsec;
    test_tnode *due = NULL;
    for (test_tnode *n = test_timers.head; n; n = n->next)
      if (n->deadline <= t) {
        due = n;
        break;
      }
    if (due) {
      if (due->prev)
        due->prev->next = due->next;
      else
        test_timers.head = due->next;
      if (due->next) due->next->prev = due->prev;
      iof__timer *tm = due->t;
      test_timers.firing = tm;
      pthread_mutex_unlock(&test_timers.m);
      tm->fire(tm->arg);
      pthread_mutex_lock(&test_timers.m);
      test_timers.firing = NULL;
      pthread_cond_broadcast(&test_timers.c);
      continue;
    }
    /* Poll every millisecond: simple, and enough for tests. */
    pthread_mutex_unlock(&test_timers.m);
    sleep_ms(1);
    pthread_mutex_lock(&test_timers.m);
  }
  pthread_mutex_unlock(&test_timers.m);
  return NULL;
}

static int test_timer_arm(iof__timer *t, const iof_env *env, int64_t dl) {
  (void)env;
  test_tnode *n = (test_tnode *)(void *)t->impl;
  n->deadline = dl;
  n->t = t;
  atomic_fetch_add(&test_timers.arms, 1);
  pthread_mutex_lock(&test_timers.m);
  n->prev = NULL;
  n->next = test_timers.head;
  if (test_timers.head) test_timers.head->prev = n;
  test_timers.head = n;
  pthread_mutex_unlock(&test_timers.m);
  return 0;
}

static void test_timer_cancel(iof__timer *t) {
  test_tnode *n = (test_tnode *)(void *)t->impl;
  pthread_mutex_lock(&test_timers.m);
  for (test_tnode *x = test_timers.head; x; x = x->next)
    if (x == n) {
      if (n->prev)
        n->prev->next = n->next;
      else
        test_timers.head = n->next;
      if (n->next) n->next->prev = n->prev;
      break;
    }
  while (test_timers.firing == t)
    pthread_cond_wait(&test_timers.c, &test_timers.m);
  pthread_mutex_unlock(&test_timers.m);
}

static const iof__timer_provider test_timer_provider = {test_timer_arm,
                                                        test_timer_cancel};

/* Installs the stand-in provider (starting its thread once); returns the
 * provider that was installed before, to restore with
 * iof__timer_provider_set. */
static inline const iof__timer_provider *test_timer_install(void) {
  pthread_mutex_lock(&test_timers.m);
  if (!test_timers.started) {
    test_timers.started = 1;
    pthread_create(&test_timers.thr, NULL, test_timer_thread, NULL);
  }
  pthread_mutex_unlock(&test_timers.m);
  const iof__timer_provider *old = iof__timer_provider_get();
  iof__timer_provider_set(&test_timer_provider);
  return old;
}

/* Stops the provider thread (at the end of main). */
static inline void test_timer_shutdown(void) {
  pthread_mutex_lock(&test_timers.m);
  int started = test_timers.started;
  test_timers.quit = 1;
  pthread_mutex_unlock(&test_timers.m);
  if (started) pthread_join(test_timers.thr, NULL);
}

#endif
