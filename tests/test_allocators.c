/* Frame allocators: mmap (guard page, alignment), malloc, the tracking
 * wrapper's counts, the default allocator, and user-written allocators
 * seen through fiber create/destroy (the frame footer).
 *
 * IOF_TEST_THREADED: frames freed on other threads, counts under contention. */
#include "test_support.h"

#include <iofiber/fiber.h>
#include <iofiber/frame_allocator.h>

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define K64 ((size_t)64 * 1024)

static size_t page_size(void) {
  return (size_t)sysconf(_SC_PAGESIZE);
}

static size_t round_page(size_t n) {
  return (n + page_size() - 1) & ~(page_size() - 1);
}

static void *fa(iof_frame_allocator *a, size_t size) {
  return a->vtbl->allocate(a, size);
}

static void ff(iof_frame_allocator *a, void *p, size_t size) {
  a->vtbl->deallocate(a, p, size);
}

static iof_tracking_stats tstats(iof_frame_allocator *a) {
  iof_tracking_stats s;
  memset(&s, 0xa5, sizeof s);
  assert_int_equal(iof_tracking_allocator_stats(a, &s), 0);
  return s;
}

#define assert_tracking(a, live_, live_bytes_, total_, freed_)                 \
  do {                                                                         \
    iof_tracking_stats s_ = tstats(a);                                         \
    assert_int_equal(s_.live, (live_));                                        \
    assert_int_equal(s_.live_bytes, (live_bytes_));                            \
    assert_int_equal(s_.total, (total_));                                      \
    assert_int_equal(s_.freed, (freed_));                                      \
  } while (0)

/* A fiber that uses a few KiB of its stack and checks what it computed. */
static __attribute__((noinline)) unsigned depth_sum(unsigned n) {
  volatile unsigned char buf[256];
  for (unsigned i = 0; i < sizeof buf; i++) buf[i] = (unsigned char)(n + i);
  unsigned s = 0;
  for (unsigned i = 0; i < sizeof buf; i++) s += buf[i];
  return n ? s + depth_sum(n - 1) : s;
}

static int work_fiber(void *arg) {
  unsigned *out = arg;
  *out = depth_sum(12);
  iof_fiber_suspend();
  return 17;
}

static void run_work_fiber(iof_frame_allocator *a, size_t stack) {
  unsigned got = 0;
  iof_fiber *f = iof_fiber_create(a, stack, work_fiber, &got);
  assert_non_null(f);
  assert_int_equal(iof_fiber_resume(f), 0);
  assert_int_equal(got, depth_sum(12));
  assert_int_equal(iof_fiber_resume(f), 0);
  assert_int_equal(iof_fiber_status(f), 17);
  assert_int_equal(iof_fiber_destroy(f), 0);
}

/* ---- mmap --------------------------------------------------------------- */

static void test_mmap_allocator(void **state) {
  (void)state;
  iof_frame_allocator *a = iof_mmap_allocator();
  assert_non_null(a);
  assert_ptr_equal(iof_mmap_allocator(), a);
  size_t sizes[] = {1, page_size(), 3 * page_size() + 1, K64, 1024 * 1024};
  void *v[5];
  for (int i = 0; i < 5; i++) {
    v[i] = fa(a, sizes[i]);
    assert_non_null(v[i]);
    assert_int_equal((uintptr_t)v[i] % page_size(), 0);
    memset(v[i], 0xcc, round_page(sizes[i])); /* all of it is usable */
    assert_guarded(v[i], round_page(sizes[i]));
  }
  /* Distinct, non-overlapping frames. */
  for (int i = 0; i < 5; i++)
    for (int j = 0; j < 5; j++)
      if (i != j) {
        uintptr_t lo = (uintptr_t)v[i], hi = lo + round_page(sizes[i]);
        assert_false((uintptr_t)v[j] >= lo && (uintptr_t)v[j] < hi);
      }
  for (int i = 0; i < 5; i++) ff(a, v[i], sizes[i]);
  errno = 0;
  assert_null(fa(a, 0));
  assert_int_equal(errno, EINVAL);
  ff(a, NULL, K64); /* no-op */
  run_work_fiber(a, IOF_FIBER_STACK_MIN);
  run_work_fiber(a, IOF_FIBER_STACK_DEFAULT);
}

