/* io_context run loop and work tracking: run/run_one/poll/run_for, stop and
 * restart, work guards, -EBUSY for a second runner, wake-ups from other
 * threads, attaching to a host's libev loop, and chains counting as work
 * until on_done ran and their stack is freed.
 *
 * IOF_TEST_THREADED */
#include "test_support.h"

#include <iofiber/iofiber.h>

#include <errno.h>
#include <ev.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* Per-test watchdog (support/test_support.h). */
IOF_TEST_WATCHDOG(arm, disarm, 30)

/* Bounded wait for *flag != 0 (5 s). */
static bool wait_flag(atomic_int *flag) {
  for (int i = 0; i < 5000; i++) {
    if (atomic_load(flag)) return true;
    sleep_ms(1);
  }
  return false;
}

/* ---- chains used below -------------------------------------------------- */

typedef struct yielder {
  int n;     /* yields to do */
  int steps; /* yields done */
  int status_of_yields;
  int done_calls;
  int done_status;
} yielder;

static int yield_fn(void *arg) {
  yielder *y = arg;
  for (int i = 0; i < y->n; i++) {
    int r = iof_yield();
    if (r != 0) y->status_of_yields = r;
    y->steps++;
  }
  return y->n;
}

static void yield_done(void *user, int status) {
  yielder *y = user;
  y->done_calls++;
  y->done_status = status;
}

static void launch_yielder(iof_executor_ref ex, yielder *y, int n) {
  memset(y, 0, sizeof *y);
  y->n = n;
  iof_launch_opts o;
  memset(&o, 0, sizeof o);
  o.on_done = yield_done;
  o.user = y;
  assert_int_equal(iof_run_async(ex, &o, yield_fn, y), 0);
}

static int count_fn(void *arg) {
  atomic_fetch_add((atomic_int *)arg, 1);
  return 0;
}

/* An operation completed by another thread: suspend publishes h (and the
 * captured executor); the completer posts h back to that executor. */
typedef struct xop {
  iof_fiber *_Atomic h;
  iof_executor_ref ex;
  int result;
} xop;

static iof_fiber *xop_suspend(void *self, iof_fiber *h, const iof_env *env) {
  xop *o = self;
  o->ex = env->executor;
  atomic_store_explicit(&o->h, h, memory_order_release);
  return NULL;
}

static int xop_resume(void *self) {
  return ((xop *)self)->result;
}

static const iof_awaitable_vtbl xop_vt = {NULL, xop_suspend, xop_resume};

/* Waits (bounded) for the op to be pending, completes it with `result`. */
static int xop_complete(xop *o, int result) {
  iof_fiber *h = NULL;
  for (int i = 0; i < 5000; i++) {
    h = atomic_load_explicit(&o->h, memory_order_acquire);
    if (h) break;
    sleep_ms(1);
  }
  if (!h) return -ETIMEDOUT;
  atomic_store(&o->h, NULL);
  o->result = result;
  return iof_executor_post(o->ex, h);
}

/* ---- run ------------------------------------------------------------------
 */

static void run_returns_when_last_chain_finishes(void **state) {
  (void)state;
  iof_io_context *io = iof_io_context_create();
  assert_non_null(io);
  iof_executor_ref ex = iof_io_context_executor(io);
  yielder y[3];
  launch_yielder(ex, &y[0], 0);
  launch_yielder(ex, &y[1], 10);
  launch_yielder(ex, &y[2], 100);
  assert_false(iof_io_context_stopped(io));
  int ran = iof_io_context_run(io);
  /* Each chain resumed once to start plus once per yield. */
  assert_int_equal(ran, 1 + 11 + 101);
  for (int i = 0; i < 3; i++) {
    assert_int_equal(y[i].steps, y[i].n);
    assert_int_equal(y[i].status_of_yields, 0);
    assert_int_equal(y[i].done_calls, 1);
    assert_int_equal(y[i].done_status, y[i].n);
  }
  assert_true(iof_io_context_stopped(io));
  assert_int_equal(iof_io_context_destroy(io), 0);
}

/* A chain finished early must not end run while another is suspended on an
 * operation that another thread completes later. */
typedef struct pend_chain {
  xop op;
  int status;
  atomic_int done;
} pend_chain;

static int pend_fn(void *arg) {
  pend_chain *c = arg;
  c->status = iof_await(&c->op, &xop_vt);
  return 0;
}

static void pend_done(void *user, int status) {
  (void)status;
  atomic_store(&((pend_chain *)user)->done, 1);
}

static void *complete_after_100ms(void *arg) {
  pend_chain *c = arg;
  sleep_ms(100);
  xop_complete(&c->op, 7);
  return NULL;
}

