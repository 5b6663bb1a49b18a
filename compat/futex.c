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
 * to every 64 ms, and returns 0 once it changed. */
#include "compat/fd_table.h"
#include "compat/thread_internal.h"

#include <iofiber/compat_io.h>

#include <errno.h>
#include <limits.h>
#include <linux/futex.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
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
  iof__wnode node;
  uint32_t *orig; /* the word the call was given, checked by the kernel */
  bool published;
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

/* ---- waiting ---------------------------------------------------------- */

static bool wait_begin(void *p, iof__wait *w) {
  fx_wait *fw = p;
  bucket *b = atomic_load_explicit(&fw->b, memory_order_relaxed);
  iof__lk_lock(&b->lk);
  /* Under the lock a requeue cannot move fw. A requeued wait compares
   * nothing (nor does the kernel's), and reads no unchecked address. */
  uint32_t *a = atomic_load_explicit(&fw->addr, memory_order_relaxed);
  if (a == fw->orig && atomic_load_explicit((_Atomic uint32_t *)a,
                                            memory_order_relaxed) != fw->val) {
    iof__lk_unlock(&b->lk);
    w->result = -EAGAIN;
    return false;
  }
  bool queued = iof__wq_push_publish(&b->q, &fw->node, &fw->published, w);
  iof__lk_unlock(&b->lk);
  return queued;
}

/* The bucket fw is queued in, locked (a requeue may move it meanwhile). */
static bucket *lock_own(fx_wait *fw) {
  for (;;) {
    bucket *b = atomic_load_explicit(&fw->b, memory_order_relaxed);
    iof__lk_lock(&b->lk);
    if (b == atomic_load_explicit(&fw->b, memory_order_relaxed)) return b;
    iof__lk_unlock(&b->lk);
  }
}

/* One suspension until a wake, the word changing under the bucket lock,
 * or deadline (CLOCK_MONOTONIC ns, < 0 none). 0, -EAGAIN or -ETIMEDOUT. */
static int wait_once(fx_wait *fw, int64_t deadline) {
  iof__cwait cw;
  fw->node.w = &cw.w;
  fw->published = false;
  int r = iof__cwait_block(fw, wait_begin, &cw, deadline);
  if (fw->published && !cw.w.by_waker) {
    bucket *b = lock_own(fw);
    iof__wq_unlink(&b->q, &fw->node);
    iof__lk_unlock(&b->lk);
  }
  return r;
}

static long fiber_wait(uint32_t *addr, bool private_, uint32_t val,
                       uint32_t bitset, int64_t deadline) {
  /* The kernel checks the address (EFAULT, alignment) and the value for
   * us: with a zero timeout a matching word times out at once. */
  static const struct timespec zero = {0, 0};
  int pflag = private_ ? FUTEX_PRIVATE_FLAG : 0;
  if (sys_futex(addr, FUTEX_WAIT | pflag, val, &zero, NULL, 0) == 0) return 0;
  if (errno != ETIMEDOUT) return -1;
  if (deadline >= 0 && deadline <= iof__now_ns()) return fail(ETIMEDOUT);

  fx_wait fw = {.val = val, .bitset = bitset, .orig = addr};
  atomic_init(&fw.addr, addr);
  atomic_init(&fw.b, bucket_of(addr));
  atomic_fetch_add_explicit(&waiting, 1, memory_order_acq_rel);
  bool poll = !private_;  /* another process may wake a shared word */
  int64_t step = 1000000; /* re-read it from every 1 ms to every 64 ms */
  int r;
  for (bool first = true;; first = false) {
    int64_t until = deadline;
    if (poll) {
      int64_t next = iof__now_ns() + step;
      if (until < 0 || next < until) until = next;
    }
    r = wait_once(&fw, until);
    if (r == -EAGAIN && !first) r = 0; /* it matched before: changed since */
    if (r != -ETIMEDOUT || until == deadline) break;
    /* Requeued to a word of this process: its wake comes through here. */
    if (atomic_load_explicit(&fw.addr, memory_order_relaxed) != addr)
      poll = false;
    if (step < 64000000) step *= 2;
  }
  atomic_fetch_sub_explicit(&waiting, 1, memory_order_relaxed);
  return r < 0 ? fail(-r) : 0;
}

/* ---- waking ----------------------------------------------------------- */

/* Claims up to n table waiters on addr whose bitset meets `bitset`, and
 * moves up to nq more to addr2 (a requeue; addr2 NULL: none). cmp: when
 * non-NULL, *addr must still equal *cmp (else -EAGAIN). Wakes the claimed
 * ones after the locks are released. Returns the number woken; *moved the
 * number requeued. */
