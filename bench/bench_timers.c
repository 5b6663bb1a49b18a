/* timers: what a timed wait costs when many are pending.
 *
 * Each case keeps N fibers parked in timed waits on one io_context (a
 * third in iof_sleep_for, a third in iof_cond_timedwait, a third in
 * iof_chan_recv_until, all with deadlines an hour away), N = 1,000, 10,000
 * and 100,000 (--quick: 1,000 and 10,000), then measures one timed
 * operation that is armed and cancelled before its deadline:
 *
 *   chan_until.N  iof_chan_recv_until on an unbuffered channel, a partner
 *                 fiber sending: each receive arms its deadline, the send
 *                 cancels it
 *   cond_timed.N  iof_cond_timedwait woken by a partner's iof_cond_signal
 *   timer.N       iof_timer_expires_after + iof_timer_wait on an iof_timer,
 *                 woken by a partner's iof_timer_cancel
 *
 * Each .10k and .100k row runs paired with the same operation at 1,000
 * (the baseline row .1k): the ratio is how the cost grows. The two sides
 * of a pair are never set up at once (`alone`): parked waiters of one
 * io_context must not slow the other's operation. The target is
 * logarithmic growth: log(N) / log(1000). Only the public API is used.
 * Fibers get 16 KiB stacks from iof_malloc_allocator(): 100,000 pooled
 * stacks with guard pages would need 200,000 mappings, over the default
 * vm.max_map_count. */
#include "bench.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <iofiber/iofiber.h>

#define HOUR_NS ((int64_t)3600 * 1000000000)
#define STACK IOF_FIBER_STACK_MIN

enum op { OP_CHAN, OP_COND, OP_TIMER };

typedef struct tstate {
  char name[32];
  enum op op;
  int n;           /* parked fibers */
  double budget_s; /* parking them may take this long, else -ETIME */
  iof_io_context *io;
  iof_stop_source stop;
  iof_mutex m;
  iof_cond c;
  iof_chan *idle_ch; /* never sent on: the parked receivers' */
  /* parked fibers */
  int parked, live;
  /* the measured pair */
  iof_chan *ch;
  iof_mutex pm;
  iof_cond pc;
  iof_timer *timer;
  uint64_t todo;
  bool flag, waiter_done;
  int pair_live, err;
  bool ready;
} tstate;

static int parked_fn(void *arg) {
  tstate *t = arg;
  int which = t->parked++ % 3;
  int64_t deadline = iof_now_ns() + HOUR_NS;
  if (which == 0) return iof_sleep_until(deadline);
  if (which == 1) {
    int r = iof_mutex_lock(&t->m);
    if (r < 0) return r;
    r = iof_cond_timedwait(&t->c, &t->m, deadline);
    iof_mutex_unlock(&t->m);
    return r;
  }
  int v;
  return iof_chan_recv_until(t->idle_ch, &v, deadline);
}

static void parked_done(void *user, int status) {
  (void)status;
  ((tstate *)user)->live--;
}

static void pair_done(void *user, int status) {
  tstate *t = user;
  if (status < 0 && status != -ECANCELED && !t->err) t->err = status;
  if (--t->pair_live == 0) iof_io_context_stop(t->io);
}

static void tstate_teardown(void *arg) {
  tstate *t = arg;
  if (!t->io) return;
  iof_stop_source_request(&t->stop);
  iof_cond_broadcast(&t->c);
  if (t->idle_ch) iof_chan_close(t->idle_ch);
  iof_io_context_restart(t->io);
  for (int i = 0; i < 1000 && t->live > 0; i++)
    iof_io_context_run_for(t->io, 10 * 1000 * 1000);
  if (t->live > 0)
    fprintf(stderr, "iof-bench: timers/%s: %d fibers did not end\n", t->name,
            t->live);
  iof_io_context_destroy(t->io);
  t->io = NULL;
  if (t->timer) iof_timer_destroy(t->timer);
  t->timer = NULL;
  if (t->idle_ch) iof_chan_destroy(t->idle_ch);
  if (t->ch) iof_chan_destroy(t->ch);
  t->idle_ch = t->ch = NULL;
  iof_cond_destroy(&t->c);
  iof_cond_destroy(&t->pc);
  iof_mutex_destroy(&t->m);
  iof_mutex_destroy(&t->pm);
  iof_stop_source_destroy(&t->stop);
}

