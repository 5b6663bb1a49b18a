/* Signal masks of fiber threads (sigmask.c). Not installed.
 *
 * pthread_sigmask and sigprocmask from a fiber thread change that thread's
 * own mask (signals 1 to 64, a bit each: bit sig - 1), kept in its record.
 * The OS thread running it blocks a signal only while every fiber thread
 * it hosts blocks it. */
#ifndef IOF_COMPAT_SIGMASK_INTERNAL_H
#define IOF_COMPAT_SIGMASK_INTERNAL_H

#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "compat/thread_internal.h"
#include "fiber/fiber_internal.h"

IOF_HIDDEN uint64_t iof__sigset_bits(const sigset_t *set);
IOF_HIDDEN void iof__sigset_from_bits(sigset_t *set, uint64_t bits);

/* A fiber thread with mask `mask` starts (enter) or ends (leave) on the
 * calling OS thread; the thread's mask follows. */
IOF_HIDDEN void iof__sigmask_host_enter(uint64_t mask);
IOF_HIDDEN void iof__sigmask_host_leave(uint64_t mask);

/* The caller's mask: its fiber thread's, or the OS thread's. What a new
 * thread inherits and a spawned program starts with. */
IOF_HIDDEN uint64_t iof__sigmask_current(void);

/* Before an exec or in a forked child: the OS thread takes the calling
 * fiber thread's mask, which the new program inherits. No-op elsewhere. */
IOF_HIDDEN void iof__sigmask_apply_real(void);

/* The calling fiber thread's mask (false outside fiber threads), and
 * back to a saved one, as pthread_sigmask(SIG_SETMASK) would: a handler
 * run in a fiber leaves the mask as it found it, as sigreturn does. */
IOF_HIDDEN bool iof__sigmask_save(uint64_t *out);
IOF_HIDDEN void iof__sigmask_restore(uint64_t bits);

/* Around a wait that takes a signal mask (sigsuspend, ppoll, pselect,
 * epoll_pwait): the mask is the fiber thread's for the wait's duration.
 * begin returns the thread's mask word (NULL: none, or no mask), which
 * end gets back with the saved mask. Neither touches errno. */
IOF_HIDDEN _Atomic uint64_t *iof__sigmask_wait_begin(const sigset_t *mask,
                                                     uint64_t *saved);
IOF_HIDDEN void iof__sigmask_wait_end(_Atomic uint64_t *m, uint64_t saved);

/* wait_begin/end whose mask also goes back if the fiber thread exits
 * during the wait (cancelled: thread_internal.h's cleanup chain). */
typedef struct iof__sigmask_hold {
  _Atomic uint64_t *m;
  uint64_t saved;
  iof__unwind u;
} iof__sigmask_hold;

static inline void iof__sigmask_hold_end(void *p) {
  iof__sigmask_hold *h = p;
  iof__sigmask_wait_end(h->m, h->saved);
}

static inline void iof__sigmask_hold_begin(iof__sigmask_hold *h,
                                           const sigset_t *mask) {
  h->m = iof__sigmask_wait_begin(mask, &h->saved);
  if (h->m) (void)iof__cthread_guard_push(&h->u, iof__sigmask_hold_end, h);
}

static inline void iof__sigmask_hold_release(iof__sigmask_hold *h) {
  if (!h->m) return;
  iof__cthread_guard_pop(&h->u);
  iof__sigmask_wait_end(h->m, h->saved);
}

/* For libiofiber-hook, around a call that starts a program from this
 * thread without running our code in the child (exec, posix_spawn,
 * popen): step 1 gives the OS thread the calling fiber thread's mask,
 * which the program inherits; step 0 (the call returned) puts the
 * thread's own back. No-op outside fiber threads. */
IOF_API void iof__compat_child_mask(int step);

#endif
