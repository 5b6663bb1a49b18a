/* iof_mutex: exact
 * counts under contention across pool threads, FIFO hand-off without
 * barging, cancellation of a queued waiter (queue stays consistent, a
 * hand-off that loses to a cancellation goes to the next waiter), errors,
 * plain threads mixed with fibers, timed locks, shutdown of a context with
 * a blocked waiter.
 *
 * IOF_TEST_THREADED */
#include "sync_test.h"

/* ---- 4 pool threads x 1,000 fibers x 100 increments ------------------- */

#define CONT_FIBERS (SYNC_TSAN ? 200 : 1000)
#define CONT_INCS 100

typedef struct contended {
  iof_mutex m;
  int counter; /* plain int: only the mutex protects it */
  atomic_int errors;
  atomic_int done;
} contended;

static int contend_fn(void *arg) {
  contended *c = arg;
  for (int i = 0; i < CONT_INCS; i++) {
    if (iof_mutex_lock(&c->m) != 0) {
      atomic_fetch_add(&c->errors, 1);
      continue;
    }
    int v = c->counter;
    if (i % 10 == 0) iof_yield(); /* hold it across a suspension */
    c->counter = v + 1;
    if (iof_mutex_unlock(&c->m) != 0) atomic_fetch_add(&c->errors, 1);
  }
  atomic_fetch_add(&c->done, 1);
  return 0;
}

static void pool_contention(void **state) {
  (void)state;
  contended c = {.counter = 0};
  assert_int_equal(iof_mutex_init(&c.m), 0);
  iof_thread_pool *p = iof_thread_pool_create(4);
  assert_non_null(p);
  for (int i = 0; i < CONT_FIBERS; i++)
    assert_int_equal(iof_launch(iof_thread_pool_executor(p), contend_fn, &c),
                     0);
  assert_int_equal(iof_thread_pool_join(p), 0);
  assert_int_equal(iof_thread_pool_destroy(p), 0);
  assert_int_equal(atomic_load(&c.errors), 0);
  assert_int_equal(atomic_load(&c.done), CONT_FIBERS);
  assert_int_equal(c.counter, CONT_FIBERS * CONT_INCS);
  assert_int_equal(iof_mutex_destroy(&c.m), 0);
}

/* ---- FIFO hand-off, no barging ---------------------------------------- */

#define NW 5

typedef struct fifo {
  iof_mutex m;
  iof_executor_ref ex;
  int order[NW + 2];
  int n;
  int queued;
  int barge_try;
  int lock_status[NW + 1];
} fifo;

typedef struct waiter_arg {
  fifo *f;
  int id;
} waiter_arg;

static int fifo_waiter(void *arg) {
  waiter_arg *a = arg;
  a->f->queued++;
  int r = iof_mutex_lock(&a->f->m);
  a->f->lock_status[a->id] = r;
  if (r != 0) return r;
  a->f->order[a->f->n++] = a->id;
  iof_yield();
  return iof_mutex_unlock(&a->f->m);
}

static int barger(void *arg) {
  fifo *f = arg;
  /* The mutex was just handed to waiter 1, who has not run yet: it is not
   * free, a newcomer gets nothing. */
  f->barge_try = iof_mutex_trylock(&f->m);
  int r = iof_mutex_lock(&f->m); /* queues behind everyone */
  if (r != 0) return r;
  f->order[f->n++] = 99;
  return iof_mutex_unlock(&f->m);
}

static waiter_arg wargs[NW + 1];

static int fifo_main(void *arg) {
  fifo *f = arg;
  assert_int_equal(iof_mutex_lock(&f->m), 0);
  for (int i = 1; i <= NW; i++) {
    wargs[i] = (waiter_arg){f, i};
    assert_int_equal(iof_launch(f->ex, fifo_waiter, &wargs[i]), 0);
  }
  /* Let each waiter run and queue (single-threaded: they run in order). */
  while (f->queued < NW) iof_yield();
  iof_yield();
  assert_int_equal(iof_mutex_trylock(&f->m), -EBUSY); /* ours, held */
  assert_int_equal(iof_mutex_lock(&f->m), -EDEADLK);
  assert_int_equal(iof_mutex_unlock(&f->m), 0);
  /* Handed over to waiter 1 already: we are not the owner any more. */
  assert_int_equal(iof_mutex_unlock(&f->m), -EPERM);
  assert_int_equal(iof_launch(f->ex, barger, f), 0);
  return 0;
}

