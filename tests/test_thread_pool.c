/* Thread pool: posts from many threads, inline dispatch on pool
 * threads, join waiting for tracked work, stop abandoning the queue,
 * destroy cancelling never-started chains and never hanging, EINVAL and
 * EDEADLK.
 *
 * IOF_TEST_THREADED */
#include "test_support.h"

#include <iofiber/iofiber.h>

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* Per-test watchdog (support/test_support.h). */
IOF_TEST_WATCHDOG(arm, disarm, 30)

static bool wait_count(atomic_int *c, int want) {
  for (int i = 0; i < 10000; i++) {
    if (atomic_load(c) >= want) return true;
    sleep_ms(1);
  }
  return false;
}

/* ---- posts from many threads -----------------------------------------------
 */

#define POSTERS 8
#define PER_POSTER 100

typedef struct post_shared {
  iof_executor_ref ex;
  atomic_int fn_runs;
  atomic_int done_calls;
  atomic_int raw_runs;
  atomic_int launch_errors;
  atomic_int post_errors;
  pthread_t main_thread;
  atomic_int ran_on_main;
  pthread_barrier_t bar;
} post_shared;

static int post_chain_fn(void *arg) {
  post_shared *s = arg;
  if (pthread_equal(pthread_self(), s->main_thread))
    atomic_fetch_add(&s->ran_on_main, 1);
  atomic_fetch_add(&s->fn_runs, 1);
  return 0;
}

static void post_chain_done(void *user, int status) {
  post_shared *s = user;
  if (status == 0) atomic_fetch_add(&s->done_calls, 1);
}

static int raw_count_fn(void *arg) {
  atomic_fetch_add(&((post_shared *)arg)->raw_runs, 1);
  return 0;
}

typedef struct poster {
  post_shared *s;
  iof_fiber *raw[PER_POSTER];
} poster;

static void *poster_main(void *arg) {
  poster *p = arg;
  post_shared *s = p->s;
  iof_launch_opts o;
  memset(&o, 0, sizeof o);
  o.on_done = post_chain_done;
  o.user = s;
  pthread_barrier_wait(&s->bar);
  for (int i = 0; i < PER_POSTER; i++) {
    if (iof_run_async(s->ex, &o, post_chain_fn, s) != 0)
      atomic_fetch_add(&s->launch_errors, 1);
    if (!p->raw[i] || iof_executor_post(s->ex, p->raw[i]) != 0)
      atomic_fetch_add(&s->post_errors, 1);
  }
  return NULL;
}

static void post_from_many_threads_all_run(void **state) {
  (void)state;
  iof_thread_pool *p = iof_thread_pool_create(4);
  assert_non_null(p);
  static post_shared s;
  memset(&s, 0, sizeof s);
  s.ex = iof_thread_pool_executor(p);
  s.main_thread = pthread_self();
  pthread_barrier_init(&s.bar, NULL, POSTERS);
  static poster ps[POSTERS];
  pthread_t t[POSTERS];
  for (int i = 0; i < POSTERS; i++) {
    ps[i].s = &s;
    for (int j = 0; j < PER_POSTER; j++)
      ps[i].raw[j] =
          iof_fiber_create(NULL, IOF_FIBER_STACK_MIN, raw_count_fn, &s);
    assert_int_equal(pthread_create(&t[i], NULL, poster_main, &ps[i]), 0);
  }
  for (int i = 0; i < POSTERS; i++) pthread_join(t[i], NULL);
  pthread_barrier_destroy(&s.bar);
  assert_int_equal(atomic_load(&s.launch_errors), 0);
  assert_int_equal(atomic_load(&s.post_errors), 0);
  /* Raw fibers are not tracked work: wait for them (bounded). */
  assert_true(wait_count(&s.raw_runs, POSTERS * PER_POSTER));
  /* join waits for the launched chains (tracked work). */
  assert_int_equal(iof_thread_pool_join(p), 0);
  assert_int_equal(atomic_load(&s.fn_runs), POSTERS * PER_POSTER);
  assert_int_equal(atomic_load(&s.done_calls), POSTERS * PER_POSTER);
  assert_int_equal(atomic_load(&s.raw_runs), POSTERS * PER_POSTER);
  assert_int_equal(atomic_load(&s.ran_on_main), 0);
  for (int i = 0; i < POSTERS; i++)
    for (int j = 0; j < PER_POSTER; j++) {
      assert_true(iof_fiber_done(ps[i].raw[j]));
      assert_int_equal(iof_fiber_destroy(ps[i].raw[j]), 0);
    }
  assert_int_equal(iof_thread_pool_destroy(p), 0);
}

