/* iof_mutex: a FIFO hand-off mutex for fibers and threads.
 *
 * `state` gives an uncontended lock/unlock one CAS each: 0 free, 1 locked,
 * 2 locked and waiters may be queued. Only the fast paths (0->1 lock, 1->0
 * unlock) run without m->lock; every other transition, and the queue, are
 * under it. Unlock with state 2 hands ownership to the first waiter it can
 * claim (owner set before the wake, state stays locked): nobody barges
 * past a waiter. A waiter claimed by a stop request or a timer first is
 * skipped and the mutex goes to the next one. */
#include "sched/sync_internal.h"

#include <errno.h>

int iof_mutex_init(iof_mutex *m) {
  if (!m) return -EINVAL;
  atomic_init(&m->state, 0);
  atomic_init(&m->owner, NULL);
  if (pthread_mutex_init(&m->lock, NULL) != 0) return -ENOMEM;
  m->q.head = m->q.tail = NULL;
  return 0;
}

int iof_mutex_destroy(iof_mutex *m) {
  if (!m) return -EINVAL;
  pthread_mutex_lock(&m->lock);
  bool busy = atomic_load(&m->state) != 0 || m->q.head;
  pthread_mutex_unlock(&m->lock);
  if (busy) return -EBUSY;
  pthread_mutex_destroy(&m->lock);
  return 0;
}

static inline bool try_fast(iof_mutex *m, void *self) {
  int expect = 0;
  if (!atomic_compare_exchange_strong_explicit(
          &m->state, &expect, 1, memory_order_acquire, memory_order_relaxed))
    return false;
  atomic_store_explicit(&m->owner, self, memory_order_relaxed);
  return true;
}

typedef struct lock_op {
  iof_mutex *m;
  iof__wnode node;
  bool published;
} lock_op;

/* Under m->lock: take a mutex that became free, or mark it contended and
 * queue the waiter. */
static bool lock_begin(void *p, iof__wait *w) {
  lock_op *op = p;
  iof_mutex *m = op->m;
  pthread_mutex_lock(&m->lock);
  int s = atomic_load_explicit(&m->state, memory_order_relaxed);
  for (;;) {
    if (s == 0) {
      if (atomic_compare_exchange_weak_explicit(
              &m->state, &s, 1, memory_order_acquire, memory_order_relaxed)) {
        atomic_store_explicit(&m->owner, op->node.owner, memory_order_relaxed);
        pthread_mutex_unlock(&m->lock);
        w->result = 0;
        return false;
      }
    } else if (s == 1) {
      if (atomic_compare_exchange_weak_explicit(
              &m->state, &s, 2, memory_order_relaxed, memory_order_relaxed))
        break;
    } else {
      break;
    }
  }
  bool queued = iof__wq_push_publish(&m->q, &op->node, &op->published, w);
  pthread_mutex_unlock(
      &m->lock); /* if not queued: state 2 with no waiter is harmless */
  return queued;
}

static int lock_slow(iof_mutex *m, void *self, int64_t deadline, int flags) {
  lock_op op = {m, {0}, false};
  iof__wait w;
  op.node.w = &w;
  op.node.owner = self;
  int r = iof__wait_block(&op, lock_begin, &w, deadline, flags);
  if (op.published && !w.by_waker) {
    pthread_mutex_lock(&m->lock);
    iof__wq_unlink(&m->q, &op.node);
    pthread_mutex_unlock(&m->lock);
  }
  return r;
}

static int lock_common(iof_mutex *m, int64_t deadline) {
  if (!m) return -EINVAL;
  void *self = iof__sync_self();
  if (atomic_load_explicit(&m->owner, memory_order_relaxed) == self)
    return -EDEADLK;
  if (iof__sync_self_stopped(self)) return -ECANCELED;
  if (try_fast(m, self)) return 0;
  return lock_slow(m, self, deadline, IOF__WAIT_CANCELLABLE);
}

int iof_mutex_lock(iof_mutex *m) {
  return lock_common(m, -1);
}

int iof_mutex_timedlock(iof_mutex *m, int64_t deadline_ns) {
  return lock_common(m, deadline_ns < 0 ? 0 : deadline_ns);
}

int iof__mutex_lock_uncancellable(iof_mutex *m) {
  void *self = iof__sync_self();
  if (try_fast(m, self)) return 0;
  return lock_slow(m, self, -1, 0);
}

int iof_mutex_trylock(iof_mutex *m) {
  if (!m) return -EINVAL;
  return try_fast(m, iof__sync_self()) ? 0 : -EBUSY;
}

int iof__mutex_unlock_as(iof_mutex *m, void *self) {
  if (atomic_load_explicit(&m->owner, memory_order_relaxed) != self)
    return -EPERM;
  atomic_store_explicit(&m->owner, NULL, memory_order_relaxed);
  int expect = 1;
  if (atomic_compare_exchange_strong_explicit(
          &m->state, &expect, 0, memory_order_release, memory_order_relaxed))
    return 0;
  pthread_mutex_lock(&m->lock);
  iof__wnode *n = iof__wq_claim_first(&m->q, 0);
  if (n) {
    atomic_store_explicit(&m->owner, n->owner, memory_order_relaxed);
    if (!m->q.head) atomic_store_explicit(&m->state, 1, memory_order_relaxed);
  } else {
    atomic_store_explicit(&m->state, 0, memory_order_release);
  }
  pthread_mutex_unlock(&m->lock);
  if (n) iof__wait_wake(n->w);
  return 0;
}

int iof_mutex_unlock(iof_mutex *m) {
  if (!m) return -EINVAL;
  return iof__mutex_unlock_as(m, iof__sync_self());
}
