/* iofiber: synchronization primitives for fibers (and threads): mutex,
 * read-write lock, condition variable, semaphore, event.
 *
 * Common rules (docs/sync.md has the details):
 * - In a fiber launched by iof_run_async they suspend the fiber, never the
 *   thread; the waiter lives on the fiber's stack (no allocation) and is
 *   woken through its own executor (env->executor), never inline. Called
 *   from a plain thread (or a raw fiber) they block the thread, so legacy
 *   threads and fibers can share one primitive.
 * - Every blocking call from a fiber checks the chain's stop token first
 *   (already stopped: -ECANCELED, nothing done) and a stop request while
 *   it waits completes it with -ECANCELED; so does the shutdown of the
 *   fiber's context. try_* calls never look at the token.
 * - Deadlines are absolute CLOCK_MONOTONIC nanoseconds (iof_deadline_after
 *   builds one; INT64_MAX means never). A timed wait that cannot complete
 *   in time returns -ETIMEDOUT. A fiber on an io_context is timed by that
 *   loop; other fibers and plain threads by a shared timer thread. A
 *   timed wait whose timer cannot be armed fails without waiting: -ENOMEM
 *   (the loop's timer heap could not grow) or -EAGAIN (the timer thread
 *   could not start).
 * - Errors are negated errno values; NULL arguments give -EINVAL.
 * - Fields of the structs are private. Initialize with the *_init calls or
 *   the static initializers; destroy (-EBUSY while waiters remain) before
 *   freeing the memory. A waiter remains until its call has returned: one
 *   whose wait a stop request or its deadline ended still counts until
 *   its fiber has run again. */
#ifndef IOFIBER_SYNC_H
#define IOFIBER_SYNC_H

#include <pthread.h>
#ifndef __cplusplus
#include <stdatomic.h>
#endif
#include <stdbool.h>
#include <stdint.h>

#include <iofiber/frame_allocator.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Private: a FIFO of waiters. */
struct iof__wnode;
typedef struct iof__waitq {
  struct iof__wnode *head, *tail;
} iof__waitq;

/* The deadline `ns` nanoseconds from now: CLOCK_MONOTONIC time in
 * nanoseconds plus ns (ns < 0 counts as 0; saturates at INT64_MAX). */
IOF_API int64_t iof_deadline_after(int64_t ns);

/* ---- mutex ------------------------------------------------------------ */

/* A non-recursive mutex owned by a fiber (which may move threads while it
 * holds it) or a thread. FIFO hand-off: unlock gives ownership directly to
 * the first waiter, newcomers never barge past waiters. */
typedef struct iof_mutex {
  IOF_ATOMIC(int) state; /* 0 free, 1 locked, 2 locked with waiters */
  IOF_ATOMIC(void *) owner;
  pthread_mutex_t lock;
  iof__waitq q;
} iof_mutex;

#define IOF_MUTEX_INIT                                                         \
  {                                                                            \
    0, NULL, PTHREAD_MUTEX_INITIALIZER, {                                      \
      NULL, NULL                                                               \
    }                                                                          \
  }

/* Initializes an unlocked mutex. 0; -EINVAL on NULL. */
IOF_API int iof_mutex_init(iof_mutex *m);

/* Destroys an unlocked mutex without waiters. 0; -EINVAL; -EBUSY when it
 * is locked or has waiters (nothing is destroyed then). */
IOF_API int iof_mutex_destroy(iof_mutex *m);

/* Locks, waiting in FIFO order. 0; -EINVAL; -EDEADLK if the caller owns
 * it already; -ECANCELED (fiber: stop requested before or while waiting,
 * or its context shuts down; the mutex is then not taken). */
IOF_API int iof_mutex_lock(iof_mutex *m);

/* As lock, giving up at `deadline_ns`: -ETIMEDOUT. A free mutex is taken
 * even past the deadline. */
IOF_API int iof_mutex_timedlock(iof_mutex *m, int64_t deadline_ns);

/* Takes the mutex only if it is free and nobody waits. 0; -EBUSY
 * (also when the caller owns it); -EINVAL. */
