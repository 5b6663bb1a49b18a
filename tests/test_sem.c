/* iof_sem: FIFO hand-off to waiters, a resource bound never
 * exceeded across pool threads, try/value/overflow, cancellation (the unit
 * goes to the next waiter), plain threads with fibers, timed waits and a
 * deadline racing a post (no unit lost or duplicated).
 *
 * IOF_TEST_THREADED */
#include "sync_test.h"

/* ---- FIFO hand-off and cancellation ------------------------------------- */

typedef struct fifo {
  iof_sem s;
  iof_executor_ref ex;
  iof_stop_source src;
  int order[8];
  int n;
  int waiting;
  int status[8];
} fifo;

typedef struct fa {
  fifo *f;
  int id;
} fa;

static fa fargs[8];

static int fifo_waiter(void *arg) {
  fa *a = arg;
  a->f->waiting++;
  int r = iof_sem_wait(&a->f->s);
  a->f->status[a->id] = r;
  if (r == 0) a->f->order[a->f->n++] = a->id;
  return 0;
}

static int fifo_main(void *arg) {
  fifo *f = arg;
  for (int i = 0; i < 5; i++) {
    fargs[i] = (fa){f, i};
    iof_launch_opts o = {0};
    if (i == 1) o.stop_token = iof_stop_source_token(&f->src);
    if (iof_run_async(f->ex, &o, fifo_waiter, &fargs[i]) != 0) return -1;
  }
  while (f->waiting < 5) iof_yield();
  iof_yield();
  if (iof_sem_value(&f->s) != 0) return -2;
  /* Cancel waiter 1 and post at once: the unit skips it. */
  iof_stop_source_request(&f->src);
  iof_sem_post(&f->s);
  iof_sem_post(&f->s);
  /* A newcomer cannot take a unit handed to a waiter. */
  if (iof_sem_trywait(&f->s) != -EAGAIN) return -3;
  for (int i = 0; i < 3; i++) iof_yield();
  iof_sem_post(&f->s);
  iof_sem_post(&f->s);
  iof_sem_post(&f->s); /* one more than waiters: stays */
  for (int i = 0; i < 3; i++) iof_yield();
  return 0;
}

static void fifo_cancel(void **state) {
  (void)state;
  iof_io_context *io = iof_io_context_create();
  fifo f = {.n = 0};
  assert_int_equal(iof_sem_init(&f.s, 0), 0);
  assert_int_equal(iof_stop_source_init(&f.src), 0);
  f.ex = iof_io_context_executor(io);
  int st = 1;
  iof_launch_opts o = {0};
  o.on_done = sync_test_done;
  o.user = &st;
  assert_int_equal(iof_run_async(f.ex, &o, fifo_main, &f), 0);
  assert_true(iof_io_context_run(io) >= 0);
  assert_int_equal(iof_io_context_destroy(io), 0);
  assert_int_equal(st, 0);
  assert_int_equal(f.status[1], -ECANCELED);
  assert_int_equal(f.n, 4);
  int want[4] = {0, 2, 3, 4};
  for (int i = 0; i < 4; i++) assert_int_equal(f.order[i], want[i]);
  assert_int_equal(iof_sem_value(&f.s), 1);
  assert_int_equal(iof_sem_destroy(&f.s), 0);
  iof_stop_source_destroy(&f.src);
}

/* ---- a bound across threads ------------------------------------------- */

#define BOUND 3
#define BFIBERS (SYNC_TSAN ? 100 : 400)
#define BROUNDS 20

typedef struct bound {
  iof_sem s;
  atomic_int inside;
  atomic_int max_inside;
  atomic_int passes;
  atomic_int errors;
} bound;

static void bound_pass(bound *b) {
  if (iof_sem_wait(&b->s) != 0) {
    atomic_fetch_add(&b->errors, 1);
    return;
  }
  int in = atomic_fetch_add(&b->inside, 1) + 1;
  int m = atomic_load(&b->max_inside);
  while (in > m && !atomic_compare_exchange_weak(&b->max_inside, &m, in)) {
  }
  atomic_fetch_add(&b->passes, 1);
  atomic_fetch_sub(&b->inside, 1);
  if (iof_sem_post(&b->s) != 0) atomic_fetch_add(&b->errors, 1);
}

static int bound_fiber(void *arg) {
  for (int i = 0; i < BROUNDS; i++) {
    bound_pass(arg);
    if (i % 4 == 0) iof_yield();
  }
  return 0;
}

static void *bound_thread(void *arg) {
  for (int i = 0; i < BROUNDS * 10; i++) bound_pass(arg);
  return NULL;
}

