/* iofiber: stackful fibers switched with Boost.Context's fcontext.
 *
 * A fiber runs `int fn(void *arg)` on its own stack. It is started and
 * continued with iof_fiber_resume() and gives control back to its resumer
 * with iof_fiber_suspend(). The low-level layer here knows nothing of
 * executors; sched/ builds iof_await, launch and the run loops on it. */
#ifndef IOFIBER_FIBER_H
#define IOFIBER_FIBER_H

#include <stdbool.h>
#include <stddef.h>

#include <iofiber/frame_allocator.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct iof_fiber iof_fiber;

/* A task function: status >= 0 success, < 0 a negated errno. */
typedef int (*iof_fn)(void *arg);

#define IOF_FIBER_STACK_DEFAULT ((size_t)64 * 1024)
#define IOF_FIBER_STACK_MIN ((size_t)16 * 1024)
#define IOF_FIBER_STACK_MAX ((size_t)1024 * 1024 * 1024)

/* Allocates a fiber (stack and control block in one frame from `alloc`,
 * NULL: the default allocator) that will run fn(arg) when first resumed.
 * stack_size is rounded up to pages; 0 means IOF_FIBER_STACK_DEFAULT (as
 * in every stack size of the library). Returns NULL with errno: EINVAL
 * (NULL fn, stack_size below IOF_FIBER_STACK_MIN or above _MAX, an
 * allocator whose vtbl or one of its slots is NULL), ENOMEM. */
IOF_API iof_fiber *iof_fiber_create(iof_frame_allocator *alloc,
                                    size_t stack_size, iof_fn fn, void *arg);

/* Runs f until it suspends or finishes. Returns 0; -EINVAL if f is NULL or
 * finished, -EBUSY if f is running, waits in the run queue of one of the
 * library's contexts (which alone may run it) or is parked in one of the
 * library's waits (a lock, sleep, socket or channel wait) that nothing has
 * ended yet. Callable from a thread or a fiber. */
IOF_API int iof_fiber_resume(iof_fiber *f);

/* The fiber running on this thread, or NULL outside fibers. */
IOF_API iof_fiber *iof_fiber_current(void);

/* True once fn has returned. */
IOF_API bool iof_fiber_done(const iof_fiber *f);

/* True once f has been resumed at least once (false on NULL). Executors
 * use it to refuse new launches, but not wake-ups, during shutdown. */
IOF_API bool iof_fiber_started(const iof_fiber *f);

/* fn's return value once done; -EAGAIN before; -EINVAL on NULL. */
IOF_API int iof_fiber_status(const iof_fiber *f);

/* Frees a finished or never-started fiber (fn is then never called).
 * 0; -EINVAL on NULL or on a fiber already destroyed whose frame has not
 * been reused (a pooled frame; under ASan any poisoned frame); -EBUSY if it
 * is running, suspended mid-way or in the run queue of one of the library's
 * contexts. A destroyed fiber must not be used:
 * under ASan a pooled frame is poisoned, so such a use is reported. */
IOF_API int iof_fiber_destroy(iof_fiber *f);

/* Names are copied (truncated to 31 bytes, and no byte past the 31st is
 * read: a name needs no terminator there; NULL clears); used in the
 * overflow report. set_name: 0, -EINVAL on NULL f.
 * iof_fiber_name never returns NULL ("" when unnamed or f is NULL). */
IOF_API int iof_fiber_set_name(iof_fiber *f, const char *name);
IOF_API const char *iof_fiber_name(const iof_fiber *f);

/* Usable stack bytes of f (0 on NULL). */
IOF_API size_t iof_fiber_stack_size(const iof_fiber *f);

/* Gives control back to the resumer of the running fiber; returns 0 when
 * resumed again, -EPERM outside a fiber. */
IOF_API int iof_fiber_suspend(void);

/* Runs on the resumer's stack right after `self` is suspended (the
 * ontop_fcontext pattern): `self` may already be published and resumed
 * elsewhere from here on. Return NULL to let the resumer continue, or a
 * fiber (self included) that the resumer resumes at once, without
 * returning first: symmetric transfer that never grows a stack. */
typedef iof_fiber *(*iof_fiber_hook)(iof_fiber *self, void *arg);

/* Suspends the running fiber, then calls hook(self, arg) on the resumer's
 * stack. 0 when resumed; -EPERM outside a fiber; -EINVAL on NULL hook. */
IOF_API int iof_fiber_suspend_with(iof_fiber_hook hook, void *arg);

/* Symmetric transfer: suspends the running fiber and switches directly to
 * `next`, which takes over the running fiber's resumer. 0 when resumed;
 * -EPERM outside a fiber; -EINVAL if next is NULL or finished, -EBUSY if it
 * is running (itself included) or is one iof_fiber_resume refuses with
 * -EBUSY (queued in one of the library's contexts, or parked in one of its
 * waits). */
IOF_API int iof_fiber_transfer(iof_fiber *next);

#ifdef __cplusplus
}
#endif
#endif
