/* iofiber compat: pthread and POSIX semaphore calls that suspend the
 * calling fiber instead of its thread, with the exact POSIX signatures and
 * error conventions (pthread_* return an error number, sem_* return -1 and
 * set errno). <iofiber/compat.h> maps the POSIX names onto these.
 *
 * - pthread_create from a fiber starts a fiber "thread" on the caller's
 *   io_context (round-robin over the contexts of iof_main with several
 *   threads); from a plain thread it is the real call. join/detach/self/
 *   equal/exit tell the two kinds apart (a fiber thread's pthread_t is odd).
 * - Mutexes, condition variables, read-write locks, barriers, semaphores
 *   and once controls always use this implementation, in the user's own
 *   storage (a zeroed object is the static initializer state), so one
 *   object works between fibers, between plain threads, and mixed. Plain
 *   threads block on a futex; fibers suspend. No allocation; destroy is
 *   optional.
 * - Keys are fiber-local storage: a value follows its fiber thread, and
 *   destructors run when it ends (on plain threads: at thread exit). */
#ifndef IOFIBER_COMPAT_THREAD_H
#define IOFIBER_COMPAT_THREAD_H

#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <semaphore.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include <iofiber/fiber.h>

#ifdef __cplusplus
extern "C" {
#endif

/* glibc declares the rwlock, barrier and timed calls only with POSIX 2001
 * features on, and the clock* variants only with _GNU_SOURCE: the shims
 * follow the same rules (libc without those macros: everything). */
#if !defined(__GLIBC__) || defined(__USE_XOPEN2K)
#define IOF__COMPAT_XOPEN2K 1
#endif
#if !defined(__GLIBC__) || defined(__USE_GNU)
#define IOF__COMPAT_GNU 1
#endif

/* ---- threads ---------------------------------------------------------- */

/* In a fiber: a fiber thread running fn(arg) on the caller's io_context;
 * the attr's stack size (if set) and detach state are honoured. Its stack
 * is returned as soon as it ends; only a small join record waits for
 * pthread_join (or is freed at once when detached). Outside a fiber: the
 * real pthread_create. 0; EAGAIN (no memory or shutting down); EINVAL
 * (also, on any thread, for a NULL thread or fn). */
IOF_API int iof_compat_pthread_create(pthread_t *thread,
                                      const pthread_attr_t *attr,
                                      void *(*fn)(void *), void *arg);

/* Waits (suspending only the calling fiber) for a fiber thread to end and
 * frees its record. A real thread is joined with the real call (which
 * blocks the whole thread when called from a fiber). 0; EINVAL (detached,
 * already being joined); EDEADLK (itself, or a thread that is joining the
 * caller, as glibc); ESRCH. */
IOF_API int iof_compat_pthread_join(pthread_t thread, void **retval);

/* Detaches; a fiber thread that has ended is freed at once. 0; EINVAL. */
IOF_API int iof_compat_pthread_detach(pthread_t thread);

/* The calling fiber thread's id; the real pthread_self elsewhere. */
IOF_API pthread_t iof_compat_pthread_self(void);

/* Non-zero when both ids name the same thread. */
IOF_API int iof_compat_pthread_equal(pthread_t a, pthread_t b);

/* Ends the calling fiber thread with retval (its cleanup handlers run
 * newest first, then key destructors; the stack is returned); the real call on
 * a plain thread. A fiber that is not a fiber thread (a launched chain, a raw
 * fiber) ends there as if its function had returned 0: fiber-local destructors
 * and on_done run. */
IOF_API void iof_compat_pthread_exit(void *retval) __attribute__((noreturn));

#ifdef IOF__COMPAT_GNU
/* Calls that take a thread id: for a fiber thread, setname/getname act on
 * the fiber's name (15 characters max: ERANGE), getattr reports its stack
 * size and detach state. Real thread ids go to the real calls. A NULL name, buf
 * or attr is EINVAL for any id (glibc would crash on it). */
IOF_API int iof_compat_pthread_setname_np(pthread_t thread, const char *name);
IOF_API int iof_compat_pthread_getname_np(pthread_t thread, char *buf,
                                          size_t len);
IOF_API int iof_compat_pthread_getattr_np(pthread_t thread,
                                          pthread_attr_t *attr);

/* Joins with a limit: tryjoin gives EBUSY while the thread runs; timedjoin
 * (CLOCK_REALTIME) and clockjoin (CLOCK_REALTIME or CLOCK_MONOTONIC) wait
 * until abstime (NULL: no limit), then ETIMEDOUT; EINVAL for a bad abstime.
 * As pthread_join otherwise (a cancellation point). */
IOF_API int iof_compat_pthread_tryjoin_np(pthread_t thread, void **retval);
IOF_API int iof_compat_pthread_timedjoin_np(pthread_t thread, void **retval,
                                            const struct timespec *abstime);
IOF_API int iof_compat_pthread_clockjoin_np(pthread_t thread, void **retval,
                                            clockid_t clock,
                                            const struct timespec *abstime);

/* Affinity of a fiber thread: its io thread's. get reports the calling OS
 * thread's set; set checks it (EINVAL when no CPU of it may be used) and
 * changes nothing. A NULL set: EFAULT, for any thread. */
IOF_API int iof_compat_pthread_getaffinity_np(pthread_t thread, size_t size,
                                              cpu_set_t *set);
IOF_API int iof_compat_pthread_setaffinity_np(pthread_t thread, size_t size,
                                              const cpu_set_t *set);

/* As pthread_kill for a fiber thread (the value is not passed on). */
IOF_API int iof_compat_pthread_sigqueue(pthread_t thread, int sig,
                                        const union sigval value);
#endif

/* Scheduling of a fiber thread: get reports SCHED_OTHER, priority 0; set
 * accepts SCHED_OTHER, SCHED_BATCH and SCHED_IDLE at priority 0 as no-ops,
 * EPERM for SCHED_FIFO/SCHED_RR, EINVAL otherwise. getcpuclockid: ENOTSUP
 * (its time is its io thread's). Real thread ids: the real calls. */
IOF_API int iof_compat_pthread_getschedparam(pthread_t thread, int *policy,
                                             struct sched_param *param);
IOF_API int iof_compat_pthread_setschedparam(pthread_t thread, int policy,
                                             const struct sched_param *param);
IOF_API int iof_compat_pthread_setschedprio(pthread_t thread, int prio);
IOF_API int iof_compat_pthread_getcpuclockid(pthread_t thread,
                                             clockid_t *clock);
/* To a fiber thread with a signal the program handles (installed through
 * iof_compat_sigaction): the handler runs in that fiber, whose waiting call
 * returns EINTR (unless SA_RESTART restarts it); to itself at once. Other
 * signals go to the process. 0; EINVAL for a bad sig. */
IOF_API int iof_compat_pthread_kill(pthread_t thread, int sig);

/* Deferred cancellation of a fiber thread: marks it pending and ends the
 * cancellation point (a blocking compat call) it waits in; it acts there or
 * at its next one, unless disabled. Acting runs the thread's cleanup
 * handlers, then its key destructors; its result is PTHREAD_CANCELED. A
 * real thread: the real call. 0 (also for a thread that has ended). */
IOF_API int iof_compat_pthread_cancel(pthread_t thread);

/* The calling fiber thread's own cancel state and type (glibc keeps them
 * per OS thread); the asynchronous type acts as deferred. The real calls
 * elsewhere. 0; EINVAL. testcancel: a cancellation point. */
IOF_API int iof_compat_pthread_setcancelstate(int state, int *oldstate);
IOF_API int iof_compat_pthread_setcanceltype(int type, int *oldtype);
IOF_API void iof_compat_pthread_testcancel(void);

#ifdef __GLIBC__
/* What glibc's C pthread_cleanup_push/pop expand to: in a fiber thread
 * the buffer goes on the thread's own chain, which pthread_exit and
 * cancellation run newest first; elsewhere glibc's calls. */
IOF_API void iof_compat_pthread_register_cancel(__pthread_unwind_buf_t *buf);
IOF_API void iof_compat_pthread_unregister_cancel(__pthread_unwind_buf_t *buf);
IOF_API void iof_compat_pthread_unwind_next(__pthread_unwind_buf_t *buf)
    __attribute__((noreturn));

/* What C++ registers for a thread_local object with a destructor
 * (glibc's __cxa_thread_atexit_impl). In a fiber thread other than main,
 * whose own __thread variables include obj, fn(obj) runs when that thread
 * ends, newest first, before its key destructors: 0, or -ENOMEM.
 * Elsewhere (and in main, whose objects glibc destroys at exit) nothing is
 * registered: -ESRCH (glibc's call is the one to make). */
IOF_API int iof_compat_cxa_thread_atexit_impl(void (*fn)(void *), void *obj,
                                              void *dso);

/* What the dynamic loader's __tls_get_addr(ti) gives (ti: its tls_index,
 * the module id and the offset), with real the loader's own: in a fiber
 * thread other than main, a module loaded with dlopen after the start
 * (its thread-locals in dynamic TLS, one block per OS thread) gets a block
 * of the fiber thread's own, so each "thread" has its values as it would
 * with threads (Python's C++ extension modules: gRPC's execution context).
 * Elsewhere, and for modules in static TLS, real(ti). NULL and errno
 * EINVAL for a NULL ti or real; real(ti) when out of memory. */
IOF_API void *iof_compat_tls_get_addr(void *ti, void *(*real)(void *));

/* dlclose(handle), then: the module ids it freed (the loader hands a freed
 * id to the next module it loads) drop the fiber threads' blocks of the
 * module that had them, at each owner's next access, so a module loaded
 * later at that id starts from its own initial values. Returns what
 * dlclose returns (dlerror() says why it failed); a handle that names
 * no loaded module (NULL, a wild pointer, one closed already), which
 * glibc's dereferences, gives -1 and errno EINVAL. */
IOF_API int iof_compat_dlclose(void *handle);
#endif

/* Runs init exactly once; concurrent callers (fibers or threads) wait
 * until it has returned. 0; EINVAL on NULL. */
IOF_API int iof_compat_pthread_once(pthread_once_t *once, void (*init)(void));

/* ---- mutexes ---------------------------------------------------------- */

/* Normal, recursive and errorcheck types (from the attr or glibc's static
 * initializers); the priority attributes are ignored. Relocking a normal
 * mutex returns EDEADLK instead of hanging. FIFO hand-off to waiters.
 * Robust and process-shared mutexes (and process-shared condition
 * variables and read-write locks) are glibc's own, which every call on
 * them uses; a fiber waits for one by trying it between short sleeps
 * (glibc only: EINVAL elsewhere). */
IOF_API int iof_compat_pthread_mutex_init(pthread_mutex_t *m,
                                          const pthread_mutexattr_t *attr);
/* 0; EBUSY while locked or waited for. */
IOF_API int iof_compat_pthread_mutex_destroy(pthread_mutex_t *m);
/* 0; EDEADLK (errorcheck or normal, held by the caller); EAGAIN
 * (recursion count overflow). */
IOF_API int iof_compat_pthread_mutex_lock(pthread_mutex_t *m);
/* 0; EBUSY (held by anyone else, or by the caller for non-recursive). */
IOF_API int iof_compat_pthread_mutex_trylock(pthread_mutex_t *m);
#ifdef IOF__COMPAT_XOPEN2K
/* As lock, until abstime on CLOCK_REALTIME: ETIMEDOUT; EINVAL (bad
 * abstime, only checked when the mutex is not free). */
IOF_API int iof_compat_pthread_mutex_timedlock(pthread_mutex_t *m,
                                               const struct timespec *abstime);
#endif
#ifdef IOF__COMPAT_GNU
/* As timedlock on clock (CLOCK_REALTIME or CLOCK_MONOTONIC). */
IOF_API int iof_compat_pthread_mutex_clocklock(pthread_mutex_t *m,
                                               clockid_t clock,
                                               const struct timespec *abstime);
#endif
/* 0; EPERM (errorcheck/recursive not owned by the caller; any unlocked
 * mutex). */
IOF_API int iof_compat_pthread_mutex_unlock(pthread_mutex_t *m);

/* ---- condition variables ---------------------------------------------- */

/* The attr's clock (pthread_condattr_setclock) is kept. 0; EINVAL. */
IOF_API int iof_compat_pthread_cond_init(pthread_cond_t *c,
                                         const pthread_condattr_t *attr);
/* 0; EBUSY while waited for. */
IOF_API int iof_compat_pthread_cond_destroy(pthread_cond_t *c);
/* Releases m (fully, for a recursive one), waits, re-locks m. 0 (may be a
 * spurious wake-up); EPERM (m not owned by the caller). */
IOF_API int iof_compat_pthread_cond_wait(pthread_cond_t *c, pthread_mutex_t *m);
/* As wait, until abstime on the cond's clock: ETIMEDOUT (m held); EINVAL. */
IOF_API int iof_compat_pthread_cond_timedwait(pthread_cond_t *c,
                                              pthread_mutex_t *m,
                                              const struct timespec *abstime);
#ifdef IOF__COMPAT_GNU
/* As timedwait on an explicit clock. */
IOF_API int iof_compat_pthread_cond_clockwait(pthread_cond_t *c,
                                              pthread_mutex_t *m,
                                              clockid_t clock,
                                              const struct timespec *abstime);
#endif
/* Wake the first waiter / all waiters. 0. */
IOF_API int iof_compat_pthread_cond_signal(pthread_cond_t *c);
IOF_API int iof_compat_pthread_cond_broadcast(pthread_cond_t *c);

#ifdef IOF__COMPAT_XOPEN2K
/* ---- read-write locks ------------------------------------------------- */

/* Readers enter while no writer holds the lock (glibc's default reader
 * preference, so a reader may re-enter); a writer waits for all readers.
 * 0; EDEADLK (write-lock held by the caller); EBUSY (try); ETIMEDOUT
 * (timed, CLOCK_REALTIME); EPERM (unlock of a lock not held); EAGAIN (too
 * many readers). */
IOF_API int iof_compat_pthread_rwlock_init(pthread_rwlock_t *rw,
                                           const pthread_rwlockattr_t *attr);
IOF_API int iof_compat_pthread_rwlock_destroy(pthread_rwlock_t *rw);
IOF_API int iof_compat_pthread_rwlock_rdlock(pthread_rwlock_t *rw);
IOF_API int iof_compat_pthread_rwlock_tryrdlock(pthread_rwlock_t *rw);
IOF_API int
iof_compat_pthread_rwlock_timedrdlock(pthread_rwlock_t *rw,
                                      const struct timespec *abstime);
IOF_API int iof_compat_pthread_rwlock_wrlock(pthread_rwlock_t *rw);
IOF_API int iof_compat_pthread_rwlock_trywrlock(pthread_rwlock_t *rw);
IOF_API int
iof_compat_pthread_rwlock_timedwrlock(pthread_rwlock_t *rw,
                                      const struct timespec *abstime);
#ifdef IOF__COMPAT_GNU
/* As the timed ones on clock (CLOCK_REALTIME or CLOCK_MONOTONIC; another
 * clock: EINVAL). */
IOF_API int
iof_compat_pthread_rwlock_clockrdlock(pthread_rwlock_t *rw, clockid_t clock,
                                      const struct timespec *abstime);
IOF_API int
iof_compat_pthread_rwlock_clockwrlock(pthread_rwlock_t *rw, clockid_t clock,
                                      const struct timespec *abstime);
#endif
IOF_API int iof_compat_pthread_rwlock_unlock(pthread_rwlock_t *rw);

/* ---- spin locks -------------------------------------------------------- */

/* pthread_spin_lock on glibc's lock word (init, trylock, unlock and destroy
 * stay glibc's): in a fiber thread it yields between short spins, so a
 * holder that suspended on the same io thread gets to run and let go. 0;
 * what pthread_spin_trylock reports other than EBUSY. */
IOF_API int iof_compat_pthread_spin_lock(pthread_spinlock_t *l);

/* ---- barriers --------------------------------------------------------- */

/* 0; EINVAL (count 0, or a barrier never initialized). wait returns
 * PTHREAD_BARRIER_SERIAL_THREAD to one caller of each round and 0 to the
 * others. A process-shared barrier is glibc's: a fiber thread waits for it
 * as a fiber (glibc's wait runs on a resolver thread), ECANCELED if the
 * fiber's chain is stopped meanwhile. */
IOF_API int iof_compat_pthread_barrier_init(pthread_barrier_t *b,
                                            const pthread_barrierattr_t *attr,
                                            unsigned count);
IOF_API int iof_compat_pthread_barrier_destroy(pthread_barrier_t *b);
IOF_API int iof_compat_pthread_barrier_wait(pthread_barrier_t *b);
#endif

/* ---- keys (fiber-local storage) --------------------------------------- */

/* Up to PTHREAD_KEYS_MAX keys. 0; EAGAIN when all are taken; EINVAL. */
IOF_API int iof_compat_pthread_key_create(pthread_key_t *key,
                                          void (*destructor)(void *));
/* 0; EINVAL for a key that is not live. */
IOF_API int iof_compat_pthread_key_delete(pthread_key_t key);
/* The calling fiber thread's (or plain thread's) value; NULL if unset. */
IOF_API void *iof_compat_pthread_getspecific(pthread_key_t key);
/* 0; EINVAL (dead key); ENOMEM. */
IOF_API int iof_compat_pthread_setspecific(pthread_key_t key,
                                           const void *value);

/* ---- unnamed semaphores ----------------------------------------------- */

/* Process-private only: pshared != 0 fails with ENOSYS. -1 + errno
 * EINVAL (value > SEM_VALUE_MAX). Named semaphores (sem_open) are not
 * covered. */
IOF_API int iof_compat_sem_init(sem_t *s, int pshared, unsigned value);
/* 0; -1 + EBUSY while waited for. */
IOF_API int iof_compat_sem_destroy(sem_t *s);
/* 0; never EINTR. */
IOF_API int iof_compat_sem_wait(sem_t *s);
/* 0; -1 + EAGAIN. */
IOF_API int iof_compat_sem_trywait(sem_t *s);
#ifdef IOF__COMPAT_XOPEN2K
/* 0; -1 + ETIMEDOUT (CLOCK_REALTIME abstime) or EINVAL. */
IOF_API int iof_compat_sem_timedwait(sem_t *s, const struct timespec *abstime);
#endif
#ifdef IOF__COMPAT_GNU
/* As timedwait on an explicit clock. */
IOF_API int iof_compat_sem_clockwait(sem_t *s, clockid_t clock,
                                     const struct timespec *abstime);
#endif
/* 0; -1 + EOVERFLOW at SEM_VALUE_MAX. */
IOF_API int iof_compat_sem_post(sem_t *s);
/* *value = the count (never negative). 0. */
IOF_API int iof_compat_sem_getvalue(sem_t *s, int *value);

/* ---- futex ---------------------------------------------------------------
 * As syscall(SYS_futex, ...), for libraries with their own futex-based
 * locks (InnoDB, Rust's std, libstdc++'s std::atomic::wait and
 * semaphores). A fiber's FUTEX_WAIT / FUTEX_WAIT_BITSET suspends the fiber
 * (plain threads wait in the kernel); FUTEX_WAKE(_BITSET), FUTEX_REQUEUE,
 * FUTEX_CMP_REQUEUE and FUTEX_WAKE_OP reach both kinds of waiter. Other
 * operations (priority inheritance) are the kernel's and block a fiber's
 * thread. Fibers' waits see only wakes made through this call (the hook
 * routes libc's syscall() here); on a process-shared word a fiber also
 * re-reads the word every few ms, for wakes from other processes. Returns
 * as the system call: 0 or a count; -1 + errno (EAGAIN, ETIMEDOUT, EINVAL,
 * EFAULT, ENOSYS). Not interrupted by signal handlers (no EINTR). */
IOF_API long iof_compat_futex(uint32_t *uaddr, int futex_op, uint32_t val,
                              const struct timespec *timeout, uint32_t *uaddr2,
                              uint32_t val3);

/* ---- running a blocking-style program --------------------------------- */

typedef struct iof_main_opts {
  /* io_contexts, each on its own OS thread (the caller runs the first);
   * new fiber threads are placed round-robin. 0: $IOF_THREADS, else 1. */
  unsigned threads;
  /* Stack of fn's fiber; 0: 8 MiB (as a main thread; only touched pages
   * cost memory). */
  size_t main_stack_size;
  /* Default stack of fiber threads whose attr sets none, for this call;
   * 0: $IOF_STACK_SIZE (bytes, k/m suffix; ignored outside the limits
   * below), else IOF_FIBER_STACK_DEFAULT. */
  size_t thread_stack_size;
} iof_main_opts;

/* Runs fn(arg) as a fiber thread (pthread_self/pthread_exit work in it)
 * on a fresh io_context and returns its status once it returns; fiber
 * threads still running then are left behind (as threads are when main
 * returns: the caller is expected to exit). Each fiber thread has its own
 * values of the program's thread-locals (fn: the caller's, which it gets
 * back; $IOF_THREAD_LOCALS=all|shared widens or turns that off; see
 * docs/porting.md, "Thread-locals"). If fn ends with pthread_exit,
 * returns 0 once every fiber thread has ended. -EINVAL (NULL fn); -ENOMEM;
 * -EBUSY (iof_main already running). */
IOF_API int iof_main(iof_fn fn, void *arg);

/* iof_main with options (NULL: defaults). -EINVAL also for a stack size
 * (nonzero) outside IOF_FIBER_STACK_MIN..IOF_FIBER_STACK_MAX. */
IOF_API int iof_main_ex(iof_fn fn, void *arg, const iof_main_opts *opts);

#ifdef __cplusplus
}
#endif
#endif
