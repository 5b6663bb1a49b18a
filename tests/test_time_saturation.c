/* Time arithmetic saturates: a deadline or timeout at either end of
 * int64_t means "long past" or "never", not a wrapped-around value.
 * iof_sleep_until(INT64_MIN) returns at once; iof_sleep_for(INT64_MAX) and
 * iof_sleep_until(INT64_MAX) wait until stopped; a timer set
 * INT64_MAX ns ahead does not fire at once and one set INT64_MIN ns ahead
 * has expired; iof_wait_readable(INT64_MAX) waits for the data; timed
 * sync waits with an INT64_MAX deadline wait for their wake (fiber and
 * plain thread); iof_with_deadline(INT64_MAX) lets fn finish. Under UBSan
 * these paths must not report a signed overflow either.
 *
 * IOF_TEST_THREADED */
#include "test_support.h"
#include "io_test.h"
#include "check_test.h"

#include <iofiber/iofiber.h>

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <unistd.h>

#define MS 1000000LL

IOF_TEST_WATCHDOG(arm_watchdog, disarm_watchdog, 30)

/* A chain stopped by a second fiber after `after` ns. */
typedef struct stopped_run {
  iof_stop_source src;
  int64_t after;
  int (*body)(void *);
  void *arg;
  int status;
  int64_t took_ns;
} stopped_run;

static int stopper(void *arg) {
  stopped_run *s = arg;
  iof_sleep_for(s->after);
  iof_stop_source_request(&s->src);
  return 0;
}

static void on_done(void *user, int status) {
  *(int *)user = status;
}

static int timed_body(void *arg) {
  stopped_run *s = arg;
  int64_t t0 = iof_now_ns();
  int r = s->body(s->arg);
  s->took_ns = iof_now_ns() - t0;
  return r;
}

/* Runs body(arg) in a chain on a fresh io_context, stopped after `after`
 * ns (0: never); returns its status. */
static int run_stopped_on(iof_io_context *io, int (*body)(void *), void *arg,
                          int64_t after, int64_t *took_ns) {
  stopped_run s = {.after = after, .body = body, .arg = arg, .status = 12345};
  assert_int_equal(iof_stop_source_init(&s.src), 0);
  iof_launch_opts o = {0};
  o.stop_token = iof_stop_source_token(&s.src);
  o.on_done = on_done;
  o.user = &s.status;
  assert_int_equal(
      iof_run_async(iof_io_context_executor(io), &o, timed_body, &s), 0);
  if (after > 0) launch(io, stopper, &s);
  run_all(io);
  iof_stop_source_destroy(&s.src);
  if (took_ns) *took_ns = s.took_ns;
  return s.status;
}

static int run_stopped(int (*body)(void *), void *arg, int64_t after,
                       int64_t *took_ns) {
  iof_io_context *io = new_io();
  int r = run_stopped_on(io, body, arg, after, took_ns);
  assert_int_equal(iof_io_context_destroy(io), 0);
  return r;
}

static int sleep_until_arg(void *arg) {
  return iof_sleep_until(*(int64_t *)arg);
}

static int sleep_for_arg(void *arg) {
  return iof_sleep_for(*(int64_t *)arg);
}

static void sleep_until_long_past_returns_at_once(void **state) {
  (void)state;
  int64_t d = INT64_MIN, took = 0;
  assert_int_equal(run_stopped(sleep_until_arg, &d, 0, &took), 0);
  assert_true(took < 1000 * MS);
  d = INT64_MIN + 1;
  assert_int_equal(run_stopped(sleep_until_arg, &d, 0, &took), 0);
  assert_true(took < 1000 * MS);
}

static void sleeps_of_int64_max_wait_until_stopped(void **state) {
  (void)state;
  int64_t d = INT64_MAX, took = 0;
  assert_int_equal(run_stopped(sleep_for_arg, &d, 20 * MS, &took), -ECANCELED);
  assert_true(took >= 15 * MS);
  assert_int_equal(run_stopped(sleep_until_arg, &d, 20 * MS, &took),
                   -ECANCELED);
  assert_true(took >= 15 * MS);
  d = INT64_MAX - 1;
  assert_int_equal(run_stopped(sleep_for_arg, &d, 20 * MS, &took), -ECANCELED);
  assert_true(took >= 15 * MS);
}

/* ---- timers ------------------------------------------------------------- */

typedef struct timer_case {
  iof_timer *t;
  int r;
} timer_case;

static int timer_wait_fn(void *arg) {
  return iof_timer_wait(arg);
}

