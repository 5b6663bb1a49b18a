/* Internal pieces shared by sched/ and io/. Not installed. */
#ifndef IOF_SCHED_INTERNAL_H
#define IOF_SCHED_INTERNAL_H

#include <iofiber/env.h>
#include <iofiber/launch.h>
#include <iofiber/strand.h>

#include "fiber/fiber_internal.h"

#include <sched.h>
#include <stdatomic.h>

/* The lock of short list operations (a strand's queue, a shutdown
 * registry, the debug registry): a few instructions where a mutex costs
 * 40-50. Past 64 tries the holder is likely preempted, or walking a whole
 * list: yield to it. */
IOF_HIDDEN void iof__spin_lock_wait(atomic_flag *l);
static inline void iof__spin_lock(atomic_flag *l) {
  /* The wait is out of line: callers keep no registers for it. */
  if (__builtin_expect(
          atomic_flag_test_and_set_explicit(l, memory_order_acquire), 0))
    iof__spin_lock_wait(l);
}

static inline void iof__spin_unlock(atomic_flag *l) {
  atomic_flag_clear_explicit(l, memory_order_release);
}

/* The launch record, kept in the fiber's control block: the chain's env
 * is stable for its whole life. */
typedef struct iof_chain {
  iof_env env;
  iof_fn fn;
  void *arg;
  void (*on_done)(void *user, int status);
  void *user;
  int status; /* fn's status, or -ECANCELED if it never ran */
  /* Internal (when_all/when_any): runs after the frame is freed, before
   * the work count drops, with user and status. */
  void (*on_freed)(void *user, int status);
  /* Internal (sync waits): the shutdown registry of env.executor's
   * context, cached for the chain's life (the context outlives it). */
  const void *sync_ctx;
  void *sync_svc;
  /* Debug registry (sched/debug.c): the list of live chains, and the await
   * in progress (set around each suspension, read by iof_fiber_walk). */
  struct iof_chain *dbg_prev, *dbg_next;
  struct iof__debug_shard *dbg_shard; /* the list it is on */
  iof_fiber *fiber;
  unsigned long dbg_id;
  const void *wait_vt;
  void *wait_aw;
} iof_chain;

/* iof_stop_callback_register for the runtime's own fresh records: skips
 * the public call's double-registration check (which reads the record's
 * previous contents). */
IOF_HIDDEN int iof__stop_callback_register(iof_stop_callback *cb,
                                           iof_stop_token tok,
                                           void (*fn)(void *arg), void *arg);

/* Adds a new chain to the registry of live fibers / removes it (before its
 * frame is freed). One short lock each; nothing on switches. */
/* pthread_create for the runtime's own threads: they start with every
 * signal blocked but those a thread raises on itself (faults, SIGPIPE).
 * 0 or pthread_create's error number. */
IOF_HIDDEN int iof__thread_create_quiet(pthread_t *t, void *(*fn)(void *),
                                        void *arg);

IOF_HIDDEN void iof__debug_register(iof_chain *c);
IOF_HIDDEN void iof__debug_unregister(iof_chain *c);
/* True on a thread inside iof_fiber_walk's callback, which holds the
 * registry's spinlock: launching or cancelling there would spin forever,
 * and so would a fiber that ends while the callback waits or suspends.
 * Initial-exec: iof_yield reads it on its fast path. */
IOF_HIDDEN extern _Thread_local bool iof__debug_walking
    __attribute__((tls_model("initial-exec")));

/* Names a vtable (an executor's or an awaitable's) for iof_fiber_walk.
 * `describe`, if given, refines the label from the awaitable itself and
 * may set *obj to the object it waits on. Called from constructors. */
typedef const char *(*iof__debug_describe_fn)(const void *aw, const void **obj);
IOF_HIDDEN void iof__debug_label(const void *vt, const char *label,
                                 iof__debug_describe_fn describe);

/* iof_run_async plus an on_freed callback (see iof_chain): a parent that
 * waits for children learns of their end only once their frames are
 * freed. */
IOF_HIDDEN int iof__run_async_ex(iof_executor_ref ex,
                                 const iof_launch_opts *opts, iof_fn fn,
                                 void *arg,
                                 void (*on_freed)(void *user, int status));

/* iof_await without the shutdown refusal: for waits that must complete
 * even while the context shuts down (a parent awaiting its children, a
 * condition wait re-acquiring its mutex, the runtime's own hops back to a
 * fiber's executor), whose wake is guaranteed. */
IOF_HIDDEN int iof__await_always(void *aw, const iof_awaitable_vtbl *vt);

/* iof_await (refuse_on_shutdown) or iof__await_always for a caller that
 * already holds `self`, the calling launched fiber, and a valid aw/vt:
 * spares the wait path a second look-up of the current fiber. */
