/* iofiber: sleeping and timers, on libev timers of the fiber's io_context
 * (a fiber on a thread pool sleeps on a shared timer thread, started on
 * demand and stopped when idle). Times are nanoseconds of CLOCK_MONOTONIC;
 * arithmetic on them saturates (INT64_MAX: never, INT64_MIN: long past).
 * All waits need a launched fiber. */
#ifndef IOFIBER_TIMER_H
#define IOFIBER_TIMER_H

#include <stdint.h>

#include <iofiber/io_context.h>

#ifdef __cplusplus
extern "C" {
#endif

/* CLOCK_MONOTONIC in nanoseconds (the clock deadlines are given in). */
IOF_API int64_t iof_now_ns(void);

/* Suspends the calling fiber for ns nanoseconds (<= 0: returns at once).
 * 0; -ECANCELED (the chain's stop token, or shutdown); -EPERM outside a
 * launched fiber; -ENOMEM (libev's timer heap could not grow) or -EAGAIN
 * (a pool fiber: the timer thread could not start), nothing waited. */
IOF_API int iof_sleep_for(int64_t ns);

/* As iof_sleep_for, until the monotonic deadline. */
IOF_API int iof_sleep_until(int64_t deadline_ns);

typedef struct iof_timer iof_timer;

/* A timer on io, initially expired. NULL with errno EINVAL or ENOMEM. */
IOF_API iof_timer *iof_timer_create(iof_io_context *io);

/* Frees it. -EBUSY while fibers wait on it, including fibers that a
 * cancel or a new expiry woke and that have not returned from
 * iof_timer_wait yet (they still disarm on the timer); -EINVAL on NULL. */
IOF_API int iof_timer_destroy(iof_timer *t);

/* Sets the expiry (relative, or absolute monotonic). Fibers waiting on the
 * old expiry complete with -ECANCELED. Returns how many it woke, or
 * -EINVAL. Callable from any thread. */
IOF_API int iof_timer_expires_after(iof_timer *t, int64_t ns);
IOF_API int iof_timer_expires_at(iof_timer *t, int64_t deadline_ns);

/* The current expiry (monotonic ns). */
IOF_API int64_t iof_timer_expiry(const iof_timer *t);

/* Waits until the expiry (at once if it has passed). 0 on expiry;
 * -ECANCELED (iof_timer_cancel, expiry changed, stop token, shutdown);
 * -EPERM outside a launched fiber; -EINVAL on NULL; -ENOMEM (as
 * iof_read_some: libev could not grow). Any number of fibers
 * may wait on one timer. */
IOF_API int iof_timer_wait(iof_timer *t);

/* Completes every pending wait with -ECANCELED; returns how many. The
 * expiry is unchanged. Any thread. */
IOF_API int iof_timer_cancel(iof_timer *t);

#ifdef __cplusplus
}
#endif
#endif