static void run_waits_for_a_suspended_chain(void **state) {
  (void)state;
  iof_io_context *io = iof_io_context_create();
  assert_non_null(io);
  iof_executor_ref ex = iof_io_context_executor(io);
  atomic_int quick = 0;
  assert_int_equal(iof_launch(ex, count_fn, &quick), 0);
  pend_chain c;
  memset(&c, 0, sizeof c);
  iof_launch_opts o;
  memset(&o, 0, sizeof o);
  o.on_done = pend_done;
  o.user = &c;
  assert_int_equal(iof_run_async(ex, &o, pend_fn, &c), 0);
  pthread_t t;
  assert_int_equal(pthread_create(&t, NULL, complete_after_100ms, &c), 0);
  uint64_t t0 = iof_test_now_ns();
  int ran = iof_io_context_run(io);
  int64_t el = ms_since(t0);
  pthread_join(t, NULL);
  assert_int_equal(ran, 3);
  assert_int_equal(atomic_load(&quick), 1);
  assert_int_equal(atomic_load(&c.done), 1);
  assert_int_equal(c.status, 7);
  assert_true(el >= 80);
  assert_int_equal(iof_io_context_destroy(io), 0);
}

static void run_with_no_work_returns_at_once(void **state) {
  (void)state;
  iof_io_context *io = iof_io_context_create();
  assert_non_null(io);
  uint64_t t0 = iof_test_now_ns();
  assert_int_equal(iof_io_context_run(io), 0);
  assert_true(ms_since(t0) < 1000);
  assert_true(iof_io_context_stopped(io));
  iof_io_context_restart(io);
  t0 = iof_test_now_ns();
  assert_int_equal(iof_io_context_run_one(io), 0);
  assert_true(ms_since(t0) < 1000);
  assert_int_equal(iof_io_context_destroy(io), 0);
}

static void stopped_until_restart(void **state) {
  (void)state;
  iof_io_context *io = iof_io_context_create();
  assert_non_null(io);
  assert_int_equal(iof_io_context_run(io), 0); /* no work: reported stopped */
  assert_true(iof_io_context_stopped(io));
  atomic_int n = 0;
  assert_int_equal(iof_launch(iof_io_context_executor(io), count_fn, &n), 0);
  /* Rule: running out of work is no stop; a fiber launched after it is
   * run by the next run, never lost until a restart nobody makes. */
  assert_int_equal(iof_io_context_run(io), 1);
  assert_int_equal(atomic_load(&n), 1);
  assert_int_equal(iof_launch(iof_io_context_executor(io), count_fn, &n), 0);
  assert_int_equal(iof_io_context_poll(io), 1);
  assert_int_equal(iof_launch(iof_io_context_executor(io), count_fn, &n), 0);
  assert_int_equal(iof_io_context_run_one(io), 1);
  assert_int_equal(atomic_load(&n), 3);
  n = 1;
  iof_io_context_restart(io);
  assert_false(iof_io_context_stopped(io));
  /* An explicit stop before run also holds until restart. */
  iof_io_context_restart(io);
  iof_io_context_stop(io);
  assert_true(iof_io_context_stopped(io));
  assert_int_equal(iof_launch(iof_io_context_executor(io), count_fn, &n), 0);
  assert_int_equal(iof_io_context_run(io), 0);
  assert_int_equal(atomic_load(&n), 1);
  iof_io_context_restart(io);
  assert_int_equal(iof_io_context_run(io), 1);
  assert_int_equal(atomic_load(&n), 2);
  assert_int_equal(iof_io_context_destroy(io), 0);
}

typedef struct delayed {
  iof_io_context *io;
  iof_work_guard *guard;
  long ms;
  atomic_int fired;
} delayed;

static void *reset_guard_later(void *arg) {
  delayed *d = arg;
  sleep_ms(d->ms);
  atomic_store(&d->fired, 1);
  iof_work_guard_reset(d->guard);
  return NULL;
}

static void work_guard_keeps_run_alive(void **state) {
  (void)state;
  iof_io_context *io = iof_io_context_create();
  assert_non_null(io);
  iof_work_guard g;
  assert_int_equal(iof_work_guard_init(&g, iof_io_context_executor(io)), 0);
  assert_true(iof_work_guard_owns(&g));
  delayed d = {io, &g, 200, 0};
  pthread_t t;
  uint64_t t0 = iof_test_now_ns();
  assert_int_equal(pthread_create(&t, NULL, reset_guard_later, &d), 0);
  int ran = iof_io_context_run(io);
  int64_t el = ms_since(t0);
  pthread_join(t, NULL);
  assert_int_equal(ran, 0);
  assert_int_equal(atomic_load(&d.fired), 1);
  assert_true(el >= 150);
  assert_true(el < 5000);
  assert_false(iof_work_guard_owns(&g));
  iof_work_guard_reset(&g); /* a second reset does nothing */
  iof_executor_ref empty = {NULL, NULL};
  iof_work_guard g2;
  assert_int_equal(iof_work_guard_init(&g2, empty), -EINVAL);
  assert_false(iof_work_guard_owns(&g2));
  assert_int_equal(iof_io_context_destroy(io), 0);
}

