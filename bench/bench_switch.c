/* switch: the cost of one context-switch round trip (there and back).
 *
 *   raw_jump              two jump_fcontext calls between main and a bare
 *                         fcontext on a malloc'ed stack: the floor that
 *                         Boost.Context's assembly sets (baseline)
 *   fiber_resume_suspend  iof_fiber_resume + iof_fiber_suspend: the same
 *                         switch plus the runtime's bookkeeping
 *                         (target: <= 1.5x raw_jump) */
#include "bench.h"
#include "bench_util.h"

#include <errno.h>
#include <stdlib.h>

#include <iofiber/fiber.h>

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
  bench_raw raw = {0};
  fiber_state fib = {0};
  const bench_case cases[] = {
      bench_raw_jump_case("raw_jump", &raw),
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
