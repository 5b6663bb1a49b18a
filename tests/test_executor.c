/* Executors:
 * dispatch/post rules, executor_ref equality, target, context, a
 * user-written executor and execution context driving iof_run_async, and
 * -ESHUTDOWN once a context's shutdown has begun.
 *
 * IOF_TEST_THREADED */
#include "test_support.h"

#include <iofiber/iofiber.h>

#include <errno.h>
#include <ev.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* Per-test watchdog (support/test_support.h). */
IOF_TEST_WATCHDOG(arm, disarm, 30)

/* ---- raw fibers: the h handed to post/dispatch ------------------------- */

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

static iof_fiber *raw_fiber(raw_rec *r) {
  iof_fiber *f = iof_fiber_create(NULL, IOF_FIBER_STACK_DEFAULT, raw_fn, r);
  assert_non_null(f);
  return f;
}

/* An awaitable whose suspend dispatches h to its own executor and returns
 * the result: the canonical use of dispatch. */
typedef struct dispatch_aw {
  iof_fiber *h;
  iof_fiber *result;
  pthread_t thread;
} dispatch_aw;

static iof_fiber *dispatch_suspend(void *self, iof_fiber *h,
                                   const iof_env *env) {
  dispatch_aw *d = self;
  d->h = h;
  d->thread = pthread_self();
  d->result = iof_executor_dispatch(env->executor, h);
  return d->result;
}

static const iof_awaitable_vtbl dispatch_vt = {NULL, dispatch_suspend, NULL};

/* ---- dispatch ----------------------------------------------------------- */

typedef struct inside_rec {
  iof_executor_ref ex;
  iof_fiber *direct_result;
  iof_fiber *direct_h;
  raw_rec raw;
  dispatch_aw aw;
  int aw_status;
  int after_aw;
  pthread_t thread;
} inside_rec;

static int inside_fn(void *arg) {
  inside_rec *r = arg;
  r->thread = pthread_self();
  /* A fiber running on the io_context: the thread runs the context. */
  iof_fiber *raw =
      iof_fiber_create(NULL, IOF_FIBER_STACK_DEFAULT, raw_fn, &r->raw);
  r->direct_h = raw;
  r->direct_result = iof_executor_dispatch(r->ex, raw);
  iof_fiber_destroy(raw); /* never started: dispatch returned it to us */
  /* Inside suspend, on the run loop's stack: returns h, resumes at once. */
  r->aw_status = iof_await(&r->aw, &dispatch_vt);
  r->after_aw = 1;
  return 0;
}

static void dispatch_from_inside_context_returns_h(void **state) {
  (void)state;
  iof_io_context *io = iof_io_context_create();
  assert_non_null(io);
  inside_rec r;
  memset(&r, 0, sizeof r);
  r.ex = iof_io_context_executor(io);
  assert_int_equal(iof_launch(r.ex, inside_fn, &r), 0);
  int ran = iof_io_context_run(io);
  /* One resume only: the dispatch inside suspend returned h, so the fiber
   * continued at once without a trip through the run queue. */
  assert_int_equal(ran, 1);
  assert_non_null(r.direct_h);
  assert_ptr_equal(r.direct_result, r.direct_h);
  assert_int_equal(atomic_load(&r.raw.ran), 0); /* dispatch never resumes */
  assert_ptr_equal(r.aw.result, r.aw.h);
  assert_non_null(r.aw.h);
  assert_true(pthread_equal(r.aw.thread, pthread_self()));
  assert_int_equal(r.aw_status, 0);
  assert_int_equal(r.after_aw, 1);
  assert_true(pthread_equal(r.thread, pthread_self()));
  assert_int_equal(iof_io_context_destroy(io), 0);
}

/* From the run loop thread outside any fiber: a libev watcher callback
 * called by iof_io_context_run. */
typedef struct loop_rec {
  iof_io_context *io;
  iof_work_guard guard;
  iof_fiber *h;
  iof_fiber *result;
  int fired;
} loop_rec;

static void loop_timer_cb(struct ev_loop *loop, ev_timer *w, int revents) {
  (void)loop;
  (void)revents;
  loop_rec *r = w->data;
  r->fired++;
  r->result = iof_executor_dispatch(iof_io_context_executor(r->io), r->h);
  /* The run loop's use of the result: if (f) resume(f). */
  if (r->result) iof_fiber_resume(r->result);
  iof_work_guard_reset(&r->guard);
}