/* ---- dispatch
 * ------------------------------------------------------------------ */

typedef struct dispatch_aw {
  iof_fiber *h;
  iof_fiber *result;
} dispatch_aw;

static iof_fiber *dispatch_suspend(void *self, iof_fiber *h,
                                   const iof_env *env) {
  dispatch_aw *d = self;
  d->h = h;
  d->result = iof_executor_dispatch(env->executor, h);
  return d->result;
}

static const iof_awaitable_vtbl dispatch_vt = {NULL, dispatch_suspend, NULL};

typedef struct raw_rec {
  atomic_int ran;
  pthread_t thread;
} raw_rec;

static int raw_fn(void *arg) {
  raw_rec *r = arg;
  r->thread = pthread_self();
  atomic_fetch_add(&r->ran, 1);
  return 0;
}

typedef struct disp_rec {
  iof_executor_ref ex;
  dispatch_aw aw;
  pthread_t before, after;
  iof_fiber *direct_h;
  iof_fiber *direct_result;
  raw_rec raw;
} disp_rec;

static int disp_fn(void *arg) {
  disp_rec *r = arg;
  r->before = pthread_self();
  r->direct_h = iof_fiber_create(NULL, IOF_FIBER_STACK_MIN, raw_fn, &r->raw);
  r->direct_result = iof_executor_dispatch(r->ex, r->direct_h);
  iof_fiber_destroy(r->direct_h);
  iof_await(&r->aw, &dispatch_vt);
  r->after = pthread_self();
  return 0;
}

static void dispatch_inline_on_pool_thread_queues_from_outside(void **state) {
  (void)state;
  iof_thread_pool *p = iof_thread_pool_create(2);
  assert_non_null(p);
  iof_executor_ref ex = iof_thread_pool_executor(p);
  disp_rec r;
  memset(&r, 0, sizeof r);
  r.ex = ex;
  assert_int_equal(iof_launch(ex, disp_fn, &r), 0);

  /* From outside the pool: queued, NULL, errno untouched, runs on a pool
   * thread. */
  raw_rec raw;
  memset(&raw, 0, sizeof raw);
  iof_fiber *h = iof_fiber_create(NULL, IOF_FIBER_STACK_MIN, raw_fn, &raw);
  assert_non_null(h);
  errno = 0;
  assert_null(iof_executor_dispatch(ex, h));
  assert_int_equal(errno, 0);
  assert_true(wait_count(&raw.ran, 1));

  assert_int_equal(iof_thread_pool_join(p), 0);
  assert_non_null(r.direct_h);
  assert_ptr_equal(r.direct_result, r.direct_h); /* inline from pool thread */
  assert_int_equal(atomic_load(&r.raw.ran), 0);
  assert_non_null(r.aw.h);
  assert_ptr_equal(r.aw.result, r.aw.h);
  assert_false(pthread_equal(r.before, pthread_self()));
  /* Resumed inline on the same pool thread: no trip through the queue. */
  assert_true(pthread_equal(r.before, r.after));
  assert_false(pthread_equal(raw.thread, pthread_self()));
  assert_int_equal(iof_fiber_destroy(h), 0);
  assert_int_equal(iof_thread_pool_destroy(p), 0);
}

/* ---- join
 * ----------------------------------------------------------------------- */

typedef struct slow_rec {
  atomic_int done;
} slow_rec;

static int slow_fn(void *arg) {
  (void)arg;
  sleep_ms(50);
  iof_yield();
  sleep_ms(10);
  return 0;
}

static void slow_done(void *user, int status) {
  if (status == 0) atomic_fetch_add(&((slow_rec *)user)->done, 1);
}

typedef struct guard_later {
  iof_work_guard *g;
  atomic_int fired;
} guard_later;

static void *reset_later(void *arg) {
  guard_later *gl = arg;
  sleep_ms(200);
  atomic_store(&gl->fired, 1);
  iof_work_guard_reset(gl->g);
  return NULL;
}

