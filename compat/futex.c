/* The futex system call made from a fiber (iof_compat_futex).
 *
 * Libraries that build their own locks on futexes (InnoDB's, Rust's std,
 * libstdc++'s std::atomic::wait and semaphores, liburcu) wait with
 * syscall(SYS_futex, FUTEX_WAIT...), which would hold every fiber of the
 * io thread. A fiber's wait is kept here instead, in a table of queues
 * hashed by address, and suspends the fiber; the kernel still keeps the
 * plain threads' waits. A wake serves the table first, then passes what
 * is left of its count to the kernel, so one call reaches both kinds.
 *
 * The table sees only wakes made through this function (the hook routes
 * libc's syscall() here). A process-shared word may be woken from another
 * process: a fiber waiting on one also re-reads the word, from every 1 ms
 * to every 64 ms, and returns 0 once it changed; its node stays queued
 * between two reads, so that no wake from this process is lost then. */
#include "compat/fd_table.h"
#include "compat/thread_internal.h"
#include "fiber/fiber_internal.h"

#include <iofiber/compat_io.h>

#include <errno.h>
#include <limits.h>
#include <linux/futex.h>
#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#define NBUCKETS 256

typedef struct bucket {
  atomic_int lk;
  iof__waitq q;
} __attribute__((aligned(64))) bucket;

static bucket table[NBUCKETS];
/* Fibers between their count-in and count-out: a wake that reads 0 has no
 * table waiter to find and goes straight to the kernel. */
static atomic_long waiting;

typedef struct fx_wait {
  uint32_t *_Atomic addr; /* moved by a requeue, under both buckets' locks */
  bucket *_Atomic b;
  uint32_t val;
  uint32_t bitset;
  uint32_t *orig; /* the word the call was given, checked by the kernel */
  iof__wnode node;
  bool published; /* begin queued (or kept) the node for this pass */
  bool gap;       /* between two polls, still queued: node.w is not live */
  bool woken;     /* a wake took the node while its wait was settled (by
                     its timer, or in a gap): it returns 0 */
} fx_wait;

static bucket *bucket_of(const uint32_t *addr) {
  uint64_t h = (uint64_t)(uintptr_t)addr * UINT64_C(0x9e3779b97f4a7c15);
  return &table[h >> 56];
}

static long sys_futex(uint32_t *a, int op, uint32_t val, const void *t,
                      uint32_t *a2, uint32_t val3) {
  return iof__syscall()(SYS_futex, a, op, val, t, a2, val3);
}

static long fail(int e) {
  errno = e;
  return -1;
}

static fx_wait *of_node(iof__wnode *n) {
  return (fx_wait *)((char *)n - offsetof(fx_wait, node));
}

static bool any_waiting(void) {
  /* An RMW, not a load: the waiters' count-ins are RMWs too, so either
   * this one reads a waiter's, or that waiter's reads this one and then
   * sees the word the waker changed before calling. */
  return atomic_fetch_add_explicit(&waiting, 0, memory_order_acq_rel) != 0;
}

/* Bucket locks are taken with every signal blocked: a handler that wakes
 * a futex (async-signal-safe in the kernel) would otherwise spin on a
 * lock its own thread holds. */
static void lock_b(bucket *b, sigset_t *old) {
  sigset_t all;
  sigfillset(&all);
  iof__libc.pthread_sigmask(SIG_BLOCK, &all, old);
  iof__lk_lock(&b->lk);
}

static void unlock_b(bucket *b, const sigset_t *old) {
  iof__lk_unlock(&b->lk);
  iof__libc.pthread_sigmask(SIG_SETMASK, old, NULL);
}

/* A child has only the forking thread: the parent's waiters (and a bucket
 * lock another thread held) are not its own. */
static void forked_child(void) {
  memset(table, 0, sizeof table);
  atomic_store(&waiting, 0);
}

__attribute__((constructor)) static void futex_fork_handler(void) {
  (void)pthread_atfork(NULL, NULL, forked_child);
}

/* ---- waiting ---------------------------------------------------------- */

static bucket *lock_own(fx_wait *fw, sigset_t *old);

