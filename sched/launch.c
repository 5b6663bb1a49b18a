/* Launch, await, executor hops and yield: the IoAwaitable protocol on
 * fibers. The env lives in the fiber's control block for the chain's life;
 * iof_run swaps in one on the caller's stack for the length of a call. */
#include "sched/sched_internal.h"
#include "sched/timer_internal.h"

#include <errno.h>

__thread iof_frame_allocator *iof__tls_alloc
    __attribute__((tls_model("initial-exec")));
#define tls_alloc iof__tls_alloc

/* noinline accessors: see fiber_internal.h on TLS across switches. */
__attribute__((noinline)) iof_frame_allocator *
iof_current_frame_allocator(void) {
  return tls_alloc;
}

__attribute__((noinline)) void
iof_set_current_frame_allocator(iof_frame_allocator *a) {
  tls_alloc = a;
}

static iof_fiber *launched_self(void) {
  iof_fiber *f = iof_fiber_current();
  return f && f->env ? f : NULL;
}

const iof_env *iof_env_current(void) {
  /* Peeks: a thread the runtime never saw is outside fibers, and this must
   * stay callable from libiofiber-hook before constructors, in signal
   * handlers and in foreign threads (no lazy thread setup there). */
  iof_thread_state *th = iof__thread_peek();
  if (!th || th->current == &th->root) return NULL;
  return th->current->env;
}

bool iof__env_stopping(const iof_env *env) {
  return iof_execution_context_stopping(iof_executor_context(env->executor));
}

/* ---- chains ----------------------------------------------------------- */

static int chain_main(void *p) {
  iof_chain *c = p;
  iof_fiber *self = iof_fiber_current();
  iof__refresh_allocator(self);
  int status = c->fn(c->arg);
  c->status = status;
  if (c->on_done) c->on_done(c->user, status);
  return status;
}

/* Runs on the resumer's stack once the chain's fiber has switched away for
 * the last time: free the frame first, then drop the work, so that when a
 * run loop sees no work no frame of its chains is live. */
static void chain_exit(iof_fiber *f) {
  iof_chain *c = f->sched;
  iof_executor_ref ex = c->env.executor;
  iof_stop_token tok = c->env.stop_token;
  void (*on_freed)(void *, int) = c->on_freed;
  void *user = c->user;
  int status = c->status;
  if (f->strand) iof__strand_release(f);
  iof__debug_unregister(c);
  iof__fiber_free(f);
  iof_stop_token_release(tok);
  if (on_freed) on_freed(user, status);
  iof_executor_on_work_finished(ex);
}

void iof__chain_exit(iof_fiber *self, int status) {
  if (self->on_exit == chain_exit) {
    iof_chain *c = self->sched;
    c->status = status;
    if (c->on_done) c->on_done(c->user, status);
  }
  iof__fiber_exit(status);
}

bool iof__chain_cancel(iof_fiber *f) {
  if (f->state != IOF_FS_CREATED || f->on_exit != chain_exit) return false;
  iof_chain *c = f->sched;
  c->status = -ECANCELED;
  if (c->on_done) c->on_done(c->user, -ECANCELED);
  chain_exit(f);
  return true;
}

int iof_launch_cancel(iof_fiber *f) {
  if (!f || f->on_exit != chain_exit) return -EINVAL;
  if (f->state != IOF_FS_CREATED || f->queued) return -EBUSY;
  if (iof__debug_walking) return -EDEADLK;
  return iof__chain_cancel(f) ? 0 : -EINVAL;
}

void iof__drain_one(iof_fiber *f) {
  if (f->state == IOF_FS_CREATED && iof__chain_cancel(f)) return;
  iof_fiber_resume(f);
}

int iof_run_async(iof_executor_ref ex, const iof_launch_opts *opts, iof_fn fn,
                  void *arg) {
  return iof__run_async_ex(ex, opts, fn, arg, NULL);
}

