/* The one wait record of the runtime. Not installed.
 *
 * Every blocking call (a sync primitive, a channel or select, a sleep, a
 * socket, timer, signal or resolver wait of io/) keeps one wait record
 * (iof__wait) and, where it queues somewhere, queue nodes (iof__wnode;
 * several for a select), all on the waiting fiber's (or thread's) stack:
 * waiting never allocates. What differs between kinds of wait is only the
 * `begin` callback that arms it: a primitive's queue under its lock, or a
 * libev watcher on an io_context (io/ wraps the record in iof_io_op).
 *
 * The record's state settles every race with one atomic claim:
 *
 *   INIT --publish--> WAITING --claim--> DONE       (a waker, a stop
 *     |                                             request, a timer or
 *     +--early cancel/timeout--> EARLY_*            the context shutdown)
 *
 * - A fiber publishes from the awaitable's suspend, i.e. after it has
 *   switched away (no lost wake-up across threads): `begin` re-checks,
 *   then either completes at once or enqueues/arms and publishes (CAS
 *   INIT->WAITING).
 * - Whoever wins WAITING->DONE (a waker, a libev callback, a stop
 *   callback, the timer, the shutdown registry) owns the wake: it writes
 *   the result and then wakes the waiter exactly once; the losers do
 *   nothing (a waker skips such a node and unlinks it).
 * - A stop request, timer or shutdown that comes before publication moves
 *   INIT to EARLY_*; publication then fails and the fiber resumes at once
 *   with -ECANCELED / -ETIMEDOUT, never having been queued.
 * - Waking a fiber is a post to the executor the wait belongs to (the
 *   env's executor, or the io_context of an io wait): never an inline
 *   resume. Waking a plain thread signals its parker.
 * - The timer of a timed wait is an iof__timer (timer_internal.h): on the
 *   waiter's own event loop when it has one, else the timer service.
 * - Wakers unlink the node they claim; nodes left in a queue by a
 *   cancellation (or by the other cases of a select) are unlinked by their
 *   owner after it resumes, under the primitive's lock. */
#ifndef IOF_SCHED_SYNC_INTERNAL_H
#define IOF_SCHED_SYNC_INTERNAL_H

#include <iofiber/sync.h>

#include "sched/sched_internal.h"
#include "sched/timer_internal.h"

enum {
  IOF__W_INIT = 0,
  IOF__W_WAITING,
  IOF__W_DONE,
  IOF__W_EARLY_CANCELED,
  IOF__W_EARLY_TIMEDOUT
};
/* iof_fiber_resume reads a waiting fiber's state word (iof_fiber.claim). */
_Static_assert(IOF__W_WAITING == IOF__CLAIM_OPEN, "the open claim state");

typedef struct iof__parker {
  pthread_mutex_t m;
  pthread_cond_t c;
  atomic_int flag; /* set under m; read by the waiter's spin without it */
} iof__parker;

typedef struct iof__wait {
  atomic_int state;
  int result;          /* written by the claimer before the wake */
  int index;           /* the node that won (select) */
  bool by_waker;       /* claimed by a waker (which unlinked the node) */
  iof_fiber *fiber;    /* NULL: a thread waiter (parker) */
  iof_executor_ref ex; /* where a fiber is woken */
  iof__parker *parker;
  /* The stop callback (fibers), the timer, the shutdown registry. */
  iof_stop_callback stop_cb;
  iof__timer timer;
  bool timer_armed;
  struct iof__wait *reg_prev, *reg_next;
  void *reg_svc;
} iof__wait;

struct iof__wnode {
  struct iof__wnode *prev, *next;
  iof__wait *w;
  void *data;  /* element buffer (chan) */
  void *owner; /* who gets a mutex handed over */
  int index;   /* case index (select) */
  bool linked; /* under the primitive's lock */
};
typedef struct iof__wnode iof__wnode;

/* ---- queues (under the primitive's lock) ------------------------------ */

static inline void iof__wq_push(iof__waitq *q, iof__wnode *n) {
  n->next = NULL;
  n->prev = q->tail;
  if (q->tail)
    q->tail->next = n;
  else
    q->head = n;
  q->tail = n;
  n->linked = true;
}

