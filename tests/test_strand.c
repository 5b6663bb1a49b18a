/* Strands: fibers of one strand never run
 * concurrently, run in FIFO order of submission, may run on any thread of
 * the inner executor; two strands do run concurrently; dispatch runs
 * inline only when the strand is idle and the caller is in the inner
 * context, and queues from a fiber already in the strand; the strand is
 * released when its fiber switches out (yield, exit, iof_run hop, direct
 * hand-over to a fiber outside it).
 *
 * IOF_TEST_THREADED: a 4-thread pool under the strand, poster threads. */
#include "test_support.h"
#include "check_test.h"

#include <iofiber/iofiber.h>

#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

IOF_TEST_CHECK_FIXTURES(begin, end, 240)

/* Runs what is ready until nothing more runs (bounded). */
static void drain(iof_io_context *io) {
  for (int i = 0; i < 100; i++)
    if (iof_io_context_poll(io) <= 0) break;
}

/* ---- 1. serialization, FIFO per poster, exact total, many threads ------ */

enum { POSTERS = 4, YIELDS = 10, MAX_THREADS = 16 };

static struct {
  iof_strand *strand;
  iof_executor_ref sx;
  long fibers; /* total */
  atomic_int inside;
  atomic_int concurrent; /* entries that found another fiber inside */
  atomic_int launch_errors;
  atomic_int done;
  /* Plain: only touched inside the strand. */
  long counter;
  long last_seq[POSTERS];
  long fifo_violations;
  long not_in_strand;
  pthread_t threads[MAX_THREADS];
  int nthreads;
} ser;

struct ser_arg {
  int poster;
  long seq;
};

static struct ser_arg *ser_args;

static void ser_enter(void) {
  if (atomic_exchange(&ser.inside, 1) != 0)
    atomic_fetch_add(&ser.concurrent, 1);
  if (!iof_strand_running_in_this_thread(ser.strand)) ser.not_in_strand++;
  pthread_t me = self_thread();
  int i;
  for (i = 0; i < ser.nthreads; i++)
    if (pthread_equal(ser.threads[i], me)) break;
  if (i == ser.nthreads && ser.nthreads < MAX_THREADS)
    ser.threads[ser.nthreads++] = me;
}

static void ser_leave(void) {
  atomic_store(&ser.inside, 0);
}

static int ser_fn(void *p) {
  struct ser_arg *a = p;
  ser_enter();
  if (a->seq <= ser.last_seq[a->poster]) ser.fifo_violations++;
  ser.last_seq[a->poster] = a->seq;
  for (int k = 0; k < YIELDS; k++) {
    ser.counter++;
    ser_leave();
    if (iof_yield() != 0) CHECK(!"yield failed");
    ser_enter();
  }
  ser_leave();
  atomic_fetch_add(&ser.done, 1);
  return 0;
}

static void *ser_poster(void *p) {
  int poster = (int)(intptr_t)p;
  long per = ser.fibers / POSTERS;
  for (long i = 0; i < per; i++) {
    struct ser_arg *a = &ser_args[poster * per + i];
    a->poster = poster;
    a->seq = i;
    if (iof_run_async(ser.sx, NULL, ser_fn, a) != 0)
      atomic_fetch_add(&ser.launch_errors, 1);
    if (i % 64 == 0) sched_yield(); /* interleave the posters */
  }
  return NULL;
}

static void strand_never_concurrent_fifo_per_poster_exact_total(void **state) {
  (void)state;
  iof_thread_pool *p = iof_thread_pool_create(4);
  assert_non_null(p);
  memset(&ser, 0, sizeof ser);
  ser.fibers = 10000;
  for (int i = 0; i < POSTERS; i++) ser.last_seq[i] = -1;
  ser_args = calloc((size_t)ser.fibers, sizeof *ser_args);
  assert_non_null(ser_args);
  ser.strand = iof_strand_create(iof_thread_pool_executor(p));
  assert_non_null(ser.strand);
  ser.sx = iof_strand_executor(ser.strand);
  pthread_t t[POSTERS];
  for (int i = 0; i < POSTERS; i++)
    assert_int_equal(
        pthread_create(&t[i], NULL, ser_poster, (void *)(intptr_t)i), 0);
  for (int i = 0; i < POSTERS; i++) pthread_join(t[i], NULL);
  /* Every chain counts as work on the pool until it is gone. */
  assert_int_equal(iof_thread_pool_join(p), 0);
  assert_int_equal(atomic_load(&ser.launch_errors), 0);
  assert_int_equal(atomic_load(&ser.done), ser.fibers);
  assert_int_equal(ser.counter, ser.fibers * YIELDS);
  assert_int_equal(atomic_load(&ser.concurrent), 0);
  assert_int_equal(ser.fifo_violations, 0);
  assert_int_equal(ser.not_in_strand, 0);
  for (int i = 0; i < POSTERS; i++)
    assert_int_equal(ser.last_seq[i], ser.fibers / POSTERS - 1);
  assert_true(ser.nthreads > 1); /* it moved between the pool's threads */
  assert_int_equal(iof_strand_destroy(ser.strand), 0);
  assert_int_equal(iof_thread_pool_destroy(p), 0);
  free(ser_args);
  assert_no_failures();
}

