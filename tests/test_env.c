/* The env and the frame allocator cache: iof_env_current() is stable across
 * suspensions, swapped by iof_run and restored after, NULL outside fibers,
 * never suspends; iof_current_frame_allocator() returns what was set, is
 * never NULL in a chain, is refreshed on every resume, follows iof_run's
 * opts, is left alone by run_async, and is where every fiber of a chain is
 * allocated from. Fiber-local storage follows fibers across thread hops.
 *
 * IOF_TEST_THREADED: thread-pool hops. */
#include "test_support.h"
#include "check_test.h"

#include <iofiber/iofiber.h>

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

static int begin(void **state) {
  (void)state;
  checks_begin(120);
  return 0;
}

static int end(void **state) {
  (void)state;
  alarm(0);
  iof_set_current_frame_allocator(NULL);
  return 0;
}

/* An allocator object never used to allocate: a marker value. */
static void *marker_allocate(iof_frame_allocator *self, size_t size) {
  (void)self;
  (void)size;
  CHECK(!"the marker allocator was used");
  errno = ENOMEM;
  return NULL;
}

static void marker_deallocate(iof_frame_allocator *self, void *p, size_t size) {
  (void)self;
  (void)p;
  (void)size;
  CHECK(!"the marker allocator was used");
}

static const iof_frame_allocator_vtbl marker_vtbl = {marker_allocate,
                                                     marker_deallocate};
static iof_frame_allocator marker = {&marker_vtbl};

/* ======================================================================= */
/* iof_env_current                                                          */
/* ======================================================================= */

static int raw_env_fn(void *arg) {
  const iof_env **out = arg;
  *out = iof_env_current();
  return 0;
}

static void env_current_null_outside_fibers(void **state) {
  (void)state;
  assert_null(iof_env_current());
  /* A raw fiber is not launched: it has no env. */
  const iof_env *seen = (const iof_env *)&seen;
  iof_fiber *f =
      iof_fiber_create(NULL, IOF_FIBER_STACK_DEFAULT, raw_env_fn, &seen);
  assert_non_null(f);
  assert_int_equal(iof_fiber_resume(f), 0);
  assert_int_equal(iof_fiber_destroy(f), 0);
  assert_null(seen);
  /* And after a chain ran on this thread. */
  iof_io_context *io = new_io();
  const iof_env *in_chain = NULL;
  assert_int_equal(
      iof_launch(iof_io_context_executor(io), raw_env_fn, &in_chain), 0);
  assert_int_equal(iof_io_context_run(io), 1);
  assert_non_null(in_chain);
  assert_null(iof_env_current());
  assert_int_equal(iof_io_context_destroy(io), 0);
}

struct stable {
  iof_executor_ref ex;
  iof_stop_token tok;
  iof_frame_allocator *alloc;
  long changed;
  long yields;
};

static int stable_fn(void *arg) {
  struct stable *s = arg;
  const iof_env *first = iof_env_current();
  CHECK(first != NULL);
  CHECK(first->executor.ex == s->ex.ex && first->executor.vt == s->ex.vt);
  CHECK(first->stop_token.state == s->tok.state);
  CHECK(first->frame_allocator == s->alloc);
  for (int i = 0; i < 1000; i++) {
    if (iof_yield() != 0) {
      CHECK(!"yield failed");
      break;
    }
    s->yields++;
    const iof_env *now = iof_env_current();
    if (now != first) s->changed++;
  }
  CHECK(first->executor.ex == s->ex.ex);
  CHECK(first->stop_token.state == s->tok.state);
  return 0;
}