static int tstate_setup(void *arg) {
  tstate *t = arg;
  memset((char *)t + offsetof(tstate, io), 0, sizeof *t - offsetof(tstate, io));
  t->io = iof_io_context_create();
  if (!t->io) return -errno;
  iof_context_set_frame_allocator(iof_io_context_context(t->io),
                                  iof_malloc_allocator());
  int rc = iof_stop_source_init(&t->stop);
  if (rc == 0) rc = iof_mutex_init(&t->m);
  if (rc == 0) rc = iof_cond_init(&t->c);
  if (rc == 0) rc = iof_mutex_init(&t->pm);
  if (rc == 0) rc = iof_cond_init(&t->pc);
  t->idle_ch = iof_chan_create(sizeof(int), 0);
  t->ch = iof_chan_create(sizeof(int), 0);
  t->timer = iof_timer_create(t->io);
  if (rc == 0 && (!t->idle_ch || !t->ch || !t->timer)) rc = -ENOMEM;
  if (rc < 0) {
    tstate_teardown(t);
    return rc;
  }
  iof_launch_opts o = {0};
  o.stop_token = iof_stop_source_token(&t->stop);
  o.stack_size = STACK;
  o.on_done = parked_done;
  o.user = t;
  uint64_t t0 = bench_now_ns();
  for (int i = 0; i < t->n && rc == 0; i++) {
    rc = iof_run_async(iof_io_context_executor(t->io), &o, parked_fn, t);
    if (rc == 0) t->live++;
    /* Park in batches, so that a cost growing with the number already
     * parked shows up before the whole N is in. */
    if (rc == 0 && (i % 1000 == 999 || i == t->n - 1)) {
      iof_io_context_poll(t->io);
      if ((double)(bench_now_ns() - t0) / 1e9 > t->budget_s) rc = -ETIME;
    }
  }
  /* Let every fiber reach its wait. */
  for (int i = 0; rc == 0 && t->parked < t->n && i < 1000; i++)
    iof_io_context_poll(t->io);
  if (rc == 0 && t->parked < t->n) rc = -ETIMEDOUT;
  if (rc < 0) {
    tstate_teardown(t);
    return rc;
  }
  return 0;
}

/* ---- the measured pairs -------------------------------------------------- */

static int chan_waiter(void *arg) {
  tstate *t = arg;
  for (uint64_t i = 0; i < t->todo; i++) {
    int v;
    int r = iof_chan_recv_until(t->ch, &v, iof_now_ns() + HOUR_NS);
    if (r < 0) return r;
  }
  return 0;
}

static int chan_partner(void *arg) {
  tstate *t = arg;
  for (uint64_t i = 0; i < t->todo; i++) {
    int v = (int)i;
    int r = iof_chan_send(t->ch, &v);
    if (r < 0) return r;
  }
  return 0;
}

static int cond_waiter(void *arg) {
  tstate *t = arg;
  int rc = 0;
  iof_mutex_lock(&t->pm);
  for (uint64_t i = 0; i < t->todo && rc == 0; i++) {
    while (!t->flag && rc == 0)
      rc = iof_cond_timedwait(&t->pc, &t->pm, iof_now_ns() + HOUR_NS);
    t->flag = false;
  }
  t->waiter_done = true;
  iof_mutex_unlock(&t->pm);
  return rc;
}

static int cond_partner(void *arg) {
  tstate *t = arg;
  while (!t->waiter_done) {
    iof_mutex_lock(&t->pm);
    t->flag = true;
    iof_cond_signal(&t->pc);
    iof_mutex_unlock(&t->pm);
    int r = iof_yield();
    if (r < 0) return r;
  }
  return 0;
}

