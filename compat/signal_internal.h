/* Signals and the blocking calls of fibers (signal.c). Not installed.
 *
 * The kernel interrupts one thread's blocking call when a handler runs on
 * it, and for a process-directed signal that is nearly always the main
 * thread. Here the main thread is the fiber running the program's main
 * under iof_main, and its blocking calls are fiber waits the kernel never
 * sees: a handler run (reported by the trampolines of handlers installed
 * through iof_compat_sigaction, which the hook routes there) claims main's
 * current wait with -EINTR instead, through an ev_async on main's
 * io_context (the one wake-up a handler may send). Calls a blocking form
 * restarts under SA_RESTART (fd waits without a timeout) are claimed only
 * by handlers installed without it. */
#ifndef IOF_COMPAT_SIGNAL_INTERNAL_H
#define IOF_COMPAT_SIGNAL_INTERNAL_H

#include <signal.h>
#include <stdbool.h>

#include "io/io_internal.h"

/* The fiber that runs the program's main (NULL: none, or it ended). */
IOF_HIDDEN void iof__compat_set_main(iof_fiber *f);

/* Around a wait of fiber f on op: when f is main, registers op so that a
 * handler run after this call claims it with -EINTR. Returns whether it
 * registered; pass that and the wait's result r to iof__compat_intr_leave
 * once the wait returned. leave runs the handlers deferred to main and
 * returns r, or 0 (go on: try the call again) for an EINTR that only
 * SA_RESTART handlers caused when the wait is restartable. */
IOF_HIDDEN bool iof__compat_intr_enter(iof_fiber *f, iof_io_op *op,
                                       bool restartable);
IOF_HIDDEN int iof__compat_intr_leave(bool registered, int r);

/* For a call made of several waits and tries (a lock retried between
 * pauses): snap at the call's start; since says whether a handler that
 * would have interrupted the call ran meanwhile, also outside its waits
 * or in a wait that ended otherwise (main only; false for other fibers).
 * restartable: only handlers without SA_RESTART count. */
IOF_HIDDEN unsigned iof__compat_intr_snap(iof_fiber *f, bool restartable);
IOF_HIDDEN bool iof__compat_intr_since(iof_fiber *f, unsigned snap,
                                       bool restartable);

/* A wait of the calling fiber f on nothing but its deadline (< 0: none,
 * main only), interruptible as above: -ETIMEDOUT at the deadline, -EINTR,
 * or -ECANCELED. Another fiber sleeps on the timers as iof_sleep_until (a
 * cancellation point of a fiber thread). restartable: as for intr_enter. */
IOF_HIDDEN int iof__compat_intr_sleep(iof_fiber *f, int64_t deadline_ns,
                                      bool restartable);

/* For a wait whose signal mask is `mask` (ppoll, pselect, epoll_pwait,
 * sigsuspend): a signalfd that turns readable while a signal the thread
 * blocks but `mask` lets in is pending, so that the next check with the
 * mask delivers it. -1 when there is no such signal (or no fd left: such
 * a signal then waits for the wait to end). */
IOF_HIDDEN int iof__compat_admit_fd(const sigset_t *mask);

/* What delivering sig does now: run a handler the program installed
 * through compat, nothing (SIG_IGN, or a SIG_DFL that ignores), or the
 * process's business (SIG_DFL's action, or a handler installed behind
 * compat's back): the kernel applies it to a signal sent to the process. */
enum { IOF__SIG_HANDLER, IOF__SIG_IGNORE, IOF__SIG_PROCESS };
IOF_HIDDEN int iof__compat_disposition(int sig);

/* Delivers sig here, in the calling fiber, as a signal sent to this
 * thread (si_code SI_TKILL): the program's handler runs with its sa_mask
 * blocked (SA_RESETHAND first resets the disposition); SIG_DFL's action
 * goes to the process. Returns the handler's sa_flags, or -1 when none
 * ran. */
IOF_HIDDEN int iof__compat_run_handler(int sig);

/* The signals pthread_kill left for a fiber thread (bits sig - 1),
 * delivered in order in the calling fiber. Returns IOF__RAN_ANY when a
 * handler ran, | IOF__RAN_NORESTART when one of those lacked SA_RESTART. */
enum { IOF__RAN_ANY = 1, IOF__RAN_NORESTART = 2 };
IOF_HIDDEN int iof__compat_run_pending(uint64_t pending);

/* After a program's handler for sig returned (flags: its sa_flags).
 * Async-signal-safe; keeps errno. */
IOF_HIDDEN void iof__compat_signal_ran(int sig, int flags);

/* For libiofiber-hook: mark(+1) when a trampoline enters a handler on this
 * thread, mark(-1) when it leaves (its own in-handler count). */
IOF_API void iof__compat_handler_marker(void (*mark)(int));

#endif