static void env_current_stable_across_1000_suspensions(void **state) {
  (void)state;
  iof_io_context *io = new_io();
  iof_thread_pool *p = iof_thread_pool_create(3);
  assert_non_null(p);
  iof_stop_source src;
  assert_int_equal(iof_stop_source_init(&src), 0);
  iof_frame_allocator *t = iof_tracking_allocator_create(NULL);
  assert_non_null(t);
  struct stable a = {.ex = iof_io_context_executor(io),
                     .tok = iof_stop_source_token(&src),
                     .alloc = t};
  struct stable b = {.ex = iof_thread_pool_executor(p)}; /* crosses threads */
  iof_launch_opts oa = {.stop_token = a.tok, .frame_allocator = t};
  assert_int_equal(iof_run_async(a.ex, &oa, stable_fn, &a), 0);
  assert_int_equal(iof_launch(b.ex, stable_fn, &b), 0);
  assert_int_equal(iof_io_context_run(io), 1001);
  assert_int_equal(iof_thread_pool_join(p), 0);
  assert_int_equal(a.yields, 1000);
  assert_int_equal(b.yields, 1000);
  assert_int_equal(a.changed, 0);
  assert_int_equal(b.changed, 0);
  assert_int_equal(iof_thread_pool_destroy(p), 0);
  assert_int_equal(iof_io_context_destroy(io), 0);
  iof_stop_source_destroy(&src);
  assert_int_equal(iof_tracking_allocator_destroy(t), 0);
  assert_no_failures();
}

struct nested {
  iof_executor_ref pool;
  const iof_env *outer;
  const iof_env *inner1, *inner2;
  int depth_ok;
};

static int nested_inner2(void *arg) {
  struct nested *n = arg;
  n->inner2 = iof_env_current();
  CHECK(n->inner2 != n->outer && n->inner2 != n->inner1);
  CHECK(iof_yield() == 0);
  CHECK(iof_env_current() == n->inner2);
  return 0;
}

static int nested_inner1(void *arg) {
  struct nested *n = arg;
  n->inner1 = iof_env_current();
  CHECK(n->inner1 != NULL && n->inner1 != n->outer);
  CHECK(iof_executor_equal(n->inner1->executor, n->pool));
  CHECK(iof_yield() == 0);
  CHECK(iof_env_current() == n->inner1);
  /* Nested, no hop (empty ex): another env again, then this one back. */
  CHECK(iof_run((iof_executor_ref){0}, NULL, nested_inner2, n) == 0);
  CHECK(iof_env_current() == n->inner1);
  return 0;
}

static int nested_fn(void *arg) {
  struct nested *n = arg;
  n->outer = iof_env_current();
  CHECK(iof_run(n->pool, NULL, nested_inner1, n) == 0);
  CHECK(iof_env_current() == n->outer);
  CHECK(iof_yield() == 0);
  CHECK(iof_env_current() == n->outer);
  n->depth_ok = 1;
  return 0;
}

static void
env_current_differs_inside_iof_run_and_is_restored_after(void **state) {
  (void)state;
  iof_io_context *io = new_io();
  iof_thread_pool *p = iof_thread_pool_create(2);
  assert_non_null(p);
  struct nested n = {.pool = iof_thread_pool_executor(p)};
  assert_int_equal(iof_launch(iof_io_context_executor(io), nested_fn, &n), 0);
  assert_true(iof_io_context_run(io) >= 2);
  assert_int_equal(n.depth_ok, 1);
  assert_non_null(n.inner1);
  assert_non_null(n.inner2);
  assert_int_equal(iof_thread_pool_destroy(p), 0);
  assert_int_equal(iof_io_context_destroy(io), 0);
  assert_no_failures();
}

/* iof_env_current never suspends: another ready fiber on the same
 * single-threaded context cannot run between the calls. */
struct nosusp {
  long other_runs;
  long seen_change;
  iof_fiber *self;
};

static int nosusp_other(void *arg) {
  struct nosusp *s = arg;
  for (int i = 0; i < 100; i++) {
    s->other_runs++;
    if (iof_yield() != 0) break;
  }
  return 0;
}

static int nosusp_fn(void *arg) {
  struct nosusp *s = arg;
  s->self = iof_fiber_current();
  pthread_t me = self_thread();
  for (int k = 0; k < 50; k++) {
    long before = s->other_runs;
    const iof_env *e = NULL;
    for (int i = 0; i < 10000; i++) e = iof_env_current();
    CHECK(e != NULL);
    if (s->other_runs != before) s->seen_change++;
    CHECK(iof_fiber_current() == s->self);
    CHECK(pthread_equal(self_thread(), me));
    CHECK(iof_yield() == 0); /* here the other one does run */
  }
  return 0;
}

