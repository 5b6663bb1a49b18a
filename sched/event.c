/* iof_event: a latch, manual or auto reset (chosen at init). Manual: set
 * releases every waiter and stays set until reset. Auto: set hands itself
 * to the first waiter it can claim, or stays set until one wait consumes
 * it. */
#include "sched/sync_internal.h"

#include <errno.h>

int iof_event_init(iof_event *e, bool manual_reset) {
  if (!e) return -EINVAL;
  if (pthread_mutex_init(&e->lock, NULL) != 0) return -ENOMEM;
  e->set = false;
  e->manual = manual_reset;
  e->q.head = e->q.tail = NULL;
  return 0;
}

int iof_event_destroy(iof_event *e) {
  if (!e) return -EINVAL;
  pthread_mutex_lock(&e->lock);
  bool busy = e->q.head != NULL;
  pthread_mutex_unlock(&e->lock);
  if (busy) return -EBUSY;
  pthread_mutex_destroy(&e->lock);
  return 0;
}

int iof_event_set(iof_event *e) {
  if (!e) return -EINVAL;
  iof__wnode *list = NULL;
  pthread_mutex_lock(&e->lock);
  if (e->manual) {
    e->set = true;
    list = iof__wq_claim_all(&e->q, 0);
  } else {
    list = iof__wq_claim_first(&e->q, 0);
    if (!list) e->set = true;
  }
  pthread_mutex_unlock(&e->lock);
  while (list) {
    iof__wnode *n = list;
    list = n->next; /* n may be gone after the wake */
    iof__wait_wake(n->w);
  }
  return 0;
}

int iof_event_reset(iof_event *e) {
  if (!e) return -EINVAL;
  pthread_mutex_lock(&e->lock);
  e->set = false;
  pthread_mutex_unlock(&e->lock);
  return 0;
}

bool iof_event_is_set(iof_event *e) {
  if (!e) return false;
  pthread_mutex_lock(&e->lock);
  bool set = e->set;
  pthread_mutex_unlock(&e->lock);
  return set;
}

/* Under the lock: consume the event if set. */
static bool take_locked(iof_event *e) {
  if (!e->set) return false;
  if (!e->manual) e->set = false;
  return true;
}

int iof_event_trywait(iof_event *e) {
  if (!e) return -EINVAL;
  pthread_mutex_lock(&e->lock);
  bool ok = take_locked(e);
  pthread_mutex_unlock(&e->lock);
  return ok ? 0 : -EAGAIN;
}

typedef struct event_op {
  iof_event *e;
  iof__wnode node;
  bool published;
} event_op;

static bool event_begin(void *p, iof__wait *w) {
  event_op *op = p;
  iof_event *e = op->e;
  pthread_mutex_lock(&e->lock);
  if (take_locked(e)) {
    pthread_mutex_unlock(&e->lock);
    w->result = 0;
    return false;
  }
  bool queued = iof__wq_push_publish(&e->q, &op->node, &op->published, w);
  pthread_mutex_unlock(&e->lock);
  return queued;
}

static int event_wait_common(iof_event *e, int64_t deadline) {
  if (!e) return -EINVAL;
  if (iof__sync_stopped()) return -ECANCELED;
  if (iof_event_trywait(e) == 0) return 0;
  event_op op = {e, {0}, false};
  iof__wait w;
  op.node.w = &w;
  int r =
      iof__wait_block(&op, event_begin, &w, deadline, IOF__WAIT_CANCELLABLE);
  if (op.published && !w.by_waker) {
    pthread_mutex_lock(&e->lock);
    iof__wq_unlink(&e->q, &op.node);
    pthread_mutex_unlock(&e->lock);
  }
  return r;
}

int iof_event_wait(iof_event *e) {
  return event_wait_common(e, -1);
}

int iof_event_timedwait(iof_event *e, int64_t deadline_ns) {
  return event_wait_common(e, deadline_ns < 0 ? 0 : deadline_ns);
}
