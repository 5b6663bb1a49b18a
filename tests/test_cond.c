/* iof_cond: producer/consumer across pool threads, signal wakes
 * one waiter in FIFO order, broadcast wakes all, the mutex is held again
 * on every return (cancellation and timeout included), -EPERM, plain
 * threads mixed with fibers, a deadline racing a signal.
 *
 * IOF_TEST_THREADED */
#include "sync_test.h"

/* ---- producer / consumer over a pool ------------------------------------ */

#define PC_PRODUCERS 4
#define PC_CONSUMERS 4
#define PC_ITEMS (SYNC_TSAN ? 500 : 5000)

typedef struct pc {
  iof_mutex m;
  iof_cond not_empty;
  long queued;   /* items available */
  long produced; /* total so far */
  long consumed;
  long sum;
  int producers_left;
  atomic_int errors;
} pc;

static int producer(void *arg) {
  pc *s = arg;
  for (int i = 1; i <= PC_ITEMS; i++) {
    if (iof_mutex_lock(&s->m) != 0) {
      atomic_fetch_add(&s->errors, 1);
      continue;
    }
    s->queued++;
    s->produced++;
    s->sum += i;
    iof_cond_signal(&s->not_empty);
    iof_mutex_unlock(&s->m);
    if (i % 64 == 0) iof_yield();
  }
  iof_mutex_lock(&s->m);
  if (--s->producers_left == 0) iof_cond_broadcast(&s->not_empty);
  iof_mutex_unlock(&s->m);
  return 0;
}

static int consumer(void *arg) {
  pc *s = arg;
  iof_mutex_lock(&s->m);
  for (;;) {
    while (s->queued == 0 && s->producers_left > 0)
      if (iof_cond_wait(&s->not_empty, &s->m) != 0)
        atomic_fetch_add(&s->errors, 1);
    if (s->queued == 0) break;
    s->queued--;
    s->consumed++;
  }
  iof_mutex_unlock(&s->m);
  return 0;
}

static void producer_consumer(void **state) {
  (void)state;
  pc s = {.producers_left = PC_PRODUCERS};
  assert_int_equal(iof_mutex_init(&s.m), 0);
  assert_int_equal(iof_cond_init(&s.not_empty), 0);
  iof_thread_pool *p = iof_thread_pool_create(4);
  iof_executor_ref ex = iof_thread_pool_executor(p);
  for (int i = 0; i < PC_CONSUMERS; i++)
    assert_int_equal(iof_launch(ex, consumer, &s), 0);
  for (int i = 0; i < PC_PRODUCERS; i++)
    assert_int_equal(iof_launch(ex, producer, &s), 0);
  assert_int_equal(iof_thread_pool_join(p), 0);
  assert_int_equal(iof_thread_pool_destroy(p), 0);
  assert_int_equal(atomic_load(&s.errors), 0);
  assert_int_equal(s.consumed, (long)PC_PRODUCERS * PC_ITEMS);
  assert_int_equal(s.queued, 0);
  assert_int_equal(iof_cond_destroy(&s.not_empty), 0);
  assert_int_equal(iof_mutex_destroy(&s.m), 0);
}

/* ---- signal order, broadcast, cancellation ------------------------------ */

typedef struct order {
  iof_mutex m;
  iof_cond c;
  iof_executor_ref ex;
  iof_stop_source src;
  int woke[8];
  int nwoke;
  int waiting;
  int status[8];
  int owned_after[8];
} order;

typedef struct ow_arg {
  order *o;
  int id;
} ow_arg;

static ow_arg oargs[8];

static int order_waiter(void *arg) {
  ow_arg *a = arg;
  order *o = a->o;
  iof_mutex_lock(&o->m);
  o->waiting++;
  int r = iof_cond_wait(&o->c, &o->m);
  o->status[a->id] = r;
  o->woke[o->nwoke++] = a->id;
  /* Held on every return: unlocking succeeds exactly once. */
  o->owned_after[a->id] = iof_mutex_unlock(&o->m) == 0;
  return 0;
}

static int order_main(void *arg) {
  order *o = arg;
  for (int i = 0; i < 5; i++) {
    oargs[i] = (ow_arg){o, i};
    iof_launch_opts op = {0};
    if (i == 2) op.stop_token = iof_stop_source_token(&o->src);
    if (iof_run_async(o->ex, &op, order_waiter, &oargs[i]) != 0) return -1;
  }
  while (o->waiting < 5) iof_yield();
  /* Cancel waiter 2: it returns -ECANCELED, mutex held. */
  iof_stop_source_request(&o->src);
  for (int i = 0; i < 3; i++) iof_yield();
  if (o->nwoke != 1 || o->woke[0] != 2) return -2;
  /* One signal: the first waiter only. */
  iof_cond_signal(&o->c);
  for (int i = 0; i < 3; i++) iof_yield();
  if (o->nwoke != 2 || o->woke[1] != 0) return -3;
  /* Signal while holding the mutex: the waiter wakes, then waits for it. */
  iof_mutex_lock(&o->m);
  iof_cond_signal(&o->c);
  for (int i = 0; i < 3; i++) iof_yield();
  if (o->nwoke != 2) return -4;
  iof_mutex_unlock(&o->m);
  for (int i = 0; i < 3; i++) iof_yield();
  if (o->nwoke != 3 || o->woke[2] != 1) return -5;
  /* Broadcast: the rest. */
  iof_cond_broadcast(&o->c);
  return 0;
}

