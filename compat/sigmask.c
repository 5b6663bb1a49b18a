/* Signal masks of fiber threads (see sigmask_internal.h).
 *
 * A fiber "thread" keeps its own mask, as a thread would; the OS thread
 * that runs it can have only one. An OS thread blocks a signal when every
 * fiber thread it hosts blocks it, so a process-directed signal reaches an
 * OS thread where some fiber thread leaves it open, as the kernel picks a
 * thread that does not block it. The handler then runs on whichever fiber
 * is current there (docs/porting.md). */
#include "compat/sigmask_internal.h"

#include <iofiber/compat_io.h>

#include "compat/fd_table.h"
#include "compat/signal_internal.h"
#include "compat/thread_internal.h"

#include <errno.h>
#include <stdbool.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

/* The bits the virtual masks keep: not SIGKILL and SIGSTOP (never
 * blocked), nor glibc's two internal signals (32, 33), which its
 * pthread_sigmask leaves alone too. */
#define BIT(s) ((uint64_t)1 << ((s)-1))
#define KEPT (~(BIT(SIGKILL) | BIT(SIGSTOP) | BIT(32) | BIT(33)))

uint64_t iof__sigset_bits(const sigset_t *set) {
  uint64_t b = 0;
  for (int s = 1; s <= 64; s++)
    if (sigismember(set, s) == 1) b |= BIT(s);
  return b;
}

void iof__sigset_from_bits(sigset_t *set, uint64_t b) {
  sigemptyset(set);
  for (int s = 1; s <= 64; s++)
    if (b & BIT(s)) sigaddset(set, s);
}

/* The OS thread's side. Only fibers it runs change it, so no lock. */
typedef struct host {
  bool init;
  int hosted;       /* fiber threads that started here and have not ended */
  uint64_t base;    /* the thread's mask before it hosted any */
  uint64_t applied; /* the bits this file has the thread block now */
  int open[64];     /* hosted fiber threads leaving each signal open */
} host;

static _Thread_local host here;

static host *host_get(void) {
  host *h = &here;
  if (!h->init) {
    sigset_t now;
    iof__libc.pthread_sigmask(SIG_BLOCK, NULL, &now);
    h->base = iof__sigset_bits(&now) & KEPT;
    h->applied = h->base;
    h->init = true;
  }
  return h;
}

/* Makes the thread's mask what its fiber threads ask for, changing only
 * the bits this file owns (libev blocks the signals of its signalfd). */
static void sync_thread(host *h) {
  uint64_t want = h->base;
  if (h->hosted > 0) {
    want = 0;
    for (int s = 1; s <= 64; s++)
      if ((KEPT & BIT(s)) && h->open[s - 1] == 0) want |= BIT(s);
  }
  uint64_t blk = want & ~h->applied, unb = h->applied & ~want;
  sigset_t set;
  if (blk) {
    iof__sigset_from_bits(&set, blk);
    iof__libc.pthread_sigmask(SIG_BLOCK, &set, NULL);
  }
  if (unb) {
    iof__sigset_from_bits(&set, unb);
    iof__libc.pthread_sigmask(SIG_UNBLOCK, &set, NULL);
  }
  h->applied = want;
}

/* The open counts for a mask going from `from` to `to` (~0: not hosted);
 * the thread's mask follows when a count crosses 0, or with `sync`. */
static void host_move(host *h, uint64_t from, uint64_t to, bool sync) {
  for (uint64_t d = (from ^ to) & KEPT; d; d &= d - 1) {
    int i = __builtin_ctzll(d); /* signal i + 1 */
    if (from & d & -d)          /* opens */
      sync |= h->open[i]++ == 0;
    else
      sync |= --h->open[i] == 0;
  }
  if (sync) sync_thread(h);
}

/* Whether the calling fiber thread stays on its OS thread (its executor is
 * an io_context's). One on a thread pool may move at every suspension: its
 * mask is its own but moves no OS thread's (pool threads block all). */
static bool pinned(void) {
  iof_fiber *f = iof__cthr_fiber();
  return f && iof__io_of(iof_executor_context(f->env->executor)) != NULL;
}

void iof__sigmask_host_enter(uint64_t mask) {
  if (!pinned()) return;
  host *h = host_get();
  h->hosted++;
  host_move(h, ~(uint64_t)0, mask & KEPT, h->hosted == 1);
}

void iof__sigmask_host_leave(uint64_t mask) {
  if (!pinned()) return;
  host *h = host_get();
  h->hosted--;
  host_move(h, mask & KEPT, ~(uint64_t)0, h->hosted == 0);
}

uint64_t iof__sigmask_current(void) {
  _Atomic uint64_t *m = iof__cthread_sigmask(iof__cthr_fiber());
  if (m) return atomic_load_explicit(m, memory_order_relaxed);
  sigset_t now;
  iof__libc.pthread_sigmask(SIG_BLOCK, NULL, &now);
  return iof__sigset_bits(&now) & KEPT;
}

/* The OS thread takes mask word m (its own goes to *old); 0 or an errno
 * value. */
static int wear(_Atomic uint64_t *m, sigset_t *old) {
  sigset_t set;
  iof__sigset_from_bits(&set, atomic_load_explicit(m, memory_order_relaxed));
  return iof__libc.pthread_sigmask(SIG_SETMASK, &set, old);
}

