/* iofiber: executors, execution contexts and services (P4003 10.3-10.5).
 *
 * An executor takes fibers only: post always queues, dispatch returns the
 * fiber to run inline when that is safe. The queues are intrusive through
 * the fiber control block, so neither allocates. An executor object lives
 * in what owns it (io_context, strand, thread pool) and iof_executor_ref
 * names it with two pointers. */
#ifndef IOFIBER_EXECUTOR_H
#define IOFIBER_EXECUTOR_H

#include <pthread.h>
#ifndef __cplusplus
#include <stdatomic.h>
#endif
#include <stdbool.h>

#include <iofiber/fiber.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct iof_execution_context iof_execution_context;

/* What a user-written executor provides. All slots are required except
 * `equal` (NULL: equal only to the same object) and the work slots. */
typedef struct iof_executor_vtbl {
  /* 1: the calling thread runs this executor's context and h may run
   * inline now; 0: h was queued; -ESHUTDOWN (h not taken). */
  int (*dispatch)(const void *ex, iof_fiber *h);
  /* Queues h; never runs it before returning. 0 or -ESHUTDOWN. */
  int (*post)(const void *ex, iof_fiber *h);
  bool (*equal)(const void *a, const void *b);
  iof_execution_context *(*context)(const void *ex);
  void (*on_work_started)(const void *ex);
  void (*on_work_finished)(const void *ex);
} iof_executor_vtbl;

/* Two pointers; a zero ref is empty. */
typedef struct iof_executor_ref {
  const void *ex;
  const iof_executor_vtbl *vt;
} iof_executor_ref;

static inline iof_executor_ref iof_executor_make(const void *ex,
                                                 const iof_executor_vtbl *vt) {
  iof_executor_ref r = {ex, vt};
  return r;
}

static inline bool iof_executor_empty(iof_executor_ref ex) {
  return ex.vt == NULL;
}

/* Returns h if the calling thread runs ex's context and h may run inline,
 * else queues h and returns NULL. The result is meant for a run loop or an
 * awaitable's suspend only: running code never resumes a fiber itself.
 * NULL means: errno 0, h was queued; errno ESHUTDOWN, h refused (not
 * queued, the caller keeps it); errno EINVAL, empty ex, NULL or finished
 * h; errno EBUSY, h already waits in a run queue of the library's
 * contexts or in one of the library's waits (a lock, sleep, socket...). errno
 * is always set when NULL is returned, so no stale value can be misread. */
IOF_API iof_fiber *iof_executor_dispatch(iof_executor_ref ex, iof_fiber *h);

/* Queues h; never resumes it before returning; never blocks.
 * 0; -EINVAL (empty ex, NULL h, a finished h, a vtable without post);
 * -EBUSY (h already waits in a run queue of the library's contexts, e.g.
 * posted twice, or in one of the library's waits: nothing changes); -ESHUTDOWN
 * (h not queued). dispatch likewise refuses a vtable without dispatch (EINVAL).
 */
IOF_API int iof_executor_post(iof_executor_ref ex, iof_fiber *h);

/* Both empty, the same object, or the same vtable and `equal` says so. */
IOF_API bool iof_executor_equal(iof_executor_ref a, iof_executor_ref b);

/* The executor object if ref has vtable vt, else NULL. */
IOF_API void *iof_executor_target(iof_executor_ref ref,
                                  const iof_executor_vtbl *vt);

/* The owning context (NULL for an empty ref). */
IOF_API iof_execution_context *iof_executor_context(iof_executor_ref ex);

/* Work tracking: a context's run loop keeps running while work is counted.
 * No-ops on an empty ref or when the vtable has no such slot. */
IOF_API void iof_executor_on_work_started(iof_executor_ref ex);
IOF_API void iof_executor_on_work_finished(iof_executor_ref ex);

/* ---- Execution context and services --------------------------------- */

typedef struct iof_service iof_service;

/* One static object per service type. create returns a service (whose
 * first member is an iof_service) or NULL on failure; shutdown cancels what
 * the service holds (pending operations complete with -ECANCELED); destroy
 * frees it. shutdown and destroy may be NULL. */
typedef struct iof_service_key {
  const char *name;
  iof_service *(*create)(iof_execution_context *ctx);
  void (*shutdown)(iof_service *svc);
  void (*destroy)(iof_service *svc);
} iof_service_key;

