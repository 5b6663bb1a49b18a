/* wait: arm + cancel of timed waits with many waiters, through the one
 * wait record and the io_context's timer heap. One operation is a round:
 * N chains on one io_context each start a timed wait, and once all are
 * suspended one stop request (a token shared by the N) cancels them all;
 * ns per round covers launch + arm + cancel + end of the N.
 *
 *   sleep_N   the waiters call iof_sleep_for(1 h) (baseline)
 *   sem_N     the waiters call iof_sem_timedwait(1 h + i us: distinct
 *             deadlines) on one semaphore (vs sleep_N; target <= 1.5)
 *   growth_1k_10k    sem_10000 against sem_1000: 10x the waiters. Past
 *                    the CPU caches (10,000 stacks touch ~80 MB) each
 *                    waiter costs several times more, for sleeps and timed
 *                    waits alike (compare sleep_10000 / sleep_1000), so no
 *                    target: sem_N vs sleep_N is what isolates the wait.
 *   growth_10k_100k  sem_100000 against sem_10000: 10x the waiters, both
 *                    beyond the caches; target 12.5 (linear times
 *                    log 10^5 / log 10^4 = 1.25: O(log n) per waiter).
 *
 * N is 1,000, 10,000 and 100,000. The fibers take 16 KiB stacks from a
 * slab mapped once per case (a stack pool maps a guard page per stack,
 * and 100,000 stacks would exceed vm.max_map_count; malloc would give
 * the pages back and fault them in again every round). */
#include "bench.h"

#include <errno.h>
#include <stdlib.h>
#include <sys/mman.h>

#include <iofiber/iofiber.h>

#define STACK ((size_t)16 * 1024)
#define FAR_NS 3600000000000LL /* an hour: the timers never fire */

/* ---- a slab of equal stacks (one thread) ------------------------------ */

typedef struct slab {
  iof_frame_allocator base;
  char *mem;
  size_t n;
  void **free; /* LIFO of free stacks */
  size_t nfree;
} slab;

static void *slab_allocate(iof_frame_allocator *self, size_t size) {
  slab *s = (slab *)self;
  if (size != STACK || s->nfree == 0) {
    errno = ENOMEM;
    return NULL;
  }
  return s->free[--s->nfree];
}

static void slab_deallocate(iof_frame_allocator *self, void *p, size_t size) {
  (void)size;
  slab *s = (slab *)self;
  s->free[s->nfree++] = p;
}

static const iof_frame_allocator_vtbl slab_vtbl = {slab_allocate,
                                                   slab_deallocate};

/* ---- one size --------------------------------------------------------- */

typedef struct wait_size {
  int n;          /* waiters per round */
  bool sem;       /* sem_N, else sleep_N */
  slab stacks;    /* mapped by setup */
  intptr_t *args; /* the waiters' {size, index} pairs */
  iof_io_context *io;
  iof_sem s;
  iof_stop_source src;
  int64_t base;
  int err;
  int cancelled;
} wait_size;

static int waiter(void *arg) {
  wait_size *w = *(wait_size **)arg;
  int i = (int)((intptr_t *)arg)[1];
  int r = w->sem ? iof_sem_timedwait(&w->s, w->base + (int64_t)i * 1000)
                 : iof_sleep_for(FAR_NS);
  if (r == -ECANCELED)
    w->cancelled++;
  else if (w->err == 0)
    w->err = r < 0 ? r : -EIO;
  return 0;
}

static int stopper(void *arg) {
  wait_size *w = arg;
  iof_stop_source_request(&w->src); /* the n callbacks post the n waiters */
  return 0;
}

