/* iofiber: deadlines as stop tokens. */
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

#ifdef __cplusplus
}
#endif
#endif