/* ---- malloc ------------------------------------------------------------- */

static void test_malloc_allocator(void **state) {
  (void)state;
  iof_frame_allocator *a = iof_malloc_allocator();
  assert_non_null(a);
  assert_ptr_equal(iof_malloc_allocator(), a);
  assert_ptr_not_equal(a, iof_mmap_allocator());
  void *p = fa(a, K64);
  assert_non_null(p);
  assert_int_equal((uintptr_t)p % 16, 0);
  memset(p, 1, K64);
  ff(a, p, K64);
  errno = 0;
  assert_null(fa(a, 0));
  assert_int_equal(errno, EINVAL);
  ff(a, NULL, K64);
  run_work_fiber(a, IOF_FIBER_STACK_MIN);
  run_work_fiber(a, IOF_FIBER_STACK_DEFAULT + 100);
}

/* ---- default ------------------------------------------------------------ */

static void test_default_allocator(void **state) {
  (void)state;
  iof_frame_allocator *a = iof_default_frame_allocator();
  assert_non_null(a);
  assert_ptr_equal(iof_default_frame_allocator(), a);
  /* A stack pool: page aligned, guarded, reused. */
  void *p = fa(a, IOF_FIBER_STACK_DEFAULT);
  assert_non_null(p);
  assert_int_equal((uintptr_t)p % page_size(), 0);
  memset(p, 2, IOF_FIBER_STACK_DEFAULT);
  assert_guarded(p, IOF_FIBER_STACK_DEFAULT);
  ff(a, p, IOF_FIBER_STACK_DEFAULT);
  void *q = fa(a, IOF_FIBER_STACK_DEFAULT);
  assert_ptr_equal(q, p);
  ff(a, q, IOF_FIBER_STACK_DEFAULT);
  /* Not a tracking allocator. */
  iof_tracking_stats ts;
  assert_int_equal(iof_tracking_allocator_stats(a, &ts), -EINVAL);
  /* NULL and the default are the same for fibers. */
  run_work_fiber(NULL, IOF_FIBER_STACK_DEFAULT);
  run_work_fiber(a, IOF_FIBER_STACK_DEFAULT);
  run_work_fiber(a, IOF_FIBER_STACK_MIN); /* another size */
  /* A tracking allocator over NULL wraps the default: a default-sized
   * frame freed through it comes back from the default directly. */
  iof_frame_allocator *t = iof_tracking_allocator_create(NULL);
  assert_non_null(t);
  void *r = fa(t, IOF_FIBER_STACK_DEFAULT);
  assert_non_null(r);
  ff(t, r, IOF_FIBER_STACK_DEFAULT);
  void *r2 = fa(a, IOF_FIBER_STACK_DEFAULT);
  assert_ptr_equal(r2, r);
  ff(a, r2, IOF_FIBER_STACK_DEFAULT);
  assert_tracking(t, 0, 0, 1, 1);
  assert_int_equal(iof_tracking_allocator_destroy(t), 0);
}

/* ---- tracking ----------------------------------------------------------- */

static int noop_fiber(void *arg) {
  (void)arg;
  return 0;
}

