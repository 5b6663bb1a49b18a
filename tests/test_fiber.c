/* Fibers: switching, symmetric transfer, suspend hooks, migration between
 * threads, nesting, names and every documented error code.
 *
 * IOF_TEST_THREADED: the migration and hook tests use pthreads. */
#include "test_support.h"

#include <iofiber/fiber.h>
#include <iofiber/frame_allocator.h>

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#if defined(__has_include)
#if __has_include(<valgrind/valgrind.h>)
#include <valgrind/valgrind.h>
#define ON_VALGRIND() (RUNNING_ON_VALGRIND != 0)
#endif
#endif
#ifndef ON_VALGRIND
#define ON_VALGRIND() 0
#endif

#if defined(__SANITIZE_THREAD__)
#define UNDER_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define UNDER_TSAN 1
#endif
#endif
#ifndef UNDER_TSAN
#define UNDER_TSAN 0
#endif

/* Iteration counts: full size natively and under the sanitizers; Valgrind
 * runs every switch through its JIT, a few times slower. */
static long scaled(long n) {
  return ON_VALGRIND() ? n / 4 : n;
}

/* Fiber counts. Under TSan every fiber is also a TSan thread (its own
 * trace mappings, about 400 us to create and destroy, and a few thousand
 * at most alive at once), so fewer; still far beyond what any leak per
 * fiber or growth per transfer could hide in. */
static long fibers_scaled(long n, long tsan_n) {
  if (UNDER_TSAN) return tsan_n;
  return scaled(n);
}

/* cmocka's asserts longjmp; never take one from a fiber stack. Fibers record
 * failures here and the test asserts the count on the main stack. */
static atomic_int fiber_failures;

static void fiber_fail(const char *file, int line, const char *expr) {
  if (atomic_fetch_add(&fiber_failures, 1) < 20)
    fprintf(stderr, "%s:%d: check failed in fiber: %s\n", file, line, expr);
}

