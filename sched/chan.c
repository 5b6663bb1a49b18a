/* iof_chan: bounded and unbuffered channels, and select.
 *
 * One lock per channel guards a ring buffer and two FIFO queues of
 * waiters (senders with the element they offer, receivers with where the
 * element goes). Whoever finds a partner waiting claims it (the atomic
 * claim of sync_internal.h), copies the element directly to or from the
 * partner's stack, and wakes it after unlocking. A bounded receiver that
 * frees a slot moves the first waiting sender's element into the ring.
 *
 * A select locks all its channels (in address order), picks uniformly at
 * random among the ready cases, or queues one node per case, all sharing
 * one wait record: the first waker to claim the record wins, the other
 * nodes become stale (skipped by wakers) and the select unlinks them. */
#include <iofiber/chan.h>

#include "sched/sync_internal.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

struct iof_chan {
  /* Held for a copy and a few links, never across a wait or a wake: a
   * spin lock costs a few instructions where a mutex costs ~40, and a
   * message takes it two or three times (measured: ping-pong 15% faster). */
  atomic_flag lock;
  size_t esz, cap;
  size_t head, count;
  bool closed;
  iof__waitq sendq, recvq;
  unsigned char buf[]; /* cap * esz */
};

iof_chan *iof_chan_create(size_t elem_size, size_t capacity) {
  if (elem_size && capacity > (SIZE_MAX - sizeof(iof_chan)) / elem_size) {
    errno = EINVAL;
    return NULL;
  }
  iof_chan *ch = malloc(sizeof *ch + elem_size * capacity);
  if (!ch) {
    errno = ENOMEM;
    return NULL;
  }
  atomic_flag_clear(&ch->lock);
  ch->esz = elem_size;
  ch->cap = capacity;
  ch->head = ch->count = 0;
  ch->closed = false;
  ch->sendq.head = ch->sendq.tail = NULL;
  ch->recvq.head = ch->recvq.tail = NULL;
  return ch;
}

int iof_chan_destroy(iof_chan *ch) {
  if (!ch) return -EINVAL;
  iof__spin_lock(&ch->lock);
  bool busy = ch->sendq.head || ch->recvq.head;
  iof__spin_unlock(&ch->lock);
  if (busy) return -EBUSY;
  free(ch);
  return 0;
}

static inline void copy(void *to, const void *from, size_t n) {
  if (n && to && from) memcpy(to, from, n);
}

static inline void ring_push(iof_chan *ch, const void *elem) {
  size_t tail = ch->head + ch->count;
  if (tail >= ch->cap) tail -= ch->cap;
  copy(ch->buf + tail * ch->esz, elem, ch->esz);
  ch->count++;
}

static inline void ring_pop(iof_chan *ch, void *out) {
  copy(out, ch->buf + ch->head * ch->esz, ch->esz);
  if (++ch->head == ch->cap) ch->head = 0;
  ch->count--;
}

/* Under ch->lock. 0 (done; *wake: a claimed partner to wake after
 * unlocking), -EPIPE (closed), -EAGAIN (would wait). */
static int send_locked(iof_chan *ch, const void *elem, iof__wnode **wake) {
  if (ch->closed) return -EPIPE;
  iof__wnode *n = iof__wq_claim_first(&ch->recvq, 0);
  if (n) {
    copy(n->data, elem, ch->esz);
    *wake = n;
    return 0;
  }
  if (ch->count < ch->cap) {
    ring_push(ch, elem);
    return 0;
  }
  return -EAGAIN;
}

static int recv_locked(iof_chan *ch, void *out, iof__wnode **wake) {
  if (ch->count > 0) {
    ring_pop(ch, out);
    iof__wnode *n = iof__wq_claim_first(&ch->sendq, 0);
    if (n) {
      ring_push(ch, n->data);
      *wake = n;
    }
    return 0;
  }
  iof__wnode *n = iof__wq_claim_first(&ch->sendq, 0);
  if (n) {
    copy(out, n->data, ch->esz);
    *wake = n;
    return 0;
  }
  return ch->closed ? -EPIPE : -EAGAIN;
}

/* Readiness without side effects beyond dropping stale nodes. */
static bool send_ready(iof_chan *ch) {
  return ch->closed || iof__wq_has_waiter(&ch->recvq) || ch->count < ch->cap;
}

static bool recv_ready(iof_chan *ch) {
  return ch->count > 0 || iof__wq_has_waiter(&ch->sendq) || ch->closed;
}

static inline void wake_node(iof__wnode *n) {
  if (n) iof__wait_wake(n->w);
}

/* ---- single operations ------------------------------------------------ */

typedef struct chan_op {
  iof_chan *ch;
  int op;
  void *elem;
  iof__wnode node;
  bool published;
} chan_op;

static int op_locked(chan_op *op, iof__wnode **wake) {
  return op->op == IOF_CHAN_SEND ? send_locked(op->ch, op->elem, wake)
                                 : recv_locked(op->ch, op->elem, wake);
}