int iof__run_async_ex(iof_executor_ref ex, const iof_launch_opts *opts,
                      iof_fn fn, void *arg,
                      void (*on_freed)(void *user, int status)) {
  static const iof_launch_opts none;
  if (!opts) opts = &none;
  /* A user vtable without post (or dispatch) could never run the chain. */
  if (!ex.vt || !fn || !ex.vt->post || !ex.vt->dispatch) return -EINVAL;
  if (iof__debug_walking) return -EDEADLK;
  iof_execution_context *ctx = iof_executor_context(ex);
  if (iof_execution_context_stopping(ctx)) return -ESHUTDOWN;
  iof_frame_allocator *alloc = opts->frame_allocator
                                   ? opts->frame_allocator
                                   : iof_context_frame_allocator(ctx);
  size_t stack = opts->stack_size ? opts->stack_size : IOF_FIBER_STACK_DEFAULT;
  void *extra;
  iof_fiber *f = iof__fiber_create_ex(alloc, stack, chain_main, NULL,
                                      sizeof(iof_chain), &extra);
  if (!f) return errno == EINVAL ? -EINVAL : -ENOMEM;
  iof_chain *c = extra;
  c->env.executor = ex;
  c->env.stop_token = iof_stop_token_retain(opts->stop_token);
  c->env.frame_allocator = opts->frame_allocator;
  c->fn = fn;
  c->arg = arg;
  c->on_done = opts->on_done;
  c->user = opts->user;
  c->on_freed = on_freed;
  f->arg = c;
  f->sched = c;
  f->env = &c->env;
  f->on_exit = chain_exit;
  if (opts->name) iof_fiber_set_name(f, opts->name);
  c->fiber = f;
  iof__debug_register(c);
  iof_executor_on_work_started(ex);
  int r = ex.vt->post(ex.ex, f);
  if (r < 0) {
    iof__debug_unregister(c);
    iof__fiber_free(f);
    iof_stop_token_release(c->env.stop_token);
    iof_executor_on_work_finished(ex);
    return r;
  }
  return 0;
}

int iof_launch(iof_executor_ref ex, iof_fn fn, void *arg) {
  return iof_run_async(ex, NULL, fn, arg);
}

/* ---- await ------------------------------------------------------------ */

typedef struct await_call {
  void *aw;
  const iof_awaitable_vtbl *vt;
} await_call;

/* On the resumer's stack, h suspended: the strand h held is released here
 * (never earlier), then the awaitable may publish h. */
static iof_fiber *await_hook(iof_fiber *h, void *arg) {
  await_call *a = arg;
  void *aw = a->aw;
  const iof_awaitable_vtbl *vt = a->vt;
  bool held = h->strand != NULL;
  if (held) iof__strand_release(h);
  iof_fiber *next = vt->suspend(aw, h, h->env);
  if (next == h && held && !h->strand) {
    /* Resuming at once would run h outside the strand it just released
     * (another fiber may hold it now): go back through the executor,
     * unless suspend already did (h holds the strand again). */
    iof_executor_ref ex = h->env->executor;
    return ex.vt->dispatch(ex.ex, h) > 0 ? h : NULL;
  }
  return next;
}

static int await_in(iof_fiber *self, void *aw, const iof_awaitable_vtbl *vt) {
  await_call a = {aw, vt};
  iof_chain *c = self->sched; /* what iof_fiber_walk reports while away */
  __atomic_store_n(&c->wait_vt, vt, __ATOMIC_RELAXED);
  __atomic_store_n(&c->wait_aw, aw, __ATOMIC_RELAXED);
  iof_fiber_suspend_with(await_hook, &a);
  __atomic_store_n(&c->wait_vt, NULL, __ATOMIC_RELAXED);
  iof__refresh_allocator(self);
  return vt->resume ? vt->resume(aw) : 0;
}

/* iof_await and iof__await_always: the same but for the shutdown refusal. */
static int await_checked(void *aw, const iof_awaitable_vtbl *vt,
                         bool refuse_on_shutdown) {
  iof_fiber *self = launched_self();
  if (!self) return -EPERM;
  if (!aw || !vt || !vt->suspend) return -EINVAL;
  return iof__await_as(self, aw, vt, refuse_on_shutdown);
}

int iof__await_as(iof_fiber *self, void *aw, const iof_awaitable_vtbl *vt,
                  bool refuse_on_shutdown) {
  if (vt->ready && vt->ready(aw)) return vt->resume ? vt->resume(aw) : 0;
  /* From an iof_fiber_walk callback: the fibers this thread runs while
   * this one is away would spin on the registry's locks the walk holds. */
  if (iof__debug_walking) return -EDEADLK;
  if (refuse_on_shutdown && iof__env_stopping(self->env)) return -ECANCELED;
  return await_in(self, aw, vt);
}

int iof_await(void *aw, const iof_awaitable_vtbl *vt) {
  return await_checked(aw, vt, true);
}

int iof__await_always(void *aw, const iof_awaitable_vtbl *vt) {
  return await_checked(aw, vt, false);
}

/* ---- yield and hops --------------------------------------------------- */

typedef struct hop {
  iof_executor_ref to;
  int err;
  int use_post;
} hop;

static iof_fiber *hop_suspend(void *self, iof_fiber *h, const iof_env *env) {
  (void)env;
  hop *hp = self;
  iof_executor_ref to = hp->to;
  int r;
  if (hp->use_post) {
    r = to.vt->post(to.ex, h);
  } else {
    r = to.vt->dispatch(to.ex, h);
    if (r > 0) return h;
  }
  if (r < 0) {
    hp->err = r; /* h was not taken: it resumes at once, here */
    return h;
  }
  return NULL;
}

static int hop_resume(void *self) {
  return ((hop *)self)->err;
}