static void env_current_never_suspends(void **state) {
  (void)state;
  iof_io_context *io = new_io();
  struct nosusp s = {0};
  assert_int_equal(iof_launch(iof_io_context_executor(io), nosusp_fn, &s), 0);
  assert_int_equal(iof_launch(iof_io_context_executor(io), nosusp_other, &s),
                   0);
  assert_true(iof_io_context_run(io) > 100);
  assert_int_equal(s.seen_change, 0);
  assert_int_equal(s.other_runs, 100);
  assert_int_equal(iof_io_context_destroy(io), 0);
  assert_no_failures();
}

/* ======================================================================= */
/* Frame allocators                                                         */
/* ======================================================================= */

static int raw_alloc_fn(void *arg) {
  iof_frame_allocator *t = arg;
  iof_set_current_frame_allocator(t);
  CHECK(iof_current_frame_allocator() == t);
  iof_set_current_frame_allocator(NULL);
  CHECK(iof_current_frame_allocator() == NULL);
  return 0;
}

static void
frame_allocator_current_returns_what_was_set_null_included(void **state) {
  (void)state;
  iof_frame_allocator *t = iof_tracking_allocator_create(NULL);
  assert_non_null(t);
  iof_set_current_frame_allocator(NULL);
  assert_null(iof_current_frame_allocator());
  iof_set_current_frame_allocator(t);
  assert_ptr_equal(iof_current_frame_allocator(), t);
  iof_set_current_frame_allocator(&marker);
  assert_ptr_equal(iof_current_frame_allocator(), &marker);
  iof_set_current_frame_allocator(NULL);
  assert_null(iof_current_frame_allocator());
  /* Inside a raw fiber (no env: the runtime never refreshes it) too. */
  iof_fiber *f =
      iof_fiber_create(NULL, IOF_FIBER_STACK_DEFAULT, raw_alloc_fn, t);
  assert_non_null(f);
  assert_int_equal(iof_fiber_resume(f), 0);
  assert_int_equal(iof_fiber_destroy(f), 0);
  assert_null(iof_current_frame_allocator());
  assert_int_equal(iof_tracking_allocator_destroy(t), 0);
  assert_no_failures();
}

struct effective {
  iof_frame_allocator *expect_current;
  iof_frame_allocator *expect_env;
  int ok;
};

static int effective_fn(void *arg) {
  struct effective *e = arg;
  CHECK(iof_current_frame_allocator() != NULL);
  CHECK(iof_current_frame_allocator() == e->expect_current);
  CHECK(iof_env_current()->frame_allocator == e->expect_env);
  CHECK(iof_yield() == 0);
  CHECK(iof_current_frame_allocator() == e->expect_current);
  e->ok++;
  return 0;
}