static inline void iof__wq_unlink(iof__waitq *q, iof__wnode *n) {
  if (!n->linked) return;
  if (n->prev)
    n->prev->next = n->next;
  else
    q->head = n->next;
  if (n->next)
    n->next->prev = n->prev;
  else
    q->tail = n->prev;
  n->prev = n->next = NULL;
  n->linked = false;
}

/* Claims a waiter for a wake with `result`: true when this caller won.
 * The caller unlinks the node (it holds the queue's lock) and calls
 * iof__wait_wake once it no longer needs the node. */
static inline bool iof__wait_claim(iof__wait *w, int result, int index) {
  int expect = IOF__W_WAITING;
  if (!atomic_compare_exchange_strong_explicit(&w->state, &expect, IOF__W_DONE,
                                               memory_order_acq_rel,
                                               memory_order_acquire))
    return false;
  w->result = result;
  w->index = index;
  w->by_waker = true;
  return true;
}

/* Pops the first node whose waiter this caller claims. Nodes of waiters
 * already claimed elsewhere (a stop request, a timer, the shutdown) are
 * skipped but left queued: their owner still comes back to unlink them
 * under the primitive's lock, so a queue holding one tells destroy that
 * the primitive is still in use (it must not be freed under that owner).
 * NULL if none. */
static inline iof__wnode *iof__wq_claim_first(iof__waitq *q, int result) {
  for (iof__wnode *n = q->head; n; n = n->next) {
    if (iof__wait_claim(n->w, result, n->index)) {
      iof__wq_unlink(q, n);
      return n;
    }
  }
  return NULL;
}

/* Claims every node whose waiter still waits, in queue order, and returns
 * them unlinked, as a list through next (read next before a wake: the node
 * may be gone after it). Skipped nodes stay queued, as above. */
static inline iof__wnode *iof__wq_claim_all(iof__waitq *q, int result) {
  iof__wnode *list = NULL, **tail = &list;
  for (iof__wnode *n = q->head, *next; n; n = next) {
    next = n->next;
    if (!iof__wait_claim(n->w, result, n->index)) continue;
    iof__wq_unlink(q, n);
    *tail = n;
    tail = &n->next;
  }
  return list;
}

/* True if q holds a node whose waiter is still waiting (nodes of waiters
 * claimed elsewhere do not count; they stay for their owner to unlink). */
static inline bool iof__wq_has_waiter(const iof__waitq *q) {
  for (const iof__wnode *n = q->head; n; n = n->next)
    if (atomic_load_explicit(&n->w->state, memory_order_acquire) ==
        IOF__W_WAITING)
      return true;
  return false;
}

/* Publishes a waiter (INIT -> WAITING), from a primitive's `begin` under
 * its lock. False when a stop, timer or shutdown came first: w->result is
 * then set and the caller must not enqueue. */
IOF_HIDDEN bool iof__wait_publish(iof__wait *w);

/* The tail of a single-node begin, under the primitive's lock: queues n on
 * q, then publishes w. In that order: once published, a stop or timer may
 * wake the fiber on another thread, which then reads *published. Undoes
 * both when publication fails (w->result is then set). True: queued. */
static inline bool iof__wq_push_publish(iof__waitq *q, iof__wnode *n,
                                        bool *published, iof__wait *w) {
  iof__wq_push(q, n);
  *published = true;
  if (iof__wait_publish(w)) return true;
  iof__wq_unlink(q, n);
  *published = false;
  return false;
}

/* Wakes a claimed waiter: posts the fiber to its executor, or unparks the
 * thread. The node and record may be gone once this returns. */
IOF_HIDDEN void iof__wait_wake(iof__wait *w);

/* Completes a pending (or not yet published) wait with `result` from a
 * stop callback, a timer or the shutdown service. True if this call
 * settled it (claimed and woke it, or made it EARLY_*); false if another
 * claim came first. */
IOF_HIDDEN bool iof__wait_abort(iof__wait *w, int result);

/* The primitive's half of a blocking call. Called with the record ready
 * (on the resumer's stack for a fiber, on the thread itself otherwise);
 * takes the primitive's lock, re-checks, and either completes at once
 * (sets w->result, returns false) or enqueues its node(s), records that it
 * did (the owner reads that after waking) and only then publishes with
 * iof__wait_publish (returns true): once published, a stop request or the
 * timer may claim and wake the waiter on another thread at once, without
 * the primitive's lock. If publication fails, it unlinks its node(s) and
 * returns false (w->result was set by iof__wait_publish). */