#define FCHECK(c)                                                              \
  do {                                                                         \
    if (!(c)) fiber_fail(__FILE__, __LINE__, #c);                              \
  } while (0)

static int reset_failures(void **state) {
  (void)state;
  atomic_store(&fiber_failures, 0);
  return 0;
}

#define assert_no_fiber_failures()                                             \
  assert_int_equal(atomic_load(&fiber_failures), 0)

/* pthread_self() is declared const, so a compiler may reuse its value across
 * a call that switches stacks; a fiber that migrated would see the old
 * thread. Read it (and the kernel tid) through opaque calls. */
static __attribute__((noinline)) pthread_t self_thread(void) {
  pthread_t t = pthread_self();
  __asm__ volatile("" : : : "memory");
  return t;
}

static __attribute__((noinline)) long self_tid(void) {
  return syscall(SYS_gettid);
}

/* Address of a fresh local in the caller's frame area. */
static __attribute__((noinline)) uintptr_t stack_mark(void) {
  volatile char c = 0;
  uintptr_t p = (uintptr_t)&c;
  __asm__ volatile("" : : "r"(p) : "memory");
  return p;
}

/* ---- ping-pong --------------------------------------------------------- */

struct pingpong {
  long rounds;
  long counter; /* main writes even values, the fiber odd ones */
  iof_fiber *self;
};

static int pingpong_fiber(void *arg) {
  struct pingpong *p = arg;
  for (long i = 0; i < p->rounds; i++) {
    if (p->counter != 2 * i) {
      FCHECK(p->counter == 2 * i);
      return -1;
    }
    if ((i & 0xffff) == 0) FCHECK(iof_fiber_current() == p->self);
    p->counter = 2 * i + 1;
    if (iof_fiber_suspend() != 0) {
      FCHECK(!"suspend failed");
      return -1;
    }
  }
  FCHECK(p->counter == 2 * p->rounds);
  return 42;
}

static void test_pingpong(void **state) {
  (void)state;
  struct pingpong p = {.rounds = scaled(1000000)};
  iof_fiber *f =
      iof_fiber_create(NULL, IOF_FIBER_STACK_DEFAULT, pingpong_fiber, &p);
  assert_non_null(f);
  p.self = f;
  for (long i = 0; i < p.rounds; i++) {
    if (iof_fiber_resume(f) != 0 || p.counter != 2 * i + 1 ||
        iof_fiber_done(f)) {
      fail_msg("round %ld: counter %ld done %d", i, p.counter,
               iof_fiber_done(f));
    }
    p.counter = 2 * i + 2;
  }
  assert_null(iof_fiber_current());
  assert_int_equal(iof_fiber_status(f), -EAGAIN);
  assert_int_equal(iof_fiber_resume(f), 0);
  assert_true(iof_fiber_done(f));
  assert_int_equal(iof_fiber_status(f), 42);
  assert_int_equal(iof_fiber_destroy(f), 0);
  assert_no_fiber_failures();
}

/* ---- many live fibers -------------------------------------------------- */

struct idle {
  iof_fiber *self;
  int stage;
  int id;
};

static int idle_fiber(void *arg) {
  struct idle *s = arg;
  FCHECK(iof_fiber_current() == s->self);
  FCHECK(s->stage == 0);
  s->stage = 1;
  FCHECK(iof_fiber_suspend() == 0);
  FCHECK(s->stage == 1);
  s->stage = 2;
  return s->id;
}

#define LIVE_FIBERS 10000
#define LIVE_FIBERS_TSAN 1000

static void test_many_live_fibers(void **state) {
  (void)state;
  const size_t page = (size_t)sysconf(_SC_PAGESIZE);
  const int n = (int)fibers_scaled(LIVE_FIBERS, LIVE_FIBERS_TSAN);
  /* A fresh pool: no stack has been touched before, so RSS growth is what
   * idle fibers really cost. */
  iof_stack_pool_options o = {.stack_size = IOF_FIBER_STACK_DEFAULT};
  iof_stack_pool *pool = iof_stack_pool_create(&o);
  assert_non_null(pool);
  iof_frame_allocator *alloc = iof_stack_pool_allocator(pool);
  iof_fiber **fs = calloc((size_t)n, sizeof *fs);
  struct idle *st = calloc((size_t)n, sizeof *st);
  assert_non_null(fs);
  assert_non_null(st);
  memset(fs, 0, (size_t)n * sizeof *fs); /* fault the arrays in now */
  memset(st, 0, (size_t)n * sizeof *st);

  size_t rss0 = iof_test_rss_bytes();
  for (int i = 0; i < n; i++) {
    st[i].id = i;
    fs[i] =
        iof_fiber_create(alloc, IOF_FIBER_STACK_DEFAULT, idle_fiber, &st[i]);
    if (!fs[i]) fail_msg("create %d failed: errno %d", i, errno);
    st[i].self = fs[i];
    if (iof_fiber_resume(fs[i]) != 0 || st[i].stage != 1)
      fail_msg("fiber %d did not suspend", i);
  }
  size_t rss1 = iof_test_rss_bytes();

  struct iof_stack_pool_stats s;
  assert_int_equal(iof_stack_pool_stats(pool, &s), 0);
  assert_int_equal(s.live, n);
  assert_int_equal(s.allocated, n);
  assert_int_equal(s.peak, n);
  assert_int_equal(s.mapped, n);
  assert_int_equal(s.cached, 0);
  assert_int_equal(s.live_bytes, (size_t)n * IOF_FIBER_STACK_DEFAULT);

  double per_fiber = (double)(rss1 > rss0 ? rss1 - rss0 : 0) / n / page;
  print_message("idle fiber: %.2f resident pages each\n", per_fiber);
  /* Under Valgrind RSS is the tool's, not ours; under TSan each fiber is
   * a TSan thread whose state alone is ~200 pages. ASan's shadow of a touched
   * stack page is 1/8 of a page and stays within the bound. */
  if (!ON_VALGRIND() && !UNDER_TSAN) assert_true(per_fiber < 3.0);

  for (int i = 0; i < n; i++) {
    if (iof_fiber_resume(fs[i]) != 0 || !iof_fiber_done(fs[i]) ||
        iof_fiber_status(fs[i]) != i || st[i].stage != 2)
      fail_msg("fiber %d did not finish", i);
    if (iof_fiber_destroy(fs[i]) != 0) fail_msg("destroy %d", i);
  }
  assert_int_equal(iof_stack_pool_stats(pool, &s), 0);
  assert_int_equal(s.live, 0);
  assert_int_equal(s.live_bytes, 0);
  assert_int_equal(s.mapped, s.cached);
  assert_true(s.cached > 0);
  assert_int_equal(iof_stack_pool_destroy(pool), 0);
  free(fs);
  free(st);
  assert_no_fiber_failures();
}

/* ---- symmetric transfer ------------------------------------------------ */

#define CHAIN_LEN 100000
#define SMALL_STACK IOF_FIBER_STACK_MIN

struct chain {
  iof_frame_allocator *alloc;
  long n;
  long visited;
  iof_fiber *prev; /* the fiber that transferred to the running one */
  iof_fiber *last; /* the last one created */
  uintptr_t depth_min, depth_max; /* control block to local, per fiber */
  int returned_to_driver;
};

static struct chain chain;

static __attribute__((noinline)) void note_depth(void) {
  volatile char local = 0;
  uintptr_t d = (uintptr_t)iof_fiber_current() - (uintptr_t)&local;
  if (d < chain.depth_min) chain.depth_min = d;
  if (d > chain.depth_max) chain.depth_max = d;
}

static int chain_fiber(void *arg) {
  long i = (long)(intptr_t)arg;
  note_depth();
  FCHECK(chain.visited == i);
  chain.visited = i + 1;
  /* Finish and free the previous fiber, which is suspended inside its
   * transfer to us: 100,000 guarded stacks at once would exceed the
   * kernel's mapping limit, and this keeps the pool at three live frames. */
  if (i > 0) {
    iof_fiber *prev = chain.prev;
    FCHECK(!iof_fiber_done(prev));
    FCHECK(iof_fiber_destroy(prev) == -EBUSY);
    FCHECK(iof_fiber_resume(prev) == 0);
    FCHECK(iof_fiber_done(prev));
    FCHECK(iof_fiber_status(prev) == (int)(i - 1));
    FCHECK(iof_fiber_destroy(prev) == 0);
    chain.prev = NULL;
  }
  if (i + 1 == chain.n) return (int)i; /* ends in the driver's resume */
  iof_fiber *next = iof_fiber_create(chain.alloc, SMALL_STACK, chain_fiber,
                                     (void *)(intptr_t)(i + 1));
  FCHECK(next != NULL);
  if (!next) return -1;
  chain.prev = iof_fiber_current();
  chain.last = next;
  FCHECK(iof_fiber_transfer(next) == 0);
  /* Resumed by the next fiber, to end. */
  note_depth();
  return (int)i;
}

static int chain_driver(void *arg) {
  (void)arg;
  uintptr_t before = stack_mark();
  iof_fiber *first = iof_fiber_create(chain.alloc, SMALL_STACK, chain_fiber,
                                      (void *)(intptr_t)0);
  FCHECK(first != NULL);
  if (!first) return -1;
  chain.last = first;
  /* The whole chain runs below this one resume, which must return once,
   * after the last fiber ended: transfers hand over the resumer. */
  FCHECK(iof_fiber_resume(first) == 0);
  chain.returned_to_driver++;
  FCHECK(chain.visited == chain.n);
  FCHECK(stack_mark() == before);
  FCHECK(chain.prev == NULL);
  iof_fiber *last = chain.last;
  FCHECK(iof_fiber_done(last));
  FCHECK(iof_fiber_status(last) == (int)(chain.n - 1));
  FCHECK(iof_fiber_destroy(last) == 0);
  return 0;
}

static void test_transfer_chain(void **state) {
  (void)state;
  /* 16 KiB stacks for every fiber, the driver included: any per-transfer
   * growth of a stack, the resumer's or a fiber's, hits a guard page. */
  iof_stack_pool_options o = {.stack_size = SMALL_STACK};
  iof_stack_pool *pool = iof_stack_pool_create(&o);
  assert_non_null(pool);
  memset(&chain, 0, sizeof chain);
  chain.alloc = iof_stack_pool_allocator(pool);
  chain.n = fibers_scaled(CHAIN_LEN, 5000);
  chain.depth_min = UINTPTR_MAX;
  iof_fiber *driver =
      iof_fiber_create(chain.alloc, SMALL_STACK, chain_driver, NULL);
  assert_non_null(driver);
  assert_int_equal(iof_fiber_resume(driver), 0);
  assert_true(iof_fiber_done(driver));
  assert_int_equal(iof_fiber_status(driver), 0);
  assert_int_equal(iof_fiber_destroy(driver), 0);
  assert_no_fiber_failures();
  assert_int_equal(chain.visited, chain.n);
  assert_int_equal(chain.returned_to_driver, 1);
  /* Every fiber, before and after its transfer, used the same depth. */
  assert_int_equal(chain.depth_min, chain.depth_max);
  assert_true(chain.depth_max < SMALL_STACK);

  struct iof_stack_pool_stats s;
  assert_int_equal(iof_stack_pool_stats(pool, &s), 0);
  assert_int_equal(s.live, 0);
  assert_int_equal(s.allocated, chain.n + 1);
  assert_int_equal(s.peak, 3); /* driver, previous or next, current */
  assert_int_equal(iof_stack_pool_destroy(pool), 0);
}

/* Two fibers handing over to each other: each stack stays at one depth. */
struct duo {
  iof_fiber *a, *b;
  long rounds;
  long counter;
  uintptr_t amin, amax, bmin, bmax;
};

static int duo_a(void *arg) {
  struct duo *d = arg;
  for (long i = 0; i < d->rounds; i++) {
    uintptr_t m = stack_mark();
    if (m < d->amin) d->amin = m;
    if (m > d->amax) d->amax = m;
    if (d->counter != 2 * i) {
      FCHECK(d->counter == 2 * i);
      return -1;
    }
    d->counter++;
    if (iof_fiber_transfer(d->b) != 0) {
      FCHECK(!"transfer to b");
      return -1;
    }
  }
  return 1;
}

static int duo_b(void *arg) {
  struct duo *d = arg;
  for (long i = 0; i < d->rounds; i++) {
    uintptr_t m = stack_mark();
    if (m < d->bmin) d->bmin = m;
    if (m > d->bmax) d->bmax = m;
    if (d->counter != 2 * i + 1) {
      FCHECK(d->counter == 2 * i + 1);
      return -1;
    }
    d->counter++;
    if (iof_fiber_transfer(d->a) != 0) {
      FCHECK(!"transfer to a");
      return -1;
    }
  }
  return 2;
}

static void test_transfer_pingpong(void **state) {
  (void)state;
  struct duo d = {
      .rounds = scaled(500000), .amin = UINTPTR_MAX, .bmin = UINTPTR_MAX};
  d.a = iof_fiber_create(NULL, SMALL_STACK, duo_a, &d);
  d.b = iof_fiber_create(NULL, SMALL_STACK, duo_b, &d);
  assert_non_null(d.a);
  assert_non_null(d.b);
  /* One resume runs all 2 * rounds transfers; a ends in it. */
  assert_int_equal(iof_fiber_resume(d.a), 0);
  assert_true(iof_fiber_done(d.a));
  assert_int_equal(iof_fiber_status(d.a), 1);
  assert_false(iof_fiber_done(d.b)); /* inside its last transfer */
  assert_int_equal(d.counter, 2 * d.rounds);
  assert_int_equal(iof_fiber_resume(d.b), 0);
  assert_int_equal(iof_fiber_status(d.b), 2);
  assert_no_fiber_failures();
  assert_int_equal(d.amin, d.amax);
  assert_int_equal(d.bmin, d.bmax);
  assert_int_equal(iof_fiber_destroy(d.a), 0);
  assert_int_equal(iof_fiber_destroy(d.b), 0);
}

/* ---- suspend_with ------------------------------------------------------ */

struct hookt {
  iof_fiber *f, *g;
  int events[8];
  int nevents;
  uintptr_t main_mark;
  int hook_current_null;
  int hook_status;
  int hook_ok_stack;
  iof_fiber *hook_self;
  int g_current_ok;
};

static void ev(struct hookt *h, int e) {
  if (h->nevents < 8) h->events[h->nevents] = e;
  h->nevents++;
}

enum { EV_F_BEFORE = 1, EV_HOOK, EV_F_AFTER, EV_G_RUN, EV_G_END };

static iof_fiber *hook_return_null(iof_fiber *self, void *arg) {
  struct hookt *h = arg;
  uintptr_t m = stack_mark();
  ev(h, EV_HOOK);
  h->hook_self = self;
  h->hook_current_null = iof_fiber_current() == NULL;
  h->hook_status = iof_fiber_status(self);
  /* On the resumer's (main's) stack, below the test's frame, and not on
   * the fiber's stack, which lies below the fiber's control block. */
  uintptr_t cb = (uintptr_t)self;
  h->hook_ok_stack = m < h->main_mark && h->main_mark - m < 65536 &&
                     !(m < cb && cb - m < IOF_FIBER_STACK_DEFAULT);
  return NULL;
}

static int hook_fiber(void *arg) {
  struct hookt *h = arg;
  ev(h, EV_F_BEFORE);
  FCHECK(iof_fiber_suspend_with(hook_return_null, h) == 0);
  ev(h, EV_F_AFTER);
  return 5;
}

static void test_suspend_with_null(void **state) {
  (void)state;
  struct hookt h = {0};
  h.main_mark = stack_mark();
  h.f = iof_fiber_create(NULL, IOF_FIBER_STACK_DEFAULT, hook_fiber, &h);
  assert_non_null(h.f);
  assert_int_equal(iof_fiber_resume(h.f), 0);
  /* The hook ran after the fiber suspended, then the resumer continued. */
  assert_int_equal(h.nevents, 2);
  assert_int_equal(h.events[0], EV_F_BEFORE);
  assert_int_equal(h.events[1], EV_HOOK);
  assert_ptr_equal(h.hook_self, h.f);
  assert_true(h.hook_current_null);
  assert_int_equal(h.hook_status, -EAGAIN);
  assert_true(h.hook_ok_stack);
  assert_false(iof_fiber_done(h.f));
  assert_int_equal(iof_fiber_destroy(h.f), -EBUSY);
  assert_int_equal(iof_fiber_resume(h.f), 0);
  assert_int_equal(h.nevents, 3);
  assert_int_equal(h.events[2], EV_F_AFTER);
  assert_int_equal(iof_fiber_status(h.f), 5);
  assert_int_equal(iof_fiber_destroy(h.f), 0);
  assert_no_fiber_failures();
}

/* Returning self resumes at once; a million such awaits neither return to
 * the resumer nor grow either stack (a million awaits in 64 KiB). */
struct selfloop {
  long calls;
  uintptr_t hmin, hmax, fmin, fmax;
};

static iof_fiber *hook_return_self(iof_fiber *self, void *arg) {
  struct selfloop *s = arg;
  uintptr_t m = stack_mark();
  if (m < s->hmin) s->hmin = m;
  if (m > s->hmax) s->hmax = m;
  s->calls++;
  return self;
}

static int selfloop_fiber(void *arg) {
  struct selfloop *s = arg;
  for (long i = 0; i < scaled(1000000); i++) {
    uintptr_t m = stack_mark();
    if (m < s->fmin) s->fmin = m;
    if (m > s->fmax) s->fmax = m;
    if (iof_fiber_suspend_with(hook_return_self, s) != 0) {
      FCHECK(!"suspend_with");
      return -1;
    }
    if (s->calls != i + 1) {
      FCHECK(s->calls == i + 1);
      return -1;
    }
  }
  return 9;
}

static void test_suspend_with_self(void **state) {
  (void)state;
  struct selfloop s = {.hmin = UINTPTR_MAX, .fmin = UINTPTR_MAX};
  iof_fiber *f =
      iof_fiber_create(NULL, IOF_FIBER_STACK_DEFAULT, selfloop_fiber, &s);
  assert_non_null(f);
  /* One resume: the fiber never came back here until it ended. */
  assert_int_equal(iof_fiber_resume(f), 0);
  assert_true(iof_fiber_done(f));
  assert_int_equal(iof_fiber_status(f), 9);
  assert_int_equal(s.calls, scaled(1000000));
  assert_int_equal(s.hmin, s.hmax);
  assert_int_equal(s.fmin, s.fmax);
  assert_int_equal(iof_fiber_destroy(f), 0);
  assert_no_fiber_failures();
}

static iof_fiber *hook_return_other(iof_fiber *self, void *arg) {
  struct hookt *h = arg;
  (void)self;
  ev(h, EV_HOOK);
  return h->g;
}

static int other_g(void *arg) {
  struct hookt *h = arg;
  ev(h, EV_G_RUN);
  h->g_current_ok = iof_fiber_current() == h->g;
  /* Suspending goes to the resumer f had, not to f. */
  FCHECK(iof_fiber_suspend() == 0);
  ev(h, EV_G_END);
  return 11;
}

static int other_f(void *arg) {
  struct hookt *h = arg;
  ev(h, EV_F_BEFORE);
  FCHECK(iof_fiber_suspend_with(hook_return_other, h) == 0);
  ev(h, EV_F_AFTER);
  return 10;
}

static void test_suspend_with_other(void **state) {
  (void)state;
  struct hookt h = {0};
  h.f = iof_fiber_create(NULL, IOF_FIBER_STACK_DEFAULT, other_f, &h);
  h.g = iof_fiber_create(NULL, IOF_FIBER_STACK_DEFAULT, other_g, &h);
  assert_non_null(h.f);
  assert_non_null(h.g);
  assert_int_equal(iof_fiber_resume(h.f), 0);
  assert_int_equal(h.nevents, 3);
  assert_int_equal(h.events[0], EV_F_BEFORE);
  assert_int_equal(h.events[1], EV_HOOK);
  assert_int_equal(h.events[2], EV_G_RUN);
  assert_true(h.g_current_ok);
  assert_false(iof_fiber_done(h.f));
  assert_false(iof_fiber_done(h.g));
  assert_int_equal(iof_fiber_resume(h.g), 0);
  assert_int_equal(iof_fiber_status(h.g), 11);
  assert_int_equal(iof_fiber_resume(h.f), 0);
  assert_int_equal(iof_fiber_status(h.f), 10);
  assert_int_equal(h.nevents, 5);
  assert_int_equal(h.events[3], EV_G_END);
  assert_int_equal(h.events[4], EV_F_AFTER);
  assert_int_equal(iof_fiber_destroy(h.f), 0);
  assert_int_equal(iof_fiber_destroy(h.g), 0);
  assert_no_fiber_failures();
}

/* The hook publishes the fiber to another thread, which runs it to its end
 * and frees it while the hook is still running on this thread's stack: the
 * switch must not touch the fiber after the hook started. */
struct publish {
  pthread_mutex_t m;
  pthread_cond_t c;
  iof_fiber *f;
  int finished;
  long tid_before, tid_after, worker_tid;
  int status;
};

static void *publish_worker(void *arg) {
  struct publish *p = arg;
  pthread_mutex_lock(&p->m);
  while (!p->f) pthread_cond_wait(&p->c, &p->m);
  iof_fiber *f = p->f;
  pthread_mutex_unlock(&p->m);
  p->worker_tid = self_tid();
  FCHECK(iof_fiber_resume(f) == 0);
  FCHECK(iof_fiber_done(f));
  int st = iof_fiber_status(f);
  FCHECK(iof_fiber_destroy(f) == 0);
  pthread_mutex_lock(&p->m);
  p->status = st;
  p->finished = 1;
  pthread_cond_broadcast(&p->c);
  pthread_mutex_unlock(&p->m);
  return NULL;
}

static iof_fiber *hook_publish(iof_fiber *self, void *arg) {
  struct publish *p = arg;
  pthread_mutex_lock(&p->m);
  p->f = self;
  pthread_cond_broadcast(&p->c);
  while (!p->finished) pthread_cond_wait(&p->c, &p->m);
  pthread_mutex_unlock(&p->m);
  return NULL;
}

static int publish_fiber(void *arg) {
  struct publish *p = arg;
  p->tid_before = self_tid();
  FCHECK(iof_fiber_suspend_with(hook_publish, p) == 0);
  p->tid_after = self_tid();
  return 77;
}

static void test_suspend_with_publish(void **state) {
  (void)state;
  struct publish p = {.m = PTHREAD_MUTEX_INITIALIZER,
                      .c = PTHREAD_COND_INITIALIZER};
  iof_fiber *f =
      iof_fiber_create(NULL, IOF_FIBER_STACK_DEFAULT, publish_fiber, &p);
  assert_non_null(f);
  pthread_t t;
  assert_int_equal(pthread_create(&t, NULL, publish_worker, &p), 0);
  assert_int_equal(iof_fiber_resume(f), 0); /* f is freed by now */
  assert_int_equal(pthread_join(t, NULL), 0);
  assert_true(p.finished);
  assert_int_equal(p.status, 77);
  assert_int_equal(p.tid_before, self_tid());
  assert_int_equal(p.tid_after, p.worker_tid);
  assert_int_not_equal(p.tid_before, p.tid_after);
  assert_null(iof_fiber_current());
  assert_no_fiber_failures();
}

/* ---- migration: created and first run on A, finished on B -------------- */

struct migrate {
  iof_frame_allocator *alloc;
  iof_fiber *f;
  pthread_barrier_t started, finished;
  pthread_t ta, tb;
  pthread_t seen_before, seen_after;
  long tid_before, tid_after, tid_a, tid_b;
  int current_before, current_after;
  int status_on_b, destroy_on_b;
};

static int migrate_fiber(void *arg) {
  struct migrate *m = arg;
  m->seen_before = self_thread();
  m->tid_before = self_tid();
  m->current_before = iof_fiber_current() == m->f;
  FCHECK(iof_fiber_suspend() == 0);
  m->seen_after = self_thread();
  m->tid_after = self_tid();
  m->current_after = iof_fiber_current() == m->f;
  return 3;
}

static void *migrate_a(void *arg) {
  struct migrate *m = arg;
  m->tid_a = self_tid();
  m->f = iof_fiber_create(m->alloc, IOF_FIBER_STACK_DEFAULT, migrate_fiber, m);
  FCHECK(m->f != NULL);
  if (m->f) FCHECK(iof_fiber_resume(m->f) == 0);
  FCHECK(iof_fiber_current() == NULL);
  pthread_barrier_wait(&m->started);
  /* Stay alive until B is done, so the two thread ids are distinct. */
  pthread_barrier_wait(&m->finished);
  return NULL;
}

static void *migrate_b(void *arg) {
  struct migrate *m = arg;
  pthread_barrier_wait(&m->started);
  m->tid_b = self_tid();
  if (m->f) {
    FCHECK(iof_fiber_resume(m->f) == 0);
    m->status_on_b = iof_fiber_status(m->f);
    m->destroy_on_b = iof_fiber_destroy(m->f);
  }
  FCHECK(iof_fiber_current() == NULL);
  pthread_barrier_wait(&m->finished);
  return NULL;
}

static void test_migrate_threads(void **state) {
  (void)state;
  struct migrate m;
  memset(&m, 0, sizeof m);
  m.alloc = iof_tracking_allocator_create(NULL);
  assert_non_null(m.alloc);
  pthread_barrier_init(&m.started, NULL, 2);
  pthread_barrier_init(&m.finished, NULL, 2);
  assert_int_equal(pthread_create(&m.ta, NULL, migrate_a, &m), 0);
  assert_int_equal(pthread_create(&m.tb, NULL, migrate_b, &m), 0);
  assert_int_equal(pthread_join(m.ta, NULL), 0);
  assert_int_equal(pthread_join(m.tb, NULL), 0);
  assert_no_fiber_failures();
  assert_true(m.current_before);
  assert_true(m.current_after);
  assert_true(pthread_equal(m.seen_before, m.ta));
  assert_true(pthread_equal(m.seen_after, m.tb));
  assert_false(pthread_equal(m.seen_before, m.seen_after));
  assert_int_equal(m.tid_before, m.tid_a);
  assert_int_equal(m.tid_after, m.tid_b);
  assert_int_not_equal(m.tid_a, m.tid_b);
  assert_int_equal(m.status_on_b, 3);
  assert_int_equal(m.destroy_on_b, 0);
  /* The frame allocated on A was given back on B. */
  iof_tracking_stats ts;
  assert_int_equal(iof_tracking_allocator_stats(m.alloc, &ts), 0);
  assert_int_equal(ts.total, 1);
  assert_int_equal(ts.freed, 1);
  assert_int_equal(ts.live, 0);
  assert_int_equal(iof_tracking_allocator_destroy(m.alloc), 0);
  pthread_barrier_destroy(&m.started);
  pthread_barrier_destroy(&m.finished);
}

/* ---- nesting ----------------------------------------------------------- */

struct nest {
  iof_fiber *outer, *inner;
  int trace[16];
  int n;
  int inner_current_ok, outer_current_ok_after;
  int inner_resume_outer, inner_transfer_outer, inner_destroy_outer;
};

static void tr(struct nest *n, int v) {
  if (n->n < 16) n->trace[n->n] = v;
  n->n++;
}

static int nest_inner(void *arg) {
  struct nest *n = arg;
  tr(n, 2);
  n->inner_current_ok = iof_fiber_current() == n->inner;
  /* The outer fiber is running (blocked in resume): not resumable. */
  n->inner_resume_outer = iof_fiber_resume(n->outer);
  n->inner_transfer_outer = iof_fiber_transfer(n->outer);
  n->inner_destroy_outer = iof_fiber_destroy(n->outer);
  FCHECK(iof_fiber_suspend() == 0); /* back to outer, not to main */
  tr(n, 4);
  return 20;
}

static int nest_outer(void *arg) {
  struct nest *n = arg;
  tr(n, 1);
  n->inner = iof_fiber_create(NULL, IOF_FIBER_STACK_DEFAULT, nest_inner, n);
  FCHECK(n->inner != NULL);
  if (!n->inner) return -1;
  FCHECK(iof_fiber_resume(n->inner) == 0);
  tr(n, 3);
  FCHECK(iof_fiber_current() == n->outer);
  FCHECK(iof_fiber_suspend() == 0); /* to main, with inner suspended */
  FCHECK(iof_fiber_resume(n->inner) == 0);
  tr(n, 5);
  FCHECK(iof_fiber_done(n->inner));
  FCHECK(iof_fiber_status(n->inner) == 20);
  FCHECK(iof_fiber_destroy(n->inner) == 0);
  n->outer_current_ok_after = iof_fiber_current() == n->outer;
  return 21;
}

static void test_nested(void **state) {
  (void)state;
  struct nest n = {0};
  n.outer = iof_fiber_create(NULL, IOF_FIBER_STACK_DEFAULT, nest_outer, &n);
  assert_non_null(n.outer);
  assert_int_equal(iof_fiber_resume(n.outer), 0);
  assert_int_equal(n.n, 3);
  assert_null(iof_fiber_current());
  assert_int_equal(iof_fiber_resume(n.outer), 0);
  assert_int_equal(n.n, 5);
  for (int i = 0; i < 5; i++) assert_int_equal(n.trace[i], i + 1);
  assert_true(n.inner_current_ok);
  assert_true(n.outer_current_ok_after);
  assert_int_equal(n.inner_resume_outer, -EBUSY);
  assert_int_equal(n.inner_transfer_outer, -EBUSY);
  assert_int_equal(n.inner_destroy_outer, -EBUSY);
  assert_int_equal(iof_fiber_status(n.outer), 21);
  assert_int_equal(iof_fiber_destroy(n.outer), 0);
  assert_no_fiber_failures();
}

/* ---- names ------------------------------------------------------------- */

static int name_fiber(void *arg) {
  (void)arg;
  FCHECK(strcmp(iof_fiber_name(iof_fiber_current()), "runner") == 0);
  FCHECK(iof_fiber_set_name(iof_fiber_current(), "renamed") == 0);
  return 0;
}

static void test_names(void **state) {
  (void)state;
  iof_fiber *f = iof_fiber_create(NULL, IOF_FIBER_STACK_DEFAULT, name_fiber, 0);
  assert_non_null(f);
  assert_string_equal(iof_fiber_name(f), "");
  assert_int_equal(iof_fiber_set_name(f, "worker-1"), 0);
  assert_string_equal(iof_fiber_name(f), "worker-1");
  /* 40 bytes in, the first 31 kept. */
  const char *longname = "0123456789abcdefghijklmnopqrstuvwxyzABCD";
  assert_int_equal(iof_fiber_set_name(f, longname), 0);
  assert_int_equal(strlen(iof_fiber_name(f)), 31);
  assert_memory_equal(iof_fiber_name(f), longname, 31);
  /* Exactly 31 fits; 32 is cut. */
  assert_int_equal(iof_fiber_set_name(f, "0123456789012345678901234567890"), 0);
  assert_string_equal(iof_fiber_name(f), "0123456789012345678901234567890");
  assert_int_equal(iof_fiber_set_name(f, "01234567890123456789012345678901"),
                   0);
  assert_string_equal(iof_fiber_name(f), "0123456789012345678901234567890");
  /* A shorter name fully replaces a longer one. */
  assert_int_equal(iof_fiber_set_name(f, "ab"), 0);
  assert_string_equal(iof_fiber_name(f), "ab");
  /* NULL clears. */
  assert_int_equal(iof_fiber_set_name(f, NULL), 0);
  assert_string_equal(iof_fiber_name(f), "");
  /* Copied, not kept by pointer. */
  char buf[16];
  strcpy(buf, "runner");
  assert_int_equal(iof_fiber_set_name(f, buf), 0);
  strcpy(buf, "xxxxxx");
  assert_string_equal(iof_fiber_name(f), "runner");
  assert_int_equal(iof_fiber_resume(f), 0);
  assert_string_equal(iof_fiber_name(f), "renamed");
  assert_int_equal(iof_fiber_set_name(NULL, "x"), -EINVAL);
  assert_non_null(iof_fiber_name(NULL));
  assert_string_equal(iof_fiber_name(NULL), "");
  assert_int_equal(iof_fiber_destroy(f), 0);
  assert_no_fiber_failures();
}

/* ---- current ------------------------------------------------------------ */

static void *current_thread(void *arg) {
  (void)arg;
  return iof_fiber_current(); /* a thread that never ran a fiber */
}

static int current_fiber(void *arg) {
  iof_fiber **out = arg;
  *out = iof_fiber_current();
  return 0;
}

static void test_current(void **state) {
  (void)state;
  assert_null(iof_fiber_current());
  iof_fiber *seen = NULL;
  iof_fiber *f =
      iof_fiber_create(NULL, IOF_FIBER_STACK_DEFAULT, current_fiber, &seen);
  assert_non_null(f);
  assert_null(iof_fiber_current()); /* created, not entered */
  assert_int_equal(iof_fiber_resume(f), 0);
  assert_ptr_equal(seen, f);
  assert_null(iof_fiber_current());
  assert_int_equal(iof_fiber_destroy(f), 0);
  pthread_t t;
  void *r = (void *)1;
  assert_int_equal(pthread_create(&t, NULL, current_thread, NULL), 0);
  assert_int_equal(pthread_join(t, &r), 0);
  assert_null(r);
}

/* ---- stack size ---------------------------------------------------------- */

static void test_stack_size(void **state) {
  (void)state;
  const size_t page = (size_t)sysconf(_SC_PAGESIZE);
  iof_fiber *f = iof_fiber_create(NULL, IOF_FIBER_STACK_MIN, current_fiber, 0);
  assert_non_null(f);
  /* Usable bytes: the frame less the control block at its top. */
  size_t s = iof_fiber_stack_size(f);
  assert_true(s <= IOF_FIBER_STACK_MIN);
  assert_true(s >= IOF_FIBER_STACK_MIN - 1024);
  assert_int_equal(iof_fiber_destroy(f), 0);
  /* Not a page multiple: rounded up to pages. */
  f = iof_fiber_create(NULL, IOF_FIBER_STACK_MIN + 1, current_fiber, 0);
  assert_non_null(f);
  assert_true(iof_fiber_stack_size(f) > IOF_FIBER_STACK_MIN);
  assert_true(iof_fiber_stack_size(f) <= IOF_FIBER_STACK_MIN + page);
  assert_int_equal(iof_fiber_destroy(f), 0);
  assert_int_equal(iof_fiber_stack_size(NULL), 0);
}

/* ---- floating-point control state ---------------------------------------
 * The rounding mode (MXCSR and the x87 control word) is callee-saved in the
 * ABI, so it belongs to each fiber: a switch neither leaks a fiber's mode to
 * its resumer nor loses it. */

#if defined(__x86_64__)
#define MXCSR_RC 0x6000u
#define MXCSR_UP 0x4000u
#define X87_RC 0x0c00u
#define X87_UP 0x0800u

/* The control bits only: the low six are sticky exception flags. */
static unsigned get_mxcsr(void) {
  unsigned v;
  __asm__ volatile("stmxcsr %0" : "=m"(v));
  return v & ~0x3fu;
}

static void set_mxcsr(unsigned v) {
  __asm__ volatile("ldmxcsr %0" : : "m"(v) : "memory");
}

static unsigned short get_x87cw(void) {
  unsigned short v;
  __asm__ volatile("fnstcw %0" : "=m"(v));
  return v;
}

static void set_x87cw(unsigned short v) {
  __asm__ volatile("fldcw %0" : : "m"(v) : "memory");
}

static __attribute__((noinline)) double third(void) {
  volatile double one = 1.0, three = 3.0;
  return one / three; /* SSE: rounded per MXCSR */
}

struct fpstate {
  unsigned start_mxcsr, after_mxcsr;
  unsigned short start_cw, after_cw;
  double q_up;
};

static int fp_fiber(void *arg) {
  struct fpstate *s = arg;
  s->start_mxcsr = get_mxcsr();
  s->start_cw = get_x87cw();
  set_mxcsr((s->start_mxcsr & ~MXCSR_RC) | MXCSR_UP);
  set_x87cw((unsigned short)((s->start_cw & ~X87_RC) | X87_UP));
  FCHECK(iof_fiber_suspend() == 0);
  s->after_mxcsr = get_mxcsr();
  s->after_cw = get_x87cw();
  s->q_up = third();
  return 0;
}

static int fp_leave_up(void *arg) {
  struct fpstate *s = arg;
  s->start_mxcsr = get_mxcsr();
  s->start_cw = get_x87cw();
  set_mxcsr((s->start_mxcsr & ~MXCSR_RC) | MXCSR_UP);
  set_x87cw((unsigned short)((s->start_cw & ~X87_RC) | X87_UP));
  return 0; /* ends in round-up */
}
#endif

/* A new fiber starts with its creator's control state, also on a stack
 * that the pool recycles from a fiber that ended in another mode, and
 * whatever mode its creator runs in. */
static void test_fp_state_of_recycled_frames(void **state) {
  (void)state;
#if defined(__x86_64__)
  iof_stack_pool *pool = iof_stack_pool_create(NULL);
  assert_non_null(pool);
  iof_frame_allocator *a = iof_stack_pool_allocator(pool);
  unsigned m0 = get_mxcsr();
  unsigned short c0 = get_x87cw();
  iof_fiber *first = NULL;
  for (int round = 0; round < 4; round++) {
    bool creator_up = round & 1;
    if (creator_up) {
      set_mxcsr((m0 & ~MXCSR_RC) | MXCSR_UP);
      set_x87cw((unsigned short)((c0 & ~X87_RC) | X87_UP));
    }
    struct fpstate s = {0};
    iof_fiber *f = iof_fiber_create(a, 0, fp_leave_up, &s);
    assert_non_null(f);
    unsigned m_creator = get_mxcsr();
    unsigned short c_creator = get_x87cw();
    set_mxcsr(m0); /* the resumer runs in the default mode */
    set_x87cw(c0);
    assert_int_equal(iof_fiber_resume(f), 0);
    assert_int_equal(s.start_mxcsr, m_creator);
    assert_int_equal(s.start_cw, c_creator);
    assert_int_equal(get_mxcsr(), m0); /* its round-up stayed in it */
    assert_int_equal(get_x87cw(), c0);
    assert_int_equal(iof_fiber_destroy(f), 0);
    if (!first) first = f;
    assert_ptr_equal(f, first); /* the same frame every round */
  }
  assert_int_equal(iof_stack_pool_destroy(pool), 0);
#else
  skip();
#endif
}

static void test_fp_control_state(void **state) {
  (void)state;
#if defined(__x86_64__)
  unsigned m0 = get_mxcsr();
  unsigned short c0 = get_x87cw();
  assert_int_equal(m0 & MXCSR_RC, 0); /* round to nearest */
  double q_near = third();
  struct fpstate s = {0};
  iof_fiber *f = iof_fiber_create(NULL, IOF_FIBER_STACK_DEFAULT, fp_fiber, &s);
  assert_non_null(f);
  assert_int_equal(iof_fiber_resume(f), 0);
  /* It started with ours; its change stayed in the fiber. */
  assert_int_equal(s.start_mxcsr, m0);
  assert_int_equal(s.start_cw, c0);
  assert_int_equal(get_mxcsr(), m0);
  assert_int_equal(get_x87cw(), c0);
  assert_true(third() == q_near);
  assert_int_equal(iof_fiber_resume(f), 0);
  /* And it found its own again. */
  assert_int_equal(s.after_mxcsr & MXCSR_RC, MXCSR_UP);
  assert_int_equal(s.after_cw & X87_RC, X87_UP);
  if (!ON_VALGRIND()) assert_true(s.q_up > q_near); /* VEX rounds nearest */
  assert_int_equal(get_mxcsr(), m0);
  assert_int_equal(get_x87cw(), c0);
  assert_int_equal(iof_fiber_destroy(f), 0);
  assert_no_fiber_failures();
#else
  skip();
#endif
}

/* ---- bad input ----------------------------------------------------------- */

static int never_called_count;

static int never_called(void *arg) {
  (void)arg;
  never_called_count++;
  return 0;
}

struct selfops {
  iof_fiber *self;
  int resume_self, destroy_self, transfer_self, transfer_null;
  int transfer_done, suspend_with_null;
  iof_fiber *done;
};

static int selfops_fiber(void *arg) {
  struct selfops *s = arg;
  s->resume_self = iof_fiber_resume(s->self);
  s->destroy_self = iof_fiber_destroy(s->self);
  s->transfer_self = iof_fiber_transfer(s->self);
  s->transfer_null = iof_fiber_transfer(NULL);
  s->transfer_done = iof_fiber_transfer(s->done);
  s->suspend_with_null = iof_fiber_suspend_with(NULL, NULL);
  /* None of the failed calls switched: still running here. */
  FCHECK(iof_fiber_current() == s->self);
  return 1;
}

static iof_fiber *unused_hook(iof_fiber *self, void *arg) {
  (void)self;
  (void)arg;
  return NULL;
}

static void test_bad_input(void **state) {
  (void)state;
  errno = 0;
  assert_null(iof_fiber_create(NULL, IOF_FIBER_STACK_DEFAULT, NULL, NULL));
  assert_int_equal(errno, EINVAL);
  /* Stack size 0 is the default, as everywhere. */
  iof_fiber *dflt = iof_fiber_create(NULL, 0, never_called, NULL);
  assert_non_null(dflt);
  iof_fiber *dflt2 =
      iof_fiber_create(NULL, IOF_FIBER_STACK_DEFAULT, never_called, NULL);
  assert_non_null(dflt2);
  assert_int_equal(iof_fiber_stack_size(dflt), iof_fiber_stack_size(dflt2));
  assert_int_equal(iof_fiber_destroy(dflt), 0);
  assert_int_equal(iof_fiber_destroy(dflt2), 0);
  errno = 0;
  assert_null(iof_fiber_create(NULL, IOF_FIBER_STACK_MIN - 1, never_called, 0));
  assert_int_equal(errno, EINVAL);
  errno = 0;
  assert_null(iof_fiber_create(NULL, IOF_FIBER_STACK_MAX + 1, never_called, 0));
  assert_int_equal(errno, EINVAL);
  errno = 0;
  assert_null(iof_fiber_create(NULL, SIZE_MAX, never_called, NULL));
  assert_int_equal(errno, EINVAL);
  errno = 0;
  assert_null(iof_fiber_create(iof_mmap_allocator(), IOF_FIBER_STACK_MIN - 1,
                               never_called, NULL));
  assert_int_equal(errno, EINVAL);

  /* NULL fiber everywhere. */
  assert_int_equal(iof_fiber_resume(NULL), -EINVAL);
  assert_int_equal(iof_fiber_destroy(NULL), -EINVAL);
  assert_int_equal(iof_fiber_status(NULL), -EINVAL);
  assert_false(iof_fiber_done(NULL));

  /* Outside a fiber. */
  assert_int_equal(iof_fiber_suspend(), -EPERM);
  assert_int_equal(iof_fiber_suspend_with(unused_hook, NULL), -EPERM);
  assert_int_equal(iof_fiber_suspend_with(NULL, NULL), -EINVAL);

  /* Never started: destroy frees it without calling fn. */
  iof_frame_allocator *tr = iof_tracking_allocator_create(NULL);
  assert_non_null(tr);
  never_called_count = 0;
  iof_fiber *f =
      iof_fiber_create(tr, IOF_FIBER_STACK_DEFAULT, never_called, NULL);
  assert_non_null(f);
  assert_int_equal(iof_fiber_transfer(f), -EPERM); /* outside a fiber */
  assert_int_equal(iof_fiber_status(f), -EAGAIN);
  assert_false(iof_fiber_done(f));
  iof_tracking_stats ts;
  assert_int_equal(iof_tracking_allocator_stats(tr, &ts), 0);
  assert_int_equal(ts.live, 1);
  assert_int_equal(iof_fiber_destroy(f), 0);
  assert_int_equal(never_called_count, 0);
  assert_int_equal(iof_tracking_allocator_stats(tr, &ts), 0);
  assert_int_equal(ts.live, 0);
  assert_int_equal(ts.freed, 1);

  /* Finished: resume is refused. */
  iof_fiber *done =
      iof_fiber_create(tr, IOF_FIBER_STACK_DEFAULT, never_called, NULL);
  assert_non_null(done);
  assert_int_equal(iof_fiber_resume(done), 0);
  assert_int_equal(never_called_count, 1);
  assert_true(iof_fiber_done(done));
  assert_int_equal(iof_fiber_resume(done), -EINVAL);
  assert_int_equal(never_called_count, 1);

  /* Operations on itself from inside. */
  struct selfops s = {.done = done};
  s.self = iof_fiber_create(tr, IOF_FIBER_STACK_DEFAULT, selfops_fiber, &s);
  assert_non_null(s.self);
  assert_int_equal(iof_fiber_resume(s.self), 0);
  assert_int_equal(s.resume_self, -EBUSY);
  assert_int_equal(s.destroy_self, -EBUSY);
  assert_int_equal(s.transfer_self, -EBUSY);
  assert_int_equal(s.transfer_null, -EINVAL);
  assert_int_equal(s.transfer_done, -EINVAL);
  assert_int_equal(s.suspend_with_null, -EINVAL);
  assert_int_equal(iof_fiber_status(s.self), 1);
  assert_int_equal(iof_fiber_destroy(s.self), 0);
  assert_int_equal(iof_fiber_destroy(done), 0);

  /* Suspended mid-way: destroy refused until it ends. */
  struct idle st = {0};
  iof_fiber *mid =
      iof_fiber_create(tr, IOF_FIBER_STACK_DEFAULT, idle_fiber, &st);
  assert_non_null(mid);
  st.self = mid;
  st.id = 4;
  assert_int_equal(iof_fiber_resume(mid), 0);
  assert_int_equal(st.stage, 1);
  assert_int_equal(iof_fiber_destroy(mid), -EBUSY);
  assert_int_equal(iof_fiber_status(mid), -EAGAIN);
  assert_int_equal(iof_fiber_resume(mid), 0);
  assert_int_equal(st.stage, 2);
  assert_int_equal(iof_fiber_destroy(mid), 0);

  assert_int_equal(iof_tracking_allocator_stats(tr, &ts), 0);
  assert_int_equal(ts.live, 0);
  assert_int_equal(ts.total, 4);
  assert_int_equal(iof_tracking_allocator_destroy(tr), 0);
  assert_no_fiber_failures();
}

int main(int argc, char **argv) {
  /* An optional argument selects tests by name pattern. */
  if (argc > 1) cmocka_set_test_filter(argv[1]);
  /* The switch-heavy tests run before those that create thousands of
   * fibers: under TSan every fiber ever alive widens the vector clocks that
   * each later switch copies, making a switch ~10x slower afterwards. */
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup(test_current, reset_failures),
      cmocka_unit_test_setup(test_pingpong, reset_failures),
      cmocka_unit_test_setup(test_transfer_pingpong, reset_failures),
      cmocka_unit_test_setup(test_suspend_with_self, reset_failures),
      cmocka_unit_test_setup(test_suspend_with_null, reset_failures),
      cmocka_unit_test_setup(test_suspend_with_other, reset_failures),
      cmocka_unit_test_setup(test_suspend_with_publish, reset_failures),
      cmocka_unit_test_setup(test_migrate_threads, reset_failures),
      cmocka_unit_test_setup(test_nested, reset_failures),
      cmocka_unit_test_setup(test_names, reset_failures),
      cmocka_unit_test_setup(test_stack_size, reset_failures),
      cmocka_unit_test_setup(test_fp_control_state, reset_failures),
      cmocka_unit_test(test_fp_state_of_recycled_frames),
      cmocka_unit_test_setup(test_bad_input, reset_failures),
      cmocka_unit_test_setup(test_many_live_fibers, reset_failures),
      cmocka_unit_test_setup(test_transfer_chain, reset_failures),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
