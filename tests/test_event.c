/* iof_event: manual reset releases every waiter and stays set
 * until reset; auto reset releases exactly one waiter (FIFO) or stays set
 * for the next wait; cancellation; plain threads; timed waits.
 *
 * IOF_TEST_THREADED */
#include "sync_test.h"

typedef struct ev {
  iof_event e;
  iof_executor_ref ex;
  iof_stop_source src;
  int waiting;
  int woke[8];
  int nwoke;
  int status[8];
} ev;

typedef struct ea {
  ev *x;
  int id;
} ea;

static ea eargs[8];

static int waiter(void *arg) {
  ea *a = arg;
  a->x->waiting++;
  int r = iof_event_wait(&a->x->e);
  a->x->status[a->id] = r;
  if (r == 0) a->x->woke[a->x->nwoke++] = a->id;
  return 0;
}

static int spawn_waiters(ev *x, int n, int cancel_id) {
  for (int i = 0; i < n; i++) {
    eargs[i] = (ea){x, i};
    iof_launch_opts o = {0};
    if (i == cancel_id) o.stop_token = iof_stop_source_token(&x->src);
    if (iof_run_async(x->ex, &o, waiter, &eargs[i]) != 0) return -1;
  }
  while (x->waiting < n) iof_yield();
  iof_yield();
  return 0;
}

static void yields(int n) {
  for (int i = 0; i < n; i++) iof_yield();
}

static int manual_main(void *arg) {
  ev *x = arg;
  if (spawn_waiters(x, 4, 3) < 0) return -1;
  iof_stop_source_request(&x->src);
  yields(2);
  if (x->nwoke != 0 || x->status[3] != -ECANCELED) return -2;
  iof_event_set(&x->e);
  yields(2);
  if (x->nwoke != 3) return -3;
  /* Still set: waits return at once, any number of them. */
  if (iof_event_wait(&x->e) != 0 || iof_event_wait(&x->e) != 0) return -4;
  if (!iof_event_is_set(&x->e)) return -5;
  iof_event_reset(&x->e);
  if (iof_event_trywait(&x->e) != -EAGAIN) return -6;
  return 0;
}

static int auto_main(void *arg) {
  ev *x = arg;
  if (spawn_waiters(x, 3, -1) < 0) return -1;
  iof_event_set(&x->e);
  yields(2);
  if (x->nwoke != 1 || x->woke[0] != 0) return -2;
  if (iof_event_is_set(&x->e)) return -3; /* consumed by the waiter */
  iof_event_set(&x->e);
  iof_event_set(&x->e);
  yields(2);
  if (x->nwoke != 3 || x->woke[1] != 1 || x->woke[2] != 2) return -4;
  /* Nobody waits: stays set for exactly one wait. */
  iof_event_set(&x->e);
  if (!iof_event_is_set(&x->e)) return -5;
  if (iof_event_wait(&x->e) != 0) return -6;
  if (iof_event_trywait(&x->e) != -EAGAIN) return -7;
  iof_event_set(&x->e);
  if (iof_event_trywait(&x->e) != 0) return -8;
  return 0;
}

static void run_case(iof_fn fn, bool manual) {
  iof_io_context *io = iof_io_context_create();
  ev x = {.nwoke = 0};
  assert_int_equal(iof_event_init(&x.e, manual), 0);
  assert_int_equal(iof_stop_source_init(&x.src), 0);
  x.ex = iof_io_context_executor(io);
  int st = 1;
  iof_launch_opts o = {0};
  o.on_done = sync_test_done;
  o.user = &st;
  assert_int_equal(iof_run_async(x.ex, &o, fn, &x), 0);
  assert_true(iof_io_context_run(io) >= 0);
  assert_int_equal(iof_io_context_destroy(io), 0);
  assert_int_equal(st, 0);
  assert_int_equal(iof_event_destroy(&x.e), 0);
  iof_stop_source_destroy(&x.src);
}

static void manual_reset(void **state) {
  (void)state;
  run_case(manual_main, true);
}

static void auto_reset(void **state) {
  (void)state;
  run_case(auto_main, false);
}

/* ---- plain threads wait, a fiber sets ----------------------------------- */

typedef struct tev {
  iof_event go;
  atomic_int released;
} tev;

static void *thread_waiter(void *arg) {
  tev *t = arg;
  if (iof_event_wait(&t->go) == 0) atomic_fetch_add(&t->released, 1);
  return NULL;
}

static int setter(void *arg) {
  tev *t = arg;
  sleep_ms(10);
  return iof_event_set(&t->go);
}

static void threads(void **state) {
  (void)state;
  tev t = {.released = 0};
  assert_int_equal(iof_event_init(&t.go, true), 0);
  pthread_t th[3];
  for (int i = 0; i < 3; i++)
    assert_int_equal(pthread_create(&th[i], NULL, thread_waiter, &t), 0);
  assert_int_equal(run_io(setter, &t), 0);
  for (int i = 0; i < 3; i++) pthread_join(th[i], NULL);
  assert_int_equal(atomic_load(&t.released), 3);
  assert_int_equal(iof_event_destroy(&t.go), 0);
}

/* ---- timed, errors ------------------------------------------------------ */

static int timed_fiber(void *arg) {
  return iof_event_timedwait(arg, iof_deadline_after(5000000));
}

static void timed_and_errors(void **state) {
  (void)state;
  iof_event e = IOF_EVENT_INIT(false);
  assert_int_equal(iof_event_init(NULL, true), -EINVAL);
  assert_int_equal(iof_event_wait(NULL), -EINVAL);
  assert_int_equal(iof_event_set(NULL), -EINVAL);
  assert_int_equal(iof_event_reset(NULL), -EINVAL);
  assert_int_equal(iof_event_trywait(NULL), -EINVAL);
  assert_int_equal(iof_event_destroy(NULL), -EINVAL);
  assert_false(iof_event_is_set(NULL));
  assert_int_equal(iof_event_timedwait(&e, iof_deadline_after(2000000)),
                   -ETIMEDOUT);
  assert_int_equal(run_io(timed_fiber, &e), -ETIMEDOUT);
  iof_event_set(&e);
  assert_int_equal(run_io(timed_fiber, &e), 0);
  assert_int_equal(iof_event_destroy(&e), 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(manual_reset, sync_test_arm,
                                      sync_test_disarm),
      cmocka_unit_test_setup_teardown(auto_reset, sync_test_arm,
                                      sync_test_disarm),
      cmocka_unit_test_setup_teardown(threads, sync_test_arm, sync_test_disarm),
      cmocka_unit_test_setup_teardown(timed_and_errors, sync_test_arm,
                                      sync_test_disarm),
  };
  int r = cmocka_run_group_tests(tests, NULL, NULL);
  return r;
}