static void dispatch_from_run_loop_thread_returns_h(void **state) {
  (void)state;
  iof_io_context *io = iof_io_context_create();
  assert_non_null(io);
  loop_rec r;
  memset(&r, 0, sizeof r);
  r.io = io;
  raw_rec raw;
  memset(&raw, 0, sizeof raw);
  r.h = raw_fiber(&raw);
  assert_int_equal(iof_work_guard_init(&r.guard, iof_io_context_executor(io)),
                   0);
  ev_timer t;
  ev_timer_init(&t, loop_timer_cb, 0.01, 0.);
  t.data = &r;
  ev_timer_start(iof_io_context_loop(io), &t);
  assert_int_equal(iof_io_context_run(io), 0);
  ev_timer_stop(iof_io_context_loop(io), &t);
  assert_int_equal(r.fired, 1);
  assert_ptr_equal(r.result, r.h);
  assert_int_equal(atomic_load(&raw.ran), 1);
  assert_true(pthread_equal(raw.thread, pthread_self()));
  assert_true(iof_fiber_done(r.h));
  assert_int_equal(iof_fiber_destroy(r.h), 0);
  assert_int_equal(iof_io_context_destroy(io), 0);
}

/* From another thread while the context runs on this one: queues, returns
 * NULL with errno untouched, and the run loop resumes h on its thread. */
typedef struct remote_rec {
  iof_io_context *io;
  iof_work_guard guard;
  atomic_int running;
  iof_fiber *h;
  iof_fiber *result;
  int err;
  raw_rec *raw;
} remote_rec;

static int mark_running_fn(void *arg) {
  remote_rec *r = arg;
  atomic_store(&r->running, 1);
  return 0;
}

static void *remote_dispatcher(void *arg) {
  remote_rec *r = arg;
  for (int i = 0; i < 5000 && !atomic_load(&r->running); i++) sleep_ms(1);
  sleep_ms(20); /* let run block in the loop */
  errno = 0;
  r->result = iof_executor_dispatch(iof_io_context_executor(r->io), r->h);
  r->err = errno;
  /* Give the run loop time to resume h, then let run return. */
  for (int i = 0; i < 5000 && !atomic_load(&r->raw->ran); i++) sleep_ms(1);
  iof_work_guard_reset(&r->guard);
  return NULL;
}

static void dispatch_from_another_thread_queues_and_returns_null(void **state) {
  (void)state;
  iof_io_context *io = iof_io_context_create();
  assert_non_null(io);
  iof_executor_ref ex = iof_io_context_executor(io);

  /* Outside any run loop on this thread: queued, NULL, errno untouched. */
  raw_rec raw0;
  memset(&raw0, 0, sizeof raw0);
  iof_fiber *h0 = raw_fiber(&raw0);
  errno = 0;
  assert_null(iof_executor_dispatch(ex, h0));
  assert_int_equal(errno, 0);
  assert_int_equal(atomic_load(&raw0.ran), 0);
  assert_int_equal(iof_io_context_run(io), 1); /* the queued h ran */
  assert_int_equal(atomic_load(&raw0.ran), 1);
  assert_int_equal(iof_fiber_destroy(h0), 0);
  iof_io_context_restart(io);

  /* From another thread while this one runs the context. */
  remote_rec r;
  memset(&r, 0, sizeof r);
  raw_rec raw;
  memset(&raw, 0, sizeof raw);
  r.io = io;
  r.raw = &raw;
  r.h = raw_fiber(&raw);
  assert_int_equal(iof_work_guard_init(&r.guard, ex), 0);
  assert_int_equal(iof_launch(ex, mark_running_fn, &r), 0);
  pthread_t t;
  assert_int_equal(pthread_create(&t, NULL, remote_dispatcher, &r), 0);
  int ran = iof_io_context_run(io);
  pthread_join(t, NULL);
  assert_int_equal(ran, 2); /* the chain and h */
  assert_null(r.result);
  assert_int_equal(r.err, 0);
  assert_int_equal(atomic_load(&raw.ran), 1);
  assert_true(pthread_equal(raw.thread, pthread_self()));
  assert_int_equal(iof_fiber_destroy(r.h), 0);
  assert_int_equal(iof_io_context_destroy(io), 0);
}

/* ---- post ---------------------------------------------------------------- */

