/* post: the cost of one post + resume on an io_context, against the raw
 * switch, and of a post from another thread, against the same-thread one.
 *
 *   raw_jump            a jump_fcontext round trip (baseline)
 *   yield_1             one fiber looping on iof_yield() alone on its
 *                       io_context: nothing else is ready, so 63 of 64
 *                       yields continue at once and every 64th goes through
 *                       the run loop, which polls libev (vs raw_jump;
 *                       target <= 3)
 *   yield_64            the same with 64 fibers in rotation: a run-loop
 *                       batch of 64, and 64 stacks and control blocks
 *                       touched in turn (vs raw_jump; target <= 3)
 *   cross_thread_post   64 fibers that each hand themselves to a producer
 *                       thread when they suspend; the producer posts them
 *                       back with iof_executor_post (the io_context's remote
 *                       queue and its ev_async wake-up): ns per cross-thread
 *                       post + resume (vs yield_64). The io thread sleeps in
 *                       epoll_wait whenever it has run every fiber before
 *                       the producer posted the next one: wake-ups are part
 *                       of the figure. */
#include "bench_util.h"

#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>

#define GROUP 64

typedef struct post_state {
  bench_loop b;
} post_state;

static int yield64_body(void *arg, uint64_t iters);

static void io_teardown(void *arg) {
  bench_loop_close(&((post_state *)arg)->b);
}

/* Maps the group's stacks once, outside the timed region and before the
 * calibration, whose first steps must not be dominated by page faults. */
static int io_setup(void *arg) {
  int rc = bench_loop_open(&((post_state *)arg)->b, 2 * GROUP);
  if (rc == 0) rc = yield64_body(arg, GROUP);
  if (rc < 0) io_teardown(arg);
  return rc;
}

/* ---- yield ----------------------------------------------------------------
 */

static int yield1_body(void *arg, uint64_t iters) {
  bench_loop *b = &((post_state *)arg)->b;
  return bench_run_group(b, 1, iters, bench_yield_fn, NULL);
}

static int yield64_body(void *arg, uint64_t iters) {
  bench_loop *b = &((post_state *)arg)->b;
  return bench_run_group(b, GROUP, iters, bench_yield_fn, NULL);
}

/* ---- cross_thread_post ----------------------------------------------------
 * A fiber suspends with an awaitable whose suspend pushes a node (on the
 * fiber's stack) onto a lock-free stack; the producer thread takes the whole
 * stack at once and posts each fiber back to the io_context. The node is
 * read before the post: once posted, the fiber may run and reuse it. */

typedef struct xpost_state xpost_state;

typedef struct mail {
  iof_fiber *h;
  struct mail *next;
  xpost_state *st;
} mail;

struct xpost_state {
  bench_loop b;
  iof_executor_ref ex;
  _Atomic(mail *) box;
  atomic_bool quit;
  atomic_int err; /* a failed post (the producer cannot return it) */
  pthread_t producer;
  bool started;
};

static void *producer_main(void *arg) {
  xpost_state *st = arg;
  unsigned idle = 0;
  while (!atomic_load_explicit(&st->quit, memory_order_relaxed)) {
    mail *m = atomic_exchange_explicit(&st->box, NULL, memory_order_acquire);
    if (!m) {
      /* Spin while the io thread is busy; yield the core if the wait
       * lasts (between runs, or on a machine with one core). */
      if (++idle < 256)
        bench_pause();
      else
        sched_yield();
      continue;
    }
    idle = 0;
    while (m) {
      mail *next = m->next;
      iof_fiber *h = m->h;
      /* Refused only once the context shuts down, which no case does; the
       * fiber would then be lost and the run would not end. */
      int rc = iof_executor_post(st->ex, h);
      if (rc < 0) atomic_store(&st->err, rc);
      m = next;
    }
  }
  return NULL;
}

static iof_fiber *mail_suspend(void *self, iof_fiber *h, const iof_env *env) {
  (void)env;
  mail *m = self;
  xpost_state *st = m->st;
  m->h = h;
  mail *head = atomic_load_explicit(&st->box, memory_order_relaxed);
  do m->next = head;
  while (!atomic_compare_exchange_weak_explicit(
      &st->box, &head, m, memory_order_release, memory_order_relaxed));
  return NULL;
}

static const iof_awaitable_vtbl mail_vtbl = {NULL, mail_suspend, NULL};

static int xpost_fn(void *arg) {
  bench_share *sh = arg;
  xpost_state *st = sh->user;
  for (uint64_t i = 0; i < sh->n; i++) {
    mail m = {NULL, NULL, st};
    int rc = iof_await(&m, &mail_vtbl);
    if (rc < 0) return rc;
  }
  return 0;
}

static int xpost_body(void *arg, uint64_t iters);
static void xpost_teardown(void *arg);

static int xpost_setup(void *arg) {
  xpost_state *st = arg;
  int rc = bench_loop_open(&st->b, 2 * GROUP);
  if (rc < 0) return rc;
  st->ex = iof_io_context_executor(st->b.io);
  atomic_init(&st->box, NULL);
  atomic_init(&st->quit, false);
  atomic_init(&st->err, 0);
  rc = pthread_create(&st->producer, NULL, producer_main, st);
  if (rc != 0) {
    bench_loop_close(&st->b);
    return -rc;
  }
  st->started = true;
  rc = xpost_body(st, GROUP); /* warm-up: map the group's stacks */
  if (rc < 0) xpost_teardown(st);
  return rc;
}

static int xpost_body(void *arg, uint64_t iters) {
  xpost_state *st = arg;
  int rc = bench_run_group(&st->b, GROUP, iters, xpost_fn, st);
  int err = atomic_exchange(&st->err, 0);
  return rc < 0 ? rc : err;
}

static void xpost_teardown(void *arg) {
  xpost_state *st = arg;
  if (st->started) {
    atomic_store(&st->quit, true);
    pthread_join(st->producer, NULL);
    st->started = false;
  }
  bench_loop_close(&st->b);
}

int bench_suite_post(bench_ctx *ctx) {
  bench_raw raw = {0};
  post_state ps = {0};
  xpost_state xs = {0};
  const bench_case cases[] = {
      bench_raw_jump_case("raw_jump", &raw),
      {.name = "yield_1",
       .unit = "ns/yield",
       .baseline = "raw_jump",
       .target = 3.0,
       .arg = &ps,
       .setup = io_setup,
       .body = yield1_body,
       .teardown = io_teardown},
      {.name = "yield_64",
       .unit = "ns/yield",
       .baseline = "raw_jump",
       .target = 3.0,
       .arg = &ps,
       .setup = io_setup,
       .body = yield64_body,
       .teardown = io_teardown},
      {.name = "cross_thread_post",
       .unit = "ns/post",
       .baseline = "yield_64",
       .arg = &xs,
       .setup = xpost_setup,
       .body = xpost_body,
       .teardown = xpost_teardown},
  };
  int status = 0;
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
    if (bench_run_case(ctx, &cases[i]) < 0) status = -1;
  return status;
}
