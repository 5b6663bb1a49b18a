/* iof_rwlock: a fair read-write lock. Waiters queue in FIFO order (a
 * node's index: 1 writer, 0 reader); nobody takes the lock past a live
 * waiter, and whoever frees it hands it over under the lock (the holders
 * are counted before the wake), so neither side starves the other. */
#include "sched/sync_internal.h"

#include <errno.h>
#include <limits.h>

int iof_rwlock_init(iof_rwlock *rw) {
  if (!rw) return -EINVAL;
  if (pthread_mutex_init(&rw->lock, NULL) != 0) return -ENOMEM;
  rw->writer = NULL;
  rw->readers = 0;
  rw->q.head = rw->q.tail = NULL;
  return 0;
}

int iof_rwlock_destroy(iof_rwlock *rw) {
  if (!rw) return -EINVAL;
  pthread_mutex_lock(&rw->lock);
  /* Any node: a waiter claimed by a stop or its deadline still comes back
   * to unlink its node under rw->lock. */
  bool busy = rw->writer || rw->readers || rw->q.head;
  pthread_mutex_unlock(&rw->lock);
  if (busy) return -EBUSY;
  pthread_mutex_destroy(&rw->lock);
  return 0;
}

/* Under rw->lock: take it for self now if the rules allow. 0, -EBUSY,
 * -EDEADLK or -EAGAIN. */
static int take(iof_rwlock *rw, bool write, void *self) {
  if (rw->writer == self) return -EDEADLK;
  if (rw->writer || iof__wq_has_waiter(&rw->q)) return -EBUSY;
  if (write) {
    if (rw->readers) return -EBUSY;
    rw->writer = self;
    return 0;
  }
  if (rw->readers == UINT_MAX) return -EAGAIN;
  rw->readers++;
  return 0;
}

/* Under rw->lock: hands the lock to the waiters at the head that may hold
 * it now (one writer once nobody holds it, or the readers before the next
 * writer while no writer does). Returns them, claimed and unlinked, linked
 * through next, to be woken after the lock is dropped. */
static iof__wnode *grant(iof_rwlock *rw) {
  iof__wnode *list = NULL, **tail = &list;
  for (iof__wnode *n = rw->q.head, *next; n && !rw->writer; n = next) {
    next = n->next;
    /* A waiter already stopped or timed out is passed over; its owner
     * unlinks the node. */
    if (atomic_load_explicit(&n->w->state, memory_order_acquire) !=
        IOF__W_WAITING)
      continue;
    if (n->index && rw->readers) break;
    if (!n->index && rw->readers == UINT_MAX) break;
    if (!iof__wait_claim(n->w, 0, n->index)) continue; /* lost the race */
    iof__wq_unlink(&rw->q, n);
    if (n->index)
      rw->writer = n->owner;
    else
      rw->readers++;
    *tail = n;
    tail = &n->next;
  }
  return list;
}

static void wake_all(iof__wnode *list) {
  while (list) {
    iof__wnode *n = list;
    list = n->next; /* n may be gone once woken */
    iof__wait_wake(n->w);
  }
}

typedef struct rw_op {
  iof_rwlock *rw;
  iof__wnode node;
  bool published;
} rw_op;

static bool rw_begin(void *p, iof__wait *w) {
  rw_op *op = p;
  iof_rwlock *rw = op->rw;
  pthread_mutex_lock(&rw->lock);
  int r = take(rw, op->node.index, op->node.owner);
  if (r != -EBUSY) {
    pthread_mutex_unlock(&rw->lock);
    w->result = r;
    return false;
  }
  bool queued = iof__wq_push_publish(&rw->q, &op->node, &op->published, w);
  pthread_mutex_unlock(&rw->lock);
  return queued;
}

static int lock_common(iof_rwlock *rw, bool write, bool try, int64_t deadline) {
  if (!rw) return -EINVAL;
  void *self = iof__sync_self();
  if (!try && iof__sync_self_stopped(self)) return -ECANCELED;
  pthread_mutex_lock(&rw->lock);
  int r = take(rw, write, self);
  pthread_mutex_unlock(&rw->lock);
  if (r != -EBUSY || try) return r;
  rw_op op = {rw, {0}, false};
  iof__wait w;
  op.node.w = &w;
  op.node.owner = self;
  op.node.index = write;
  r = iof__wait_block(&op, rw_begin, &w, deadline, IOF__WAIT_CANCELLABLE);
  if (op.published && !w.by_waker) {
    /* Gave up in the queue: the waiters behind may hold it now (readers
     * behind a writer that left, while readers hold it). */
    pthread_mutex_lock(&rw->lock);
    iof__wq_unlink(&rw->q, &op.node);
    iof__wnode *list = grant(rw);
    pthread_mutex_unlock(&rw->lock);
    wake_all(list);
  }
  return r;
}

int iof_rwlock_rdlock(iof_rwlock *rw) {
  return lock_common(rw, false, false, -1);
}

int iof_rwlock_timedrdlock(iof_rwlock *rw, int64_t deadline_ns) {
  return lock_common(rw, false, false, deadline_ns < 0 ? 0 : deadline_ns);
}

int iof_rwlock_tryrdlock(iof_rwlock *rw) {
  return lock_common(rw, false, true, -1);
}

int iof_rwlock_wrlock(iof_rwlock *rw) {
  return lock_common(rw, true, false, -1);
}

int iof_rwlock_timedwrlock(iof_rwlock *rw, int64_t deadline_ns) {
  return lock_common(rw, true, false, deadline_ns < 0 ? 0 : deadline_ns);
}

int iof_rwlock_trywrlock(iof_rwlock *rw) {
  return lock_common(rw, true, true, -1);
}

int iof_rwlock_unlock(iof_rwlock *rw) {
  if (!rw) return -EINVAL;
  void *self = iof__sync_self();
  pthread_mutex_lock(&rw->lock);
  if (rw->writer == self) {
    rw->writer = NULL;
  } else if (!rw->writer && rw->readers > 0) {
    rw->readers--;
  } else {
    pthread_mutex_unlock(&rw->lock);
    return -EPERM;
  }
  iof__wnode *list = grant(rw);
  pthread_mutex_unlock(&rw->lock);
  wake_all(list);
  return 0;
}