typedef struct post_rec {
  iof_executor_ref ex;
  raw_rec raw;
  iof_fiber *h;
  int post_status;
  int ran_after_post;
  int ran_after_yield;
  /* The same from inside an awaitable's suspend (run loop stack). */
  raw_rec raw2;
  iof_fiber *h2;
  int post2_status;
  int ran_after_post2;
} post_rec;

static iof_fiber *post_in_suspend(void *self, iof_fiber *h,
                                  const iof_env *env) {
  post_rec *r = self;
  r->post2_status = iof_executor_post(env->executor, r->h2);
  r->ran_after_post2 = atomic_load(&r->raw2.ran);
  return h; /* continue at once */
}

static const iof_awaitable_vtbl post_in_suspend_vt = {NULL, post_in_suspend,
                                                      NULL};

static int post_fn(void *arg) {
  post_rec *r = arg;
  r->post_status = iof_executor_post(r->ex, r->h);
  r->ran_after_post = atomic_load(&r->raw.ran);
  iof_yield();
  r->ran_after_yield = atomic_load(&r->raw.ran);
  iof_await(r, &post_in_suspend_vt);
  return 0;
}

static void post_never_runs_h_before_it_returns(void **state) {
  (void)state;
  iof_io_context *io = iof_io_context_create();
  assert_non_null(io);
  post_rec r;
  memset(&r, 0, sizeof r);
  r.ex = iof_io_context_executor(io);
  r.h = raw_fiber(&r.raw);
  r.h2 = raw_fiber(&r.raw2);
  /* From outside any run loop. */
  raw_rec raw0;
  memset(&raw0, 0, sizeof raw0);
  iof_fiber *h0 = raw_fiber(&raw0);
  assert_int_equal(iof_executor_post(r.ex, h0), 0);
  assert_int_equal(atomic_load(&raw0.ran), 0);

  assert_int_equal(iof_launch(r.ex, post_fn, &r), 0);
  assert_true(iof_io_context_run(io) >= 4);
  assert_int_equal(r.post_status, 0);
  assert_int_equal(r.ran_after_post, 0);  /* not run inside post */
  assert_int_equal(r.ran_after_yield, 1); /* run by the loop later */
  assert_int_equal(r.post2_status, 0);
  assert_int_equal(r.ran_after_post2, 0);
  assert_int_equal(atomic_load(&r.raw2.ran), 1);
  assert_int_equal(atomic_load(&raw0.ran), 1);
  assert_int_equal(iof_fiber_destroy(h0), 0);
  assert_int_equal(iof_fiber_destroy(r.h), 0);
  assert_int_equal(iof_fiber_destroy(r.h2), 0);
  assert_int_equal(iof_io_context_destroy(io), 0);
}

static void
post_and_dispatch_reject_empty_executor_and_null_fiber(void **state) {
  (void)state;
  iof_io_context *io = iof_io_context_create();
  assert_non_null(io);
  iof_executor_ref empty = {NULL, NULL};
  raw_rec raw;
  memset(&raw, 0, sizeof raw);
  iof_fiber *h = raw_fiber(&raw);
  assert_int_equal(iof_executor_post(empty, h), -EINVAL);
  assert_int_equal(iof_executor_post(iof_io_context_executor(io), NULL),
                   -EINVAL);
  errno = 0;
  assert_null(iof_executor_dispatch(empty, h));
  assert_int_equal(errno, EINVAL);
  errno = 0;
  assert_null(iof_executor_dispatch(iof_io_context_executor(io), NULL));
  assert_int_equal(errno, EINVAL);
  assert_int_equal(atomic_load(&raw.ran), 0);
  assert_int_equal(iof_fiber_destroy(h), 0);
  assert_int_equal(iof_io_context_destroy(io), 0);
}

/* ---- a user-written executor and execution context ----------------------- */

#define MANUAL_CAP 256

typedef struct manual_ctx {
  iof_execution_context ctx;
  pthread_mutex_t lock;
  iof_fiber *q[MANUAL_CAP];
  size_t head, count;
  atomic_int work;
  atomic_int work_started, work_finished;
  atomic_int posts, dispatch_inline;
} manual_ctx;

/* Executor objects: several may name one context (they compare equal). */
typedef struct manual_ex {
  manual_ctx *owner;
  int id;
} manual_ex;

static __thread manual_ctx *manual_running;