static void
frame_allocator_in_chain_is_opts_else_effective_never_null(void **state) {
  (void)state;
  iof_io_context *io = new_io();
  iof_thread_pool *p = iof_thread_pool_create(2);
  assert_non_null(p);
  iof_frame_allocator *t = iof_tracking_allocator_create(NULL);
  iof_frame_allocator *t2 = iof_tracking_allocator_create(NULL);
  assert_non_null(t);
  assert_non_null(t2);
  iof_execution_context *ctx = iof_io_context_context(io);
  iof_frame_allocator *dflt = iof_context_frame_allocator(ctx);
  assert_non_null(dflt);

  /* Given at launch: that one, in env and current. */
  struct effective given = {t, t, 0};
  iof_launch_opts o = {.frame_allocator = t};
  assert_int_equal(
      iof_run_async(iof_io_context_executor(io), &o, effective_fn, &given), 0);
  /* Not given: env says NULL, current is the context's default. */
  struct effective dflt_e = {dflt, NULL, 0};
  assert_int_equal(
      iof_launch(iof_io_context_executor(io), effective_fn, &dflt_e), 0);
  assert_int_equal(iof_io_context_run(io), 4);
  /* The context's allocator changed: later launches use it. */
  assert_int_equal(iof_context_set_frame_allocator(ctx, t2), 0);
  struct effective ctx_e = {t2, NULL, 0};
  iof_io_context_restart(io);
  assert_int_equal(
      iof_launch(iof_io_context_executor(io), effective_fn, &ctx_e), 0);
  assert_int_equal(iof_io_context_run(io), 2);
  /* On a pool: the same rules on every thread it runs on. */
  struct effective pool_e = {
      iof_context_frame_allocator(iof_thread_pool_context(p)), NULL, 0};
  struct effective pool_given = {t, t, 0};
  assert_int_equal(
      iof_launch(iof_thread_pool_executor(p), effective_fn, &pool_e), 0);
  assert_int_equal(
      iof_run_async(iof_thread_pool_executor(p), &o, effective_fn, &pool_given),
      0);
  assert_int_equal(iof_thread_pool_join(p), 0);

  assert_int_equal(given.ok, 1);
  assert_int_equal(dflt_e.ok, 1);
  assert_int_equal(ctx_e.ok, 1);
  assert_int_equal(pool_e.ok, 1);
  assert_int_equal(pool_given.ok, 1);
  assert_int_equal(tstats(t).total, 2);
  assert_int_equal(tstats(t2).total, 1);
  assert_int_equal(tstats(t).live, 0);
  assert_int_equal(tstats(t2).live, 0);
  assert_int_equal(iof_thread_pool_destroy(p), 0);
  assert_int_equal(iof_io_context_destroy(io), 0);
  assert_int_equal(iof_tracking_allocator_destroy(t), 0);
  assert_int_equal(iof_tracking_allocator_destroy(t2), 0);
  assert_no_failures();
}

struct refresh {
  iof_executor_ref pool;
  iof_frame_allocator *t;
  int rounds;
};

static int refresh_inner(void *arg) {
  struct refresh *r = arg;
  CHECK(iof_current_frame_allocator() == r->t);
  iof_set_current_frame_allocator(&marker);
  CHECK(iof_yield() == 0);
  CHECK(iof_current_frame_allocator() == r->t);
  return 0;
}

static int refresh_fn(void *arg) {
  struct refresh *r = arg;
  for (int i = 0; i < 100; i++) {
    iof_set_current_frame_allocator(i % 2 ? NULL : &marker);
    CHECK(iof_yield() == 0);
    CHECK(iof_current_frame_allocator() == r->t);
    /* After a hop away and back too. */
    iof_set_current_frame_allocator(NULL);
    CHECK(iof_run(r->pool, NULL, refresh_inner, r) == 0);
    CHECK(iof_current_frame_allocator() == r->t);
    r->rounds++;
  }
  return 0;
}

static void frame_allocator_refreshed_on_every_resume(void **state) {
  (void)state;
  iof_io_context *io = new_io();
  iof_thread_pool *p = iof_thread_pool_create(2);
  assert_non_null(p);
  iof_frame_allocator *t = iof_tracking_allocator_create(NULL);
  assert_non_null(t);
  struct refresh r = {.pool = iof_thread_pool_executor(p), .t = t};
  iof_launch_opts o = {.frame_allocator = t};
  assert_int_equal(
      iof_run_async(iof_io_context_executor(io), &o, refresh_fn, &r), 0);
  assert_true(iof_io_context_run(io) > 100);
  assert_int_equal(r.rounds, 100);
  assert_int_equal(iof_thread_pool_destroy(p), 0);
  assert_int_equal(iof_io_context_destroy(io), 0);
  assert_int_equal(iof_tracking_allocator_destroy(t), 0);
  assert_no_failures();
}

struct run_alloc {
  iof_executor_ref pool;
  iof_frame_allocator *t, *t3;
  int inner_calls;
};