static void join_waits_for_tracked_work(void **state) {
  (void)state;
  iof_thread_pool *p = iof_thread_pool_create(2);
  assert_non_null(p);
  iof_executor_ref ex = iof_thread_pool_executor(p);
  slow_rec r = {0};
  iof_launch_opts o;
  memset(&o, 0, sizeof o);
  o.on_done = slow_done;
  o.user = &r;
  for (int i = 0; i < 8; i++)
    assert_int_equal(iof_run_async(ex, &o, slow_fn, NULL), 0);
  /* And a guard reset by another thread after 200 ms. */
  iof_work_guard g;
  assert_int_equal(iof_work_guard_init(&g, ex), 0);
  guard_later gl = {&g, 0};
  pthread_t t;
  uint64_t t0 = iof_test_now_ns();
  assert_int_equal(pthread_create(&t, NULL, reset_later, &gl), 0);
  assert_int_equal(iof_thread_pool_join(p), 0);
  int64_t el = ms_since(t0);
  int done_at_join = atomic_load(&r.done);
  int fired_at_join = atomic_load(&gl.fired);
  pthread_join(t, NULL);
  assert_int_equal(done_at_join, 8);
  assert_int_equal(fired_at_join, 1);
  assert_true(el >= 150);
  assert_int_equal(iof_thread_pool_join(p), 0); /* a second join returns */
  assert_int_equal(iof_thread_pool_destroy(p), 0);
}

/* ---- stop and destroy
 * ------------------------------------------------------------ */

#define QUEUED 10

typedef struct cancel_rec {
  atomic_int gate;
  atomic_int gate_started;
  atomic_int fn_runs;
  atomic_int done_calls[QUEUED + 1];
  atomic_int done_status[QUEUED + 1];
} cancel_rec;

typedef struct cancel_arg {
  cancel_rec *r;
  int idx;
} cancel_arg;

static int gate_fn(void *arg) {
  cancel_arg *a = arg;
  atomic_store(&a->r->gate_started, 1);
  for (int i = 0; i < 10000 && !atomic_load(&a->r->gate); i++) sleep_ms(1);
  atomic_fetch_add(&a->r->fn_runs, 1);
  return 0;
}

static int queued_fn(void *arg) {
  cancel_arg *a = arg;
  atomic_fetch_add(&a->r->fn_runs, 1);
  return 0;
}

static void cancel_done(void *user, int status) {
  cancel_arg *a = user;
  atomic_fetch_add(&a->r->done_calls[a->idx], 1);
  atomic_store(&a->r->done_status[a->idx], status);
}

static void stop_abandons_queue_destroy_cancels_never_started(void **state) {
  (void)state;
  iof_thread_pool *p = iof_thread_pool_create(1);
  assert_non_null(p);
  iof_executor_ref ex = iof_thread_pool_executor(p);
  iof_frame_allocator *track = iof_tracking_allocator_create(NULL);
  assert_non_null(track);
  assert_int_equal(
      iof_context_set_frame_allocator(iof_thread_pool_context(p), track), 0);
  static cancel_rec r;
  memset(&r, 0, sizeof r);
  cancel_arg args[QUEUED + 1];
  for (int i = 0; i <= QUEUED; i++) {
    args[i].r = &r;
    args[i].idx = i;
    iof_launch_opts o;
    memset(&o, 0, sizeof o);
    o.on_done = cancel_done;
    o.user = &args[i];
    assert_int_equal(
        iof_run_async(ex, &o, i == 0 ? gate_fn : queued_fn, &args[i]), 0);
    if (i == 0) assert_true(wait_count(&r.gate_started, 1));
  }
  iof_thread_pool_stop(p);
  atomic_store(&r.gate, 1);
  sleep_ms(50); /* the worker finishes the gate chain and exits */
  assert_int_equal(atomic_load(&r.fn_runs), 1);
  for (int i = 1; i <= QUEUED; i++)
    assert_int_equal(atomic_load(&r.done_calls[i]), 0);
  iof_tracking_stats st;
  assert_int_equal(iof_tracking_allocator_stats(track, &st), 0);
  assert_int_equal(st.live, QUEUED);

  assert_int_equal(iof_thread_pool_destroy(p), 0);
  assert_int_equal(atomic_load(&r.fn_runs), 1); /* queued fns never ran */
  assert_int_equal(atomic_load(&r.done_calls[0]), 1);
  assert_int_equal(atomic_load(&r.done_status[0]), 0);
  for (int i = 1; i <= QUEUED; i++) {
    assert_int_equal(atomic_load(&r.done_calls[i]), 1);
    assert_int_equal(atomic_load(&r.done_status[i]), -ECANCELED);
  }
  assert_int_equal(iof_tracking_allocator_stats(track, &st), 0);
  assert_int_equal(st.live, 0);
  assert_int_equal(st.total, QUEUED + 1);
  assert_int_equal(iof_tracking_allocator_destroy(track), 0);
}

/* A chain suspended on an operation nobody will ever complete (and no
 * service holds): destroy reports it and returns -EBUSY, it does not
 * hang; once the chain ends a second destroy frees the pool. */
static iof_fiber *_Atomic dropped;