static void fifo_order(void **state) {
  (void)state;
  iof_io_context *io = iof_io_context_create();
  fifo f = {.n = 0};
  assert_int_equal(iof_mutex_init(&f.m), 0);
  f.ex = iof_io_context_executor(io);
  assert_int_equal(iof_launch(f.ex, fifo_main, &f), 0);
  assert_true(iof_io_context_run(io) >= 0);
  assert_int_equal(iof_io_context_destroy(io), 0);
  assert_int_equal(f.barge_try, -EBUSY);
  assert_int_equal(f.n, NW + 1);
  for (int i = 0; i < NW; i++) assert_int_equal(f.order[i], i + 1);
  assert_int_equal(f.order[NW], 99);
  assert_int_equal(iof_mutex_destroy(&f.m), 0);
}

/* ---- cancellation of queued waiters ------------------------------------ */

typedef struct cancel_case {
  iof_mutex m;
  iof_executor_ref ex;
  iof_stop_source src[4];
  int status[4];
  int order[4];
  int n;
  int queued;
} cancel_case;

typedef struct cw_arg {
  cancel_case *c;
  int id;
} cw_arg;

static int cancel_waiter(void *arg) {
  cw_arg *a = arg;
  cancel_case *c = a->c;
  c->queued++;
  int r = iof_mutex_lock(&c->m);
  c->status[a->id] = r;
  if (r != 0) return r;
  c->order[c->n++] = a->id;
  iof_yield();
  return iof_mutex_unlock(&c->m);
}

static cw_arg cargs[4];

static int cancel_main(void *arg) {
  cancel_case *c = arg;
  assert_int_equal(iof_mutex_lock(&c->m), 0);
  for (int i = 0; i < 4; i++) {
    assert_int_equal(iof_stop_source_init(&c->src[i]), 0);
    cargs[i] = (cw_arg){c, i};
    iof_launch_opts o = {0};
    o.stop_token = iof_stop_source_token(&c->src[i]);
    assert_int_equal(iof_run_async(c->ex, &o, cancel_waiter, &cargs[i]), 0);
  }
  while (c->queued < 4) iof_yield();
  iof_yield();
  /* Cancel waiter 2 in the middle of the queue: it leaves it. */
  assert_true(iof_stop_source_request(&c->src[2]));
  iof_yield();
  assert_int_equal(c->status[2], -ECANCELED);
  /* Cancel waiter 0 (the head) and unlock at once, before it has run: the
   * hand-off loses the claim to the cancellation and goes to waiter 1. */
  assert_true(iof_stop_source_request(&c->src[0]));
  assert_int_equal(iof_mutex_unlock(&c->m), 0);
  return 0;
}

static void cancel_waiters(void **state) {
  (void)state;
  iof_io_context *io = iof_io_context_create();
  cancel_case c = {.n = 0};
  for (int i = 0; i < 4; i++) c.status[i] = 1;
  assert_int_equal(iof_mutex_init(&c.m), 0);
  c.ex = iof_io_context_executor(io);
  assert_int_equal(iof_launch(c.ex, cancel_main, &c), 0);
  assert_true(iof_io_context_run(io) >= 0);
  assert_int_equal(iof_io_context_destroy(io), 0);
  assert_int_equal(c.status[0], -ECANCELED);
  assert_int_equal(c.status[1], 0);
  assert_int_equal(c.status[2], -ECANCELED);
  assert_int_equal(c.status[3], 0);
  assert_int_equal(c.n, 2);
  assert_int_equal(c.order[0], 1);
  assert_int_equal(c.order[1], 3);
  assert_int_equal(iof_mutex_trylock(&c.m), 0);
  assert_int_equal(iof_mutex_unlock(&c.m), 0);
  assert_int_equal(iof_mutex_destroy(&c.m), 0);
  for (int i = 0; i < 4; i++) iof_stop_source_destroy(&c.src[i]);
}

