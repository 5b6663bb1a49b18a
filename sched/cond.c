/* iof_cond: a condition variable over iof_mutex.
 *
 * The wait releases the mutex and queues the waiter in one step as seen by
 * signallers: both happen under the cond's lock (the mutex first, then the
 * publication), so a signaller (which needs that lock) can never run in
 * between, and a stop request cannot wake the fiber while it still owns
 * the mutex. After the wake the mutex is re-acquired, uncancellably, so
 * that every return leaves it held, as pthread_cond_wait does. */
#include "sched/sync_internal.h"

#include <errno.h>

int iof_cond_init(iof_cond *c) {
  if (!c) return -EINVAL;
  if (pthread_mutex_init(&c->lock, NULL) != 0) return -ENOMEM;
  c->q.head = c->q.tail = NULL;
  return 0;
}

int iof_cond_destroy(iof_cond *c) {
  if (!c) return -EINVAL;
  pthread_mutex_lock(&c->lock);
  bool busy = c->q.head != NULL;
  pthread_mutex_unlock(&c->lock);
  if (busy) return -EBUSY;
  pthread_mutex_destroy(&c->lock);
  return 0;
}

typedef struct cond_op {
  iof_cond *c;
  iof_mutex *m;
  void *owner;
  iof__wnode node;
  bool released;
  bool published;
} cond_op;

static bool cond_begin(void *p, iof__wait *w) {
  cond_op *op = p;
  iof_cond *c = op->c;
  pthread_mutex_lock(&c->lock);
  int s = atomic_load_explicit(&w->state, memory_order_acquire);
  if (s != IOF__W_INIT) {
    /* Stopped or timed out before anything happened: keep the mutex. */
    iof__wait_publish(w);
    pthread_mutex_unlock(&c->lock);
    return false;
  }
  iof__mutex_unlock_as(op->m, op->owner);
  op->released = true;
  bool queued = iof__wq_push_publish(&c->q, &op->node, &op->published, w);
  pthread_mutex_unlock(&c->lock);
  return queued;
}

static int cond_wait_common(iof_cond *c, iof_mutex *m, int64_t deadline) {
  if (!c || !m) return -EINVAL;
  void *self = iof__sync_self();
  if (atomic_load_explicit(&m->owner, memory_order_relaxed) != self)
    return -EPERM;
  if (iof__sync_self_stopped(self)) return -ECANCELED;
  cond_op op = {c, m, self, {0}, false, false};
  iof__wait w;
  op.node.w = &w;
  int r = iof__wait_block(&op, cond_begin, &w, deadline, IOF__WAIT_CANCELLABLE);
  if (op.published && !w.by_waker) {
    pthread_mutex_lock(&c->lock);
    iof__wq_unlink(&c->q, &op.node);
    pthread_mutex_unlock(&c->lock);
  }
  if (op.released) iof__mutex_lock_uncancellable(m);
  return r;
}

int iof_cond_wait(iof_cond *c, iof_mutex *m) {
  return cond_wait_common(c, m, -1);
}

int iof_cond_timedwait(iof_cond *c, iof_mutex *m, int64_t deadline_ns) {
  return cond_wait_common(c, m, deadline_ns < 0 ? 0 : deadline_ns);
}

int iof_cond_signal(iof_cond *c) {
  if (!c) return -EINVAL;
  pthread_mutex_lock(&c->lock);
  iof__wnode *n = iof__wq_claim_first(&c->q, 0);
  pthread_mutex_unlock(&c->lock);
  if (n) iof__wait_wake(n->w);
  return 0;
}

int iof_cond_broadcast(iof_cond *c) {
  if (!c) return -EINVAL;
  pthread_mutex_lock(&c->lock);
  iof__wnode *list = iof__wq_claim_all(&c->q, 0);
  pthread_mutex_unlock(&c->lock);
  while (list) {
    iof__wnode *n = list;
    list = n->next; /* read before the wake: n may be gone after it */
    iof__wait_wake(n->w);
  }
  return 0;
}