static bool wait_begin(void *p, iof__wait *w) {
  fx_wait *fw = p;
  sigset_t old;
  bucket *b = lock_own(fw, &old);
  fw->gap = false;
  if (fw->woken) { /* taken by a wake between two polls */
    iof__wq_unlink(&b->q, &fw->node);
    unlock_b(b, &old);
    w->result = 0;
    return false;
  }
  /* The first pass compares the word (under the lock a wake that changed
   * it first is seen); later ones are still queued and compare nothing. */
  if (!fw->node.linked &&
      atomic_load_explicit((_Atomic uint32_t *)fw->orig,
                           memory_order_relaxed) != fw->val) {
    unlock_b(b, &old);
    w->result = -EAGAIN;
    return false;
  }
  bool queued;
  if (fw->node.linked) {
    fw->published = true;
    queued = iof__wait_publish(w);
    if (!queued) {
      iof__wq_unlink(&b->q, &fw->node);
      fw->published = false;
    }
  } else {
    queued = iof__wq_push_publish(&b->q, &fw->node, &fw->published, w);
  }
  unlock_b(b, &old);
  return queued;
}

/* The bucket fw is queued in, locked (a requeue may move it meanwhile). */
static bucket *lock_own(fx_wait *fw, sigset_t *old) {
  for (;;) {
    bucket *b = atomic_load_explicit(&fw->b, memory_order_relaxed);
    lock_b(b, old);
    if (b == atomic_load_explicit(&fw->b, memory_order_relaxed)) return b;
    unlock_b(b, old);
  }
}

static long fiber_wait(uint32_t *addr, int op, uint32_t val,
                       const struct timespec *t, uint32_t bitset) {
  int cmd = op & FUTEX_CMD_MASK;
  bool private_ = op & FUTEX_PRIVATE_FLAG;
  /* The kernel checks what it would check, without queueing us (a queued
   * transient waiter could be requeued and its wake lost): the timeout
   * and flags on a dummy word whose value differs (EAGAIN: all good), then
   * the address and value with a requeue of nobody (0: it matched). */
  if (t || (op & FUTEX_CLOCK_REALTIME)) {
    uint32_t dummy = 0;
    if (sys_futex(&dummy, op, 1, t, NULL, bitset) == 0 || errno != EAGAIN)
      return -1;
  }
  if (bitset == 0) return fail(EINVAL);
  int pflag = op & FUTEX_PRIVATE_FLAG;
  if (sys_futex(addr, FUTEX_CMP_REQUEUE | pflag, 0, NULL, addr, val) < 0)
    return -1;
  int64_t deadline = -1;
  if (t) {
    struct timespec ts = *t; /* the kernel read it: readable, valid */
    if (cmd == FUTEX_WAIT) { /* relative */
      int r = iof__rel_to_mono(&ts, &deadline);
      if (r < 0) return fail(-r);
    } else {
      int r = iof__abs_to_mono(op & FUTEX_CLOCK_REALTIME ? CLOCK_REALTIME
                                                         : CLOCK_MONOTONIC,
                               &ts, &deadline);
      if (r < 0) return fail(-r);
    }
    if (deadline <= iof__now_ns()) return fail(ETIMEDOUT);
  }

  int saved = errno;
  fx_wait fw = {.val = val, .bitset = bitset, .orig = addr};
  atomic_init(&fw.addr, addr);
  atomic_init(&fw.b, bucket_of(addr));
  atomic_fetch_add_explicit(&waiting, 1, memory_order_acq_rel);
  bool poll = !private_;  /* another process may wake a shared word */
  int64_t step = 1000000; /* re-read it from every 1 ms to every 64 ms */
  int r;
  iof__cwait cw;
  fw.node.w = &cw.w;
  for (;;) {
    int64_t until = deadline;
    if (poll) {
      int64_t next = iof__now_ns() + step;
      if (until < 0 || next < until) until = next;
    }
    fw.published = false;
    r = iof__cwait_block(&fw, wait_begin, &cw, until);
    if (!fw.published || cw.w.by_waker) break; /* answered by begin, woken */
    /* Timed out, the node still queued unless a wake took it meanwhile. */
    sigset_t old;
    bucket *b = lock_own(&fw, &old);
    bool again = false;
    if (fw.woken) {
      r = 0;
    } else if (until != deadline) { /* a poll */
      uint32_t *a = atomic_load_explicit(&fw.addr, memory_order_relaxed);
      if (a != addr) /* requeued within this process: no more polls */
        poll = false, again = true;
      else if (atomic_load_explicit((_Atomic uint32_t *)addr,
                                    memory_order_relaxed) != val)
        r = 0;
      else
        again = true;
    }
    if (again)
      fw.gap = true; /* cw is reset for the next pass: wakers keep off it */
    else
      iof__wq_unlink(&b->q, &fw.node);
    unlock_b(b, &old);
    if (!again) break;
    if (step < 64000000) step *= 2;
  }
  atomic_fetch_sub_explicit(&waiting, 1, memory_order_acq_rel);
  if (r < 0) return fail(-r);
  errno = saved;
  return 0;
}