static int run_alloc_inner(void *arg) {
  struct run_alloc *r = arg;
  CHECK(iof_current_frame_allocator() == r->t3);
  CHECK(iof_env_current()->frame_allocator == r->t3);
  CHECK(iof_yield() == 0);
  CHECK(iof_current_frame_allocator() == r->t3);
  r->inner_calls++;
  return 0;
}

static int run_alloc_plain_inner(void *arg) {
  struct run_alloc *r = arg;
  CHECK(iof_current_frame_allocator() == r->t); /* inherited */
  r->inner_calls++;
  return 0;
}

static int run_alloc_fn(void *arg) {
  struct run_alloc *r = arg;
  iof_launch_opts o = {.frame_allocator = r->t3};
  CHECK(iof_current_frame_allocator() == r->t);
  /* No hop. */
  CHECK(iof_run((iof_executor_ref){0}, &o, run_alloc_inner, r) == 0);
  CHECK(iof_current_frame_allocator() == r->t);
  CHECK(iof_env_current()->frame_allocator == r->t);
  /* With a hop to the pool and back. */
  CHECK(iof_run(r->pool, &o, run_alloc_inner, r) == 0);
  CHECK(iof_current_frame_allocator() == r->t);
  /* No allocator in opts: the caller's stays current. */
  CHECK(iof_run(r->pool, NULL, run_alloc_plain_inner, r) == 0);
  CHECK(iof_current_frame_allocator() == r->t);
  return 0;
}

static void
frame_allocator_iof_run_opts_current_inside_restored_after(void **state) {
  (void)state;
  iof_io_context *io = new_io();
  iof_thread_pool *p = iof_thread_pool_create(2);
  assert_non_null(p);
  iof_frame_allocator *t = iof_tracking_allocator_create(NULL);
  iof_frame_allocator *t3 = iof_tracking_allocator_create(NULL);
  assert_non_null(t);
  assert_non_null(t3);
  struct run_alloc r = {.pool = iof_thread_pool_executor(p), .t = t, .t3 = t3};
  iof_launch_opts o = {.frame_allocator = t};
  assert_int_equal(
      iof_run_async(iof_io_context_executor(io), &o, run_alloc_fn, &r), 0);
  assert_true(iof_io_context_run(io) >= 1);
  assert_int_equal(r.inner_calls, 3);
  assert_int_equal(tstats(t3).total, 0); /* iof_run allocates nothing */
  assert_int_equal(tstats(t).total, 1);
  assert_int_equal(iof_thread_pool_destroy(p), 0);
  assert_int_equal(iof_io_context_destroy(io), 0);
  assert_int_equal(iof_tracking_allocator_destroy(t), 0);
  assert_int_equal(iof_tracking_allocator_destroy(t3), 0);
  assert_no_failures();
}

static int noop_fn(void *arg) {
  (void)arg;
  return 0;
}

struct leave {
  iof_executor_ref ex;
  iof_frame_allocator *t;
  int ok;
};

static int leave_fn(void *arg) {
  struct leave *l = arg;
  CHECK(iof_current_frame_allocator() == l->t);
  CHECK(iof_launch(l->ex, noop_fn, NULL) == 0);
  CHECK(iof_current_frame_allocator() == l->t);
  /* Whatever the caller made current stays current, NULL included. */
  iof_set_current_frame_allocator(&marker);
  iof_launch_opts o = {.frame_allocator = l->t};
  CHECK(iof_run_async(l->ex, &o, noop_fn, NULL) == 0);
  CHECK(iof_current_frame_allocator() == &marker);
  iof_set_current_frame_allocator(NULL);
  CHECK(iof_run_async(l->ex, &o, noop_fn, NULL) == 0);
  CHECK(iof_current_frame_allocator() == NULL);
  l->ok = 1;
  return 0;
}