IOF_HIDDEN int iof__await_as(iof_fiber *self, void *aw,
                             const iof_awaitable_vtbl *vt,
                             bool refuse_on_shutdown);

/* A run loop marks the thread as running a context while it resumes
 * fibers, so dispatch can tell when inline is safe (a per-thread marker,
 * not a per-fiber flag). Markers nest. */
typedef struct iof_run_mark {
  const iof_execution_context *ctx;
  struct iof_run_mark *prev;
} iof_run_mark;

IOF_HIDDEN void iof__run_mark_push(iof_run_mark *m,
                                   const iof_execution_context *ctx);
IOF_HIDDEN void iof__run_mark_pop(iof_run_mark *m);
IOF_HIDDEN bool iof__thread_runs(const iof_execution_context *ctx);

/* Whether ctx is the context th runs innermost: the one-load test of the
 * io fast path (iof__thread_runs also finds outer ones). */
static inline bool iof__thread_runs_top(const iof_thread_state *th,
                                        const iof_execution_context *ctx) {
  const iof_run_mark *m = th->marks;
  return m && m->ctx == ctx;
}

/* What every resume of a launched fiber makes current: the env's frame
 * allocator, or the fiber's own (effective) one when the env has none. */
IOF_HIDDEN extern __thread iof_frame_allocator *iof__tls_alloc
    __attribute__((tls_model("initial-exec")));

static inline void iof__refresh_allocator(const iof_fiber *self) {
  const iof_env *env = self->env;
  iof_frame_allocator *a =
      env->frame_allocator ? env->frame_allocator : self->alloc;
#ifdef IOF__HAVE_TLS_ADDR
  *IOF__TLS_ADDR(iof__tls_alloc) = a;
#else
  iof_set_current_frame_allocator(a);
#endif
}

/* Shutdown rule of the built-in executors: once their context is
 * stopping, post and dispatch refuse a fiber that never ran (a launch)
 * with -ESHUTDOWN, and still take started fibers, so that completions and
 * wakes during the drain let every started fiber run to its end. */
IOF_HIDDEN bool iof__refuse_after_shutdown(const iof_execution_context *ctx,
                                           const iof_fiber *h);

/* Drain support for context destroy: a never-started chain is freed
 * without running fn; its on_done gets -ECANCELED. Returns false for a raw
 * fiber (not launched by iof_run_async), which the caller must leave be. */
IOF_HIDDEN bool iof__chain_cancel(iof_fiber *f);

/* Ends the running fiber self where it is, as if its function returned
 * status: a chain's on_done runs, then iof__fiber_exit. */
IOF_HIDDEN __attribute__((noreturn)) void iof__chain_exit(iof_fiber *self,
                                                          int status);

/* Releases the strand held by f (the switch-out hook of strands). */
IOF_HIDDEN void iof__strand_release(iof_fiber *f);

/* iof_yield of a fiber that holds the strand it runs on, from the switch
 * hook (h suspended): h goes behind the fibers waiting for the strand (or
 * keeps it) in one locked step instead of a release and a new post.
 * Returns NULL, or h to resume at once with *err set when the inner
 * executor refused it. */
IOF_HIDDEN iof_fiber *iof__strand_yield(iof_fiber *h, int *err);

/* CLOCK_MONOTONIC in nanoseconds (deadlines of sched/ and io/). */
IOF_HIDDEN int64_t iof__now_ns(void);

/* a + b and a - b saturated to int64_t: every deadline and timeout
 * computation goes through these, so INT64_MAX stays "never" and INT64_MIN
 * "long past" instead of wrapping around. */
static inline int64_t iof__sat_add(int64_t a, int64_t b) {
  int64_t r;
  if (__builtin_add_overflow(a, b, &r)) return b > 0 ? INT64_MAX : INT64_MIN;
  return r;
}

static inline int64_t iof__sat_sub(int64_t a, int64_t b) {
  int64_t r;
  if (__builtin_sub_overflow(a, b, &r)) return b < 0 ? INT64_MAX : INT64_MIN;
  return r;
}

/* The fiber's context is shutting down (await refuses to start). */
IOF_HIDDEN bool iof__env_stopping(const iof_env *env);

/* Reports on stderr a fiber that would not finish during a destroy. */
IOF_HIDDEN void iof__report_stuck(const char *what, size_t n);

/* Spinning before parking. A thread that just ran fibers and finds its
 * queue empty watches it for a while (IOF_SPIN_NS, longer when the policy
 * below learned it pays) before it sleeps (in a futex or epoll_wait): a
 * fiber hopping back and forth between threads then finds the other side
 * awake, and the poster skips the wake-up syscall. Only after work: an
 * idle thread never spins, so idle stays idle (at most one spin of at
 * most IOF_SPIN_MAX_NS per thread after the last work). */
