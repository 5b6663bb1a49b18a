/* Launch and iof_run: iof_run_async never runs fn
 * before returning; error codes with nothing allocated; on_done once, on
 * the chain's executor, after fn, with fn's status, before the work drops;
 * tokens and allocators are not inherited; names. iof_run: error codes, no
 * hop at all between equal executors (a counting executor proves it), the
 * executor, token and env rules, the hop to a thread pool and back, fn's
 * status, and the work bracket on the target executor.
 *
 * IOF_TEST_THREADED: chains on a thread pool, hops between threads. */
#include "test_support.h"
#include "check_test.h"

#include <iofiber/iofiber.h>

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

IOF_TEST_CHECK_FIXTURES(begin, end, 120)

/* An allocator that always fails. */
static void *fail_allocate(iof_frame_allocator *self, size_t size) {
  (void)self;
  (void)size;
  errno = ENOMEM;
  return NULL;
}

static void fail_deallocate(iof_frame_allocator *self, void *p, size_t size) {
  (void)self;
  (void)p;
  (void)size;
  CHECK(!"deallocate on the failing allocator");
}

static const iof_frame_allocator_vtbl fail_vtbl = {fail_allocate,
                                                   fail_deallocate};

/* ---- a counting executor wrapping another one -------------------------- */

typedef struct counting_ex {
  iof_executor_ref inner;
  atomic_int posts, dispatches, started, finished;
} counting_ex;

static int cx_dispatch(const void *ex, iof_fiber *h) {
  counting_ex *c = (counting_ex *)ex;
  atomic_fetch_add(&c->dispatches, 1);
  return c->inner.vt->dispatch(c->inner.ex, h);
}

static int cx_post(const void *ex, iof_fiber *h) {
  counting_ex *c = (counting_ex *)ex;
  atomic_fetch_add(&c->posts, 1);
  return c->inner.vt->post(c->inner.ex, h);
}

static bool cx_equal(const void *a, const void *b) {
  return iof_executor_equal(((const counting_ex *)a)->inner,
                            ((const counting_ex *)b)->inner);
}

static iof_execution_context *cx_context(const void *ex) {
  return iof_executor_context(((const counting_ex *)ex)->inner);
}

static void cx_started(const void *ex) {
  counting_ex *c = (counting_ex *)ex;
  atomic_fetch_add(&c->started, 1);
  iof_executor_on_work_started(c->inner);
}

static void cx_finished(const void *ex) {
  counting_ex *c = (counting_ex *)ex;
  atomic_fetch_add(&c->finished, 1);
  iof_executor_on_work_finished(c->inner);
}

static const iof_executor_vtbl cx_vtbl = {cx_dispatch, cx_post,    cx_equal,
                                          cx_context,  cx_started, cx_finished};

static iof_executor_ref cx_ref(counting_ex *c) {
  return iof_executor_make(c, &cx_vtbl);
}

/* ======================================================================= */
/* iof_run_async                                                            */
/* ======================================================================= */

/* ---- never runs fn before returning ------------------------------------ */

struct never_inline {
  atomic_int child_ran;
  int seen_right_after;
  int seen_after_yield;
  pthread_t child_thread;
  iof_executor_ref ex;
};

static int never_child(void *arg) {
  struct never_inline *n = arg;
  n->child_thread = self_thread();
  atomic_store(&n->child_ran, 1);
  return 0;
}

static int never_parent(void *arg) {
  struct never_inline *n = arg;
  /* On the io_context's own thread, inside one of its fibers. */
  CHECK(iof_launch(n->ex, never_child, n) == 0);
  n->seen_right_after = atomic_load(&n->child_ran);
  CHECK(iof_yield() == 0); /* the child was queued first: it runs now */
  n->seen_after_yield = atomic_load(&n->child_ran);
  return 0;
}

static void launch_never_runs_fn_before_returning(void **state) {
  (void)state;
  iof_io_context *io = new_io();
  struct never_inline n = {.ex = iof_io_context_executor(io)};
  /* From a plain thread. */
  assert_int_equal(iof_launch(n.ex, never_child, &n), 0);
  assert_int_equal(atomic_load(&n.child_ran), 0);
  assert_int_equal(iof_io_context_run(io), 1);
  assert_int_equal(atomic_load(&n.child_ran), 1);
  atomic_store(&n.child_ran, 0);
  /* From a fiber running on the context's own thread. */
  iof_io_context_restart(io);
  assert_int_equal(iof_launch(n.ex, never_parent, &n), 0);
  assert_int_equal(iof_io_context_run(io), 3);
  assert_int_equal(n.seen_right_after, 0);
  assert_int_equal(n.seen_after_yield, 1);
  assert_true(pthread_equal(n.child_thread, pthread_self()));
  assert_int_equal(iof_io_context_destroy(io), 0);
  assert_no_failures();
}