static void timer_after_int64_max_does_not_fire_at_once(void **state) {
  (void)state;
  iof_io_context *io = new_io();
  iof_timer *t = iof_timer_create(io);
  assert_non_null(t);
  assert_int_equal(iof_timer_expires_after(t, INT64_MAX), 0);
  assert_int_equal(iof_timer_expiry(t), INT64_MAX);
  int64_t took = 0;
  /* The waiter gets cancelled by its stop token after 20 ms. */
  assert_int_equal(run_stopped_on(io, timer_wait_fn, t, 20 * MS, &took),
                   -ECANCELED);
  assert_true(took >= 15 * MS);
  /* Far in the past: expired, the wait returns at once. */
  assert_int_equal(iof_timer_expires_after(t, INT64_MIN), 0);
  assert_true(iof_timer_expiry(t) < iof_now_ns());
  assert_int_equal(run_stopped_on(io, timer_wait_fn, t, 0, &took), 0);
  assert_true(took < 1000 * MS);
  assert_int_equal(iof_timer_destroy(t), 0);
  assert_int_equal(iof_io_context_destroy(io), 0);
}

/* ---- io waits ----------------------------------------------------------- */

typedef struct pipe_case {
  iof_io_context *io;
  int fds[2];
  int r;
} pipe_case;

static int readable_forever(void *arg) {
  pipe_case *p = arg;
  p->r = iof_wait_readable(p->io, p->fds[0], INT64_MAX);
  return 0;
}

static int write_later(void *arg) {
  pipe_case *p = arg;
  iof_sleep_for(20 * MS);
  ssize_t n = write(p->fds[1], "x", 1);
  return n == 1 ? 0 : -EIO;
}

static void wait_readable_int64_max_waits_for_data(void **state) {
  (void)state;
  pipe_case p = {.r = 12345};
  p.io = new_io();
  assert_int_equal(pipe(p.fds), 0);
  uint64_t t0 = iof_test_now_ns();
  launch(p.io, readable_forever, &p);
  launch(p.io, write_later, &p);
  run_all(p.io);
  assert_int_equal(p.r, 0);
  assert_true(ms_since(t0) >= 15);
  assert_int_equal(iof_io_context_destroy(p.io), 0);
  close(p.fds[0]);
  close(p.fds[1]);
}

/* ---- sync waits and deadlines ------------------------------------------ */

typedef struct sem_case {
  iof_sem s;
  int r;
} sem_case;

static int sem_forever(void *arg) {
  sem_case *c = arg;
  c->r = iof_sem_timedwait(&c->s, INT64_MAX);
  return 0;
}

static int sem_post_later(void *arg) {
  sem_case *c = arg;
  iof_sleep_for(20 * MS);
  return iof_sem_post(&c->s);
}

static void *sem_forever_thread(void *arg) {
  sem_forever(arg);
  return NULL;
}

static void sync_deadline_int64_max_waits_for_the_wake(void **state) {
  (void)state;
  sem_case c = {.r = 12345};
  assert_int_equal(iof_sem_init(&c.s, 0), 0);
  iof_io_context *io = new_io();
  uint64_t t0 = iof_test_now_ns();
  launch(io, sem_forever, &c);
  launch(io, sem_post_later, &c);
  run_all(io);
  assert_int_equal(c.r, 0);
  assert_true(ms_since(t0) >= 15);
  /* A plain thread. */
  c.r = 12345;
  pthread_t th;
  assert_int_equal(pthread_create(&th, NULL, sem_forever_thread, &c), 0);
  sleep_ms(20);
  assert_int_equal(iof_sem_post(&c.s), 0);
  pthread_join(th, NULL);
  assert_int_equal(c.r, 0);
  assert_int_equal(iof_io_context_destroy(io), 0);
  assert_int_equal(iof_sem_destroy(&c.s), 0);
  /* iof_deadline_after saturates at both ends. */
  assert_int_equal(iof_deadline_after(INT64_MAX), INT64_MAX);
  assert_true(iof_deadline_after(INT64_MIN) <= iof_now_ns());
}

static int short_sleep(void *arg) {
  (void)arg;
  return iof_sleep_for(5 * MS) == 0 ? 7 : -EIO;
}

static int deadline_forever(void *arg) {
  (void)arg;
  return iof_with_deadline(INT64_MAX, short_sleep, NULL);
}

static void with_deadline_int64_max_lets_fn_finish(void **state) {
  (void)state;
  assert_int_equal(run_stopped(deadline_forever, NULL, 0, NULL), 7);
}

int main(void) {
  const struct CMUnitTest tests[] = {
#define T(f) cmocka_unit_test_setup_teardown(f, arm_watchdog, disarm_watchdog)
      T(sleep_until_long_past_returns_at_once),
      T(sleeps_of_int64_max_wait_until_stopped),
      T(timer_after_int64_max_does_not_fire_at_once),
      T(wait_readable_int64_max_waits_for_data),
      T(sync_deadline_int64_max_waits_for_the_wake),
      T(with_deadline_int64_max_lets_fn_finish),
#undef T
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
