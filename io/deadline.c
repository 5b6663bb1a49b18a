/* iof_with_deadline: a child stop source, requested by a libev timer on
 * the fiber's io_context and by a callback on the parent's token; fn runs
 * through iof_run with the child's token. */
#include <iofiber/deadline.h>

#include "io/io_internal.h"

#include <errno.h>

typedef struct deadline {
  iof_stop_source child;
  ev_timer timer;
  iof_io_context *io;
  atomic_bool fired;
} deadline;

static void on_parent(void *arg) {
  iof_stop_source_request(&((deadline *)arg)->child);
}

static void on_timer(struct ev_loop *loop, ev_timer *t, int revents) {
  (void)loop;
  (void)revents;
  deadline *d = t->data;
  atomic_store(&d->fired, true);
  iof_stop_source_request(&d->child);
}

/* Starting and stopping the timer are libev calls: done from the io
 * context's thread, through a hop when the fiber runs elsewhere. */
static int start_timer(deadline *d, int64_t ns) {
  bool hopped;
  int r = iof__io_enter(d->io, &hopped);
  if (r < 0) return r;
  r = iof__ev_mem_ok();
  if (r < 0) {
    iof__io_leave(d->io, hopped);
    return r;
  }
  ev_timer_init(&d->timer, on_timer, (double)ns / 1e9, 0.);
  d->timer.data = d;
  ev_now_update(d->io->loop);
  ev_timer_start(d->io->loop, &d->timer);
  iof_executor_on_work_started(iof_io_context_executor(d->io));
  iof__io_leave(d->io, hopped);
  return 0;
}

static void stop_timer(deadline *d) {
  bool hopped;
  /* Leaving must not fail: the hop home ignores shutdown. */
  if (iof__io_enter(d->io, &hopped) < 0) return;
  ev_timer_stop(d->io->loop, &d->timer);
  iof_executor_on_work_finished(iof_io_context_executor(d->io));
  iof__io_leave(d->io, hopped);
}

int iof_with_deadline(int64_t ns, iof_fn fn, void *arg) {
  iof_fiber *self = iof_fiber_current();
  if (!self || !self->env) return -EPERM;
  if (!fn) return -EINVAL;
  deadline d = {0};
  d.io = iof__io_for_env(self->env);
  if (!d.io) return -ENOMEM;
  if (iof_stop_source_init(&d.child) < 0) return -ENOMEM;
  iof_stop_callback parent;
  iof_stop_callback_register(&parent, self->env->stop_token, on_parent, &d);
  if (ns <= 0) {
    atomic_store(&d.fired, true);
    iof_stop_source_request(&d.child);
  } else {
    int sr = start_timer(&d, ns);
    if (sr < 0) { /* no deadline could be set: fn must not run unbounded */
      iof_stop_callback_unregister(&parent);
      iof_stop_source_destroy(&d.child);
      return sr;
    }
  }
  iof_launch_opts opts = {0};
  opts.stop_token = iof_stop_source_token(&d.child);
  int status = iof_run((iof_executor_ref){0}, &opts, fn, arg);
  if (ns > 0) stop_timer(&d);
  iof_stop_callback_unregister(&parent);
  iof_stop_source_destroy(&d.child);
  if (status < 0 && atomic_load(&d.fired)) return -ETIMEDOUT;
  return status;
}
