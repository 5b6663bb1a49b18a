/* Internals of compat's thread half (threads, locks, keys, iof_main).
 * Not installed.
 *
 * Every pthread object is used in place, as an overlay of the user's
 * pthread_*_t storage; an all-zero object is the static initializer state.
 * Waiting reuses sched's waiter machinery (iof__wait records, iof__wnode
 * queues, the claim protocol, iof__wait_block for fibers); plain threads
 * park on a futex word next to their record instead of sched's parker,
 * because that one calls pthread_mutex/cond by name and the preload hook
 * routes those names back here. Internal locks are futex locks too. */
#ifndef IOF_COMPAT_THREAD_INTERNAL_H
#define IOF_COMPAT_THREAD_INTERNAL_H

#include <iofiber/compat_thread.h>

#include "fiber/libc.h"
#include "sched/sync_internal.h"

/* Defined with the fd table (see fd_table.h). */
IOF_HIDDEN extern bool iof__compat_forked;

/* The launched fiber running here, or NULL. Unlike iof__sync_fiber it
 * never sets up fiber state for a thread that has none (under the preload
 * hook every lock of every thread comes here). */
static inline iof_fiber *iof__cthr_fiber(void) {
  iof_thread_state *th = iof__thread_peek();
  if (!th || iof__compat_forked) return NULL; /* see fd_table.h */
  iof_fiber *f = th->current;
  return f != &th->root && f->env ? f : NULL;
}

/* libc's syscall(), past the hook: the runtime's own futex calls must not
 * come back to compat (the table may not be filled yet in a constructor). */
typedef long (*iof__syscall_fn)(long, ...);
static inline iof__syscall_fn iof__syscall(void) {
  if (__builtin_expect(!iof__libc.syscall, 0)) iof__libc_init();
  return iof__libc.syscall;
}

struct iof_io_op;

/* Thread-directed signals for fiber threads (pthread_kill). enter: when f
 * is a fiber thread, registers op as its wait that a pthread_kill ends
 * with -EINTR and takes the signals left for it meanwhile (*pending, bit
 * sig - 1, for the caller to run now); false for other fibers. leave: ends
 * the registration and returns the signals that came during the wait. */
IOF_HIDDEN bool iof__cthread_intr_enter(iof_fiber *f, struct iof_io_op *op,
                                        bool restartable, uint64_t *pending);
IOF_HIDDEN uint64_t iof__cthread_intr_leave(iof_fiber *f, bool *restartable);

/* An entry of a fiber thread's cleanup chain: a buffer of glibc's
 * pthread_cleanup_push (fn NULL, arg the buffer) or compat's own cleanup,
 * fn(arg), run if the thread exits (pthread_exit, cancellation) past it. */
typedef struct iof__unwind {
  struct iof__unwind *prev;
  void (*fn)(void *);
  void *arg;
} iof__unwind;

/* Pushes u (on the caller's stack) onto the calling fiber thread's chain:
 * false (nothing pushed) outside fiber threads. pop takes it off again. */
IOF_HIDDEN bool iof__cthread_guard_push(iof__unwind *u, void (*fn)(void *),
                                        void *arg);
IOF_HIDDEN void iof__cthread_guard_pop(iof__unwind *u);

/* A cancellation point: the calling fiber thread exits with
 * PTHREAD_CANCELED if a cancel is pending and enabled. No-op elsewhere. */
IOF_HIDDEN void iof__cthread_testcancel(void);

/* A sleep of fiber f until deadline_ns (CLOCK_MONOTONIC): -ETIMEDOUT or
 * -ECANCELED (stop, shutdown). In a fiber thread a cancellation point. */
IOF_HIDDEN int iof__cthread_sleep(iof_fiber *f, int64_t deadline_ns);

/* Fiber f's signal mask (sigmask.c), or NULL when f is no fiber thread.
 * Signals a fiber thread blocks stay pending for it; take_unblocked takes
 * the calling thread's pending ones its mask now lets in. */
IOF_HIDDEN _Atomic uint64_t *iof__cthread_sigmask(iof_fiber *f);
IOF_HIDDEN uint64_t iof__cthread_take_unblocked(void);

/* The calling fiber thread enters (on) or leaves the sigwait family:
 * meanwhile a signal pthread_kill leaves for it ends its wait even when
 * it blocks it. false outside fiber threads. take_waited takes the lowest
 * signal of set (bits sig - 1) pthread_kill left for the calling thread,
 * blocked or not (0: none). */
IOF_HIDDEN bool iof__cthread_sigwaiting(bool on);
IOF_HIDDEN int iof__cthread_take_waited(uint64_t set);

/* Who owns a lock: the running fiber, or outside fibers a per-thread
 * token (not the thread's fiber state, which it need not have). */
IOF_HIDDEN void *iof__cthr_self(void);

