/* The recycling stack pool: exact statistics, budgets, the direct path for
 * other sizes, reuse, frees from other threads, thread-exit flushes, guard
 * pages and option checks.
 *
 * IOF_TEST_THREADED: frees and caches on several threads. */
#include "test_support.h"

#include <iofiber/fiber.h>
#include <iofiber/frame_allocator.h>

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#define K64 ((size_t)64 * 1024)

static size_t page_size(void) {
  return (size_t)sysconf(_SC_PAGESIZE);
}

static void *pa(iof_frame_allocator *a, size_t size) {
  return a->vtbl->allocate(a, size);
}

static void pf(iof_frame_allocator *a, void *p, size_t size) {
  a->vtbl->deallocate(a, p, size);
}

static struct iof_stack_pool_stats stats(iof_stack_pool *p) {
  struct iof_stack_pool_stats s;
  memset(&s, 0xa5, sizeof s);
  assert_int_equal(iof_stack_pool_stats(p, &s), 0);
  return s;
}

/* Checks every field; -1 skips one. */
#define assert_stats(pool, live_, cached_, allocated_, peak_, mapped_,         \
                     failed_, live_bytes_)                                     \
  do {                                                                         \
    struct iof_stack_pool_stats s_ = stats(pool);                              \
    if ((long)(live_) >= 0) assert_int_equal(s_.live, (live_));                \
    if ((long)(cached_) >= 0) assert_int_equal(s_.cached, (cached_));          \
    if ((long)(allocated_) >= 0) assert_int_equal(s_.allocated, (allocated_)); \
    if ((long)(peak_) >= 0) assert_int_equal(s_.peak, (peak_));                \
    if ((long)(mapped_) >= 0) assert_int_equal(s_.mapped, (mapped_));          \
    if ((long)(failed_) >= 0) assert_int_equal(s_.failed, (failed_));          \
    if ((long)(live_bytes_) >= 0)                                              \
      assert_int_equal(s_.live_bytes, (live_bytes_));                          \
    /* Always: what is mapped is either live or cached. */                     \
    assert_int_equal(s_.mapped, s_.live + s_.cached);                          \
  } while (0)

/* ---- a worker thread that runs calls for the test, one at a time -------- */

struct worker {
  pthread_t t;
  pthread_mutex_t m;
  pthread_cond_t c;
  void (*fn)(void *);
  void *arg;
  bool quit;
};

static void *worker_main(void *arg) {
  struct worker *w = arg;
  pthread_mutex_lock(&w->m);
  for (;;) {
    while (!w->fn && !w->quit) pthread_cond_wait(&w->c, &w->m);
    if (w->fn) {
      void (*fn)(void *) = w->fn;
      pthread_mutex_unlock(&w->m);
      fn(w->arg);
      pthread_mutex_lock(&w->m);
      w->fn = NULL;
      pthread_cond_broadcast(&w->c);
      continue;
    }
    break;
  }
  pthread_mutex_unlock(&w->m);
  return NULL;
}

static void worker_start(struct worker *w) {
  memset(w, 0, sizeof *w);
  pthread_mutex_init(&w->m, NULL);
  pthread_cond_init(&w->c, NULL);
  assert_int_equal(pthread_create(&w->t, NULL, worker_main, w), 0);
}

/* Runs fn(arg) on the worker and waits for it. */
static void worker_run(struct worker *w, void (*fn)(void *), void *arg) {
  pthread_mutex_lock(&w->m);
  w->fn = fn;
  w->arg = arg;
  pthread_cond_broadcast(&w->c);
  while (w->fn) pthread_cond_wait(&w->c, &w->m);
  pthread_mutex_unlock(&w->m);
}

/* Ends the thread: its caches are flushed once join returns. */
static void worker_stop(struct worker *w) {
  pthread_mutex_lock(&w->m);
  w->quit = true;
  pthread_cond_broadcast(&w->c);
  pthread_mutex_unlock(&w->m);
  assert_int_equal(pthread_join(w->t, NULL), 0);
  pthread_mutex_destroy(&w->m);
  pthread_cond_destroy(&w->c);
}

struct frames {
  iof_frame_allocator *a;
  size_t size;
  void *v[64];
  int from, to; /* the range [from, to) to allocate or free */
  int failed;
};

static void alloc_range(void *arg) {
  struct frames *f = arg;
  for (int i = f->from; i < f->to; i++) {
    f->v[i] = pa(f->a, f->size);
    if (!f->v[i])
      f->failed++;
    else
      memset(f->v[i], 0x5a, 64); /* touch the bottom of the stack */
  }
}

static void free_range(void *arg) {
  struct frames *f = arg;
  for (int i = f->from; i < f->to; i++) {
    pf(f->a, f->v[i], f->size);
    f->v[i] = NULL;
  }
}

