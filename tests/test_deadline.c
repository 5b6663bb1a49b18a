/* iof_with_deadline:
 * the deadline cancels the operations inside and the call returns
 * -ETIMEDOUT; work that finishes first keeps its status and is not
 * cancelled later; a success that beat its own cancellation is kept;
 * completions racing the deadline give one of the two outcomes, never
 * another; the caller's token reaches inside (-ECANCELED, not
 * -ETIMEDOUT); nested deadlines; a zero deadline; a thread-pool fiber;
 * bad calls.
 *
 * IOF_TEST_THREADED */
#include "test_support.h"
#include "io_test.h"

#include <iofiber/iofiber.h>

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define MS 1000000LL

/* Per-test watchdog (support/test_support.h). */
IOF_TEST_WATCHDOG(arm_watchdog, disarm_watchdog, 30)

/* ---- bodies run under a deadline --------------------------------------- */

typedef struct body {
  int64_t sleep_ns;
  int inner;            /* what the blocking call inside returned */
  int status_on_cancel; /* returned when the inner call was cancelled */
  int status_on_success;
  atomic_int *started;
} body;

static int sleeping_body(void *arg) {
  body *b = arg;
  if (b->started) atomic_store(b->started, 1);
  b->inner = iof_sleep_for(b->sleep_ns);
  return b->inner == 0 ? b->status_on_success : b->status_on_cancel;
}

typedef struct guarded {
  int64_t deadline_ns;
  body b;
  int r;
  int64_t elapsed;
  int after_sleep; /* a sleep after the call is not cancelled */
} guarded;

static int guarded_fn(void *arg) {
  guarded *g = arg;
  int64_t t0 = iof_now_ns();
  g->r = iof_with_deadline(g->deadline_ns, sleeping_body, &g->b);
  g->elapsed = iof_now_ns() - t0;
  g->after_sleep = iof_sleep_for(g->deadline_ns + 20 * MS);
  return 0;
}

static void
deadline_expiry_cancels_the_work_and_returns_etimedout(void **state) {
  (void)state;
  iof_io_context *io = iof_io_context_create();
  assert_non_null(io);
  guarded g = {0};
  g.deadline_ns = 30 * MS;
  g.b.sleep_ns = 10000 * MS;
  g.b.status_on_cancel = -ECANCELED;
  g.b.status_on_success = 1;
  launch(io, guarded_fn, &g);
  run_all(io);
  assert_int_equal(g.b.inner, -ECANCELED);
  assert_int_equal(g.r, -ETIMEDOUT);
  assert_true(g.elapsed >= 30 * MS);
  assert_true(g.elapsed < 2000 * MS);
  assert_int_equal(g.after_sleep, 0); /* the caller's own token is intact */
  assert_int_equal(iof_io_context_destroy(io), 0);
}

static void work_done_before_the_deadline_keeps_its_status(void **state) {
  (void)state;
  iof_io_context *io = iof_io_context_create();
  assert_non_null(io);
  guarded g = {0};
  g.deadline_ns = 200 * MS;
  g.b.sleep_ns = 10 * MS;
  g.b.status_on_cancel = -ECANCELED;
  g.b.status_on_success = 42;
  launch(io, guarded_fn, &g);
  run_all(io);
  assert_int_equal(g.b.inner, 0);
  assert_int_equal(g.r, 42);
  assert_true(g.elapsed < 200 * MS);
  /* The deadline's timer is gone: the sleep after it (220 ms, past the
   * old deadline) is not cancelled. */
  assert_int_equal(g.after_sleep, 0);
  assert_int_equal(iof_io_context_destroy(io), 0);
}

static void success_that_beat_its_own_cancellation_is_kept(void **state) {
  (void)state;
  iof_io_context *io = iof_io_context_create();
  assert_non_null(io);
  guarded g = {0};
  g.deadline_ns = 20 * MS;
  g.b.sleep_ns = 10000 * MS;
  g.b.status_on_cancel = 7; /* ignores the cancellation and succeeds */
  g.b.status_on_success = 1;
  launch(io, guarded_fn, &g);
  run_all(io);
  assert_int_equal(g.b.inner, -ECANCELED);
  assert_int_equal(g.r, 7);
  assert_int_equal(iof_io_context_destroy(io), 0);
}