static void signal_broadcast_cancel(void **state) {
  (void)state;
  iof_io_context *io = iof_io_context_create();
  order o = {.nwoke = 0};
  assert_int_equal(iof_mutex_init(&o.m), 0);
  assert_int_equal(iof_cond_init(&o.c), 0);
  assert_int_equal(iof_stop_source_init(&o.src), 0);
  o.ex = iof_io_context_executor(io);
  int status = 1;
  iof_launch_opts op = {0};
  op.on_done = sync_test_done;
  op.user = &status;
  assert_int_equal(iof_run_async(o.ex, &op, order_main, &o), 0);
  assert_true(iof_io_context_run(io) >= 0);
  assert_int_equal(iof_io_context_destroy(io), 0);
  assert_int_equal(status, 0);
  assert_int_equal(o.nwoke, 5);
  assert_int_equal(o.woke[3], 3);
  assert_int_equal(o.woke[4], 4);
  for (int i = 0; i < 5; i++) {
    assert_int_equal(o.status[i], i == 2 ? -ECANCELED : 0);
    assert_true(o.owned_after[i]);
  }
  assert_int_equal(iof_cond_destroy(&o.c), 0);
  assert_int_equal(iof_mutex_destroy(&o.m), 0);
  iof_stop_source_destroy(&o.src);
}

/* ---- errors ----------------------------------------------------------- */

static int eperm_fn(void *arg) {
  iof_mutex *m = ((iof_mutex **)arg)[0];
  iof_cond *c = ((iof_cond **)arg)[1];
  return iof_cond_wait(c, m); /* m not owned */
}

static void errors(void **state) {
  (void)state;
  iof_mutex m = IOF_MUTEX_INIT;
  iof_cond c = IOF_COND_INIT;
  assert_int_equal(iof_cond_init(NULL), -EINVAL);
  assert_int_equal(iof_cond_wait(NULL, &m), -EINVAL);
  assert_int_equal(iof_cond_wait(&c, NULL), -EINVAL);
  assert_int_equal(iof_cond_signal(NULL), -EINVAL);
  assert_int_equal(iof_cond_broadcast(NULL), -EINVAL);
  assert_int_equal(iof_cond_destroy(NULL), -EINVAL);
  assert_int_equal(iof_cond_wait(&c, &m), -EPERM);
  void *args[2] = {&m, &c};
  assert_int_equal(run_io(eperm_fn, args), -EPERM);
  assert_int_equal(iof_mutex_lock(&m), 0);
  assert_int_equal(run_io(eperm_fn, args), -EPERM); /* owned by a thread */
  assert_int_equal(iof_mutex_unlock(&m), 0);
  assert_int_equal(iof_cond_signal(&c), 0); /* nobody waits: no-op */
  assert_int_equal(iof_cond_destroy(&c), 0);
  assert_int_equal(iof_mutex_destroy(&m), 0);
}

/* ---- plain threads and fibers ------------------------------------------- */

typedef struct ping {
  iof_mutex m;
  iof_cond c;
  int turn; /* 0: the thread's, 1: the fiber's */
  int rounds;
  atomic_int errors;
} ping;

#define PING_ROUNDS (SYNC_TSAN ? 200 : 2000)

static void *ping_thread(void *arg) {
  ping *p = arg;
  for (int i = 0; i < PING_ROUNDS; i++) {
    iof_mutex_lock(&p->m);
    while (p->turn != 0)
      if (iof_cond_wait(&p->c, &p->m) != 0) atomic_fetch_add(&p->errors, 1);
    p->turn = 1;
    p->rounds++;
    iof_cond_signal(&p->c);
    iof_mutex_unlock(&p->m);
  }
  return NULL;
}

static int ping_fiber(void *arg) {
  ping *p = arg;
  for (int i = 0; i < PING_ROUNDS; i++) {
    iof_mutex_lock(&p->m);
    while (p->turn != 1)
      if (iof_cond_wait(&p->c, &p->m) != 0) atomic_fetch_add(&p->errors, 1);
    p->turn = 0;
    p->rounds++;
    iof_cond_signal(&p->c);
    iof_mutex_unlock(&p->m);
  }
  return 0;
}

