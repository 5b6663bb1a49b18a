/* iofiber: the environment that flows forward from the launch site through
 * every suspension point (P4003's io_env), and the thread-local frame
 * allocator cache. */
#ifndef IOFIBER_ENV_H
#define IOFIBER_ENV_H

#include <iofiber/executor.h>
#include <iofiber/stop.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct iof_env {
  iof_executor_ref executor; /* where every await resumes the fiber */
  iof_stop_token stop_token; /* empty when the launch gave none */
  iof_frame_allocator
      *frame_allocator; /* as given at launch; NULL: unspecified */
} iof_env;

/* The running fiber's env (stable for the chain's life, or the one
 * iof_run built for the current call); NULL outside fibers launched by
 * iof_run_async. Never suspends, allocates or locks; async-signal-safe. */
IOF_API const iof_env *iof_env_current(void);

/* Exactly what iof_set_current_frame_allocator stored on this thread (NULL
 * included). The runtime sets it on every resume of a launched fiber to its
 * env's allocator, or its effective allocator when that is NULL. */
IOF_API iof_frame_allocator *iof_current_frame_allocator(void);
IOF_API void iof_set_current_frame_allocator(iof_frame_allocator *a);

#ifdef __cplusplus
}
#endif
#endif