static bool op_begin(void *p, iof__wait *w) {
  chan_op *op = p;
  iof_chan *ch = op->ch;
  iof__wnode *wake = NULL;
  iof__spin_lock(&ch->lock);
  int r = op_locked(op, &wake);
  if (r != -EAGAIN) {
    iof__spin_unlock(&ch->lock);
    wake_node(wake);
    w->result = r;
    return false;
  }
  iof__waitq *q = op->op == IOF_CHAN_SEND ? &ch->sendq : &ch->recvq;
  bool queued = iof__wq_push_publish(q, &op->node, &op->published, w);
  iof__spin_unlock(&ch->lock);
  return queued;
}

static int op_now(chan_op *op) {
  iof__wnode *wake = NULL;
  iof__spin_lock(&op->ch->lock);
  int r = op_locked(op, &wake);
  iof__spin_unlock(&op->ch->lock);
  wake_node(wake);
  return r;
}

static int chan_op_run(iof_chan *ch, int kind, void *elem, bool wait,
                       int64_t deadline) {
  if (!ch) return -EINVAL;
  if (kind == IOF_CHAN_SEND && ch->esz && !elem) return -EINVAL;
  if (wait && iof__sync_stopped()) return -ECANCELED;
  chan_op op = {ch, kind, elem, {0}, false};
  int r = op_now(&op);
  if (r != -EAGAIN || !wait) return r;
  iof__wait w;
  op.node.w = &w;
  op.node.data = elem;
  r = iof__wait_block(&op, op_begin, &w, deadline, IOF__WAIT_CANCELLABLE);
  if (op.published && !w.by_waker) {
    iof__spin_lock(&ch->lock);
    iof__wq_unlink(kind == IOF_CHAN_SEND ? &ch->sendq : &ch->recvq, &op.node);
    iof__spin_unlock(&ch->lock);
  }
  return r;
}

int iof_chan_send(iof_chan *ch, const void *elem) {
  return chan_op_run(ch, IOF_CHAN_SEND, (void *)elem, true, -1);
}

int iof_chan_recv(iof_chan *ch, void *out) {
  return chan_op_run(ch, IOF_CHAN_RECV, out, true, -1);
}

int iof_chan_try_send(iof_chan *ch, const void *elem) {
  return chan_op_run(ch, IOF_CHAN_SEND, (void *)elem, false, -1);
}

int iof_chan_try_recv(iof_chan *ch, void *out) {
  return chan_op_run(ch, IOF_CHAN_RECV, out, false, -1);
}

int iof_chan_send_until(iof_chan *ch, const void *elem, int64_t deadline_ns) {
  return chan_op_run(ch, IOF_CHAN_SEND, (void *)elem, true,
                     deadline_ns < 0 ? 0 : deadline_ns);
}

int iof_chan_recv_until(iof_chan *ch, void *out, int64_t deadline_ns) {
  return chan_op_run(ch, IOF_CHAN_RECV, out, true,
                     deadline_ns < 0 ? 0 : deadline_ns);
}

int iof_chan_close(iof_chan *ch) {
  if (!ch) return -EINVAL;
  iof__wnode *list = NULL, **tail = &list;
  iof__spin_lock(&ch->lock);
  if (ch->closed) {
    iof__spin_unlock(&ch->lock);
    return -EPIPE;
  }
  ch->closed = true;
  iof__waitq *qs[2] = {&ch->sendq, &ch->recvq};
  for (int i = 0; i < 2; i++) {
    *tail = iof__wq_claim_all(qs[i], -EPIPE);
    while (*tail) tail = &(*tail)->next;
  }
  iof__spin_unlock(&ch->lock);
  while (list) {
    iof__wnode *n = list;
    list = n->next; /* n may be gone after the wake */
    iof__wait_wake(n->w);
  }
  return 0;
}

size_t iof_chan_len(iof_chan *ch) {
  if (!ch) return 0;
  iof__spin_lock(&ch->lock);
  size_t n = ch->count;
  iof__spin_unlock(&ch->lock);
  return n;
}

size_t iof_chan_cap(const iof_chan *ch) {
  return ch ? ch->cap : 0;
}

size_t iof_chan_elem_size(const iof_chan *ch) {
  return ch ? ch->esz : 0;
}

bool iof_chan_closed(iof_chan *ch) {
  if (!ch) return false;
  iof__spin_lock(&ch->lock);
  bool c = ch->closed;
  iof__spin_unlock(&ch->lock);
  return c;
}

/* ---- select ----------------------------------------------------------- */

typedef struct select_op {
  iof_chan_case *cases;
  size_t n;
  iof_chan **chans; /* distinct channels, by address */
  size_t nchans;
  iof__wnode *nodes; /* one per case */
  bool published;
} select_op;

static void lock_all(select_op *s) {
  for (size_t i = 0; i < s->nchans; i++) iof__spin_lock(&s->chans[i]->lock);
}

static void unlock_all(select_op *s) {
  for (size_t i = s->nchans; i-- > 0;) iof__spin_unlock(&s->chans[i]->lock);
}

/* Under all the locks: performs one ready case, chosen uniformly among the
 * ready ones. Its index (status in cases[i].status; a partner to wake in
 * *wake), or -EAGAIN. */