/* Embed first in a service. Fields are private, set by the context. */
struct iof_service {
  const iof_service_key *key;
  iof_service *next;
  iof_execution_context *ctx;
  int creating;
};

/* Embed in every context. Fields are private. */
struct iof_execution_context {
  pthread_mutex_t lock;
  pthread_cond_t created;
  iof_service *services; /* newest first */
  /* 0 running; 1 shutdown's walk running, 3 done; 2 destroyed */
  IOF_ATOMIC(int) state;
  IOF_ATOMIC(iof_frame_allocator *) frame_allocator; /* NULL: default */
  const void *kind; /* set by built-in contexts (io/ finds its io_context) */
  /* Fibers of this context inside iof_run on another one: they come back
   * soon, so its run loop may spin for them before blocking. */
  IOF_ATOMIC(long) away;
};

/* Initializes ctx (no services). 0; -EINVAL on NULL; -ENOMEM. */
IOF_API int iof_execution_context_init(iof_execution_context *ctx);

/* Marks ctx shutting down (posts and launches now fail with -ESHUTDOWN)
 * and runs every service's shutdown exactly once, newest first. A second
 * call does nothing. */
IOF_API void iof_execution_context_shutdown(iof_execution_context *ctx);

/* Shuts down if needed (or waits for a shutdown running on another
 * thread to finish), then destroys the services newest first and frees
 * what init allocated. The owner drains its fibers between the two calls. */
IOF_API void iof_execution_context_destroy(iof_execution_context *ctx);

/* True once shutdown has begun. */
IOF_API bool iof_execution_context_stopping(const iof_execution_context *ctx);

/* The service for key, created on first use (once, even with threads
 * racing; a create that itself uses other services does not deadlock).
 * NULL with errno: EINVAL, ENOMEM (create failed), ESHUTDOWN, EDEADLK (the
 * key's own create asked for itself). */
IOF_API iof_service *iof_use_service(iof_execution_context *ctx,
                                     const iof_service_key *key);

/* Creates the service; NULL with errno EEXIST if present (or as above). */
IOF_API iof_service *iof_make_service(iof_execution_context *ctx,
                                      const iof_service_key *key);

/* The service if present, never creating; valid after shutdown, until
 * destroy. NULL if absent. */
IOF_API iof_service *iof_find_service(iof_execution_context *ctx,
                                      const iof_service_key *key);
IOF_API bool iof_has_service(iof_execution_context *ctx,
                             const iof_service_key *key);

/* The allocator for fibers launched on ctx: never NULL (default: the
 * process-wide stack pool, iof_default_frame_allocator()). Setting affects only
 * later launches; NULL restores the default. 0; -EINVAL (NULL ctx, an
 * allocator whose vtbl or one of its slots is NULL). */
IOF_API iof_frame_allocator *
iof_context_frame_allocator(iof_execution_context *ctx);
IOF_API int iof_context_set_frame_allocator(iof_execution_context *ctx,
                                            iof_frame_allocator *a);

/* ---- Work guard ------------------------------------------------------ */

/* Keeps ex's context running (counts as work) until reset.
 *
 * When you need one: a fiber on another executor (a thread pool) that
 * reads a socket in a loop counts as work on the socket's io_context only
 * while a read is pending. Between two reads nothing is counted there, so
 * that context's iof_io_context_run may return and the next read waits on
 * a loop nobody runs. Hold a guard on the io_context for the whole loop:
 *   iof_work_guard g;
 *   iof_work_guard_init(&g, iof_io_context_executor(iof_socket_io_context(s)));
 *   while ((n = iof_read_some(s, buf, len)) > 0) handle(buf, n);
 *   iof_work_guard_reset(&g); */
typedef struct iof_work_guard {
  iof_executor_ref ex;
} iof_work_guard;

/* 0, or -EINVAL for an empty ex. */
IOF_API int iof_work_guard_init(iof_work_guard *g, iof_executor_ref ex);
/* Releases the work (once; later calls do nothing). */
IOF_API void iof_work_guard_reset(iof_work_guard *g);
/* True while the guard holds work. */
IOF_API bool iof_work_guard_owns(const iof_work_guard *g);

#ifdef __cplusplus
}
#endif
#endif
