/* Thread pool queue and wake-ups: posts made in a burst run in the order
 * they were made; a fiber queued behind one that blocks its worker is run
 * by another worker (woken for it, or the one watching) even when the
 * posts themselves woke nobody; bursts of launches onto a pool that parks
 * between them all run.
 *
 * IOF_TEST_THREADED */
#include "test_support.h"

#include <iofiber/iofiber.h>

#include <pthread.h>
#include <stdatomic.h>
#include <string.h>

IOF_TEST_WATCHDOG(arm, disarm, 60)

/* ---- order ----------------------------------------------------------- */

#define ORDER_N 500

typedef struct order_rec {
  atomic_int gate; /* the first fiber holds the only worker until set */
  atomic_int gated;
  int seen[ORDER_N];
  int n;
} order_rec;

typedef struct order_arg {
  order_rec *r;
  int i;
} order_arg;

static int gate_fn(void *arg) {
  order_rec *r = arg;
  atomic_store(&r->gated, 1);
  uint64_t t0 = iof_test_now_ns();
  while (!atomic_load(&r->gate) && ms_since(t0) < 10000) sleep_ms(1);
  return 0;
}

static int order_fn(void *arg) {
  order_arg *a = arg;
  a->r->seen[a->r->n++] = a->i; /* one worker: no race */
  return 0;
}

static void run_order(bool held) {
  iof_thread_pool *p = iof_thread_pool_create(1);
  assert_non_null(p);
  iof_executor_ref ex = iof_thread_pool_executor(p);
  static order_rec r;
  static order_arg args[ORDER_N];
  memset(&r, 0, sizeof r);
  if (held) {
    /* Every post below lands while the worker is busy: it finds them all
     * queued at once. */
    assert_int_equal(iof_launch(ex, gate_fn, &r), 0);
    uint64_t t0 = iof_test_now_ns();
    while (!atomic_load(&r.gated) && ms_since(t0) < 10000) sleep_ms(1);
    assert_int_equal(atomic_load(&r.gated), 1);
  }
  for (int i = 0; i < ORDER_N; i++) {
    args[i].r = &r;
    args[i].i = i;
    assert_int_equal(iof_launch(ex, order_fn, &args[i]), 0);
  }
  atomic_store(&r.gate, 1);
  assert_int_equal(iof_thread_pool_join(p), 0);
  assert_int_equal(r.n, ORDER_N);
  for (int i = 0; i < ORDER_N; i++) assert_int_equal(r.seen[i], i);
  assert_int_equal(iof_thread_pool_destroy(p), 0);
}

static void posts_run_in_order(void **state) {
  (void)state;
  run_order(false);
  run_order(true);
}

/* ---- a queued fiber behind a blocked worker ---------------------------- */

#define ROUNDS 300

typedef struct pair_rec {
  atomic_int flag;
  atomic_int waited_out; /* A gave up waiting for B */
  atomic_int done;
  atomic_int warm_done;
  pthread_t a_thread, b_thread;
} pair_rec;

static int warm_fn(void *arg) {
  atomic_store(&((pair_rec *)arg)->warm_done, 1);
  return 0;
}

/* Blocks its worker until B has run (bounded). */
static int a_fn(void *arg) {
  pair_rec *r = arg;
  r->a_thread = pthread_self();
  uint64_t t0 = iof_test_now_ns();
  while (!atomic_load(&r->flag))
    if (ms_since(t0) > 3000) {
      atomic_store(&r->waited_out, 1);
      break;
    }
  atomic_fetch_add(&r->done, 1);
  return 0;
}

static int b_fn(void *arg) {
  pair_rec *r = arg;
  r->b_thread = pthread_self();
  atomic_store(&r->flag, 1);
  atomic_fetch_add(&r->done, 1);
  return 0;
}

/* A trivial fiber first, so that a worker is often still spinning when A
 * and B are posted (those posts then wake no one), then A and B back to
 * back: often one worker takes both, and A keeps it until B has run. */
static void queued_fiber_behind_blocked_worker_runs(void **state) {
  (void)state;
  iof_thread_pool *p = iof_thread_pool_create(2);
  assert_non_null(p);
  iof_executor_ref ex = iof_thread_pool_executor(p);
  static pair_rec r;
  for (int round = 0; round < ROUNDS; round++) {
    memset(&r, 0, sizeof r);
    assert_int_equal(iof_launch(ex, warm_fn, &r), 0);
    while (!atomic_load(&r.warm_done)) {
    }
    assert_int_equal(iof_launch(ex, a_fn, &r), 0);
    assert_int_equal(iof_launch(ex, b_fn, &r), 0);
    uint64_t t0 = iof_test_now_ns();
    while (atomic_load(&r.done) < 2 && ms_since(t0) < 10000) sleep_ms(0);
    assert_int_equal(atomic_load(&r.done), 2);
    assert_int_equal(atomic_load(&r.waited_out), 0);
    assert_false(pthread_equal(r.a_thread, r.b_thread));
  }
  assert_int_equal(iof_thread_pool_destroy(p), 0);
}

/* ---- bursts onto a parking pool ---------------------------------------- */

#define BURSTS 24
#define BURST 64

typedef struct burst_rec {
  atomic_int ran;
  atomic_int done_ok;
} burst_rec;

static int burst_fn(void *arg) {
  atomic_fetch_add(&((burst_rec *)arg)->ran, 1);
  return 0;
}

static void burst_done(void *user, int status) {
  if (status == 0) atomic_fetch_add(&((burst_rec *)user)->done_ok, 1);
}

/* Between bursts the workers have time to stop spinning and park: each
 * burst must wake them (once), and every chain of it must run. */
static void bursts_onto_parked_workers_all_run(void **state) {
  (void)state;
  for (size_t threads = 1; threads <= 3; threads++) {
    iof_thread_pool *p = iof_thread_pool_create(threads);
    assert_non_null(p);
    iof_executor_ref ex = iof_thread_pool_executor(p);
    static burst_rec r;
    memset(&r, 0, sizeof r);
    iof_launch_opts o;
    memset(&o, 0, sizeof o);
    o.on_done = burst_done;
    o.user = &r;
    for (int b = 0; b < BURSTS; b++) {
      for (int i = 0; i < BURST; i++)
        assert_int_equal(iof_run_async(ex, &o, burst_fn, &r), 0);
      uint64_t t0 = iof_test_now_ns();
      while (atomic_load(&r.done_ok) < (b + 1) * BURST && ms_since(t0) < 10000)
        sleep_ms(b % 3); /* 0: often still spinning; 1-2 ms: parked */
      assert_int_equal(atomic_load(&r.done_ok), (b + 1) * BURST);
    }
    assert_int_equal(iof_thread_pool_join(p), 0);
    assert_int_equal(atomic_load(&r.ran), BURSTS * BURST);
    assert_int_equal(iof_thread_pool_destroy(p), 0);
  }
}

#define T(f) cmocka_unit_test_setup_teardown(f, arm, disarm)

int main(void) {
  const struct CMUnitTest tests[] = {
      T(posts_run_in_order),
      T(queued_fiber_behind_blocked_worker_runs),
      T(bursts_onto_parked_workers_all_run),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
