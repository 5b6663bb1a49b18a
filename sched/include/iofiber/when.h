/* iofiber: structured concurrency. iof_when_all / iof_when_any run child
 * tasks concurrently, each in its own fiber, and return only when every
 * child has finished and its frame is freed: no orphans.
 *
 * Children run on the caller's executor (iof_env_current()->executor),
 * their frames come from the chain's frame allocator
 * (iof_current_frame_allocator()), and each gets a stop token linked to
 * the caller's: a stop request on the caller's chain is forwarded to every
 * child. The caller's fiber is suspended meanwhile and resumes on its own
 * executor. Children start with default stack size (64 KiB). */
#ifndef IOFIBER_WHEN_H
#define IOFIBER_WHEN_H

#include <stddef.h>

#include <iofiber/fiber.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Runs fns[i](args[i]) for i < n concurrently (args may be NULL: all NULL)
 * and waits for all. When one fails (status < 0) the others are asked to
 * stop. statuses (may be NULL) receives each child's status (-ECANCELED
 * for a child that could not start). Returns 0, or the first error in
 * time (a launch error included). 0 at once for n == 0; -EINVAL (NULL fns,
 * a NULL fn); -EPERM outside a launched fiber; -ECANCELED if the chain's
 * token is already stopped (nothing started). */
IOF_API int iof_when_all(size_t n, const iof_fn *fns, void *const *args,
                         int *statuses);

/* Runs the children concurrently; the first to finish successfully
 * (status >= 0; errors never win) is the winner: the others are asked to
 * stop and awaited. Returns the winner's status with *winner (may be NULL)
 * set to its index; when every child failed, the first error with *winner
 * = -1. -EINVAL (n == 0 or > INT_MAX, NULL fns, a NULL fn); -EPERM outside
 * a launched fiber; -ECANCELED if already stopped (nothing started). */
IOF_API int iof_when_any(size_t n, const iof_fn *fns, void *const *args,
                         int *winner);

#ifdef __cplusplus
}
#endif
#endif