static int manual_post(const void *ex, iof_fiber *h) {
  manual_ctx *m = ((const manual_ex *)ex)->owner;
  if (iof_execution_context_stopping(&m->ctx)) return -ESHUTDOWN;
  pthread_mutex_lock(&m->lock);
  if (m->count == MANUAL_CAP) {
    pthread_mutex_unlock(&m->lock);
    return -ENOMEM;
  }
  m->q[(m->head + m->count++) % MANUAL_CAP] = h;
  pthread_mutex_unlock(&m->lock);
  atomic_fetch_add(&m->posts, 1);
  return 0;
}

static int manual_dispatch(const void *ex, iof_fiber *h) {
  manual_ctx *m = ((const manual_ex *)ex)->owner;
  if (iof_execution_context_stopping(&m->ctx)) return -ESHUTDOWN;
  if (manual_running == m) {
    atomic_fetch_add(&m->dispatch_inline, 1);
    return 1;
  }
  return manual_post(ex, h);
}

static bool manual_equal(const void *a, const void *b) {
  return ((const manual_ex *)a)->owner == ((const manual_ex *)b)->owner;
}

static iof_execution_context *manual_context(const void *ex) {
  return &((const manual_ex *)ex)->owner->ctx;
}

static void manual_work_started(const void *ex) {
  manual_ctx *m = ((const manual_ex *)ex)->owner;
  atomic_fetch_add(&m->work, 1);
  atomic_fetch_add(&m->work_started, 1);
}

static void manual_work_finished(const void *ex) {
  manual_ctx *m = ((const manual_ex *)ex)->owner;
  atomic_fetch_sub(&m->work, 1);
  atomic_fetch_add(&m->work_finished, 1);
}

static const iof_executor_vtbl manual_vt = {
    manual_dispatch, manual_post,         manual_equal,
    manual_context,  manual_work_started, manual_work_finished};

/* Same slots, another vtable: never equal to manual_vt refs. */
static const iof_executor_vtbl manual_vt2 = {
    manual_dispatch, manual_post,         manual_equal,
    manual_context,  manual_work_started, manual_work_finished};

/* Same behaviour but no equal slot. */
static const iof_executor_vtbl manual_vt_noeq = {
    manual_dispatch, manual_post,         NULL,
    manual_context,  manual_work_started, manual_work_finished};

static void manual_init(manual_ctx *m) {
  memset(m, 0, sizeof *m);
  assert_int_equal(iof_execution_context_init(&m->ctx), 0);
  pthread_mutex_init(&m->lock, NULL);
}

static void manual_fini(manual_ctx *m) {
  iof_execution_context_destroy(&m->ctx);
  pthread_mutex_destroy(&m->lock);
}

/* The user's run loop: resumes queued fibers until none is left. */
static int manual_run(manual_ctx *m) {
  int n = 0;
  manual_ctx *saved = manual_running;
  manual_running = m;
  for (int i = 0; i < 100000; i++) {
    pthread_mutex_lock(&m->lock);
    iof_fiber *f = NULL;
    if (m->count) {
      f = m->q[m->head];
      m->head = (m->head + 1) % MANUAL_CAP;
      m->count--;
    }
    pthread_mutex_unlock(&m->lock);
    if (!f) break;
    iof_fiber_resume(f);
    n++;
  }
  manual_running = saved;
  return n;
}

typedef struct user_chain {
  manual_ctx *m;
  iof_executor_ref ex;
  int steps;
  int env_ok;
  int yields_ok;
  dispatch_aw aw;
  int work_in_fn;
  iof_frame_allocator *alloc_in_fn;
  int done_status;
  int done_calls;
  int work_in_done;
} user_chain;

static int user_chain_fn(void *arg) {
  user_chain *c = arg;
  const iof_env *env = iof_env_current();
  c->env_ok = env && iof_executor_equal(env->executor, c->ex) &&
              env->executor.ex == c->ex.ex && env->executor.vt == &manual_vt;
  c->work_in_fn = atomic_load(&c->m->work);
  c->alloc_in_fn = iof_current_frame_allocator();
  for (int i = 0; i < 3; i++) {
    if (iof_yield() == 0) c->yields_ok++;
    c->steps++;
  }
  iof_await(&c->aw, &dispatch_vt);
  return 42;
}

static void user_chain_done(void *user, int status) {
  user_chain *c = user;
  c->done_status = status;
  c->done_calls++;
  c->work_in_done = atomic_load(&c->m->work);
}

