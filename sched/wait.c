/* The one wait record (see sync_internal.h): the claim protocol, blocking
 * a fiber (iof_await) or a thread (a parker), the stop callback and timer
 * of a pending wait, and the per-context registry that cancels pending
 * waits at shutdown. */
#include "sched/sync_internal.h"

#include <errno.h>
#include <stdlib.h>
#include <time.h>

/* ---- small helpers ---------------------------------------------------- */

int64_t iof__now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

int64_t iof_deadline_after(int64_t ns) {
  return iof__sat_add(iof__now_ns(), ns < 0 ? 0 : ns);
}

iof_fiber *iof__sync_fiber(void) {
  iof_thread_state *th = iof__thread();
  iof_fiber *f = th->current;
  /* The thread's root record has no env; neither has a raw fiber. */
  return f != &th->root && f->env ? f : NULL;
}

static __thread uint32_t tls_rand __attribute__((tls_model("initial-exec")));

__attribute__((noinline)) uint32_t iof__sync_random(void) {
  uint32_t x = tls_rand;
  if (!x) x = (uint32_t)(uintptr_t)&tls_rand ^ (uint32_t)iof__now_ns() ^ 1u;
  x ^= x << 13;
  x ^= x >> 17;
  x ^= x << 5;
  tls_rand = x;
  return x;
}

/* ---- claims and wakes ------------------------------------------------- */

bool iof__wait_publish(iof__wait *w) {
  int expect = IOF__W_INIT;
  if (atomic_compare_exchange_strong_explicit(
          &w->state, &expect, IOF__W_WAITING, memory_order_acq_rel,
          memory_order_acquire))
    return true;
  w->result = expect == IOF__W_EARLY_TIMEDOUT ? -ETIMEDOUT : -ECANCELED;
  return false;
}

void iof__wait_wake(iof__wait *w) {
  iof_fiber *f = w->fiber;
  if (f) {
    /* The fiber may run (and its stack frame with w go) once posted. */
    iof_executor_ref ex = w->ex;
    (void)ex.vt->post(ex.ex, f);
    return;
  }
  iof__parker *p = w->parker;
  pthread_mutex_lock(&p->m);
  atomic_store_explicit(&p->flag, 1, memory_order_release);
  pthread_cond_signal(&p->c);
  pthread_mutex_unlock(&p->m);
}

bool iof__wait_abort(iof__wait *w, int result) {
  int s = atomic_load_explicit(&w->state, memory_order_acquire);
  for (;;) {
    if (s == IOF__W_INIT) {
      int early =
          result == -ETIMEDOUT ? IOF__W_EARLY_TIMEDOUT : IOF__W_EARLY_CANCELED;
      if (atomic_compare_exchange_weak_explicit(
              &w->state, &s, early, memory_order_acq_rel, memory_order_acquire))
        return true; /* publication will fail; the fiber resumes at once */
    } else if (s == IOF__W_WAITING) {
      if (atomic_compare_exchange_weak_explicit(&w->state, &s, IOF__W_DONE,
                                                memory_order_acq_rel,
                                                memory_order_acquire)) {
        w->result = result;
        w->index = -1;
        w->by_waker = false;
        iof__wait_wake(w);
        return true;
      }
    } else {
      return false; /* claimed already: the winner wakes it */
    }
  }
}

static void on_stop(void *arg) {
  (void)iof__wait_abort(arg, -ECANCELED);
}

static void on_timer(void *arg) {
  (void)iof__wait_abort(arg, -ETIMEDOUT);
}

/* ---- the shutdown registry -------------------------------------------
 * One service per execution context holds the pending cancellable fiber
 * waits of its fibers; its shutdown completes them with -ECANCELED, so
 * that a fiber blocked on a primitive unwinds during the context's drain
 * (every started fiber runs to its end). */

typedef struct sync_service {
  iof_service base;
  atomic_flag lock; /* held for a list insert or removal, or the shutdown
                       walk: a spin lock costs a few instructions where a
                       mutex costs ~50, on every wait */
  bool shut;
  iof__wait *head;
} sync_service;

static void svc_lock(sync_service *s) {
  iof__spin_lock(&s->lock);
}

static void svc_unlock(sync_service *s) {
  iof__spin_unlock(&s->lock);
}

static iof_service *svc_create(iof_execution_context *ctx) {
  (void)ctx;
  sync_service *s = calloc(1, sizeof *s);
  if (!s) return NULL;
  atomic_flag_clear(&s->lock);
  return &s->base;
}

static void svc_shutdown(iof_service *base) {
  sync_service *s = (sync_service *)base;
  svc_lock(s);
  s->shut = true;
  /* Aborting only posts; each fiber unlinks itself once it runs, which
   * needs this lock: it cannot happen before we let go of it. */
  for (iof__wait *w = s->head; w; w = w->reg_next)
    (void)iof__wait_abort(w, -ECANCELED);
  svc_unlock(s);
}

static void svc_destroy(iof_service *base) {
  sync_service *s = (sync_service *)base;
  free(s);
}

static const iof_service_key sync_service_key = {"iofiber.sync", svc_create,
                                                 svc_shutdown, svc_destroy};