static void test_tracking_counts(void **state) {
  (void)state;
  iof_frame_allocator *t = iof_tracking_allocator_create(iof_mmap_allocator());
  assert_non_null(t);
  assert_tracking(t, 0, 0, 0, 0);
  iof_fiber *f1 = iof_fiber_create(t, IOF_FIBER_STACK_DEFAULT, noop_fiber, 0);
  assert_non_null(f1);
  assert_tracking(t, 1, IOF_FIBER_STACK_DEFAULT, 1, 0);
  /* Sizes are what the fiber asked, rounded to pages. */
  iof_fiber *f2 =
      iof_fiber_create(t, IOF_FIBER_STACK_MIN + 1, noop_fiber, NULL);
  assert_non_null(f2);
  size_t s2 = round_page(IOF_FIBER_STACK_MIN + 1);
  assert_tracking(t, 2, IOF_FIBER_STACK_DEFAULT + s2, 2, 0);
  /* Running does not allocate. */
  assert_int_equal(iof_fiber_resume(f1), 0);
  assert_int_equal(iof_fiber_resume(f2), 0);
  assert_tracking(t, 2, IOF_FIBER_STACK_DEFAULT + s2, 2, 0);
  assert_int_equal(iof_tracking_allocator_destroy(t), -EBUSY);
  assert_tracking(t, 2, IOF_FIBER_STACK_DEFAULT + s2, 2, 0); /* still here */
  assert_int_equal(iof_fiber_destroy(f1), 0);
  assert_tracking(t, 1, s2, 2, 1);
  assert_int_equal(iof_tracking_allocator_destroy(t), -EBUSY);
  assert_int_equal(iof_fiber_destroy(f2), 0);
  assert_tracking(t, 0, 0, 2, 2);
  /* A never-started fiber is freed through it too. */
  iof_fiber *f3 = iof_fiber_create(t, IOF_FIBER_STACK_DEFAULT, noop_fiber, 0);
  assert_non_null(f3);
  assert_tracking(t, 1, IOF_FIBER_STACK_DEFAULT, 3, 2);
  assert_int_equal(iof_fiber_destroy(f3), 0);
  assert_tracking(t, 0, 0, 3, 3);
  /* Direct use. */
  void *p = fa(t, 5000);
  assert_non_null(p);
  assert_tracking(t, 1, 5000, 4, 3);
  ff(t, p, 5000);
  assert_tracking(t, 0, 0, 4, 4);
  assert_int_equal(iof_tracking_allocator_destroy(t), 0);
}

static void test_tracking_errors(void **state) {
  (void)state;
  iof_tracking_stats ts;
  assert_int_equal(iof_tracking_allocator_stats(NULL, &ts), -EINVAL);
  assert_int_equal(iof_tracking_allocator_stats(iof_mmap_allocator(), &ts),
                   -EINVAL);
  assert_int_equal(iof_tracking_allocator_stats(iof_malloc_allocator(), &ts),
                   -EINVAL);
  assert_int_equal(iof_tracking_allocator_destroy(NULL), -EINVAL);
  assert_int_equal(iof_tracking_allocator_destroy(iof_mmap_allocator()),
                   -EINVAL);
  assert_int_equal(iof_tracking_allocator_destroy(iof_malloc_allocator()),
                   -EINVAL);
  assert_int_equal(
      iof_tracking_allocator_destroy(iof_default_frame_allocator()), -EINVAL);
  iof_stack_pool *pool = iof_stack_pool_create(NULL);
  assert_non_null(pool);
  assert_int_equal(
      iof_tracking_allocator_stats(iof_stack_pool_allocator(pool), &ts),
      -EINVAL);
  assert_int_equal(
      iof_tracking_allocator_destroy(iof_stack_pool_allocator(pool)), -EINVAL);
  assert_int_equal(iof_stack_pool_destroy(pool), 0);
  iof_frame_allocator *t = iof_tracking_allocator_create(NULL);
  assert_non_null(t);
  assert_int_equal(iof_tracking_allocator_stats(t, NULL), -EINVAL);
  assert_int_equal(iof_tracking_allocator_destroy(t), 0);
}

