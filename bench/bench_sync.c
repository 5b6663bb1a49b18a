/* sync: the synchronization primitives and when_all, each against an
 * in-run baseline.
 *
 *   raw_jump           a jump_fcontext round trip (there and back) between
 *                      main and a bare context: the switch floor (baseline)
 *   pthread_mutex      pthread_mutex_lock + unlock, uncontended (baseline)
 *   yield_pingpong     two fibers calling iof_yield in turn: one switch
 *                      through the executor's queue (vs raw_jump); the
 *                      floor of any wake between two fibers
 *   mutex_uncontended  iof_mutex_lock + unlock in a fiber, nobody else
 *                      around (vs pthread_mutex; target <= 1.5)
 *   mutex_handoff      one FIFO hand-off between two fibers: unlock gives
 *                      the mutex to the waiting fiber, the unlocker's next
 *                      lock queues (vs yield_pingpong)
 *   chan_pingpong      one message over an unbuffered channel between two
 *                      fibers (vs yield_pingpong)
 *   handoff_vs_raw,    the two rows above against raw_jump
 *   pingpong_vs_raw
 *   launch_1000        iof_run_async of trivial chains, 1,000 at a time,
 *                      until they end: ns per chain (baseline)
 *   when_all_1000      iof_when_all of 1,000 trivial children inside a
 *                      chain: ns per child (vs launch_1000)
 *
 * The fiber cases run on a one-thread iof_thread_pool (see below). */
#include "bench.h"
#include "bench_util.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>

#include <iofiber/iofiber.h>

/* ---- pthread_mutex ---------------------------------------------------- */

static pthread_mutex_t pmutex = PTHREAD_MUTEX_INITIALIZER;

static int pmutex_body(void *arg, uint64_t iters) {
  (void)arg;
  for (uint64_t i = 0; i < iters; i++) {
    pthread_mutex_lock(&pmutex);
    bench_keep(&pmutex);
    pthread_mutex_unlock(&pmutex);
  }
  return 0;
}

/* ---- cases run inside fibers ------------------------------------------
 * The fibers run on a one-thread iof_thread_pool: its run loop resumes the
 * next ready fiber without a system call, so the figures are the
 * primitives' and the scheduler's. (An io_context polls libev between
 * batches of ready fibers; two fibers that alternate make one batch per
 * switch, i.e. one epoll_wait each: that cost belongs to the io suite.)
 * Frames come from a stack pool that keeps 1,024 stacks per thread, so
 * that 1,000 live children recycle stacks instead of mapping new ones. */

typedef struct fib_state {
  iof_thread_pool *pool;
  iof_stack_pool *stacks;
  iof_mutex m;
  iof_chan *ping, *pong;
  uint64_t n;
  int err;
  pthread_mutex_t lock;
  pthread_cond_t cv;
  int running; /* fibers of run_fibers not finished */
  int pending; /* launch_1000: chains of the group not done */
  int b_queued;
} fib_state;

static int fib_setup(void *arg) {
  fib_state *st = arg;
  st->pool = iof_thread_pool_create(1);
  if (!st->pool) return -errno;
  iof_stack_pool_options o = {0};
  o.thread_cache = 1024;
  o.depot_max = 1024;
  st->stacks = iof_stack_pool_create(&o);
  if (!st->stacks) return -errno;
  iof_context_set_frame_allocator(iof_thread_pool_context(st->pool),
                                  iof_stack_pool_allocator(st->stacks));
  iof_mutex_init(&st->m);
  st->ping = iof_chan_create(sizeof(uint64_t), 0);
  st->pong = iof_chan_create(sizeof(uint64_t), 0);
  if (!st->ping || !st->pong) return -ENOMEM;
  pthread_mutex_init(&st->lock, NULL);
  pthread_cond_init(&st->cv, NULL);
  return 0;
}

static void fib_teardown(void *arg) {
  fib_state *st = arg;
  iof_thread_pool_destroy(st->pool);
  iof_stack_pool_destroy(st->stacks);
  iof_chan_destroy(st->ping);
  iof_chan_destroy(st->pong);
  iof_mutex_destroy(&st->m);
  pthread_cond_destroy(&st->cv);
  pthread_mutex_destroy(&st->lock);
}