static void on(struct worker *w, void (*fn)(void *), struct frames *f, int from,
               int to) {
  f->from = from;
  f->to = to;
  if (w)
    worker_run(w, fn, f);
  else
    fn(f);
}

static bool same_set(void *const *a, void *const *b, int n) {
  for (int i = 0; i < n; i++) {
    bool found = false;
    for (int j = 0; j < n && !found; j++) found = a[i] == b[j];
    if (!found) return false;
  }
  return true;
}

/* ---- exact statistics -----------------------------------------------------
 */

/* thread_cache 4, depot_max 8: 20 frames freed on one thread leave at most
 * 4 + 8 stacks mapped (and at least the 8 the depot holds); once the thread
 * ends its cache joins the depot, which keeps exactly 8. Everything below
 * the capacity is kept: nothing is unmapped while there is room. */
static void test_stats_mixed(void **state) {
  (void)state;
  iof_stack_pool_options o = {
      .stack_size = K64, .thread_cache = 4, .depot_max = 8};
  iof_stack_pool *pool = iof_stack_pool_create(&o);
  assert_non_null(pool);
  assert_stats(pool, 0, 0, 0, 0, 0, 0, 0);
  struct worker w;
  worker_start(&w);
  struct frames f = {.a = iof_stack_pool_allocator(pool), .size = K64};

  on(&w, alloc_range, &f, 0, 20);
  assert_int_equal(f.failed, 0);
  assert_stats(pool, 20, 0, 20, 20, 20, 0, 20 * K64);

  on(&w, free_range, &f, 0, 5); /* 5 <= 4 + 8: all kept */
  assert_stats(pool, 15, 5, 20, 20, 20, 0, 15 * K64);
  on(&w, free_range, &f, 5, 8); /* 8 <= 12: all kept */
  assert_stats(pool, 12, 8, 20, 20, 20, 0, 12 * K64);

  on(&w, alloc_range, &f, 0, 2); /* served from what is cached */
  assert_int_equal(f.failed, 0);
  assert_stats(pool, 14, 6, 22, 20, 20, 0, 14 * K64);

  /* A frame of another size takes the direct path: live and mapped, never
   * cached, and its bytes count. */
  struct frames big = {.a = f.a, .size = 2 * K64};
  on(&w, alloc_range, &big, 0, 1);
  assert_int_equal(big.failed, 0);
  assert_stats(pool, 15, 6, 23, 20, 21, 0, 14 * K64 + 2 * K64);
  on(&w, free_range, &big, 0, 1);
  assert_stats(pool, 14, 6, 23, 20, 20, 0, 14 * K64);

  /* All 20 stacks back: at most cache + depot stay, at least the depot. */
  on(&w, free_range, &f, 0, 2);
  on(&w, free_range, &f, 8, 20);
  struct iof_stack_pool_stats s = stats(pool);
  assert_int_equal(s.live, 0);
  assert_int_equal(s.live_bytes, 0);
  assert_int_equal(s.allocated, 23);
  assert_int_equal(s.peak, 20);
  assert_int_equal(s.failed, 0);
  assert_int_equal(s.mapped, s.cached);
  assert_in_range(s.cached, 8, 12);

  /* The thread ends: its cache goes to the full depot, the rest is
   * unmapped. */
  worker_stop(&w);
  assert_stats(pool, 0, 8, 23, 20, 8, 0, 0);
  assert_int_equal(iof_stack_pool_destroy(pool), 0);
}

/* ---- budget ---------------------------------------------------------------
 */

static int idle_fiber(void *arg) {
  int *stage = arg;
  *stage = 1;
  iof_fiber_suspend();
  *stage = 2;
  return 0;
}