static int select_locked(select_op *s, iof__wnode **wake) {
  for (;;) {
    size_t chosen = s->n, seen = 0;
    for (size_t i = 0; i < s->n; i++) {
      iof_chan_case *c = &s->cases[i];
      if (!c->chan) continue;
      bool ready =
          c->op == IOF_CHAN_SEND ? send_ready(c->chan) : recv_ready(c->chan);
      /* Reservoir sampling: each ready case wins with probability 1/k. */
      if (ready && iof__sync_random() % (uint32_t)++seen == 0) chosen = i;
    }
    if (chosen == s->n) return -EAGAIN;
    iof_chan_case *c = &s->cases[chosen];
    int r = c->op == IOF_CHAN_SEND ? send_locked(c->chan, c->elem, wake)
                                   : recv_locked(c->chan, c->elem, wake);
    /* -EAGAIN: the waiter it saw was claimed elsewhere meanwhile (a stop
     * request); look again. */
    if (r == -EAGAIN) continue;
    c->status = r;
    return (int)chosen;
  }
}

static bool select_begin(void *p, iof__wait *w) {
  select_op *s = p;
  iof__wnode *wake = NULL;
  lock_all(s);
  int r = select_locked(s, &wake);
  if (r != -EAGAIN) {
    unlock_all(s);
    wake_node(wake);
    w->index = r;
    w->result = s->cases[r].status;
    return false;
  }
  /* Queued before publication: once published, a stop or timer may wake
   * the fiber on another thread, which then reads s->published. */
  for (size_t i = 0; i < s->n; i++) {
    iof_chan_case *c = &s->cases[i];
    if (!c->chan) continue;
    iof__wnode *nd = &s->nodes[i];
    nd->w = w;
    nd->data = c->elem;
    nd->index = (int)i;
    iof__wq_push(c->op == IOF_CHAN_SEND ? &c->chan->sendq : &c->chan->recvq,
                 nd);
  }
  s->published = true;
  if (!iof__wait_publish(w)) {
    for (size_t i = 0; i < s->n; i++) {
      iof_chan_case *c = &s->cases[i];
      if (c->chan)
        iof__wq_unlink(c->op == IOF_CHAN_SEND ? &c->chan->sendq
                                              : &c->chan->recvq,
                       &s->nodes[i]);
    }
    s->published = false;
    unlock_all(s);
    return false;
  }
  unlock_all(s);
  return true;
}

static int select_run(iof_chan_case *cases, size_t n, bool wait,
                      int64_t deadline) {
  if (!cases || n == 0 || n > IOF_CHAN_SELECT_MAX) return -EINVAL;
  iof_chan *chans[IOF_CHAN_SELECT_MAX];
  size_t nchans = 0;
  for (size_t i = 0; i < n; i++) {
    iof_chan *ch = cases[i].chan;
    if (!ch) continue;
    if (cases[i].op != IOF_CHAN_SEND && cases[i].op != IOF_CHAN_RECV)
      return -EINVAL;
    if (cases[i].op == IOF_CHAN_SEND && ch->esz && !cases[i].elem)
      return -EINVAL;
    /* Insertion into the sorted set of distinct channels. */
    size_t j = nchans;
    while (j > 0 && (uintptr_t)chans[j - 1] > (uintptr_t)ch) j--;
    if (j > 0 && chans[j - 1] == ch) continue;
    memmove(&chans[j + 1], &chans[j], (nchans - j) * sizeof chans[0]);
    chans[j] = ch;
    nchans++;
  }
  if (nchans == 0) return -EINVAL;
  if (wait && iof__sync_stopped()) return -ECANCELED;
  iof__wnode nodes[IOF_CHAN_SELECT_MAX];
  select_op s = {cases, n, chans, nchans, nodes, false};
  iof__wnode *wake = NULL;
  lock_all(&s);
  int r = select_locked(&s, &wake);
  unlock_all(&s);
  wake_node(wake);
  if (r != -EAGAIN || !wait) return r;
  memset(nodes, 0, n * sizeof nodes[0]);
  iof__wait w;
  r = iof__wait_block(&s, select_begin, &w, deadline, IOF__WAIT_CANCELLABLE);
  if (s.published) {
    /* The winning node was unlinked by its waker; the others are still
     * queued (stale): take them out. */
    lock_all(&s);
    for (size_t i = 0; i < n; i++) {
      iof_chan_case *c = &cases[i];
      if (!c->chan) continue;
      iof__wq_unlink(c->op == IOF_CHAN_SEND ? &c->chan->sendq : &c->chan->recvq,
                     &nodes[i]);
    }
    unlock_all(&s);
  }
  if (w.index < 0) return r < 0 ? r : -ECANCELED;
  cases[w.index].status = w.result;
  return w.index;
}

int iof_chan_select(iof_chan_case *cases, size_t n) {
  return select_run(cases, n, true, -1);
}

int iof_chan_try_select(iof_chan_case *cases, size_t n) {
  return select_run(cases, n, false, -1);
}

int iof_chan_select_until(iof_chan_case *cases, size_t n, int64_t deadline_ns) {
  return select_run(cases, n, true, deadline_ns < 0 ? 0 : deadline_ns);
}
