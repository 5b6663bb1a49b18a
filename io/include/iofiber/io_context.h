/* iofiber: the I/O context: a libev loop plus the run queue of the fibers
 * whose executor it is. Run by one thread at a time. */
#ifndef IOFIBER_IO_CONTEXT_H
#define IOFIBER_IO_CONTEXT_H

#include <stdint.h>

#include <iofiber/executor.h>

#ifdef __cplusplus
extern "C" {
#endif

struct ev_loop;
typedef struct iof_io_context iof_io_context;

/* A context with its own libev loop. NULL with errno ENOMEM, EMFILE or
 * ENFILE (no descriptor for the loop or its wake-up eventfd); never aborts
 * (libev's own failure paths are guarded, see docs/embedding.md). */
IOF_API iof_io_context *iof_io_context_create(void);

/* A context driven by a host program's existing loop: the host keeps
 * calling ev_run on it (from one thread); ready fibers run from loop
 * watchers, as in a run: run, poll and destroy from one of them (or from
 * another thread meanwhile) give -EBUSY. The loop must outlive the context.
 * NULL with errno EINVAL, ENOMEM, or EMFILE/ENFILE (the loop has no wake-up
 * pipe yet and no descriptor is free for one). */
IOF_API iof_io_context *iof_io_context_attach(struct ev_loop *loop);

/* Shuts down (pending operations complete with -ECANCELED), runs the
 * remaining fibers to their end on this thread, frees never-started ones
 * (on_done gets -ECANCELED), destroys services and the owned loop.
 * -EINVAL on NULL; -EBUSY if called while the context is running, or (then
 * reported on stderr, nothing freed, the context stays shut down) while
 * work is still counted after the drain: a chain suspended on something
 * outside the context, or a work guard. Call it again once they end.
 * -EDEADLK from an iof_fiber_walk callback (as run and its variants). */
IOF_API int iof_io_context_destroy(iof_io_context *io);

/* The context's executor (a ref into io; empty for NULL), its execution
 * context (services, frame allocator; NULL for NULL) and its libev loop. */
IOF_API iof_executor_ref iof_io_context_executor(iof_io_context *io);
IOF_API iof_execution_context *iof_io_context_context(iof_io_context *io);
IOF_API struct ev_loop *iof_io_context_loop(iof_io_context *io);

/* Runs fibers and the loop until no work is left or stop is called.
 * Returns how many fibers ran; -EBUSY if another thread runs it; -EINVAL
 * on NULL; -EDEADLK from an iof_fiber_walk callback (a fiber ending there
 * would wait for the walk). Running out of work is not a stop: a fiber
 * launched after run returned for that reason is run by the next
 * run/run_one/poll/run_for, no restart needed
 * (only an explicit iof_io_context_stop needs restart). */
IOF_API int iof_io_context_run(iof_io_context *io);

/* Runs at most one fiber, waiting for one if needed (or until no work is
 * left): 0 or 1; -EBUSY. */
IOF_API int iof_io_context_run_one(iof_io_context *io);

/* Runs what is ready without waiting; how many fibers ran; -EBUSY. */
IOF_API int iof_io_context_poll(iof_io_context *io);

/* As run, for at most ns nanoseconds. */
IOF_API int iof_io_context_run_for(iof_io_context *io, int64_t ns);

/* stop makes run/run_one/run_for return as soon as possible; from any
 * thread. The context then stays stopped (run returns 0 at once, launches
 * wait in the queue) until restart. stopped is true after stop, and also
 * after a run returned because no work was left (until the next run or
 * restart). restart clears both. */
IOF_API void iof_io_context_stop(iof_io_context *io);
IOF_API bool iof_io_context_stopped(const iof_io_context *io);
IOF_API void iof_io_context_restart(iof_io_context *io);

#ifdef __cplusplus
}
#endif
#endif
