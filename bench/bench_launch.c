/* launch: iof_run_async of a trivial chain on an io_context until it ends,
 * against a bare fiber's life with the same stack pool.
 *
 *   spawn_pool          iof_fiber_create + iof_fiber_resume (runs to the
 *                       end) + iof_fiber_destroy, frames from a stack pool
 *                       (baseline; the spawn suite's `pool` case)
 *   run_async           iof_run_async with that pool as the frame allocator,
 *                       64 chains per batch, then iof_io_context_run on the
 *                       same thread until they have ended: the whole life of
 *                       a chain (env, work count, post, run loop, on_done,
 *                       free) (vs spawn_pool)
 *   run_async_1         the same one chain at a time: a launch plus a whole
 *                       run of the io_context each (vs spawn_pool)
 *   run_async_in_fiber  the launches made by a chain running on the
 *                       io_context, 64 at a time, yielding once per batch
 *                       (its chains, queued before it, have then ended).
 *                       The two rows above launch from outside the run
 *                       loop, where a post takes the io_context's remote
 *                       path (a lock and an ev_async_send); this one takes
 *                       the loop thread's lock-free path (vs spawn_pool)
 *   run_async_2io       run_async on two threads at once, each with its
 *                       own io_context, both taking frames from the one
 *                       stack pool (as io_contexts share the default pool):
 *                       time per launch of each thread, so 1.00 would be
 *                       perfect scaling (vs run_async)
 *   budget_150ns        not a measurement of the runtime: the body spins
 *                       until 150 ns per operation have passed. It turns
 *                       the absolute goal into a row to compare against.
 *   run_async_vs_150ns  run_async's samples against budget_150ns: the goal
 *                       is a launch under 150 ns (target <= 1.00) */
#include "bench_util.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>

#define BATCH 64
#define BUDGET_NS 150

typedef struct launch_state {
  bench_loop b;
  iof_frame_allocator *alloc; /* b.stacks as an allocator */
  int batch;
  int done; /* chains of the batch whose on_done ran */
  int err;
  uint64_t iters;      /* run_async_in_fiber: launches of this body */
  int launcher_status; /* run_async_in_fiber: the launcher's status */
} launch_state;

static int trivial_fn(void *arg) {
  bench_keep(arg);
  return 0;
}

/* ---- spawn_pool -------------------------------------------------------- */