/* Failures of the inner allocator pass through and are not counted. */
static void test_tracking_inner_failure(void **state) {
  (void)state;
  iof_stack_pool_options o = {.stack_size = K64, .budget = K64};
  iof_stack_pool *pool = iof_stack_pool_create(&o);
  assert_non_null(pool);
  iof_frame_allocator *t =
      iof_tracking_allocator_create(iof_stack_pool_allocator(pool));
  assert_non_null(t);
  iof_fiber *f = iof_fiber_create(t, K64, noop_fiber, NULL);
  assert_non_null(f);
  errno = 0;
  assert_null(iof_fiber_create(t, K64, noop_fiber, NULL));
  assert_int_equal(errno, ENOMEM);
  errno = 0;
  assert_null(fa(t, K64));
  assert_int_equal(errno, ENOMEM);
  assert_tracking(t, 1, K64, 1, 0);
  assert_int_equal(iof_fiber_destroy(f), 0);
  assert_tracking(t, 0, 0, 1, 1);
  /* Nested: both layers count the same frame. */
  iof_frame_allocator *outer = iof_tracking_allocator_create(t);
  assert_non_null(outer);
  f = iof_fiber_create(outer, K64, noop_fiber, NULL);
  assert_non_null(f);
  assert_tracking(outer, 1, K64, 1, 0);
  assert_tracking(t, 1, K64, 2, 1);
  assert_int_equal(iof_tracking_allocator_destroy(t), -EBUSY);
  assert_int_equal(iof_fiber_resume(f), 0);
  assert_int_equal(iof_fiber_destroy(f), 0);
  assert_tracking(outer, 0, 0, 1, 1);
  assert_tracking(t, 0, 0, 2, 2);
  assert_int_equal(iof_tracking_allocator_destroy(outer), 0);
  assert_int_equal(iof_tracking_allocator_destroy(t), 0);
  assert_int_equal(iof_stack_pool_destroy(pool), 0);
}

/* Counts stay exact with threads creating and destroying at once, frames
 * freed on another thread than the one that allocated them included. */
#define TRACK_THREADS 2
#define TRACK_FIBERS 300

struct track_arg {
  iof_frame_allocator *t;
  iof_fiber *handoff[TRACK_FIBERS]; /* created here, destroyed by peer */
  struct track_arg *peer;
  pthread_barrier_t *bar;
  int errors;
};

static void *track_thread(void *arg) {
  struct track_arg *a = arg;
  for (int i = 0; i < TRACK_FIBERS; i++) {
    iof_fiber *f =
        iof_fiber_create(a->t, IOF_FIBER_STACK_MIN, noop_fiber, NULL);
    if (!f || iof_fiber_resume(f) != 0) a->errors++;
    if (i % 2) {
      if (f && iof_fiber_destroy(f) != 0) a->errors++;
      a->handoff[i] = NULL;
    } else {
      a->handoff[i] = f;
    }
  }
  pthread_barrier_wait(a->bar);
  for (int i = 0; i < TRACK_FIBERS; i++)
    if (a->peer->handoff[i] && iof_fiber_destroy(a->peer->handoff[i]) != 0)
      a->errors++;
  return NULL;
}

static void test_tracking_threads(void **state) {
  (void)state;
  iof_frame_allocator *t = iof_tracking_allocator_create(NULL);
  assert_non_null(t);
  pthread_barrier_t bar;
  pthread_barrier_init(&bar, NULL, TRACK_THREADS);
  struct track_arg args[TRACK_THREADS];
  pthread_t th[TRACK_THREADS];
  memset(args, 0, sizeof args);
  for (int i = 0; i < TRACK_THREADS; i++) {
    args[i].t = t;
    args[i].bar = &bar;
    args[i].peer = &args[(i + 1) % TRACK_THREADS];
  }
  for (int i = 0; i < TRACK_THREADS; i++)
    assert_int_equal(pthread_create(&th[i], NULL, track_thread, &args[i]), 0);
  for (int i = 0; i < TRACK_THREADS; i++) {
    assert_int_equal(pthread_join(th[i], NULL), 0);
    assert_int_equal(args[i].errors, 0);
  }
  assert_tracking(t, 0, 0, TRACK_THREADS * TRACK_FIBERS,
                  TRACK_THREADS * TRACK_FIBERS);
  assert_int_equal(iof_tracking_allocator_destroy(t), 0);
  pthread_barrier_destroy(&bar);
}

/* ---- a user-written allocator ------------------------------------------- */

/* Records every call: the footer must give back exactly what was handed
 * out, with the size it was allocated with, on whatever thread frees. */