static const iof_awaitable_vtbl hop_vtbl = {NULL, hop_suspend, hop_resume};

__attribute__((constructor)) static void name_hops(void) {
  iof__debug_label(&hop_vtbl, "executor hop (yield, iof_run)", NULL);
}

static iof_fiber *strand_yield_hook(iof_fiber *h, void *arg) {
  return iof__strand_yield(h, arg);
}

/* iof_yield away from home: through the executor (a post), or the
 * strand's own requeue. Kept out of line so that the fast path in
 * iof_yield sets up no frame for it. */
__attribute__((noinline)) static int yield_posted(iof_fiber *self) {
  if (iof__env_stopping(self->env)) return -ECANCELED;
  if (iof__is_strand_of(self->env->executor, self)) {
    int err = 0;
    iof_fiber_suspend_with(strand_yield_hook, &err);
    iof__refresh_allocator(self);
    return err;
  }
  /* await_in directly, not iof_await: one frame fewer to return through
   * after the switch (each return there is mispredicted). */
  hop hp = {self->env->executor, 0, 1};
  return await_in(self, &hp, &hop_vtbl);
}

int iof_yield(void) {
  iof_thread_state *th = iof__thread_fast();
  iof_fiber *self = th->current;
  if (self == &th->root || !self->env) return -EPERM;
  /* In an iof_fiber_walk callback the walk's own run mark is on top: the
   * fast path below is not taken, and the check is off it. */
  const iof_run_mark *m = th->marks;
  if (m) {
    /* The context this thread runs may requeue the fiber itself, if the
     * fiber is at home there: on an io_context's own executor, or on a
     * strand over it that the fiber holds. */
    iof_execution_context *ctx = (iof_execution_context *)m->ctx;
    const iof__ctx_kind *k = ctx->kind;
    iof_executor_ref ex = self->env->executor;
    if (self->strand) ex = iof__strand_inner_of(ex, self);
    if (k && k->yield && ex.vt == k->vtbl && ex.ex == (const void *)ctx) {
      if (atomic_load_explicit(&ctx->state, memory_order_acquire))
        return -ECANCELED;
      /* Holding the strand: keep it if nobody waits for it, else queue
       * behind the waiters and pass it to the first. */
      iof_fiber *next = self->strand ? iof__strand_pass(self) : NULL;
      return k->yield(ctx, th, self, next);
    }
  }
  if (iof__debug_walking) return -EDEADLK; /* as iof__await_as */
  return yield_posted(self);
}

int iof_run(iof_executor_ref ex, const iof_launch_opts *opts, iof_fn fn,
            void *arg) {
  iof_fiber *self = launched_self();
  if (!self) return -EPERM;
  if (!fn) return -EINVAL;
  if (opts && (opts->stack_size || opts->name || opts->on_done)) return -EINVAL;
  const iof_env *caller = self->env;
  iof_env env = *caller;
  if (ex.vt) env.executor = ex;
  if (opts && opts->stop_token.state) env.stop_token = opts->stop_token;
  if (opts && opts->frame_allocator)
    env.frame_allocator = opts->frame_allocator;
  iof_frame_allocator *saved = iof_current_frame_allocator();
  bool hops = !iof_executor_equal(env.executor, caller->executor);
  iof_execution_context *away = NULL;
  if (hops) {
    if (iof__debug_walking) return -EDEADLK; /* as iof__await_as */
    if (iof_execution_context_stopping(iof_executor_context(env.executor)))
      return -ESHUTDOWN;
    iof_executor_on_work_started(env.executor);
    self->env = &env;
    away = iof_executor_context(caller->executor);
    if (away) atomic_fetch_add_explicit(&away->away, 1, memory_order_relaxed);
    hop there = {env.executor, 0, 0};
    await_in(self, &there, &hop_vtbl);
    if (there.err < 0) {
      if (away) atomic_fetch_sub_explicit(&away->away, 1, memory_order_relaxed);
      self->env = caller;
      iof_executor_on_work_finished(env.executor);
      iof_set_current_frame_allocator(saved);
      return there.err;
    }
  } else {
    self->env = &env;
  }
  iof__refresh_allocator(self);
  int status = fn(arg);
  self->env = caller;
  if (hops) {
    /* Back home: the caller's executor takes a started fiber even while
     * its context shuts down, so the call always returns there. */
    hop back = {caller->executor, 0, 0};
    await_in(self, &back, &hop_vtbl);
    if (away) atomic_fetch_sub_explicit(&away->away, 1, memory_order_relaxed);
    iof_executor_on_work_finished(env.executor);
    /* The return is a resume: await_in refreshed the allocator from the
     * caller's env, as every resume does (a value saved on another thread
     * before the hop must not override it). */
  } else {
    iof_set_current_frame_allocator(saved);
  }
  return status;
}