static void fib_done(void *user, int status) {
  fib_state *st = user;
  pthread_mutex_lock(&st->lock);
  if (status < 0 && st->err == 0) st->err = status;
  if (--st->running == 0) pthread_cond_signal(&st->cv);
  pthread_mutex_unlock(&st->lock);
}

/* Launches the given fibers (b may be NULL) and waits until they end. */
static int run_fibers(fib_state *st, iof_fn a, iof_fn b) {
  iof_executor_ref ex = iof_thread_pool_executor(st->pool);
  iof_launch_opts o = {0};
  o.on_done = fib_done;
  o.user = st;
  st->err = 0;
  st->running = b ? 2 : 1;
  int r = iof_run_async(ex, &o, a, st);
  if (r == 0 && b) r = iof_run_async(ex, &o, b, st);
  if (r < 0) return r; /* (a lost launch leaves the case failed anyway) */
  pthread_mutex_lock(&st->lock);
  while (st->running > 0) pthread_cond_wait(&st->cv, &st->lock);
  int err = st->err;
  pthread_mutex_unlock(&st->lock);
  return err;
}

/* ---- yield_pingpong ---------------------------------------------------- */

static int yield_fn(void *arg) {
  fib_state *st = arg;
  for (uint64_t i = 0; i < st->n; i++) iof_yield();
  return 0;
}

static int yield_body(void *arg, uint64_t iters) {
  fib_state *st = arg;
  st->n = (iters + 1) / 2; /* two fibers: one switch to the other each */
  return run_fibers(st, yield_fn, yield_fn);
}

static int uncontended_fn(void *arg) {
  fib_state *st = arg;
  for (uint64_t i = 0; i < st->n; i++) {
    if (iof_mutex_lock(&st->m) != 0) st->err = -EIO;
    bench_keep(&st->m);
    iof_mutex_unlock(&st->m);
  }
  return 0;
}

static int uncontended_body(void *arg, uint64_t iters) {
  fib_state *st = arg;
  st->n = iters;
  return run_fibers(st, uncontended_fn, NULL);
}

/* Hand-off: A holds the mutex and lets B queue; from then on each
 * unlock hands the mutex to the other fiber, and each lock queues behind
 * it. Every iteration of B's loop is two hand-offs (A->B, B->A). */
static int handoff_a(void *arg) {
  fib_state *st = arg;
  iof_mutex_lock(&st->m);
  while (!st->b_queued) iof_yield(); /* B runs and queues */
  for (uint64_t i = 0; i < st->n; i++) {
    iof_mutex_unlock(&st->m);
    if (iof_mutex_lock(&st->m) != 0) st->err = -EIO;
  }
  iof_mutex_unlock(&st->m);
  return 0;
}

static int handoff_b(void *arg) {
  fib_state *st = arg;
  st->b_queued = 1; /* its lock below suspends before A runs again */
  for (uint64_t i = 0; i < st->n; i++) {
    if (iof_mutex_lock(&st->m) != 0) st->err = -EIO;
    iof_mutex_unlock(&st->m);
  }
  return 0;
}

static int handoff_body(void *arg, uint64_t iters) {
  fib_state *st = arg;
  st->n = (iters + 1) / 2;
  st->b_queued = 0;
  return run_fibers(st, handoff_a, handoff_b);
}

/* Ping-pong: A sends on ping and waits on pong; B echoes. Each round trip
 * is two messages. */
static int ping_fn(void *arg) {
  fib_state *st = arg;
  for (uint64_t i = 0; i < st->n; i++) {
    uint64_t v = i, back = 0;
    if (iof_chan_send(st->ping, &v) != 0 ||
        iof_chan_recv(st->pong, &back) != 0 || back != i)
      st->err = -EIO;
  }
  return 0;
}

static int pong_fn(void *arg) {
  fib_state *st = arg;
  for (uint64_t i = 0; i < st->n; i++) {
    uint64_t v;
    if (iof_chan_recv(st->ping, &v) != 0 || iof_chan_send(st->pong, &v) != 0)
      st->err = -EIO;
  }
  return 0;
}