static void zero_or_negative_deadline_cancels_at_once(void **state) {
  (void)state;
  iof_io_context *io = iof_io_context_create();
  assert_non_null(io);
  guarded g[2];
  memset(g, 0, sizeof g);
  for (int i = 0; i < 2; i++) {
    g[i].deadline_ns = i == 0 ? 0 : -5 * MS;
    g[i].b.sleep_ns = 10000 * MS;
    g[i].b.status_on_cancel = -ECANCELED;
    g[i].b.status_on_success = 1;
    launch(io, guarded_fn, &g[i]);
  }
  run_all(io);
  for (int i = 0; i < 2; i++) {
    assert_int_equal(g[i].b.inner, -ECANCELED);
    assert_int_equal(g[i].r, -ETIMEDOUT);
    assert_true(g[i].elapsed < 1000 * MS);
  }
  assert_int_equal(iof_io_context_destroy(io), 0);
}

/* ---- racing completions -------------------------------------------------- */

#define RACES 200

typedef struct race {
  int64_t deadline_ns, sleep_ns;
  int inner, r;
} race;

static int race_body(void *arg) {
  race *rc = arg;
  rc->inner = iof_sleep_for(rc->sleep_ns);
  return rc->inner == 0 ? 5 : rc->inner;
}

static int race_fn(void *arg) {
  race *rc = arg;
  rc->r = iof_with_deadline(rc->deadline_ns, race_body, rc);
  return 0;
}

static void
completion_racing_the_deadline_gives_one_of_two_outcomes(void **state) {
  (void)state;
  iof_io_context *io = iof_io_context_create();
  assert_non_null(io);
  static race rc[RACES];
  memset(rc, 0, sizeof rc);
  unsigned seed = 7;
  for (int i = 0; i < RACES; i++) {
    seed = seed * 1103515245u + 12345u;
    /* Deadline and completion within +-200 us of each other, at 2 ms. */
    rc[i].deadline_ns = 2 * MS;
    rc[i].sleep_ns = 2 * MS + ((int64_t)((seed >> 8) % 400001) - 200000);
    launch(io, race_fn, &rc[i]);
  }
  run_all(io);
  int won = 0, timed_out = 0;
  for (int i = 0; i < RACES; i++) {
    if (rc[i].r == 5) {
      assert_int_equal(rc[i].inner, 0);
      won++;
    } else {
      assert_int_equal(rc[i].r, -ETIMEDOUT);
      assert_int_equal(rc[i].inner, -ECANCELED);
      timed_out++;
    }
  }
  assert_int_equal(won + timed_out, RACES);
  print_message("%d completions won, %d deadlines won\n", won, timed_out);
  assert_int_equal(iof_io_context_destroy(io), 0);
}

/* ---- the caller's token, nesting --------------------------------------- */

typedef struct parent {
  atomic_int started;
  body b;
  int r;
} parent;

static int parent_fn(void *arg) {
  parent *p = arg;
  p->r = iof_with_deadline(10000 * MS, sleeping_body, &p->b);
  return 0;
}

typedef struct requester {
  atomic_int *started;
  iof_stop_source *src;
  bool ok;
} requester;

static void *request_later(void *arg) {
  requester *rq = arg;
  rq->ok = wait_flag(rq->started);
  sleep_ms(20);
  iof_stop_source_request(rq->src);
  return NULL;
}

static void callers_stop_request_reaches_inside_as_ecanceled(void **state) {
  (void)state;
  iof_io_context *io = iof_io_context_create();
  assert_non_null(io);
  parent p = {0};
  p.b.sleep_ns = 10000 * MS;
  p.b.status_on_cancel = -ECANCELED;
  p.b.status_on_success = 1;
  p.b.started = &p.started;
  iof_stop_source src;
  assert_int_equal(iof_stop_source_init(&src), 0);
  iof_launch_opts o = {0};
  o.stop_token = iof_stop_source_token(&src);
  assert_int_equal(
      iof_run_async(iof_io_context_executor(io), &o, parent_fn, &p), 0);
  requester rq = {&p.started, &src, false};
  pthread_t t;
  assert_int_equal(pthread_create(&t, NULL, request_later, &rq), 0);
  int64_t t0 = iof_now_ns();
  run_all(io);
  pthread_join(t, NULL);
  assert_true(rq.ok);
  assert_int_equal(p.b.inner, -ECANCELED);
  assert_int_equal(p.r, -ECANCELED); /* the deadline did not fire */
  assert_true(iof_now_ns() - t0 < 5000 * MS);
  iof_stop_source_destroy(&src);
  assert_int_equal(iof_io_context_destroy(io), 0);
}

