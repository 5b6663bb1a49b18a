/* pool: iof_thread_pool with one and two threads, against the same work
 * done on an io_context by its own thread.
 *
 * Hops: fibers on an io_context call iof_run(pool, trivial fn) in a loop;
 * each call is two cross-thread hops (to a pool thread and back to the
 * io_context). The same-thread equivalent of a hop is one iof_yield() on the
 * io_context: a post to the fiber's executor and a resume by its run loop.
 *
 *   io_yield_1    one fiber yielding on the io_context (baseline, ns/hop)
 *   hop_1thr_1    one fiber hopping to a 1-thread pool and back: the hop's
 *                 latency, both threads sleep in between (vs io_yield_1)
 *   io_yield_64   64 fibers yielding on the io_context (baseline)
 *   hop_1thr_64   64 fibers hopping to a 1-thread pool (vs io_yield_64)
 *   hop_2thr_64   64 fibers hopping to a 2-thread pool (vs io_yield_64)
 *
 * Launches: the benchmark's main thread (no fiber) calls iof_run_async for
 * trivial chains 64 at a time and waits until their on_done ran, with an
 * iof_event (the runtime's own wait for a plain thread, which watches its
 * flag briefly before it sleeps), or with a pthread condition variable.
 *
 *   io_launch     on an io_context, then runs it on the same thread
 *                 (baseline, ns/launch)
 *   launch_1thr   on a 1-thread pool, waiting on an iof_event (vs
 *                 io_launch; target <= 3)
 *   launch_1thr_cv  the same, waiting on a condition variable: the
 *                 sleeping thread's wake-up in every batch (vs io_launch)
 *   launch_2thr   on a 2-thread pool, iof_event (vs io_launch)
 *   line_rt       no runtime: a cache line's round trip between two
 *                 threads, the host's price of every cross-thread hand-off
 *
 * The hop's goal is absolute: budget_5us spins for 5 us per operation (not
 * a measurement of the runtime) and hop_1thr_1_vs_5us is hop_1thr_1's
 * samples against it (target <= 1).
 *
 * Every context takes its frames from one stack pool (128 stacks per
 * thread, 1,024 in the depot). Frames of pool launches are allocated on the
 * main thread and freed on a pool thread, so they reach the main thread
 * again through the pool's shared depot: that cost is part of the figure. */
#include "bench_util.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>

#define GROUP 64 /* fibers of the multi-fiber hop cases */
#define HOP_BUDGET_NS 5000
#define BATCH 64 /* chains per launch batch */

typedef struct pool_state {
  bench_loop b;
  iof_thread_pool *pool;
  iof_executor_ref pool_ex;
  int nfibers;
  /* launches */
  atomic_long left; /* chains of the batch whose on_done has not run */
  atomic_int err;
  bool use_cv; /* wait on cv, not done */
  pthread_mutex_t lock;
  pthread_cond_t cv;
  iof_event done; /* auto-reset */
  bool sync_init;
} pool_state;

static int trivial_fn(void *arg) {
  bench_keep(arg);
  return 0;
}

static void pool_teardown(void *arg) {
  pool_state *st = arg;
  if (st->pool) iof_thread_pool_destroy(st->pool);
  st->pool = NULL;
  bench_loop_close(&st->b);
  if (st->sync_init) {
    pthread_cond_destroy(&st->cv);
    pthread_mutex_destroy(&st->lock);
    iof_event_destroy(&st->done);
    st->sync_init = false;
  }
}

/* An io_context, and a pool of `threads` threads (none if 0), sharing the
 * io_context's stack pool. */
static int open_contexts(pool_state *st, size_t threads, int nfibers) {
  st->nfibers = nfibers;
  atomic_init(&st->left, 0);
  atomic_init(&st->err, 0);
  pthread_mutex_init(&st->lock, NULL);
  pthread_cond_init(&st->cv, NULL);
  int rc = iof_event_init(&st->done, false);
  if (rc < 0) return rc;
  st->sync_init = true;
  rc = bench_loop_open(&st->b, 2 * GROUP);
  if (rc < 0) return rc;
  if (threads == 0) return 0;
  st->pool = iof_thread_pool_create(threads);
  if (!st->pool) return -errno;
  st->pool_ex = iof_thread_pool_executor(st->pool);
  iof_context_set_frame_allocator(iof_thread_pool_context(st->pool),
                                  iof_stack_pool_allocator(st->b.stacks));
  return 0;
}

/* ---- hops -----------------------------------------------------------------
 */