/* ---- waking ----------------------------------------------------------- */

/* Takes up to n table waiters on addr whose bitset meets `bitset`, and
 * moves up to nq more to addr2 (a requeue). cmp: when non-NULL, *addr
 * must still equal *cmp (else -EAGAIN). Wakes the claimed ones after the
 * locks are released. Returns the number woken; *moved the number
 * requeued. A node whose wait was already settled (its timer fired, or it
 * is between two polls) is taken too: its fiber returns 0, as a kernel
 * waiter woken just as its timeout fired does. */
static long table_wake(uint32_t *addr, int n, uint32_t bitset, uint32_t *addr2,
                       int nq, const uint32_t *cmp, int *moved) {
  *moved = 0;
  if (!any_waiting()) return 0;
  bucket *b1 = bucket_of(addr);
  bucket *b2 = nq > 0 ? bucket_of(addr2) : b1;
  bucket *lo = b1 < b2 ? b1 : b2, *hi = b1 < b2 ? b2 : b1;
  sigset_t old, old2;
  lock_b(lo, &old);
  if (hi != lo) lock_b(hi, &old2);
  long woken = 0;
  iof__wnode *claimed = NULL, **tail = &claimed;
  iof__waitq movers = {0};
  if (cmp && atomic_load_explicit((_Atomic uint32_t *)addr,
                                  memory_order_relaxed) != *cmp) {
    woken = -EAGAIN;
    goto out;
  }
  for (iof__wnode *nd = b1->q.head, *next; nd; nd = next) {
    next = nd->next;
    fx_wait *fw = of_node(nd);
    if (atomic_load_explicit(&fw->addr, memory_order_relaxed) != addr) continue;
    if (woken < n) {
      if (!(fw->bitset & bitset)) continue;
      iof__wq_unlink(&b1->q, nd);
      if (!fw->gap && iof__wait_claim(nd->w, 0, 0)) {
        *tail = nd; /* chained through next, free once unlinked */
        tail = &nd->next;
      } else {
        fw->woken = true;
      }
      woken++;
    } else if (*moved < nq) {
      (*moved)++;
      if (addr2 == addr) continue; /* the same word: stays in place */
      iof__wq_unlink(&b1->q, nd);
      atomic_store_explicit(&fw->addr, addr2, memory_order_relaxed);
      atomic_store_explicit(&fw->b, b2, memory_order_relaxed);
      iof__wq_push(&movers, nd); /* after the scan: b2 may be b1 */
    } else {
      break;
    }
  }
  while (movers.head) {
    iof__wnode *nd = movers.head;
    iof__wq_unlink(&movers, nd);
    iof__wq_push(&b2->q, nd);
  }
out:
  if (hi != lo) unlock_b(hi, &old2);
  unlock_b(lo, &old);
  while (claimed) {
    iof__wnode *nd = claimed;
    claimed = nd->next;
    iof__cwait_wake(nd->w); /* the node may be gone after this */
  }
  return woken;
}

/* FUTEX_WAKE(_BITSET): the table, then the kernel for the rest. The
 * kernel wakes one waiter even for a count of 0 or less; so do we. */
static long wake(uint32_t *addr, int op, int n, uint32_t bitset) {
  if (bitset == 0) return fail(EINVAL);
  int want = n > 0 ? n : 1, moved;
  long t = table_wake(addr, want, bitset, NULL, 0, NULL, &moved);
  if (t >= want) return t;
  long k = sys_futex(addr, op, (uint32_t)(want - t), NULL, NULL, bitset);
  if (k < 0) return t > 0 ? t : -1;
  return t + k;
}