static void user_executor_and_context_work_with_run_async(void **state) {
  (void)state;
  manual_ctx m;
  manual_init(&m);
  manual_ex e = {&m, 1};
  iof_executor_ref ex = iof_executor_make(&e, &manual_vt);
  iof_frame_allocator *track = iof_tracking_allocator_create(NULL);
  assert_non_null(track);
  assert_ptr_equal(iof_context_frame_allocator(&m.ctx),
                   iof_default_frame_allocator());
  assert_int_equal(iof_context_set_frame_allocator(&m.ctx, track), 0);

  user_chain c;
  memset(&c, 0, sizeof c);
  c.m = &m;
  c.ex = ex;
  iof_launch_opts o;
  memset(&o, 0, sizeof o);
  o.on_done = user_chain_done;
  o.user = &c;
  assert_int_equal(iof_run_async(ex, &o, user_chain_fn, &c), 0);
  /* Not run before returning; posted once; counted as work. */
  assert_int_equal(c.steps, 0);
  assert_int_equal(atomic_load(&m.posts), 1);
  assert_int_equal(atomic_load(&m.work), 1);
  iof_tracking_stats st;
  assert_int_equal(iof_tracking_allocator_stats(track, &st), 0);
  assert_int_equal(st.live, 1);

  int ran = manual_run(&m);
  assert_int_equal(ran, 4); /* start + 3 yields; the dispatch was inline */
  assert_int_equal(c.steps, 3);
  assert_int_equal(c.yields_ok, 3);
  assert_true(c.env_ok);
  assert_int_equal(c.work_in_fn, 1);
  assert_ptr_equal(c.alloc_in_fn, track);
  assert_ptr_equal(c.aw.result, c.aw.h);
  assert_int_equal(atomic_load(&m.dispatch_inline), 1);
  assert_int_equal(c.done_calls, 1);
  assert_int_equal(c.done_status, 42);
  assert_int_equal(c.work_in_done, 1); /* on_done before the work drops */
  assert_int_equal(atomic_load(&m.work), 0);
  assert_int_equal(atomic_load(&m.work_started), 1);
  assert_int_equal(atomic_load(&m.work_finished), 1);
  assert_int_equal(iof_tracking_allocator_stats(track, &st), 0);
  assert_int_equal(st.live, 0);
  assert_int_equal(st.total, 1);

  /* Dispatch from outside the user's run loop queues. */
  raw_rec raw;
  memset(&raw, 0, sizeof raw);
  iof_fiber *h = raw_fiber(&raw);
  assert_null(iof_executor_dispatch(ex, h));
  assert_int_equal(atomic_load(&raw.ran), 0);
  assert_int_equal(manual_run(&m), 1);
  assert_int_equal(atomic_load(&raw.ran), 1);
  assert_int_equal(iof_fiber_destroy(h), 0);

  /* After shutdown: launches fail, nothing allocated. */
  iof_execution_context_shutdown(&m.ctx);
  assert_int_equal(iof_run_async(ex, &o, user_chain_fn, &c), -ESHUTDOWN);
  assert_int_equal(iof_tracking_allocator_stats(track, &st), 0);
  assert_int_equal(st.total, 1);
  assert_int_equal(atomic_load(&m.work), 0);
  assert_int_equal(c.done_calls, 1);
  manual_fini(&m);
  assert_int_equal(iof_tracking_allocator_destroy(track), 0);
}

/* ---- equality, target, context ------------------------------------------ */

static void executor_ref_equality_both_empty(void **state) {
  (void)state;
  iof_executor_ref a = {NULL, NULL}, b = {NULL, NULL};
  assert_true(iof_executor_empty(a));
  assert_true(iof_executor_equal(a, b));
  iof_io_context *io = iof_io_context_create();
  assert_non_null(io);
  iof_executor_ref x = iof_io_context_executor(io);
  assert_false(iof_executor_empty(x));
  assert_false(iof_executor_equal(a, x));
  assert_false(iof_executor_equal(x, a));
  assert_int_equal(iof_io_context_destroy(io), 0);
}