/* ---- 2. two strands run concurrently; one strand does not -------------- */

struct rendezvous {
  atomic_int flag[2];
  atomic_int met[2];
};

struct rv_arg {
  struct rendezvous *rv;
  int me;
  long wait_ms;
};

static int rv_fn(void *p) {
  struct rv_arg *a = p;
  atomic_store(&a->rv->flag[a->me], 1);
  if (wait_flag_ms(&a->rv->flag[1 - a->me], a->wait_ms))
    atomic_store(&a->rv->met[a->me], 1);
  return 0;
}

static void strand_two_strands_run_concurrently(void **state) {
  (void)state;
  iof_thread_pool *p = iof_thread_pool_create(4);
  assert_non_null(p);
  iof_strand *a = iof_strand_create(iof_thread_pool_executor(p));
  iof_strand *b = iof_strand_create(iof_thread_pool_executor(p));
  assert_non_null(a);
  assert_non_null(b);

  /* Different strands: both fibers are inside at the same time. */
  struct rendezvous rv;
  memset(&rv, 0, sizeof rv);
  struct rv_arg x = {&rv, 0, 10000}, y = {&rv, 1, 10000};
  assert_int_equal(iof_launch(iof_strand_executor(a), rv_fn, &x), 0);
  assert_int_equal(iof_launch(iof_strand_executor(b), rv_fn, &y), 0);
  /* One strand: the second cannot start while the first waits. */
  struct rendezvous one;
  memset(&one, 0, sizeof one);
  struct rv_arg u = {&one, 0, 200}, v = {&one, 1, 200};
  iof_strand *c = iof_strand_create(iof_thread_pool_executor(p));
  assert_non_null(c);
  assert_int_equal(iof_launch(iof_strand_executor(c), rv_fn, &u), 0);
  assert_int_equal(iof_launch(iof_strand_executor(c), rv_fn, &v), 0);

  assert_int_equal(iof_thread_pool_join(p), 0);
  assert_int_equal(atomic_load(&rv.met[0]), 1);
  assert_int_equal(atomic_load(&rv.met[1]), 1);
  assert_int_equal(atomic_load(&one.met[0]), 0); /* the first timed out */
  assert_int_equal(atomic_load(&one.met[1]), 1); /* the second saw it */
  assert_int_equal(iof_strand_destroy(a), 0);
  assert_int_equal(iof_strand_destroy(b), 0);
  assert_int_equal(iof_strand_destroy(c), 0);
  assert_int_equal(iof_thread_pool_destroy(p), 0);
  assert_no_failures();
}

/* ---- 3. dispatch: inline only when idle and in the inner context ------- */

static struct {
  iof_strand *s;
  iof_executor_ref sx, iox;
  iof_fiber *parked; /* G, waiting */
  int g_resumes;
  int g_in_strand;
  char log[32];
  int n;
  iof_fiber *dispatch_result;
  int dispatched;
  int h_done, k_done;
  int g_saw_h_done, g_saw_k_done;
  iof_fiber *k_dispatch_result;
} ds;

static void dlog(char c) {
  if (ds.n < (int)sizeof ds.log - 1) ds.log[ds.n++] = c;
}

static iof_fiber *park_suspend(void *self, iof_fiber *h, const iof_env *env) {
  (void)self;
  (void)env;
  ds.parked = h;
  return NULL;
}

static const iof_awaitable_vtbl park_vt = {NULL, park_suspend, NULL};

static int g_fn(void *arg) {
  (void)arg;
  for (int i = 0; i < 4; i++) {
    iof_await(&ds, &park_vt);
    ds.g_resumes++;
    if (iof_strand_running_in_this_thread(ds.s)) ds.g_in_strand++;
    dlog('G');
    if (ds.h_done) ds.g_saw_h_done++;
    if (ds.k_done) ds.g_saw_k_done++;
  }
  return 0;
}

/* Repost the caller to its own executor, then dispatch G to the strand and
 * return what dispatch said: G (run it now, directly) or NULL (queued). */
