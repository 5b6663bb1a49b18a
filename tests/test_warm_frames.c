/* Warm frames: a pool's frame keeps the context its last fiber left there,
 * and the next fiber created on it resumes that context instead of
 * building a new one. Each fiber must still run its own function on its
 * own thread, with the whole stack, and a frame that went through other
 * hands must start cold.
 *
 * IOF_TEST_THREADED: contexts parked on one thread are resumed on another. */
#include "test_support.h"

#include <iofiber/fiber.h>
#include <iofiber/frame_allocator.h>

#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <stdint.h>
#include <string.h>

struct probe {
  int id;
  iof_fiber *self; /* what iof_fiber_current() said inside */
  pthread_t thread;
  int runs;
};

static int probe_fn(void *arg) {
  struct probe *p = arg;
  p->self = iof_fiber_current();
  p->thread = pthread_self();
  p->runs++;
  return p->id;
}

static int other_fn(void *arg) {
  struct probe *p = arg;
  p->self = iof_fiber_current();
  p->runs++;
  return -p->id;
}

/* Creates, runs and destroys one fiber of fn(p); returns the frame's
 * control block address for reuse checks. */
static iof_fiber *spawn(iof_frame_allocator *a, iof_fn fn, struct probe *p,
                        int want) {
  iof_fiber *f = iof_fiber_create(a, 0, fn, p);
  assert_non_null(f);
  assert_int_equal(iof_fiber_resume(f), 0);
  assert_true(iof_fiber_done(f));
  assert_int_equal(iof_fiber_status(f), want);
  assert_ptr_equal(p->self, f);
  assert_null(iof_fiber_current());
  assert_int_equal(iof_fiber_destroy(f), 0);
  return f;
}

static void test_each_fiber_runs_its_own_function(void **state) {
  (void)state;
  iof_stack_pool *pool = iof_stack_pool_create(NULL);
  assert_non_null(pool);
  iof_frame_allocator *a = iof_stack_pool_allocator(pool);
  iof_fiber *first = NULL;
  for (int i = 1; i <= 2000; i++) {
    struct probe p = {.id = i};
    bool odd = i & 1;
    iof_fiber *f = spawn(a, odd ? probe_fn : other_fn, &p, odd ? i : -i);
    assert_int_equal(p.runs, 1);
    if (!first) first = f;
    assert_ptr_equal(f, first); /* one frame, reused every time */
  }
  struct iof_stack_pool_stats s;
  assert_int_equal(iof_stack_pool_stats(pool, &s), 0);
  assert_int_equal(s.live, 0);
  assert_int_equal(s.mapped, 1);
  assert_int_equal(iof_stack_pool_destroy(pool), 0);
}

/* A fiber destroyed before it ran leaves its starting context: the next
 * one on the frame starts from it. */
static void test_unstarted_fiber_frame_is_reused(void **state) {
  (void)state;
  iof_stack_pool *pool = iof_stack_pool_create(NULL);
  iof_frame_allocator *a = iof_stack_pool_allocator(pool);
  struct probe never = {.id = 7};
  for (int i = 0; i < 100; i++) {
    iof_fiber *f = iof_fiber_create(a, 0, probe_fn, &never);
    assert_non_null(f);
    assert_false(iof_fiber_started(f));
    assert_int_equal(iof_fiber_destroy(f), 0);
    struct probe p = {.id = 100 + i};
    spawn(a, probe_fn, &p, 100 + i);
    assert_int_equal(p.runs, 1);
  }
  assert_int_equal(never.runs, 0);
  assert_int_equal(iof_stack_pool_destroy(pool), 0);
}

/* Deep recursion, to use most of the stack: the sum of n & 0xff. Each
 * level records where its pad lies, to measure a level's size. */
static uintptr_t level_at[3];

static __attribute__((noinline)) long deep(int n) {
  volatile unsigned char pad[512];
  memset((unsigned char *)pad, n & 0xff, sizeof pad);
  IOF_TEST_ESCAPE(pad);
  if (n < 3) level_at[n] = (uintptr_t)pad;
  if (n == 0) return 0;
  return deep(n - 1) + pad[n % sizeof pad];
}

static int deep_fn(void *arg) {
  int levels = *(int *)arg;
  return (int)(deep(levels) & 0x7fffffff);
}

static int run_deep(iof_frame_allocator *a, int levels) {
  iof_fiber *f = iof_fiber_create(a, 0, deep_fn, &levels);
  assert_non_null(f);
  assert_int_equal(iof_fiber_resume(f), 0);
  assert_true(iof_fiber_done(f));
  int status = iof_fiber_status(f);
  assert_int_equal(iof_fiber_destroy(f), 0);
  return status;
}

/* Thousands of reuses do not eat the stack: a fiber on a frame reused
 * 10,000 times still gets all of it but 8 KiB. */