static void executor_ref_equality_same_object(void **state) {
  (void)state;
  iof_io_context *io = iof_io_context_create();
  assert_non_null(io);
  iof_executor_ref a = iof_io_context_executor(io);
  iof_executor_ref b = iof_io_context_executor(io);
  assert_true(iof_executor_equal(a, b));
  assert_true(iof_executor_equal(a, a));
  /* Same object, vtable without an equal slot. */
  manual_ctx m;
  manual_init(&m);
  manual_ex e = {&m, 1};
  assert_true(iof_executor_equal(iof_executor_make(&e, &manual_vt_noeq),
                                 iof_executor_make(&e, &manual_vt_noeq)));
  manual_fini(&m);
  assert_int_equal(iof_io_context_destroy(io), 0);
}

static void executor_ref_equality_different_vtables_unequal(void **state) {
  (void)state;
  iof_io_context *io = iof_io_context_create();
  iof_thread_pool *p = iof_thread_pool_create(1);
  assert_non_null(io);
  assert_non_null(p);
  iof_executor_ref a = iof_io_context_executor(io);
  iof_executor_ref b = iof_thread_pool_executor(p);
  assert_false(iof_executor_equal(a, b));
  assert_false(iof_executor_equal(b, a));
  /* Even on the very same object, and even if `equal` would say yes. */
  manual_ctx m;
  manual_init(&m);
  manual_ex e = {&m, 1};
  iof_executor_ref u1 = iof_executor_make(&e, &manual_vt);
  iof_executor_ref u2 = iof_executor_make(&e, &manual_vt2);
  assert_false(iof_executor_equal(u1, u2));
  assert_false(iof_executor_equal(u2, u1));
  /* Two io_contexts: same vtable, no equal slot, different objects. */
  iof_io_context *io2 = iof_io_context_create();
  assert_non_null(io2);
  assert_false(iof_executor_equal(a, iof_io_context_executor(io2)));
  manual_fini(&m);
  assert_int_equal(iof_io_context_destroy(io2), 0);
  assert_int_equal(iof_io_context_destroy(io), 0);
  assert_int_equal(iof_thread_pool_destroy(p), 0);
}

static void executor_ref_equality_same_vtable_uses_equal_slot(void **state) {
  (void)state;
  manual_ctx m1, m2;
  manual_init(&m1);
  manual_init(&m2);
  manual_ex a = {&m1, 1}, b = {&m1, 2}, c = {&m2, 3};
  iof_executor_ref ra = iof_executor_make(&a, &manual_vt);
  iof_executor_ref rb = iof_executor_make(&b, &manual_vt);
  iof_executor_ref rc = iof_executor_make(&c, &manual_vt);
  /* Two executor objects naming one context are equal. */
  assert_true(iof_executor_equal(ra, rb));
  assert_true(iof_executor_equal(rb, ra));
  /* Naming different contexts: unequal. */
  assert_false(iof_executor_equal(ra, rc));
  assert_false(iof_executor_equal(rc, rb));
  /* Without the equal slot, two objects are unequal even on one context. */
  assert_false(iof_executor_equal(iof_executor_make(&a, &manual_vt_noeq),
                                  iof_executor_make(&b, &manual_vt_noeq)));
  manual_fini(&m1);
  manual_fini(&m2);
}

static void executor_target_checks_type(void **state) {
  (void)state;
  iof_io_context *io = iof_io_context_create();
  iof_thread_pool *p = iof_thread_pool_create(1);
  assert_non_null(io);
  assert_non_null(p);
  iof_executor_ref x = iof_io_context_executor(io);
  iof_executor_ref y = iof_thread_pool_executor(p);
  assert_non_null(iof_executor_target(x, x.vt));
  assert_ptr_equal(iof_executor_target(x, x.vt), x.ex);
  assert_null(iof_executor_target(x, y.vt));
  assert_null(iof_executor_target(y, x.vt));
  assert_ptr_equal(iof_executor_target(y, y.vt), y.ex);
  iof_executor_ref empty = {NULL, NULL};
  assert_null(iof_executor_target(empty, x.vt));
  assert_null(iof_executor_target(empty, NULL));
  manual_ctx m;
  manual_init(&m);
  manual_ex e = {&m, 7};
  iof_executor_ref u = iof_executor_make(&e, &manual_vt);
  manual_ex *got = iof_executor_target(u, &manual_vt);
  assert_ptr_equal(got, &e);
  assert_int_equal(got->id, 7);
  assert_null(iof_executor_target(u, &manual_vt2));
  assert_null(iof_executor_target(u, x.vt));
  manual_fini(&m);
  assert_int_equal(iof_io_context_destroy(io), 0);
  assert_int_equal(iof_thread_pool_destroy(p), 0);
}

