/* iof_with_deadline and the shields. iof_with_deadline: a child stop
 * source, requested by a timer (the runtime's one timer: the fiber's own
 * loop, or the timer service) and by a callback on the parent's token; fn
 * runs through iof_run with the child's token. */
#include <iofiber/deadline.h>

#include "io/io_internal.h"

#include <errno.h>
#include <pthread.h>

typedef struct deadline {
  iof_stop_source child;
  iof__timer timer;
  atomic_bool fired;
} deadline;

static void on_parent(void *arg) {
  iof_stop_source_request(&((deadline *)arg)->child);
}

static void on_timer(void *arg) {
  deadline *d = arg;
  atomic_store(&d->fired, true);
  iof_stop_source_request(&d->child);
}

/* fn under a child token that fires after ns, and when the caller's does
 * if `linked` (a shield is not). */
static int bounded(int64_t ns, iof_fn fn, void *arg, bool linked) {
  iof_fiber *self = iof_fiber_current();
  if (!self || !self->env) return -EPERM;
  if (!fn) return -EINVAL;
  deadline d;
  atomic_init(&d.fired, false);
  if (iof_stop_source_init(&d.child) < 0) return -ENOMEM;
  iof_stop_callback parent = {0};
  if (linked)
    iof__stop_callback_register(&parent, self->env->stop_token, on_parent, &d);
  bool armed = false;
  if (ns <= 0) {
    atomic_store(&d.fired, true);
    iof_stop_source_request(&d.child);
  } else {
    /* Armed where the fiber runs now; iof_run brings it back here, where
     * a loop timer must be cancelled. No deadline could be set: fn must
     * not run unbounded. */
    int r = iof__timer_arm(&d.timer, self->env->executor,
                           iof__sat_add(iof__now_ns(), ns), on_timer, &d);
    if (r < 0) {
      if (linked) iof_stop_callback_unregister(&parent);
      iof_stop_source_destroy(&d.child);
      return r;
    }
    armed = true;
  }
  iof_launch_opts opts = {0};
  opts.stop_token = iof_stop_source_token(&d.child);
  int status = iof_run((iof_executor_ref){0}, &opts, fn, arg);
  if (armed) iof__timer_cancel(&d.timer);
  if (linked) iof_stop_callback_unregister(&parent);
  iof_stop_source_destroy(&d.child);
  if (status < 0 && atomic_load(&d.fired)) return -ETIMEDOUT;
  return status;
}

int iof_with_deadline(int64_t ns, iof_fn fn, void *arg) {
  return bounded(ns, fn, arg, true);
}

int iof_shield_for(int64_t ns, iof_fn fn, void *arg) {
  return bounded(ns, fn, arg, false);
}

/* One stop source, never requested, for every shield: its token is not
 * empty (an empty one would inherit the caller's in iof_run) and never
 * fires. Made once, kept for the process's life. */
static iof_stop_source never;
static int never_err;
static pthread_once_t never_once = PTHREAD_ONCE_INIT;

static void never_init(void) {
  never_err = iof_stop_source_init(&never);
}

int iof_shield(iof_fn fn, void *arg) {
  iof_fiber *self = iof_fiber_current();
  if (!self || !self->env) return -EPERM;
  if (!fn) return -EINVAL;
  pthread_once(&never_once, never_init);
  if (never_err < 0) return never_err;
  iof_launch_opts opts = {0};
  opts.stop_token = iof_stop_source_token(&never);
  return iof_run((iof_executor_ref){0}, &opts, fn, arg);
}