static void test_budget(void **state) {
  (void)state;
  iof_stack_pool_options o = {.stack_size = K64, .budget = 3 * K64};
  iof_stack_pool *pool = iof_stack_pool_create(&o);
  assert_non_null(pool);
  iof_frame_allocator *a = iof_stack_pool_allocator(pool);

  /* Directly. */
  void *v[4];
  for (int i = 0; i < 3; i++) assert_non_null(v[i] = pa(a, K64));
  errno = 0;
  assert_null(pa(a, K64));
  assert_int_equal(errno, ENOMEM);
  assert_stats(pool, 3, 0, 3, 3, 3, 1, 3 * K64);
  /* A direct-path size counts its own bytes against the budget. */
  errno = 0;
  assert_null(pa(a, page_size()));
  assert_int_equal(errno, ENOMEM);
  assert_stats(pool, 3, 0, 3, 3, 3, 2, 3 * K64);
  pf(a, v[2], K64);
  assert_stats(pool, 2, 1, 3, 3, 3, 2, 2 * K64);
  assert_non_null(v[3] = pa(a, K64)); /* recovered */
  assert_ptr_equal(v[3], v[2]);       /* and reused */
  pf(a, v[3], K64);
  /* 64 KiB free: 48 KiB of direct path fits, then not even a page. */
  assert_non_null(v[2] = pa(a, 48 * 1024));
  assert_stats(pool, 3, 1, 5, 3, 4, 2, 2 * K64 + 48 * 1024);
  assert_non_null(v[3] = pa(a, 16 * 1024));
  errno = 0;
  assert_null(pa(a, 1));
  assert_int_equal(errno, ENOMEM);
  assert_stats(pool, 4, 1, 6, 4, 5, 3, 3 * K64);
  pf(a, v[2], 48 * 1024);
  pf(a, v[3], 16 * 1024);
  pf(a, v[0], K64);
  pf(a, v[1], K64);
  assert_stats(pool, 0, 3, 6, 4, 3, 3, 0);

  /* Through iof_fiber_create. */
  iof_fiber *fs[4];
  int stage[4] = {0};
  for (int i = 0; i < 3; i++) {
    fs[i] = iof_fiber_create(a, K64, idle_fiber, &stage[i]);
    assert_non_null(fs[i]);
    assert_int_equal(iof_fiber_resume(fs[i]), 0);
  }
  errno = 0;
  assert_null(iof_fiber_create(a, K64, idle_fiber, &stage[3]));
  assert_int_equal(errno, ENOMEM);
  assert_stats(pool, 3, 0, 9, 4, 3, 4, 3 * K64);
  /* Ending a fiber gives its bytes back. */
  assert_int_equal(iof_fiber_resume(fs[0]), 0);
  assert_int_equal(iof_fiber_destroy(fs[0]), 0);
  fs[3] = iof_fiber_create(a, K64, idle_fiber, &stage[3]);
  assert_non_null(fs[3]);
  assert_int_equal(iof_fiber_resume(fs[3]), 0);
  for (int i = 1; i < 4; i++) {
    assert_int_equal(iof_fiber_resume(fs[i]), 0);
    assert_int_equal(stage[i], 2);
    assert_int_equal(iof_fiber_destroy(fs[i]), 0);
  }
  assert_stats(pool, 0, 3, 10, 4, 3, 4, 0);
  assert_int_equal(iof_stack_pool_destroy(pool), 0);
}

/* ---- direct path ------------------------------------------------------------
 */

static int noop_fiber(void *arg) {
  (void)arg;
  return 1;
}

static void test_direct_path(void **state) {
  (void)state;
  iof_stack_pool *pool = iof_stack_pool_create(NULL); /* 64 KiB stacks */
  assert_non_null(pool);
  iof_frame_allocator *a = iof_stack_pool_allocator(pool);
  size_t sizes[] = {IOF_FIBER_STACK_MIN, 4 * K64, K64 + 1, 1};
  size_t total = 0;
  void *v[4];
  for (int i = 0; i < 4; i++) {
    size_t rs = (sizes[i] + page_size() - 1) & ~(page_size() - 1);
    v[i] = pa(a, sizes[i]);
    assert_non_null(v[i]);
    assert_int_equal((uintptr_t)v[i] % page_size(), 0);
    memset(v[i], 1, sizes[i]);
    assert_guarded(v[i], rs);
    total += rs;
    assert_stats(pool, i + 1, 0, i + 1, i + 1, i + 1, 0, total);
  }
  for (int i = 0; i < 4; i++) pf(a, v[i], sizes[i]);
  assert_stats(pool, 0, 0, 4, 4, 0, 0, 0); /* unmapped, not cached */

  /* A fiber of another size comes from the pool all the same. */
  iof_fiber *f = iof_fiber_create(a, IOF_FIBER_STACK_MIN, noop_fiber, NULL);
  assert_non_null(f);
  assert_stats(pool, 1, 0, 5, 4, 1, 0, IOF_FIBER_STACK_MIN);
  assert_int_equal(iof_fiber_resume(f), 0);
  assert_int_equal(iof_fiber_status(f), 1);
  assert_int_equal(iof_fiber_destroy(f), 0);
  assert_stats(pool, 0, 0, 5, 4, 0, 0, 0);

  /* Size 0 is refused. */
  errno = 0;
  assert_null(pa(a, 0));
  assert_int_equal(errno, EINVAL);
  assert_int_equal(stats(pool).live, 0);
  assert_int_equal(iof_stack_pool_destroy(pool), 0);
}

/* ---- reuse -------------------------------------------------------------- */

