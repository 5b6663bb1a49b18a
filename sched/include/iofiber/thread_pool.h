/* iofiber: a pool of threads running fibers (for CPU-bound work; fibers
 * hop in and out with iof_run). */
#ifndef IOFIBER_THREAD_POOL_H
#define IOFIBER_THREAD_POOL_H

#include <iofiber/executor.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct iof_thread_pool iof_thread_pool;

/* Starts n threads (1..1024). They block every signal but faults and
 * SIGPIPE, so signals sent to the process reach the program's own threads.
 * NULL with errno EINVAL, ENOMEM or EAGAIN. */
IOF_API iof_thread_pool *iof_thread_pool_create(size_t n);

/* The pool's executor: post from any thread; dispatch runs inline when the
 * caller is one of the pool's threads. */
IOF_API iof_executor_ref iof_thread_pool_executor(iof_thread_pool *p);
IOF_API iof_execution_context *iof_thread_pool_context(iof_thread_pool *p);

/* Asks the threads to exit as soon as they finish their current fiber;
 * queued fibers are abandoned to destroy (which cancels them). */
IOF_API void iof_thread_pool_stop(iof_thread_pool *p);

/* Waits until the tracked work is done (or stop), then for the threads to
 * exit; a second (concurrent or later) join waits for the same. A launched
 * fiber is suspended meanwhile (it checks every 1 ms, and no stop ends the
 * wait), so its thread keeps running the pool chains that wait on its
 * context; a plain thread, or a fiber whose context is shutting down,
 * blocks. 0; -EINVAL on NULL; -EDEADLK when called from one of the pool's
 * threads or from an iof_fiber_walk callback. */
IOF_API int iof_thread_pool_join(iof_thread_pool *p);

/* Stops, joins, shuts the context down (pending operations complete with
 * -ECANCELED), runs what is left to its end on the calling thread, frees
 * never-started fibers (on_done gets -ECANCELED), destroys services. Never
 * hangs. -EBUSY (reported on stderr; nothing freed, the pool stays shut
 * down without threads) while work is still counted after that drain: a
 * chain suspended on something outside the pool, or a work guard; call it
 * again once they end. -EDEADLK from a pool thread or an iof_fiber_walk
 * callback. */
IOF_API int iof_thread_pool_destroy(iof_thread_pool *p);

#ifdef __cplusplus
}
#endif
#endif