static int hop_fn(void *arg) {
  bench_share *sh = arg;
  pool_state *st = sh->user;
  uint64_t calls = (sh->n + 1) / 2; /* two hops per call */
  for (uint64_t i = 0; i < calls; i++) {
    int rc = iof_run(st->pool_ex, NULL, trivial_fn, NULL);
    if (rc < 0) return rc;
  }
  return 0;
}

static int yield_body(void *arg, uint64_t iters) {
  pool_state *st = arg;
  return bench_run_group(&st->b, st->nfibers, iters, bench_yield_fn, NULL);
}

static int hop_body(void *arg, uint64_t iters) {
  pool_state *st = arg;
  /* Each fiber rounds its share up to whole calls: at most one extra hop
   * per fiber and run, against thousands per run. */
  return bench_run_group(&st->b, st->nfibers, iters, hop_fn, st);
}

static int setup_warm(pool_state *st, size_t threads, int nfibers,
                      int (*body)(void *, uint64_t)) {
  int rc = open_contexts(st, threads, nfibers);
  /* Map the group's stacks (and wake the threads) before calibrating. */
  if (rc == 0) rc = body(st, 2 * (uint64_t)nfibers);
  if (rc < 0) pool_teardown(st);
  return rc;
}

static int io_yield_1_setup(void *arg) {
  return setup_warm(arg, 0, 1, yield_body);
}
static int hop_1thr_1_setup(void *arg) {
  return setup_warm(arg, 1, 1, hop_body);
}
static int io_yield_64_setup(void *arg) {
  return setup_warm(arg, 0, GROUP, yield_body);
}
static int hop_1thr_64_setup(void *arg) {
  return setup_warm(arg, 1, GROUP, hop_body);
}
static int hop_2thr_64_setup(void *arg) {
  return setup_warm(arg, 2, GROUP, hop_body);
}

/* ---- launches -------------------------------------------------------------
 */

static void launch_done(void *user, int status) {
  pool_state *st = user;
  if (status < 0) atomic_store(&st->err, status);
  if (atomic_fetch_sub(&st->left, 1) == 1) {
    if (!st->use_cv) {
      (void)iof_event_set(&st->done);
      return;
    }
    pthread_mutex_lock(&st->lock);
    pthread_cond_signal(&st->cv);
    pthread_mutex_unlock(&st->lock);
  }
}

/* Launches n trivial chains on ex; 0 or the launch error (the chains
 * already launched still count in st->left). */
static int launch_batch(pool_state *st, iof_executor_ref ex, long n) {
  iof_launch_opts o = {0};
  o.on_done = launch_done;
  o.user = st;
  atomic_store(&st->left, n);
  for (long i = 0; i < n; i++) {
    int rc = iof_run_async(ex, &o, trivial_fn, NULL);
    if (rc < 0) {
      atomic_fetch_sub(&st->left, n - i);
      return rc;
    }
  }
  return 0;
}

static int io_launch_body(void *arg, uint64_t iters) {
  pool_state *st = arg;
  iof_executor_ref ex = iof_io_context_executor(st->b.io);
  for (uint64_t done = 0; done < iters;) {
    long n = iters - done < BATCH ? (long)(iters - done) : BATCH;
    int rc = launch_batch(st, ex, n);
    iof_io_context_restart(st->b.io);
    int ran = iof_io_context_run(st->b.io);
    if (rc == 0 && ran < 0) rc = ran;
    if (rc == 0 && atomic_load(&st->left) != 0) rc = -EIO;
    if (rc < 0) return rc;
    done += (uint64_t)n;
  }
  return atomic_exchange(&st->err, 0);
}

static int pool_launch_body(void *arg, uint64_t iters) {
  pool_state *st = arg;
  for (uint64_t done = 0; done < iters;) {
    long n = iters - done < BATCH ? (long)(iters - done) : BATCH;
    int rc = launch_batch(st, st->pool_ex, n);
    if (st->use_cv) {
      pthread_mutex_lock(&st->lock);
      while (atomic_load(&st->left) > 0) pthread_cond_wait(&st->cv, &st->lock);
      pthread_mutex_unlock(&st->lock);
    } else {
      while (atomic_load(&st->left) > 0) {
        int w = iof_event_wait(&st->done);
        if (w < 0) return w;
      }
    }
    if (rc < 0) return rc;
    done += (uint64_t)n;
  }
  return atomic_exchange(&st->err, 0);
}