static void test_reuse(void **state) {
  (void)state;
  iof_stack_pool_options o = {.stack_size = K64, .thread_cache = 4};
  iof_stack_pool *pool = iof_stack_pool_create(&o);
  assert_non_null(pool);
  iof_frame_allocator *a = iof_stack_pool_allocator(pool);
  void *p = pa(a, K64);
  assert_non_null(p);
  pf(a, p, K64);
  void *q = pa(a, K64);
  assert_ptr_equal(q, p);
  assert_stats(pool, 1, 0, 2, 1, 1, 0, K64);

  /* Three at once come back as the same three. */
  void *v[3], *w[3];
  v[0] = q;
  for (int i = 1; i < 3; i++) assert_non_null(v[i] = pa(a, K64));
  for (int i = 0; i < 3; i++) pf(a, v[i], K64);
  assert_stats(pool, 0, 3, 4, 3, 3, 0, 0);
  for (int i = 0; i < 3; i++) assert_non_null(w[i] = pa(a, K64));
  assert_true(same_set(v, w, 3));
  assert_stats(pool, 3, 0, 7, 3, 3, 0, 3 * K64);
  for (int i = 0; i < 3; i++) pf(a, w[i], K64);

  /* Fibers too: the second fiber gets the first one's frame. */
  iof_fiber *f1 = iof_fiber_create(a, K64, noop_fiber, NULL);
  assert_non_null(f1);
  assert_int_equal(iof_fiber_resume(f1), 0);
  assert_int_equal(iof_fiber_destroy(f1), 0);
  iof_fiber *f2 = iof_fiber_create(a, K64, noop_fiber, NULL);
  assert_ptr_equal(f2, f1); /* same frame, same control block place */
  assert_int_equal(iof_fiber_resume(f2), 0);
  assert_int_equal(iof_fiber_status(f2), 1);
  assert_int_equal(iof_fiber_destroy(f2), 0);
  assert_stats(pool, 0, 3, 9, 3, 3, 0, 0);
  assert_int_equal(iof_stack_pool_destroy(pool), 0);
}

/* ---- other threads ---------------------------------------------------- */

/* Frames allocated here and freed on a worker land in the worker's cache
 * and the depot; the counts stay exact, and what the worker leaves when it
 * ends comes back here without new mappings. */
static void test_cross_thread_free(void **state) {
  (void)state;
  iof_stack_pool_options o = {
      .stack_size = K64, .thread_cache = 4, .depot_max = 8};
  iof_stack_pool *pool = iof_stack_pool_create(&o);
  assert_non_null(pool);
  struct frames f = {.a = iof_stack_pool_allocator(pool), .size = K64};
  on(NULL, alloc_range, &f, 0, 10);
  assert_int_equal(f.failed, 0);
  void *orig[10];
  memcpy(orig, f.v, sizeof orig);
  assert_stats(pool, 10, 0, 10, 10, 10, 0, 10 * K64);

  struct worker w;
  worker_start(&w);
  on(&w, free_range, &f, 0, 10); /* 10 <= 4 + 8: all kept */
  assert_stats(pool, 0, 10, 10, 10, 10, 0, 0);
  worker_stop(&w); /* its cache joins the depot, which keeps 8 */
  assert_stats(pool, 0, 8, 10, 10, 8, 0, 0);

  /* Eight come back here without a new mapping, all of them ours. */
  on(NULL, alloc_range, &f, 0, 8);
  assert_int_equal(f.failed, 0);
  assert_stats(pool, 8, 0, 18, 10, 8, 0, 8 * K64);
  for (int i = 0; i < 8; i++) {
    bool found = false;
    for (int j = 0; j < 10; j++) found = found || f.v[i] == orig[j];
    assert_true(found);
  }
  on(NULL, alloc_range, &f, 8, 9); /* the ninth is mapped afresh */
  assert_stats(pool, 9, 0, 19, 10, 9, 0, 9 * K64);
  on(NULL, free_range, &f, 0, 9);
  assert_stats(pool, 0, -1, 19, 10, -1, 0, 0);
  assert_int_equal(iof_stack_pool_destroy(pool), 0);
}

/* The first thread to use a pool counts its frames without a locked
 * instruction; others count in their own cache and flush to a shared
 * counter every 32 frames. Frames freed by the other kind of thread, and
 * the first thread's exit (a later thread then counts that way), keep live
 * exact; peak sees the other threads' counts at their flushes only. */