typedef struct nested {
  int64_t outer_ns, inner_ns;
  body b;
  int inner_r, outer_r;
  int64_t elapsed;
} nested;

static int nested_inner(void *arg) {
  nested *n = arg;
  n->inner_r = iof_with_deadline(n->inner_ns, sleeping_body, &n->b);
  return n->inner_r;
}

static int nested_fn(void *arg) {
  nested *n = arg;
  int64_t t0 = iof_now_ns();
  n->outer_r = iof_with_deadline(n->outer_ns, nested_inner, n);
  n->elapsed = iof_now_ns() - t0;
  return 0;
}

static void nested_deadlines_the_nearer_one_wins(void **state) {
  (void)state;
  iof_io_context *io = iof_io_context_create();
  assert_non_null(io);
  nested a = {0}, b = {0};
  a.outer_ns = 30 * MS; /* outer fires first */
  a.inner_ns = 10000 * MS;
  b.outer_ns = 10000 * MS; /* inner fires first */
  b.inner_ns = 30 * MS;
  nested *ns[2] = {&a, &b};
  for (int i = 0; i < 2; i++) {
    ns[i]->b.sleep_ns = 10000 * MS;
    ns[i]->b.status_on_cancel = -ECANCELED;
    ns[i]->b.status_on_success = 1;
    launch(io, nested_fn, ns[i]);
  }
  run_all(io);
  /* Outer first: the inner call sees its parent's stop, not its own
   * deadline; the outer one reports its deadline. */
  assert_int_equal(a.b.inner, -ECANCELED);
  assert_int_equal(a.inner_r, -ECANCELED);
  assert_int_equal(a.outer_r, -ETIMEDOUT);
  /* Inner first: -ETIMEDOUT passes out as fn's failure; the outer
   * deadline did not fire. */
  assert_int_equal(b.inner_r, -ETIMEDOUT);
  assert_int_equal(b.outer_r, -ETIMEDOUT);
  for (int i = 0; i < 2; i++) {
    assert_true(ns[i]->elapsed >= 30 * MS);
    assert_true(ns[i]->elapsed < 2000 * MS);
  }
  assert_int_equal(iof_io_context_destroy(io), 0);
}

/* A read blocked inside a deadline (not just a sleep). */
typedef struct read_deadline {
  iof_socket *s;
  ssize_t inner;
  int r;
} read_deadline;

static int read_body(void *arg) {
  read_deadline *rd = arg;
  char buf[8];
  rd->inner = iof_read_some(rd->s, buf, sizeof buf);
  return rd->inner < 0 ? (int)rd->inner : 0;
}

static int read_deadline_fn(void *arg) {
  read_deadline *rd = arg;
  rd->r = iof_with_deadline(20 * MS, read_body, rd);
  return 0;
}

static void deadline_cancels_a_blocked_read(void **state) {
  (void)state;
  iof_io_context *io = iof_io_context_create();
  assert_non_null(io);
  int sv[2];
  assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
  read_deadline rd = {0};
  assert_int_equal(iof_socket_adopt(io, sv[0], &rd.s), 0);
  launch(io, read_deadline_fn, &rd);
  run_all(io);
  assert_int_equal(rd.inner, -ECANCELED);
  assert_int_equal(rd.r, -ETIMEDOUT);
  close(sv[1]);
  assert_int_equal(iof_io_context_destroy(io), 0);
}

typedef struct destroyed {
  body b;
  int r;
  int after;
} destroyed;

static int destroyed_fn(void *arg) {
  destroyed *d = arg;
  d->r = iof_with_deadline(10000 * MS, sleeping_body, &d->b);
  d->after = 1;
  return 0;
}