/* Stop requested before the call: -ECANCELED without waiting or taking. */
static int stopped_fn(void *arg) {
  iof_mutex *m = arg;
  int r = iof_mutex_lock(m);
  if (r != -ECANCELED) return -1000 + r;
  if (iof_mutex_trylock(m) != 0) return -2000; /* try ignores the token */
  return iof_mutex_unlock(m);
}

static void already_stopped(void **state) {
  (void)state;
  iof_mutex m = IOF_MUTEX_INIT;
  iof_stop_source src;
  assert_int_equal(iof_stop_source_init(&src), 0);
  iof_stop_source_request(&src);
  iof_io_context *io = iof_io_context_create();
  int status = 1;
  iof_launch_opts o = {0};
  o.stop_token = iof_stop_source_token(&src);
  o.on_done = sync_test_done;
  o.user = &status;
  assert_int_equal(
      iof_run_async(iof_io_context_executor(io), &o, stopped_fn, &m), 0);
  assert_true(iof_io_context_run(io) >= 0);
  assert_int_equal(iof_io_context_destroy(io), 0);
  assert_int_equal(status, 0);
  iof_stop_source_destroy(&src);
  assert_int_equal(iof_mutex_destroy(&m), 0);
}

/* ---- errors -------------------------------------------------------------- */

static void errors(void **state) {
  (void)state;
  iof_mutex m;
  assert_int_equal(iof_mutex_init(NULL), -EINVAL);
  assert_int_equal(iof_mutex_lock(NULL), -EINVAL);
  assert_int_equal(iof_mutex_unlock(NULL), -EINVAL);
  assert_int_equal(iof_mutex_trylock(NULL), -EINVAL);
  assert_int_equal(iof_mutex_destroy(NULL), -EINVAL);
  assert_int_equal(iof_mutex_init(&m), 0);
  assert_int_equal(iof_mutex_unlock(&m), -EPERM); /* not locked */
  assert_int_equal(iof_mutex_lock(&m), 0);        /* plain thread */
  assert_int_equal(iof_mutex_lock(&m), -EDEADLK);
  assert_int_equal(iof_mutex_trylock(&m), -EBUSY);
  assert_int_equal(iof_mutex_destroy(&m), -EBUSY);
  assert_int_equal(iof_mutex_unlock(&m), 0);
  assert_int_equal(iof_mutex_destroy(&m), 0);
}

/* ---- plain threads mixed with fibers ------------------------------------ */

#define MIX_THREADS 2
#define MIX_FIBERS 50
#define MIX_INCS (SYNC_TSAN ? 200 : 2000)

typedef struct mixed {
  iof_mutex m;
  long counter;
  atomic_int errors;
} mixed;

static void mixed_inc(mixed *x) {
  for (int i = 0; i < MIX_INCS; i++) {
    if (iof_mutex_lock(&x->m) != 0) {
      atomic_fetch_add(&x->errors, 1);
      continue;
    }
    x->counter++;
    if (iof_mutex_unlock(&x->m) != 0) atomic_fetch_add(&x->errors, 1);
  }
}

static void *mixed_thread(void *arg) {
  mixed_inc(arg);
  return NULL;
}

static int mixed_fiber(void *arg) {
  mixed_inc(arg);
  return 0;
}

static void threads_and_fibers(void **state) {
  (void)state;
  mixed x = {.counter = 0};
  assert_int_equal(iof_mutex_init(&x.m), 0);
  iof_thread_pool *p = iof_thread_pool_create(2);
  iof_io_context *io = iof_io_context_create();
  pthread_t t[MIX_THREADS];
  for (int i = 0; i < MIX_THREADS; i++)
    assert_int_equal(pthread_create(&t[i], NULL, mixed_thread, &x), 0);
  for (int i = 0; i < MIX_FIBERS; i++) {
    assert_int_equal(iof_launch(iof_thread_pool_executor(p), mixed_fiber, &x),
                     0);
    assert_int_equal(iof_launch(iof_io_context_executor(io), mixed_fiber, &x),
                     0);
  }
  assert_true(iof_io_context_run(io) >= 0);
  assert_int_equal(iof_thread_pool_join(p), 0);
  for (int i = 0; i < MIX_THREADS; i++) pthread_join(t[i], NULL);
  assert_int_equal(iof_thread_pool_destroy(p), 0);
  assert_int_equal(iof_io_context_destroy(io), 0);
  assert_int_equal(atomic_load(&x.errors), 0);
  assert_int_equal(x.counter, (long)(MIX_THREADS + 2 * MIX_FIBERS) * MIX_INCS);
  assert_int_equal(iof_mutex_destroy(&x.m), 0);
}

