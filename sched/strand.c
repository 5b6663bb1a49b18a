/* Strands: a lock and a FIFO in front of any executor. The fiber that
 * holds the strand is the only one of its fibers handed to the inner
 * executor; it releases the strand when it switches out (the await hook or
 * its exit), never earlier, and the release hands the strand to the next
 * queued fiber. */
#include "sched/sched_internal.h"

#include <errno.h>
#include <stdlib.h>

static void lock(iof_strand *s) {
  iof__spin_lock(&s->lock);
}

static void unlock(iof_strand *s) {
  iof__spin_unlock(&s->lock);
}

/* Call under the lock after every change of q. */
static void queue_changed(iof_strand *s) {
  atomic_store_explicit(&s->waiting, s->q.head != NULL, memory_order_release);
}

/* The next fiber in line, which now holds the strand; NULL: the strand
 * goes idle. */
static iof_fiber *next_or_idle(iof_strand *s) {
  lock(s);
  iof_fiber *next = iof__q_pop(&s->q);
  if (!next) s->busy = false;
  queue_changed(s);
  unlock(s);
  return next;
}

/* Hands the strand (already marked busy) to h on the inner executor. A
 * launch refused there (its context shuts down) is cancelled, and the
 * strand goes to the next in line. On an error *kept says whether the
 * caller still holds the strand (false: an inner strand passed it on). */
static int hand_over_ex(iof_strand *s, iof_fiber *h, bool *kept) {
  *kept = true;
  for (;;) {
    h->strand = s;
    int r = s->inner.vt->post(s->inner.ex, h);
    if (r >= 0) return 0;
    if (h->strand != s) { /* an inner strand took h and passed s on */
      *kept = false;
      return r;
    }
    h->strand = NULL;
    if (!iof__chain_cancel(h)) return r;
    h = next_or_idle(s);
    if (!h) return 0;
  }
}

static int hand_over(iof_strand *s, iof_fiber *h) {
  bool kept;
  return hand_over_ex(s, h, &kept);
}

/* h comes from another strand, one built over this one (its hand_over set
 * h->strand): that strand is passed on now, since a fiber holds one strand
 * at a time. Its fibers all come through this one, which keeps them apart
 * and in order. */
static void leave_outer(iof_strand *s, iof_fiber *h) {
  if (h->strand && h->strand != s) iof__strand_release(h);
}

static bool refuse(const iof_strand *s, const iof_fiber *h) {
  return iof__refuse_after_shutdown(iof_executor_context(s->inner), h);
}

/* Takes the strand for h if it is idle (true), else queues h (false). */
static bool acquire_or_queue(iof_strand *s, iof_fiber *h) {
  lock(s);
  bool idle = !s->busy;
  if (idle)
    s->busy = true;
  else
    iof__q_push(&s->q, h);
  queue_changed(s);
  unlock(s);
  return idle;
}

static int strand_post(const void *ex, iof_fiber *h) {
  iof_strand *s = (iof_strand *)ex;
  if (refuse(s, h)) return -ESHUTDOWN;
  leave_outer(s, h);
  if (!acquire_or_queue(s, h)) return 0;
  bool kept;
  int r = hand_over_ex(s, h, &kept);
  if (r < 0 && kept) {
    lock(s);
    s->busy = false;
    unlock(s);
  }
  return r;
}

static int strand_dispatch(const void *ex, iof_fiber *h) {
  iof_strand *s = (iof_strand *)ex;
  if (refuse(s, h)) return -ESHUTDOWN;
  /* Over another strand, h must go through that one too: post. */
  if (s->inner.vt == &iof__strand_vtbl ||
      !iof__thread_runs(iof_executor_context(s->inner)))
    return strand_post(ex, h);
  leave_outer(s, h);
  if (!acquire_or_queue(s, h)) return 0;
  h->strand = s;
  return 1;
}

void iof__strand_release(iof_fiber *f) {
  iof_strand *s = f->strand;
  f->strand = NULL;
  iof_fiber *next = next_or_idle(s);
  if (next) hand_over(s, next);
}

/* A yield of h, the holder: release and queue again under one lock. h
 * goes behind the fibers waiting and the first of them is returned (it
 * now holds the strand, which stays busy); NULL: h keeps it. */
static iof_fiber *queue_behind(iof_strand *s, iof_fiber *h) {
  lock(s);
  iof_fiber *next = iof__q_pop(&s->q);
  if (next) iof__q_push(&s->q, h);
  queue_changed(s);
  unlock(s);
  return next;
}

iof_fiber *iof__strand_yield(iof_fiber *h, int *err) {
  iof_strand *s = h->strand;
  h->strand = NULL;
  iof_fiber *next = queue_behind(s, h);
  int r = hand_over(s, next ? next : h);
  if (r < 0 && !next) {
    /* The inner executor refused h: it goes on at once, without the
     * strand, as a refused yield does. */
    iof_fiber *n2 = next_or_idle(s);
    if (n2) hand_over(s, n2);
    *err = r;
    return h;
  }
  return NULL;
}

iof_fiber *iof__strand_pass_slow(iof_fiber *h) {
  iof_strand *s = h->strand;
  iof_fiber *next = queue_behind(s, h);
  if (next) {
    /* Nobody can hand h the strand back before h has switched away: only
     * next's release can, on this thread, once it runs. */
    h->strand = NULL;
    next->strand = s;
  }
  return next;
}

static iof_execution_context *strand_context(const void *ex) {
  return iof_executor_context(((const iof_strand *)ex)->inner);
}

static void strand_work_started(const void *ex) {
  iof_strand *s = (iof_strand *)ex;
  atomic_fetch_add_explicit(&s->work, 1, memory_order_relaxed);
  iof_executor_on_work_started(s->inner);
}

static void strand_work_finished(const void *ex) {
  iof_strand *s = (iof_strand *)ex;
  /* Read inner first: once the count drops, destroy may free s. */
  iof_executor_ref inner = s->inner;
  atomic_fetch_sub_explicit(&s->work, 1, memory_order_release);
  iof_executor_on_work_finished(inner);
}

const iof_executor_vtbl iof__strand_vtbl = {
    strand_dispatch, strand_post,         NULL,
    strand_context,  strand_work_started, strand_work_finished};

__attribute__((constructor)) static void name_strand(void) {
  iof__debug_label(&iof__strand_vtbl, "strand", NULL);
}

iof_strand *iof_strand_create(iof_executor_ref inner) {
  /* The strand hands its fibers to inner's post: a user vtable without it
   * (or without dispatch, which launches need too) could never run them. */
  if (!inner.vt || !inner.vt->post || !inner.vt->dispatch) {
    errno = EINVAL;
    return NULL;
  }
  iof_strand *s = calloc(1, sizeof *s);
  if (!s) {
    errno = ENOMEM;
    return NULL;
  }
  s->inner = inner;
  atomic_flag_clear(&s->lock);
  return s;
}

int iof_strand_destroy(iof_strand *s) {
  if (!s) return -EINVAL;
  lock(s);
  bool busy = s->busy || s->q.head ||
              atomic_load_explicit(&s->work, memory_order_acquire) > 0;
  unlock(s);
  if (busy) return -EBUSY;
  free(s);
  return 0;
}

iof_executor_ref iof_strand_executor(iof_strand *s) {
  return iof_executor_make(s, s ? &iof__strand_vtbl : NULL);
}

bool iof_strand_running_in_this_thread(const iof_strand *s) {
  iof_fiber *f = iof_fiber_current();
  return s && f && f->strand == s;
}
