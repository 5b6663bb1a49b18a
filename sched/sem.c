/* iof_sem: a counting semaphore. Waiters queue in FIFO order and post
 * hands a unit directly to the first waiter it can claim (the value never
 * rises while someone waits), so a later waiter cannot barge past. */
#include "sched/sync_internal.h"

#include <errno.h>

int iof_sem_init(iof_sem *s, unsigned value) {
  if (!s || value > IOF_SEM_VALUE_MAX) return -EINVAL;
  if (pthread_mutex_init(&s->lock, NULL) != 0) return -ENOMEM;
  s->value = value;
  s->q.head = s->q.tail = NULL;
  return 0;
}

int iof_sem_destroy(iof_sem *s) {
  if (!s) return -EINVAL;
  pthread_mutex_lock(&s->lock);
  bool busy = s->q.head != NULL;
  pthread_mutex_unlock(&s->lock);
  if (busy) return -EBUSY;
  pthread_mutex_destroy(&s->lock);
  return 0;
}

typedef struct sem_op {
  iof_sem *s;
  iof__wnode node;
  bool published;
} sem_op;

static bool sem_begin(void *p, iof__wait *w) {
  sem_op *op = p;
  iof_sem *s = op->s;
  pthread_mutex_lock(&s->lock);
  if (s->value > 0) {
    s->value--;
    pthread_mutex_unlock(&s->lock);
    w->result = 0;
    return false;
  }
  bool queued = iof__wq_push_publish(&s->q, &op->node, &op->published, w);
  pthread_mutex_unlock(&s->lock);
  return queued;
}

static int take_now(iof_sem *s) {
  pthread_mutex_lock(&s->lock);
  int r = -EAGAIN;
  if (s->value > 0) {
    s->value--;
    r = 0;
  }
  pthread_mutex_unlock(&s->lock);
  return r;
}

static int sem_wait_common(iof_sem *s, int64_t deadline) {
  if (!s) return -EINVAL;
  if (iof__sync_stopped()) return -ECANCELED;
  if (take_now(s) == 0) return 0;
  sem_op op = {s, {0}, false};
  iof__wait w;
  op.node.w = &w;
  int r = iof__wait_block(&op, sem_begin, &w, deadline, IOF__WAIT_CANCELLABLE);
  if (op.published && !w.by_waker) {
    pthread_mutex_lock(&s->lock);
    iof__wq_unlink(&s->q, &op.node);
    pthread_mutex_unlock(&s->lock);
  }
  return r;
}

int iof_sem_wait(iof_sem *s) {
  return sem_wait_common(s, -1);
}

int iof_sem_timedwait(iof_sem *s, int64_t deadline_ns) {
  return sem_wait_common(s, deadline_ns < 0 ? 0 : deadline_ns);
}

int iof_sem_trywait(iof_sem *s) {
  if (!s) return -EINVAL;
  return take_now(s);
}

int iof_sem_post(iof_sem *s) {
  if (!s) return -EINVAL;
  pthread_mutex_lock(&s->lock);
  iof__wnode *n = iof__wq_claim_first(&s->q, 0);
  if (!n) {
    if (s->value >= IOF_SEM_VALUE_MAX) {
      pthread_mutex_unlock(&s->lock);
      return -EOVERFLOW;
    }
    s->value++;
  }
  pthread_mutex_unlock(&s->lock);
  if (n) iof__wait_wake(n->w);
  return 0;
}

unsigned iof_sem_value(iof_sem *s) {
  if (!s) return 0;
  pthread_mutex_lock(&s->lock);
  unsigned v = s->value;
  pthread_mutex_unlock(&s->lock);
  return v;
}