static void thread_fiber_pingpong(void **state) {
  (void)state;
  ping p = {.turn = 0};
  assert_int_equal(iof_mutex_init(&p.m), 0);
  assert_int_equal(iof_cond_init(&p.c), 0);
  pthread_t t;
  assert_int_equal(pthread_create(&t, NULL, ping_thread, &p), 0);
  assert_int_equal(run_io(ping_fiber, &p), 0);
  pthread_join(t, NULL);
  assert_int_equal(atomic_load(&p.errors), 0);
  assert_int_equal(p.rounds, 2 * PING_ROUNDS);
  assert_int_equal(iof_cond_destroy(&p.c), 0);
  assert_int_equal(iof_mutex_destroy(&p.m), 0);
}

/* ---- timed waits, and a deadline racing a signal ----------------------- */

typedef struct tw {
  iof_mutex m;
  iof_cond c;
  int status;
  int held;
} tw;

static int timed_fiber(void *arg) {
  tw *t = arg;
  iof_mutex_lock(&t->m);
  t->status = iof_cond_timedwait(&t->c, &t->m, iof_deadline_after(10000000));
  t->held = iof_mutex_unlock(&t->m) == 0;
  return 0;
}

#define RACE_ROUNDS (SYNC_TSAN ? 100 : 500)

typedef struct race {
  iof_mutex m;
  iof_cond c;
  int flag;
  int woken, timedout, other;
  iof_executor_ref ex;
  int done;
} race;

static int race_signaller(void *arg) {
  race *r = arg;
  iof_mutex_lock(&r->m);
  r->flag = 1;
  iof_cond_signal(&r->c);
  iof_mutex_unlock(&r->m);
  return 0;
}

static int race_main(void *arg) {
  race *r = arg;
  for (int i = 0; i < RACE_ROUNDS; i++) {
    iof_mutex_lock(&r->m);
    r->flag = 0;
    /* The signaller runs on a pool thread around the deadline. */
    iof_launch(r->ex, race_signaller, r);
    int st =
        iof_cond_timedwait(&r->c, &r->m, iof_deadline_after(i % 50 * 1000));
    if (st == 0)
      r->woken++;
    else if (st == -ETIMEDOUT)
      r->timedout++;
    else
      r->other++;
    /* Held again either way. */
    if (iof_mutex_unlock(&r->m) != 0) r->other++;
    /* Let the signaller finish before the next round. */
    for (;;) {
      iof_mutex_lock(&r->m);
      int f = r->flag;
      iof_mutex_unlock(&r->m);
      if (f) break;
      iof_yield();
    }
  }
  return 0;
}

static void timed_waits(void **state) {
  (void)state;
  tw t = {.status = 1};
  assert_int_equal(iof_mutex_init(&t.m), 0);
  assert_int_equal(iof_cond_init(&t.c), 0);
  /* Plain thread. */
  iof_mutex_lock(&t.m);
  assert_int_equal(iof_cond_timedwait(&t.c, &t.m, iof_deadline_after(5000000)),
                   -ETIMEDOUT);
  assert_int_equal(iof_mutex_unlock(&t.m), 0);
  /* A fiber (its timer on its io_context's loop). */
  run_io(timed_fiber, &t);
  assert_int_equal(t.status, -ETIMEDOUT);
  assert_true(t.held);
  /* Races. */
  race r = {.flag = 0};
  assert_int_equal(iof_mutex_init(&r.m), 0);
  assert_int_equal(iof_cond_init(&r.c), 0);
  iof_thread_pool *p = iof_thread_pool_create(2);
  r.ex = iof_thread_pool_executor(p);
  assert_int_equal(run_io(race_main, &r), 0);
  assert_int_equal(iof_thread_pool_join(p), 0);
  assert_int_equal(iof_thread_pool_destroy(p), 0);
  assert_int_equal(r.other, 0);
  assert_int_equal(r.woken + r.timedout, RACE_ROUNDS);
  assert_int_equal(iof_cond_destroy(&r.c), 0);
  assert_int_equal(iof_mutex_destroy(&r.m), 0);
  assert_int_equal(iof_cond_destroy(&t.c), 0);
  assert_int_equal(iof_mutex_destroy(&t.m), 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(producer_consumer, sync_test_arm,
                                      sync_test_disarm),
      cmocka_unit_test_setup_teardown(signal_broadcast_cancel, sync_test_arm,
                                      sync_test_disarm),
      cmocka_unit_test_setup_teardown(errors, sync_test_arm, sync_test_disarm),
      cmocka_unit_test_setup_teardown(thread_fiber_pingpong, sync_test_arm,
                                      sync_test_disarm),
      cmocka_unit_test_setup_teardown(timed_waits, sync_test_arm,
                                      sync_test_disarm),
  };
  int r = cmocka_run_group_tests(tests, NULL, NULL);
  return r;
}