static void executor_context_returns_owner(void **state) {
  (void)state;
  iof_io_context *io = iof_io_context_create();
  iof_thread_pool *p = iof_thread_pool_create(1);
  assert_non_null(io);
  assert_non_null(p);
  assert_non_null(iof_io_context_context(io));
  assert_ptr_equal(iof_executor_context(iof_io_context_executor(io)),
                   iof_io_context_context(io));
  assert_non_null(iof_thread_pool_context(p));
  assert_ptr_equal(iof_executor_context(iof_thread_pool_executor(p)),
                   iof_thread_pool_context(p));
  iof_executor_ref empty = {NULL, NULL};
  assert_null(iof_executor_context(empty));
  manual_ctx m;
  manual_init(&m);
  manual_ex e = {&m, 1};
  assert_ptr_equal(iof_executor_context(iof_executor_make(&e, &manual_vt)),
                   &m.ctx);
  manual_fini(&m);
  assert_int_equal(iof_io_context_destroy(io), 0);
  assert_int_equal(iof_thread_pool_destroy(p), 0);
}

/* ---- validity after shutdown --------------------------------------------- */

static int never_fn(void *arg) {
  atomic_fetch_add((atomic_int *)arg, 1);
  return 0;
}

static void check_refuses(iof_executor_ref ex, iof_execution_context *ctx,
                          atomic_int *fn_calls) {
  assert_true(iof_execution_context_stopping(ctx));
  assert_int_equal(iof_launch(ex, never_fn, fn_calls), -ESHUTDOWN);
  iof_frame_allocator *track = iof_tracking_allocator_create(NULL);
  assert_non_null(track);
  iof_launch_opts o;
  memset(&o, 0, sizeof o);
  o.frame_allocator = track;
  assert_int_equal(iof_run_async(ex, &o, never_fn, fn_calls), -ESHUTDOWN);
  iof_tracking_stats st;
  assert_int_equal(iof_tracking_allocator_stats(track, &st), 0);
  assert_int_equal(st.live, 0); /* nothing allocated (or freed already) */
  assert_int_equal(iof_tracking_allocator_destroy(track), 0);

  raw_rec raw;
  memset(&raw, 0, sizeof raw);
  iof_fiber *h = raw_fiber(&raw);
  assert_int_equal(iof_executor_post(ex, h), -ESHUTDOWN);
  errno = 0;
  assert_null(iof_executor_dispatch(ex, h));
  assert_int_equal(errno, ESHUTDOWN);
  assert_int_equal(atomic_load(&raw.ran), 0);
  /* Not lost: the caller still owns it. */
  assert_int_equal(iof_fiber_destroy(h), 0);
  /* Equality and context stay valid until destroy. */
  iof_executor_ref copy = ex;
  assert_true(iof_executor_equal(ex, copy));
  assert_ptr_equal(iof_executor_context(ex), ctx);
  assert_non_null(iof_executor_target(ex, ex.vt));
}

static void
after_shutdown_launch_post_dispatch_fail_with_eshutdown(void **state) {
  (void)state;
  atomic_int fn_calls = 0;
  iof_io_context *io = iof_io_context_create();
  assert_non_null(io);
  iof_execution_context_shutdown(iof_io_context_context(io));
  check_refuses(iof_io_context_executor(io), iof_io_context_context(io),
                &fn_calls);
  assert_int_equal(iof_io_context_destroy(io), 0);

  iof_thread_pool *p = iof_thread_pool_create(2);
  assert_non_null(p);
  iof_execution_context_shutdown(iof_thread_pool_context(p));
  check_refuses(iof_thread_pool_executor(p), iof_thread_pool_context(p),
                &fn_calls);
  assert_int_equal(iof_thread_pool_destroy(p), 0);

  manual_ctx m;
  manual_init(&m);
  manual_ex e = {&m, 1};
  iof_execution_context_shutdown(&m.ctx);
  check_refuses(iof_executor_make(&e, &manual_vt), &m.ctx, &fn_calls);
  manual_fini(&m);
  assert_int_equal(atomic_load(&fn_calls), 0);
}

/* During destroy: a service's shutdown (step 2 of a destroy) observes the
 * executor refusing launches, posts and dispatches of never-started
 * fibers, while equality and context stay valid. */