static void *stop_later(void *arg) {
  delayed *d = arg;
  sleep_ms(d->ms);
  atomic_store(&d->fired, 1);
  iof_io_context_stop(d->io);
  return NULL;
}

static void stop_from_another_thread_makes_run_return(void **state) {
  (void)state;
  iof_io_context *io = iof_io_context_create();
  assert_non_null(io);
  iof_work_guard g;
  assert_int_equal(iof_work_guard_init(&g, iof_io_context_executor(io)), 0);
  delayed d = {io, &g, 100, 0};
  pthread_t t;
  uint64_t t0 = iof_test_now_ns();
  assert_int_equal(pthread_create(&t, NULL, stop_later, &d), 0);
  assert_int_equal(iof_io_context_run(io), 0);
  int64_t el = ms_since(t0);
  pthread_join(t, NULL);
  assert_int_equal(atomic_load(&d.fired), 1);
  assert_true(el >= 80);
  assert_true(iof_io_context_stopped(io));
  assert_true(iof_work_guard_owns(&g)); /* work still counted */
  /* Stopped until restart: returns at once though work is counted. */
  t0 = iof_test_now_ns();
  assert_int_equal(iof_io_context_run(io), 0);
  assert_true(ms_since(t0) < 1000);
  iof_io_context_restart(io);
  delayed d2 = {io, &g, 100, 0};
  assert_int_equal(pthread_create(&t, NULL, reset_guard_later, &d2), 0);
  assert_int_equal(iof_io_context_run(io), 0);
  pthread_join(t, NULL);
  assert_int_equal(atomic_load(&d2.fired), 1);
  assert_int_equal(iof_io_context_destroy(io), 0);
}

static void run_one_runs_exactly_one_fiber(void **state) {
  (void)state;
  iof_io_context *io = iof_io_context_create();
  assert_non_null(io);
  iof_executor_ref ex = iof_io_context_executor(io);
  atomic_int n = 0;
  yielder y;
  launch_yielder(ex, &y, 2);
  for (int i = 0; i < 3; i++) assert_int_equal(iof_launch(ex, count_fn, &n), 0);
  assert_int_equal(iof_io_context_run_one(io), 1);
  assert_int_equal(y.steps, 0); /* the yielder started and yielded once */
  assert_int_equal(atomic_load(&n), 0);
  assert_int_equal(iof_io_context_run_one(io), 1);
  assert_int_equal(atomic_load(&n), 1);
  assert_int_equal(iof_io_context_run_one(io), 1);
  assert_int_equal(atomic_load(&n), 2);
  assert_int_equal(iof_io_context_run_one(io), 1);
  assert_int_equal(atomic_load(&n), 3);
  assert_int_equal(y.steps, 0);
  assert_int_equal(iof_io_context_run_one(io), 1);
  assert_int_equal(y.steps, 1);
  assert_int_equal(iof_io_context_run_one(io), 1);
  assert_int_equal(y.steps, 2);
  assert_int_equal(y.done_calls, 1);
  /* No work left: returns 0 at once. */
  assert_int_equal(iof_io_context_run_one(io), 0);
  assert_int_equal(iof_io_context_destroy(io), 0);
}

static void poll_returns_ready_count_and_does_not_block(void **state) {
  (void)state;
  iof_io_context *io = iof_io_context_create();
  assert_non_null(io);
  iof_executor_ref ex = iof_io_context_executor(io);
  atomic_int n = 0;
  for (int i = 0; i < 5; i++) assert_int_equal(iof_launch(ex, count_fn, &n), 0);
  uint64_t t0 = iof_test_now_ns();
  assert_int_equal(iof_io_context_poll(io), 5);
  assert_int_equal(atomic_load(&n), 5);
  iof_io_context_restart(io);
  /* Work counted but nothing ready (a pending op): returns 0 at once. */
  pend_chain c;
  memset(&c, 0, sizeof c);
  assert_int_equal(iof_launch(ex, pend_fn, &c), 0);
  assert_int_equal(iof_io_context_poll(io), 1); /* started, now pending */
  iof_work_guard g;
  assert_int_equal(iof_work_guard_init(&g, ex), 0);
  assert_int_equal(iof_io_context_poll(io), 0);
  assert_int_equal(iof_io_context_poll(io), 0);
  assert_true(ms_since(t0) < 1000);
  assert_false(iof_io_context_stopped(io));
  /* Complete it from this thread: poll runs it. */
  assert_int_equal(xop_complete(&c.op, 3), 0);
  assert_int_equal(iof_io_context_poll(io), 1);
  assert_int_equal(c.status, 3);
  iof_work_guard_reset(&g);
  assert_int_equal(iof_io_context_poll(io), 0);
  assert_int_equal(iof_io_context_destroy(io), 0);
}