static iof_fiber *disp_suspend(void *self, iof_fiber *h, const iof_env *env) {
  (void)self;
  CHECK(iof_executor_post(env->executor, h) == 0);
  iof_fiber *g = ds.parked;
  ds.parked = NULL;
  ds.dispatch_result = iof_executor_dispatch(ds.sx, g);
  ds.dispatched++;
  return ds.dispatch_result;
}

static const iof_awaitable_vtbl disp_vt = {NULL, disp_suspend, NULL};

static int f_idle_fn(void *arg) {
  (void)arg;
  CHECK(!iof_strand_running_in_this_thread(ds.s));
  dlog('f');
  iof_await(&ds, &disp_vt);
  dlog('F');
  return 0;
}

static int h_fn(void *arg) {
  (void)arg;
  dlog('h');
  ds.h_done = 1;
  return 0;
}

static int f_busy_fn(void *arg) {
  (void)arg;
  dlog('b');
  /* H now holds the strand (queued on the io_context, not yet run). */
  CHECK(iof_launch(ds.sx, h_fn, NULL) == 0);
  iof_await(&ds, &disp_vt);
  dlog('B');
  return 0;
}

static int k_fn(void *arg) {
  (void)arg;
  CHECK(iof_strand_running_in_this_thread(ds.s));
  iof_fiber *g = ds.parked;
  ds.parked = NULL;
  /* From inside the strand: queued behind us, never inline. */
  ds.k_dispatch_result = iof_executor_dispatch(ds.sx, g);
  dlog('k');
  CHECK(iof_strand_destroy(ds.s) == -EBUSY);
  ds.k_done = 1;
  return 0;
}

static void
strand_dispatch_inline_only_when_idle_and_in_inner_context(void **state) {
  (void)state;
  memset(&ds, 0, sizeof ds);
  iof_io_context *io = iof_io_context_create();
  assert_non_null(io);
  ds.iox = iof_io_context_executor(io);
  ds.s = iof_strand_create(ds.iox);
  assert_non_null(ds.s);
  ds.sx = iof_strand_executor(ds.s);
  assert_int_equal(iof_launch(ds.sx, g_fn, NULL), 0);
  drain(io);
  assert_non_null(ds.parked);

  /* (a) Idle strand, but this thread is not running the io_context: the
   * fiber is queued, and runs from the context's loop. */
  iof_fiber *g = ds.parked;
  ds.parked = NULL;
  errno = 0;
  assert_null(iof_executor_dispatch(ds.sx, g));
  assert_int_equal(errno, 0); /* queued, not refused */
  assert_int_equal(ds.g_resumes, 0);
  drain(io);
  assert_int_equal(ds.g_resumes, 1);
  assert_non_null(ds.parked);

  /* (b) Idle strand, called from a fiber the io_context runs: inline (G is
   * returned and switched to directly, before F resumes). */
  assert_int_equal(iof_launch(ds.iox, f_idle_fn, NULL), 0);
  drain(io);
  assert_int_equal(ds.dispatched, 1);
  assert_ptr_equal(ds.dispatch_result, g);
  assert_int_equal(ds.g_resumes, 2);
  assert_string_equal(ds.log, "GfGF");
  assert_non_null(ds.parked);

  /* (c) In the inner context but the strand is held (by H): queued. */
  assert_int_equal(iof_launch(ds.iox, f_busy_fn, NULL), 0);
  drain(io);
  assert_int_equal(ds.dispatched, 2);
  assert_null(ds.dispatch_result);
  assert_int_equal(ds.g_resumes, 3);
  assert_int_equal(ds.g_saw_h_done, 1); /* G waited for H */
  assert_string_equal(ds.log, "GfGFbhBG");
  assert_non_null(ds.parked);

  /* (d) From a fiber already running in the strand: queued (NULL). */
  assert_int_equal(iof_launch(ds.sx, k_fn, NULL), 0);
  drain(io);
  assert_null(ds.k_dispatch_result);
  assert_int_equal(ds.g_resumes, 4);
  assert_int_equal(ds.g_saw_k_done, 1); /* only after K switched out */
  assert_string_equal(ds.log, "GfGFbhBGkG");
  assert_int_equal(ds.g_in_strand, 4);

  assert_int_equal(iof_strand_destroy(ds.s), 0);
  assert_int_equal(iof_io_context_destroy(io), 0);
  assert_no_failures();
}

/* ---- 4. released on switch-out: iof_run hop, direct hand-over ---------- */

