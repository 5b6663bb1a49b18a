/* iof_rwlock: shared and exclusive holds, errors and try calls, FIFO
 * fairness (a reader never passes a waiting writer; an unlock hands the
 * lock to one writer or to every reader before the next writer), a waiter
 * that gives up letting the readers behind it in, timed waits, and
 * exclusion across pool threads, plain threads and fibers.
 *
 * IOF_TEST_THREADED */
#include "sync_test.h"

/* ---- one io_context: order and hand-over ------------------------------- */

typedef struct order {
  iof_rwlock rw;
  iof_stop_source src;
  char log[32]; /* who got the lock, in order: 'A'.. for the ids */
  int n;
  int waiting;
  int status[8];
  int readers_seen[8]; /* readers holding when each one got it */
  int holding;         /* readers holding now */
} order;

typedef struct who {
  order *o;
  int id;
  bool write;
  bool stoppable;
} who;

static who whos[8];

static int waiter(void *arg) {
  who *a = arg;
  order *o = a->o;
  o->waiting++;
  int r = a->write ? iof_rwlock_wrlock(&o->rw) : iof_rwlock_rdlock(&o->rw);
  o->status[a->id] = r;
  if (r != 0) return 0;
  o->log[o->n++] = (char)('A' + a->id);
  if (!a->write) o->readers_seen[a->id] = ++o->holding;
  /* Hold across a few turns of the loop, so others can run meanwhile. */
  for (int i = 0; i < 3; i++) iof_yield();
  if (!a->write) o->holding--;
  return iof_rwlock_unlock(&o->rw);
}

static int launch_who(order *o, int id, bool write, bool stoppable) {
  whos[id] = (who){o, id, write, stoppable};
  iof_launch_opts opts = {0};
  if (stoppable) opts.stop_token = iof_stop_source_token(&o->src);
  return iof_run_async(iof_env_current()->executor, &opts, waiter, &whos[id]);
}

/* Main holds the lock shared; W(1) waits; R(2) and R(3) come after it and
 * must not pass it; W(4) after them. Main's unlock gives it to W1 alone,
 * W1's to R2 and R3 together, theirs to W4. */
static int fair_main(void *arg) {
  order *o = arg;
  if (iof_rwlock_rdlock(&o->rw) != 0) return -1;
  bool write[5] = {false, true, false, false, true};
  for (int i = 1; i <= 4; i++) {
    if (launch_who(o, i, write[i], false) != 0) return -2;
    while (o->waiting < i) iof_yield();
    iof_yield();
  }
  if (o->n != 0) return -3; /* R2, R3 queued behind W1 */
  if (iof_rwlock_tryrdlock(&o->rw) != -EBUSY) return -4;
  if (iof_rwlock_unlock(&o->rw) != 0) return -5;
  for (int i = 0; i < 40 && o->n < 4; i++) iof_yield();
  return 0;
}

static void fifo_fair(void **state) {
  (void)state;
  order o = {.n = 0};
  assert_int_equal(iof_rwlock_init(&o.rw), 0);
  assert_int_equal(iof_stop_source_init(&o.src), 0);
  assert_int_equal(run_io(fair_main, &o), 0);
  assert_int_equal(o.n, 4);
  assert_memory_equal(o.log, "B", 1);
  /* The two readers held it together, then the last writer came. */
  assert_true((o.log[1] == 'C' && o.log[2] == 'D') ||
              (o.log[1] == 'D' && o.log[2] == 'C'));
  assert_int_equal(o.log[3], 'E');
  assert_int_equal(o.readers_seen[2] + o.readers_seen[3], 3);
  for (int i = 1; i <= 4; i++) assert_int_equal(o.status[i], 0);
  assert_int_equal(iof_rwlock_destroy(&o.rw), 0);
  iof_stop_source_destroy(&o.src);
}

/* Main holds it shared; W(1), stoppable, waits; R(2) waits behind it.
 * Stopping W1 lets R2 in at once, beside main's hold. */
static int leave_main(void *arg) {
  order *o = arg;
  if (iof_rwlock_rdlock(&o->rw) != 0) return -1;
  if (launch_who(o, 1, true, true) != 0) return -2;
  while (o->waiting < 1) iof_yield();
  iof_yield();
  if (launch_who(o, 2, false, false) != 0) return -3;
  while (o->waiting < 2) iof_yield();
  iof_yield();
  if (o->n != 0) return -4;
  iof_stop_source_request(&o->src);
  for (int i = 0; i < 10 && o->n < 1; i++) iof_yield();
  int got = o->n; /* still holding: R2 must be in */
  if (iof_rwlock_unlock(&o->rw) != 0) return -5;
  for (int i = 0; i < 10; i++) iof_yield();
  return got == 1 ? 0 : -6;
}