static void run_for_returns_after_about_the_time(void **state) {
  (void)state;
  iof_io_context *io = iof_io_context_create();
  assert_non_null(io);
  iof_work_guard g;
  assert_int_equal(iof_work_guard_init(&g, iof_io_context_executor(io)), 0);
  uint64_t t0 = iof_test_now_ns();
  assert_int_equal(iof_io_context_run_for(io, 200 * 1000000LL), 0);
  int64_t el = ms_since(t0);
  assert_true(el >= 150);
  assert_true(el < 3000);
  /* Chains run meanwhile; and run_for returns early when work ends. */
  atomic_int n = 0;
  assert_int_equal(iof_launch(iof_io_context_executor(io), count_fn, &n), 0);
  t0 = iof_test_now_ns();
  assert_int_equal(iof_io_context_run_for(io, 100 * 1000000LL), 1);
  el = ms_since(t0);
  assert_int_equal(atomic_load(&n), 1);
  assert_true(el >= 60);
  iof_work_guard_reset(&g);
  iof_io_context_restart(io);
  t0 = iof_test_now_ns();
  assert_int_equal(iof_io_context_run_for(io, 5000 * 1000000LL), 0);
  assert_true(ms_since(t0) < 1000);
  assert_int_equal(iof_io_context_destroy(io), 0);
}

typedef struct busy_rec {
  iof_io_context *io;
  iof_work_guard guard;
  atomic_int running;
  int run, run_one, poll, run_for, destroy;
} busy_rec;

static int mark_fn(void *arg) {
  atomic_store(&((busy_rec *)arg)->running, 1);
  return 0;
}

static void *second_runner(void *arg) {
  busy_rec *b = arg;
  if (wait_flag(&b->running)) {
    sleep_ms(20);
    b->run = iof_io_context_run(b->io);
    b->run_one = iof_io_context_run_one(b->io);
    b->poll = iof_io_context_poll(b->io);
    b->run_for = iof_io_context_run_for(b->io, 1000000);
    b->destroy = iof_io_context_destroy(b->io);
  }
  iof_work_guard_reset(&b->guard);
  return NULL;
}

static void second_concurrent_run_returns_ebusy(void **state) {
  (void)state;
  iof_io_context *io = iof_io_context_create();
  assert_non_null(io);
  busy_rec b;
  memset(&b, 0, sizeof b);
  b.io = io;
  assert_int_equal(iof_work_guard_init(&b.guard, iof_io_context_executor(io)),
                   0);
  assert_int_equal(iof_launch(iof_io_context_executor(io), mark_fn, &b), 0);
  pthread_t t;
  assert_int_equal(pthread_create(&t, NULL, second_runner, &b), 0);
  assert_int_equal(iof_io_context_run(io), 1);
  pthread_join(t, NULL);
  assert_int_equal(atomic_load(&b.running), 1);
  assert_int_equal(b.run, -EBUSY);
  assert_int_equal(b.run_one, -EBUSY);
  assert_int_equal(b.poll, -EBUSY);
  assert_int_equal(b.run_for, -EBUSY);
  assert_int_equal(b.destroy, -EBUSY);
  assert_int_equal(iof_io_context_destroy(io), 0);
}

/* ---- wake-ups from other threads ----------------------------------------- */

typedef struct wake_rec {
  iof_io_context *io;
  iof_work_guard guard;
  atomic_int running;
  uint64_t launched_ns[3];
  uint64_t ran_ns[3];
  pthread_t ran_on[3];
  int launch_status[3];
  int idx[3];
} wake_rec;

static wake_rec *wake_global;

static int wake_fn(void *arg) {
  int i = *(int *)arg;
  wake_global->ran_ns[i] = iof_test_now_ns();
  wake_global->ran_on[i] = pthread_self();
  if (i == 2) iof_work_guard_reset(&wake_global->guard);
  return 0;
}

static int wake_mark_fn(void *arg) {
  atomic_store(&((wake_rec *)arg)->running, 1);
  return 0;
}

static void *remote_launcher(void *arg) {
  wake_rec *w = arg;
  if (!wait_flag(&w->running)) {
    iof_work_guard_reset(&w->guard);
    return NULL;
  }
  for (int i = 0; i < 3; i++) {
    sleep_ms(50); /* run is blocked in the loop by now */
    w->launched_ns[i] = iof_test_now_ns();
    w->launch_status[i] =
        iof_launch(iof_io_context_executor(w->io), wake_fn, &w->idx[i]);
  }
  return NULL;
}