struct rec_alloc {
  iof_frame_allocator base;
  _Atomic int allocs, frees, fail_next;
  void *last_p;
  size_t last_alloc_size, last_free_size;
  void *last_free_p;
  _Atomic int size_mismatch;
};

static void *rec_allocate(iof_frame_allocator *self, size_t size) {
  struct rec_alloc *r = (struct rec_alloc *)self;
  if (atomic_exchange(&r->fail_next, 0)) return NULL; /* errno untouched */
  void *p = NULL;
  if (posix_memalign(&p, page_size(), size) != 0) {
    errno = ENOMEM;
    return NULL;
  }
  atomic_fetch_add(&r->allocs, 1);
  r->last_p = p;
  r->last_alloc_size = size;
  return p;
}

static void rec_deallocate(iof_frame_allocator *self, void *p, size_t size) {
  struct rec_alloc *r = (struct rec_alloc *)self;
  atomic_fetch_add(&r->frees, 1);
  r->last_free_p = p;
  r->last_free_size = size;
  free(p);
}

static const iof_frame_allocator_vtbl rec_vtbl = {rec_allocate, rec_deallocate};

static void *destroy_on_thread(void *arg) {
  return (void *)(intptr_t)iof_fiber_destroy(arg);
}

static void test_user_allocator(void **state) {
  (void)state;
  struct rec_alloc r = {.base = {&rec_vtbl}};
  size_t want = IOF_FIBER_STACK_MIN + 100;
  iof_fiber *f = iof_fiber_create(&r.base, want, work_fiber, &(unsigned){0});
  assert_non_null(f);
  assert_int_equal(r.allocs, 1);
  assert_int_equal(r.last_alloc_size, round_page(want));
  /* The control block lives inside the frame. */
  assert_true((uintptr_t)f >= (uintptr_t)r.last_p);
  assert_true((uintptr_t)f < (uintptr_t)r.last_p + r.last_alloc_size);
  assert_true(iof_fiber_stack_size(f) < r.last_alloc_size);
  assert_true(iof_fiber_stack_size(f) > r.last_alloc_size - 1024);
  void *frame = r.last_p;
  assert_int_equal(iof_fiber_resume(f), 0);
  assert_int_equal(iof_fiber_resume(f), 0);
  assert_int_equal(r.frees, 0);
  /* Freed on another thread, with the original pointer and size. */
  pthread_t t;
  void *ret = (void *)1;
  assert_int_equal(pthread_create(&t, NULL, destroy_on_thread, f), 0);
  assert_int_equal(pthread_join(t, &ret), 0);
  assert_null(ret);
  assert_int_equal(r.frees, 1);
  assert_ptr_equal(r.last_free_p, frame);
  assert_int_equal(r.last_free_size, round_page(want));

  /* A failing allocator that leaves errno alone: create reports ENOMEM. */
  r.fail_next = 1;
  errno = 0;
  assert_null(iof_fiber_create(&r.base, want, noop_fiber, NULL));
  assert_int_equal(errno, ENOMEM);
  assert_int_equal(r.allocs, 1);
  /* Invalid arguments never reach the allocator. */
  errno = 0;
  assert_null(
      iof_fiber_create(&r.base, IOF_FIBER_STACK_MIN - 1, noop_fiber, NULL));
  assert_int_equal(errno, EINVAL);
  assert_null(iof_fiber_create(&r.base, want, NULL, NULL));
  assert_int_equal(r.allocs, 1);
  assert_int_equal(r.frees, 1);
}

int main(int argc, char **argv) {
  /* An optional argument selects tests by name pattern. */
  if (argc > 1) cmocka_set_test_filter(argv[1]);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_mmap_allocator),
      cmocka_unit_test(test_malloc_allocator),
      cmocka_unit_test(test_default_allocator),
      cmocka_unit_test(test_tracking_counts),
      cmocka_unit_test(test_tracking_errors),
      cmocka_unit_test(test_tracking_inner_failure),
      cmocka_unit_test(test_tracking_threads),
      cmocka_unit_test(test_user_allocator),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