/* ---- timed locks ----------------------------------------------------------
 */

typedef struct timed {
  iof_mutex m;
  int fiber_status;
  int64_t waited_ns;
} timed;

static int timed_fiber(void *arg) {
  timed *t = arg;
  int64_t t0 = iof_deadline_after(0);
  t->fiber_status = iof_mutex_timedlock(&t->m, iof_deadline_after(20000000));
  t->waited_ns = iof_deadline_after(0) - t0;
  return 0;
}

static void *timed_thread(void *arg) {
  timed *t = arg;
  t->fiber_status = iof_mutex_timedlock(&t->m, iof_deadline_after(20000000));
  return NULL;
}

static void timed_lock(void **state) {
  (void)state;
  timed t = {.fiber_status = 1};
  assert_int_equal(iof_mutex_init(&t.m), 0);
  /* A free mutex is taken even with a past deadline. */
  assert_int_equal(iof_mutex_timedlock(&t.m, 0), 0);
  /* Held by this thread: another plain thread times out. */
  pthread_t th;
  assert_int_equal(pthread_create(&th, NULL, timed_thread, &t), 0);
  pthread_join(th, NULL);
  assert_int_equal(t.fiber_status, -ETIMEDOUT);
  /* A fiber (its timer on its io_context's loop): times out too. */
  t.fiber_status = 1;
  run_io(timed_fiber, &t);
  assert_int_equal(t.fiber_status, -ETIMEDOUT);
  assert_true(t.waited_ns >= 15000000);
  assert_int_equal(iof_mutex_unlock(&t.m), 0);
  assert_int_equal(iof_mutex_destroy(&t.m), 0);
}

/* ---- shutdown with a blocked waiter ------------------------------------- */

static int blocked_fn(void *arg) {
  return iof_mutex_lock(arg);
}

static void shutdown_cancels(void **state) {
  (void)state;
  iof_mutex m = IOF_MUTEX_INIT;
  assert_int_equal(iof_mutex_lock(&m), 0); /* held by this thread */
  iof_io_context *io = iof_io_context_create();
  int status = 1;
  iof_launch_opts o = {0};
  o.on_done = sync_test_done;
  o.user = &status;
  assert_int_equal(
      iof_run_async(iof_io_context_executor(io), &o, blocked_fn, &m), 0);
  iof_io_context_run_for(io, 20000000);
  assert_int_equal(status, 1); /* still waiting */
  assert_int_equal(iof_io_context_destroy(io), 0);
  assert_int_equal(status, -ECANCELED);
  assert_int_equal(iof_mutex_unlock(&m), 0);
  assert_int_equal(iof_mutex_destroy(&m), 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(pool_contention, sync_test_arm,
                                      sync_test_disarm),
      cmocka_unit_test_setup_teardown(fifo_order, sync_test_arm,
                                      sync_test_disarm),
      cmocka_unit_test_setup_teardown(cancel_waiters, sync_test_arm,
                                      sync_test_disarm),
      cmocka_unit_test_setup_teardown(already_stopped, sync_test_arm,
                                      sync_test_disarm),
      cmocka_unit_test_setup_teardown(errors, sync_test_arm, sync_test_disarm),
      cmocka_unit_test_setup_teardown(threads_and_fibers, sync_test_arm,
                                      sync_test_disarm),
      cmocka_unit_test_setup_teardown(timed_lock, sync_test_arm,
                                      sync_test_disarm),
      cmocka_unit_test_setup_teardown(shutdown_cancels, sync_test_arm,
                                      sync_test_disarm),
  };
  int r = cmocka_run_group_tests(tests, NULL, NULL);
  return r;
}