static void posts_from_another_thread_wake_blocked_run(void **state) {
  (void)state;
  iof_io_context *io = iof_io_context_create();
  assert_non_null(io);
  wake_rec w;
  memset(&w, 0, sizeof w);
  w.io = io;
  for (int i = 0; i < 3; i++) w.idx[i] = i;
  wake_global = &w;
  assert_int_equal(iof_work_guard_init(&w.guard, iof_io_context_executor(io)),
                   0);
  assert_int_equal(iof_launch(iof_io_context_executor(io), wake_mark_fn, &w),
                   0);
  pthread_t t;
  assert_int_equal(pthread_create(&t, NULL, remote_launcher, &w), 0);
  int ran = iof_io_context_run(io);
  pthread_join(t, NULL);
  assert_int_equal(ran, 4);
  for (int i = 0; i < 3; i++) {
    assert_int_equal(w.launch_status[i], 0);
    assert_true(pthread_equal(w.ran_on[i], pthread_self()));
    assert_true(w.ran_ns[i] >= w.launched_ns[i]);
    /* Woken promptly (ev_async), not by some periodic timeout. */
    assert_true(w.ran_ns[i] - w.launched_ns[i] < 1000000000u);
  }
  assert_int_equal(iof_io_context_destroy(io), 0);
}

/* Remote posts in bursts from several threads, with pauses that let the
 * run block in between: only the post that finds the remote queue empty
 * wakes the loop, so a lost wake-up would leave chains unrun (the run
 * would never return). Each thread's chains run in the order launched. */
#define BURST_THREADS 3
#define BURST_CHAINS 3000

typedef struct burst_rec {
  iof_io_context *io;
  iof_work_guard guard;
  atomic_int running;
  atomic_int ran;
  int last_seq[BURST_THREADS]; /* loop thread only */
  int out_of_order;
  int launch_errors;
} burst_rec;

typedef struct burst_arg {
  burst_rec *r;
  int thread, seq;
} burst_arg;

static burst_arg burst_args[BURST_THREADS][BURST_CHAINS];

static int burst_fn(void *arg) {
  burst_arg *a = arg;
  burst_rec *r = a->r;
  if (a->seq != r->last_seq[a->thread] + 1) r->out_of_order++;
  r->last_seq[a->thread] = a->seq;
  if (atomic_fetch_add(&r->ran, 1) + 1 == BURST_THREADS * BURST_CHAINS)
    iof_work_guard_reset(&r->guard);
  return 0;
}

static int burst_mark_fn(void *arg) {
  atomic_store(&((burst_rec *)arg)->running, 1);
  return 0;
}

static void *burst_launcher(void *arg) {
  burst_arg *first = arg;
  burst_rec *r = first->r;
  if (!wait_flag(&r->running)) return NULL;
  unsigned seed = (unsigned)first->thread * 7919u + 1;
  for (int i = 0; i < BURST_CHAINS;) {
    int n = 1 + (int)(rand_r(&seed) % 8);
    for (; n > 0 && i < BURST_CHAINS; n--, i++)
      if (iof_launch(iof_io_context_executor(r->io), burst_fn, &first[i]) < 0)
        __atomic_fetch_add(&r->launch_errors, 1, __ATOMIC_RELAXED);
    if (rand_r(&seed) % 4 == 0) usleep(50 + rand_r(&seed) % 150);
  }
  return NULL;
}

static void remote_bursts_all_run_in_order(void **state) {
  (void)state;
  burst_rec r;
  memset(&r, 0, sizeof r);
  r.io = iof_io_context_create();
  assert_non_null(r.io);
  for (int t = 0; t < BURST_THREADS; t++) {
    r.last_seq[t] = -1;
    for (int i = 0; i < BURST_CHAINS; i++)
      burst_args[t][i] = (burst_arg){&r, t, i};
  }
  assert_int_equal(iof_work_guard_init(&r.guard, iof_io_context_executor(r.io)),
                   0);
  assert_int_equal(iof_launch(iof_io_context_executor(r.io), burst_mark_fn, &r),
                   0);
  pthread_t th[BURST_THREADS];
  for (int t = 0; t < BURST_THREADS; t++)
    assert_int_equal(
        pthread_create(&th[t], NULL, burst_launcher, burst_args[t]), 0);
  int ran = iof_io_context_run(r.io);
  for (int t = 0; t < BURST_THREADS; t++) pthread_join(th[t], NULL);
  assert_int_equal(r.launch_errors, 0);
  assert_int_equal(atomic_load(&r.ran), BURST_THREADS * BURST_CHAINS);
  assert_int_equal(ran, BURST_THREADS * BURST_CHAINS + 1);
  assert_int_equal(r.out_of_order, 0);
  for (int t = 0; t < BURST_THREADS; t++)
    assert_int_equal(r.last_seq[t], BURST_CHAINS - 1);
  assert_int_equal(iof_io_context_destroy(r.io), 0);
}

/* ---- attaching to a host's loop ------------------------------------------ */

typedef struct host_rec {
  int timer_fired;
} host_rec;

static void host_timer_cb(struct ev_loop *loop, ev_timer *w, int revents) {
  (void)loop;
  (void)revents;
  ((host_rec *)w->data)->timer_fired++;
}

