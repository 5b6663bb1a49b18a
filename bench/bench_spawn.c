/* spawn: create a fiber, resume it until its trivial function returns,
 * destroy it; ns per spawn, with three frame allocators.
 *
 *   malloc        iof_malloc_allocator(): the general-purpose heap
 *                 (baseline)
 *   mmap          iof_mmap_allocator(): a fresh mapping + guard page per
 *                 fiber, what a naive runtime does
 *   pool          a stack pool from iof_stack_pool_create(NULL): recycled
 *                 stacks with guard pages (target: <= 0.5x malloc)
 *   pool_vs_mmap  the pool's samples again, against mmap
 *                 (target: <= 0.1x mmap)
 *   fctx_malloc   Boost's bare spawn: make_fcontext on a malloc'ed stack,
 *                 a jump in and the jump back, free (baseline)
 *   fctx          the same on one reused stack. Its ratio is a lower
 *                 bound for pool-vs-malloc: any spawn that makes a fresh
 *                 fcontext does at least this plus what both cases add */
#include "bench.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

#include <iofiber/fiber.h>

#include "fiber/fcontext.h"

typedef struct spawn_state {
  iof_frame_allocator *alloc;
  iof_stack_pool *pool; /* owned by the pool case */
  char *stack;          /* owned by the fctx case */
} spawn_state;

static int trivial_fn(void *arg) {
  (void)arg;
  return 0;
}

static int spawn_body(void *arg, uint64_t iters) {
  iof_frame_allocator *alloc = ((spawn_state *)arg)->alloc;
  for (uint64_t i = 0; i < iters; i++) {
    iof_fiber *f =
        iof_fiber_create(alloc, IOF_FIBER_STACK_DEFAULT, trivial_fn, NULL);
    if (!f) return -errno;
    int rc = iof_fiber_resume(f);
    if (rc == 0) rc = iof_fiber_destroy(f);
    if (rc < 0) return rc;
  }
  return 0;
}

/* The floor: what Boost's fcontext alone costs per spawn. The entry jumps
 * straight back; the context it leaves is never resumed. */
#define FCTX_STACK (64 * 1024)

static void fctx_entry(iof_transfer t) {
  for (;;) t = jump_fcontext(t.fctx, NULL);
}

static int fctx_spawn(char *stack) {
  iof_fctx c = make_fcontext(stack + FCTX_STACK, FCTX_STACK, fctx_entry);
  if (!c) return -ENOMEM;
  (void)jump_fcontext(c, NULL);
  return 0;
}

static int fctx_malloc_body(void *arg, uint64_t iters) {
  (void)arg;
  for (uint64_t i = 0; i < iters; i++) {
    char *stack = malloc(FCTX_STACK);
    if (!stack) return -ENOMEM;
    int rc = fctx_spawn(stack);
    free(stack);
    if (rc < 0) return rc;
  }
  return 0;
}

static int fctx_body(void *arg, uint64_t iters) {
  char *stack = ((spawn_state *)arg)->stack;
  for (uint64_t i = 0; i < iters; i++) {
    int rc = fctx_spawn(stack);
    if (rc < 0) return rc;
  }
  return 0;
}

static int fctx_setup(void *arg) {
  spawn_state *st = arg;
  st->stack = malloc(FCTX_STACK);
  return st->stack ? 0 : -ENOMEM;
}

static void fctx_teardown(void *arg) {
  spawn_state *st = arg;
  free(st->stack);
  st->stack = NULL;
}

static int malloc_setup(void *arg) {
  ((spawn_state *)arg)->alloc = iof_malloc_allocator();
  return 0;
}

static int mmap_setup(void *arg) {
  ((spawn_state *)arg)->alloc = iof_mmap_allocator();
  return 0;
}

static int pool_setup(void *arg) {
  spawn_state *st = arg;
  st->pool = iof_stack_pool_create(NULL);
  if (!st->pool) return -errno;
  st->alloc = iof_stack_pool_allocator(st->pool);
  return 0;
}

static void pool_teardown(void *arg) {
  spawn_state *st = arg;
  /* A pool that never kept a stack would make this case measure mmap. */
  struct iof_stack_pool_stats s;
  if (iof_stack_pool_stats(st->pool, &s) == 0 && s.allocated > 0 &&
      s.cached == 0)
    fprintf(stderr, "iof-bench: spawn/pool: the pool cached no stack\n");
  int rc = iof_stack_pool_destroy(st->pool);
  if (rc < 0) fprintf(stderr, "iof-bench: spawn/pool: destroy: %d\n", rc);
  st->pool = NULL;
}

int bench_suite_spawn(bench_ctx *ctx) {
  spawn_state st = {0};
  const bench_case cases[] = {
      {.name = "malloc",
       .unit = "ns/spawn",
       .arg = &st,
       .setup = malloc_setup,
       .body = spawn_body},
      {.name = "mmap",
       .unit = "ns/spawn",
       .baseline = "malloc",
       .arg = &st,
       .setup = mmap_setup,
       .body = spawn_body},
      {.name = "pool",
       .unit = "ns/spawn",
       .baseline = "malloc",
       .target = 0.5,
       .arg = &st,
       .setup = pool_setup,
       .body = spawn_body,
       .teardown = pool_teardown},
  };
  spawn_state fst = {0};
  const bench_case floor_cases[] = {
      {.name = "fctx_malloc", .unit = "ns/spawn", .body = fctx_malloc_body},
      {.name = "fctx",
       .unit = "ns/spawn",
       .baseline = "fctx_malloc",
       .arg = &fst,
       .setup = fctx_setup,
       .body = fctx_body,
       .teardown = fctx_teardown},
  };
  int status = 0;
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
    if (bench_run_case(ctx, &cases[i]) < 0) status = -1;
  if (bench_compare(ctx, "pool_vs_mmap", "pool", "mmap", 0.1) < 0) status = -1;
  for (size_t i = 0; i < sizeof floor_cases / sizeof floor_cases[0]; i++)
    if (bench_run_case(ctx, &floor_cases[i]) < 0) status = -1;
  return status;
}
