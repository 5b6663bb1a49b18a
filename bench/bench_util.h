/* Helpers shared by the suites (switch, sync, post, strand, pool, launch):
 * the raw-switch baseline, and running groups of fibers on an io_context
 * from the benchmark's main thread. Not a suite: nothing here is listed in
 * suites.h. */
#ifndef IOF_BENCH_UTIL_H
#define IOF_BENCH_UTIL_H

#include "bench.h"

#include <iofiber/iofiber.h>

/* ---- raw_jump ------------------------------------------------------------
 * The switch/raw_jump measurement (a jump_fcontext round trip between the
 * caller and a bare context on a malloc'ed 64 KiB stack), for suites that
 * need the switch floor as an in-run baseline. */

typedef struct bench_raw {
  void *stack;
  void *ctx; /* iof_fctx: where the bare context waits */
} bench_raw;

/* A baseline case named `name` (unit ns/roundtrip) measuring into *st. */
bench_case bench_raw_jump_case(const char *name, bench_raw *st);

/* ---- fibers on an io_context --------------------------------------------- */

/* An io_context whose fibers take their frames from a dedicated stack pool
 * keeping `cache` stacks per thread (so groups of up to `cache` live fibers
 * recycle stacks instead of mapping new ones). */
typedef struct bench_loop {
  iof_io_context *io;
  iof_stack_pool *stacks;
} bench_loop;

/* 0 or a negative errno (nothing left to close then). */
int bench_loop_open(bench_loop *b, size_t cache);
/* Destroys the io_context, then the pool; safe on a zeroed or closed one. */
void bench_loop_close(bench_loop *b);

/* Maximum fibers of one group. */
#define BENCH_GROUP_MAX 256

/* What each fiber of a group gets as its argument. */
typedef struct bench_share {
  uint64_t n; /* this fiber's share of the operations */
  void *user; /* as passed to bench_run_group */
} bench_share;

/* Launches `nfibers` (1..BENCH_GROUP_MAX) chains fn(share), fiber i on
 * ex[i % nex], splitting `iters` operations between them as evenly as
 * possible, then runs b->io on this thread until they have all ended. The
 * executors' context must be b->io's (the io_context itself or strands over
 * it). 0, the first negative status a fiber returned, or a launch/run
 * error. */
int bench_run_group_on(bench_loop *b, const iof_executor_ref *ex, int nex,
                       int nfibers, uint64_t iters, iof_fn fn, void *user);

/* bench_run_group_on with every fiber on b->io's own executor. */
int bench_run_group(bench_loop *b, int nfibers, uint64_t iters, iof_fn fn,
                    void *user);

/* A fiber body: share->n calls to iof_yield(); 0 or the first error. */
int bench_yield_fn(void *share);

/* The body of a budget row (not a measurement of the runtime): spins for
 * ns nanoseconds per operation, turning an absolute goal into a row that
 * a case can be compared against. */
int bench_spin_budget(uint64_t ns, uint64_t iters);

/* Spin-wait hint for threads polling a flag. */
static inline void bench_pause(void) {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  __asm__ volatile("yield");
#endif
}

#endif
