/* Sleeps and timer objects. A sleep is a wait with only a timeout. A timer
 * keeps its waiters in a locked list (cancel may come from any thread) and
 * one libev timer, started from its io_context's thread by the waits. */
#include <iofiber/timer.h>

#include "io/io_internal.h"

#include <errno.h>
#include <stdlib.h>

int64_t iof_now_ns(void) {
  return iof__now_ns();
}

/* A sleep until `deadline` (monotonic ns) that is `ns` away. */
static int sleep_to(int64_t ns, int64_t deadline) {
  iof_fiber *self = iof_fiber_current();
  if (!self || !self->env) return -EPERM;
  if (ns <= 0)
    return iof_stop_requested(self->env->stop_token) ? -ECANCELED : 0;
  iof_wait w = {0};
  w.io = iof__io_for_env(self->env);
  if (!w.io) return -ENOMEM;
  w.timeout_ns = ns;
  w.deadline_ns = deadline;
  int r = iof__wait(&w);
  return r == -ETIMEDOUT ? 0 : r;
}

int iof_sleep_for(int64_t ns) {
  int64_t now = iof__now_ns();
  /* Saturate: a huge ns is a very long sleep, never a wrapped deadline. */
  return sleep_to(ns, ns <= 0                ? now
                      : ns > INT64_MAX - now ? INT64_MAX
                                             : now + ns);
}

int iof_sleep_until(int64_t deadline_ns) {
  int64_t now = iof__now_ns();
  /* A deadline far in the past must not wrap into a huge positive wait. */
  return sleep_to(deadline_ns > now ? deadline_ns - now : 0, deadline_ns);
}

struct iof_timer {
  iof_io_context *io;
  pthread_mutex_t lock;
  int64_t expiry;
  int64_t scheduled; /* the expiry t->w was started for */
  iof_wait *waiters;
  ev_timer w; /* io's thread only */
};

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
  bool busy = t->waiters != NULL;
  pthread_mutex_unlock(&t->lock);
  if (busy) return -EBUSY;
  pthread_mutex_destroy(&t->lock);
  free(t);
  return 0;
}

/* Cancels every waiter; the caller holds the lock. The waiters unlink
 * themselves (disarm) once back on the io_context's thread. */
static int cancel_locked(iof_timer *t) {
  int n = 0;
  for (iof_wait *w = t->waiters; w; w = w->next)
    if (iof__wait_cancel(w, -ECANCELED)) n++;
  return n;
}

int iof_timer_cancel(iof_timer *t) {
  if (!t) return -EINVAL;
  pthread_mutex_lock(&t->lock);
  int n = cancel_locked(t);
  pthread_mutex_unlock(&t->lock);
  return n;
}

int iof_timer_expires_at(iof_timer *t, int64_t deadline_ns) {
  if (!t) return -EINVAL;
  pthread_mutex_lock(&t->lock);
  int n = cancel_locked(t);
  t->expiry = deadline_ns;
  pthread_mutex_unlock(&t->lock);
  return n;
}

int iof_timer_expires_after(iof_timer *t, int64_t ns) {
  int64_t now = iof__now_ns(); /* saturating: now >= 0 */
  return iof_timer_expires_at(t, ns > INT64_MAX - now ? INT64_MAX : now + ns);
}

int64_t iof_timer_expiry(const iof_timer *t) {
  if (!t) return 0;
  pthread_mutex_lock((pthread_mutex_t *)&t->lock);
  int64_t e = t->expiry;
  pthread_mutex_unlock((pthread_mutex_t *)&t->lock);
  return e;
}

static void schedule(iof_timer *t, int64_t expiry);

/* fire() holds the lock while it completes waiters, and completing
 * disarms: disarm must not take the lock again on that path. */
static __thread iof_timer *firing;

static void fire(struct ev_loop *loop, ev_timer *ew, int revents) {
  (void)loop;
  (void)revents;
  iof_timer *t = ew->data;
  pthread_mutex_lock(&t->lock);
  int64_t expiry = t->expiry;
  if (iof__now_ns() < expiry) {
    schedule(t, expiry); /* moved later meanwhile */
  } else {
    iof_wait *w = t->waiters;
    firing = t;
    while (w) {
      iof_wait *next = w->next;
      /* complete() disarms, which unlinks w: hence the saved next. The
       * lock is recursive in effect: disarm below takes care not to. */
      iof__wait_complete(w, 0);
      w = next;
    }
    firing = NULL;
  }
  pthread_mutex_unlock(&t->lock);
}

static void schedule(iof_timer *t, int64_t expiry) {
  double after = (double)(expiry - iof__now_ns()) / 1e9;
  t->scheduled = expiry;
  ev_timer_stop(t->io->loop, &t->w);
  ev_timer_init(&t->w, fire, after > 0 ? after : 0., 0.);
  t->w.data = t;
  ev_now_update(t->io->loop);
  ev_timer_start(t->io->loop, &t->w);
}

/* arm and disarm run on io's thread. */
static int timer_arm(iof_wait *w) {
  iof_timer *t = w->obj;
  pthread_mutex_lock(&t->lock);
  w->prev = NULL;
  w->next = t->waiters;
  if (t->waiters) t->waiters->prev = w;
  t->waiters = w;
  if (!ev_is_active(&t->w) || t->scheduled != t->expiry) schedule(t, t->expiry);
  pthread_mutex_unlock(&t->lock);
  return 0;
}

static void unlink_waiter(iof_timer *t, iof_wait *w) {
  if (w->prev)
    w->prev->next = w->next;
  else
    t->waiters = w->next;
  if (w->next) w->next->prev = w->prev;
  if (!t->waiters) ev_timer_stop(t->io->loop, &t->w);
}

static void timer_disarm(iof_wait *w) {
  iof_timer *t = w->obj;
  if (firing == t) {
    unlink_waiter(t, w);
    return;
  }
  pthread_mutex_lock(&t->lock);
  unlink_waiter(t, w);
  pthread_mutex_unlock(&t->lock);
}

int iof_timer_wait(iof_timer *t) {
  if (!t) return -EINVAL;
  iof_fiber *self = iof_fiber_current();
  if (!self || !self->env) return -EPERM;
  if (iof_stop_requested(self->env->stop_token)) return -ECANCELED;
  if (iof__now_ns() >= iof_timer_expiry(t)) return 0;
  iof_wait w = {0};
  w.io = t->io;
  w.obj = t;
  w.arm = timer_arm;
  w.disarm = timer_disarm;
  w.timeout_ns = -1;
  return iof__wait(&w);
}
