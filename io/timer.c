/* Sleeps and timer objects. A sleep is the one wait record with nothing
 * but its timer: on the fiber's io_context it is a libev timer of that
 * loop, elsewhere (a thread pool) the timer service. A timer object keeps
 * its waiters in a locked queue (cancel may come from any thread) and one
 * libev timer, started from its io_context's thread by the waits. */
#include <iofiber/timer.h>

#include "io/io_internal.h"

#include <errno.h>
#include <stdlib.h>

int64_t iof_now_ns(void) {
  return iof__now_ns();
}

/* Nothing to queue: the wait ends by its timer or a stop request. */
static bool sleep_begin(void *op, iof__wait *w) {
  (void)op;
  return iof__wait_publish(w);
}

static const char *describe_sleep(const void *op, const void **obj) {
  (void)op;
  *obj = NULL;
  return "io: timer, signal or resolver";
}

__attribute__((constructor)) static void name_sleep(void) {
  iof__debug_wait_kind(sleep_begin, describe_sleep);
}

static int sleep_until(int64_t deadline) {
  iof_fiber *self = iof__sync_fiber();
  if (!self) return -EPERM;
  iof__wait w;
  /* The caller checked the deadline: a sleep that starts just before it
   * still ends after the sleeps whose deadlines came earlier. */
  int r = iof__wait_block(NULL, sleep_begin, &w, deadline,
                          IOF__WAIT_CANCELLABLE | IOF__WAIT_IN_ORDER |
                              IOF__WAIT_IO);
  return r == -ETIMEDOUT ? 0 : r;
}

int iof_sleep_for(int64_t ns) {
  if (ns <= 0) return iof_sleep_until(INT64_MIN);
  return sleep_until(iof__sat_add(iof__now_ns(), ns));
}

int iof_sleep_until(int64_t deadline_ns) {
  iof_fiber *self = iof__sync_fiber();
  if (!self) return -EPERM;
  if (deadline_ns <= iof__now_ns())
    return iof_stop_requested(self->env->stop_token) ? -ECANCELED : 0;
  return sleep_until(deadline_ns);
}

struct iof_timer {
  iof_io_context *io;
  pthread_mutex_t lock;
  int64_t expiry;
  int64_t scheduled; /* the expiry t->w was started for */
  iof__waitq waiters;
  /* Waits begun and not armed yet (a fiber of another thread goes to io's
   * thread first): destroy must wait for them, and a cancel or a new
   * expiry meanwhile ends them when they arm (gen moved on). */
  unsigned gen;
  int pending;           /* begun in this gen */
  int pending_cancelled; /* begun in an earlier gen */
  /* Waits armed and not disarmed yet. A wait woken by a cancel, a new
   * expiry or the expiry itself has left `waiters` but still disarms on
   * its way out (t->lock, t->w): destroy must wait for that too. */
  int armed;
  ev_timer w; /* io's thread only */
};

typedef struct timer_wait {
  iof_io_op op;
  unsigned gen;
  bool counted; /* left the pending counts */
} timer_wait;

iof_timer *iof_timer_create(iof_io_context *io) {
  if (!io) {
    errno = EINVAL;
    return NULL;
  }
  iof_timer *t = calloc(1, sizeof *t);
  if (!t) {
    errno = ENOMEM;
    return NULL;
  }
  t->io = io;
  t->expiry = iof__now_ns();
  pthread_mutex_init(&t->lock, NULL);
  ev_init(&t->w, NULL);
  return t;
}

int iof_timer_destroy(iof_timer *t) {
  if (!t) return -EINVAL;
  pthread_mutex_lock(&t->lock);
  bool busy = t->waiters.head || t->pending || t->pending_cancelled || t->armed;
  pthread_mutex_unlock(&t->lock);
  if (busy) return -EBUSY;
  pthread_mutex_destroy(&t->lock);
  free(t);
  return 0;
}

/* Claims every waiter with `result` and wakes it; the caller holds the
 * lock. Claimed nodes leave the queue here; the fibers stop the libev
 * timer (if nobody waits any more) once back on io's thread. */
static int wake_all_locked(iof_timer *t, int result) {
  int n = 0;
  for (iof__wnode *nd = iof__wq_claim_all(&t->waiters, result), *next; nd;
       nd = next) {
    next = nd->next; /* nd may be gone after the wake */
    iof__wait_wake(nd->w);
    n++;
  }
  return n;
}

/* Cancels every wait, armed or still on its way to io's thread (those
 * end with -ECANCELED when they arm); how many. Lock held. */