/* ---- -EINVAL / -ESHUTDOWN / -ENOMEM with nothing allocated ------------- */

static atomic_int bad_fn_runs, bad_done_runs;

static int bad_fn(void *arg) {
  (void)arg;
  atomic_fetch_add(&bad_fn_runs, 1);
  return 0;
}

static void bad_done(void *user, int status) {
  (void)user;
  (void)status;
  atomic_fetch_add(&bad_done_runs, 1);
}

static void launch_empty_ex_or_null_fn_einval_nothing_allocated(void **state) {
  (void)state;
  atomic_store(&bad_fn_runs, 0);
  atomic_store(&bad_done_runs, 0);
  iof_io_context *io = new_io();
  iof_frame_allocator *t = iof_tracking_allocator_create(NULL);
  assert_non_null(t);
  assert_int_equal(
      iof_context_set_frame_allocator(iof_io_context_context(io), t), 0);
  iof_executor_ref empty = {0};
  iof_launch_opts o = {.frame_allocator = t, .on_done = bad_done};
  assert_int_equal(iof_run_async(empty, &o, bad_fn, NULL), -EINVAL);
  assert_int_equal(iof_run_async(empty, NULL, bad_fn, NULL), -EINVAL);
  assert_int_equal(iof_launch(empty, bad_fn, NULL), -EINVAL);
  assert_int_equal(iof_run_async(iof_io_context_executor(io), &o, NULL, NULL),
                   -EINVAL);
  assert_int_equal(iof_run_async(iof_io_context_executor(io), NULL, NULL, NULL),
                   -EINVAL);
  iof_tracking_stats s = tstats(t);
  assert_int_equal(s.total, 0);
  assert_int_equal(s.live, 0);
  /* Nothing was queued: run has no work and returns at once. */
  assert_int_equal(iof_io_context_run(io), 0);
  assert_int_equal(atomic_load(&bad_fn_runs), 0);
  assert_int_equal(atomic_load(&bad_done_runs), 0);
  assert_int_equal(iof_io_context_destroy(io), 0);
  assert_int_equal(iof_tracking_allocator_destroy(t), 0);
  assert_no_failures();
}

static void launch_on_shut_down_context_eshutdown(void **state) {
  (void)state;
  atomic_store(&bad_fn_runs, 0);
  atomic_store(&bad_done_runs, 0);
  iof_frame_allocator *t = iof_tracking_allocator_create(NULL);
  assert_non_null(t);
  iof_launch_opts o = {.frame_allocator = t, .on_done = bad_done};

  iof_io_context *io = new_io();
  iof_execution_context_shutdown(iof_io_context_context(io));
  assert_int_equal(iof_run_async(iof_io_context_executor(io), &o, bad_fn, NULL),
                   -ESHUTDOWN);
  assert_int_equal(iof_launch(iof_io_context_executor(io), bad_fn, NULL),
                   -ESHUTDOWN);

  iof_thread_pool *p = iof_thread_pool_create(1);
  assert_non_null(p);
  iof_execution_context_shutdown(iof_thread_pool_context(p));
  assert_int_equal(iof_run_async(iof_thread_pool_executor(p), &o, bad_fn, NULL),
                   -ESHUTDOWN);

  iof_tracking_stats s = tstats(t);
  assert_int_equal(s.total, 0);
  assert_int_equal(s.live, 0);
  assert_int_equal(iof_thread_pool_destroy(p), 0);
  assert_int_equal(iof_io_context_destroy(io), 0);
  assert_int_equal(atomic_load(&bad_fn_runs), 0);
  assert_int_equal(atomic_load(&bad_done_runs), 0);
  assert_int_equal(iof_tracking_allocator_destroy(t), 0);
  assert_no_failures();
}