static struct {
  iof_strand *s;
  iof_executor_ref sx, iox, pool;
  pthread_t io_thread;
  atomic_int a_back;
  atomic_int b_ran;
  int b_saw_a_away;
  int a_saw_b;
  int a_back_in_strand;
  int a_back_on_io;
  atomic_int inside;
  atomic_int concurrent;
} rel;

static void rel_enter(void) {
  if (atomic_exchange(&rel.inside, 1) != 0)
    atomic_fetch_add(&rel.concurrent, 1);
}

static void rel_leave(void) {
  atomic_store(&rel.inside, 0);
}

static int away_fn(void *arg) {
  (void)arg;
  CHECK(!iof_strand_running_in_this_thread(rel.s));
  /* B can only run if A's hop released the strand. */
  rel.a_saw_b = wait_flag_ms(&rel.b_ran, 10000);
  return 0;
}

static int a_fn(void *arg) {
  (void)arg;
  rel_enter();
  CHECK(iof_strand_running_in_this_thread(rel.s));
  rel_leave();
  CHECK(iof_run(rel.pool, NULL, away_fn, NULL) == 0);
  atomic_store(&rel.a_back, 1);
  rel_enter();
  rel.a_back_in_strand = iof_strand_running_in_this_thread(rel.s);
  rel.a_back_on_io = pthread_equal(self_thread(), rel.io_thread);
  rel_leave();
  return 0;
}

static int b_fn(void *arg) {
  (void)arg;
  rel_enter();
  /* A is in its iof_run call: left the strand, not back yet. */
  rel.b_saw_a_away = !atomic_load(&rel.a_back);
  CHECK(iof_strand_running_in_this_thread(rel.s));
  rel_leave();
  atomic_store(&rel.b_ran, 1);
  return 0;
}

static void strand_released_when_holder_hops_away_with_iof_run(void **state) {
  (void)state;
  memset(&rel, 0, sizeof rel);
  iof_io_context *io = iof_io_context_create();
  assert_non_null(io);
  iof_thread_pool *p = iof_thread_pool_create(2);
  assert_non_null(p);
  rel.iox = iof_io_context_executor(io);
  rel.pool = iof_thread_pool_executor(p);
  rel.io_thread = pthread_self();
  rel.s = iof_strand_create(rel.iox);
  assert_non_null(rel.s);
  rel.sx = iof_strand_executor(rel.s);
  assert_int_equal(iof_launch(rel.sx, a_fn, NULL), 0);
  assert_int_equal(iof_launch(rel.sx, b_fn, NULL), 0);
  assert_true(iof_io_context_run(io) >= 3);
  assert_int_equal(atomic_load(&rel.b_ran), 1);
  assert_int_equal(rel.b_saw_a_away, 1); /* B ran while A was away */
  assert_int_equal(rel.a_saw_b, 1);
  assert_int_equal(rel.a_back_in_strand, 1);
  assert_int_equal(rel.a_back_on_io, 1);
  assert_int_equal(atomic_load(&rel.concurrent), 0);
  assert_int_equal(iof_strand_destroy(rel.s), 0);
  assert_int_equal(iof_thread_pool_destroy(p), 0);
  assert_int_equal(iof_io_context_destroy(io), 0);
  assert_no_failures();
}

static struct {
  iof_strand *s;
  iof_executor_ref sx;
  iof_fiber *parked_p;
  char log[16];
  int n;
  int p_in_strand;
} ho;

static void holog(char c) {
  if (ho.n < (int)sizeof ho.log - 1) ho.log[ho.n++] = c;
}

static iof_fiber *ho_park(void *self, iof_fiber *h, const iof_env *env) {
  (void)self;
  (void)env;
  ho.parked_p = h;
  return NULL;
}

static const iof_awaitable_vtbl ho_park_vt = {NULL, ho_park, NULL};

/* From a strand fiber: requeue it on its (strand) executor and hand over
 * directly to P, which is outside the strand. */
static iof_fiber *ho_xfer(void *self, iof_fiber *h, const iof_env *env) {
  (void)self;
  CHECK(iof_executor_post(env->executor, h) == 0);
  iof_fiber *p = ho.parked_p;
  ho.parked_p = NULL;
  return p;
}

static const iof_awaitable_vtbl ho_xfer_vt = {NULL, ho_xfer, NULL};

static int ho_p(void *arg) {
  (void)arg;
  holog('p');
  iof_await(&ho, &ho_park_vt);
  holog('P');
  ho.p_in_strand = iof_strand_running_in_this_thread(ho.s);
  return 0;
}

static int ho_a(void *arg) {
  (void)arg;
  holog('a');
  iof_await(&ho, &ho_xfer_vt);
  holog('A');
  CHECK(iof_strand_running_in_this_thread(ho.s));
  return 0;
}