static void test_reuse_keeps_the_whole_stack(void **state) {
  (void)state;
  iof_stack_pool *pool = iof_stack_pool_create(NULL);
  iof_frame_allocator *a = iof_stack_pool_allocator(pool);
  run_deep(a, 2); /* a level's size, in this build */
  size_t level = level_at[1] - level_at[0];
  assert_true(level >= 512 && level < 8192);
  for (int i = 0; i < 10000; i++) {
    struct probe p = {.id = i};
    spawn(a, probe_fn, &p, i);
  }
  int levels = (int)((IOF_FIBER_STACK_DEFAULT - 8192) / level);
  long want = 0;
  for (int n = 1; n <= levels; n++) want += n & 0xff;
  assert_int_equal(run_deep(a, levels), (int)(want & 0x7fffffff));
  assert_int_equal(iof_stack_pool_destroy(pool), 0);
}

/* A frame handed out through the allocator interface is the caller's:
 * whatever it writes there, the fiber created after it starts cold. */
static void test_frame_used_through_the_allocator_starts_cold(void **state) {
  (void)state;
  iof_stack_pool *pool = iof_stack_pool_create(NULL);
  iof_frame_allocator *a = iof_stack_pool_allocator(pool);
  struct probe p = {.id = 1};
  iof_fiber *f = spawn(a, probe_fn, &p, 1);
  size_t size = IOF_FIBER_STACK_DEFAULT;
  char *base = a->vtbl->allocate(a, size);
  assert_non_null(base);
  assert_true((char *)f > base && (char *)f < base + size); /* that frame */
  /* Everything but the top 64 bytes (the pool's own link). */
  memset(base, 0xab, size - 64);
  a->vtbl->deallocate(a, base, size);
  struct probe q = {.id = 2};
  assert_ptr_equal(spawn(a, probe_fn, &q, 2), f);
  assert_int_equal(q.runs, 1);
  assert_int_equal(iof_stack_pool_destroy(pool), 0);
}

/* ---- across threads ---------------------------------------------------- */

/* A worker that resumes the fibers handed to it and, in between, keeps
 * switching fibers of its own: a context parked on it and resumed on
 * another thread must not touch the worker's switch state. */
struct worker {
  pthread_t t;
  iof_fiber *_Atomic job;
  atomic_bool stop;
  long spawns;
};

static int nothing_fn(void *arg) {
  (void)arg;
  return 0;
}

static void *worker_main(void *arg) {
  struct worker *w = arg;
  iof_stack_pool *own = iof_stack_pool_create(NULL);
  iof_frame_allocator *a = iof_stack_pool_allocator(own);
  while (!atomic_load(&w->stop)) {
    iof_fiber *f = atomic_load(&w->job);
    if (f) {
      if (iof_fiber_resume(f) < 0) abort();
      atomic_store(&w->job, NULL);
    }
    iof_fiber *g = iof_fiber_create(a, 0, nothing_fn, NULL);
    if (!g || iof_fiber_resume(g) < 0 || iof_fiber_destroy(g) < 0) abort();
    w->spawns++;
    sched_yield(); /* lets the test thread in under Valgrind's one lock */
  }
  iof_stack_pool_destroy(own);
  return NULL;
}

/* A context parked by a fiber that ended on one thread runs the next
 * fiber on another: that fiber sees its own thread, and its end returns
 * to its own resumer there, while the first thread keeps switching. */
static void test_context_parked_on_one_thread_runs_on_another(void **state) {
  (void)state;
  iof_stack_pool *pool = iof_stack_pool_create(NULL);
  iof_frame_allocator *a = iof_stack_pool_allocator(pool);
  struct worker w = {0};
  assert_int_equal(pthread_create(&w.t, NULL, worker_main, &w), 0);
  /* 2,000 rounds, or as many as fit in two seconds (Valgrind): at least 20. */
  uint64_t end = iof_test_now_ns() + 2000000000u;
  for (int i = 0; i < 2000 && (i < 20 || iof_test_now_ns() < end); i++) {
    struct probe first = {.id = 1000 + i};
    iof_fiber *f = iof_fiber_create(a, 0, probe_fn, &first);
    assert_non_null(f);
    atomic_store(&w.job, f);
    while (atomic_load(&w.job)) sched_yield();
    assert_true(pthread_equal(first.thread, w.t));
    assert_int_equal(iof_fiber_status(f), 1000 + i);
    assert_int_equal(iof_fiber_destroy(f), 0); /* into this thread's cache */
    /* Parked on the worker; resumed here. */
    struct probe p = {.id = 5000 + i};
    assert_ptr_equal(spawn(a, probe_fn, &p, 5000 + i), f);
    assert_true(pthread_equal(p.thread, pthread_self()));
  }
  atomic_store(&w.stop, true);
  assert_int_equal(pthread_join(w.t, NULL), 0);
  assert_true(w.spawns > 0);
  assert_int_equal(iof_stack_pool_destroy(pool), 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_each_fiber_runs_its_own_function),
      cmocka_unit_test(test_unstarted_fiber_frame_is_reused),
      cmocka_unit_test(test_reuse_keeps_the_whole_stack),
      cmocka_unit_test(test_frame_used_through_the_allocator_starts_cold),
      cmocka_unit_test(test_context_parked_on_one_thread_runs_on_another),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