static void launch_bad_stack_size_einval(void **state) {
  (void)state;
  atomic_store(&bad_fn_runs, 0);
  atomic_store(&bad_done_runs, 0);
  iof_io_context *io = new_io();
  iof_executor_ref ex = iof_io_context_executor(io);
  iof_frame_allocator *t = iof_tracking_allocator_create(NULL);
  assert_non_null(t);
  const size_t bad[] = {1, 4096, IOF_FIBER_STACK_MIN - 1,
                        IOF_FIBER_STACK_MAX + 1, SIZE_MAX};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    iof_launch_opts o = {
        .frame_allocator = t, .stack_size = bad[i], .on_done = bad_done};
    assert_int_equal(iof_run_async(ex, &o, bad_fn, NULL), -EINVAL);
  }
  iof_tracking_stats s = tstats(t);
  assert_int_equal(s.total, 0);
  assert_int_equal(iof_io_context_run(io), 0);
  assert_int_equal(atomic_load(&bad_fn_runs), 0);
  assert_int_equal(atomic_load(&bad_done_runs), 0);
  /* The smallest valid size works. */
  iof_io_context_restart(io);
  iof_launch_opts ok = {.frame_allocator = t,
                        .stack_size = IOF_FIBER_STACK_MIN};
  assert_int_equal(iof_run_async(ex, &ok, bad_fn, NULL), 0);
  assert_int_equal(iof_io_context_run(io), 1);
  assert_int_equal(atomic_load(&bad_fn_runs), 1);
  s = tstats(t);
  assert_int_equal(s.total, 1);
  assert_int_equal(s.live, 0);
  assert_int_equal(iof_io_context_destroy(io), 0);
  assert_int_equal(iof_tracking_allocator_destroy(t), 0);
  assert_no_failures();
}

static void launch_no_memory_enomem(void **state) {
  (void)state;
  atomic_store(&bad_fn_runs, 0);
  atomic_store(&bad_done_runs, 0);
  iof_io_context *io = new_io();
  iof_frame_allocator failing = {&fail_vtbl};
  iof_launch_opts o = {.frame_allocator = &failing, .on_done = bad_done};
  assert_int_equal(iof_run_async(iof_io_context_executor(io), &o, bad_fn, NULL),
                   -ENOMEM);
  assert_int_equal(iof_io_context_run(io), 0); /* no work was counted */
  assert_int_equal(atomic_load(&bad_fn_runs), 0);
  assert_int_equal(atomic_load(&bad_done_runs), 0);
  assert_int_equal(iof_io_context_destroy(io), 0);
  assert_no_failures();
}

/* ---- on_done: once, on the chain's executor, after fn, fn's status ----- */

struct done_rec {
  int index;
  atomic_int fn_returning;
  atomic_int done_calls;
  int status;
  pthread_t fn_thread, done_thread;
  iof_fiber *fiber;
  const iof_env *env;
  iof_executor_ref ex;
  iof_frame_allocator *t;
};

static int done_status(int i) {
  return i % 3 == 0 ? -(i + 1) : i * 5;
}

static int done_fn(void *arg) {
  struct done_rec *r = arg;
  r->fiber = iof_fiber_current();
  r->env = iof_env_current();
  CHECK(iof_yield() == 0); /* may move to another pool thread */
  r->fn_thread = self_thread();
  atomic_store(&r->fn_returning, 1);
  return done_status(r->index);
}

static void done_cb(void *user, int status) {
  struct done_rec *r = user;
  CHECK(atomic_load(&r->fn_returning) == 1); /* fn has returned */
  atomic_fetch_add(&r->done_calls, 1);
  r->status = status;
  r->done_thread = self_thread();
  /* Still in the chain, on its executor, before its stack is freed. */
  CHECK(iof_fiber_current() == r->fiber);
  CHECK(iof_env_current() == r->env);
  CHECK(iof_executor_equal(iof_env_current()->executor, r->ex));
  CHECK(tstats(r->t).live >= 1);
}