static void waiter_leaves(void **state) {
  (void)state;
  order o = {.n = 0};
  assert_int_equal(iof_rwlock_init(&o.rw), 0);
  assert_int_equal(iof_stop_source_init(&o.src), 0);
  assert_int_equal(run_io(leave_main, &o), 0);
  assert_int_equal(o.status[1], -ECANCELED);
  assert_int_equal(o.status[2], 0);
  assert_int_equal(o.n, 1);
  assert_int_equal(o.log[0], 'C');
  assert_int_equal(iof_rwlock_destroy(&o.rw), 0);
  iof_stop_source_destroy(&o.src);
}

/* ---- errors and try calls ----------------------------------------------- */

static int errors_main(void *arg) {
  iof_rwlock *rw = arg;
  if (iof_rwlock_unlock(rw) != -EPERM) return -1;
  if (iof_rwlock_tryrdlock(rw) != 0) return -2;
  if (iof_rwlock_tryrdlock(rw) != 0) return -3; /* shared: twice */
  if (iof_rwlock_trywrlock(rw) != -EBUSY) return -4;
  if (iof_rwlock_destroy(rw) != -EBUSY) return -5;
  if (iof_rwlock_unlock(rw) != 0 || iof_rwlock_unlock(rw) != 0) return -6;
  if (iof_rwlock_unlock(rw) != -EPERM) return -7;
  if (iof_rwlock_wrlock(rw) != 0) return -8;
  if (iof_rwlock_wrlock(rw) != -EDEADLK) return -9;
  if (iof_rwlock_rdlock(rw) != -EDEADLK) return -10;
  if (iof_rwlock_trywrlock(rw) != -EDEADLK) return -11;
  if (iof_rwlock_tryrdlock(rw) != -EDEADLK) return -12;
  if (iof_rwlock_unlock(rw) != 0) return -13;
  return 0;
}

static void errors(void **state) {
  (void)state;
  assert_int_equal(iof_rwlock_init(NULL), -EINVAL);
  assert_int_equal(iof_rwlock_destroy(NULL), -EINVAL);
  assert_int_equal(iof_rwlock_rdlock(NULL), -EINVAL);
  assert_int_equal(iof_rwlock_wrlock(NULL), -EINVAL);
  assert_int_equal(iof_rwlock_tryrdlock(NULL), -EINVAL);
  assert_int_equal(iof_rwlock_trywrlock(NULL), -EINVAL);
  assert_int_equal(iof_rwlock_timedrdlock(NULL, 0), -EINVAL);
  assert_int_equal(iof_rwlock_timedwrlock(NULL, 0), -EINVAL);
  assert_int_equal(iof_rwlock_unlock(NULL), -EINVAL);
  iof_rwlock rw = IOF_RWLOCK_INIT; /* the static initializer works too */
  assert_int_equal(run_io(errors_main, &rw), 0);
  assert_int_equal(iof_rwlock_destroy(&rw), 0);
}

/* A stop already requested: the blocking calls refuse, the try calls do
 * not look at it. */
static int stopped_main(void *arg) {
  iof_rwlock *rw = arg;
  if (iof_rwlock_rdlock(rw) != -ECANCELED) return -1;
  if (iof_rwlock_wrlock(rw) != -ECANCELED) return -2;
  if (iof_rwlock_trywrlock(rw) != 0) return -3;
  return iof_rwlock_unlock(rw);
}

static void already_stopped(void **state) {
  (void)state;
  iof_rwlock rw;
  assert_int_equal(iof_rwlock_init(&rw), 0);
  iof_stop_source src;
  assert_int_equal(iof_stop_source_init(&src), 0);
  iof_stop_source_request(&src);
  iof_io_context *io = iof_io_context_create();
  int st = 1;
  iof_launch_opts o = {0};
  o.stop_token = iof_stop_source_token(&src);
  o.on_done = sync_test_done;
  o.user = &st;
  assert_int_equal(
      iof_run_async(iof_io_context_executor(io), &o, stopped_main, &rw), 0);
  assert_true(iof_io_context_run(io) >= 0);
  assert_int_equal(iof_io_context_destroy(io), 0);
  assert_int_equal(st, 0);
  assert_int_equal(iof_rwlock_destroy(&rw), 0);
  iof_stop_source_destroy(&src);
}

/* ---- timed waits -------------------------------------------------------- */

typedef struct timed_state {
  iof_rwlock rw;
  int r_read, r_write;
  int64_t waited_ns;
} timed_state;

static int timed_reader(void *arg) {
  timed_state *t = arg;
  int64_t t0 = iof_now_ns();
  t->r_read = iof_rwlock_timedrdlock(&t->rw, iof_deadline_after(20000000));
  t->waited_ns = iof_now_ns() - t0;
  return 0;
}