static int ho_b(void *arg) {
  (void)arg;
  holog('b');
  return 0;
}

static void
strand_released_when_holder_hands_over_outside_strand(void **state) {
  (void)state;
  memset(&ho, 0, sizeof ho);
  iof_io_context *io = iof_io_context_create();
  assert_non_null(io);
  ho.s = iof_strand_create(iof_io_context_executor(io));
  assert_non_null(ho.s);
  ho.sx = iof_strand_executor(ho.s);
  assert_int_equal(iof_launch(iof_io_context_executor(io), ho_p, NULL), 0);
  assert_int_equal(iof_launch(ho.sx, ho_a, NULL), 0);
  assert_int_equal(iof_launch(ho.sx, ho_b, NULL), 0); /* waits behind A */
  drain(io);
  /* A handed over to P; the strand went to B meanwhile; A came back after
   * B, in FIFO order. */
  assert_string_equal(ho.log, "paPbA");
  assert_int_equal(ho.p_in_strand, 0);
  assert_int_equal(iof_strand_destroy(ho.s), 0);
  assert_int_equal(iof_io_context_destroy(io), 0);
  assert_no_failures();
}

static void strand_create_rejects_empty_inner(void **state) {
  (void)state;
  errno = 0;
  iof_executor_ref empty = {0};
  assert_null(iof_strand_create(empty));
  assert_int_equal(errno, EINVAL);
  assert_int_equal(iof_strand_destroy(NULL), -EINVAL);
  assert_false(iof_strand_running_in_this_thread(NULL));
}

/* A strand over a strand: fibers launched on either never overlap (on a
 * 2-thread pool), each strand's fibers start in launch order, all run,
 * and both strands are free again at the end (a fiber holds one strand:
 * the outer one is passed on when its fiber enters the inner one). */
#define NESTED 200
static atomic_int nest_inside, nest_overlap, nest_started, nest_ran;
static int nest_start_seq[NESTED];

static int nest_fn(void *arg) {
  int i = (int)(intptr_t)arg;
  nest_start_seq[i] = atomic_fetch_add(&nest_started, 1);
  if (atomic_fetch_add(&nest_inside, 1) != 0)
    atomic_fetch_add(&nest_overlap, 1);
  for (volatile int k = 0; k < 500; k++) {
  }
  atomic_fetch_sub(&nest_inside, 1);
  if (i % 3 == 0) CHECK(iof_yield() == 0);
  if (atomic_fetch_add(&nest_inside, 1) != 0)
    atomic_fetch_add(&nest_overlap, 1);
  atomic_fetch_sub(&nest_inside, 1);
  atomic_fetch_add(&nest_ran, 1);
  return 0;
}

static void strand_over_a_strand(void **state) {
  (void)state;
  iof_thread_pool *p = iof_thread_pool_create(2);
  assert_non_null(p);
  iof_strand *s1 = iof_strand_create(iof_thread_pool_executor(p));
  assert_non_null(s1);
  iof_strand *s2 = iof_strand_create(iof_strand_executor(s1));
  assert_non_null(s2);
  atomic_store(&nest_inside, 0);
  atomic_store(&nest_overlap, 0);
  atomic_store(&nest_started, 0);
  atomic_store(&nest_ran, 0);
  for (int i = 0; i < NESTED; i++) {
    iof_strand *s = i % 2 ? s1 : s2;
    assert_int_equal(
        iof_launch(iof_strand_executor(s), nest_fn, (void *)(intptr_t)i), 0);
  }
  assert_int_equal(iof_thread_pool_join(p), 0);
  assert_int_equal(atomic_load(&nest_ran), NESTED);
  assert_int_equal(atomic_load(&nest_overlap), 0);
  for (int i = 2; i < NESTED; i++) /* FIFO per strand */
    assert_true(nest_start_seq[i] > nest_start_seq[i - 2]);
  assert_int_equal(iof_strand_destroy(s2), 0);
  assert_int_equal(iof_strand_destroy(s1), 0);
  assert_int_equal(iof_thread_pool_destroy(p), 0);
  assert_no_failures();
}

#define T(f) cmocka_unit_test_setup_teardown(f, begin, end)

int main(void) {
  const struct CMUnitTest tests[] = {
      T(strand_never_concurrent_fifo_per_poster_exact_total),
      T(strand_two_strands_run_concurrently),
      T(strand_dispatch_inline_only_when_idle_and_in_inner_context),
      T(strand_released_when_holder_hops_away_with_iof_run),
      T(strand_released_when_holder_hands_over_outside_strand),
      T(strand_create_rejects_empty_inner),
      T(strand_over_a_strand),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