IOF_API int iof_mutex_trylock(iof_mutex *m);

/* Unlocks; the first waiter, if any, becomes the owner (woken through its
 * executor). 0; -EINVAL; -EPERM if the caller is not the owner. */
IOF_API int iof_mutex_unlock(iof_mutex *m);

/* ---- read-write lock -------------------------------------------------- */

/* Shared (read) or exclusive (write) ownership, fair in both directions:
 * waiters queue in FIFO order, a reader does not pass a writer that
 * waits, and an unlock that frees the lock hands it to the first writer
 * in line or to every reader in line before the next writer. So a reader
 * that reads again while a writer waits waits behind that writer: do not
 * nest read locks. */
typedef struct iof_rwlock {
  pthread_mutex_t lock;
  void *writer;     /* the holder in write mode, or NULL */
  unsigned readers; /* holders in read mode */
  iof__waitq q;
} iof_rwlock;

#define IOF_RWLOCK_INIT                                                        \
  {                                                                            \
    PTHREAD_MUTEX_INITIALIZER, NULL, 0, {                                      \
      NULL, NULL                                                               \
    }                                                                          \
  }

/* Initializes an unlocked lock. 0; -EINVAL on NULL. */
IOF_API int iof_rwlock_init(iof_rwlock *rw);

/* 0; -EINVAL; -EBUSY while it is held or has waiters (nothing is
 * destroyed then). */
IOF_API int iof_rwlock_destroy(iof_rwlock *rw);

/* Takes the lock shared, waiting while a writer holds it or anyone waits.
 * 0; -EINVAL; -EDEADLK (the caller holds it in write mode); -EAGAIN (too
 * many readers); -ECANCELED (stop or shutdown; not taken). */
IOF_API int iof_rwlock_rdlock(iof_rwlock *rw);

/* As rdlock, giving up at `deadline_ns`: -ETIMEDOUT. */
IOF_API int iof_rwlock_timedrdlock(iof_rwlock *rw, int64_t deadline_ns);

/* rdlock only if that needs no wait: 0; -EBUSY; -EDEADLK; -EAGAIN;
 * -EINVAL. */
IOF_API int iof_rwlock_tryrdlock(iof_rwlock *rw);

/* Takes the lock exclusive, waiting while anyone holds it or waits before
 * the caller. 0; -EINVAL; -EDEADLK (the caller holds it in write mode);
 * -ECANCELED. */
IOF_API int iof_rwlock_wrlock(iof_rwlock *rw);

/* As wrlock, giving up at `deadline_ns`: -ETIMEDOUT. */
IOF_API int iof_rwlock_timedwrlock(iof_rwlock *rw, int64_t deadline_ns);

/* wrlock only if that needs no wait: 0; -EBUSY; -EDEADLK; -EINVAL. */
IOF_API int iof_rwlock_trywrlock(iof_rwlock *rw);

/* Releases the caller's hold (write mode if it is the writer, else one
 * read hold) and hands a freed lock on. 0; -EINVAL; -EPERM when it is not
 * held (or held in write mode by someone else). */
IOF_API int iof_rwlock_unlock(iof_rwlock *rw);

/* ---- condition variable ----------------------------------------------- */

typedef struct iof_cond {
  pthread_mutex_t lock;
  iof__waitq q;
} iof_cond;

#define IOF_COND_INIT                                                          \
  {                                                                            \
    PTHREAD_MUTEX_INITIALIZER, {                                               \
      NULL, NULL                                                               \
    }                                                                          \
  }

/* 0; -EINVAL on NULL. */
IOF_API int iof_cond_init(iof_cond *c);

/* 0; -EINVAL; -EBUSY while waiters remain. */
IOF_API int iof_cond_destroy(iof_cond *c);

/* Atomically releases m (which the caller must own) and waits for a
 * signal; re-acquires m before returning, whatever the result. 0 (also on
 * a spurious wake-up: re-check the predicate in a loop); -EINVAL; -EPERM
 * (m not owned by the caller); -ECANCELED (stop/shutdown; m held). */