static void launch_on_done_once_on_chain_executor_with_fn_status(void **state) {
  (void)state;
  enum { N = 64 };
  static struct done_rec recs[N];
  iof_frame_allocator *t = iof_tracking_allocator_create(NULL);
  assert_non_null(t);

  /* On a thread pool: on_done runs on the pool thread fn returned on. */
  iof_thread_pool *p = iof_thread_pool_create(3);
  assert_non_null(p);
  iof_executor_ref pex = iof_thread_pool_executor(p);
  memset(recs, 0, sizeof recs);
  for (int i = 0; i < N; i++) {
    recs[i].index = i;
    recs[i].ex = pex;
    recs[i].t = t;
    iof_launch_opts o = {
        .frame_allocator = t, .on_done = done_cb, .user = &recs[i]};
    assert_int_equal(iof_run_async(pex, &o, done_fn, &recs[i]), 0);
  }
  assert_int_equal(iof_thread_pool_join(p), 0);
  /* The work dropped only after every on_done ran and every frame went. */
  iof_tracking_stats s = tstats(t);
  assert_int_equal(s.total, N);
  assert_int_equal(s.live, 0);
  for (int i = 0; i < N; i++) {
    assert_int_equal(atomic_load(&recs[i].done_calls), 1);
    assert_int_equal(recs[i].status, done_status(i));
    assert_true(pthread_equal(recs[i].done_thread, recs[i].fn_thread));
    assert_false(pthread_equal(recs[i].done_thread, pthread_self()));
  }
  assert_int_equal(iof_thread_pool_destroy(p), 0);

  /* On an io_context: on_done runs on the thread running it. */
  iof_io_context *io = new_io();
  iof_executor_ref iex = iof_io_context_executor(io);
  memset(recs, 0, sizeof recs);
  for (int i = 0; i < N; i++) {
    recs[i].index = i;
    recs[i].ex = iex;
    recs[i].t = t;
    iof_launch_opts o = {
        .frame_allocator = t, .on_done = done_cb, .user = &recs[i]};
    assert_int_equal(iof_run_async(iex, &o, done_fn, &recs[i]), 0);
  }
  assert_int_equal(iof_io_context_run(io), 2 * N);
  s = tstats(t);
  assert_int_equal(s.total, 2 * N);
  assert_int_equal(s.live, 0);
  for (int i = 0; i < N; i++) {
    assert_int_equal(atomic_load(&recs[i].done_calls), 1);
    assert_int_equal(recs[i].status, done_status(i));
    assert_true(pthread_equal(recs[i].done_thread, pthread_self()));
  }
  assert_int_equal(iof_io_context_destroy(io), 0);
  assert_int_equal(iof_tracking_allocator_destroy(t), 0);
  assert_no_failures();
}

/* ---- tokens and allocators are not inherited by run_async -------------- */

struct inherit {
  iof_executor_ref ex;
  iof_frame_allocator *t;
  iof_stop_token tok;
  iof_frame_allocator *ctx_alloc;
  int child_ran;
  int parent_checked;
};

static int inherit_child(void *arg) {
  struct inherit *in = arg;
  const iof_env *env = iof_env_current();
  CHECK(env != NULL);
  CHECK(env->stop_token.state == NULL);
  CHECK(!iof_stop_possible(env->stop_token));
  CHECK(!iof_stop_requested(env->stop_token));
  CHECK(env->frame_allocator == NULL);
  CHECK(iof_current_frame_allocator() == in->ctx_alloc);
  CHECK(iof_current_frame_allocator() != in->t);
  in->child_ran++;
  return 0;
}

static int inherit_parent(void *arg) {
  struct inherit *in = arg;
  const iof_env *env = iof_env_current();
  CHECK(env->stop_token.state == in->tok.state);
  CHECK(iof_stop_possible(env->stop_token));
  CHECK(env->frame_allocator == in->t);
  CHECK(iof_current_frame_allocator() == in->t);
  CHECK(iof_launch(in->ex, inherit_child, in) == 0);
  iof_launch_opts none = {0};
  CHECK(iof_run_async(in->ex, &none, inherit_child, in) == 0);
  in->parent_checked = 1;
  return 0;
}

static void launch_in_chain_inherits_neither_token_nor_allocator(void **state) {
  (void)state;
  iof_io_context *io = new_io();
  iof_frame_allocator *t = iof_tracking_allocator_create(NULL);
  assert_non_null(t);
  iof_stop_source src;
  assert_int_equal(iof_stop_source_init(&src), 0);
  struct inherit in = {
      .ex = iof_io_context_executor(io),
      .t = t,
      .tok = iof_stop_source_token(&src),
      .ctx_alloc = iof_context_frame_allocator(iof_io_context_context(io))};
  assert_non_null(in.ctx_alloc);
  iof_launch_opts o = {.stop_token = in.tok, .frame_allocator = t};
  assert_int_equal(iof_run_async(in.ex, &o, inherit_parent, &in), 0);
  assert_int_equal(iof_io_context_run(io), 3);
  assert_int_equal(in.parent_checked, 1);
  assert_int_equal(in.child_ran, 2);
  iof_tracking_stats s = tstats(t);
  assert_int_equal(s.total, 1); /* the parent only */
  assert_int_equal(s.live, 0);
  iof_stop_source_destroy(&src);
  assert_int_equal(iof_io_context_destroy(io), 0);
  assert_int_equal(iof_tracking_allocator_destroy(t), 0);
  assert_no_failures();
}

static int no_token_fn(void *arg) {
  int *ok = arg;
  const iof_env *env = iof_env_current();
  CHECK(env != NULL);
  CHECK(env->stop_token.state == NULL);
  CHECK(!iof_stop_possible(env->stop_token));
  CHECK(!iof_stop_requested(env->stop_token));
  *ok = 1;
  return 0;
}

