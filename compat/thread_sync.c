/* compat's pthread mutex, condition variable, read-write lock, barrier,
 * once and POSIX unnamed semaphore, in place in the user's storage (see
 * thread_internal.h), plus the futex parker and futex lock under them. */
#include "compat/backoff.h"
#include "compat/fd_table.h"
#include "compat/thread_internal.h"
#include "io/resolver_internal.h"

#include <iofiber/compat_io.h>

#include <errno.h>
#include <limits.h>
#include <linux/futex.h>
#include <stddef.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

/* ---- futex parker and lock -------------------------------------------- */

static void futex_wake(atomic_int *a, int n) {
  iof__syscall()(SYS_futex, a, FUTEX_WAKE | FUTEX_PRIVATE_FLAG, n, NULL, NULL,
                 0);
}

/* Sleeps while *a == val, until the absolute CLOCK_MONOTONIC deadline
 * (NULL: none). false once the deadline has passed. */
static bool futex_wait(atomic_int *a, int val, const struct timespec *abs) {
  long r = iof__syscall()(SYS_futex, a, FUTEX_WAIT_BITSET | FUTEX_PRIVATE_FLAG,
                          val, abs, NULL, FUTEX_BITSET_MATCH_ANY);
  return !(r < 0 && errno == ETIMEDOUT);
}

static inline void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  __asm__ volatile("yield");
#endif
}

void iof__lk_lock(atomic_int *l) {
  int c = 0;
  if (atomic_compare_exchange_strong_explicit(l, &c, 1, memory_order_acquire,
                                              memory_order_relaxed))
    return;
  for (int i = 0; i < 64; i++) {
    cpu_relax();
    c = 0;
    if (atomic_load_explicit(l, memory_order_relaxed) == 0 &&
        atomic_compare_exchange_weak_explicit(l, &c, 1, memory_order_acquire,
                                              memory_order_relaxed))
      return;
  }
  int e = errno;
  c = atomic_exchange_explicit(l, 2, memory_order_acquire);
  while (c != 0) {
    futex_wait(l, 2, NULL);
    c = atomic_exchange_explicit(l, 2, memory_order_acquire);
  }
  errno = e;
}

void iof__lk_unlock(atomic_int *l) {
  if (atomic_exchange_explicit(l, 0, memory_order_release) == 2) {
    int e = errno;
    futex_wake(l, 1);
    errno = e;
  }
}

static __thread char self_token __attribute__((tls_model("initial-exec")));

/* noinline: a TLS address must not be reused across a fiber switch. */
__attribute__((noinline)) void *iof__cthr_self(void) {
  iof_thread_state *th = iof__thread_peek();
  if (th && th->current != &th->root) return th->current;
  return &self_token;
}

void iof__cwait_wake(iof__wait *w) {
  if (w->fiber) {
    iof__wait_wake(w);
    return;
  }
  iof__cwait *cw = (iof__cwait *)((char *)w - offsetof(iof__cwait, w));
  int e = errno;
  /* Only a waiter asleep (2) needs the system call; one still spinning
   * sees the 1. It may return (and its stack be reused) right after the
   * exchange: a wake on a dead address is at worst a spurious wake-up,
   * which every futex waiter tolerates. */
  if (atomic_exchange_explicit(&cw->futex, 1, memory_order_acq_rel) == 2)
    futex_wake(&cw->futex, 1);
  errno = e;
}

int iof__cwait_block(void *op, iof__wait_begin begin, iof__cwait *cw,
                     int64_t deadline_ns) {
  int e = errno;
  if (iof__cthr_fiber()) {
    int r = iof__wait_block(op, begin, &cw->w, deadline_ns, 0);
    errno = e;
    return r;
  }
  iof__wait *w = &cw->w;
  atomic_init(&w->state, IOF__W_INIT);
  w->result = 0;
  w->index = -1;
  w->by_waker = false;
  w->parker = NULL;
  w->fiber = NULL;
  atomic_init(&cw->futex, 0);
  if (begin(op, w)) {
    struct timespec ts, *tp = NULL;
    if (deadline_ns >= 0) {
      ts.tv_sec = deadline_ns / 1000000000;
      ts.tv_nsec = deadline_ns % 1000000000;
      tp = &ts;
    }
    /* Fibers answer within microseconds; a sleep costs a futex wake and a
     * reschedule on both sides. */
    int64_t missed = iof__thread_spin(&cw->futex);
    for (;;) {
      /* 2: asleep, so the waker knows a wake-up call is due (1: woken). */
      int v = 0;
      if (!atomic_compare_exchange_strong_explicit(
              &cw->futex, &v, 2, memory_order_acquire, memory_order_acquire) &&
          v == 1)
        break;
      if (futex_wait(&cw->futex, 2, tp)) continue;
      /* Timed out: claim it ourselves, or a waker got there first and is
       * about to set the word (then wait for that: it uses cw). */
      int expect = IOF__W_WAITING;
      if (atomic_compare_exchange_strong(&w->state, &expect, IOF__W_DONE)) {
        w->result = -ETIMEDOUT;
        w->index = -1;
        w->by_waker = false;
        break;
      }
      tp = NULL;
    }
    iof__thread_spin_woke(missed);
  }
  errno = e;
  return w->result;
}

int iof__abs_to_mono(clockid_t clock, const struct timespec *abs,
                     int64_t *out) {
  if (!abs || abs->tv_nsec < 0 || abs->tv_nsec >= 1000000000) return -EINVAL;
  if (clock != CLOCK_REALTIME && clock != CLOCK_MONOTONIC) return -EINVAL;
  int64_t mono = iof__now_ns();
  int64_t now = mono;
  if (clock == CLOCK_REALTIME) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    now = (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
  }
  if (abs->tv_sec < 0) {
    *out = 0;
    return 0;
  }
  int64_t t = abs->tv_sec > INT64_MAX / 1000000000 - 1
                  ? INT64_MAX
                  : (int64_t)abs->tv_sec * 1000000000 + abs->tv_nsec;
  /* The remaining time on `clock`, applied to the monotonic clock (a jump
   * of the real-time clock during the wait is not followed). */
  int64_t left = t - now;
  if (left <= 0) {
    *out = mono;
    return 0;
  }
  *out = left > INT64_MAX - mono ? INT64_MAX : mono + left;
  return 0;
}

int iof__ts_check(const struct timespec *ts) {
  uint32_t word = 0;
  int saved = errno;
  long r =
      iof__syscall()(SYS_futex, &word, FUTEX_WAIT_PRIVATE, 1u, ts, NULL, 0);
  int e = r == 0 || errno == EAGAIN ? 0 : -errno; /* 0: a spurious wake */
  errno = saved;
  return e;
}

int iof__mem_check(const void *p, size_t n) {
  static const struct timespec now = {0, 0};
  if (!n) return 0;
  uintptr_t a = (uintptr_t)p, last = a + n - 1;
  if (last < a) return -EFAULT;
  int saved = errno, e = 0;
  /* A word in each 4 KiB page of the range (4-aligned, as futex wants;
   * readability goes by pages), asked of the kernel: a futex wait that
   * reads the word, and with a zero timeout never sleeps. */
  for (a &= ~(uintptr_t)3;; a = (a | 4095) + 1) {
    long r = iof__syscall()(SYS_futex, (uint32_t *)a, FUTEX_WAIT_PRIVATE,
                            0x9e3779b9u, &now, NULL, 0);
    if (r < 0 && errno == EFAULT) {
      e = -EFAULT;
      break;
    }
    if ((a | 4095) >= last) break;
  }
  errno = saved;
  return e;
}