static int timed_main(void *arg) {
  timed_state *t = arg;
  if (iof_rwlock_wrlock(&t->rw) != 0) return -1;
  iof_launch_opts o = {0};
  int done = -1;
  o.on_done = sync_test_done;
  o.user = &done;
  if (iof_run_async(iof_env_current()->executor, &o, timed_reader, t) != 0)
    return -2;
  while (done != 0) iof_sleep_for(1000000);
  if (iof_rwlock_unlock(&t->rw) != 0) return -3;
  /* A free lock is taken even with a deadline in the past. */
  t->r_write = iof_rwlock_timedwrlock(&t->rw, 1);
  return iof_rwlock_unlock(&t->rw);
}

static void timed(void **state) {
  (void)state;
  timed_state t = {.r_read = 1};
  assert_int_equal(iof_rwlock_init(&t.rw), 0);
  assert_int_equal(run_io(timed_main, &t), 0);
  assert_int_equal(t.r_read, -ETIMEDOUT);
  assert_true(t.waited_ns >= 19000000);
  assert_int_equal(t.r_write, 0);
  assert_int_equal(iof_rwlock_destroy(&t.rw), 0);
}

/* ---- exclusion across threads ------------------------------------------- */

#define XFIBERS 24
#define XROUNDS 40
#define XTHREAD_ROUNDS 300

typedef struct excl {
  iof_rwlock rw;
  atomic_int readers, writers;
  atomic_int bad; /* a writer beside anyone, a reader beside a writer */
  atomic_int reads, writes, errors;
  long value; /* written under write holds only */
} excl;

static void excl_pass(excl *x, bool write) {
  int r = write ? iof_rwlock_wrlock(&x->rw) : iof_rwlock_rdlock(&x->rw);
  if (r != 0) {
    atomic_fetch_add(&x->errors, 1);
    return;
  }
  if (write) {
    if (atomic_fetch_add(&x->writers, 1) != 0 || atomic_load(&x->readers))
      atomic_fetch_add(&x->bad, 1);
    x->value++;
    atomic_fetch_add(&x->writes, 1);
    atomic_fetch_sub(&x->writers, 1);
  } else {
    atomic_fetch_add(&x->readers, 1);
    if (atomic_load(&x->writers)) atomic_fetch_add(&x->bad, 1);
    atomic_fetch_add(&x->reads, 1);
    atomic_fetch_sub(&x->readers, 1);
  }
  if (iof_rwlock_unlock(&x->rw) != 0) atomic_fetch_add(&x->errors, 1);
}

static int excl_fiber(void *arg) {
  for (int i = 0; i < XROUNDS; i++) {
    excl_pass(arg, i % 5 == 0);
    if (i % 3 == 0) iof_yield();
  }
  return 0;
}

static void *excl_thread(void *arg) {
  for (int i = 0; i < XTHREAD_ROUNDS; i++) excl_pass(arg, i % 7 == 0);
  return NULL;
}

static void exclusion_threads(void **state) {
  (void)state;
  excl x = {.value = 0};
  assert_int_equal(iof_rwlock_init(&x.rw), 0);
  iof_thread_pool *p = iof_thread_pool_create(4);
  assert_non_null(p);
  pthread_t t[2];
  for (int i = 0; i < 2; i++)
    assert_int_equal(pthread_create(&t[i], NULL, excl_thread, &x), 0);
  for (int i = 0; i < XFIBERS; i++)
    assert_int_equal(iof_launch(iof_thread_pool_executor(p), excl_fiber, &x),
                     0);
  assert_int_equal(iof_thread_pool_join(p), 0);
  for (int i = 0; i < 2; i++) pthread_join(t[i], NULL);
  assert_int_equal(iof_thread_pool_destroy(p), 0);
  assert_int_equal(atomic_load(&x.errors), 0);
  assert_int_equal(atomic_load(&x.bad), 0);
  int writes = XFIBERS * ((XROUNDS + 4) / 5) + 2 * ((XTHREAD_ROUNDS + 6) / 7);
  assert_int_equal(atomic_load(&x.writes), writes);
  assert_int_equal(x.value, writes);
  assert_int_equal(atomic_load(&x.reads),
                   XFIBERS * XROUNDS + 2 * XTHREAD_ROUNDS - writes);
  assert_int_equal(iof_rwlock_destroy(&x.rw), 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(fifo_fair, sync_test_arm,
                                      sync_test_disarm),
      cmocka_unit_test_setup_teardown(waiter_leaves, sync_test_arm,
                                      sync_test_disarm),
      cmocka_unit_test_setup_teardown(errors, sync_test_arm, sync_test_disarm),
      cmocka_unit_test_setup_teardown(already_stopped, sync_test_arm,
                                      sync_test_disarm),
      cmocka_unit_test_setup_teardown(timed, sync_test_arm, sync_test_disarm),
      cmocka_unit_test_setup_teardown(exclusion_threads, sync_test_arm,
                                      sync_test_disarm),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