/* The registry of ctx (NULL: none, a user executor without a context;
 * errno ESHUTDOWN when refused). For the context of the chain's own env
 * the pointer is cached in the chain: the context outlives its chains. */
static sync_service *svc_for(iof_fiber *self, const iof_env *env,
                             iof_execution_context *ctx) {
  if (!ctx) return NULL;
  iof_chain *c = self->sched;
  if (c->sync_ctx == ctx) return c->sync_svc;
  sync_service *s = (sync_service *)iof_use_service(ctx, &sync_service_key);
  if (s && env == &c->env && iof_executor_context(env->executor) == ctx) {
    c->sync_ctx = ctx;
    c->sync_svc = s;
  }
  return s;
}

/* Registers w with ctx. False: the context is shutting down (or the
 * service could not be made): the wait must fail with -ECANCELED. */
static bool reg_add(iof__wait *w, iof_fiber *self, const iof_env *env,
                    iof_execution_context *ctx) {
  w->reg_svc = NULL;
  errno = 0;
  sync_service *s = svc_for(self, env, ctx);
  if (!s) return errno != ESHUTDOWN; /* ENOMEM: wait, unregistered */
  svc_lock(s);
  if (s->shut) {
    svc_unlock(s);
    return false;
  }
  w->reg_prev = NULL;
  w->reg_next = s->head;
  if (s->head) s->head->reg_prev = w;
  s->head = w;
  w->reg_svc = s;
  svc_unlock(s);
  return true;
}

static void reg_remove(iof__wait *w) {
  sync_service *s = w->reg_svc;
  if (!s) return;
  svc_lock(s);
  if (w->reg_prev)
    w->reg_prev->reg_next = w->reg_next;
  else
    s->head = w->reg_next;
  if (w->reg_next) w->reg_next->reg_prev = w->reg_prev;
  svc_unlock(s);
  w->reg_svc = NULL;
}

/* ---- blocking a fiber ------------------------------------------------- */

typedef struct wait_aw {
  void *op;
  iof__wait_begin begin;
  iof__wait *w;
  bool ran;
} wait_aw;

/* On the resumer's stack, h suspended: let the primitive complete at once
 * (resume h now) or publish h. */
static iof_fiber *wait_suspend(void *self, iof_fiber *h, const iof_env *env) {
  (void)env;
  wait_aw *a = self;
  a->ran = true;
  /* Completed at once: resume h now (await_hook sends it back through
   * its executor if it left a strand). */
  return a->begin(a->op, a->w) ? NULL : h;
}

static const iof_awaitable_vtbl wait_vtbl = {NULL, wait_suspend, NULL};

/* io waits (iof__wait_block_on, IOF__WAIT_IO) show as such in a
 * debugger, which reads only the awaitable's label, not describe_wait. */
static const iof_awaitable_vtbl io_wait_vtbl = {NULL, wait_suspend, NULL};

/* What iof_fiber_walk says of a wait: the describer registered for its
 * begin callback, else the awaitable's label, on the primitive's op. */
#define MAX_KINDS 8

static struct wait_kind {
  iof__wait_begin begin;
  iof__debug_describe_fn describe;
} kinds[MAX_KINDS];
static atomic_int nkinds;

void iof__debug_wait_kind(iof__wait_begin begin,
                          iof__debug_describe_fn describe) {
  int i = atomic_fetch_add(&nkinds, 1);
  if (i >= MAX_KINDS) return; /* shown under its awaitable's label */
  kinds[i] = (struct wait_kind){begin, describe};
}

static const char *describe_wait(const void *aw, const void **obj) {
  const wait_aw *a = aw;
  *obj = a->op;
  int n = atomic_load(&nkinds);
  if (n > MAX_KINDS) n = MAX_KINDS;
  for (int i = 0; i < n; i++)
    if (kinds[i].begin == a->begin) return kinds[i].describe(a->op, obj);
  return NULL;
}

__attribute__((constructor)) static void name_wait(void) {
  iof__debug_label(&wait_vtbl, "sync primitive (mutex, cond, sem, event, chan)",
                   describe_wait);
  iof__debug_label(&io_wait_vtbl, "io", describe_wait);
}

