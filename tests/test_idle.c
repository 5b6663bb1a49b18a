/* Spinning before parking stays bounded: after a fiber hopped back and
 * forth between an io_context and a thread pool (where both sides spin
 * for each other), an idle process with a running io_context and a
 * two-thread pool uses next to no CPU time over a second, and the hops
 * themselves all completed.
 *
 * IOF_TEST_THREADED */
#include "test_support.h"

#include <iofiber/iofiber.h>

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <time.h>

IOF_TEST_WATCHDOG(arm_watchdog, disarm_watchdog, 60)

#define HOPS 2000

typedef struct ctx {
  iof_io_context *io;
  iof_thread_pool *pool;
  atomic_int on_pool;
  atomic_int done;
} ctx;

static int on_pool(void *arg) {
  ctx *c = arg;
  atomic_fetch_add(&c->on_pool, 1);
  return 0;
}

static int hopper(void *arg) {
  ctx *c = arg;
  for (int i = 0; i < HOPS; i++)
    if (iof_run(iof_thread_pool_executor(c->pool), NULL, on_pool, c) != 0)
      return -1;
  atomic_store(&c->done, 1);
  return 0;
}

static void *io_main(void *arg) {
  iof_io_context_run(arg);
  return NULL;
}

static int64_t cpu_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static void idle_after_hops_costs_no_cpu(void **state) {
  (void)state;
  ctx c = {0};
  c.io = iof_io_context_create();
  c.pool = iof_thread_pool_create(2);
  assert_non_null(c.io);
  assert_non_null(c.pool);
  /* The guard keeps run blocking in libev once the hops are over. */
  iof_work_guard g;
  assert_int_equal(iof_work_guard_init(&g, iof_io_context_executor(c.io)), 0);
  pthread_t t;
  assert_int_equal(pthread_create(&t, NULL, io_main, c.io), 0);
  assert_int_equal(iof_launch(iof_io_context_executor(c.io), hopper, &c), 0);
  while (!atomic_load(&c.done)) sleep_ms(1);
  assert_int_equal(atomic_load(&c.on_pool), HOPS);
  sleep_ms(50); /* the last spins end (20 us each) */
  int64_t c0 = cpu_ns();
  uint64_t t0 = iof_test_now_ns();
  sleep_ms(1000);
  int64_t used = cpu_ns() - c0;
  int64_t wall = (int64_t)(iof_test_now_ns() - t0);
  printf("# idle: %.3f ms of CPU over %.0f ms\n", used / 1e6, wall / 1e6);
  /* A thread left spinning would use ~1000 ms here. */
  assert_true(used < 20 * 1000000);
  iof_work_guard_reset(&g);
  assert_int_equal(pthread_join(t, NULL), 0);
  assert_int_equal(iof_io_context_destroy(c.io), 0);
  assert_int_equal(iof_thread_pool_destroy(c.pool), 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(idle_after_hops_costs_no_cpu,
                                      arm_watchdog, disarm_watchdog),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