static void launch_without_token_stop_not_possible(void **state) {
  (void)state;
  iof_io_context *io = new_io();
  int ok1 = 0, ok2 = 0;
  assert_int_equal(iof_launch(iof_io_context_executor(io), no_token_fn, &ok1),
                   0);
  iof_launch_opts o = {.name = "no-token"};
  assert_int_equal(
      iof_run_async(iof_io_context_executor(io), &o, no_token_fn, &ok2), 0);
  assert_int_equal(iof_io_context_run(io), 2);
  assert_int_equal(ok1, 1);
  assert_int_equal(ok2, 1);
  assert_int_equal(iof_io_context_destroy(io), 0);
  assert_no_failures();
}

/* ---- names ------------------------------------------------------------- */

static int name_fn(void *arg) {
  char *out = arg;
  snprintf(out, 64, "%s", iof_fiber_name(iof_fiber_current()));
  return 0;
}

static void launch_name_shows_in_fiber_name(void **state) {
  (void)state;
  iof_io_context *io = new_io();
  char got1[64] = "x", got2[64] = "x";
  char name[16] = "worker-7";
  iof_launch_opts o = {.name = name};
  assert_int_equal(
      iof_run_async(iof_io_context_executor(io), &o, name_fn, got1), 0);
  strcpy(name, "clobbered"); /* the name was copied at launch */
  assert_int_equal(iof_launch(iof_io_context_executor(io), name_fn, got2), 0);
  assert_int_equal(iof_io_context_run(io), 2);
  assert_string_equal(got1, "worker-7");
  assert_string_equal(got2, "");
  assert_int_equal(iof_io_context_destroy(io), 0);
  assert_no_failures();
}

/* ======================================================================= */
/* iof_run                                                                  */
/* ======================================================================= */

static atomic_int run_fn_calls;

static int run_count_fn(void *arg) {
  (void)arg;
  atomic_fetch_add(&run_fn_calls, 1);
  return 3;
}

static int run_raw_fiber(void *arg) {
  int *r = arg;
  *r = iof_run((iof_executor_ref){0}, NULL, run_count_fn, NULL);
  return 0;
}

static void run_outside_fiber_eperm(void **state) {
  (void)state;
  atomic_store(&run_fn_calls, 0);
  iof_io_context *io = new_io();
  assert_int_equal(
      iof_run(iof_io_context_executor(io), NULL, run_count_fn, NULL), -EPERM);
  assert_int_equal(iof_run((iof_executor_ref){0}, NULL, run_count_fn, NULL),
                   -EPERM);
  int r = 0;
  iof_fiber *f =
      iof_fiber_create(NULL, IOF_FIBER_STACK_DEFAULT, run_raw_fiber, &r);
  assert_non_null(f);
  assert_int_equal(iof_fiber_resume(f), 0);
  assert_int_equal(iof_fiber_destroy(f), 0);
  assert_int_equal(r, -EPERM);
  assert_int_equal(atomic_load(&run_fn_calls), 0);
  assert_int_equal(iof_io_context_destroy(io), 0);
}

static void dummy_done(void *user, int status) {
  (void)user;
  (void)status;
}

static int run_einval_fn(void *arg) {
  int *r = arg;
  iof_launch_opts a = {.stack_size = 128 * 1024};
  iof_launch_opts b = {.name = "x"};
  iof_launch_opts c = {.on_done = dummy_done};
  iof_executor_ref none = {0};
  r[0] = iof_run(none, &a, run_count_fn, NULL);
  r[1] = iof_run(none, &b, run_count_fn, NULL);
  r[2] = iof_run(none, &c, run_count_fn, NULL);
  r[3] = iof_run(none, NULL, NULL, NULL);
  r[4] = iof_run(none, NULL, run_count_fn, NULL); /* valid: 3 */
  return 0;
}

static void run_stack_size_name_on_done_einval(void **state) {
  (void)state;
  atomic_store(&run_fn_calls, 0);
  iof_io_context *io = new_io();
  int r[5] = {0};
  assert_int_equal(iof_launch(iof_io_context_executor(io), run_einval_fn, r),
                   0);
  assert_int_equal(iof_io_context_run(io), 1);
  assert_int_equal(r[0], -EINVAL);
  assert_int_equal(r[1], -EINVAL);
  assert_int_equal(r[2], -EINVAL);
  assert_int_equal(r[3], -EINVAL);
  assert_int_equal(r[4], 3);
  assert_int_equal(atomic_load(&run_fn_calls), 1); /* only the valid call */
  assert_int_equal(iof_io_context_destroy(io), 0);
  assert_no_failures();
}

/* ---- equal executors: no hop at all ------------------------------------ */

struct nohop {
  counting_ex *c1, *c2;
  const iof_env *outer;
  pthread_t thread;
  int inner_calls;
  int snap[8];
};

