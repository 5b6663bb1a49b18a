/* iofiber: deadlines as stop tokens, and shields from cancellation. */
#ifndef IOFIBER_DEADLINE_H
#define IOFIBER_DEADLINE_H

#include <stdint.h>

#include <iofiber/launch.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Runs fn(arg) in the calling fiber with a child stop token that fires
 * after ns nanoseconds, and when the caller's token fires. Every blocking
 * operation inside then completes with -ECANCELED. Returns fn's status, or
 * -ETIMEDOUT when the deadline fired before fn returned and fn failed
 * (a success that beat its own cancellation is kept). -EPERM outside a
 * launched fiber; -EINVAL on NULL fn; -ENOMEM. */
IOF_API int iof_with_deadline(int64_t ns, iof_fn fn, void *arg);

/* Runs fn(arg) in the calling fiber, shielded from cancellation: inside,
 * the chain's stop token is replaced by one that never fires, so cleanup
 * (locking a mutex, a goodbye write, a sleep) completes after a stop
 * request. An io_context shutting down (destroy) still cancels its waits.
 * Returns fn's status; -EPERM outside a launched fiber; -EINVAL on NULL
 * fn; -ENOMEM (the first call makes the never-firing source). */
IOF_API int iof_shield(iof_fn fn, void *arg);

/* As iof_shield, but bounded: the operations inside complete with
 * -ECANCELED once ns nanoseconds have passed (ns <= 0: at once), whatever
 * the caller's token does. Returns fn's status, or -ETIMEDOUT when the
 * limit fired and fn failed; -EPERM, -EINVAL, -ENOMEM. */
IOF_API int iof_shield_for(int64_t ns, iof_fn fn, void *arg);

#ifdef __cplusplus
}
#endif
#endif
