/* iofiber: launching chains, awaiting, hopping executors. */
#ifndef IOFIBER_LAUNCH_H
#define IOFIBER_LAUNCH_H

#include <iofiber/env.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Launch options; a zeroed struct (or NULL) means all defaults. */
typedef struct iof_launch_opts {
  iof_stop_token stop_token;            /* empty: the chain cannot be stopped */
  iof_frame_allocator *frame_allocator; /* NULL: the context's allocator */
  size_t stack_size;                    /* 0: IOF_FIBER_STACK_DEFAULT */
  const char *name;                     /* copied; for the overflow report */
  void (*on_done)(void *user, int status); /* once, on the chain's executor */
  void *user;
} iof_launch_opts;

/* Starts fn(arg) in a new fiber on ex: allocates the fiber, builds its env
 * (executor, the token retained for the chain's life, allocator) and posts
 * it; never runs fn before returning. The chain counts as work on ex until
 * on_done has run and its stack is freed. 0; -EINVAL (empty ex, NULL fn,
 * bad stack size, a vtable without post or dispatch, a frame allocator
 * without its vtbl or slots); -EDEADLK (from an
 * iof_fiber_walk callback); -ESHUTDOWN (ex's context
 * is shutting down); -ENOMEM. Nothing is allocated on failure. Called in a
 * fiber, the new chain inherits neither the caller's token nor its allocator.
 */
IOF_API int iof_run_async(iof_executor_ref ex, const iof_launch_opts *opts,
                          iof_fn fn, void *arg);

/* For authors of contexts: disposes of a fiber launched by iof_run_async
 * that never started (found in a queue at destroy): fn is not called, its
 * on_done gets -ECANCELED, the frame is freed and the work released.
 * 0; -EBUSY if it started or is still queued on one of the library's
 * contexts (they cancel their own at destroy); -EINVAL if NULL or not
 * launched; -EDEADLK from an iof_fiber_walk callback. */
IOF_API int iof_launch_cancel(iof_fiber *f);

/* iof_run_async with default options. */
IOF_API int iof_launch(iof_executor_ref ex, iof_fn fn, void *arg);

/* Runs fn(arg) in the calling fiber on executor ex (empty: the caller's),
 * with a new env on the caller's stack: a token in opts replaces the
 * caller's for fn, an allocator in opts is current inside fn; then comes
 * back to the caller's executor and env. No hop at all when the executors
 * are equal. Returns fn's status; -EPERM outside a launched fiber; -EINVAL
 * if opts sets stack_size, name or on_done; -ESHUTDOWN if ex refuses the
 * hop (fn not run). */
IOF_API int iof_run(iof_executor_ref ex, const iof_launch_opts *opts, iof_fn fn,
                    void *arg);

/* An awaitable: ready (may be NULL) skips suspension when true; suspend is
 * called on the resumer's stack once the fiber h is suspended, and returns
 * NULL (h waits; someone dispatches it later), h (resume at once) or
 * another fiber to switch to directly; resume (may be NULL) gives the
 * result iof_await returns. An awaitable keeps env only until it
 * completes. */
typedef struct iof_awaitable_vtbl {
  bool (*ready)(void *self);
  iof_fiber *(*suspend)(void *self, iof_fiber *h, const iof_env *env);
  int (*resume)(void *self);
} iof_awaitable_vtbl;

/* Suspends the calling fiber first, then calls vt->suspend (so a
 * completion inside suspend can never resume a running fiber). Returns
 * vt->resume(aw) (0 without it); -EPERM outside a launched fiber; -EINVAL
 * on NULL; -ECANCELED without suspending once the fiber's context is
 * shutting down. */
IOF_API int iof_await(void *aw, const iof_awaitable_vtbl *vt);

/* Posts the calling fiber to its executor and suspends: others run first.
 * On its own io_context with no other fiber ready it continues at once
 * (the loop still polls I/O every 64 fibers run). 0; -EPERM outside a
 * launched fiber; -ECANCELED during shutdown. */
IOF_API int iof_yield(void);

#ifdef __cplusplus
}
#endif
#endif
