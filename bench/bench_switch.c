/* switch: the cost of one context-switch round trip (there and back).
 *
 *   raw_jump              two jump_fcontext calls between main and a bare
 *                         fcontext on a malloc'ed stack: the floor that
 *                         Boost.Context's assembly sets (baseline)
 *   fiber_resume_suspend  iof_fiber_resume + iof_fiber_suspend: the same
 *                         switch plus the runtime's bookkeeping
 *                         (target: <= 1.5x raw_jump) */
#include "bench.h"

#include <errno.h>
#include <stdlib.h>

#include "fiber/fcontext.h"
#include <iofiber/fiber.h>

#define RAW_STACK_SIZE ((size_t)64 * 1024)

/* ---- raw_jump ---------------------------------------------------------- */

typedef struct raw_state {
  void *stack;
  iof_fctx ctx; /* where the bare context waits to be jumped to */
} raw_state;

/* Never returns (returning from an fcontext entry exits the thread): it
 * bounces every jump straight back and is abandoned when the case ends. */
static void raw_entry(iof_transfer t) {
  for (;;) t = jump_fcontext(t.fctx, NULL);
}

static int raw_setup(void *arg) {
  raw_state *st = arg;
  st->stack = malloc(RAW_STACK_SIZE);
  if (!st->stack) return -ENOMEM;
  /* fcontext stacks grow down: pass the top. */
  st->ctx = make_fcontext((char *)st->stack + RAW_STACK_SIZE, RAW_STACK_SIZE,
                          raw_entry);
  /* Enter once so the timed loop measures steady-state round trips only. */
  st->ctx = jump_fcontext(st->ctx, NULL).fctx;
  return 0;
}

static int raw_body(void *arg, uint64_t iters) {
  raw_state *st = arg;
  iof_fctx ctx = st->ctx;
  for (uint64_t i = 0; i < iters; i++) ctx = jump_fcontext(ctx, NULL).fctx;
  st->ctx = ctx;
  return 0;
}

static void raw_teardown(void *arg) {
  raw_state *st = arg;
  /* The context is parked inside jump_fcontext and never resumed again,
   * so its stack can go. */
  free(st->stack);
  st->stack = NULL;
}

/* ---- fiber_resume_suspend ---------------------------------------------- */

typedef struct fiber_state {
  iof_fiber *fiber;
  volatile int stop; /* read by the fiber after each resume */
} fiber_state;

static int ping_fn(void *arg) {
  fiber_state *st = arg;
  while (!st->stop)
    if (iof_fiber_suspend() < 0) return -1;
  return 0;
}

static int fiber_setup(void *arg) {
  fiber_state *st = arg;
  st->stop = 0;
  st->fiber = iof_fiber_create(NULL, IOF_FIBER_STACK_DEFAULT, ping_fn, st);
  if (!st->fiber) return -errno;
  /* First resume starts the fiber; later ones are pure round trips. */
  int rc = iof_fiber_resume(st->fiber);
  if (rc < 0) {
    iof_fiber_destroy(st->fiber);
    st->fiber = NULL;
  }
  return rc;
}

static int fiber_body(void *arg, uint64_t iters) {
  iof_fiber *f = ((fiber_state *)arg)->fiber;
  for (uint64_t i = 0; i < iters; i++) {
    int rc = iof_fiber_resume(f);
    if (rc < 0) return rc;
  }
  return 0;
}

static void fiber_teardown(void *arg) {
  fiber_state *st = arg;
  /* Let the fiber return so it can be destroyed. */
  st->stop = 1;
  iof_fiber_resume(st->fiber);
  iof_fiber_destroy(st->fiber);
  st->fiber = NULL;
}

int bench_suite_switch(bench_ctx *ctx) {
  raw_state raw = {0};
  fiber_state fib = {0};
  const bench_case cases[] = {
      {.name = "raw_jump",
       .unit = "ns/roundtrip",
       .arg = &raw,
       .setup = raw_setup,
       .body = raw_body,
       .teardown = raw_teardown},
      {.name = "fiber_resume_suspend",
       .unit = "ns/roundtrip",
       .baseline = "raw_jump",
       .target = 1.5,
       .arg = &fib,
       .setup = fiber_setup,
       .body = fiber_body,
       .teardown = fiber_teardown},
  };
  int status = 0;
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
    if (bench_run_case(ctx, &cases[i]) < 0) status = -1;
  return status;
}