static int io_launch_setup(void *arg) {
  return setup_warm(arg, 0, BATCH, io_launch_body);
}
static int launch_1thr_setup(void *arg) {
  ((pool_state *)arg)->use_cv = false;
  return setup_warm(arg, 1, BATCH, pool_launch_body);
}
static int launch_1thr_cv_setup(void *arg) {
  ((pool_state *)arg)->use_cv = true;
  return setup_warm(arg, 1, BATCH, pool_launch_body);
}
static int launch_2thr_setup(void *arg) {
  ((pool_state *)arg)->use_cv = false;
  return setup_warm(arg, 2, BATCH, pool_launch_body);
}

/* ---- the machine's own cross-thread cost --------------------------------
 * A cache line's round trip between two threads, runtime-free: what one
 * hand-off of a line from thread to thread costs here. A launch onto
 * another thread moves several (the frame's control block, the queue's
 * head, the registry's), so launch_1thr follows this figure, which
 * depends on where the hypervisor or scheduler put the two threads. */
typedef struct line_rt {
  _Alignas(64) atomic_int ball; /* 1: the peer's turn */
  _Alignas(64) atomic_bool quit;
  pthread_t peer;
} line_rt;

static void *line_peer(void *arg) {
  line_rt *l = arg;
  while (!atomic_load_explicit(&l->quit, memory_order_relaxed)) {
    if (atomic_load_explicit(&l->ball, memory_order_acquire) == 1)
      atomic_store_explicit(&l->ball, 0, memory_order_release);
    else
      bench_pause();
  }
  return NULL;
}

static int line_rt_setup(void *arg) {
  line_rt *l = arg;
  atomic_init(&l->ball, 0);
  atomic_init(&l->quit, false);
  int rc = pthread_create(&l->peer, NULL, line_peer, l);
  return rc ? -rc : 0;
}

static int line_rt_body(void *arg, uint64_t iters) {
  line_rt *l = arg;
  for (uint64_t i = 0; i < iters; i++) {
    atomic_store_explicit(&l->ball, 1, memory_order_release);
    while (atomic_load_explicit(&l->ball, memory_order_acquire) != 0)
      bench_pause();
  }
  return 0;
}

static void line_rt_teardown(void *arg) {
  line_rt *l = arg;
  atomic_store(&l->quit, true);
  pthread_join(l->peer, NULL);
}

static int budget_body(void *arg, uint64_t iters) {
  (void)arg;
  return bench_spin_budget(HOP_BUDGET_NS, iters);
}

int bench_suite_pool(bench_ctx *ctx) {
  pool_state st = {0};
  line_rt line;
#define POOL_CASE(nm, un, base, su, bo)                                        \
  {                                                                            \
    .name = nm, .unit = un, .baseline = base, .arg = &st, .setup = su,         \
    .body = bo, .teardown = pool_teardown                                      \
  }
  const bench_case cases[] = {
      POOL_CASE("io_yield_1", "ns/hop", NULL, io_yield_1_setup, yield_body),
      POOL_CASE("hop_1thr_1", "ns/hop", "io_yield_1", hop_1thr_1_setup,
                hop_body),
      POOL_CASE("io_yield_64", "ns/hop", NULL, io_yield_64_setup, yield_body),
      POOL_CASE("hop_1thr_64", "ns/hop", "io_yield_64", hop_1thr_64_setup,
                hop_body),
      POOL_CASE("hop_2thr_64", "ns/hop", "io_yield_64", hop_2thr_64_setup,
                hop_body),
      POOL_CASE("io_launch", "ns/launch", NULL, io_launch_setup,
                io_launch_body),
      {.name = "launch_1thr",
       .unit = "ns/launch",
       .baseline = "io_launch",
       .target = 3.0,
       .arg = &st,
       .setup = launch_1thr_setup,
       .body = pool_launch_body,
       .teardown = pool_teardown},
      POOL_CASE("launch_1thr_cv", "ns/launch", "io_launch",
                launch_1thr_cv_setup, pool_launch_body),
      POOL_CASE("launch_2thr", "ns/launch", "io_launch", launch_2thr_setup,
                pool_launch_body),
      {.name = "line_rt",
       .unit = "ns/round trip",
       .arg = &line,
       .setup = line_rt_setup,
       .body = line_rt_body,
       .teardown = line_rt_teardown},
      {.name = "budget_5us", .unit = "ns/hop", .body = budget_body},
  };
#undef POOL_CASE
  int status = 0;
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
    if (bench_run_case(ctx, &cases[i]) < 0) status = -1;
  if (bench_compare(ctx, "hop_1thr_1_vs_5us", "hop_1thr_1", "budget_5us", 1.0) <
      0)
    status = -1;
  return status;
}