static void snap(counting_ex *c, int *out) {
  out[0] = atomic_load(&c->posts);
  out[1] = atomic_load(&c->dispatches);
  out[2] = atomic_load(&c->started);
  out[3] = atomic_load(&c->finished);
}

static int nohop_inner(void *arg) {
  struct nohop *n = arg;
  const iof_env *env = iof_env_current();
  CHECK(env != NULL && env != n->outer);
  CHECK(iof_executor_equal(env->executor, n->outer->executor));
  CHECK(pthread_equal(self_thread(), n->thread));
  n->inner_calls++;
  return 11;
}

static int nohop_fn(void *arg) {
  struct nohop *n = arg;
  n->outer = iof_env_current();
  n->thread = self_thread();
  int before1[4], before2[4], after1[4], after2[4];
  snap(n->c1, before1);
  snap(n->c2, before2);
  /* The same ref, an empty ref (inherit), another object equal to it. */
  CHECK(iof_run(cx_ref(n->c1), NULL, nohop_inner, n) == 11);
  CHECK(iof_run((iof_executor_ref){0}, NULL, nohop_inner, n) == 11);
  CHECK(iof_run(cx_ref(n->c2), NULL, nohop_inner, n) == 11);
  snap(n->c1, after1);
  snap(n->c2, after2);
  CHECK(after1[0] == before1[0]); /* no post */
  CHECK(after1[1] == before1[1]); /* no dispatch */
  CHECK(after2[0] == before2[0]);
  CHECK(after2[1] == before2[1]);
  CHECK(iof_env_current() == n->outer);
  return 0;
}

static void run_equal_executors_no_post_no_dispatch(void **state) {
  (void)state;
  iof_io_context *io = new_io();
  counting_ex c1 = {.inner = iof_io_context_executor(io)};
  counting_ex c2 = {.inner = iof_io_context_executor(io)};
  assert_true(iof_executor_equal(cx_ref(&c1), cx_ref(&c2)));
  struct nohop n = {.c1 = &c1, .c2 = &c2};
  assert_int_equal(iof_launch(cx_ref(&c1), nohop_fn, &n), 0);
  assert_int_equal(atomic_load(&c1.posts), 1); /* the launch itself */
  assert_int_equal(iof_io_context_run(io), 1);
  assert_int_equal(n.inner_calls, 3);
  assert_int_equal(atomic_load(&c1.posts), 1);
  assert_int_equal(atomic_load(&c1.dispatches), 0);
  assert_int_equal(atomic_load(&c2.posts), 0);
  assert_int_equal(atomic_load(&c2.dispatches), 0);
  assert_int_equal(atomic_load(&c1.started), 1);
  assert_int_equal(atomic_load(&c1.finished), 1);
  assert_int_equal(iof_io_context_destroy(io), 0);
  assert_no_failures();
}

/* ---- env, executor and token inside iof_run ---------------------------- */

struct tokrun {
  iof_stop_source s1, s2;
  const iof_env *outer;
  int calls;
};

static int tok_inner_replaced(void *arg) {
  struct tokrun *t = arg;
  const iof_env *env = iof_env_current();
  CHECK(env != t->outer);
  CHECK(env->stop_token.state == iof_stop_source_token(&t->s2).state);
  CHECK(iof_executor_equal(env->executor, t->outer->executor));
  CHECK(env->executor.ex == t->outer->executor.ex); /* zero ex: inherited */
  CHECK(iof_stop_requested(env->stop_token));       /* s2 was requested */
  t->calls++;
  return 1;
}

static int tok_inner_inherited(void *arg) {
  struct tokrun *t = arg;
  const iof_env *env = iof_env_current();
  CHECK(env != t->outer);
  CHECK(env->stop_token.state == iof_stop_source_token(&t->s1).state);
  CHECK(!iof_stop_requested(env->stop_token));
  CHECK(env->executor.ex == t->outer->executor.ex);
  CHECK(env->executor.vt == t->outer->executor.vt);
  CHECK(env->frame_allocator == t->outer->frame_allocator);
  t->calls++;
  return 2;
}

static int tok_fn(void *arg) {
  struct tokrun *t = arg;
  t->outer = iof_env_current();
  iof_launch_opts o = {.stop_token = iof_stop_source_token(&t->s2)};
  CHECK(iof_run((iof_executor_ref){0}, &o, tok_inner_replaced, t) == 1);
  CHECK(iof_env_current() == t->outer);
  CHECK(t->outer->stop_token.state == iof_stop_source_token(&t->s1).state);
  iof_launch_opts empty = {0};
  CHECK(iof_run((iof_executor_ref){0}, &empty, tok_inner_inherited, t) == 2);
  CHECK(iof_run((iof_executor_ref){0}, NULL, tok_inner_inherited, t) == 2);
  CHECK(iof_env_current() == t->outer);
  return 0;
}