#define IOF_SPIN_NS 20000
#define IOF_SPIN_MAX_NS 250000
/* Pause-only spinning for this long, then sched_yield between checks: on a
 * busy machine the thread we wait for may be waiting for this CPU. */
#define IOF_SPIN_PAUSE_NS 5000

static inline void iof__cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  __asm__ __volatile__("yield");
#endif
}

/* One step of a spin that started at `start`: pause or yield. False once
 * `len` ns have passed. Every 16th step reads the clock and stores the
 * time spun so far in *spun. */
IOF_HIDDEN bool iof__spin_step(int64_t start, int i, int64_t len,
                               int64_t *spun);

/* Adaptive spinning, as glibc's adaptive mutexes do, with an adaptive
 * length. A spin that found work adds to a credit; without credit the
 * thread parks at once and probes with a spin every 32nd time. A spin
 * that found nothing is judged by what follows it:
 * - it overran (this thread lost its CPU while spinning, to the thread it
 *   waits for or to other work): the CPUs are taken and spinning only adds
 *   its length to every hop. The credit halves, the length goes back to
 *   IOF_SPIN_NS;
 * - the work came later than a spin of IOF_SPIN_MAX_NS would have seen
 *   (the work stopped, or comes slowly): the same;
 * - the work came sooner: the other side was asleep itself and answered
 *   only after its own wake-up, which on some hosts (an idle vCPU) takes
 *   40-150 us, longer than the spin. If the budget below can pay for it,
 *   the next spins last as long as that one would have needed, with half
 *   again as margin, and the credit is at least 1 (else as above).
 *   Otherwise two threads that hand work back and forth each miss the
 *   other's answer, park, and wake each other for ever (a hop or a batch
 *   of launches then costs two wake-ups, ~100x the spinning figure); once
 *   one side stays awake long enough, the other's probe finds it awake,
 *   its spins succeed, and both stay awake with short spins.
 * What spins last past IOF_SPIN_NS is paid from a budget that refills at
 * 1/IOF_SPIN_SHARE of the time that passes (up to IOF_SPIN_BUDGET_NS).
 * Without it, work arriving 100-250 us apart (a trickle of hops to a
 * pool) kept a thread spinning all the time: a whole CPU to save
 * wake-ups (1.8 s of CPU in 2 s at 5,000 posts a second, against 0.45 s
 * with plain 20 us spins; 0.6 s with the budget).
 * Used by one thread at a time (the pool's workers under its lock; the io
 * loop; a plain thread's own); all-zero is a valid start. */
typedef struct iof_spin_policy {
  int credit;
  unsigned skipped;
  int64_t len;       /* the length it wants; 0: IOF_SPIN_NS */
  int64_t budget;    /* ns of spinning past IOF_SPIN_NS it may still do */
  int64_t filled_at; /* when the budget was last refilled */
} iof_spin_policy;

#define IOF_SPIN_CREDIT_MAX 16
#define IOF_SPIN_SHARE 16
#define IOF_SPIN_BUDGET_NS 1000000

static inline bool iof__spin_allowed(iof_spin_policy *sp) {
  if (sp->credit > 0) return true;
  if (++sp->skipped < 32) return false;
  sp->skipped = 0;
  return true;
}

static inline int64_t iof__spin_len(const iof_spin_policy *sp) {
  return sp->len ? sp->len : IOF_SPIN_NS;
}

static inline void iof__spin_refill(iof_spin_policy *sp, int64_t now) {
  int64_t b = sp->budget + (now - sp->filled_at) / IOF_SPIN_SHARE;
  sp->budget = b < IOF_SPIN_BUDGET_NS ? b : IOF_SPIN_BUDGET_NS;
  sp->filled_at = now;
}

/* How long a spin starting at `now` may last: the wanted length if the
 * budget pays for what passes IOF_SPIN_NS, else IOF_SPIN_NS. */
static inline int64_t iof__spin_begin(iof_spin_policy *sp, int64_t now) {
  int64_t extra = iof__spin_len(sp) - IOF_SPIN_NS;
  if (extra <= 0) return IOF_SPIN_NS;
  iof__spin_refill(sp, now);
  return extra <= sp->budget ? IOF_SPIN_NS + extra : IOF_SPIN_NS;
}

static inline void iof__spin_lost(iof_spin_policy *sp) {
  sp->credit /= 2;
  sp->len = 0;
}

/* After a spin that started at `start` and had spun `spun` ns at its last
 * look at the clock (iof__spin_step): found work or not. Returns what to
 * hand to iof__spin_woke once the thread wakes from the sleep that
 * follows (0: nothing to judge). */
