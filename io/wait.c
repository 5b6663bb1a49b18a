/* The wait every blocking operation of io/ is built on.
 *
 * Arming and disarming touch libev, so they happen on the io_context's
 * thread only: a fiber from elsewhere hops there first. Completion comes
 * from a libev callback (on that thread: it disarms, then dispatches the
 * fiber to its own executor) or from a cancellation (any thread: it claims
 * the wait and queues the fiber on the io_context, where the fiber disarms
 * itself before going home). The claim is one CAS, so a completion racing
 * a cancellation is settled once. */
#include "io/io_internal.h"

#include <errno.h>
#include <time.h>

static void reg_add(iof_io_context *io, iof_wait *w) {
  w->reg_prev = NULL;
  w->reg_next = io->armed;
  if (io->armed) io->armed->reg_prev = w;
  io->armed = w;
}

static void reg_del(iof_io_context *io, iof_wait *w) {
  if (w->reg_prev)
    w->reg_prev->reg_next = w->reg_next;
  else
    io->armed = w->reg_next;
  if (w->reg_next) w->reg_next->reg_prev = w->reg_prev;
}

/* Undoes everything arming did; on io's thread. */
static void unarm(iof_wait *w) {
  if (!w->armed) return;
  w->armed = false;
  if (w->disarm) w->disarm(w);
  if (w->timeout_ns >= 0) ev_timer_stop(w->io->loop, &w->timeout);
  reg_del(w->io, w);
  iof_executor_on_work_finished(iof_io_context_executor(w->io));
}

/* Sends h to its own executor from io's thread. dispatch saying "inline"
 * means h may run here now: the io_context's queue runs it next. */
static void send_home(iof_io_context *io, iof_fiber *h) {
  iof_run_mark mark;
  iof__run_mark_push(&mark, &io->ctx);
  iof_executor_ref ex = h->env->executor;
  if (ex.vt->dispatch(ex.ex, h) > 0) iof__io_enqueue(io, h);
  iof__run_mark_pop(&mark);
}

bool iof__wait_complete(iof_wait *w, int result) {
  int expect = 0;
  if (!atomic_compare_exchange_strong_explicit(
          &w->claimed, &expect, 1, memory_order_acq_rel, memory_order_relaxed))
    return false;
  w->result = result;
  unarm(w);
  send_home(w->io, w->h);
  return true;
}

bool iof__wait_cancel(iof_wait *w, int result) {
  int expect = 0;
  if (!atomic_compare_exchange_strong_explicit(
          &w->claimed, &expect, 1, memory_order_acq_rel, memory_order_relaxed))
    return false;
  w->result = result;
  w->via_io = true;
  iof__io_enqueue(w->io, w->h); /* never resumed inside the request */
  return true;
}

static void on_stop(void *arg) {
  iof__wait_cancel(arg, -ECANCELED);
}

static void on_timeout(struct ev_loop *loop, ev_timer *t, int revents) {
  (void)loop;
  (void)revents;
  iof_wait *w = (iof_wait *)((char *)t - offsetof(iof_wait, timeout));
  iof__wait_complete(w, -ETIMEDOUT);
}

static iof_fiber *wait_suspend(void *self, iof_fiber *h, const iof_env *env) {
  iof_wait *w = self;
  iof_io_context *io = w->io;
  w->h = h;
  /* A fiber that hopped here from another executor may arrive once the
   * shutdown has cancelled what was armed: it must not arm now. */
  int r = iof_execution_context_stopping(&io->ctx) ? -ECANCELED : 0;
  if (r == 0 && w->arm) r = w->arm(w);
  if (r < 0) {
    atomic_store_explicit(&w->claimed, 1, memory_order_relaxed);
    w->result = r;
    w->via_io = true; /* resumes here, on io's thread */
    return h;
  }
  w->armed = true;
  reg_add(io, w);
  iof_executor_on_work_started(iof_io_context_executor(io));
  if (w->timeout_ns >= 0) {
    /* libev counts from its cached "now", stale by however long the
     * fibers ran since the loop last woke: refresh it, or the timeout
     * fires early; and count from the absolute deadline, or a delay
     * between initiation and here (a hop, a preemption) makes it late. */
    int64_t left = iof__sat_sub(w->deadline_ns, iof__now_ns()); /* first: */
    ev_now_update(io->loop); /* libev's now is later, never early */
    ev_timer_init(&w->timeout, on_timeout, left > 0 ? (double)left / 1e9 : 0.,
                  0.);
    ev_timer_start(io->loop, &w->timeout);
  }
  /* Last: a request already made runs on_stop right here, which queues h
   * on io; nothing may touch w after this. */
  iof_stop_callback_register(&w->stop, env->stop_token, on_stop, w);
  return NULL;
}

static const iof_awaitable_vtbl wait_vtbl = {NULL, wait_suspend, NULL};

typedef struct hop {
  iof_io_context *io;
} hop;

static iof_fiber *to_io(void *self, iof_fiber *h, const iof_env *env) {
  (void)env;
  iof__io_enqueue(((hop *)self)->io, h);
  return NULL;
}

static iof_fiber *to_home(void *self, iof_fiber *h, const iof_env *env) {
  (void)self;
  iof_executor_ref ex = env->executor;
  return ex.vt->dispatch(ex.ex, h) > 0 ? h : NULL;
}

static const iof_awaitable_vtbl to_io_vtbl = {NULL, to_io, NULL};
static const iof_awaitable_vtbl to_home_vtbl = {NULL, to_home, NULL};

static void go_home(iof_io_context *io) {
  iof_fiber *self = iof_fiber_current();
  if (iof_executor_equal(self->env->executor, iof_io_context_executor(io)))
    return;
  hop hp = {io};
  iof__await_always(&hp, &to_home_vtbl);
}

int iof__wait(iof_wait *w) {
  iof_fiber *self = iof_fiber_current();
  if (!self || !self->env) return -EPERM;
  iof_io_context *io = w->io;
  if (w->timeout_ns >= 0 && w->deadline_ns == 0)
    w->deadline_ns = iof__sat_add(iof__now_ns(), w->timeout_ns);
  if (iof_stop_requested(self->env->stop_token) ||
      iof_execution_context_stopping(&io->ctx))
    return -ECANCELED;
  if (!iof__thread_runs(&io->ctx)) {
    hop hp = {io};
    int r = iof_await(&hp, &to_io_vtbl);
    if (r < 0) return r;
  }
  atomic_store_explicit(&w->claimed, 0, memory_order_relaxed);
  w->result = 0;
  w->armed = false;
  w->via_io = false;
  int r = iof_await(w, &wait_vtbl);
  if (r < 0) { /* refused before suspending (shutdown) */
    go_home(io);
    return r;
  }
  /* Waits for a stop callback still running on another thread: after
   * this nothing else can touch w. */
  iof_stop_callback_unregister(&w->stop);
  if (w->via_io) {
    unarm(w);
    go_home(io);
  }
  return w->result;
}

int iof__io_enter(iof_io_context *io, bool *hopped) {
  *hopped = false;
  if (iof__thread_runs(&io->ctx)) return 0;
  iof_fiber *self = iof_fiber_current();
  if (!self || !self->env) return atomic_load(&io->running) ? -EPERM : 0;
  hop hp = {io};
  int r = iof__await_always(&hp, &to_io_vtbl);
  if (r < 0) return r;
  *hopped = true;
  return 0;
}

void iof__io_leave(iof_io_context *io, bool hopped) {
  if (hopped) go_home(io);
}