static int round_once(wait_size *w) {
  intptr_t *args = w->args;
  if (iof_stop_source_init(&w->src) < 0) return -ENOMEM;
  iof_launch_opts o = {0};
  o.stop_token = iof_stop_source_token(&w->src);
  o.frame_allocator = &w->stacks.base;
  o.stack_size = STACK;
  iof_executor_ref ex = iof_io_context_executor(w->io);
  w->base = iof_now_ns() + FAR_NS;
  w->cancelled = 0;
  int r = 0;
  for (int i = 0; i < w->n && r == 0; i++) {
    args[2 * i] = (intptr_t)w;
    args[2 * i + 1] = i; /* later waits, later deadlines: a sorted list
                            would walk to its end for each */
    r = iof_run_async(ex, &o, waiter, &args[2 * i]);
  }
  /* Runs after every waiter has suspended (one thread, FIFO). */
  iof_launch_opts so = {0};
  so.frame_allocator = &w->stacks.base;
  so.stack_size = STACK;
  if (r == 0) r = iof_run_async(ex, &so, stopper, w);
  iof_io_context_restart(w->io);
  int rr = iof_io_context_run(w->io);
  iof_stop_source_destroy(&w->src);
  if (r < 0) return r;
  if (rr < 0) return rr;
  if (w->err) return w->err;
  return w->cancelled == w->n ? 0 : -EIO;
}

static int size_setup(void *arg) {
  wait_size *w = arg;
  w->err = 0;
  w->args = malloc(sizeof(intptr_t) * 2 * (size_t)w->n);
  if (!w->args) return -ENOMEM;
  if (iof_sem_init(&w->s, 0) < 0) return -ENOMEM;
  w->io = iof_io_context_create();
  if (!w->io) return -ENOMEM;
  slab *s = &w->stacks;
  s->base.vtbl = &slab_vtbl;
  s->n = (size_t)w->n + 1;
  s->mem = mmap(NULL, s->n * STACK, PROT_READ | PROT_WRITE,
                MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  s->free = malloc(s->n * sizeof *s->free);
  if (s->mem == MAP_FAILED || !s->free) return -ENOMEM;
  s->nfree = 0;
  for (size_t i = s->n; i-- > 0;) s->free[s->nfree++] = s->mem + i * STACK;
  return 0;
}

static void size_teardown(void *arg) {
  wait_size *w = arg;
  if (w->io) iof_io_context_destroy(w->io);
  w->io = NULL;
  slab *s = &w->stacks;
  if (s->mem && s->mem != MAP_FAILED) munmap(s->mem, s->n * STACK);
  free(s->free);
  free(w->args);
  w->args = NULL;
  s->mem = NULL;
  s->free = NULL;
  iof_sem_destroy(&w->s);
}

static int size_body(void *arg, uint64_t iters) {
  wait_size *w = arg;
  for (uint64_t k = 0; k < iters; k++) {
    int r = round_once(w);
    if (r < 0) return r;
  }
  return 0;
}

int bench_suite_wait(bench_ctx *ctx) {
  static const int sizes[3] = {1000, 10000, 100000};
  static const char *const sleep_names[3] = {"sleep_1000", "sleep_10000",
                                             "sleep_100000"};
  static const char *const sem_names[3] = {"sem_1000", "sem_10000",
                                           "sem_100000"};
  wait_size ws[6];
  int rc = 0;
  for (int k = 0; k < 3; k++) {
    wait_size *sl = &ws[2 * k], *se = &ws[2 * k + 1];
    *sl = (wait_size){.n = sizes[k], .sem = false};
    *se = (wait_size){.n = sizes[k], .sem = true};
    /* alone: two slabs of up to 100,000 stacks are never mapped at once. */
    bench_case a = {.name = sleep_names[k],
                    .unit = "ns/round",
                    .arg = sl,
                    .setup = size_setup,
                    .body = size_body,
                    .teardown = size_teardown};
    bench_case b = {.name = sem_names[k],
                    .unit = "ns/round",
                    .baseline = sleep_names[k],
                    .target = 1.5,
                    .alone = true,
                    .arg = se,
                    .setup = size_setup,
                    .body = size_body,
                    .teardown = size_teardown};
    int r = bench_run_case(ctx, &a);
    if (r < 0 && rc == 0) rc = r;
    r = bench_run_case(ctx, &b);
    if (r < 0 && rc == 0) rc = r;
  }
  bench_compare(ctx, "growth_1k_10k", "sem_10000", "sem_1000", 0);
  bench_compare(ctx, "growth_10k_100k", "sem_100000", "sem_10000", 12.5);
  return rc;
}