IOF_API int iof_cond_wait(iof_cond *c, iof_mutex *m);

/* As iof_cond_wait, until deadline_ns: -ETIMEDOUT (m held again). */
IOF_API int iof_cond_timedwait(iof_cond *c, iof_mutex *m, int64_t deadline_ns);

/* Wakes the first waiter / every waiter (they re-acquire the mutex in
 * turn). Callable with or without the mutex held. 0; -EINVAL. */
IOF_API int iof_cond_signal(iof_cond *c);
IOF_API int iof_cond_broadcast(iof_cond *c);

/* ---- semaphore -------------------------------------------------------- */

#define IOF_SEM_VALUE_MAX ((unsigned)0x7fffffff)

typedef struct iof_sem {
  pthread_mutex_t lock;
  unsigned value;
  iof__waitq q;
} iof_sem;

#define IOF_SEM_INIT(n)                                                        \
  {                                                                            \
    PTHREAD_MUTEX_INITIALIZER, (n), {                                          \
      NULL, NULL                                                               \
    }                                                                          \
  }

/* A counting semaphore holding `value` units. 0; -EINVAL (NULL, value
 * above IOF_SEM_VALUE_MAX). */
IOF_API int iof_sem_init(iof_sem *s, unsigned value);

/* 0; -EINVAL; -EBUSY while waiters remain. */
IOF_API int iof_sem_destroy(iof_sem *s);

/* Takes one unit, waiting (FIFO) while there is none. 0; -EINVAL;
 * -ECANCELED (nothing taken). */
IOF_API int iof_sem_wait(iof_sem *s);

/* As wait, until deadline_ns: -ETIMEDOUT. */
IOF_API int iof_sem_timedwait(iof_sem *s, int64_t deadline_ns);

/* Takes one unit if one is there now. 0; -EAGAIN; -EINVAL. */
IOF_API int iof_sem_trywait(iof_sem *s);

/* Adds one unit, handing it to the first waiter if any. 0; -EINVAL;
 * -EOVERFLOW at IOF_SEM_VALUE_MAX. */
IOF_API int iof_sem_post(iof_sem *s);

/* The units available now (0 while fibers wait); 0 on NULL. */
IOF_API unsigned iof_sem_value(iof_sem *s);

/* ---- event ------------------------------------------------------------ */

/* A latch. Manual reset: set releases every waiter, present and future,
 * until reset. Auto reset: set releases exactly one waiter (the first), or
 * if none waits, stays set until one wait consumes it. */
typedef struct iof_event {
  pthread_mutex_t lock;
  bool set;
  bool manual;
  iof__waitq q;
} iof_event;

#define IOF_EVENT_INIT(manual_reset)                                           \
  {                                                                            \
    PTHREAD_MUTEX_INITIALIZER, false, (manual_reset), {                        \
      NULL, NULL                                                               \
    }                                                                          \
  }

/* Initializes an unset event. 0; -EINVAL on NULL. */
IOF_API int iof_event_init(iof_event *e, bool manual_reset);

/* 0; -EINVAL; -EBUSY while waiters remain. */
IOF_API int iof_event_destroy(iof_event *e);

/* Sets the event (see above). 0; -EINVAL. */
IOF_API int iof_event_set(iof_event *e);

/* Clears it (waiters keep waiting). 0; -EINVAL. */
IOF_API int iof_event_reset(iof_event *e);

/* True while set (a snapshot); false on NULL. */
IOF_API bool iof_event_is_set(iof_event *e);

/* Waits until the event is set (auto reset: consumes it). 0; -EINVAL;
 * -ECANCELED. */
IOF_API int iof_event_wait(iof_event *e);

/* As wait, until deadline_ns: -ETIMEDOUT. */
IOF_API int iof_event_timedwait(iof_event *e, int64_t deadline_ns);

/* Without waiting: 0 if set (auto reset: consumed), -EAGAIN if not. */
IOF_API int iof_event_trywait(iof_event *e);

#ifdef __cplusplus
}
#endif
#endif