static void attach_runs_chains_in_host_ev_run(void **state) {
  (void)state;
  struct ev_loop *loop = ev_loop_new(EVFLAG_AUTO);
  assert_non_null(loop);
  iof_io_context *io = iof_io_context_attach(loop);
  assert_non_null(io);
  assert_ptr_equal(iof_io_context_loop(io), loop);
  errno = 0;
  assert_null(iof_io_context_attach(NULL));
  assert_int_equal(errno, EINVAL);

  /* No work: the host's ev_run is not kept alive by the context. */
  uint64_t t0 = iof_test_now_ns();
  ev_run(loop, 0);
  assert_true(ms_since(t0) < 1000);

  iof_executor_ref ex = iof_io_context_executor(io);
  yielder y[3];
  launch_yielder(ex, &y[0], 1);
  launch_yielder(ex, &y[1], 10);
  launch_yielder(ex, &y[2], 50);
  host_rec h = {0};
  ev_timer tm;
  ev_timer_init(&tm, host_timer_cb, 0.01, 0.);
  tm.data = &h;
  ev_timer_start(loop, &tm);
  t0 = iof_test_now_ns();
  ev_run(loop, 0); /* returns when the chains and the host timer are done */
  assert_true(ms_since(t0) < 5000);
  assert_int_equal(h.timer_fired, 1);
  for (int i = 0; i < 3; i++) {
    assert_int_equal(y[i].steps, y[i].n);
    assert_int_equal(y[i].done_calls, 1);
  }

  /* A chain suspended on an op completed from another thread keeps the
   * host loop alive until it is done. */
  pend_chain c;
  memset(&c, 0, sizeof c);
  iof_launch_opts o;
  memset(&o, 0, sizeof o);
  o.on_done = pend_done;
  o.user = &c;
  assert_int_equal(iof_run_async(ex, &o, pend_fn, &c), 0);
  pthread_t t;
  assert_int_equal(pthread_create(&t, NULL, complete_after_100ms, &c), 0);
  t0 = iof_test_now_ns();
  ev_run(loop, 0);
  int64_t el = ms_since(t0);
  pthread_join(t, NULL);
  assert_int_equal(atomic_load(&c.done), 1);
  assert_int_equal(c.status, 7);
  assert_true(el >= 80);

  assert_int_equal(iof_io_context_destroy(io), 0);
  /* The host's loop is intact and still usable. */
  ev_timer_start(loop, &tm);
  ev_run(loop, 0);
  assert_int_equal(h.timer_fired, 2);
  ev_loop_destroy(loop);
}

/* ---- work tracking ---------------------------------------------------------
 */

typedef struct track_rec {
  iof_frame_allocator *track;
  int run_returned;
  int done_calls;
  int returned_at_done;
  size_t live_at_done;
} track_rec;

static track_rec *track_global;

static void track_done(void *user, int status) {
  (void)status;
  track_rec *t = user;
  t->done_calls++;
  t->returned_at_done = t->run_returned;
  iof_tracking_stats st;
  iof_tracking_allocator_stats(t->track, &st);
  t->live_at_done = st.live;
}

static int track_fn(void *arg) {
  (void)arg;
  iof_yield();
  return 0;
}

static void chain_counts_as_work_until_on_done_and_stack_freed(void **state) {
  (void)state;
  iof_io_context *io = iof_io_context_create();
  assert_non_null(io);
  track_rec t;
  memset(&t, 0, sizeof t);
  track_global = &t;
  t.track = iof_tracking_allocator_create(NULL);
  assert_non_null(t.track);
  iof_launch_opts o;
  memset(&o, 0, sizeof o);
  o.frame_allocator = t.track;
  o.on_done = track_done;
  o.user = &t;
  assert_int_equal(
      iof_run_async(iof_io_context_executor(io), &o, track_fn, NULL), 0);
  iof_tracking_stats st;
  assert_int_equal(iof_tracking_allocator_stats(t.track, &st), 0);
  assert_int_equal(st.live, 1);
  iof_io_context_run(io);
  t.run_returned = 1;
  assert_int_equal(t.done_calls, 1);
  assert_int_equal(t.returned_at_done, 0);
  assert_int_equal(t.live_at_done, 1); /* its own stack, still live */
  assert_int_equal(iof_tracking_allocator_stats(t.track, &st), 0);
  assert_int_equal(st.live, 0); /* freed before run returned */
  assert_int_equal(st.total, 1);
  assert_int_equal(st.freed, 1);
  assert_int_equal(iof_io_context_destroy(io), 0);
  assert_int_equal(iof_tracking_allocator_destroy(t.track), 0);
}

/* A thread-pool chain with a pending operation registered on an
 * io_context (counted there as work) keeps that io_context's run alive. */
typedef struct cross_op {
  iof_executor_ref io_ex;
  xop op;
  atomic_int registered;
  atomic_int completed;
  int status;
  pthread_t ran_on;
  atomic_int done;
} cross_op;