/* A wait record plus the futex word a plain thread parks on. Every wait
 * of compat's primitives uses one, so a waker finds the word from the
 * iof__wait a queue node points to. */
typedef struct iof__cwait {
  iof__wait w;
  atomic_int futex;
} iof__cwait;

/* Blocks the caller until begin completes it or a claim wakes it: a
 * launched fiber suspends (iof__wait_block, not cancellable: POSIX waits
 * end only by their own event or timeout), anything else parks on the
 * futex. deadline_ns: CLOCK_MONOTONIC, < 0 none. Returns w.result or
 * -ETIMEDOUT. errno is preserved. */
IOF_HIDDEN int iof__cwait_block(void *op, iof__wait_begin begin, iof__cwait *cw,
                                int64_t deadline_ns);

/* iof__cwait_block as a cancellation point: in a fiber thread a pending
 * cancel acts at entry, and one that ends the wait makes it return
 * -ECANCELED (the caller undoes its wait, then iof__cthread_testcancel).
 * A wait a waker completed returns its result. */
IOF_HIDDEN int iof__cthread_cwait(void *op, iof__wait_begin begin,
                                  iof__cwait *cw, int64_t deadline_ns);

/* Wakes a claimed waiter (fiber: posted; thread: futex). */
IOF_HIDDEN void iof__cwait_wake(iof__wait *w);

/* A small futex lock (0 free, 1 held, 2 held with sleepers); held only for
 * a few instructions, never across a suspension. */
IOF_HIDDEN void iof__lk_lock(atomic_int *l);
IOF_HIDDEN void iof__lk_unlock(atomic_int *l);

/* abstime on clock -> CLOCK_MONOTONIC ns (saturating). -EINVAL for a bad
 * timespec or clock. */
IOF_HIDDEN int iof__abs_to_mono(clockid_t clock, const struct timespec *abs,
                                int64_t *out);

/* Whether the kernel can read ts and finds it valid, asked of the kernel
 * (a futex wait on a word whose value differs, which reads the timeout
 * and returns at once): 0, -EFAULT or -EINVAL. Call it before reading a
 * timespec the caller passed, where the plain call answers EFAULT. */
IOF_HIDDEN int iof__ts_check(const struct timespec *ts);

/* Whether the kernel can read the n bytes at p: 0 or -EFAULT (asked of
 * it with futex waits that never sleep; errno kept). Call it before
 * reading memory the caller passed, where the plain call answers EFAULT
 * (a wild sigset or fd_set). */
IOF_HIDDEN int iof__mem_check(const void *p, size_t n);

/* now + a relative timeout -> CLOCK_MONOTONIC ns (saturating). -EINVAL for
 * a bad timespec (negative, or tv_nsec out of range). */
IOF_HIDDEN int iof__rel_to_mono(const struct timespec *rel, int64_t *out);

/* Placement of new fiber threads (iof_main with several contexts): the
 * executor a thread created by `self` starts on. */
IOF_HIDDEN iof_executor_ref iof__compat_pick_executor(iof_fiber *self);

/* Default stack of fiber threads (iof_main's option, $IOF_STACK_SIZE, or
 * IOF_FIBER_STACK_DEFAULT). */
IOF_HIDDEN size_t iof__compat_thread_stack(void);

/* A fiber thread's record (the pthread_t is its address | 1). */
typedef struct iof__cthread iof__cthread;

/* Starts a fiber thread on ex; *out gets its record. alloc: where its
 * frame comes from (NULL: a pool of the stack's size class). on_end (may
 * be NULL) runs once its stack is freed, before joiners wake. 0 or
 * -errno. */
IOF_HIDDEN int iof__cthread_start(iof_executor_ref ex, size_t stack,
                                  iof_frame_allocator *alloc, bool detached,
                                  void *(*fn)(void *), void *arg,
                                  void (*on_end)(void *ret), pthread_t *out);

/* The calling fiber thread's kept epoll set for poll and select (poll.c),
 * NULL outside fiber threads; freed with iof__poll_cache_free when the
 * thread ends. */
struct iof__poll_cache;
IOF_HIDDEN struct iof__poll_cache **iof__cthread_poll_cache(void);
IOF_HIDDEN void iof__poll_cache_free(struct iof__poll_cache *pc);

/* After iof_main's contexts stopped: main's last thread-locals become the
 * calling thread's own again (other fiber threads ran there meanwhile). */
IOF_HIDDEN void iof__cthread_main_tls_back(void);

/* The pool of fiber thread stacks of class `size` (a power of two), or
 * NULL if none was made (tests). */
IOF_HIDDEN iof_stack_pool *iof__compat_stack_class(size_t size);

/* How many fiber threads are running (started and not yet freed). */
IOF_HIDDEN long iof__cthread_live(void);

/* Called by iof_main when the live count drops to zero (NULL: nobody). */
IOF_HIDDEN void iof__cthread_set_idle_hook(void (*hook)(void));

#endif