int iof__rel_to_mono(const struct timespec *rel, int64_t *out) {
  if (!rel || rel->tv_sec < 0 || rel->tv_nsec < 0 || rel->tv_nsec >= 1000000000)
    return -EINVAL;
  int64_t ns = rel->tv_sec > INT64_MAX / 1000000000 - 1
                   ? INT64_MAX
                   : (int64_t)rel->tv_sec * 1000000000 + rel->tv_nsec;
  *out = iof__sat_add(iof__now_ns(), ns);
  return 0;
}

/* ---- libc's process-shared objects ------------------------------------ */

/* compat's objects queue their waiters on this process's stacks, so a
 * mutex, condition variable or read-write lock made process-shared (and a
 * robust mutex, which the kernel releases when its owner dies) is made by
 * libc, in libc's layout, which other processes use as well. The calls
 * tell such an object by the marks libc leaves in it, in words compat's
 * layouts never write (glibc's mutex kind bits, condition variable and
 * read-write lock "shared" fields). A fiber does not wait for one in the
 * kernel (the holder may be a fiber of its own thread): it tries it
 * between naps, as for libc's semaphores. */
#ifdef __GLIBC__
#define LIBC_OBJECTS 1
#define LIBC_MUTEX_ROBUST 16   /* glibc's PTHREAD_MUTEX_ROBUST_NORMAL_NP */
#define LIBC_MUTEX_PSHARED 128 /* glibc's PTHREAD_MUTEX_PSHARED_BIT */
#define LIBC_COND_SHARED 1u    /* glibc's __wrefs bit: process-shared */
#define LIBC_COND_MONOTONIC 2u /* glibc's __wrefs bit: CLOCK_MONOTONIC */
#else
#define LIBC_OBJECTS 0
#endif

enum {
  NAP_MIN_NS = 50000,    /* first pause between two tries of a lock */
  NAP_MAX_NS = 5000000,  /* longest pause between two tries of a lock */
  COND_NAP_NS = 1000000, /* a condition variable wait's one pause */
};

/* Takes a libc lock in a fiber: tries it, then again between quiet
 * pauses growing from NAP_MIN_NS to NAP_MAX_NS until it stops saying EBUSY
 * or the deadline (abs on clock, when timed) passes. */
static int nap_until_taken(int (*try)(void *), void *obj, clockid_t clock,
                           const struct timespec *abs, bool timed) {
  int r = try(obj);
  if (r != EBUSY) return r;
  int64_t deadline = INT64_MAX;
  if (timed) {
    int e = iof__abs_to_mono(clock, abs, &deadline);
    if (e < 0) return -e;
  }
  iof__backoff b;
  iof__backoff_init_quiet(&b, NAP_MIN_NS, NAP_MAX_NS);
  for (;;) {
    if (iof__backoff_pause(&b, deadline) == -ETIMEDOUT) return ETIMEDOUT;
    r = try(obj);
    if (r != EBUSY) return r;
  }
}

/* ---- destroy ---------------------------------------------------------- */

/* A wait its timeout or a cancellation ended leaves its node queued until
 * its owner runs again and takes it out under the object's lock. POSIX
 * lets a program destroy and free an object nobody is blocked on as soon
 * as destroy returns, so destroy waits for those owners (glibc's
 * pthread_cond_destroy waits for its woken waiters too). They are
 * runnable: a fiber caller yields to them, a plain thread naps. After
 * LEAVE_NS (a caller that keeps them from running: code outside fibers on
 * their io thread) destroy says EBUSY rather than hang. */
enum { LEAVE_NS = 100000000, LEAVE_NAP_NS = 50000 };

/* destroy's answer for an object whose waiters queue on q under lk: EBUSY
 * while held(obj) (asked under lk; NULL: never held) or a waiter still
 * waits, 0 once the queue is empty. */
static int destroy_when_idle(atomic_int *lk, const iof__waitq *q,
                             bool (*held)(const void *), const void *obj) {
  int64_t until = 0;
  for (int i = 0;; i++) {
    iof__lk_lock(lk);
    bool busy = (held && held(obj)) || iof__wq_has_waiter(q);
    bool leaving = q->head != NULL;
    iof__lk_unlock(lk);
    if (busy) return EBUSY;
    if (!leaving) return 0;
    int64_t now = iof__now_ns();
    if (!until) until = now + LEAVE_NS;
    if (now >= until) return EBUSY;
    if (iof__cthr_fiber() && i < 16)
      iof_yield();
    else
      iof__nap_until(now + LEAVE_NAP_NS);
  }
}

/* ---- mutex ------------------------------------------------------------ */

typedef struct cmutex {
  atomic_int lk;       /* the queue's lock */
  unsigned depth;      /* the owner's recursion depth */
  void *_Atomic owner; /* iof__cthr_self() of the owner */
  int kind;            /* glibc's __kind, set by its static initializers */
  atomic_int state;    /* 0 free, 1 locked, 2 locked and maybe waiters */
  iof__waitq q;
} cmutex;

_Static_assert(sizeof(cmutex) <= sizeof(pthread_mutex_t), "mutex overlay");
_Static_assert(_Alignof(cmutex) <= _Alignof(pthread_mutex_t), "mutex align");
#ifdef __GLIBC__
_Static_assert(offsetof(cmutex, kind) ==
                   offsetof(pthread_mutex_t, __data.__kind),
               "the static initializers' kind field");
#endif

#define CM(p) ((cmutex *)(void *)(p))

static inline bool libc_mutex(const pthread_mutex_t *pm) {
#if LIBC_OBJECTS
  return (CM(pm)->kind & (LIBC_MUTEX_ROBUST | LIBC_MUTEX_PSHARED)) != 0;
#else
  (void)pm;
  return false;
#endif
}

static int libc_mutex_try(void *pm) {
  return iof__libc.pthread_mutex_trylock(pm);
}

/* Locks a libc mutex: libc's call in a plain thread (a timed one with
 * another clock than CLOCK_REALTIME tries between naps), tries between
 * naps in a fiber. EOWNERDEAD and ENOTRECOVERABLE (robust) as libc says. */
static int libc_mutex_lock(pthread_mutex_t *pm, clockid_t clock,
                           const struct timespec *abs, bool timed) {
  bool fiber = iof__cthr_fiber() != NULL;
  if (!fiber && !timed) return iof__libc.pthread_mutex_lock(pm);
  if (!fiber && clock == CLOCK_REALTIME)
    return iof__libc.pthread_mutex_timedlock(pm, abs);
  return nap_until_taken(libc_mutex_try, pm, clock, abs, timed);
}

enum { K_NORMAL = 0, K_RECURSIVE = 1, K_ERRORCHECK = 2 };

static int mkind(const cmutex *m) {
  int k = m->kind & 3;
  return k == 3 ? K_NORMAL : k; /* adaptive: a normal mutex */
}