static iof_fiber *drop_suspend(void *self, iof_fiber *h, const iof_env *env) {
  (void)env;
  atomic_store(&dropped, h);
  atomic_store((atomic_int *)self, 1);
  return NULL;
}

static const iof_awaitable_vtbl drop_vt = {NULL, drop_suspend, NULL};

static int stuck_fn(void *arg) {
  iof_await(arg, &drop_vt);
  return 0;
}

static int busy_fn(void *arg) {
  (void)arg;
  sleep_ms(100);
  return 0;
}

static void destroy_never_hangs(void **state) {
  (void)state;
  /* Busy threads, queued chains and a chain that never ends. */
  iof_thread_pool *p = iof_thread_pool_create(2);
  assert_non_null(p);
  iof_executor_ref ex = iof_thread_pool_executor(p);
  atomic_int suspended = 0;
  assert_int_equal(iof_launch(ex, stuck_fn, &suspended), 0);
  assert_true(wait_count(&suspended, 1));
  for (int i = 0; i < 6; i++)
    assert_int_equal(iof_launch(ex, busy_fn, NULL), 0);
  iof_work_guard g; /* never reset: counted work forever */
  assert_int_equal(iof_work_guard_init(&g, ex), 0);
  uint64_t t0 = iof_test_now_ns();
  /* Never hangs, never frees the pool under the counted work. */
  assert_int_equal(iof_thread_pool_destroy(p), -EBUSY);
  assert_true(ms_since(t0) < 5000);
  iof_work_guard_reset(&g);
  assert_int_equal(iof_thread_pool_destroy(p), -EBUSY); /* the stuck one */
  assert_int_equal(iof_executor_post(ex, atomic_exchange(&dropped, NULL)), 0);
  assert_int_equal(iof_thread_pool_destroy(p), 0);

  /* An idle pool with nothing at all. */
  p = iof_thread_pool_create(3);
  assert_non_null(p);
  t0 = iof_test_now_ns();
  assert_int_equal(iof_thread_pool_destroy(p), 0);
  assert_true(ms_since(t0) < 2000);

  /* A stopped and joined pool. */
  p = iof_thread_pool_create(2);
  assert_non_null(p);
  iof_thread_pool_stop(p);
  assert_int_equal(iof_thread_pool_join(p), 0);
  assert_int_equal(iof_thread_pool_destroy(p), 0);
}

static void create_zero_threads_returns_einval(void **state) {
  (void)state;
  errno = 0;
  assert_null(iof_thread_pool_create(0));
  assert_int_equal(errno, EINVAL);
  errno = 0;
  assert_null(iof_thread_pool_create(1025));
  assert_int_equal(errno, EINVAL);
  assert_int_equal(iof_thread_pool_join(NULL), -EINVAL);
  assert_int_equal(iof_thread_pool_destroy(NULL), -EINVAL);
  iof_executor_ref e = iof_thread_pool_executor(NULL);
  assert_true(iof_executor_empty(e));
  assert_null(iof_thread_pool_context(NULL));
}

typedef struct deadlk_rec {
  iof_thread_pool *p;
  int join;
  int destroy;
  atomic_int ran;
} deadlk_rec;

static int deadlk_fn(void *arg) {
  deadlk_rec *d = arg;
  d->join = iof_thread_pool_join(d->p);
  d->destroy = iof_thread_pool_destroy(d->p);
  atomic_store(&d->ran, 1);
  return 0;
}

static void join_or_destroy_from_pool_thread_returns_edeadlk(void **state) {
  (void)state;
  iof_thread_pool *p = iof_thread_pool_create(2);
  assert_non_null(p);
  deadlk_rec d;
  memset(&d, 0, sizeof d);
  d.p = p;
  assert_int_equal(iof_launch(iof_thread_pool_executor(p), deadlk_fn, &d), 0);
  assert_int_equal(iof_thread_pool_join(p), 0);
  assert_int_equal(atomic_load(&d.ran), 1);
  assert_int_equal(d.join, -EDEADLK);
  assert_int_equal(d.destroy, -EDEADLK);
  assert_int_equal(iof_thread_pool_destroy(p), 0);
}

#define T(f) cmocka_unit_test_setup_teardown(f, arm, disarm)

int main(void) {
  const struct CMUnitTest tests[] = {
      T(post_from_many_threads_all_run),
      T(dispatch_inline_on_pool_thread_queues_from_outside),
      T(join_waits_for_tracked_work),
      T(stop_abandons_queue_destroy_cancels_never_started),
      T(destroy_never_hangs),
      T(create_zero_threads_returns_einval),
      T(join_or_destroy_from_pool_thread_returns_edeadlk),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