static int pingpong_body(void *arg, uint64_t iters) {
  fib_state *st = arg;
  st->n = (iters + 1) / 2;
  return run_fibers(st, ping_fn, pong_fn);
}

/* ---- launch_1000 and when_all_1000 ------------------------------------ */

#define GROUP 1000

static int trivial_fn(void *arg) {
  (void)arg;
  return 0;
}

/* The baseline of when_all: a chain on the same pool launches trivial
 * chains 1,000 at a time and yields until their on_done has run (all on
 * the pool's one thread: plain counters). */
static void launch_done(void *user, int status) {
  (void)status;
  ((fib_state *)user)->pending--;
}

static int launcher_fn(void *arg) {
  fib_state *st = arg;
  iof_executor_ref ex = iof_env_current()->executor;
  iof_launch_opts o = {0};
  o.on_done = launch_done;
  o.user = st;
  uint64_t left = st->n;
  while (left > 0) {
    int k = left < GROUP ? (int)left : GROUP;
    st->pending = k;
    for (int i = 0; i < k; i++) {
      int r = iof_run_async(ex, &o, trivial_fn, NULL);
      if (r < 0) return r;
    }
    while (st->pending > 0) iof_yield();
    left -= (uint64_t)k;
  }
  return 0;
}

static int launch_body(void *arg, uint64_t iters) {
  fib_state *st = arg;
  st->n = iters;
  return run_fibers(st, launcher_fn, NULL);
}

static iof_fn group_fns[GROUP];

static int when_all_fn(void *arg) {
  fib_state *st = arg;
  uint64_t left = st->n;
  while (left > 0) {
    size_t k = left < GROUP ? (size_t)left : GROUP;
    int r = iof_when_all(k, group_fns, NULL, NULL);
    if (r < 0) {
      st->err = r;
      return r;
    }
    left -= k;
  }
  return 0;
}

static int when_all_body(void *arg, uint64_t iters) {
  fib_state *st = arg;
  st->n = iters;
  return run_fibers(st, when_all_fn, NULL);
}

int bench_suite_sync(bench_ctx *ctx) {
  bench_raw raw = {0};
  fib_state fib = {0};
  for (int i = 0; i < GROUP; i++) group_fns[i] = trivial_fn;
  const bench_case cases[] = {
      bench_raw_jump_case("raw_jump", &raw),
      {.name = "pthread_mutex", .unit = "ns/lock+unlock", .body = pmutex_body},
      {.name = "yield_pingpong",
       .unit = "ns/switch",
       .baseline = "raw_jump",
       .arg = &fib,
       .setup = fib_setup,
       .body = yield_body,
       .teardown = fib_teardown},
      {.name = "mutex_uncontended",
       .unit = "ns/lock+unlock",
       .baseline = "pthread_mutex",
       .target = 1.5,
       .arg = &fib,
       .setup = fib_setup,
       .body = uncontended_body,
       .teardown = fib_teardown},
      {.name = "mutex_handoff",
       .unit = "ns/handoff",
       .baseline = "yield_pingpong",
       .arg = &fib,
       .setup = fib_setup,
       .body = handoff_body,
       .teardown = fib_teardown},
      {.name = "chan_pingpong",
       .unit = "ns/message",
       .baseline = "yield_pingpong",
       .arg = &fib,
       .setup = fib_setup,
       .body = pingpong_body,
       .teardown = fib_teardown},
      {.name = "launch_1000",
       .unit = "ns/chain",
       .arg = &fib,
       .setup = fib_setup,
       .body = launch_body,
       .teardown = fib_teardown},
      {.name = "when_all_1000",
       .unit = "ns/child",
       .baseline = "launch_1000",
       .arg = &fib,
       .setup = fib_setup,
       .body = when_all_body,
       .teardown = fib_teardown},
  };
  int status = 0;
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
    if (bench_run_case(ctx, &cases[i]) < 0) status = -1;
  if (bench_compare(ctx, "handoff_vs_raw", "mutex_handoff", "raw_jump", 0) < 0)
    status = -1;
  if (bench_compare(ctx, "pingpong_vs_raw", "chan_pingpong", "raw_jump", 0) < 0)
    status = -1;
  return status;
}