int iof_compat_pthread_mutex_init(pthread_mutex_t *pm,
                                  const pthread_mutexattr_t *attr) {
  if (!pm) return EINVAL;
  int type = PTHREAD_MUTEX_DEFAULT;
  if (attr) {
    int v;
    bool libc = false;
    if (pthread_mutexattr_gettype(attr, &type) != 0) return EINVAL;
    if (pthread_mutexattr_getpshared(attr, &v) == 0 &&
        v != PTHREAD_PROCESS_PRIVATE)
      libc = true;
    if (pthread_mutexattr_getrobust(attr, &v) == 0 &&
        v != PTHREAD_MUTEX_STALLED)
      libc = true;
    if (libc)
      return LIBC_OBJECTS ? iof__libc.pthread_mutex_init(pm, attr) : EINVAL;
  }
  memset(pm, 0, sizeof *pm);
  cmutex *m = CM(pm);
  m->kind = type == PTHREAD_MUTEX_RECURSIVE    ? K_RECURSIVE
            : type == PTHREAD_MUTEX_ERRORCHECK ? K_ERRORCHECK
                                               : K_NORMAL;
  return 0;
}

static bool mutex_held(const void *p) {
  return atomic_load(&((const cmutex *)p)->state) != 0;
}

int iof_compat_pthread_mutex_destroy(pthread_mutex_t *pm) {
  if (!pm) return EINVAL;
  if (libc_mutex(pm)) return iof__libc.pthread_mutex_destroy(pm);
  cmutex *m = CM(pm);
  return destroy_when_idle(&m->lk, &m->q, mutex_held, m);
}

static inline bool mutex_try(cmutex *m, void *self) {
  int expect = 0;
  if (!atomic_compare_exchange_strong_explicit(
          &m->state, &expect, 1, memory_order_acquire, memory_order_relaxed))
    return false;
  atomic_store_explicit(&m->owner, self, memory_order_relaxed);
  m->depth = 1;
  return true;
}

typedef struct mlock_op {
  cmutex *m;
  iof__wnode node;
  bool published;
} mlock_op;

/* Under m->lk: take a mutex that became free, or mark it contended and
 * queue the waiter (unlock hands it over: owner set before the wake). */