static int timer_waiter(void *arg) {
  tstate *t = arg;
  for (uint64_t i = 0; i < t->todo; i++) {
    iof_timer_expires_after(t->timer, HOUR_NS);
    int r = iof_timer_wait(t->timer);
    if (r != -ECANCELED) return r < 0 ? r : -EPROTO;
  }
  t->waiter_done = true;
  return 0;
}

static int timer_partner(void *arg) {
  tstate *t = arg;
  while (!t->waiter_done) {
    iof_timer_cancel(t->timer);
    int r = iof_yield();
    if (r < 0) return r;
  }
  return 0;
}

static int tbody(void *arg, uint64_t iters) {
  tstate *t = arg;
  static const iof_fn waiters[] = {chan_waiter, cond_waiter, timer_waiter};
  static const iof_fn partners[] = {chan_partner, cond_partner, timer_partner};
  t->todo = iters;
  t->flag = t->waiter_done = false;
  t->err = 0;
  t->pair_live = 2;
  iof_launch_opts o = {0};
  o.stack_size = STACK;
  o.on_done = pair_done;
  o.user = t;
  iof_executor_ref ex = iof_io_context_executor(t->io);
  int rc = iof_run_async(ex, &o, waiters[t->op], t);
  if (rc < 0) return rc;
  rc = iof_run_async(ex, &o, partners[t->op], t);
  if (rc < 0) t->pair_live--;
  iof_io_context_restart(t->io);
  while (t->pair_live > 0) {
    int r = iof_io_context_run_for(t->io, (int64_t)10 * 1000000000);
    if (r < 0) return r;
    if (t->pair_live > 0 && r == 0) return -ETIMEDOUT;
  }
  return rc < 0 ? rc : t->err;
}

int bench_suite_timers(bench_ctx *ctx) {
  static const char *const ops[] = {"chan_until", "cond_timed", "timer"};
  static const int ns[] = {1000, 10000, 100000};
  static const char *const tags[] = {"1k", "10k", "100k"};
  int nn = bench_quick(ctx) ? 2 : 3;
  double budget_s = bench_quick(ctx) ? 0.5 : 5.0;
  tstate *st = calloc(9, sizeof *st);
  if (!st) return -ENOMEM;
  int status = 0;
  for (int op = 0; op < 3; op++) {
    char base[32];
    for (int i = 0; i < nn; i++) {
      tstate *t = &st[op * 3 + i];
      t->op = (enum op)op;
      t->n = ns[i];
      snprintf(t->name, sizeof t->name, "%s.%s", ops[op], tags[i]);
      if (i == 0) snprintf(base, sizeof base, "%s", t->name);
      t->budget_s = budget_s;
      if (i > 0) {
        /* Each pair sets this case up again: if parking N waiters (and
         * waking them at teardown) is too slow, report it instead. */
        uint64_t t0 = bench_now_ns();
        int rc = tstate_setup(t);
        if (rc == 0) tstate_teardown(t);
        double s = (double)(bench_now_ns() - t0) / 1e9;
        if (rc == -ETIME || (rc == 0 && s > budget_s)) {
          char why[160];
          snprintf(why, sizeof why,
                   "parking and waking %d timed waiters took over %.1f s "
                   "(%.1f s with %d parked when stopped)",
                   t->n, budget_s, s, t->parked);
          bench_skip(ctx, t->name, why);
          break;
        }
      }
      bench_case c = {.name = t->name,
                      .unit = "ns/op",
                      .baseline = i ? base : NULL,
                      .target = i ? log((double)ns[i]) / log(1000.0) : 0,
                      .alone = true, /* parked waiters may be global */
                      .arg = t,
                      .setup = tstate_setup,
                      .body = tbody,
                      .teardown = tstate_teardown};
      if (bench_run_case(ctx, &c) < 0) status = -1;
    }
  }
  free(st);
  return status;
}