static void test_owner_counting(void **state) {
  (void)state;
  iof_stack_pool_options o = {
      .stack_size = K64, .thread_cache = 16, .depot_max = 64};
  iof_stack_pool *pool = iof_stack_pool_create(&o);
  assert_non_null(pool);
  struct frames f = {.a = iof_stack_pool_allocator(pool), .size = K64};
  struct worker a, b;
  worker_start(&a);
  on(&a, alloc_range, &f, 0, 5); /* a: the pool's first thread */
  on(NULL, alloc_range, &f, 5, 8);
  assert_int_equal(f.failed, 0);
  /* main's 3 wait in its cache's count: peak has a's 5 only */
  assert_stats(pool, 8, 0, 8, 5, 8, 0, 8 * K64);
  on(&a, free_range, &f, 5, 8); /* main's frames, freed by a */
  assert_stats(pool, 5, 3, 8, 5, 8, 0, 5 * K64);
  on(NULL, free_range, &f, 0, 2); /* a's frames, freed here */
  assert_stats(pool, 3, 5, 8, 5, 8, 0, 3 * K64);
  worker_stop(&a);
  assert_stats(pool, 3, 5, 8, 5, 8, 0, 3 * K64);
  worker_start(&b); /* a new thread after the first one ended: the owner */
  on(&b, alloc_range, &f, 10, 20);
  assert_int_equal(f.failed, 0);
  assert_stats(pool, 13, -1, 18, 12, -1, 0, 13 * K64);
  on(NULL, free_range, &f, 10, 15);
  on(&b, free_range, &f, 2, 5);
  assert_stats(pool, 5, -1, 18, 12, -1, 0, 5 * K64);
  assert_int_equal(iof_stack_pool_destroy(pool), -EBUSY);
  on(&b, free_range, &f, 15, 20);
  assert_stats(pool, 0, -1, 18, 12, -1, 0, 0);
  worker_stop(&b);
  /* main's count stands at -4 (3 allocated, 7 freed): its 36th allocation
   * reaches +32 and flushes, and peak then sees all 36 live frames. */
  on(NULL, alloc_range, &f, 20, 60);
  assert_int_equal(f.failed, 0);
  assert_stats(pool, 40, -1, 58, 36, -1, 0, 40 * K64);
  on(NULL, free_range, &f, 20, 60);
  assert_stats(pool, 0, -1, 58, 36, -1, 0, 0);
  assert_int_equal(iof_stack_pool_destroy(pool), 0);
}

/* A thread's cache goes to the depot when it ends: with room in the depot
 * nothing is unmapped, and the pages go back to the OS. */
static void touch_all(void *arg) {
  struct frames *f = arg;
  for (int i = f->from; i < f->to; i++) memset(f->v[i], 0x77, f->size);
}

static size_t resident_pages(void *base, size_t size) {
  size_t n = size / page_size();
  unsigned char *vec = calloc(n, 1);
  assert_non_null(vec);
  assert_int_equal(mincore(base, size, vec), 0);
  size_t r = 0;
  for (size_t i = 0; i < n; i++) r += vec[i] & 1;
  free(vec);
  return r;
}

static void test_thread_exit_flush(void **state) {
  (void)state;
  iof_stack_pool_options o = {
      .stack_size = K64, .thread_cache = 4, .depot_max = 8};
  iof_stack_pool *pool = iof_stack_pool_create(&o);
  assert_non_null(pool);
  struct frames f = {.a = iof_stack_pool_allocator(pool), .size = K64};
  struct worker w;
  worker_start(&w);
  on(&w, alloc_range, &f, 0, 3);
  on(&w, touch_all, &f, 0, 3);
  void *orig[3];
  memcpy(orig, f.v, sizeof orig);
  for (int i = 0; i < 3; i++)
    assert_int_equal(resident_pages(orig[i], K64), K64 / page_size());
  on(&w, free_range, &f, 0, 3);
  assert_stats(pool, 0, 3, 3, 3, 3, 0, 0);
  worker_stop(&w);
  assert_stats(pool, 0, 3, 3, 3, 3, 0, 0); /* cached unchanged in total */
  /* In the depot: still mapped, but only the top page (the free-list
   * link) may stay resident. */
  for (int i = 0; i < 3; i++) assert_true(resident_pages(orig[i], K64) <= 1);

  /* The same three come back here, still with their guard pages. */
  on(NULL, alloc_range, &f, 0, 3);
  assert_int_equal(f.failed, 0);
  assert_true(same_set(orig, f.v, 3));
  for (int i = 0; i < 3; i++) assert_guarded(f.v[i], K64);
  assert_stats(pool, 3, 0, 6, 3, 3, 0, 3 * K64);
  on(NULL, free_range, &f, 0, 3);
  assert_int_equal(iof_stack_pool_destroy(pool), 0);
}

/* Stacks that cycle through the depot keep their pages (a steady load
 * makes no madvise per pass); stacks that sit there unused for a whole
 * interval (100 ms) give them back at the next put. */