static void
frame_allocator_run_async_in_fiber_leaves_callers_value(void **state) {
  (void)state;
  iof_io_context *io = new_io();
  iof_frame_allocator *t = iof_tracking_allocator_create(NULL);
  assert_non_null(t);
  struct leave l = {.ex = iof_io_context_executor(io), .t = t};
  iof_launch_opts o = {.frame_allocator = t};
  assert_int_equal(iof_run_async(l.ex, &o, leave_fn, &l), 0);
  assert_int_equal(iof_io_context_run(io), 4);
  assert_int_equal(l.ok, 1);
  assert_int_equal(tstats(t).total, 3);
  assert_int_equal(iof_io_context_destroy(io), 0);
  assert_int_equal(iof_tracking_allocator_destroy(t), 0);
  assert_no_failures();
}

/* Every fiber a chain creates comes from the chain's allocator. */
struct family {
  iof_executor_ref io_ex, pool_ex;
  iof_frame_allocator *t;
  atomic_int children;
  atomic_int bad;
};

static int family_child(void *arg) {
  struct family *f = arg;
  if (iof_current_frame_allocator() != f->t) atomic_fetch_add(&f->bad, 1);
  atomic_fetch_add(&f->children, 1);
  return 0;
}

static int family_parent(void *arg) {
  struct family *f = arg;
  for (int i = 0; i < 10; i++) {
    iof_launch_opts o = {.frame_allocator = iof_current_frame_allocator()};
    CHECK(o.frame_allocator == f->t);
    CHECK(iof_run_async(i % 2 ? f->pool_ex : f->io_ex, &o, family_child, f) ==
          0);
    CHECK(iof_yield() == 0); /* resumes refresh the value each time */
  }
  return 0;
}

static void frame_allocator_chain_allocator_used_for_every_fiber(void **state) {
  (void)state;
  iof_io_context *io = new_io();
  iof_thread_pool *p = iof_thread_pool_create(2);
  assert_non_null(p);
  iof_frame_allocator *t = iof_tracking_allocator_create(NULL);
  assert_non_null(t);
  struct family f = {.io_ex = iof_io_context_executor(io),
                     .pool_ex = iof_thread_pool_executor(p),
                     .t = t};
  iof_launch_opts o = {.frame_allocator = t};
  assert_int_equal(iof_run_async(f.io_ex, &o, family_parent, &f), 0);
  assert_true(iof_io_context_run(io) >= 6);
  assert_int_equal(iof_thread_pool_join(p), 0);
  assert_int_equal(atomic_load(&f.children), 10);
  assert_int_equal(atomic_load(&f.bad), 0);
  iof_tracking_stats s = tstats(t);
  assert_int_equal(s.total, 11);
  assert_int_equal(s.live, 0);
  assert_int_equal(s.freed, 11);
  assert_int_equal(iof_thread_pool_destroy(p), 0);
  assert_int_equal(iof_io_context_destroy(io), 0);
  assert_int_equal(iof_tracking_allocator_destroy(t), 0);
  assert_no_failures();
}

/* ======================================================================= */
/* Fiber-local storage across hops                                          */
/* ======================================================================= */

enum { FLS_FIBERS = 1000 };

static atomic_int fls_dtor_calls[FLS_FIBERS];
static atomic_int fls_dtor_other;
static int fls_values[FLS_FIBERS];
static int fls_values2[FLS_FIBERS];

static void fls_dtor(void *v) {
  int *p = v;
  if (p >= fls_values && p < fls_values + FLS_FIBERS)
    atomic_fetch_add(&fls_dtor_calls[p - fls_values], 1);
  else
    atomic_fetch_add(&fls_dtor_other, 1);
}

struct fls_run {
  iof_fls_key key, key2;
  iof_executor_ref pool;
  pthread_t io_thread;
  atomic_int finished;
  atomic_int hopped_threads; /* fibers whose pool side ran off io_thread */
};

struct fls_arg {
  struct fls_run *run;
  int index;
};

static struct fls_arg fls_args[FLS_FIBERS];

static int fls_inner(void *arg) {
  struct fls_arg *a = arg;
  struct fls_run *r = a->run;
  if (!pthread_equal(self_thread(), r->io_thread))
    atomic_fetch_add(&r->hopped_threads, 1);
  CHECK(iof_fls_get(r->key) == &fls_values[a->index]);
  CHECK(iof_yield() == 0); /* other fibers' values are set meanwhile */
  CHECK(iof_fls_get(r->key) == &fls_values[a->index]);
  CHECK(iof_fls_set(r->key2, &fls_values2[a->index]) == 0);
  return 0;
}