/* FUTEX_(CMP_)REQUEUE: the table's waiters, then the kernel's; the count
 * is of the woken and the moved, as the kernel's. */
static long requeue(uint32_t *addr, int op, int n, int nq, uint32_t *addr2,
                    bool cmp, uint32_t val3) {
  if (n < 0 || nq < 0) return fail(EINVAL);
  /* The kernel checks both addresses (and the value) first: wake 0, move
   * 0, nothing else happens. */
  if (sys_futex(addr, op, 0, NULL, addr2, val3) < 0) return -1;
  int moved;
  long t = table_wake(addr, n, FUTEX_BITSET_MATCH_ANY, addr2, nq,
                      cmp ? &val3 : NULL, &moved);
  if (t < 0) return fail(-(int)t);
  long k = sys_futex(addr, op, (uint32_t)(n - t),
                     (const void *)(uintptr_t)(nq - moved), addr2, val3);
  if (k < 0) return t + moved > 0 ? t + moved : -1;
  return t + moved + k;
}

/* FUTEX_WAKE_OP: the kernel applies the operation and wakes its own
 * waiters; the table's on both words are woken too (for addr2 perhaps
 * when the comparison failed: a spurious wake-up, which futex callers
 * tolerate). */
static long wake_op(uint32_t *addr, int op, int n, int n2, uint32_t *addr2,
                    uint32_t val3) {
  long k = sys_futex(addr, op, (uint32_t)n, (const void *)(uintptr_t)n2, addr2,
                     val3);
  if (k < 0) return -1;
  int moved;
  long t = table_wake(addr, n > 0 ? n : 1, FUTEX_BITSET_MATCH_ANY, NULL, 0,
                      NULL, &moved);
  if (n2 > 0)
    t += table_wake(addr2, n2, FUTEX_BITSET_MATCH_ANY, NULL, 0, NULL, &moved);
  return k + t;
}

/* ---- the call --------------------------------------------------------- */

long iof_compat_futex(uint32_t *uaddr, int futex_op, uint32_t val,
                      const struct timespec *timeout, uint32_t *uaddr2,
                      uint32_t val3) {
  int cmd = futex_op & FUTEX_CMD_MASK;
  /* The clock flag only goes with a wait: elsewhere the kernel's ENOSYS.
   * A child forked from a fiber has no fibers of its own. */
  if (iof__compat_forked || ((futex_op & FUTEX_CLOCK_REALTIME) &&
                             cmd != FUTEX_WAIT_BITSET && cmd != FUTEX_WAIT))
    goto kernel;
  switch (cmd) {
  case FUTEX_WAIT:
  case FUTEX_WAIT_BITSET:
    if (!iof__compat_fiber()) goto kernel;
    /* A word among the fiber thread's own thread-locals has the same
     * address in every fiber thread of its io thread, and its value moves
     * out when another one is switched in: a waker's store could land in
     * another thread's copy, and a record holding it be queued twice
     * (InnoDB's group-commit waiter). Such a wait stays the kernel's and
     * holds the io thread, so the values stay in place until it ends. */
    if (iof__tls_owns(uaddr)) goto kernel;
    return fiber_wait(uaddr, futex_op, val, timeout,
                      cmd == FUTEX_WAIT ? FUTEX_BITSET_MATCH_ANY : val3);
  case FUTEX_WAKE:
  case FUTEX_WAKE_BITSET:
    return wake(uaddr, futex_op, (int)val,
                cmd == FUTEX_WAKE ? FUTEX_BITSET_MATCH_ANY : val3);
  case FUTEX_REQUEUE:
  case FUTEX_CMP_REQUEUE:
    return requeue(uaddr, futex_op, (int)val, (int)(uintptr_t)timeout, uaddr2,
                   cmd == FUTEX_CMP_REQUEUE, val3);
  case FUTEX_WAKE_OP:
    return wake_op(uaddr, futex_op, (int)val, (int)(uintptr_t)timeout, uaddr2,
                   val3);
  default: /* priority-inheritance futexes: kernel-owned, by thread id */
    break;
  }
kernel:
  return sys_futex(uaddr, futex_op, val, timeout, uaddr2, val3);
}