static void test_depot_pages_decay(void **state) {
  (void)state;
  iof_stack_pool_options o = {
      .stack_size = K64, .thread_cache = 4, .depot_max = 64};
  iof_stack_pool *pool = iof_stack_pool_create(&o);
  assert_non_null(pool);
  struct frames f = {.a = iof_stack_pool_allocator(pool), .size = K64};
  struct worker w;
  worker_start(&w);
  on(&w, alloc_range, &f, 0, 32);
  assert_int_equal(f.failed, 0);
  on(&w, touch_all, &f, 0, 32);
  void *orig[32];
  memcpy(orig, f.v, sizeof orig);
  on(&w, free_range, &f, 0, 32); /* 4 stay in its cache, 28 in the depot */
  size_t full = 0;
  for (int i = 0; i < 32; i++)
    full += resident_pages(orig[i], K64) == K64 / page_size();
  assert_int_equal(full, 32);

  /* Six taken here and six given back (a spill): a put. The first put
   * after an interval starts the count; the stacks that the next interval's
   * takes do not reach are released at the put that ends it. */
  struct frames g = {.a = f.a, .size = K64};
  for (int round = 0; round < 2; round++) {
    usleep(150 * 1000);
    on(NULL, alloc_range, &g, 0, 6);
    assert_int_equal(g.failed, 0);
    on(NULL, free_range, &g, 0, 6);
  }
  size_t released = 0;
  for (int i = 0; i < 32; i++) released += resident_pages(orig[i], K64) <= 1;
  assert_true(released >= 16);
  assert_true(released <= 28); /* never the worker's own cache */
  assert_stats(pool, 0, 32, 44, 32, 32, 0, 0);
  worker_stop(&w);
  assert_int_equal(iof_stack_pool_destroy(pool), 0);
}

/* A thread's cache slots of pools destroyed by another thread are taken
 * back: after using four pools that main then destroys, the worker still
 * gets a lock-free cache for a fifth, which its exit flushes (pages given
 * back). Without that, its free would land in the depot's warm part and
 * keep its pages. */
static void test_stale_slots_reclaimed(void **state) {
  (void)state;
  iof_stack_pool_options o = {
      .stack_size = K64, .thread_cache = 4, .depot_max = 8};
  struct worker w;
  worker_start(&w);
  for (int i = 0; i < 4; i++) {
    iof_stack_pool *old = iof_stack_pool_create(&o);
    assert_non_null(old);
    struct frames f = {.a = iof_stack_pool_allocator(old), .size = K64};
    on(&w, alloc_range, &f, 0, 1);
    on(&w, free_range, &f, 0, 1);
    assert_int_equal(iof_stack_pool_destroy(old), 0);
  }
  iof_stack_pool *pool = iof_stack_pool_create(&o);
  assert_non_null(pool);
  struct frames f = {.a = iof_stack_pool_allocator(pool), .size = K64};
  on(&w, alloc_range, &f, 0, 1);
  on(&w, touch_all, &f, 0, 1);
  void *orig = f.v[0];
  on(&w, free_range, &f, 0, 1);
  worker_stop(&w);
  assert_true(resident_pages(orig, K64) <= 1);
  assert_int_equal(iof_stack_pool_destroy(pool), 0);
}

/* More pools than a thread has cache slots: all still work and count
 * exactly (the extra ones go through the depot). */
static void test_many_pools(void **state) {
  (void)state;
  enum { NPOOLS = 7 };
  iof_stack_pool *pools[NPOOLS];
  void *v[NPOOLS];
  iof_stack_pool_options o = {.stack_size = K64, .depot_max = 4};
  for (int i = 0; i < NPOOLS; i++) {
    assert_non_null(pools[i] = iof_stack_pool_create(&o));
    assert_non_null(v[i] = pa(iof_stack_pool_allocator(pools[i]), K64));
  }
  for (int i = 0; i < NPOOLS; i++) {
    iof_frame_allocator *a = iof_stack_pool_allocator(pools[i]);
    pf(a, v[i], K64);
    assert_stats(pools[i], 0, 1, 1, 1, 1, 0, 0);
    void *again = pa(a, K64);
    assert_ptr_equal(again, v[i]);
    pf(a, again, K64);
    assert_stats(pools[i], 0, 1, 2, 1, 1, 0, 0);
  }
  for (int i = 0; i < NPOOLS; i++)
    assert_int_equal(iof_stack_pool_destroy(pools[i]), 0);
}

/* Several threads allocate, pass frames to each other and free them. */
#define STRESS_THREADS 3
#define STRESS_ROUNDS 3000

struct stress {
  iof_frame_allocator *a;
  pthread_mutex_t m;
  void *slot[64]; /* frames handed between threads */
  int id;
  long allocs, frees, failures;
};

static struct stress stress;

static void *stress_thread(void *arg) {
  unsigned seed = (unsigned)(uintptr_t)arg * 2654435761u;
  void *mine[8] = {0};
  long allocs = 0, frees = 0, failures = 0;
  for (int r = 0; r < STRESS_ROUNDS; r++) {
    seed = seed * 1103515245u + 12345u;
    int k = (int)((seed >> 16) % 8);
    if (!mine[k]) {
      mine[k] = pa(stress.a, K64);
      if (mine[k]) {
        allocs++;
        *(volatile int *)mine[k] = r;
      } else {
        failures++;
      }
    } else {
      /* Swap with a shared slot: the frame may be freed by another
       * thread. */
      int s = (int)((seed >> 8) % 64);
      pthread_mutex_lock(&stress.m);
      void *t = stress.slot[s];
      stress.slot[s] = mine[k];
      pthread_mutex_unlock(&stress.m);
      mine[k] = NULL;
      if (t) {
        pf(stress.a, t, K64);
        frees++;
      }
    }
  }
  for (int k = 0; k < 8; k++)
    if (mine[k]) {
      pf(stress.a, mine[k], K64);
      frees++;
    }
  pthread_mutex_lock(&stress.m);
  stress.allocs += allocs;
  stress.frees += frees;
  stress.failures += failures;
  pthread_mutex_unlock(&stress.m);
  return NULL;
}

