/* Helpers shared by the scheduler suites: see bench_util.h. */
#include "bench_util.h"

#include <errno.h>
#include <stdlib.h>

#include "fiber/fcontext.h"

/* ---- raw_jump (the switch suite's measurement) --------------------------- */

#define RAW_STACK_SIZE ((size_t)64 * 1024)

/* Bounces every jump straight back; abandoned when the case ends (returning
 * from an fcontext entry would exit the thread). */
static void raw_entry(iof_transfer t) {
  for (;;) t = jump_fcontext(t.fctx, NULL);
}

static int raw_setup(void *arg) {
  bench_raw *st = arg;
  st->stack = malloc(RAW_STACK_SIZE);
  if (!st->stack) return -ENOMEM;
  st->ctx = make_fcontext((char *)st->stack + RAW_STACK_SIZE, RAW_STACK_SIZE,
                          raw_entry);
  /* Enter once: the timed loop measures steady-state round trips only. */
  st->ctx = jump_fcontext(st->ctx, NULL).fctx;
  return 0;
}

static int raw_body(void *arg, uint64_t iters) {
  bench_raw *st = arg;
  iof_fctx ctx = st->ctx;
  for (uint64_t i = 0; i < iters; i++) ctx = jump_fcontext(ctx, NULL).fctx;
  st->ctx = ctx;
  return 0;
}

static void raw_teardown(void *arg) {
  bench_raw *st = arg;
  /* Parked inside jump_fcontext for good: the stack can go. */
  free(st->stack);
  st->stack = NULL;
}

bench_case bench_raw_jump_case(const char *name, bench_raw *st) {
  bench_case c = {.name = name,
                  .unit = "ns/roundtrip",
                  .arg = st,
                  .setup = raw_setup,
                  .body = raw_body,
                  .teardown = raw_teardown};
  return c;
}

/* ---- fibers on an io_context --------------------------------------------- */

int bench_loop_open(bench_loop *b, size_t cache) {
  iof_stack_pool_options o = {0};
  o.thread_cache = cache;
  o.depot_max = cache;
  b->stacks = iof_stack_pool_create(&o);
  if (!b->stacks) return -errno;
  b->io = iof_io_context_create();
  if (!b->io) {
    int err = -errno;
    iof_stack_pool_destroy(b->stacks);
    b->stacks = NULL;
    return err;
  }
  iof_context_set_frame_allocator(iof_io_context_context(b->io),
                                  iof_stack_pool_allocator(b->stacks));
  return 0;
}

void bench_loop_close(bench_loop *b) {
  if (b->io) iof_io_context_destroy(b->io);
  if (b->stacks) iof_stack_pool_destroy(b->stacks);
  b->io = NULL;
  b->stacks = NULL;
}

typedef struct group {
  bench_share share[BENCH_GROUP_MAX];
  int done;
  int err;
} group;

/* on_done runs on the chain's executor, i.e. on this thread. */
static void group_done(void *user, int status) {
  group *g = user;
  g->done++;
  if (status < 0 && g->err == 0) g->err = status;
}

int bench_run_group_on(bench_loop *b, const iof_executor_ref *ex, int nex,
                       int nfibers, uint64_t iters, iof_fn fn, void *user) {
  if (nfibers < 1 || nfibers > BENCH_GROUP_MAX || nex < 1) return -EINVAL;
  group g;
  g.done = 0;
  g.err = 0;
  iof_launch_opts o = {0};
  o.on_done = group_done;
  o.user = &g;
  uint64_t each = iters / (uint64_t)nfibers;
  uint64_t rest = iters % (uint64_t)nfibers;
  int launched = 0, rc = 0;
  for (int i = 0; i < nfibers; i++) {
    g.share[i].n = each + ((uint64_t)i < rest);
    g.share[i].user = user;
    rc = iof_run_async(ex[i % nex], &o, fn, &g.share[i]);
    if (rc < 0) break;
    launched++;
  }
  /* A stopped context (the previous run drained its work) runs again only
   * after a restart. */
  iof_io_context_restart(b->io);
  int ran = iof_io_context_run(b->io);
  if (rc == 0 && ran < 0) rc = ran;
  if (rc == 0 && g.done != launched) rc = -EIO; /* a chain did not end */
  if (rc == 0) rc = g.err;
  return rc;
}

int bench_run_group(bench_loop *b, int nfibers, uint64_t iters, iof_fn fn,
                    void *user) {
  iof_executor_ref ex = iof_io_context_executor(b->io);
  return bench_run_group_on(b, &ex, 1, nfibers, iters, fn, user);
}

int bench_yield_fn(void *arg) {
  uint64_t n = ((bench_share *)arg)->n;
  for (uint64_t i = 0; i < n; i++) {
    int rc = iof_yield();
    if (rc < 0) return rc;
  }
  return 0;
}

int bench_spin_budget(uint64_t ns, uint64_t iters) {
  uint64_t t0 = bench_now_ns(), until = iters * ns;
  while (bench_now_ns() - t0 < until) bench_pause();
  return 0;
}