static inline int64_t iof__spin_result(iof_spin_policy *sp, bool found,
                                       int64_t start, int64_t spun) {
  if (spun > IOF_SPIN_NS) sp->budget -= spun - IOF_SPIN_NS;
  if (found) {
    sp->credit += sp->credit < IOF_SPIN_CREDIT_MAX;
    return 0;
  }
  if (iof__now_ns() - start <= iof__spin_len(sp) + IOF_SPIN_NS) return start;
  iof__spin_lost(sp);
  return 0;
}

/* The thread woke from the sleep after a spin that started at `missed`
 * and found nothing (iof__spin_result's answer; 0: nothing to judge). */
static inline void iof__spin_woke(iof_spin_policy *sp, int64_t missed) {
  if (__builtin_expect(!missed, 1)) return;
  int64_t now = iof__now_ns();
  int64_t want = now - missed;
  want += want / 2;
  if (want < iof__spin_len(sp)) want = iof__spin_len(sp);
  iof__spin_refill(sp, now);
  if (want > IOF_SPIN_MAX_NS + IOF_SPIN_MAX_NS / 2 ||
      want - IOF_SPIN_NS > sp->budget) {
    iof__spin_lost(sp);
    return;
  }
  sp->credit += !sp->credit;
  sp->len = want < IOF_SPIN_MAX_NS ? want : IOF_SPIN_MAX_NS;
}

/* Intrusive FIFO of fibers through f->next. */
typedef struct iof_fiber_queue {
  iof_fiber *head, *tail;
} iof_fiber_queue;

static inline void iof__q_push(iof_fiber_queue *q, iof_fiber *f) {
  f->next = NULL;
  f->queued = true;
  if (q->tail)
    q->tail->next = f;
  else
    q->head = f;
  q->tail = f;
}

static inline iof_fiber *iof__q_pop(iof_fiber_queue *q) {
  iof_fiber *f = q->head;
  if (f) {
    q->head = f->next;
    if (!q->head) q->tail = NULL;
    f->next = NULL;
    f->queued = false;
  }
  return f;
}

static inline void iof__q_append(iof_fiber_queue *q, iof_fiber_queue *from) {
  if (!from->head) return;
  if (q->tail)
    q->tail->next = from->head;
  else
    q->head = from->head;
  q->tail = from->tail;
  from->head = from->tail = NULL;
}

/* A strand: a lock and a FIFO in front of any executor (sched/strand.c).
 * Visible here so that iof_yield's fast path reads it inline. */
struct iof_strand {
  iof_executor_ref inner;
  atomic_flag lock; /* held for a few queue operations only: a spin lock
                       costs a few instructions where a mutex costs ~40,
                       on every yield of a shared strand */
  iof_fiber_queue q;
  bool busy;
  /* q is not empty: written under the lock, read without it by a holder's
   * yield (iof__strand_pass), for which a post racing the read is a post
   * that came just after it. */
  atomic_bool waiting;
  /* Work counted through the strand (its chains, guards): a chain that is
   * suspended holds no lock yet will come back through the strand. */
  atomic_long work;
};

IOF_HIDDEN extern const iof_executor_vtbl iof__strand_vtbl;

/* True if ex is the strand h holds. */
static inline bool iof__is_strand_of(iof_executor_ref ex, const iof_fiber *h) {
  return h->strand && ex.vt == &iof__strand_vtbl && ex.ex == h->strand;
}

/* The inner executor of ex if ex is the strand h holds; else an empty
 * ref. */
static inline iof_executor_ref iof__strand_inner_of(iof_executor_ref ex,
                                                    const iof_fiber *h) {
  if (!iof__is_strand_of(ex, h)) return (iof_executor_ref){NULL, NULL};
  return ((const iof_strand *)h->strand)->inner;
}

/* Queues h, which holds its strand, behind the fibers waiting for it and
 * returns the first of them, which now holds the strand (NULL: nobody
 * waits any more, h keeps it). */
IOF_HIDDEN iof_fiber *iof__strand_pass_slow(iof_fiber *h);

/* iof_yield of h, which holds its strand, on the thread that runs the
 * strand's inner executor (a context's own, which only this thread runs):
 * NULL when no fiber waits for the strand (h keeps it; one atomic load);
 * else h is queued behind the waiters and the first of them, returned,
 * now holds the strand and must be queued on the inner executor. */
static inline iof_fiber *iof__strand_pass(iof_fiber *h) {
  if (!atomic_load_explicit(&((iof_strand *)h->strand)->waiting,
                            memory_order_acquire))
    return NULL;
  return iof__strand_pass_slow(h);
}

/* Runs one ready fiber popped from a drain queue during destroy: resumes
 * started ones, cancels never-started chains. */
IOF_HIDDEN void iof__drain_one(iof_fiber *f);

#endif