static void test_threads_stress(void **state) {
  (void)state;
  iof_stack_pool_options o = {
      .stack_size = K64, .thread_cache = 4, .depot_max = 16};
  iof_stack_pool *pool = iof_stack_pool_create(&o);
  assert_non_null(pool);
  memset(&stress, 0, sizeof stress);
  pthread_mutex_init(&stress.m, NULL);
  stress.a = iof_stack_pool_allocator(pool);
  pthread_t t[STRESS_THREADS];
  for (int i = 0; i < STRESS_THREADS; i++)
    assert_int_equal(
        pthread_create(&t[i], NULL, stress_thread, (void *)(uintptr_t)(i + 1)),
        0);
  for (int i = 0; i < STRESS_THREADS; i++)
    assert_int_equal(pthread_join(t[i], NULL), 0);
  long in_slots = 0;
  for (int s = 0; s < 64; s++) in_slots += stress.slot[s] != NULL;
  assert_int_equal(stress.failures, 0);
  assert_int_equal(stress.allocs, stress.frees + in_slots);
  struct iof_stack_pool_stats s = stats(pool);
  assert_int_equal(s.allocated, stress.allocs);
  assert_int_equal(s.live, in_slots);
  assert_int_equal(s.live_bytes, in_slots * K64);
  assert_int_equal(s.failed, 0);
  assert_int_equal(s.mapped, s.live + s.cached);
  /* Every worker has ended: only the depot holds stacks. */
  assert_true(s.cached <= 16);
  for (int i = 0; i < 64; i++)
    if (stress.slot[i]) pf(stress.a, stress.slot[i], K64);
  s = stats(pool);
  assert_int_equal(s.live, 0);
  assert_int_equal(s.mapped, s.cached);
  assert_int_equal(iof_stack_pool_destroy(pool), 0);
  pthread_mutex_destroy(&stress.m);
}

/* ---- destroy, NULLs, options -------------------------------------------- */

static void test_destroy_and_null(void **state) {
  (void)state;
  iof_stack_pool *pool = iof_stack_pool_create(NULL);
  assert_non_null(pool);
  iof_frame_allocator *a = iof_stack_pool_allocator(pool);
  assert_non_null(a);
  assert_ptr_equal(iof_stack_pool_allocator(pool), a);
  void *p = pa(a, K64);
  assert_non_null(p);
  assert_int_equal(iof_stack_pool_destroy(pool), -EBUSY);
  assert_stats(pool, 1, 0, 1, 1, 1, 0, K64); /* untouched */
  pf(a, p, K64);
  /* A live direct-path frame holds it too. */
  p = pa(a, 2 * K64);
  assert_int_equal(iof_stack_pool_destroy(pool), -EBUSY);
  pf(a, p, 2 * K64);
  /* A live fiber as well. */
  iof_fiber *f = iof_fiber_create(a, K64, noop_fiber, NULL);
  assert_non_null(f);
  assert_int_equal(iof_stack_pool_destroy(pool), -EBUSY);
  assert_int_equal(iof_fiber_destroy(f), 0);
  assert_int_equal(iof_stack_pool_destroy(pool), 0);

  assert_int_equal(iof_stack_pool_destroy(NULL), -EINVAL);
  struct iof_stack_pool_stats s;
  assert_int_equal(iof_stack_pool_stats(NULL, &s), -EINVAL);
  assert_null(iof_stack_pool_allocator(NULL));
  pool = iof_stack_pool_create(NULL);
  assert_non_null(pool);
  assert_int_equal(iof_stack_pool_stats(pool, NULL), -EINVAL);
  assert_int_equal(iof_stack_pool_destroy(pool), 0);
}