static void bound_threads(void **state) {
  (void)state;
  bound b = {.inside = 0};
  assert_int_equal(iof_sem_init(&b.s, BOUND), 0);
  iof_thread_pool *p = iof_thread_pool_create(4);
  pthread_t t[2];
  for (int i = 0; i < 2; i++)
    assert_int_equal(pthread_create(&t[i], NULL, bound_thread, &b), 0);
  for (int i = 0; i < BFIBERS; i++)
    assert_int_equal(iof_launch(iof_thread_pool_executor(p), bound_fiber, &b),
                     0);
  assert_int_equal(iof_thread_pool_join(p), 0);
  for (int i = 0; i < 2; i++) pthread_join(t[i], NULL);
  assert_int_equal(iof_thread_pool_destroy(p), 0);
  assert_int_equal(atomic_load(&b.errors), 0);
  assert_true(atomic_load(&b.max_inside) <= BOUND);
  assert_int_equal(atomic_load(&b.passes),
                   BFIBERS * BROUNDS + 2 * BROUNDS * 10);
  assert_int_equal(iof_sem_value(&b.s), BOUND);
  assert_int_equal(iof_sem_destroy(&b.s), 0);
}

/* ---- errors, try, overflow ---------------------------------------------- */

static void errors(void **state) {
  (void)state;
  iof_sem s;
  assert_int_equal(iof_sem_init(NULL, 0), -EINVAL);
  assert_int_equal(iof_sem_init(&s, IOF_SEM_VALUE_MAX + 1u), -EINVAL);
  assert_int_equal(iof_sem_wait(NULL), -EINVAL);
  assert_int_equal(iof_sem_trywait(NULL), -EINVAL);
  assert_int_equal(iof_sem_post(NULL), -EINVAL);
  assert_int_equal(iof_sem_destroy(NULL), -EINVAL);
  assert_int_equal(iof_sem_init(&s, 1), 0);
  assert_int_equal(iof_sem_trywait(&s), 0);
  assert_int_equal(iof_sem_trywait(&s), -EAGAIN);
  assert_int_equal(iof_sem_post(&s), 0);
  assert_int_equal(iof_sem_value(&s), 1);
  assert_int_equal(iof_sem_wait(&s), 0); /* plain thread, available */
  assert_int_equal(iof_sem_destroy(&s), 0);
  assert_int_equal(iof_sem_init(&s, IOF_SEM_VALUE_MAX), 0);
  assert_int_equal(iof_sem_post(&s), -EOVERFLOW);
  assert_int_equal(iof_sem_value(&s), IOF_SEM_VALUE_MAX);
  assert_int_equal(iof_sem_destroy(&s), 0);
  iof_sem st = IOF_SEM_INIT(2);
  assert_int_equal(iof_sem_value(&st), 2);
  assert_int_equal(iof_sem_destroy(&st), 0);
}

/* ---- a plain thread waits, a fiber posts -------------------------------- */

typedef struct tp {
  iof_sem to_thread, to_fiber;
  int rounds;
} tp;

static void *tp_thread(void *arg) {
  tp *x = arg;
  for (int i = 0; i < x->rounds; i++) {
    iof_sem_wait(&x->to_thread);
    iof_sem_post(&x->to_fiber);
  }
  return NULL;
}

static int tp_fiber(void *arg) {
  tp *x = arg;
  for (int i = 0; i < x->rounds; i++) {
    iof_sem_post(&x->to_thread);
    if (iof_sem_wait(&x->to_fiber) != 0) return -1;
  }
  return 0;
}

static void thread_fiber(void **state) {
  (void)state;
  tp x = {.rounds = SYNC_TSAN ? 200 : 2000};
  iof_sem_init(&x.to_thread, 0);
  iof_sem_init(&x.to_fiber, 0);
  pthread_t t;
  assert_int_equal(pthread_create(&t, NULL, tp_thread, &x), 0);
  assert_int_equal(run_io(tp_fiber, &x), 0);
  pthread_join(t, NULL);
  assert_int_equal(iof_sem_destroy(&x.to_thread), 0);
  assert_int_equal(iof_sem_destroy(&x.to_fiber), 0);
}

/* ---- timed waits; a deadline racing a post ------------------------------ */

typedef struct race {
  iof_sem s;
  iof_executor_ref ex;
  int got, timedout, other;
  atomic_int posted;
} race;

static int race_poster(void *arg) {
  race *r = arg;
  iof_sem_post(&r->s);
  atomic_fetch_add(&r->posted, 1);
  return 0;
}

#define RACE_ROUNDS (SYNC_TSAN ? 100 : 1000)

static int race_main(void *arg) {
  race *r = arg;
  for (int i = 0; i < RACE_ROUNDS; i++) {
    iof_launch(r->ex, race_poster, r);
    int st = iof_sem_timedwait(&r->s, iof_deadline_after(i % 40 * 25000));
    if (st == 0)
      r->got++;
    else if (st == -ETIMEDOUT)
      r->timedout++;
    else
      r->other++;
  }
  return 0;
}