typedef struct probe_svc {
  iof_service base;
  iof_executor_ref ex;
  int ran;
  int stopping;
  int launch;
  int post;
  iof_fiber *dispatch;
  int dispatch_errno;
  int destroy_raw;
  int equal;
  int context_ok;
} probe_svc;

static probe_svc probe_storage;
static atomic_int probe_fn_calls;

static iof_service *probe_create(iof_execution_context *ctx) {
  (void)ctx;
  memset(&probe_storage, 0, sizeof probe_storage);
  return &probe_storage.base;
}

static void probe_shutdown(iof_service *s) {
  probe_svc *p = (probe_svc *)s;
  iof_executor_ref ex = p->ex;
  p->ran++;
  p->stopping = iof_execution_context_stopping(s->ctx);
  p->launch = iof_launch(ex, never_fn, &probe_fn_calls);
  raw_rec raw;
  memset(&raw, 0, sizeof raw);
  iof_fiber *h = iof_fiber_create(NULL, IOF_FIBER_STACK_DEFAULT, raw_fn, &raw);
  p->post = iof_executor_post(ex, h);
  errno = 0;
  p->dispatch = iof_executor_dispatch(ex, h);
  p->dispatch_errno = errno;
  p->destroy_raw = iof_fiber_destroy(h);
  p->equal = iof_executor_equal(ex, ex);
  p->context_ok = iof_executor_context(ex) == s->ctx;
}

static const iof_service_key probe_key = {"probe", probe_create, probe_shutdown,
                                          NULL};

static void executor_validity_during_destroy(void **state) {
  (void)state;
  atomic_store(&probe_fn_calls, 0);
  iof_io_context *io = iof_io_context_create();
  assert_non_null(io);
  probe_svc *p =
      (probe_svc *)iof_use_service(iof_io_context_context(io), &probe_key);
  assert_ptr_equal(p, &probe_storage);
  p->ex = iof_io_context_executor(io);
  assert_int_equal(iof_io_context_destroy(io), 0);
  assert_int_equal(probe_storage.ran, 1);
  assert_true(probe_storage.stopping);
  assert_int_equal(probe_storage.launch, -ESHUTDOWN);
  assert_int_equal(probe_storage.post, -ESHUTDOWN);
  assert_null(probe_storage.dispatch);
  assert_int_equal(probe_storage.dispatch_errno, ESHUTDOWN);
  assert_int_equal(probe_storage.destroy_raw, 0);
  assert_true(probe_storage.equal);
  assert_true(probe_storage.context_ok);

  iof_thread_pool *tp = iof_thread_pool_create(2);
  assert_non_null(tp);
  p = (probe_svc *)iof_use_service(iof_thread_pool_context(tp), &probe_key);
  assert_ptr_equal(p, &probe_storage);
  p->ex = iof_thread_pool_executor(tp);
  assert_int_equal(iof_thread_pool_destroy(tp), 0);
  assert_int_equal(probe_storage.ran, 1);
  assert_true(probe_storage.stopping);
  assert_int_equal(probe_storage.launch, -ESHUTDOWN);
  assert_int_equal(probe_storage.post, -ESHUTDOWN);
  assert_null(probe_storage.dispatch);
  assert_int_equal(probe_storage.dispatch_errno, ESHUTDOWN);
  assert_int_equal(probe_storage.destroy_raw, 0);
  assert_true(probe_storage.equal);
  assert_true(probe_storage.context_ok);
  assert_int_equal(atomic_load(&probe_fn_calls), 0);
}

#define T(f) cmocka_unit_test_setup_teardown(f, arm, disarm)

int main(void) {
  const struct CMUnitTest tests[] = {
      T(dispatch_from_inside_context_returns_h),
      T(dispatch_from_run_loop_thread_returns_h),
      T(dispatch_from_another_thread_queues_and_returns_null),
      T(post_never_runs_h_before_it_returns),
      T(post_and_dispatch_reject_empty_executor_and_null_fiber),
      T(executor_ref_equality_both_empty),
      T(executor_ref_equality_same_object),
      T(executor_ref_equality_different_vtables_unequal),
      T(executor_ref_equality_same_vtable_uses_equal_slot),
      T(executor_target_checks_type),
      T(executor_context_returns_owner),
      T(user_executor_and_context_work_with_run_async),
      T(after_shutdown_launch_post_dispatch_fail_with_eshutdown),
      T(executor_validity_during_destroy),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