static int fls_fn(void *arg) {
  struct fls_arg *a = arg;
  struct fls_run *r = a->run;
  CHECK(iof_fls_get(r->key) == NULL); /* not the thread's value */
  CHECK(iof_fls_set(r->key, &fls_values[a->index]) == 0);
  CHECK(iof_yield() == 0);
  CHECK(iof_fls_get(r->key) == &fls_values[a->index]);
  CHECK(iof_run(r->pool, NULL, fls_inner, a) == 0);
  CHECK(pthread_equal(self_thread(), r->io_thread));
  CHECK(iof_fls_get(r->key) == &fls_values[a->index]);
  CHECK(iof_fls_get(r->key2) == &fls_values2[a->index]);
  atomic_fetch_add(&r->finished, 1);
  return 0;
}

static void fls_values_survive_hops_destructors_once_per_fiber(void **state) {
  (void)state;
  iof_io_context *io = new_io();
  iof_thread_pool *p = iof_thread_pool_create(4);
  assert_non_null(p);
  static struct fls_run r;
  memset(&r, 0, sizeof r);
  r.pool = iof_thread_pool_executor(p);
  r.io_thread = pthread_self();
  assert_int_equal(iof_fls_key_create(&r.key, fls_dtor), 0);
  assert_int_equal(iof_fls_key_create(&r.key2, NULL), 0);
  int thread_value = 0;
  assert_int_equal(iof_fls_set(r.key, &thread_value), 0); /* the thread's */
  for (int i = 0; i < FLS_FIBERS; i++) {
    atomic_store(&fls_dtor_calls[i], 0);
    fls_args[i].run = &r;
    fls_args[i].index = i;
    assert_int_equal(
        iof_launch(iof_io_context_executor(io), fls_fn, &fls_args[i]), 0);
  }
  atomic_store(&fls_dtor_other, 0);
  assert_true(iof_io_context_run(io) >= 3 * FLS_FIBERS);
  assert_int_equal(atomic_load(&r.finished), FLS_FIBERS);
  assert_int_equal(atomic_load(&r.hopped_threads), FLS_FIBERS);
  for (int i = 0; i < FLS_FIBERS; i++)
    assert_int_equal(atomic_load(&fls_dtor_calls[i]), 1);
  assert_int_equal(atomic_load(&fls_dtor_other), 0);
  /* The thread's own value was never touched by the fibers. */
  assert_ptr_equal(iof_fls_get(r.key), &thread_value);
  assert_int_equal(iof_fls_set(r.key, NULL), 0);
  assert_int_equal(iof_thread_pool_destroy(p), 0);
  assert_int_equal(iof_io_context_destroy(io), 0);
  for (int i = 0; i < FLS_FIBERS; i++)
    assert_int_equal(atomic_load(&fls_dtor_calls[i]), 1);
  assert_int_equal(iof_fls_key_delete(r.key), 0);
  assert_int_equal(iof_fls_key_delete(r.key2), 0);
  assert_no_failures();
}

#define T(f) cmocka_unit_test_setup_teardown(f, begin, end)

int main(void) {
  const struct CMUnitTest tests[] = {
      T(env_current_null_outside_fibers),
      T(env_current_stable_across_1000_suspensions),
      T(env_current_differs_inside_iof_run_and_is_restored_after),
      T(env_current_never_suspends),
      T(frame_allocator_current_returns_what_was_set_null_included),
      T(frame_allocator_in_chain_is_opts_else_effective_never_null),
      T(frame_allocator_refreshed_on_every_resume),
      T(frame_allocator_iof_run_opts_current_inside_restored_after),
      T(frame_allocator_run_async_in_fiber_leaves_callers_value),
      T(frame_allocator_chain_allocator_used_for_every_fiber),
      T(fls_values_survive_hops_destructors_once_per_fiber),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