static void
destroying_the_context_inside_a_deadline_ends_it_cleanly(void **state) {
  (void)state;
  iof_io_context *io = iof_io_context_create();
  assert_non_null(io);
  destroyed d = {0};
  d.b.sleep_ns = 10000 * MS;
  d.b.status_on_cancel = -ECANCELED;
  d.b.status_on_success = 1;
  launch(io, destroyed_fn, &d);
  assert_int_equal(iof_io_context_poll(io), 1); /* now asleep inside */
  assert_int_equal(iof_io_context_destroy(io), 0);
  assert_int_equal(d.b.inner, -ECANCELED);
  assert_int_equal(d.r, -ECANCELED); /* shutdown, not the deadline */
  assert_int_equal(d.after, 1);
}

/* ---- from a thread pool, bad calls --------------------------------------- */

typedef struct pooled {
  guarded g;
  iof_executor_ref pool_ex;
  bool back_on_pool;
  atomic_int done;
} pooled;

static int pooled_fn(void *arg) {
  pooled *p = arg;
  guarded_fn(&p->g);
  p->back_on_pool = iof_executor_equal(iof_env_current()->executor, p->pool_ex);
  return 0;
}

static void pooled_done(void *user, int status) {
  (void)status;
  atomic_store(&((pooled *)user)->done, 1);
}

static void deadline_in_a_thread_pool_fiber(void **state) {
  (void)state;
  iof_thread_pool *pool = iof_thread_pool_create(2);
  assert_non_null(pool);
  pooled p = {0};
  p.pool_ex = iof_thread_pool_executor(pool);
  p.g.deadline_ns = 30 * MS;
  p.g.b.sleep_ns = 10000 * MS;
  p.g.b.status_on_cancel = -ECANCELED;
  p.g.b.status_on_success = 1;
  iof_launch_opts o = {0};
  o.on_done = pooled_done;
  o.user = &p;
  assert_int_equal(iof_run_async(p.pool_ex, &o, pooled_fn, &p), 0);
  assert_true(wait_flag(&p.done));
  assert_int_equal(p.g.r, -ETIMEDOUT);
  assert_int_equal(p.g.b.inner, -ECANCELED);
  assert_int_equal(p.g.after_sleep, 0);
  assert_true(p.back_on_pool);
  assert_int_equal(iof_thread_pool_destroy(pool), 0);
}

static int never_runs(void *arg) {
  *(int *)arg = 1;
  return 0;
}

static int null_fn_fn(void *arg) {
  *(int *)arg = iof_with_deadline(MS, NULL, NULL);
  return 0;
}

static void deadline_outside_a_fiber_is_eperm_and_null_fn_einval(void **state) {
  (void)state;
  int ran = 0;
  assert_int_equal(iof_with_deadline(MS, never_runs, &ran), -EPERM);
  assert_int_equal(ran, 0);
  iof_io_context *io = iof_io_context_create();
  assert_non_null(io);
  int r = 0;
  launch(io, null_fn_fn, &r);
  run_all(io);
  assert_int_equal(r, -EINVAL);
  assert_int_equal(iof_io_context_destroy(io), 0);
}

#define T(f) cmocka_unit_test_setup_teardown(f, arm_watchdog, disarm_watchdog)

int main(void) {
  const struct CMUnitTest tests[] = {
      T(deadline_expiry_cancels_the_work_and_returns_etimedout),
      T(work_done_before_the_deadline_keeps_its_status),
      T(success_that_beat_its_own_cancellation_is_kept),
      T(zero_or_negative_deadline_cancels_at_once),
      T(completion_racing_the_deadline_gives_one_of_two_outcomes),
      T(callers_stop_request_reaches_inside_as_ecanceled),
      T(nested_deadlines_the_nearer_one_wins),
      T(deadline_cancels_a_blocked_read),
      T(destroying_the_context_inside_a_deadline_ends_it_cleanly),
      T(deadline_in_a_thread_pool_fiber),
      T(deadline_outside_a_fiber_is_eperm_and_null_fn_einval),
  };
  if (getenv("IOF_TEST_FILTER"))
    cmocka_set_test_filter(getenv("IOF_TEST_FILTER"));
  return cmocka_run_group_tests(tests, NULL, NULL);
}