static long table_wake(uint32_t *addr, int n, uint32_t bitset, uint32_t *addr2,
                       int nq, const uint32_t *cmp, int *moved) {
  *moved = 0;
  if (!any_waiting()) return 0;
  bucket *b1 = bucket_of(addr);
  bucket *b2 = nq > 0 ? bucket_of(addr2) : b1;
  bucket *lo = b1 < b2 ? b1 : b2, *hi = b1 < b2 ? b2 : b1;
  iof__lk_lock(&lo->lk);
  if (hi != lo) iof__lk_lock(&hi->lk);
  if (cmp && atomic_load_explicit((_Atomic uint32_t *)addr,
                                  memory_order_relaxed) != *cmp) {
    if (hi != lo) iof__lk_unlock(&hi->lk);
    iof__lk_unlock(&lo->lk);
    return -EAGAIN;
  }
  iof__wnode *claimed = NULL, **tail = &claimed;
  long woken = 0;
  for (iof__wnode *nd = b1->q.head, *next; nd; nd = next) {
    next = nd->next;
    fx_wait *fw = of_node(nd);
    if (atomic_load_explicit(&fw->addr, memory_order_relaxed) != addr) continue;
    if (woken < n) {
      if (!(fw->bitset & bitset)) continue;
      iof__wq_unlink(&b1->q, nd);
      if (iof__wait_claim(nd->w, 0, 0)) {
        *tail = nd; /* chained through next, free once unlinked */
        tail = &nd->next;
        woken++;
      }
    } else if (*moved < nq) {
      if (atomic_load_explicit(&nd->w->state, memory_order_acquire) !=
          IOF__W_WAITING)
        continue; /* settled by its timer: it unlinks itself */
      iof__wq_unlink(&b1->q, nd);
      atomic_store_explicit(&fw->addr, addr2, memory_order_relaxed);
      atomic_store_explicit(&fw->b, b2, memory_order_relaxed);
      iof__wq_push(&b2->q, nd);
      (*moved)++;
    } else {
      break;
    }
  }
  if (hi != lo) iof__lk_unlock(&hi->lk);
  iof__lk_unlock(&lo->lk);
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

/* FUTEX_(CMP_)REQUEUE: the table's waiters, then the kernel's. */
static long requeue(uint32_t *addr, int op, int n, int nq, uint32_t *addr2,
                    bool cmp, uint32_t val3) {
  if (n < 0 || nq < 0) return fail(EINVAL);
  /* The kernel checks both addresses and the value first (wake 0, move
   * 0: nothing else happens), before the table reads the word. */
  if (cmp && sys_futex(addr, op, 0, NULL, addr2, val3) < 0) return -1;
  int moved;
  long t = table_wake(addr, n, FUTEX_BITSET_MATCH_ANY, addr2, nq,
                      cmp ? &val3 : NULL, &moved);
  if (t < 0) return fail(-(int)t);
  long k = sys_futex(addr, op, (uint32_t)(n - t),
                     (const void *)(uintptr_t)(nq - moved), addr2, val3);
  if (k < 0) return t + moved > 0 ? t + moved : -1;
  /* CMP_REQUEUE counts the moved waiters too; REQUEUE only the woken. */
  return cmp ? t + moved + k : t + k;
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
  long t = table_wake(addr, n, FUTEX_BITSET_MATCH_ANY, NULL, 0, NULL, &moved);
  if (n2 > 0)
    t += table_wake(addr2, n2, FUTEX_BITSET_MATCH_ANY, NULL, 0, NULL, &moved);
  return k + t;
}

/* ---- the call --------------------------------------------------------- */

static int64_t ts_ns(const struct timespec *t) {
  if (t->tv_sec > INT64_MAX / 1000000000 - 1) return INT64_MAX;
  return (int64_t)t->tv_sec * 1000000000 + t->tv_nsec;
}

static long wait_call(uint32_t *addr, int op, uint32_t val,
                      const struct timespec *t, uint32_t bitset) {
  int cmd = op & FUTEX_CMD_MASK;
  bool private_ = op & FUTEX_PRIVATE_FLAG;
  if (bitset == 0) return fail(EINVAL);
  if (!addr) return fail(EFAULT);
  if ((uintptr_t)addr % 4) return fail(EINVAL);
  int64_t deadline = -1;
  if (t) {
    if (t->tv_sec < 0 || t->tv_nsec < 0 || t->tv_nsec >= 1000000000)
      return fail(EINVAL);
    int64_t now = iof__now_ns(), v = ts_ns(t);
    if (cmd == FUTEX_WAIT) { /* relative */
      deadline = v > INT64_MAX - now ? INT64_MAX : now + v;
    } else if (op & FUTEX_CLOCK_REALTIME) {
      int r = iof__abs_to_mono(CLOCK_REALTIME, t, &deadline);
      if (r < 0) return fail(-r);
    } else {
      deadline = v;
    }
  }
  return fiber_wait(addr, private_, val, bitset, deadline);
}

long iof_compat_futex(uint32_t *uaddr, int futex_op, uint32_t val,
                      const struct timespec *timeout, uint32_t *uaddr2,
                      uint32_t val3) {
  int cmd = futex_op & FUTEX_CMD_MASK;
  /* A child forked from a fiber has no table of its own: the copy holds
   * the parent's waiters. */
  if (iof__compat_forked) goto kernel;
  switch (cmd) {
  case FUTEX_WAIT:
  case FUTEX_WAIT_BITSET:
    if (!iof__compat_fiber()) goto kernel;
    return wait_call(uaddr, futex_op, val, timeout,
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