void iof__sigmask_apply_real(void) {
  _Atomic uint64_t *m = iof__cthread_sigmask(iof__cthr_fiber());
  if (m) (void)wear(m, NULL);
}

/* The fiber thread's own mask, or NULL where the call is the real one:
 * outside fiber threads, in handlers, and in libev (the runtime's
 * bracket), whose signalfd needs the thread's signals really blocked. */
static _Atomic uint64_t *own_mask(void) {
  if (!iof__compat_fiber() || iof__rt_fd_scope()) return NULL;
  return iof__cthread_sigmask(iof__cthr_fiber());
}

/* 0 or an errno value, as pthread_sigmask; b is the new set's bits when
 * has_set. */
static int change(_Atomic uint64_t *m, int how, bool has_set, uint64_t b,
                  sigset_t *old) {
  uint64_t cur = atomic_load_explicit(m, memory_order_relaxed), next = cur;
  if (has_set) {
    b &= KEPT;
    if (how == SIG_BLOCK)
      next = cur | b;
    else if (how == SIG_UNBLOCK)
      next = cur & ~b;
    else if (how == SIG_SETMASK)
      next = b;
    else
      return EINVAL;
  }
  if (old) iof__sigset_from_bits(old, cur);
  if (next == cur) return 0;
  atomic_store_explicit(m, next, memory_order_relaxed);
  if (pinned()) host_move(host_get(), cur, next, false);
  /* Signals pthread_kill left while they were blocked: delivered now, as
   * the kernel delivers a pending signal the moment it is unblocked. */
  if (cur & ~next) (void)iof__compat_run_pending(iof__cthread_take_unblocked());
  return 0;
}

bool iof__sigmask_save(uint64_t *out) {
  _Atomic uint64_t *m = own_mask();
  if (!m) return false;
  *out = atomic_load_explicit(m, memory_order_relaxed);
  return true;
}

void iof__sigmask_restore(uint64_t bits) {
  _Atomic uint64_t *m = own_mask();
  if (!m) return;
  (void)change(m, SIG_SETMASK, true, bits, NULL);
}

/* The wait's mask stands in for the thread's without moving the OS
 * thread's: a signal it lets in that the OS thread blocks is caught by the
 * wait's signalfd (iof__compat_admit_fd), and one the OS thread lets in is
 * handled at once and, in main, ends the wait (main_blocks reads this). */
_Atomic uint64_t *iof__sigmask_wait_begin(const sigset_t *mask,
                                          uint64_t *saved) {
  /* A mask the kernel cannot read is not worn: the call's own EFAULT. */
  _Atomic uint64_t *m =
      mask && iof__mem_check(mask, sizeof(uint64_t)) == 0 ? own_mask() : NULL;
  if (m)
    *saved = atomic_exchange_explicit(m, iof__sigset_bits(mask) & KEPT,
                                      memory_order_relaxed);
  return m;
}

void iof__sigmask_wait_end(_Atomic uint64_t *m, uint64_t saved) {
  if (m) atomic_store_explicit(m, saved, memory_order_relaxed);
}

/* A fiber thread's mask change, with the plain call's EFAULT for a set it
 * cannot read or an old it cannot write (the kernel's test, nothing
 * changed) instead of a crash. set is read first: it may be old. */
static int change_checked(_Atomic uint64_t *m, int how, const sigset_t *set,
                          sigset_t *old) {
  uint64_t b = 0;
  if (set) {
    if (iof__mem_check(set, sizeof(uint64_t)) < 0) return EFAULT;
    if (how != SIG_BLOCK && how != SIG_UNBLOCK && how != SIG_SETMASK)
      return EINVAL; /* before old, as the kernel */
    b = iof__sigset_bits(set);
  }
  if (old) {
    /* The kernel writes a mask's 8 bytes back: that write is the test. */
    int saved = errno;
    long r = iof__syscall()(SYS_rt_sigprocmask, SIG_BLOCK, NULL, old,
                            sizeof(uint64_t));
    errno = saved;
    if (r < 0) return EFAULT;
  }
  return change(m, how, set != NULL, b, old);
}

int iof_compat_pthread_sigmask(int how, const sigset_t *set, sigset_t *old) {
  _Atomic uint64_t *m = own_mask();
  if (!m) return iof__libc.pthread_sigmask(how, set, old);
  return change_checked(m, how, set, old);
}

int iof_compat_sigprocmask(int how, const sigset_t *set, sigset_t *old) {
  _Atomic uint64_t *m = own_mask();
  if (!m) return iof__libc.sigprocmask(how, set, old);
  int r = change_checked(m, how, set, old);
  if (r == 0) return 0;
  errno = r;
  return -1;
}

void iof__compat_child_mask(int step) {
  static _Thread_local sigset_t saved;
  static _Thread_local bool swapped;
  if (step > 0) {
    _Atomic uint64_t *m = own_mask();
    if (!m || swapped) return;
    swapped = wear(m, &saved) == 0;
  } else if (swapped) {
    swapped = false;
    iof__libc.pthread_sigmask(SIG_SETMASK, &saved, NULL);
  }
}