static void run_token_in_opts_replaces_callers_else_inherited(void **state) {
  (void)state;
  iof_io_context *io = new_io();
  struct tokrun t;
  memset(&t, 0, sizeof t);
  assert_int_equal(iof_stop_source_init(&t.s1), 0);
  assert_int_equal(iof_stop_source_init(&t.s2), 0);
  assert_true(iof_stop_source_request(&t.s2));
  iof_launch_opts o = {.stop_token = iof_stop_source_token(&t.s1)};
  assert_int_equal(iof_run_async(iof_io_context_executor(io), &o, tok_fn, &t),
                   0);
  assert_int_equal(iof_io_context_run(io), 1);
  assert_int_equal(t.calls, 3);
  iof_stop_source_destroy(&t.s1);
  iof_stop_source_destroy(&t.s2);
  assert_int_equal(iof_io_context_destroy(io), 0);
  assert_no_failures();
}

/* ---- hop to a thread pool and back ------------------------------------- */

struct hop {
  counting_ex pool_cx; /* wraps the pool: counts the work bracket */
  pthread_t io_thread;
  const iof_env *outer;
  pthread_t fn_thread;
  int started_inside, finished_inside;
  int status_a, status_b;
  int fn_calls;
  atomic_int on_pool;
};

static int hop_inner(void *arg) {
  struct hop *h = arg;
  const iof_env *env = iof_env_current();
  h->fn_thread = self_thread();
  CHECK(!pthread_equal(h->fn_thread, h->io_thread));
  CHECK(env != h->outer);
  CHECK(env->executor.ex == &h->pool_cx);
  CHECK(env->stop_token.state == h->outer->stop_token.state);
  h->started_inside = atomic_load(&h->pool_cx.started);
  h->finished_inside = atomic_load(&h->pool_cx.finished);
  atomic_store(&h->on_pool, 1);
  sleep_ms(30);            /* the io_context's run must wait for us */
  CHECK(iof_yield() == 0); /* a yield inside stays on the pool */
  CHECK(iof_env_current() == env);
  CHECK(iof_executor_equal(iof_env_current()->executor, cx_ref(&h->pool_cx)));
  atomic_store(&h->on_pool, 0);
  h->fn_calls++;
  return h->fn_calls == 1 ? -77 : 5;
}

static int hop_fn(void *arg) {
  struct hop *h = arg;
  h->outer = iof_env_current();
  CHECK(pthread_equal(self_thread(), h->io_thread));
  h->status_a = iof_run(cx_ref(&h->pool_cx), NULL, hop_inner, h);
  CHECK(pthread_equal(self_thread(), h->io_thread));
  CHECK(iof_env_current() == h->outer);
  CHECK(atomic_load(&h->on_pool) == 0);
  h->status_b = iof_run(cx_ref(&h->pool_cx), NULL, hop_inner, h);
  CHECK(pthread_equal(self_thread(), h->io_thread));
  CHECK(iof_env_current() == h->outer);
  return 0;
}

static void run_hops_to_pool_and_back_with_fn_status(void **state) {
  (void)state;
  iof_io_context *io = new_io();
  iof_thread_pool *p = iof_thread_pool_create(2);
  assert_non_null(p);
  struct hop h;
  memset(&h, 0, sizeof h);
  h.pool_cx.inner = iof_thread_pool_executor(p);
  h.io_thread = pthread_self();
  iof_stop_source src;
  assert_int_equal(iof_stop_source_init(&src), 0);
  iof_launch_opts o = {.stop_token = iof_stop_source_token(&src)};
  assert_int_equal(iof_run_async(iof_io_context_executor(io), &o, hop_fn, &h),
                   0);
  /* The chain is away on the pool for 60 ms: run stays alive meanwhile. */
  assert_true(iof_io_context_run(io) >= 3);
  assert_int_equal(h.fn_calls, 2);
  assert_int_equal(h.status_a, -77);
  assert_int_equal(h.status_b, 5);
  /* iof_run bracketed the target executor with work started/finished. */
  assert_int_equal(h.started_inside, 2);
  assert_int_equal(h.finished_inside, 1);
  assert_int_equal(atomic_load(&h.pool_cx.started), 2);
  assert_int_equal(atomic_load(&h.pool_cx.finished), 2);
  assert_true(
      atomic_load(&h.pool_cx.posts) + atomic_load(&h.pool_cx.dispatches) >= 2);
  iof_stop_source_destroy(&src);
  assert_int_equal(iof_thread_pool_destroy(p), 0);
  assert_int_equal(iof_io_context_destroy(io), 0);
  assert_no_failures();
}