static void test_options(void **state) {
  (void)state;
  iof_stack_pool_options o = {.stack_size = IOF_FIBER_STACK_MAX + 1};
  errno = 0;
  assert_null(iof_stack_pool_create(&o));
  assert_int_equal(errno, EINVAL);
  o.stack_size = SIZE_MAX;
  errno = 0;
  assert_null(iof_stack_pool_create(&o));
  assert_int_equal(errno, EINVAL);
  o.stack_size = IOF_FIBER_STACK_MIN - 1;
  errno = 0;
  assert_null(iof_stack_pool_create(&o));
  assert_int_equal(errno, EINVAL);
  o = (iof_stack_pool_options){.thread_cache = SIZE_MAX};
  errno = 0;
  assert_null(iof_stack_pool_create(&o));
  assert_int_equal(errno, EINVAL);
  o = (iof_stack_pool_options){.depot_max = SIZE_MAX};
  errno = 0;
  assert_null(iof_stack_pool_create(&o));
  assert_int_equal(errno, EINVAL);

  /* Defaults: 64 KiB stacks are the pooled size. */
  iof_stack_pool *pool = iof_stack_pool_create(NULL);
  assert_non_null(pool);
  iof_frame_allocator *a = iof_stack_pool_allocator(pool);
  void *p = pa(a, IOF_FIBER_STACK_DEFAULT);
  assert_non_null(p);
  pf(a, p, IOF_FIBER_STACK_DEFAULT);
  assert_stats(pool, 0, 1, 1, 1, 1, 0, 0);
  assert_int_equal(iof_stack_pool_destroy(pool), 0);

  /* A size that is not a page multiple is rounded up, and fibers asking
   * for the same size get pooled stacks. */
  o = (iof_stack_pool_options){.stack_size = IOF_FIBER_STACK_MIN + 1};
  pool = iof_stack_pool_create(&o);
  assert_non_null(pool);
  a = iof_stack_pool_allocator(pool);
  iof_fiber *f = iof_fiber_create(a, IOF_FIBER_STACK_MIN + 1, noop_fiber, 0);
  assert_non_null(f);
  size_t rounded = IOF_FIBER_STACK_MIN + page_size();
  assert_stats(pool, 1, 0, 1, 1, 1, 0, rounded);
  assert_int_equal(iof_fiber_resume(f), 0);
  assert_int_equal(iof_fiber_destroy(f), 0);
  assert_stats(pool, 0, 1, 1, 1, 1, 0, 0);
  p = pa(a, rounded);
  assert_non_null(p);
  assert_stats(pool, 1, 0, 2, 1, 1, 0, rounded); /* the cached one */
  pf(a, p, rounded);
  assert_int_equal(iof_stack_pool_destroy(pool), 0);
}

/* ---- guard page ---------------------------------------------------------- */

/* A write just below the stack kills a child with SIGSEGV. The child
 * resets SIGSEGV first: the library's overflow handler (and ASan's) would
 * otherwise catch it, and what this checks is the page protection. */
static int child_write_below(void *base) {
  pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = SIG_DFL;
    sigaction(SIGSEGV, &sa, NULL);
    *((volatile char *)base - 1) = 1;
    _exit(0);
  }
  int st = 0;
  assert_int_equal(waitpid(pid, &st, 0), pid);
  return st;
}

static void test_guard_page(void **state) {
  (void)state;
  iof_stack_pool_options o = {.stack_size = K64, .thread_cache = 2};
  iof_stack_pool *pool = iof_stack_pool_create(&o);
  assert_non_null(pool);
  iof_frame_allocator *a = iof_stack_pool_allocator(pool);
  void *p = pa(a, K64);
  assert_non_null(p);
  assert_int_equal((uintptr_t)p % page_size(), 0);
  memset(p, 0, K64); /* the whole stack is usable */
  assert_guarded(p, K64);
  int st = child_write_below(p);
  assert_true(WIFSIGNALED(st));
  assert_int_equal(WTERMSIG(st), SIGSEGV);
  /* Writing inside the stack is fine in the same child setup. */
  st = child_write_below((char *)p + page_size());
  assert_true(WIFEXITED(st));
  assert_int_equal(WEXITSTATUS(st), 0);
  /* Recycled stacks keep theirs. */
  pf(a, p, K64);
  void *q = pa(a, K64);
  assert_ptr_equal(q, p);
  assert_guarded(q, K64);
  pf(a, q, K64);
  assert_int_equal(iof_stack_pool_destroy(pool), 0);
}

int main(int argc, char **argv) {
  /* An optional argument selects tests by name pattern. */
  if (argc > 1) cmocka_set_test_filter(argv[1]);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_stats_mixed),
      cmocka_unit_test(test_budget),
      cmocka_unit_test(test_direct_path),
      cmocka_unit_test(test_reuse),
      cmocka_unit_test(test_cross_thread_free),
      cmocka_unit_test(test_owner_counting),
      cmocka_unit_test(test_thread_exit_flush),
      cmocka_unit_test(test_depot_pages_decay),
      cmocka_unit_test(test_many_pools),
      cmocka_unit_test(test_stale_slots_reclaimed),
      cmocka_unit_test(test_threads_stress),
      cmocka_unit_test(test_destroy_and_null),
      cmocka_unit_test(test_options),
      cmocka_unit_test(test_guard_page),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