static int block_fiber(iof_fiber *self, iof_executor_ref where, void *op,
                       iof__wait_begin begin, iof__wait *w, int64_t deadline_ns,
                       int flags) {
  const iof_env *env = self->env;
  bool cancellable = flags & IOF__WAIT_CANCELLABLE;
  if (cancellable && iof__stop_requested(env->stop_token)) return -ECANCELED;
  bool io = where.vt != NULL || (flags & IOF__WAIT_IO);
  if (!where.vt) where = env->executor;
  w->fiber = self;
  w->ex = where;
  w->timer_armed = false;
  w->reg_svc = NULL;
  if (deadline_ns >= 0 && !(flags & IOF__WAIT_IN_ORDER) &&
      iof__now_ns() >= deadline_ns)
    return -ETIMEDOUT;
  if (cancellable && !reg_add(w, self, env, iof_executor_context(where)))
    return -ECANCELED;
  if (deadline_ns >= 0) {
    int r = iof__timer_arm(&w->timer, where, deadline_ns, on_timer, w);
    if (r < 0) {
      reg_remove(w);
      return r;
    }
    w->timer_armed = true;
  }
  bool stop_reg = false;
  if (cancellable && env->stop_token.state) {
    /* Before publication: a request from now on aborts the wait (early or
     * pending); one that came already leaves the state EARLY_CANCELED and
     * the suspend below resumes at once. */
    iof__stop_callback_register(&w->stop_cb, env->stop_token, on_stop, w);
    stop_reg = true;
  }
  wait_aw a = {op, begin, w, false};
  const iof_awaitable_vtbl *vt = io ? &io_wait_vtbl : &wait_vtbl;
  self->claim = &w->state;
  int r = iof__await_as(self, &a, vt, cancellable);
  self->claim = NULL;
  /* Nothing can claim w any more once these return: the stop callback and
   * the timer are waited for if running elsewhere (a loop timer fires on
   * this very thread, where the fiber resumed). */
  if (stop_reg) iof_stop_callback_unregister(&w->stop_cb);
  if (w->timer_armed) iof__timer_cancel(&w->timer);
  reg_remove(w);
  if (!a.ran) return r < 0 ? r : -ECANCELED; /* await refused */
  return w->result;
}

/* ---- blocking a thread ------------------------------------------------ */

/* A plain thread waiting for fibers (a launch's result, a fiber's
 * iof_sem_post) watches its flag for a while before it sleeps,
 * as the pool's threads do, when its recent waits ended that soon. */
static __thread iof_spin_policy thread_spin
    __attribute__((tls_model("initial-exec")));

int64_t iof__thread_spin(atomic_int *flag) {
  if (!iof__spin_allowed(&thread_spin)) return 0;
  int64_t start = iof__now_ns(), spun = 0;
  int64_t len = iof__spin_begin(&thread_spin, start);
  bool set = false;
  for (int i = 1; !(set = atomic_load_explicit(flag, memory_order_acquire)) &&
                  iof__spin_step(start, i, len, &spun);
       i++) {
  }
  return iof__spin_result(&thread_spin, set, start, spun);
}

void iof__thread_spin_woke(int64_t missed) {
  iof__spin_woke(&thread_spin, missed);
}

static int block_thread(void *op, iof__wait_begin begin, iof__wait *w,
                        int64_t deadline_ns) {
  /* In an iof_fiber_walk callback the registry's locks are held: what the
   * wait waits for may need them (a fiber that ends). Refused before
   * begin, as a passed deadline is; a fiber's wait is refused by
   * iof__await_as. */
  if (iof__debug_walking) return -EDEADLK;
  if (deadline_ns >= 0 && iof__now_ns() >= deadline_ns) return -ETIMEDOUT;
  iof__parker p;
  pthread_mutex_init(&p.m, NULL);
  pthread_cond_init(&p.c, NULL);
  atomic_init(&p.flag, 0);
  w->fiber = NULL;
  w->parker = &p;
  w->timer_armed = false;
  int r = 0;
  if (deadline_ns >= 0) {
    /* The timer service, as for fibers away from an event loop: one
     * timer mechanism, and the thread just parks. */
    r = iof__timer_arm(&w->timer, (iof_executor_ref){0}, deadline_ns, on_timer,
                       w);
    w->timer_armed = r == 0;
  }
  if (r == 0 && begin(op, w)) {
    int64_t missed = iof__thread_spin(&p.flag);
    /* Taken even when the spin saw the flag: the waker may still be in
     * its critical section, and p is about to go. */
    pthread_mutex_lock(&p.m);
    while (!atomic_load_explicit(&p.flag, memory_order_relaxed))
      pthread_cond_wait(&p.c, &p.m);
    pthread_mutex_unlock(&p.m);
    iof__thread_spin_woke(missed);
  }
  /* Waits for a fire in progress: it may still be signalling p. */
  if (w->timer_armed) iof__timer_cancel(&w->timer);
  pthread_cond_destroy(&p.c);
  pthread_mutex_destroy(&p.m);
  return r < 0 ? r : w->result;
}

static inline void wait_init(iof__wait *w) {
  atomic_init(&w->state, IOF__W_INIT);
  w->result = 0;
  w->index = -1;
  w->by_waker = false;
  w->parker = NULL;
  w->fiber = NULL;
}

int iof__wait_block(void *op, iof__wait_begin begin, iof__wait *w,
                    int64_t deadline_ns, int flags) {
  wait_init(w);
  iof_fiber *self = iof__sync_fiber();
  if (self)
    return block_fiber(self, (iof_executor_ref){0}, op, begin, w, deadline_ns,
                       flags);
  return block_thread(op, begin, w, deadline_ns);
}

int iof__wait_block_on(iof_fiber *self, iof_executor_ref where, void *op,
                       iof__wait_begin begin, iof__wait *w, int64_t deadline_ns,
                       int flags) {
  wait_init(w);
  return block_fiber(self, where, op, begin, w, deadline_ns, flags);
}
