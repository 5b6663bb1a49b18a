/* The one timer of the runtime, under every timed wait, sleep and
 * deadline. Not installed.
 *
 * A timer is armed where the caller runs: on the event loop of its
 * execution context when that context has one (an io_context: a libev
 * timer, O(log n) in libev's heap, fired on the same thread, no
 * cross-thread wake-up), else on the timer service, a heap kept by one
 * process-wide thread (for fibers on thread pools or strands over them,
 * and for plain threads), started on demand and stopped once idle and at
 * exit. sched/ knows no libev: a context with a loop supplies arm/cancel
 * through its kind (iof__ctx_kind). */
#ifndef IOF_SCHED_TIMER_INTERNAL_H
#define IOF_SCHED_TIMER_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include <iofiber/executor.h>

#include "sched/sched_internal.h"

/* Storage the loop of a context may use inside each timer (a libev
 * ev_timer is 48 bytes on 64-bit targets). */
#define IOF__TIMER_IMPL 64

typedef struct iof__timer {
  void (*fire)(void *arg); /* once, at or after deadline; short, never
                              resumes a fiber inline */
  void *arg;
  int64_t deadline;            /* CLOCK_MONOTONIC ns */
  iof_execution_context *loop; /* armed on this context's loop; NULL: on
                                  the timer service (or not armed) */
  size_t slot;                 /* service heap index + 1; 0: not queued */
  _Alignas(16) unsigned char impl[IOF__TIMER_IMPL]; /* the loop's */
} iof__timer;

/* What ctx->kind points to for built-in contexts that run an event loop on
 * one thread (io_context). arm and cancel are called on that thread only;
 * arm never fires before returning and returns 0 or -ENOMEM (the loop
 * cannot take another timer: then nothing was armed); after cancel, fire
 * neither runs nor will run. */
struct iof_fiber;
struct iof_thread_state;
typedef struct iof__ctx_kind {
  int (*timer_arm)(iof_execution_context *ctx, iof__timer *t);
  void (*timer_cancel)(iof_execution_context *ctx, iof__timer *t);
  /* The vtable of the context's own executor, whose object is the
   * context itself (io_context). */
  const iof_executor_vtbl *vtbl;
  /* iof_yield of self, a launched fiber running on th, the thread running
   * ctx (not stopping) innermost, whose executor is ctx's own (directly, or
   * as the inner executor of a strand it holds): queues next, or self when
   * next is NULL, on ctx's run queue and suspends self (which, when next
   * is given, waits elsewhere: in its strand's queue). 0 once resumed.
   * NULL: the generic hop is used. */
  int (*yield)(iof_execution_context *ctx, struct iof_thread_state *th,
               struct iof_fiber *self, struct iof_fiber *next);
} iof__ctx_kind;

/* Arms t: fire(arg) runs once at or after deadline_ns, on the loop of ex's
 * context if that context has one and the calling thread runs it, else on
 * the timer service (ex may be empty: a plain thread). A deadline already
 * passed fires soon, never inside this call, in order of deadline with
 * the other due timers. 0 or -ENOMEM/-EAGAIN (the loop or the service
 * could not grow, or the service could not start; fire never runs). */
IOF_HIDDEN int iof__timer_arm(iof__timer *t, iof_executor_ref ex,
                              int64_t deadline_ns, void (*fire)(void *),
                              void *arg);

/* Disarms t, fired or not: when it returns, fire is not running and never
 * will, and t is no longer referenced. A loop timer is cancelled on the
 * thread that armed it (the owner of a wait resumes there); a service
 * timer from any thread. Never from inside fire. */
IOF_HIDDEN void iof__timer_cancel(iof__timer *t);

/* Whether the timer service's thread is running (tests: it stops when
 * idle). */
IOF_HIDDEN bool iof__timer_service_running(void);

#endif