static int cancel_all_locked(iof_timer *t) {
  int n = wake_all_locked(t, -ECANCELED) + t->pending;
  t->pending_cancelled += t->pending;
  t->pending = 0;
  t->gen++;
  return n;
}

int iof_timer_cancel(iof_timer *t) {
  if (!t) return -EINVAL;
  pthread_mutex_lock(&t->lock);
  int n = cancel_all_locked(t);
  pthread_mutex_unlock(&t->lock);
  return n;
}

int iof_timer_expires_at(iof_timer *t, int64_t deadline_ns) {
  if (!t) return -EINVAL;
  pthread_mutex_lock(&t->lock);
  int n = cancel_all_locked(t);
  t->expiry = deadline_ns;
  pthread_mutex_unlock(&t->lock);
  return n;
}

int iof_timer_expires_after(iof_timer *t, int64_t ns) {
  return iof_timer_expires_at(t, iof__sat_add(iof__now_ns(), ns));
}

int64_t iof_timer_expiry(const iof_timer *t) {
  if (!t) return 0;
  pthread_mutex_lock((pthread_mutex_t *)&t->lock);
  int64_t e = t->expiry;
  pthread_mutex_unlock((pthread_mutex_t *)&t->lock);
  return e;
}

static void schedule(iof_timer *t, int64_t expiry);

static void fire(struct ev_loop *loop, ev_timer *ew, int revents) {
  (void)loop;
  (void)revents;
  iof_timer *t = ew->data;
  pthread_mutex_lock(&t->lock);
  int64_t expiry = t->expiry;
  if (iof__now_ns() < expiry)
    schedule(t, expiry); /* moved later meanwhile */
  else
    wake_all_locked(t, 0);
  pthread_mutex_unlock(&t->lock);
}

static void schedule(iof_timer *t, int64_t expiry) {
  double after = (double)iof__sat_sub(expiry, iof__now_ns()) / 1e9;
  t->scheduled = expiry;
  ev_timer_stop(t->io->loop, &t->w);
  ev_timer_init(&t->w, fire, after > 0 ? after : 0., 0.);
  t->w.data = t;
  ev_now_update(t->io->loop);
  ev_timer_start(t->io->loop, &t->w);
}

/* arm and disarm run on io's thread. */
/* Leaves the pending counts (lock held); false if the wait was cancelled
 * while on its way. */
static bool uncount(iof_timer *t, timer_wait *tw) {
  tw->counted = true;
  if (tw->gen != t->gen) {
    t->pending_cancelled--;
    return false;
  }
  t->pending--;
  return true;
}

static int timer_arm(iof_io_op *op) {
  iof_timer *t = op->obj;
  pthread_mutex_lock(&t->lock);
  if (!uncount(t, (timer_wait *)op)) {
    pthread_mutex_unlock(&t->lock);
    return -ECANCELED;
  }
  iof__wq_push(&t->waiters, &op->node);
  t->armed++;
  if (!ev_is_active(&t->w) || t->scheduled != t->expiry) schedule(t, t->expiry);
  pthread_mutex_unlock(&t->lock);
  return 0;
}

static void timer_disarm(iof_io_op *op) {
  iof_timer *t = op->obj;
  pthread_mutex_lock(&t->lock);
  iof__wq_unlink(&t->waiters, &op->node);
  t->armed--;
  if (!t->waiters.head) ev_timer_stop(t->io->loop, &t->w);
  pthread_mutex_unlock(&t->lock);
}

int iof_timer_wait(iof_timer *t) {
  if (!t) return -EINVAL;
  iof_fiber *self = iof_fiber_current();
  if (!self || !self->env) return -EPERM;
  if (iof_stop_requested(self->env->stop_token)) return -ECANCELED;
  timer_wait tw;
  pthread_mutex_lock(&t->lock);
  if (iof__now_ns() >= t->expiry) {
    pthread_mutex_unlock(&t->lock);
    return 0;
  }
  tw.gen = t->gen;
  tw.counted = false;
  t->pending++;
  pthread_mutex_unlock(&t->lock);
  iof__io_op_init(&tw.op, t->io, timer_arm, timer_disarm, t);
  int r = iof__io_wait(&tw.op, -1);
  if (!tw.counted) { /* ended before it armed (stop, shutdown) */
    pthread_mutex_lock(&t->lock);
    (void)uncount(t, &tw);
    pthread_mutex_unlock(&t->lock);
  }
  return r;
}