static int spawn_body(void *arg, uint64_t iters) {
  iof_frame_allocator *alloc = ((launch_state *)arg)->alloc;
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

/* ---- run_async ----------------------------------------------------------- */

/* on_done runs on the io_context's thread: this one. */
static void launch_done(void *user, int status) {
  launch_state *st = user;
  st->done++;
  if (status < 0 && st->err == 0) st->err = status;
}

static int run_async_body(void *arg, uint64_t iters) {
  launch_state *st = arg;
  iof_executor_ref ex = iof_io_context_executor(st->b.io);
  iof_launch_opts o = {0};
  o.frame_allocator = st->alloc;
  o.on_done = launch_done;
  o.user = st;
  for (uint64_t left = iters; left > 0;) {
    int n = left < (uint64_t)st->batch ? (int)left : st->batch;
    int rc = 0, launched = 0;
    st->done = 0;
    for (; launched < n; launched++) {
      rc = iof_run_async(ex, &o, trivial_fn, NULL);
      if (rc < 0) break;
    }
    iof_io_context_restart(st->b.io);
    int ran = iof_io_context_run(st->b.io);
    if (rc == 0 && ran < 0) rc = ran;
    if (rc == 0 && st->done != launched) rc = -EIO;
    if (rc == 0) rc = st->err;
    if (rc < 0) return rc;
    left -= (uint64_t)n;
  }
  return 0;
}

/* The launcher chain: the whole body's launches, 64 per yield. */
static int launcher_fn(void *arg) {
  launch_state *st = arg;
  iof_executor_ref ex = iof_io_context_executor(st->b.io);
  iof_launch_opts o = {0};
  o.frame_allocator = st->alloc;
  o.on_done = launch_done;
  o.user = st;
  for (uint64_t left = st->iters; left > 0;) {
    int n = left < (uint64_t)st->batch ? (int)left : st->batch;
    st->done = 0;
    for (int i = 0; i < n; i++) {
      int rc = iof_run_async(ex, &o, trivial_fn, NULL);
      if (rc < 0) return rc;
    }
    /* FIFO: the n chains run (to their end) before this fiber resumes. */
    int rc = iof_yield();
    if (rc < 0) return rc;
    if (st->done != n) return -EIO;
    if (st->err) return st->err;
    left -= (uint64_t)n;
  }
  return 0;
}

static void launcher_done(void *user, int status) {
  ((launch_state *)user)->launcher_status = status;
}

static int in_fiber_body(void *arg, uint64_t iters) {
  launch_state *st = arg;
  st->iters = iters;
  st->launcher_status = -EIO; /* until its on_done says otherwise */
  iof_launch_opts o = {0};
  o.frame_allocator = st->alloc;
  o.on_done = launcher_done;
  o.user = st;
  int rc =
      iof_run_async(iof_io_context_executor(st->b.io), &o, launcher_fn, st);
  if (rc < 0) return rc;
  iof_io_context_restart(st->b.io);
  int ran = iof_io_context_run(st->b.io);
  if (ran < 0) return ran;
  return st->launcher_status;
}

/* ---- run_async_2io ------------------------------------------------------ */

/* The second thread: its own io_context and the first one's stack pool. */
typedef struct second_io {
  launch_state st;
  uint64_t iters;
  int rc;
} second_io;

static void *second_main(void *arg) {
  second_io *s = arg;
  s->rc = run_async_body(&s->st, s->iters);
  return NULL;
}

static int two_io_body(void *arg, uint64_t iters) {
  launch_state *st = arg;
  second_io s = {.iters = iters};
  s.st.batch = st->batch;
  s.st.alloc = st->alloc;
  s.st.b.io = iof_io_context_create();
  if (!s.st.b.io) return -ENOMEM;
  pthread_t t;
  int rc = pthread_create(&t, NULL, second_main, &s);
  if (rc != 0) {
    iof_io_context_destroy(s.st.b.io);
    return -rc;
  }
  rc = run_async_body(st, iters);
  pthread_join(t, NULL);
  iof_io_context_destroy(s.st.b.io);
  return rc < 0 ? rc : s.rc;
}

static void launch_teardown(void *arg) {
  launch_state *st = arg;
  /* A pool that kept no stack would have measured mmap, not recycling. */
  struct iof_stack_pool_stats s;
  if (st->b.stacks && iof_stack_pool_stats(st->b.stacks, &s) == 0 &&
      s.allocated > 0 && s.cached == 0)
    fprintf(stderr, "iof-bench: launch: the stack pool cached no stack\n");
  bench_loop_close(&st->b);
}

static int setup(launch_state *st, int batch) {
  st->batch = batch;
  st->err = 0;
  int rc = bench_loop_open(&st->b, 2 * BATCH);
  if (rc < 0) return rc;
  st->alloc = iof_stack_pool_allocator(st->b.stacks);
  /* Map a batch's stacks before the calibration starts. */
  rc = run_async_body(st, 2 * BATCH);
  if (rc < 0) bench_loop_close(&st->b);
  return rc;
}

static int batch_setup(void *arg) {
  return setup(arg, BATCH);
}
static int single_setup(void *arg) {
  return setup(arg, 1);
}

/* ---- budget_150ns ----------------------------------------------------------
 */

static int budget_body(void *arg, uint64_t iters) {
  (void)arg;
  return bench_spin_budget(BUDGET_NS, iters);
}

int bench_suite_launch(bench_ctx *ctx) {
  launch_state st = {0};
  const bench_case cases[] = {
      {.name = "spawn_pool",
       .unit = "ns/launch",
       .arg = &st,
       .setup = batch_setup,
       .body = spawn_body,
       .teardown = launch_teardown},
      {.name = "run_async",
       .unit = "ns/launch",
       .baseline = "spawn_pool",
       .arg = &st,
       .setup = batch_setup,
       .body = run_async_body,
       .teardown = launch_teardown},
      {.name = "run_async_1",
       .unit = "ns/launch",
       .baseline = "spawn_pool",
       .arg = &st,
       .setup = single_setup,
       .body = run_async_body,
       .teardown = launch_teardown},
      {.name = "run_async_in_fiber",
       .unit = "ns/launch",
       .baseline = "spawn_pool",
       .arg = &st,
       .setup = batch_setup,
       .body = in_fiber_body,
       .teardown = launch_teardown},
      {.name = "run_async_2io",
       .unit = "ns/launch",
       .baseline = "run_async",
       .arg = &st,
       .setup = batch_setup,
       .body = two_io_body,
       .teardown = launch_teardown},
      {.name = "budget_150ns", .unit = "ns/launch", .body = budget_body},
  };
  int status = 0;
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
    if (bench_run_case(ctx, &cases[i]) < 0) status = -1;
  if (bench_compare(ctx, "run_async_vs_150ns", "run_async", "budget_150ns",
                    1.0) < 0)
    status = -1;
  return status;
}
