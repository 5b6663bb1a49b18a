/* iof_with_deadline: a child stop source, requested by a timer (the
 * runtime's one timer: the fiber's own loop, or the timer service) and by
 * a callback on the parent's token; fn runs through iof_run with the
 * child's token. */
#include <iofiber/deadline.h>

#include "io/io_internal.h"

#include <errno.h>

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

int iof_with_deadline(int64_t ns, iof_fn fn, void *arg) {
  iof_fiber *self = iof_fiber_current();
  if (!self || !self->env) return -EPERM;
  if (!fn) return -EINVAL;
  deadline d;
  atomic_init(&d.fired, false);
  if (iof_stop_source_init(&d.child) < 0) return -ENOMEM;
  iof_stop_callback parent;
  iof_stop_callback_register(&parent, self->env->stop_token, on_parent, &d);
  bool armed = false;
  if (ns <= 0) {
    atomic_store(&d.fired, true);
    iof_stop_source_request(&d.child);
  } else {
    /* Armed where the fiber runs now; iof_run brings it back here, where
     * a loop timer must be cancelled. */
    int r = iof__timer_arm(&d.timer, self->env->executor,
                           iof__sat_add(iof__now_ns(), ns), on_timer, &d);
    if (r < 0) {
      iof_stop_callback_unregister(&parent);
      iof_stop_source_destroy(&d.child);
      return r;
    }
    armed = true;
  }
  iof_launch_opts opts = {0};
  opts.stop_token = iof_stop_source_token(&d.child);
  int status = iof_run((iof_executor_ref){0}, &opts, fn, arg);
  if (armed) iof__timer_cancel(&d.timer);
  iof_stop_callback_unregister(&parent);
  iof_stop_source_destroy(&d.child);
  if (status < 0 && atomic_load(&d.fired)) return -ETIMEDOUT;
  return status;
}
