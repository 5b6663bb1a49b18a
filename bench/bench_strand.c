/* strand: the overhead of running fibers through a strand over an
 * io_context, against the same fibers on the io_context itself. Every case
 * is fibers looping on iof_yield(): one yield is one post + resume through
 * the fiber's executor (for a strand: release the strand, queue behind it,
 * be handed to the io_context when it is this fiber's turn).
 *
 *   plain_1         one fiber on the io_context (baseline)
 *   strand_1        one fiber in a strand over it (vs plain_1)
 *   plain_64        64 fibers on the io_context (baseline)
 *   strand_64_own   64 fibers, each in a strand of its own: the strand's
 *                   bookkeeping with no fiber ever waiting (vs plain_64)
 *   strand_64_one   64 fibers sharing one strand: each yield hands the
 *                   strand to the next fiber in line (vs plain_64)
 *
 * Goal: a strand keeps at least 0.8x the plain executor's throughput, i.e.
 * ns per yield at most 1.25x plain's (target 1.25 on every strand row). */
#include "bench_util.h"

#include <errno.h>

#define GROUP 64

typedef struct strand_state {
  bench_loop b;
  int nstrands; /* 0: the plain io_context */
  int nfibers;
  iof_strand *strands[GROUP];
  iof_executor_ref ex[GROUP];
} strand_state;

static int strand_body(void *arg, uint64_t iters) {
  strand_state *st = arg;
  if (st->nstrands == 0)
    return bench_run_group(&st->b, st->nfibers, iters, bench_yield_fn, NULL);
  return bench_run_group_on(&st->b, st->ex, st->nstrands, st->nfibers, iters,
                            bench_yield_fn, NULL);
}

static void strand_teardown(void *arg) {
  strand_state *st = arg;
  for (int i = 0; i < GROUP; i++) {
    if (st->strands[i]) iof_strand_destroy(st->strands[i]);
    st->strands[i] = NULL;
  }
  bench_loop_close(&st->b);
}

static int setup(strand_state *st, int nstrands, int nfibers) {
  st->nstrands = nstrands;
  st->nfibers = nfibers;
  int rc = bench_loop_open(&st->b, 2 * GROUP);
  if (rc < 0) return rc;
  for (int i = 0; i < nstrands; i++) {
    st->strands[i] = iof_strand_create(iof_io_context_executor(st->b.io));
    if (!st->strands[i]) {
      rc = -errno;
      strand_teardown(st);
      return rc;
    }
    st->ex[i] = iof_strand_executor(st->strands[i]);
  }
  /* Map the group's stacks before the calibration starts. */
  rc = strand_body(st, (uint64_t)nfibers);
  if (rc < 0) strand_teardown(st);
  return rc;
}

static int plain_1_setup(void *arg) {
  return setup(arg, 0, 1);
}
static int strand_1_setup(void *arg) {
  return setup(arg, 1, 1);
}
static int plain_64_setup(void *arg) {
  return setup(arg, 0, GROUP);
}
static int strand_64_own_setup(void *arg) {
  return setup(arg, GROUP, GROUP);
}
static int strand_64_one_setup(void *arg) {
  return setup(arg, 1, GROUP);
}

int bench_suite_strand(bench_ctx *ctx) {
  strand_state st = {0};
  const bench_case cases[] = {
      {.name = "plain_1",
       .unit = "ns/yield",
       .arg = &st,
       .setup = plain_1_setup,
       .body = strand_body,
       .teardown = strand_teardown},
      {.name = "strand_1",
       .unit = "ns/yield",
       .baseline = "plain_1",
       .target = 1.25,
       .arg = &st,
       .setup = strand_1_setup,
       .body = strand_body,
       .teardown = strand_teardown},
      {.name = "plain_64",
       .unit = "ns/yield",
       .arg = &st,
       .setup = plain_64_setup,
       .body = strand_body,
       .teardown = strand_teardown},
      {.name = "strand_64_own",
       .unit = "ns/yield",
       .baseline = "plain_64",
       .target = 1.25,
       .arg = &st,
       .setup = strand_64_own_setup,
       .body = strand_body,
       .teardown = strand_teardown},
      {.name = "strand_64_one",
       .unit = "ns/yield",
       .baseline = "plain_64",
       .target = 1.25,
       .arg = &st,
       .setup = strand_64_one_setup,
       .body = strand_body,
       .teardown = strand_teardown},
  };
  int status = 0;
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
    if (bench_run_case(ctx, &cases[i]) < 0) status = -1;
  return status;
}
