/* How io/ blocks: the one wait record of sched/ (iof__wait_block_on),
 * armed on an io_context's loop.
 *
 * Arming and disarming touch libev, so they happen on the io_context's
 * thread only: a fiber from elsewhere hops there first, and every claim
 * (a libev callback, a stop request, the timeout, the shutdown registry,
 * another thread such as the resolver's worker) posts the fiber back to
 * the io_context, where it disarms before going home. The io_context's
 * timers serve the timeout (libev's heap, on the same thread). */
#include "io/io_internal.h"

#include <errno.h>

/* On io's thread, the fiber suspended: publish, then arm. Publishing
 * first means a claim from another thread (the resolver) can never meet
 * an armed but unpublished wait. */
static bool io_begin(void *p, iof__wait *w) {
  iof_io_op *op = p;
  if (!iof__wait_publish(w)) return false; /* stopped or timed out already */
  int r = iof__ev_mem_ok();                /* libev must be able to grow */
  if (r == 0 && op->arm) r = op->arm(op);
  if (r < 0) {
    /* Refused: complete at once, unless a claim from elsewhere came first
     * (then that claim wakes us). */
    return !iof__wait_claim(w, r, -1);
  }
  op->armed = true;
  iof__io_work_started(op->io);
  return true;
}

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
/* Names the home path's waits (below) for iof_fiber_walk; never awaited. */
const iof_awaitable_vtbl iof__io_home_vtbl = {NULL, NULL, NULL};

/* What iof_fiber_walk says of a fiber suspended in an io wait. */
static const char *describe_io(const void *p, const void **obj) {
  const iof_io_op *op = p;
  *obj = op->obj;
  if (op->dir & EV_READ) return "io: socket readable";
  if (op->dir & EV_WRITE) return "io: socket writable";
  return "io: timer, signal or resolver";
}

__attribute__((constructor)) static void name_waits(void) {
  iof__debug_wait_kind(io_begin, describe_io);
  iof__debug_label(&iof__io_home_vtbl, "io", describe_io);
  iof__debug_label(&to_io_vtbl, "hop to an io_context", NULL);
  iof__debug_label(&to_home_vtbl, "hop back from an io_context", NULL);
}

static void go_home(iof_fiber *self, iof_io_context *io) {
  iof_executor_ref home = self->env->executor;
  if (home.vt == &iof__io_vtbl && home.ex == io) return; /* the usual case */
  if (iof_executor_equal(home, iof__io_executor(io))) return;
  hop hp = {io};
  iof__await_always(&hp, &to_home_vtbl);
}

/* ---- the home path -----------------------------------------------------
 * A server's usual wait: a fiber of io, on io's thread, waiting on one of
 * io's sockets with no deadline and no stop token. Every claim of such a
 * wait runs on this thread (libev's callback, a close or a limit change,
 * io's shutdown walk of its sockets), so the record is published and the
 * op armed before the switch instead of from a hook after it; io's
 * shutdown fails its sockets' waiters itself, so the wait stays out of
 * sched/'s shutdown registry; and the chain's own work count keeps io
 * running. Left: what a hand-written libev server does, plus one switch
 * each way and one post. */

int iof__io_wait(iof_io_op *op, int64_t deadline_ns) {
  iof_fiber *self = iof_fiber_current();
  if (!self || !self->env) return -EPERM;
  iof_io_context *io = op->io;
  if (iof__stop_requested(self->env->stop_token) ||
      iof_execution_context_stopping(&io->ctx))
    return -ECANCELED;
  if (!iof__thread_runs(&io->ctx)) {
    hop hp = {io};
    int r = iof_await(&hp, &to_io_vtbl);
    if (r < 0) return r;
  }
  op->armed = false;
  int r = iof__wait_block_on(self, iof__io_executor(io), op, io_begin, &op->w,
                             deadline_ns, IOF__WAIT_CANCELLABLE);
  /* Back on io's thread, whoever claimed the wait. */
  if (op->armed) {
    op->armed = false;
    if (op->disarm) op->disarm(op);
    iof__io_work_finished(io);
  }
  go_home(self, io);
  return r;
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
  if (hopped) go_home(iof_fiber_current(), io);
}