static int timed_fiber(void *arg) {
  return iof_sem_timedwait(arg, iof_deadline_after(5000000));
}

static void timed(void **state) {
  (void)state;
  iof_sem s = IOF_SEM_INIT(0);
  assert_int_equal(iof_sem_timedwait(&s, iof_deadline_after(2000000)),
                   -ETIMEDOUT);
  assert_int_equal(run_io(timed_fiber, &s), -ETIMEDOUT);
  race r = {.got = 0};
  iof_sem_init(&r.s, 0);
  iof_thread_pool *p = iof_thread_pool_create(2);
  r.ex = iof_thread_pool_executor(p);
  assert_int_equal(run_io(race_main, &r), 0);
  assert_int_equal(iof_thread_pool_join(p), 0);
  assert_int_equal(iof_thread_pool_destroy(p), 0);
  assert_int_equal(r.other, 0);
  assert_int_equal(atomic_load(&r.posted), RACE_ROUNDS);
  /* Every unit either was taken or is still there: none lost, none twice. */
  assert_int_equal((unsigned)r.got + iof_sem_value(&r.s), RACE_ROUNDS);
  assert_int_equal(iof_sem_destroy(&r.s), 0);
  assert_int_equal(iof_sem_destroy(&s), 0);
}

/* ---- fibers in a strand: every wake comes back inside the strand -------- */

#define SF (SYNC_TSAN ? 20 : 50)
#define SR 100

typedef struct sq {
  iof_sem s;
  iof_mutex m;
  iof_strand *strand;
  atomic_int inside;
  atomic_int violations;
  int plain; /* only ever touched inside the strand */
} sq;

static void check_in(sq *q) {
  if (!iof_strand_running_in_this_thread(q->strand))
    atomic_fetch_add(&q->violations, 1);
  if (atomic_exchange(&q->inside, 1) != 0) atomic_fetch_add(&q->violations, 1);
}

static void check_out(sq *q) {
  atomic_store(&q->inside, 0);
}

static int strand_fiber(void *arg) {
  sq *q = arg;
  for (int i = 0; i < SR; i++) {
    if (iof_sem_wait(&q->s) != 0) atomic_fetch_add(&q->violations, 1);
    check_in(q);
    q->plain++;
    check_out(q);
    if (iof_mutex_lock(&q->m) != 0) atomic_fetch_add(&q->violations, 1);
    check_in(q);
    q->plain++;
    check_out(q);
    if (i % 3 == 0) iof_yield();
    iof_mutex_unlock(&q->m);
    iof_sem_post(&q->s);
  }
  return 0;
}

/* A plain thread posting and taking units meanwhile makes waits complete
 * at every point, including inside the await's suspend. */
static void *strand_noise(void *arg) {
  sq *q = arg;
  for (int i = 0; i < SR * 5; i++) {
    if (iof_sem_trywait(&q->s) == 0) iof_sem_post(&q->s);
  }
  return NULL;
}

static void strand_waits(void **state) {
  (void)state;
  sq q = {.plain = 0};
  assert_int_equal(iof_sem_init(&q.s, 2), 0);
  assert_int_equal(iof_mutex_init(&q.m), 0);
  iof_thread_pool *p = iof_thread_pool_create(4);
  q.strand = iof_strand_create(iof_thread_pool_executor(p));
  assert_non_null(q.strand);
  pthread_t t;
  assert_int_equal(pthread_create(&t, NULL, strand_noise, &q), 0);
  for (int i = 0; i < SF; i++)
    assert_int_equal(
        iof_launch(iof_strand_executor(q.strand), strand_fiber, &q), 0);
  assert_int_equal(iof_thread_pool_join(p), 0);
  pthread_join(t, NULL);
  assert_int_equal(iof_strand_destroy(q.strand), 0);
  assert_int_equal(iof_thread_pool_destroy(p), 0);
  assert_int_equal(atomic_load(&q.violations), 0);
  assert_int_equal(q.plain, 2 * SF * SR);
  assert_int_equal(iof_sem_value(&q.s), 2);
  assert_int_equal(iof_sem_destroy(&q.s), 0);
  assert_int_equal(iof_mutex_destroy(&q.m), 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(fifo_cancel, sync_test_arm,
                                      sync_test_disarm),
      cmocka_unit_test_setup_teardown(bound_threads, sync_test_arm,
                                      sync_test_disarm),
      cmocka_unit_test_setup_teardown(errors, sync_test_arm, sync_test_disarm),
      cmocka_unit_test_setup_teardown(thread_fiber, sync_test_arm,
                                      sync_test_disarm),
      cmocka_unit_test_setup_teardown(timed, sync_test_arm, sync_test_disarm),
      cmocka_unit_test_setup_teardown(strand_waits, sync_test_arm,
                                      sync_test_disarm),
  };
  int r = cmocka_run_group_tests(tests, NULL, NULL);
  return r;
}