static iof_fiber *cross_suspend(void *self, iof_fiber *h, const iof_env *env) {
  cross_op *c = (cross_op *)((char *)self - offsetof(cross_op, op));
  iof_executor_on_work_started(c->io_ex); /* pending on the io_context */
  atomic_store(&c->registered, 1);
  return xop_suspend(self, h, env);
}

static const iof_awaitable_vtbl cross_vt = {NULL, cross_suspend, xop_resume};

static int cross_fn(void *arg) {
  cross_op *c = arg;
  c->status = iof_await(&c->op, &cross_vt);
  c->ran_on = pthread_self();
  return 0;
}

static void cross_done(void *user, int status) {
  (void)status;
  atomic_store(&((cross_op *)user)->done, 1);
}

static void *cross_completer(void *arg) {
  cross_op *c = arg;
  sleep_ms(200);
  /* Completion: dispatch to the fiber's own executor (the pool), then the
   * operation is no longer pending on the io_context. */
  xop_complete(&c->op, 5);
  atomic_store(&c->completed, 1);
  iof_executor_on_work_finished(c->io_ex);
  return NULL;
}

static void pool_chain_pending_op_keeps_io_context_run_alive(void **state) {
  (void)state;
  iof_io_context *io = iof_io_context_create();
  iof_thread_pool *p = iof_thread_pool_create(2);
  assert_non_null(io);
  assert_non_null(p);
  cross_op c;
  memset(&c, 0, sizeof c);
  c.io_ex = iof_io_context_executor(io);
  iof_launch_opts o;
  memset(&o, 0, sizeof o);
  o.on_done = cross_done;
  o.user = &c;
  assert_int_equal(iof_run_async(iof_thread_pool_executor(p), &o, cross_fn, &c),
                   0);
  assert_true(wait_flag(&c.registered));
  pthread_t t;
  assert_int_equal(pthread_create(&t, NULL, cross_completer, &c), 0);
  uint64_t t0 = iof_test_now_ns();
  int ran = iof_io_context_run(io);
  int64_t el = ms_since(t0);
  int completed_at_return = atomic_load(&c.completed);
  pthread_join(t, NULL);
  assert_int_equal(ran, 0);
  assert_int_equal(completed_at_return, 1);
  assert_true(el >= 150);
  assert_int_equal(iof_thread_pool_join(p), 0);
  assert_int_equal(atomic_load(&c.done), 1);
  assert_int_equal(c.status, 5);
  assert_false(pthread_equal(c.ran_on, pthread_self()));
  assert_int_equal(iof_thread_pool_destroy(p), 0);
  assert_int_equal(iof_io_context_destroy(io), 0);
}

/* Calls from other threads that end a run (the last work finished
 * there, a stop) must be done with the context once the run returns: its
 * owner destroys it right then. A pool fiber hops in with iof_run and
 * finishes the context's last work on the pool thread; a thread stops a
 * run whose fiber yields until then. TSan reports a read of the context
 * freed by the destroy (ASan only when the caller is preempted there). */
#define LAST_CALL_ROUNDS 300

typedef struct last_call {
  iof_io_context *io;
  iof_work_guard guard;
  atomic_int hops;
  atomic_int spinning;
} last_call;

static int last_call_on_io(void *arg) {
  last_call *c = arg;
  atomic_fetch_add(&c->hops, 1);
  iof_work_guard_reset(&c->guard); /* the iof_run's own count is the last */
  return 0;
}

static int last_call_on_pool(void *arg) {
  last_call *c = arg;
  return iof_run(iof_io_context_executor(c->io), NULL, last_call_on_io, c);
}

static int last_call_spinner(void *arg) {
  last_call *c = arg;
  atomic_store(&c->spinning, 1);
  while (!iof_io_context_stopped(c->io)) iof_yield();
  return 0;
}

static void *last_call_stopper(void *arg) {
  last_call *c = arg;
  if (wait_flag(&c->spinning)) iof_io_context_stop(c->io);
  return NULL;
}

static void last_calls_from_other_threads_end_before_destroy(void **state) {
  (void)state;
  iof_thread_pool *p = iof_thread_pool_create(1);
  assert_non_null(p);
  last_call c;
  for (int i = 0; i < LAST_CALL_ROUNDS; i++) {
    memset(&c, 0, sizeof c);
    c.io = iof_io_context_create();
    assert_non_null(c.io);
    iof_executor_ref ex = iof_io_context_executor(c.io);
    assert_int_equal(iof_work_guard_init(&c.guard, ex), 0);
    assert_int_equal(
        iof_launch(iof_thread_pool_executor(p), last_call_on_pool, &c), 0);
    /* Polled, not run: a run blocked in libev would be woken by the
     * finish itself (and TSan would see that wake-up order the two). */
    int ran = 0;
    while (!atomic_load(&c.hops) || !iof_io_context_stopped(c.io)) {
      int r = iof_io_context_poll(c.io);
      assert_true(r >= 0);
      ran += r;
    }
    assert_int_equal(ran, 1);
    assert_int_equal(atomic_load(&c.hops), 1);
    assert_int_equal(iof_io_context_destroy(c.io), 0);

    c.io = iof_io_context_create();
    assert_non_null(c.io);
    assert_int_equal(
        iof_launch(iof_io_context_executor(c.io), last_call_spinner, &c), 0);
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, last_call_stopper, &c), 0);
    assert_true(iof_io_context_run(c.io) >= 1);
    assert_true(atomic_load(&c.spinning));
    assert_int_equal(iof_io_context_destroy(c.io), 0);
    pthread_join(t, NULL);
  }
  assert_int_equal(iof_thread_pool_destroy(p), 0);
}