static bool mlock_begin(void *p, iof__wait *w) {
  mlock_op *op = p;
  cmutex *m = op->m;
  iof__lk_lock(&m->lk);
  int s = atomic_load_explicit(&m->state, memory_order_relaxed);
  for (;;) {
    if (s == 0) {
      if (atomic_compare_exchange_weak_explicit(
              &m->state, &s, 1, memory_order_acquire, memory_order_relaxed)) {
        atomic_store_explicit(&m->owner, op->node.owner, memory_order_relaxed);
        iof__lk_unlock(&m->lk);
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
  iof__lk_unlock(&m->lk);
  return queued;
}

/* Waits for the mutex (not free a moment ago). 0 or -ETIMEDOUT. */
static int mutex_lock_slow(cmutex *m, void *self, int64_t deadline) {
  mlock_op op = {m, {0}, false};
  iof__cwait cw;
  op.node.w = &cw.w;
  op.node.owner = self;
  int r = iof__cwait_block(&op, mlock_begin, &cw, deadline);
  if (op.published && !cw.w.by_waker) {
    iof__lk_lock(&m->lk);
    iof__wq_unlink(&m->q, &op.node);
    iof__lk_unlock(&m->lk);
  }
  if (r == 0) m->depth = 1;
  return r;
}

/* Releases a held mutex whoever holds it: to the first waiter, if any. */
static void mutex_release(cmutex *m) {
  m->depth = 0;
  atomic_store_explicit(&m->owner, NULL, memory_order_relaxed);
  int expect = 1;
  if (atomic_compare_exchange_strong_explicit(
          &m->state, &expect, 0, memory_order_release, memory_order_relaxed))
    return;
  iof__lk_lock(&m->lk);
  iof__wnode *n = iof__wq_claim_first(&m->q, 0);
  if (n) {
    atomic_store_explicit(&m->owner, n->owner, memory_order_relaxed);
    if (!m->q.head) atomic_store_explicit(&m->state, 1, memory_order_relaxed);
  } else {
    atomic_store_explicit(&m->state, 0, memory_order_release);
  }
  iof__lk_unlock(&m->lk);
  if (n) iof__cwait_wake(n->w);
}

/* has_abs: timed; abs checked only when the mutex is not free (POSIX). */
static int mutex_lock(pthread_mutex_t *pm, clockid_t clock,
                      const struct timespec *abs, bool timed) {
  if (!pm) return EINVAL;
  if (libc_mutex(pm)) return libc_mutex_lock(pm, clock, abs, timed);
  cmutex *m = CM(pm);
  void *self = iof__cthr_self();
  if (atomic_load_explicit(&m->owner, memory_order_relaxed) == self) {
    if (mkind(m) != K_RECURSIVE) return EDEADLK;
    if (m->depth == UINT_MAX) return EAGAIN;
    m->depth++;
    return 0;
  }
  if (mutex_try(m, self)) return 0;
  int64_t deadline = -1;
  if (timed) {
    int r = iof__abs_to_mono(clock, abs, &deadline);
    if (r < 0) return -r;
  }
  return -mutex_lock_slow(m, self, deadline);
}

int iof_compat_pthread_mutex_lock(pthread_mutex_t *pm) {
  return mutex_lock(pm, CLOCK_REALTIME, NULL, false);
}

int iof_compat_pthread_mutex_timedlock(pthread_mutex_t *pm,
                                       const struct timespec *abstime) {
  return mutex_lock(pm, CLOCK_REALTIME, abstime, true);
}

/* The clocks a clocked wait may name; glibc refuses the others before it
 * looks at the object (a free mutex too). */
static bool wait_clock(clockid_t clock) {
  return clock == CLOCK_REALTIME || clock == CLOCK_MONOTONIC;
}

int iof_compat_pthread_mutex_clocklock(pthread_mutex_t *pm, clockid_t clock,
                                       const struct timespec *abstime) {
  if (!wait_clock(clock)) return EINVAL;
  return mutex_lock(pm, clock, abstime, true);
}

int iof_compat_pthread_mutex_trylock(pthread_mutex_t *pm) {
  if (!pm) return EINVAL;
  if (libc_mutex(pm)) return iof__libc.pthread_mutex_trylock(pm);
  cmutex *m = CM(pm);
  void *self = iof__cthr_self();
  if (atomic_load_explicit(&m->owner, memory_order_relaxed) == self &&
      mkind(m) == K_RECURSIVE) {
    if (m->depth == UINT_MAX) return EAGAIN;
    m->depth++;
    return 0;
  }
  return mutex_try(m, self) ? 0 : EBUSY;
}

int iof_compat_pthread_mutex_unlock(pthread_mutex_t *pm) {
  if (!pm) return EINVAL;
  if (libc_mutex(pm)) return iof__libc.pthread_mutex_unlock(pm);
  cmutex *m = CM(pm);
  if (atomic_load_explicit(&m->state, memory_order_relaxed) == 0) return EPERM;
  int kind = mkind(m);
  /* A normal mutex may be unlocked by another thread than the owner, as
   * glibc lets it be (some programs use one as a binary semaphore). */
  if (kind != K_NORMAL &&
      atomic_load_explicit(&m->owner, memory_order_relaxed) != iof__cthr_self())
    return EPERM;
  if (kind == K_RECURSIVE && m->depth > 1) {
    m->depth--;
    return 0;
  }
  mutex_release(m);
  return 0;
}

/* ---- condition variable ----------------------------------------------- */

typedef struct ccond {
  atomic_int lk;
  int clock; /* 0 = CLOCK_REALTIME, the static initializer's */
  iof__waitq q;
} ccond;

_Static_assert(sizeof(ccond) <= sizeof(pthread_cond_t), "cond overlay");
_Static_assert(_Alignof(ccond) <= _Alignof(pthread_cond_t), "cond align");

#define CC(p) ((ccond *)(void *)(p))

#if LIBC_OBJECTS
_Static_assert(sizeof(ccond) <= offsetof(pthread_cond_t, __data.__wrefs),
               "ccond leaves glibc's __wrefs alone");
#endif

static inline bool libc_cond(const pthread_cond_t *pc) {
#if LIBC_OBJECTS
  return (pc->__data.__wrefs & LIBC_COND_SHARED) != 0;
#else
  (void)pc;
  return false;
#endif
}

/* The clock of a timed wait on pc (pthread_condattr_setclock). */
static clockid_t cond_clock(const pthread_cond_t *pc) {
#if LIBC_OBJECTS
  if (libc_cond(pc))
    return pc->__data.__wrefs & LIBC_COND_MONOTONIC ? CLOCK_MONOTONIC
                                                    : CLOCK_REALTIME;
#endif
  return (clockid_t)CC(pc)->clock;
}

/* A wait on a libc condition variable (or with a libc mutex): libc's call
 * in a plain thread when both are libc's and the clock is the variable's;
 * otherwise the mutex is released for one nap and taken again, a spurious
 * wake-up (POSIX lets a wait return without a signal; callers wait in a
 * loop on their predicate): a signal from another process, or a fiber of
 * this thread, is seen at the latest one nap later. A cancellation point
 * at entry and on return, with the mutex held. */
static int libc_cond_wait(pthread_cond_t *pc, pthread_mutex_t *pm,
                          clockid_t clock, const struct timespec *abs,
                          bool timed) {
  if (!iof__cthr_fiber() && libc_cond(pc) && libc_mutex(pm)) {
    if (!timed) return iof__libc.pthread_cond_wait(pc, pm);
    if (clock == cond_clock(pc))
      return iof__libc.pthread_cond_timedwait(pc, pm, abs);
  }
  int64_t deadline = INT64_MAX;
  if (timed) {
    int e = iof__abs_to_mono(clock, abs, &deadline);
    if (e < 0) return -e;
  }
  iof__cthread_testcancel();
  int r = iof_compat_pthread_mutex_unlock(pm);
  if (r != 0) return r;
  int64_t now = iof__now_ns();
  if (now < deadline) {
    int64_t until = iof__sat_add(now, COND_NAP_NS);
    iof__nap_until(until < deadline ? until : deadline);
  }
  r = iof_compat_pthread_mutex_lock(pm);
  if (r != 0 && r != EOWNERDEAD) return r;
  iof__cthread_testcancel();
  if (r == 0 && timed && iof__now_ns() >= deadline) return ETIMEDOUT;
  return r;
}

int iof_compat_pthread_cond_init(pthread_cond_t *pc,
                                 const pthread_condattr_t *attr) {
  if (!pc) return EINVAL;
  clockid_t clock = CLOCK_REALTIME;
  if (attr) {
    int v;
    if (pthread_condattr_getclock(attr, &clock) != 0) return EINVAL;
    if (pthread_condattr_getpshared(attr, &v) == 0 &&
        v != PTHREAD_PROCESS_PRIVATE)
      return LIBC_OBJECTS ? iof__libc.pthread_cond_init(pc, attr) : EINVAL;
  }
  memset(pc, 0, sizeof *pc);
  CC(pc)->clock = (int)clock;
  return 0;
}

int iof_compat_pthread_cond_destroy(pthread_cond_t *pc) {
  if (!pc) return EINVAL;
  if (libc_cond(pc)) return iof__libc.pthread_cond_destroy(pc);
  ccond *c = CC(pc);
  return destroy_when_idle(&c->lk, &c->q, NULL, NULL);
}

typedef struct cwait_op {
  ccond *c;
  cmutex *m;
  iof__wnode node;
  bool released;
  bool published;
} cwait_op;

/* Under the cond's lock: release the mutex and queue the waiter in one
 * step as seen by signallers (which need that lock). */
static bool cwait_begin(void *p, iof__wait *w) {
  cwait_op *op = p;
  ccond *c = op->c;
  iof__lk_lock(&c->lk);
  if (atomic_load_explicit(&w->state, memory_order_acquire) != IOF__W_INIT) {
    iof__wait_publish(w); /* timed out before anything happened */
    iof__lk_unlock(&c->lk);
    return false;
  }
  mutex_release(op->m);
  op->released = true;
  bool queued = iof__wq_push_publish(&c->q, &op->node, &op->published, w);
  iof__lk_unlock(&c->lk);
  return queued;
}

static int cond_wait(pthread_cond_t *pc, pthread_mutex_t *pm, clockid_t clock,
                     const struct timespec *abs, bool timed) {
  if (!pc || !pm) return EINVAL;
  if (libc_cond(pc) || libc_mutex(pm))
    return libc_cond_wait(pc, pm, clock, abs, timed);
  ccond *c = CC(pc);
  cmutex *m = CM(pm);
  void *self = iof__cthr_self();
  if (atomic_load_explicit(&m->owner, memory_order_relaxed) != self)
    return EPERM;
  int64_t deadline = -1;
  if (timed) {
    int r = iof__abs_to_mono(clock, abs, &deadline);
    if (r < 0) return -r;
  }
  unsigned depth = m->depth; /* a recursive mutex is released fully */
  cwait_op op = {c, m, {0}, false, false};
  iof__cwait cw;
  op.node.w = &cw.w;
  int r = iof__cthread_cwait(&op, cwait_begin, &cw, deadline);
  if (op.published && !cw.w.by_waker) {
    iof__lk_lock(&c->lk);
    iof__wq_unlink(&c->q, &op.node);
    iof__lk_unlock(&c->lk);
  }
  if (op.released) {
    if (!mutex_try(m, self)) (void)mutex_lock_slow(m, self, -1);
    m->depth = depth;
  }
  /* Cancelled: the handlers run with the mutex held again (POSIX). */
  if (r == -ECANCELED) iof__cthread_testcancel();
  return -r;
}

int iof_compat_pthread_cond_wait(pthread_cond_t *c, pthread_mutex_t *m) {
  return cond_wait(c, m, CLOCK_REALTIME, NULL, false);
}

int iof_compat_pthread_cond_timedwait(pthread_cond_t *c, pthread_mutex_t *m,
                                      const struct timespec *abstime) {
  return cond_wait(c, m, c ? cond_clock(c) : CLOCK_REALTIME, abstime, true);
}

int iof_compat_pthread_cond_clockwait(pthread_cond_t *c, pthread_mutex_t *m,
                                      clockid_t clock,
                                      const struct timespec *abstime) {
  return cond_wait(c, m, clock, abstime, true);
}

int iof_compat_pthread_cond_signal(pthread_cond_t *pc) {
  if (!pc) return EINVAL;
  if (libc_cond(pc)) return iof__libc.pthread_cond_signal(pc);
  ccond *c = CC(pc);
  iof__lk_lock(&c->lk);
  iof__wnode *n = iof__wq_claim_first(&c->q, 0);
  iof__lk_unlock(&c->lk);
  if (n) iof__cwait_wake(n->w);
  return 0;
}

int iof_compat_pthread_cond_broadcast(pthread_cond_t *pc) {
  if (!pc) return EINVAL;
  if (libc_cond(pc)) return iof__libc.pthread_cond_broadcast(pc);
  ccond *c = CC(pc);
  iof__wnode *list = NULL, **tail = &list;
  iof__lk_lock(&c->lk);
  for (iof__wnode *n; (n = iof__wq_claim_first(&c->q, 0));) {
    *tail = n;
    tail = &n->next;
  }
  iof__lk_unlock(&c->lk);
  while (list) {
    iof__wnode *n = list;
    list = n->next; /* read before the wake: n may be gone after it */
    iof__cwait_wake(n->w);
  }
  return 0;
}

/* ---- read-write lock -------------------------------------------------- */

typedef struct crwlock {
  void *writer;
  iof__waitq q; /* node->index: 1 writer, 0 reader */
  atomic_int lk;
  unsigned libc_shared; /* glibc's __shared: 0 in ours, never written */
  unsigned readers;
  unsigned pad[3];
  /* glibc's __flags, where its static initializers put the kind:
   * PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP keeps new readers out
   * while a writer waits (the others let them in, as glibc's do). */
  int kind;
} crwlock;

_Static_assert(sizeof(crwlock) <= sizeof(pthread_rwlock_t), "rwlock overlay");
_Static_assert(_Alignof(crwlock) <= _Alignof(pthread_rwlock_t), "rw align");
#if LIBC_OBJECTS
_Static_assert(offsetof(crwlock, libc_shared) ==
                   offsetof(pthread_rwlock_t, __data.__shared),
               "glibc's shared field");
_Static_assert(offsetof(crwlock, kind) ==
                   offsetof(pthread_rwlock_t, __data.__flags),
               "glibc's flags field");
#endif

#define CRW(p) ((crwlock *)(void *)(p))

static inline bool libc_rwlock(pthread_rwlock_t *prw) {
  return LIBC_OBJECTS && CRW(prw)->libc_shared != 0;
}

static int libc_rw_tryrd(void *prw) {
  return iof__libc.pthread_rwlock_tryrdlock(prw);
}

static int libc_rw_trywr(void *prw) {
  return iof__libc.pthread_rwlock_trywrlock(prw);
}

/* Locks a libc read-write lock, as libc_mutex_lock does a mutex. */
static int libc_rw_lock(pthread_rwlock_t *prw, bool write, bool try,
                        clockid_t clock, const struct timespec *abs,
                        bool timed) {
  int (*try_fn)(void *) = write ? libc_rw_trywr : libc_rw_tryrd;
  if (try) return try_fn(prw);
  bool fiber = iof__cthr_fiber() != NULL;
  if (!fiber && !timed)
    return write ? iof__libc.pthread_rwlock_wrlock(prw)
                 : iof__libc.pthread_rwlock_rdlock(prw);
  if (!fiber && clock == CLOCK_REALTIME)
    return write ? iof__libc.pthread_rwlock_timedwrlock(prw, abs)
                 : iof__libc.pthread_rwlock_timedrdlock(prw, abs);
  return nap_until_taken(try_fn, prw, clock, abs, timed);
}

int iof_compat_pthread_rwlock_init(pthread_rwlock_t *rw,
                                   const pthread_rwlockattr_t *attr) {
  if (!rw) return EINVAL;
  if (attr) {
    int v;
    if (pthread_rwlockattr_getpshared(attr, &v) == 0 &&
        v != PTHREAD_PROCESS_PRIVATE)
      return LIBC_OBJECTS ? iof__libc.pthread_rwlock_init(rw, attr) : EINVAL;
  }
  memset(rw, 0, sizeof *rw);
#ifdef __GLIBC__
  int kind = PTHREAD_RWLOCK_DEFAULT_NP;
  if (attr) (void)pthread_rwlockattr_getkind_np(attr, &kind);
  CRW(rw)->kind = kind;
#endif
  return 0;
}

/* Under rw->lk: a writer is queued and still waiting. */
static bool rw_writer_waits(const crwlock *rw) {
  for (const iof__wnode *n = rw->q.head; n; n = n->next)
    if (n->index && atomic_load_explicit(&n->w->state, memory_order_acquire) ==
                        IOF__W_WAITING)
      return true;
  return false;
}

static bool rw_prefers_writers(const crwlock *rw) {
#ifdef __GLIBC__
  return rw->kind == PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP;
#else
  (void)rw;
  return false;
#endif
}

static bool rw_held(const void *p) {
  const crwlock *rw = p;
  return rw->readers || rw->writer;
}

int iof_compat_pthread_rwlock_destroy(pthread_rwlock_t *prw) {
  if (!prw) return EINVAL;
  if (libc_rwlock(prw)) return iof__libc.pthread_rwlock_destroy(prw);
  crwlock *rw = CRW(prw);
  return destroy_when_idle(&rw->lk, &rw->q, rw_held, rw);
}

/* Under rw->lk: take it now if possible. 0, EBUSY, EDEADLK or EAGAIN. */
static int rw_take(crwlock *rw, bool write, void *self) {
  if (rw->writer == self) return EDEADLK;
  if (write) {
    if (rw->writer || rw->readers) return EBUSY;
    rw->writer = self;
    return 0;
  }
  if (rw->writer) return EBUSY;
  if (rw_prefers_writers(rw) && rw_writer_waits(rw)) return EBUSY;
  if (rw->readers == UINT_MAX) return EAGAIN;
  rw->readers++;
  return 0;
}

typedef struct rw_op {
  crwlock *rw;
  iof__wnode node;
  bool published;
} rw_op;

static bool rw_begin(void *p, iof__wait *w) {
  rw_op *op = p;
  crwlock *rw = op->rw;
  iof__lk_lock(&rw->lk);
  int r = rw_take(rw, op->node.index, op->node.owner);
  if (r != EBUSY) {
    iof__lk_unlock(&rw->lk);
    w->result = -r;
    return false;
  }
  bool queued = iof__wq_push_publish(&rw->q, &op->node, &op->published, w);
  iof__lk_unlock(&rw->lk);
  return queued;
}

static int rw_lock(pthread_rwlock_t *prw, bool write, bool try, clockid_t clock,
                   const struct timespec *abs, bool timed) {
  if (!prw) return EINVAL;
  if (libc_rwlock(prw)) return libc_rw_lock(prw, write, try, clock, abs, timed);
  crwlock *rw = CRW(prw);
  void *self = iof__cthr_self();
  iof__lk_lock(&rw->lk);
  int r = rw_take(rw, write, self);
  iof__lk_unlock(&rw->lk);
  /* POSIX gives the try calls no EDEADLK: a lock the caller holds for
   * writing is just busy to them, as glibc says. */
  if (try) return r == EDEADLK ? EBUSY : r;
  if (r != EBUSY) return r;
  int64_t deadline = -1;
  if (timed) {
    int e = iof__abs_to_mono(clock, abs, &deadline);
    if (e < 0) return -e;
  }
  rw_op op = {rw, {0}, false};
  iof__cwait cw;
  op.node.w = &cw.w;
  op.node.owner = self;
  op.node.index = write;
  r = iof__cwait_block(&op, rw_begin, &cw, deadline);
  if (op.published && !cw.w.by_waker) {
    iof__lk_lock(&rw->lk);
    iof__wq_unlink(&rw->q, &op.node);
    iof__lk_unlock(&rw->lk);
  }
  return -r;
}

int iof_compat_pthread_rwlock_rdlock(pthread_rwlock_t *rw) {
  return rw_lock(rw, false, false, CLOCK_REALTIME, NULL, false);
}
int iof_compat_pthread_rwlock_tryrdlock(pthread_rwlock_t *rw) {
  return rw_lock(rw, false, true, CLOCK_REALTIME, NULL, false);
}
int iof_compat_pthread_rwlock_timedrdlock(pthread_rwlock_t *rw,
                                          const struct timespec *abstime) {
  return rw_lock(rw, false, false, CLOCK_REALTIME, abstime, true);
}
int iof_compat_pthread_rwlock_clockrdlock(pthread_rwlock_t *rw, clockid_t clock,
                                          const struct timespec *abstime) {
  if (!wait_clock(clock)) return EINVAL;
  return rw_lock(rw, false, false, clock, abstime, true);
}
int iof_compat_pthread_rwlock_wrlock(pthread_rwlock_t *rw) {
  return rw_lock(rw, true, false, CLOCK_REALTIME, NULL, false);
}
int iof_compat_pthread_rwlock_trywrlock(pthread_rwlock_t *rw) {
  return rw_lock(rw, true, true, CLOCK_REALTIME, NULL, false);
}
int iof_compat_pthread_rwlock_timedwrlock(pthread_rwlock_t *rw,
                                          const struct timespec *abstime) {
  return rw_lock(rw, true, false, CLOCK_REALTIME, abstime, true);
}
int iof_compat_pthread_rwlock_clockwrlock(pthread_rwlock_t *rw, clockid_t clock,
                                          const struct timespec *abstime) {
  if (!wait_clock(clock)) return EINVAL;
  return rw_lock(rw, true, false, clock, abstime, true);
}

/* Under rw->lk, the lock just became free: hand it to the first writer in
 * the queue, or to every queued reader. Returns the claimed nodes, linked
 * through next, to wake after the lock is dropped. */
static iof__wnode *rw_grant(crwlock *rw) {
  iof__wnode *list = NULL, **tail = &list;
  /* Nodes whose wait already ended stay: their owners take them out (and
   * destroy waits for that). */
  for (iof__wnode *n = rw->q.head, *next; n; n = next) {
    next = n->next;
    if (atomic_load_explicit(&n->w->state, memory_order_acquire) !=
        IOF__W_WAITING)
      continue;
    /* A reader first: every queued reader, unless writers come first. */
    if (!n->index && !rw_prefers_writers(rw)) break;
    if (!n->index) continue;
    if (!iof__wait_claim(n->w, 0, n->index)) continue;
    iof__wq_unlink(&rw->q, n);
    rw->writer = n->owner;
    n->next = NULL;
    return n;
  }
  for (iof__wnode *n = rw->q.head, *next; n; n = next) {
    next = n->next;
    if (n->index) continue;
    if (!iof__wait_claim(n->w, 0, n->index)) continue;
    iof__wq_unlink(&rw->q, n);
    rw->readers++;
    n->next = NULL;
    *tail = n;
    tail = &n->next;
  }
  return list;
}

int iof_compat_pthread_rwlock_unlock(pthread_rwlock_t *prw) {
  if (!prw) return EINVAL;
  if (libc_rwlock(prw)) return iof__libc.pthread_rwlock_unlock(prw);
  crwlock *rw = CRW(prw);
  void *self = iof__cthr_self();
  iof__lk_lock(&rw->lk);
  if (rw->writer == self)
    rw->writer = NULL;
  else if (rw->readers > 0 && !rw->writer)
    rw->readers--;
  else {
    iof__lk_unlock(&rw->lk);
    return EPERM;
  }
  iof__wnode *list = !rw->writer && !rw->readers ? rw_grant(rw) : NULL;
  iof__lk_unlock(&rw->lk);
  while (list) {
    iof__wnode *n = list;
    list = n->next;
    iof__cwait_wake(n->w);
  }
  return 0;
}

/* ---- spin lock --------------------------------------------------------- */

/* glibc's lock spins without end. Its holder may be a fiber thread of this
 * very OS thread that suspended inside its critical section (a mutex or a
 * read there): the spin would then hold the thread that holder needs, and
 * never end. A fiber spins briefly (the holder may run on another OS
 * thread and let go at once), then yields between tries, so the fiber
 * threads of its io thread run; a plain thread spins as glibc's does,
 * with a sched_yield now and then. The lock word stays glibc's:
 * pthread_spin_unlock and trylock work on it unchanged. */
#define IOF__SPIN_TRIES 100

int iof_compat_pthread_spin_lock(pthread_spinlock_t *l) {
  bool fiber = iof__cthr_fiber() != NULL;
  for (unsigned i = 1;; i++) {
    int r = pthread_spin_trylock(l);
    if (r != EBUSY) return r;
    if (i % IOF__SPIN_TRIES) {
      iof__cpu_relax();
    } else {
      int saved = errno;
      if (!fiber || iof_yield() < 0) /* a fiber whose context stops: spin */
        iof__libc.sched_yield();
      errno = saved;
    }
  }
}

/* ---- barrier ---------------------------------------------------------- */

typedef struct cbarrier {
  atomic_int lk;
  unsigned count; /* arrived in this round */
  unsigned need;
  unsigned mark; /* CB_MARK: compat's; else libc's (process-shared) */
  iof__waitq q;
} cbarrier;

/* A process-shared barrier is libc's, in libc's layout, which other
 * processes use as well (glibc 2.23 on: in, current_round, count,
 * shared, out). compat's own barriers carry CB_MARK where glibc keeps
 * `shared`, which glibc sets to 0 (FUTEX_SHARED) or 128 (FUTEX_PRIVATE). */
#define CB_MARK 0x1bf1c0u
#define LIBC_BARRIER_COUNT(pb) (((const unsigned *)(const void *)(pb))[2])

_Static_assert(sizeof(cbarrier) <= sizeof(pthread_barrier_t), "barrier");
_Static_assert(_Alignof(cbarrier) <= _Alignof(pthread_barrier_t), "align");

#define CB(p) ((cbarrier *)(void *)(p))

/* Whether pb is a live process-shared barrier of libc's (one compat did
 * not make, with a count: a zeroed one is neither). */
static bool libc_barrier(const pthread_barrier_t *pb) {
#if LIBC_OBJECTS
  return CB(pb)->mark != CB_MARK && LIBC_BARRIER_COUNT(pb) != 0;
#else
  (void)pb;
  return false;
#endif
}

int iof_compat_pthread_barrier_init(pthread_barrier_t *pb,
                                    const pthread_barrierattr_t *attr,
                                    unsigned count) {
  if (!pb || count == 0) return EINVAL;
  if (attr) {
    int v;
    if (pthread_barrierattr_getpshared(attr, &v) == 0 &&
        v != PTHREAD_PROCESS_PRIVATE)
      return LIBC_OBJECTS ? iof__libc.pthread_barrier_init(pb, attr, count)
                          : EINVAL;
  }
  memset(pb, 0, sizeof *pb);
  CB(pb)->need = count;
  CB(pb)->mark = CB_MARK;
  return 0;
}

int iof_compat_pthread_barrier_destroy(pthread_barrier_t *pb) {
  if (!pb) return EINVAL;
  if (libc_barrier(pb)) return iof__libc.pthread_barrier_destroy(pb);
  if (CB(pb)->mark != CB_MARK) return EINVAL;
  cbarrier *b = CB(pb);
  iof__lk_lock(&b->lk);
  bool busy = b->count != 0;
  iof__lk_unlock(&b->lk);
  return busy ? EBUSY : 0;
}

typedef struct bar_op {
  cbarrier *b;
  iof__wnode node;
} bar_op;

/* The last to arrive releases the round and completes at once with 1
 * (the serial thread); the others queue. */
static bool bar_begin(void *p, iof__wait *w) {
  bar_op *op = p;
  cbarrier *b = op->b;
  iof__lk_lock(&b->lk);
  if (++b->count < b->need) {
    iof__wq_push(&b->q, &op->node);
    iof__wait_publish(w); /* never aborted: no deadline, uncancellable */
    iof__lk_unlock(&b->lk);
    return true;
  }
  b->count = 0;
  iof__wnode *list = NULL, **tail = &list;
  for (iof__wnode *n; (n = iof__wq_claim_first(&b->q, 0));) {
    *tail = n;
    tail = &n->next;
  }
  iof__lk_unlock(&b->lk);
  while (list) {
    iof__wnode *n = list;
    list = n->next;
    iof__cwait_wake(n->w);
  }
  w->result = 1;
  return false;
}

/* A fiber's wait on libc's barrier runs on a resolver thread while the
 * fiber waits: libc's wait blocks its thread in the kernel, and the other
 * parties may be fiber threads of the same io thread. */
typedef struct libc_bar_job {
  pthread_barrier_t *pb;
  int r;
} libc_bar_job;

static void libc_bar_run(void *p) {
  libc_bar_job *j = p;
  j->r = iof__libc.pthread_barrier_wait(j->pb);
}

static int libc_barrier_wait(pthread_barrier_t *pb) {
  iof_fiber *f = iof__cthr_fiber();
  libc_bar_job *j = f ? malloc(sizeof *j) : NULL;
  if (!j) return iof__libc.pthread_barrier_wait(pb);
  j->pb = pb;
  int saved = errno;
  int r = iof__resolver_run(iof__compat_io(f), libc_bar_run, j, free);
  errno = saved;
  if (r == -EAGAIN || r == -ENOMEM) /* no thread for it: wait here */
    return iof__libc.pthread_barrier_wait(pb);
  if (r < 0) return -r; /* ECANCELED: the job may still arrive for it */
  r = j->r;
  free(j);
  return r;
}

int iof_compat_pthread_barrier_wait(pthread_barrier_t *pb) {
  if (!pb) return EINVAL;
  if (libc_barrier(pb)) return libc_barrier_wait(pb);
  if (CB(pb)->mark != CB_MARK || CB(pb)->need == 0) return EINVAL;
  bar_op op = {CB(pb), {0}};
  iof__cwait cw;
  op.node.w = &cw.w;
  int r = iof__cwait_block(&op, bar_begin, &cw, -1);
  return r == 1 ? PTHREAD_BARRIER_SERIAL_THREAD : 0;
}

/* ---- once ------------------------------------------------------------- */

/* pthread_once_t has no room for a queue: waiters of a running init wait
 * in a small table hashed by the control's address. */
#define ONCE_BUCKETS 64
static struct {
  atomic_int lk;
  iof__waitq q;
} once_tab[ONCE_BUCKETS];

enum { ONCE_INIT = 0, ONCE_RUNNING = 1, ONCE_DONE = 2 };

static unsigned once_bucket(const void *o) {
  uintptr_t x = (uintptr_t)o;
  return (unsigned)((x >> 2) ^ (x >> 9)) % ONCE_BUCKETS;
}

typedef struct once_op {
  atomic_int *st;
  unsigned b;
  iof__wnode node;
  bool published;
} once_op;

/* Waits while the control is RUNNING: a control put back to INIT (its
 * init routine exited) is the waiter's to try again. */
static bool once_begin(void *p, iof__wait *w) {
  once_op *op = p;
  iof__lk_lock(&once_tab[op->b].lk);
  if (atomic_load_explicit(op->st, memory_order_acquire) != ONCE_RUNNING) {
    iof__lk_unlock(&once_tab[op->b].lk);
    w->result = 0;
    return false;
  }
  iof__wq_push(&once_tab[op->b].q, &op->node);
  op->published = true;
  iof__wait_publish(w); /* never aborted: no deadline, uncancellable */
  iof__lk_unlock(&once_tab[op->b].lk);
  return true;
}

/* Sets the control to `to` (DONE, or INIT when the routine did not
 * return) and wakes its waiters. */
static void once_settle(atomic_int *st, unsigned b, int to) {
  iof__wnode *list = NULL, **tail = &list;
  iof__lk_lock(&once_tab[b].lk);
  atomic_store_explicit(st, to, memory_order_release);
  for (iof__wnode *n = once_tab[b].q.head, *next; n; n = next) {
    next = n->next;
    if (n->data != (void *)st) continue;
    iof__wq_unlink(&once_tab[b].q, n);
    if (!iof__wait_claim(n->w, 0, 0)) continue;
    n->next = NULL;
    *tail = n;
    tail = &n->next;
  }
  iof__lk_unlock(&once_tab[b].lk);
  while (list) {
    iof__wnode *n = list;
    list = n->next;
    iof__cwait_wake(n->w);
  }
}

/* The init routine left with pthread_exit or a cancellation: the control
 * goes back to "not run", as glibc's does, so a later call runs it. */
static void once_abandoned(void *st) {
  atomic_int *s = st;
  once_settle(s, once_bucket(s), ONCE_INIT);
}

/* Runs init on a thread outside fibers, where pthread_exit and
 * cancellation unwind through libc's cleanup buffers rather than compat's
 * chain: under one of those (what glibc's pthread_cleanup_push expands
 * to), so a routine left that way puts the control back to "not run", as
 * glibc's pthread_once does, instead of leaving it RUNNING for every
 * later caller to wait on forever. Never in a fiber: the buffers form one
 * list per OS thread, which fibers suspended inside routines would
 * tangle. */
#ifdef __GLIBC__
/* __sigsetjmp on the cancel buffer, declared as pthread.h declares it for
 * pthread_cleanup_push: the buffer is shorter than a jmp_buf (no mask). */
extern int iof__sigsetjmp_cancel(struct __cancel_jmp_buf_tag env[1],
                                 int savemask) __asm__("__sigsetjmp")
    __attribute__((returns_twice));
#endif

static bool once_run_outside_fibers(atomic_int *st, void (*init)(void)) {
#ifdef __GLIBC__
  iof_thread_state *th = iof__thread_peek();
  if (th && th->current != &th->root) return false;
  __pthread_unwind_buf_t buf;
  atomic_int *volatile vst = st; /* read after the longjmp */
  if (__builtin_expect(iof__sigsetjmp_cancel(buf.__cancel_jmp_buf, 0), 0)) {
    once_abandoned(vst);
    iof__libc.__pthread_unwind_next(&buf);
    __builtin_unreachable();
  }
  iof__libc.__pthread_register_cancel(&buf);
  init();
  iof__libc.__pthread_unregister_cancel(&buf);
  return true;
#else
  (void)st;
  (void)init;
  return false;
#endif
}

int iof_compat_pthread_once(pthread_once_t *once, void (*init)(void)) {
  if (!once || !init) return EINVAL;
  atomic_int *st = (atomic_int *)(void *)once;
  unsigned b = once_bucket(once);
  for (;;) {
    int s = atomic_load_explicit(st, memory_order_acquire);
    if (s == ONCE_DONE) return 0;
    if (s == ONCE_INIT &&
        atomic_compare_exchange_strong_explicit(
            st, &s, ONCE_RUNNING, memory_order_acquire, memory_order_acquire)) {
      iof__unwind u;
      if (iof__cthread_guard_push(&u, once_abandoned, st)) {
        init();
        iof__cthread_guard_pop(&u);
      } else if (!once_run_outside_fibers(st, init)) {
        init();
      }
      once_settle(st, b, ONCE_DONE);
      return 0;
    }
    if (s != ONCE_RUNNING) continue;
    once_op op = {st, b, {0}, false};
    iof__cwait cw;
    op.node.w = &cw.w;
    op.node.data = st;
    (void)iof__cwait_block(&op, once_begin, &cw, -1);
  }
}

/* ---- semaphore -------------------------------------------------------- */

typedef struct csem {
  atomic_int lk;
  unsigned value;
  iof__waitq q;
  uint64_t tag; /* CSEM_TAG: made by our sem_init */
} csem;

/* A semaphore compat did not initialize is libc's: a named one from
 * sem_open (glibc fills it in shared memory itself; Python's
 * multiprocessing locks are such) or a process-shared one. Those keep
 * glibc's layout and go to libc; a fiber waits for one by polling. */
#define CSEM_TAG UINT64_C(0x696f662d73656d31)

_Static_assert(sizeof(csem) <= sizeof(sem_t), "sem overlay");
_Static_assert(_Alignof(csem) <= _Alignof(sem_t), "sem align");

#define CS(p) ((csem *)(void *)(p))

static int fail(int e) {
  errno = e;
  return -1;
}

static inline bool libc_sem(sem_t *ps) {
  return CS(ps)->tag != CSEM_TAG;
}

int iof_compat_sem_init(sem_t *ps, int pshared, unsigned value) {
  if (!ps || value > SEM_VALUE_MAX) return fail(EINVAL);
  memset(ps, 0, sizeof *ps);
  /* Our waiters live on this process's stacks: a process-shared one is
   * libc's (untagged, see CSEM_TAG). */
  if (pshared) return iof__libc.sem_init(ps, pshared, value);
  CS(ps)->value = value;
  CS(ps)->tag = CSEM_TAG;
  return 0;
}

/* sem_wait & co on a libc semaphore. Outside fibers: libc's call. In a
 * fiber: sem_trywait between pauses growing from 50 us to 5 ms, so the
 * other fibers of the thread (one of which may be the poster) run. */
static int libc_sem_wait(sem_t *ps, clockid_t clock, const struct timespec *abs,
                         bool timed) {
  int64_t deadline = INT64_MAX;
  if (timed) {
    int r = iof__abs_to_mono(clock, abs, &deadline);
    if (r < 0) return fail(-r);
  }
  if (!iof__cthr_fiber()) {
    if (!timed) return iof__libc.sem_wait(ps);
    if (clock == CLOCK_REALTIME) return iof__libc.sem_timedwait(ps, abs);
    /* sem_timedwait only knows CLOCK_REALTIME: same remaining time. */
    struct timespec rt;
    clock_gettime(CLOCK_REALTIME, &rt);
    int64_t left = deadline - iof__now_ns();
    if (left < 0) left = 0;
    int64_t t = (int64_t)rt.tv_sec * 1000000000 + rt.tv_nsec + left;
    rt.tv_sec = (time_t)(t / 1000000000);
    rt.tv_nsec = (long)(t % 1000000000);
    return iof__libc.sem_timedwait(ps, &rt);
  }
  /* sem_wait is restarted after an SA_RESTART handler (signal(7), since
   * Linux 2.6.22); sem_timedwait never is (its futex wait has a timeout). */
  iof__backoff b;
  iof__backoff_init(&b, iof__cthr_fiber(), 50000, 5000000, !timed);
  for (;;) {
    if (iof__libc.sem_trywait(ps) == 0) return 0;
    if (errno != EAGAIN) return -1;
    int r = iof__backoff_pause(&b, deadline);
    if (r < 0) return fail(-r);
  }
}

int iof_compat_sem_destroy(sem_t *ps) {
  if (!ps) return fail(EINVAL);
  if (libc_sem(ps)) return iof__libc.sem_destroy(ps);
  csem *s = CS(ps);
  int r = destroy_when_idle(&s->lk, &s->q, NULL, NULL);
  return r ? fail(r) : 0;
}

typedef struct sem_op {
  csem *s;
  iof__wnode node;
  bool published;
} sem_op;

static bool sem_begin(void *p, iof__wait *w) {
  sem_op *op = p;
  csem *s = op->s;
  iof__lk_lock(&s->lk);
  if (s->value > 0) {
    s->value--;
    iof__lk_unlock(&s->lk);
    w->result = 0;
    return false;
  }
  bool queued = iof__wq_push_publish(&s->q, &op->node, &op->published, w);
  iof__lk_unlock(&s->lk);
  return queued;
}

static bool sem_take(csem *s) {
  iof__lk_lock(&s->lk);
  bool ok = s->value > 0;
  if (ok) s->value--;
  iof__lk_unlock(&s->lk);
  return ok;
}

static int sem_wait_common(sem_t *ps, clockid_t clock,
                           const struct timespec *abs, bool timed) {
  if (!ps) return fail(EINVAL);
  if (libc_sem(ps)) return libc_sem_wait(ps, clock, abs, timed);
  csem *s = CS(ps);
  if (sem_take(s)) return 0;
  int64_t deadline = -1;
  if (timed) {
    int r = iof__abs_to_mono(clock, abs, &deadline);
    if (r < 0) return fail(-r);
  }
  sem_op op = {s, {0}, false};
  iof__cwait cw;
  op.node.w = &cw.w;
  int r = iof__cthread_cwait(&op, sem_begin, &cw, deadline);
  if (op.published && !cw.w.by_waker) {
    iof__lk_lock(&s->lk);
    iof__wq_unlink(&s->q, &op.node);
    iof__lk_unlock(&s->lk);
  }
  if (r == -ECANCELED) iof__cthread_testcancel();
  return r < 0 ? fail(-r) : 0;
}

int iof_compat_sem_wait(sem_t *s) {
  return sem_wait_common(s, CLOCK_REALTIME, NULL, false);
}

int iof_compat_sem_timedwait(sem_t *s, const struct timespec *abstime) {
  return sem_wait_common(s, CLOCK_REALTIME, abstime, true);
}

int iof_compat_sem_clockwait(sem_t *s, clockid_t clock,
                             const struct timespec *abstime) {
  return sem_wait_common(s, clock, abstime, true);
}

int iof_compat_sem_trywait(sem_t *ps) {
  if (!ps) return fail(EINVAL);
  if (libc_sem(ps)) return iof__libc.sem_trywait(ps);
  return sem_take(CS(ps)) ? 0 : fail(EAGAIN);
}

int iof_compat_sem_post(sem_t *ps) {
  if (!ps) return fail(EINVAL);
  if (libc_sem(ps)) return iof__libc.sem_post(ps);
  csem *s = CS(ps);
  iof__lk_lock(&s->lk);
  iof__wnode *n = iof__wq_claim_first(&s->q, 0);
  if (!n) {
    if (s->value >= SEM_VALUE_MAX) {
      iof__lk_unlock(&s->lk);
      return fail(EOVERFLOW);
    }
    s->value++;
  }
  iof__lk_unlock(&s->lk);
  if (n) iof__cwait_wake(n->w);
  return 0;
}

int iof_compat_sem_getvalue(sem_t *ps, int *value) {
  if (!ps || !value) return fail(EINVAL);
  if (libc_sem(ps)) return iof__libc.sem_getvalue(ps, value);
  csem *s = CS(ps);
  iof__lk_lock(&s->lk);
  *value = (int)s->value;
  iof__lk_unlock(&s->lk);
  return 0;
}
