/* The timer hook: how sched/ arms deadlines without depending on io/.
 * Not installed.
 *
 * sched/ (timed waits of the sync primitives) calls iof__timer_arm and
 * iof__timer_cancel; io/ installs the implementation once with
 * iof__timer_provider_set. The default is a process-wide timer thread
 * (timer_thread.c); with NULL installed, iof__timer_arm returns -ENOTSUP
 * (plain threads use pthread_cond_timedwait and never come here).
 *
 * What a provider must guarantee:
 *  - arm(t, env, deadline_ns) schedules ONE call of t->fire(t->arg) at or
 *    after deadline_ns (CLOCK_MONOTONIC, nanoseconds), from any thread of
 *    the provider's choosing (typically an io_context's loop thread). It
 *    may be called from any thread, inside a fiber or on a resumer's
 *    stack; it never blocks for long and never suspends. `env` is the
 *    waiter's env (env->executor says where the waiter runs); the provider
 *    keeps no pointer to env after arm returns. fire may run before arm
 *    returns (a past deadline). Returns 0, or -errno (then fire never
 *    runs).
 *  - cancel(t) may be called from any thread (a fiber included, never
 *    from inside fire), after fire ran or not; when it returns, fire is
 *    not running and will never run, and the provider no longer touches
 *    *t (the storage lives on the waiting fiber's stack and is reused at
 *    once).
 *  - fire must be short: sched's fire only does an atomic claim and an
 *    executor post; it never resumes a fiber inline.
 *  - No allocation is required: `impl` gives the provider IOF__TIMER_IMPL
 *    bytes of suitably aligned storage inside the caller's record. */
#ifndef IOF_SCHED_TIMER_HOOK_H
#define IOF_SCHED_TIMER_HOOK_H

#include <stdint.h>

#include <iofiber/env.h>

#include "sched/sched_internal.h" /* iof__now_ns */

#define IOF__TIMER_IMPL 128

typedef struct iof__timer {
  void (*fire)(void *arg); /* set by iof__timer_arm */
  void *arg;
  _Alignas(16) unsigned char impl[IOF__TIMER_IMPL]; /* the provider's */
} iof__timer;

typedef struct iof__timer_provider {
  int (*arm)(iof__timer *t, const iof_env *env, int64_t deadline_ns);
  void (*cancel)(iof__timer *t);
} iof__timer_provider;

/* Installs (or, with NULL, removes) the provider. Call it before any timed
 * wait can run; the object must stay valid until replaced. */
IOF_HIDDEN void iof__timer_provider_set(const iof__timer_provider *p);

/* The installed provider or NULL. */
IOF_HIDDEN const iof__timer_provider *iof__timer_provider_get(void);

/* Sets t->fire/arg and arms through the provider. 0; -ENOTSUP without a
 * provider; the provider's error. */
IOF_HIDDEN int iof__timer_arm(iof__timer *t, const iof_env *env,
                              int64_t deadline_ns, void (*fire)(void *),
                              void *arg);

/* Disarms a timer that iof__timer_arm armed (see cancel above). */
IOF_HIDDEN void iof__timer_cancel(iof__timer *t);

#endif