/* A stop, or run_for's deadline, that the run's spin meets: while a fiber
 * is away in iof_run the run watches for its return and polls libev
 * meanwhile, which runs the stop's wake-up and the deadline's timer. The
 * run must still end then, not block in libev until the fiber comes back.
 * Hops that come back within the spin's reach first make the spins long
 * (the policy learns from them), so that the spin polls. */
#define SPIN_END_ROUNDS 5

typedef struct spin_end {
  iof_io_context *io;
  iof_thread_pool *pool;
  bool by_stop;
  atomic_int release;
  int trained;
} spin_end;

static int spin_end_busy(void *arg) {
  (void)arg;
  uint64_t t0 = iof_test_now_ns();
  while (iof_test_now_ns() - t0 < 40000) {
  }
  return 0;
}

static int spin_end_trainer(void *arg) {
  spin_end *e = arg;
  for (int i = 0; i < 8; i++)
    if (iof_run(iof_thread_pool_executor(e->pool), NULL, spin_end_busy, e) == 0)
      e->trained++;
  return 0;
}

static int spin_end_held(void *arg) {
  spin_end *e = arg;
  for (int i = 0; i < 1000 && !atomic_load(&e->release); i++) sleep_ms(1);
  return 0;
}

static int spin_end_away(void *arg) {
  spin_end *e = arg;
  if (e->by_stop) iof_io_context_stop(e->io);
  return iof_run(iof_thread_pool_executor(e->pool), NULL, spin_end_held, e);
}

static void stop_and_deadline_end_a_spinning_run(void **state) {
  (void)state;
  spin_end e;
  memset(&e, 0, sizeof e);
  e.pool = iof_thread_pool_create(1);
  assert_non_null(e.pool);
  for (int round = 0; round < 2 * SPIN_END_ROUNDS; round++) {
    e.by_stop = round % 2 == 0;
    e.trained = 0;
    atomic_store(&e.release, 0);
    e.io = iof_io_context_create();
    assert_non_null(e.io);
    iof_executor_ref ex = iof_io_context_executor(e.io);
    assert_int_equal(iof_launch(ex, spin_end_trainer, &e), 0);
    assert_true(iof_io_context_run(e.io) >= 1);
    assert_int_equal(e.trained, 8);
    assert_int_equal(iof_launch(ex, spin_end_away, &e), 0);
    uint64_t t0 = iof_test_now_ns();
    int ran =
        e.by_stop ? iof_io_context_run(e.io) : iof_io_context_run_for(e.io, 0);
    int64_t el = ms_since(t0);
    atomic_store(&e.release, 1);
    assert_int_equal(ran, 1);
    /* Not held until the fiber came back (1 s). */
    assert_true(el < 300);
    iof_io_context_restart(e.io);
    assert_true(iof_io_context_run(e.io) >= 1);
    assert_int_equal(iof_io_context_destroy(e.io), 0);
  }
  assert_int_equal(iof_thread_pool_destroy(e.pool), 0);
}

#define T(f) cmocka_unit_test_setup_teardown(f, arm, disarm)

int main(void) {
  const struct CMUnitTest tests[] = {
      T(run_returns_when_last_chain_finishes),
      T(run_waits_for_a_suspended_chain),
      T(run_with_no_work_returns_at_once),
      T(stopped_until_restart),
      T(work_guard_keeps_run_alive),
      T(stop_from_another_thread_makes_run_return),
      T(run_one_runs_exactly_one_fiber),
      T(poll_returns_ready_count_and_does_not_block),
      T(run_for_returns_after_about_the_time),
      T(second_concurrent_run_returns_ebusy),
      T(posts_from_another_thread_wake_blocked_run),
      T(remote_bursts_all_run_in_order),
      T(attach_runs_chains_in_host_ev_run),
      T(chain_counts_as_work_until_on_done_and_stack_freed),
      T(pool_chain_pending_op_keeps_io_context_run_alive),
      T(last_calls_from_other_threads_end_before_destroy),
      T(stop_and_deadline_end_a_spinning_run),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