/* A chain on the pool hops into an io_context run by another thread: the
 * fiber runs fn on that thread and comes back to a pool thread. */
struct hop_in {
  iof_executor_ref io_ex;
  pthread_t io_thread;
  pthread_t fn_thread, back_thread;
  int status;
};

static int hop_in_inner(void *arg) {
  struct hop_in *h = arg;
  h->fn_thread = self_thread();
  return 19;
}

static int hop_in_fn(void *arg) {
  struct hop_in *h = arg;
  h->status = iof_run(h->io_ex, NULL, hop_in_inner, h);
  h->back_thread = self_thread();
  return 0;
}

static void *io_runner(void *arg) {
  iof_io_context *io = arg;
  iof_io_context_run(io);
  return NULL;
}

static void run_hops_from_pool_into_io_context_thread(void **state) {
  (void)state;
  iof_io_context *io = new_io();
  iof_thread_pool *p = iof_thread_pool_create(2);
  assert_non_null(p);
  iof_work_guard g;
  assert_int_equal(iof_work_guard_init(&g, iof_io_context_executor(io)), 0);
  struct hop_in h = {.io_ex = iof_io_context_executor(io)};
  pthread_t t;
  assert_int_equal(pthread_create(&t, NULL, io_runner, io), 0);
  h.io_thread = t;
  assert_int_equal(iof_launch(iof_thread_pool_executor(p), hop_in_fn, &h), 0);
  assert_int_equal(iof_thread_pool_join(p), 0);
  iof_work_guard_reset(&g);
  pthread_join(t, NULL);
  assert_int_equal(h.status, 19);
  assert_true(pthread_equal(h.fn_thread, t));
  assert_false(pthread_equal(h.back_thread, t));
  assert_false(pthread_equal(h.back_thread, pthread_self()));
  assert_int_equal(iof_thread_pool_destroy(p), 0);
  assert_int_equal(iof_io_context_destroy(io), 0);
  assert_no_failures();
}

/* ---- a target that refuses the hop ------------------------------------- */

struct refuse {
  iof_executor_ref dead;
  pthread_t io_thread;
  int r;
};

static int refuse_fn(void *arg) {
  struct refuse *rf = arg;
  const iof_env *outer = iof_env_current();
  atomic_store(&run_fn_calls, 0);
  rf->r = iof_run(rf->dead, NULL, run_count_fn, NULL);
  CHECK(atomic_load(&run_fn_calls) == 0);
  CHECK(pthread_equal(self_thread(), rf->io_thread));
  CHECK(iof_env_current() == outer);
  return 0;
}

static void run_refused_hop_eshutdown_fn_not_run(void **state) {
  (void)state;
  iof_io_context *io = new_io();
  iof_thread_pool *p = iof_thread_pool_create(1);
  assert_non_null(p);
  iof_execution_context_shutdown(iof_thread_pool_context(p));
  struct refuse rf = {.dead = iof_thread_pool_executor(p),
                      .io_thread = pthread_self()};
  assert_int_equal(iof_launch(iof_io_context_executor(io), refuse_fn, &rf), 0);
  assert_int_equal(iof_io_context_run(io), 1);
  assert_int_equal(rf.r, -ESHUTDOWN);
  assert_int_equal(iof_thread_pool_destroy(p), 0);
  assert_int_equal(iof_io_context_destroy(io), 0);
  assert_no_failures();
}

#define T(f) cmocka_unit_test_setup_teardown(f, begin, end)

int main(void) {
  const struct CMUnitTest tests[] = {
      T(launch_never_runs_fn_before_returning),
      T(launch_empty_ex_or_null_fn_einval_nothing_allocated),
      T(launch_on_shut_down_context_eshutdown),
      T(launch_bad_stack_size_einval),
      T(launch_no_memory_enomem),
      T(launch_on_done_once_on_chain_executor_with_fn_status),
      T(launch_in_chain_inherits_neither_token_nor_allocator),
      T(launch_without_token_stop_not_possible),
      T(launch_name_shows_in_fiber_name),
      T(run_outside_fiber_eperm),
      T(run_stack_size_name_on_done_einval),
      T(run_equal_executors_no_post_no_dispatch),
      T(run_token_in_opts_replaces_callers_else_inherited),
      T(run_hops_to_pool_and_back_with_fn_status),
      T(run_hops_from_pool_into_io_context_thread),
      T(run_refused_hop_eshutdown_fn_not_run),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