typedef bool (*iof__wait_begin)(void *op, iof__wait *w);

/* Names a kind of wait for iof_fiber_walk: a fiber blocked through
 * `begin` is described by describe(op, &obj) (op: the op given to the
 * wait). From a constructor; a few kinds only (io/). */
IOF_HIDDEN void iof__debug_wait_kind(iof__wait_begin begin,
                                     iof__debug_describe_fn describe);

enum {
  IOF__WAIT_CANCELLABLE = 1, /* the chain's stop token and the context's
                                shutdown complete it with -ECANCELED */
  IOF__WAIT_IN_ORDER = 2,    /* a fiber whose deadline has just passed is
                                not failed at once but timed out by its
                                timer, in deadline order with the others
                                (sleeps) */
  IOF__WAIT_IO = 4,          /* an io/ wait (a sleep): debuggers label it
                                "io" (iof__wait_block_on implies it) */
};

/* Blocks the caller (a launched fiber: suspends it; anything else: blocks
 * the thread) until `begin` completes or a claim wakes it. deadline_ns < 0:
 * none (a passed deadline: -ETIMEDOUT at once, begin not called). Returns
 * w->result; also -ECANCELED (fibers: stop requested or context shutting
 * down), -ETIMEDOUT (deadline passed), -ENOMEM/-EAGAIN (the timer could
 * not be armed). The caller then unlinks its node(s) unless w->by_waker (a
 * single-node wait claimed by a waker). */
IOF_HIDDEN int iof__wait_block(void *op, iof__wait_begin begin, iof__wait *w,
                               int64_t deadline_ns, int flags);

/* iof__wait_block for `self`, the calling launched fiber, whose wait
 * belongs to executor `where` (io/: the io_context the operation is armed
 * on) rather than to its env's: the fiber must already run on where's
 * thread; begin runs there, the timer uses where's loop, the wait
 * registers with where's context for its shutdown, and the wake posts the
 * fiber to `where`, so the call returns on where's thread. */
IOF_HIDDEN int iof__wait_block_on(iof_fiber *self, iof_executor_ref where,
                                  void *op, iof__wait_begin begin, iof__wait *w,
                                  int64_t deadline_ns, int flags);

/* A plain thread about to sleep until *flag turns non-zero (set by a
 * fiber or another thread, often within microseconds): watches it for a
 * while first, when the thread's recent waits ended that soon (the spin
 * policy of sched_internal.h). Returns what iof__thread_spin_woke wants
 * once the thread has slept and woken (0 when the spin saw the flag). */
IOF_HIDDEN int64_t iof__thread_spin(atomic_int *flag);
IOF_HIDDEN void iof__thread_spin_woke(int64_t missed);

/* The launched fiber running here, or NULL (a thread or a raw fiber:
 * those block their thread). */
IOF_HIDDEN iof_fiber *iof__sync_fiber(void);

/* iof_stop_requested without the call for the usual tokenless fiber: the
 * wait and byte paths ask it on every operation. */
static inline bool iof__stop_requested(iof_stop_token tok) {
  return tok.state && iof_stop_requested(tok);
}

/* Identifies the caller for ownership (a mutex's owner): the running fiber,
 * or the thread's root record outside fibers. Never NULL. One TLS access
 * (the fast paths matter). */
static inline void *iof__sync_self(void) {
  return iof__thread()->current;
}

/* Whether `self` (from iof__sync_self) is a launched fiber whose chain's
 * stop token is requested. */
static inline bool iof__sync_self_stopped(void *self) {
  const iof_env *env = ((iof_fiber *)self)->env;
  return env && env->stop_token.state && iof_stop_requested(env->stop_token);
}

/* Whether the caller (a launched fiber) has its stop token requested. */
static inline bool iof__sync_stopped(void) {
  return iof__sync_self_stopped(iof__sync_self());
}

/* A per-thread pseudo-random number (select fairness). */
IOF_HIDDEN uint32_t iof__sync_random(void);

/* Internal mutex entry points used by cond (owner given explicitly, since
 * cond releases the mutex on behalf of a suspended fiber). */
IOF_HIDDEN int iof__mutex_unlock_as(iof_mutex *m, void *owner);
IOF_HIDDEN int iof__mutex_lock_uncancellable(iof_mutex *m);

#endif
