/* iof_await and the synchronization rules: suspend first, then suspend() on the
 * resumer's stack; synchronous completion by dispatch; constant stacks over
 * 1,000,000 awaits in 64 KiB; ready(); suspend returning NULL / h / another
 * fiber; resume() values; error codes; the env an awaitable is given; plain
 * writes made before a post, an await's suspend or a hop are visible after
 * resumption.
 *
 * IOF_TEST_THREADED: other threads post parked fibers; thread-pool hops. */
#include "test_support.h"
#include "check_test.h"

#include <iofiber/iofiber.h>

/* Only to check, inside suspend(), that h really is suspended. */
#include "fiber/fiber_internal.h"

#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

/* a hang is a failure, not a stuck CI job */
IOF_TEST_CHECK_FIXTURES(begin, end, 120)

static __attribute__((noinline)) uintptr_t stack_mark(void) {
  volatile char c = 0;
  uintptr_t p = (uintptr_t)&c;
  __asm__ volatile("" : : "r"(p) : "memory");
  return p;
}

static bool on_fiber_stack(const iof_fiber *f, uintptr_t p) {
  uintptr_t lo = (uintptr_t)f->base;
  return p >= lo && p < lo + f->frame_size;
}

/* ---- 1. suspend first, suspend() on the resumer's stack ---------------- */

struct first {
  iof_fiber *self;
  uintptr_t fiber_local;
  int suspends;
};

static iof_fiber *first_suspend(void *self, iof_fiber *h, const iof_env *env) {
  struct first *s = self;
  s->suspends++;
  CHECK(h == s->self);
  CHECK(iof_fiber_current() != h);
  CHECK(iof_fiber_current() == NULL); /* the run loop's own stack */
  CHECK(h->state == IOF_FS_SUSPENDED);
  CHECK(!on_fiber_stack(h, stack_mark()));
  CHECK(on_fiber_stack(h, s->fiber_local));
  /* Complete later: the run loop resumes h. */
  CHECK(iof_executor_post(env->executor, h) == 0);
  return NULL;
}

static int first_resume(void *self) {
  struct first *s = self;
  CHECK(iof_fiber_current() == s->self);
  CHECK(s->self->state == IOF_FS_RUNNING);
  return 5;
}

static const iof_awaitable_vtbl first_vt = {NULL, first_suspend, first_resume};

static int first_fn(void *arg) {
  struct first *s = arg;
  s->self = iof_fiber_current();
  s->fiber_local = stack_mark();
  for (int i = 0; i < 10; i++) CHECK(iof_await(s, &first_vt) == 5);
  return 0;
}

static void
await_suspends_first_then_calls_suspend_on_resumers_stack(void **state) {
  (void)state;
  iof_io_context *io = new_io();
  struct first s = {0};
  assert_int_equal(iof_launch(iof_io_context_executor(io), first_fn, &s), 0);
  /* 1 first run + 10 resumes from the queue. */
  assert_int_equal(iof_io_context_run(io), 11);
  assert_int_equal(s.suspends, 10);
  assert_int_equal(iof_io_context_destroy(io), 0);
  assert_no_failures();
}

/* ---- 2. synchronous completion by dispatch inside suspend -------------- */

struct sync_aw {
  iof_fiber *self;
  long suspends;
  long inline_returns;
  uintptr_t resumer_mark; /* the resumer's stack depth at each suspend */
  long resumer_moves;
};

static iof_fiber *sync_suspend(void *self, iof_fiber *h, const iof_env *env) {
  struct sync_aw *s = self;
  s->suspends++;
  if (h != s->self || iof_fiber_current() == h ||
      h->state != IOF_FS_SUSPENDED) {
    CHECK(h == s->self);
    CHECK(iof_fiber_current() != h);
    CHECK(h->state == IOF_FS_SUSPENDED);
  }
  uintptr_t m = stack_mark();
  if (!s->resumer_mark)
    s->resumer_mark = m;
  else if (m != s->resumer_mark)
    s->resumer_moves++;
  /* The operation completed at once: hand h back through its executor. The
   * calling thread runs the io_context, so dispatch says "inline". */
  iof_fiber *r = iof_executor_dispatch(env->executor, h);
  if (r == h) s->inline_returns++;
  return r;
}

static const iof_awaitable_vtbl sync_vt = {NULL, sync_suspend, NULL};

struct sync_run {
  struct sync_aw aw;
  long n;
  long done;
  long moves; /* iterations whose local had another address */
};

static int sync_fn(void *arg) {
  struct sync_run *r = arg;
  r->aw.self = iof_fiber_current();
  uintptr_t first = 0;
  for (long i = 0; i < r->n; i++) {
    uintptr_t m = stack_mark();
    if (!first)
      first = m;
    else if (m != first)
      r->moves++;
    if (iof_await(&r->aw, &sync_vt) != 0) {
      CHECK(!"await failed");
      break;
    }
    r->done++;
  }
  return 0;
}

static void
await_sync_completion_by_dispatch_never_resumes_running_fiber(void **state) {
  (void)state;
  iof_io_context *io = new_io();
  struct sync_run r = {.n = 1000};
  assert_int_equal(iof_launch(iof_io_context_executor(io), sync_fn, &r), 0);
  /* Every completion resumed h without going through the queue: the run
   * loop resumed the fiber exactly once. */
  assert_int_equal(iof_io_context_run(io), 1);
  assert_int_equal(r.done, 1000);
  assert_int_equal(r.aw.suspends, 1000);
  assert_int_equal(r.aw.inline_returns, 1000);
  assert_int_equal(iof_io_context_destroy(io), 0);
  assert_no_failures();
}

/* ---- 3. 1,000,000 synchronous awaits in a 64 KiB stack ----------------- */

static void await_million_sync_awaits_constant_stack_in_64k(void **state) {
  (void)state;
  iof_io_context *io = new_io();
  struct sync_run r = {.n = 1000000};
  iof_launch_opts o = {.stack_size = 64 * 1024, .name = "million"};
  assert_int_equal(iof_run_async(iof_io_context_executor(io), &o, sync_fn, &r),
                   0);
  assert_int_equal(iof_io_context_run(io), 1);
  assert_int_equal(r.done, 1000000);
  assert_int_equal(r.aw.inline_returns, 1000000);
  assert_int_equal(r.moves, 0);            /* the fiber's stack never grew */
  assert_int_equal(r.aw.resumer_moves, 0); /* nor the resumer's */
  assert_int_equal(iof_io_context_destroy(io), 0);
  assert_no_failures();
}

/* ---- 4. ready() true skips suspension ---------------------------------- */

struct ready_aw {
  bool ready;
  int readies, suspends, resumes;
  int value;
};

static bool ready_ready(void *self) {
  struct ready_aw *a = self;
  a->readies++;
  return a->ready;
}

static iof_fiber *ready_suspend(void *self, iof_fiber *h, const iof_env *env) {
  struct ready_aw *a = self;
  a->suspends++;
  CHECK(iof_executor_post(env->executor, h) == 0);
  return NULL;
}

static int ready_resume(void *self) {
  struct ready_aw *a = self;
  a->resumes++;
  return a->value;
}

static const iof_awaitable_vtbl ready_vt = {ready_ready, ready_suspend,
                                            ready_resume};
static const iof_awaitable_vtbl ready_noresume_vt = {ready_ready, ready_suspend,
                                                     NULL};

struct ready_run {
  struct ready_aw yes, no, bare;
  int ryes, rno, rbare;
};

static int ready_fn(void *arg) {
  struct ready_run *r = arg;
  r->ryes = iof_await(&r->yes, &ready_vt);
  r->rbare = iof_await(&r->bare, &ready_noresume_vt);
  r->rno = iof_await(&r->no, &ready_vt);
  return 0;
}

static void await_ready_true_skips_suspension(void **state) {
  (void)state;
  iof_io_context *io = new_io();
  struct ready_run r = {.yes = {.ready = true, .value = 31},
                        .no = {.ready = false, .value = 32},
                        .bare = {.ready = true, .value = 99}};
  assert_int_equal(iof_launch(iof_io_context_executor(io), ready_fn, &r), 0);
  /* First run + one resume for the only awaitable that suspended. */
  assert_int_equal(iof_io_context_run(io), 2);
  assert_int_equal(r.yes.readies, 1);
  assert_int_equal(r.yes.suspends, 0);
  assert_int_equal(r.yes.resumes, 1);
  assert_int_equal(r.ryes, 31);
  assert_int_equal(r.bare.suspends, 0);
  assert_int_equal(r.rbare, 0); /* no resume slot: 0 */
  assert_int_equal(r.no.readies, 1);
  assert_int_equal(r.no.suspends, 1);
  assert_int_equal(r.no.resumes, 1);
  assert_int_equal(r.rno, 32);
  assert_int_equal(iof_io_context_destroy(io), 0);
  assert_no_failures();
}

/* ---- 5. suspend returns NULL; another thread posts h ------------------- */

struct xpost {
  iof_fiber *_Atomic parked;
  const iof_env *_Atomic parked_env;
  pthread_t io_thread;
  long rounds;
  /* Plain data: written by the fiber before suspending (read by the poster)
   * and by the poster before posting (read by the fiber after resuming). */
  long from_fiber;
  long from_poster;
  char blob[256];
  long posted;
  long resumed;
};

static iof_fiber *xpost_suspend(void *self, iof_fiber *h, const iof_env *env) {
  struct xpost *x = self;
  CHECK(env == h->env);
  atomic_store_explicit(&x->parked_env, env, memory_order_relaxed);
  atomic_store_explicit(&x->parked, h, memory_order_release);
  return NULL; /* h waits: the other thread completes it */
}

static int xpost_resume(void *self) {
  struct xpost *x = self;
  return (int)(x->from_poster & 0x7fffffff);
}

static const iof_awaitable_vtbl xpost_vt = {NULL, xpost_suspend, xpost_resume};

static void *xpost_thread(void *arg) {
  struct xpost *x = arg;
  for (long i = 0; i < x->rounds; i++) {
    iof_fiber *h = NULL;
    uint64_t deadline = iof_test_now_ns() + 20ull * 1000000000u;
    while (!(
        h = atomic_exchange_explicit(&x->parked, NULL, memory_order_acquire))) {
      if (iof_test_now_ns() > deadline) {
        CHECK(!"the fiber never parked");
        return NULL;
      }
      sched_yield();
    }
    const iof_env *env =
        atomic_load_explicit(&x->parked_env, memory_order_relaxed);
    CHECK(x->from_fiber == i);
    x->from_poster = i * 7 + 1;
    memset(x->blob, (int)(i & 0x7f), sizeof x->blob);
    x->posted++;
    CHECK(iof_executor_post(env->executor, h) == 0);
    /* env and h are no longer ours: the await has completed. */
  }
  return NULL;
}

static int xpost_fn(void *arg) {
  struct xpost *x = arg;
  for (long i = 0; i < x->rounds; i++) {
    x->from_fiber = i;
    int r = iof_await(x, &xpost_vt);
    CHECK(r == (int)((i * 7 + 1) & 0x7fffffff));
    CHECK(pthread_equal(self_thread(), x->io_thread));
    CHECK(x->from_poster == i * 7 + 1);
    CHECK(x->blob[0] == (char)(i & 0x7f) && x->blob[255] == (char)(i & 0x7f));
    CHECK(x->posted == i + 1);
    x->resumed++;
  }
  return 0;
}

static void
await_suspend_null_then_other_thread_posts_resumes_on_executor(void **state) {
  (void)state;
  iof_io_context *io = new_io();
  struct xpost x = {.io_thread = pthread_self(), .rounds = 2000};
  pthread_t t;
  assert_int_equal(iof_launch(iof_io_context_executor(io), xpost_fn, &x), 0);
  assert_int_equal(pthread_create(&t, NULL, xpost_thread, &x), 0);
  /* The parked chain is work: run waits for the other thread's posts. */
  assert_int_equal(iof_io_context_run(io), 2001);
  pthread_join(t, NULL);
  assert_int_equal(x.resumed, 2000);
  assert_int_equal(x.posted, 2000);
  assert_int_equal(iof_io_context_destroy(io), 0);
  assert_no_failures();
}

/* ---- 6. suspend returns another fiber: symmetric transfer -------------- */

struct xfer {
  iof_fiber *parked_g;
  char log[16];
  int n;
  iof_fiber *a;
};

static void xlog(struct xfer *x, char c) {
  if (x->n < (int)sizeof x->log - 1) x->log[x->n++] = c;
}

static iof_fiber *park_suspend(void *self, iof_fiber *h, const iof_env *env) {
  (void)env;
  ((struct xfer *)self)->parked_g = h;
  return NULL;
}

static const iof_awaitable_vtbl park_vt = {NULL, park_suspend, NULL};

static iof_fiber *xfer_suspend(void *self, iof_fiber *h, const iof_env *env) {
  struct xfer *x = self;
  CHECK(h == x->a);
  CHECK(x->parked_g != NULL);
  CHECK(iof_executor_post(env->executor, h) == 0); /* A continues later */
  iof_fiber *g = x->parked_g;
  x->parked_g = NULL;
  return g; /* switch to G directly, before the run loop goes on */
}

static const iof_awaitable_vtbl xfer_vt = {NULL, xfer_suspend, NULL};

static int xfer_g(void *arg) {
  struct xfer *x = arg;
  xlog(x, 'g');
  iof_await(x, &park_vt);
  xlog(x, 'G');
  CHECK(pthread_equal(self_thread(), pthread_self()));
  return 0;
}

static int xfer_a(void *arg) {
  struct xfer *x = arg;
  x->a = iof_fiber_current();
  xlog(x, 'a');
  iof_await(x, &xfer_vt);
  xlog(x, 'A');
  return 0;
}

static int xfer_c(void *arg) {
  xlog(arg, 'c');
  return 0;
}

static void
await_suspend_returning_other_fiber_is_symmetric_transfer(void **state) {
  (void)state;
  iof_io_context *io = new_io();
  iof_executor_ref ex = iof_io_context_executor(io);
  struct xfer x = {0};
  assert_int_equal(iof_launch(ex, xfer_g, &x), 0);
  assert_int_equal(iof_launch(ex, xfer_a, &x), 0);
  assert_int_equal(iof_launch(ex, xfer_c, &x), 0);
  /* G's second run is a direct switch from A's suspend: it happens before
   * C (queued before A's re-post) and is not one of the run loop's
   * resumes: g, a, c, A -> 4, not 5. */
  assert_int_equal(iof_io_context_run(io), 4);
  assert_string_equal(x.log, "gaGcA");
  assert_int_equal(iof_io_context_destroy(io), 0);
  assert_no_failures();
}

/* ---- 7. resume()'s value is what iof_await returns --------------------- */

struct val_aw {
  int value;
};

static iof_fiber *val_suspend(void *self, iof_fiber *h, const iof_env *env) {
  (void)self;
  (void)env;
  return h; /* resume at once (await_suspend returning false) */
}

static int val_resume(void *self) {
  return ((struct val_aw *)self)->value;
}

static const iof_awaitable_vtbl val_vt = {NULL, val_suspend, val_resume};

static int val_fn(void *arg) {
  int *got = arg;
  struct val_aw a = {-123}, b = {77}, c = {0};
  got[0] = iof_await(&a, &val_vt);
  got[1] = iof_await(&b, &val_vt);
  got[2] = iof_await(&c, &val_vt);
  return 0;
}

static void await_returns_resume_value(void **state) {
  (void)state;
  iof_io_context *io = new_io();
  int got[3] = {1, 1, 1};
  assert_int_equal(iof_launch(iof_io_context_executor(io), val_fn, got), 0);
  assert_int_equal(iof_io_context_run(io), 1);
  assert_int_equal(got[0], -123);
  assert_int_equal(got[1], 77);
  assert_int_equal(got[2], 0);
  assert_int_equal(iof_io_context_destroy(io), 0);
  assert_no_failures();
}

/* ---- 8. -EPERM outside a launched fiber; -EINVAL on NULL --------------- */

static int counting_suspends;

static iof_fiber *count_suspend(void *self, iof_fiber *h, const iof_env *env) {
  (void)self;
  (void)env;
  counting_suspends++;
  return h;
}

static const iof_awaitable_vtbl count_vt = {NULL, count_suspend, NULL};

static int raw_fn(void *arg) {
  int *r = arg;
  int dummy;
  r[0] = iof_await(&dummy, &count_vt);
  r[1] = iof_yield();
  return 0;
}

static void await_outside_fiber_eperm(void **state) {
  (void)state;
  int dummy;
  counting_suspends = 0;
  assert_int_equal(iof_await(&dummy, &count_vt), -EPERM);
  assert_int_equal(iof_yield(), -EPERM);
  /* A raw fiber (not launched: no env, no executor) is outside too. */
  int r[2] = {0, 0};
  iof_fiber *f = iof_fiber_create(NULL, IOF_FIBER_STACK_DEFAULT, raw_fn, r);
  assert_non_null(f);
  assert_int_equal(iof_fiber_resume(f), 0);
  assert_true(iof_fiber_done(f));
  assert_int_equal(iof_fiber_destroy(f), 0);
  assert_int_equal(r[0], -EPERM);
  assert_int_equal(r[1], -EPERM);
  assert_int_equal(counting_suspends, 0);
}

static int null_fn(void *arg) {
  int *r = arg;
  int dummy;
  static const iof_awaitable_vtbl no_suspend = {NULL, NULL, NULL};
  r[0] = iof_await(NULL, &count_vt);
  r[1] = iof_await(&dummy, NULL);
  r[2] = iof_await(&dummy, &no_suspend);
  return 0;
}

static void await_null_einval(void **state) {
  (void)state;
  iof_io_context *io = new_io();
  int r[3] = {0, 0, 0};
  counting_suspends = 0;
  assert_int_equal(iof_launch(iof_io_context_executor(io), null_fn, r), 0);
  assert_int_equal(iof_io_context_run(io), 1);
  assert_int_equal(r[0], -EINVAL);
  assert_int_equal(r[1], -EINVAL);
  assert_int_equal(r[2], -EINVAL);
  assert_int_equal(counting_suspends, 0);
  assert_int_equal(iof_io_context_destroy(io), 0);
}

/* ---- 9. the env an awaitable gets is the fiber's, until completion ----- */

struct env_aw {
  const iof_env *expect;
  const iof_env *got; /* cleared by resume: kept only until completion */
  int checks;
};

static iof_fiber *env_suspend(void *self, iof_fiber *h, const iof_env *env) {
  struct env_aw *a = self;
  a->got = env;
  CHECK(env != NULL);
  CHECK(env == a->expect);
  CHECK(env == h->env);
  a->checks++;
  return iof_executor_dispatch(env->executor, h);
}

static int env_resume(void *self) {
  struct env_aw *a = self;
  a->got = NULL; /* completed: the awaitable lets go of env */
  return 0;
}

static const iof_awaitable_vtbl env_vt = {NULL, env_suspend, env_resume};

struct env_run {
  iof_executor_ref pool;
  struct env_aw aw;
  const iof_env *outer;
  const iof_env *inner;
};

static int env_inner(void *arg) {
  struct env_run *r = arg;
  r->inner = iof_env_current();
  CHECK(r->inner != r->outer);
  r->aw.expect = r->inner;
  CHECK(iof_await(&r->aw, &env_vt) == 0);
  CHECK(r->aw.got == NULL);
  CHECK(iof_executor_equal(r->inner->executor, r->pool));
  return 0;
}

static int env_fn(void *arg) {
  struct env_run *r = arg;
  r->outer = iof_env_current();
  r->aw.expect = r->outer;
  CHECK(iof_await(&r->aw, &env_vt) == 0);
  CHECK(r->aw.got == NULL);
  /* Inside iof_run the env is the one built on the caller's stack. */
  CHECK(iof_run(r->pool, NULL, env_inner, r) == 0);
  CHECK(iof_env_current() == r->outer);
  r->aw.expect = r->outer;
  CHECK(iof_await(&r->aw, &env_vt) == 0);
  return 0;
}

static void await_env_is_callers_env_until_completion(void **state) {
  (void)state;
  iof_io_context *io = new_io();
  iof_thread_pool *p = iof_thread_pool_create(2);
  assert_non_null(p);
  struct env_run r = {.pool = iof_thread_pool_executor(p)};
  assert_int_equal(iof_launch(iof_io_context_executor(io), env_fn, &r), 0);
  assert_true(iof_io_context_run(io) >= 1);
  assert_int_equal(r.aw.checks, 3);
  assert_int_equal(iof_thread_pool_destroy(p), 0);
  assert_int_equal(iof_io_context_destroy(io), 0);
  assert_no_failures();
}

/* ---- 10. await during shutdown: -ECANCELED without suspending ---------- */

struct cancel_run {
  int last;
  long yields;
  int suspends_after;
};

static iof_fiber *never_suspend(void *self, iof_fiber *h, const iof_env *env) {
  (void)env;
  ((struct cancel_run *)self)->suspends_after++;
  return h;
}

static const iof_awaitable_vtbl never_vt = {NULL, never_suspend, NULL};

static int cancel_fn(void *arg) {
  struct cancel_run *c = arg;
  for (long i = 0; i < 10000000; i++) {
    int r = iof_yield();
    if (r < 0) {
      c->last = r;
      break;
    }
    c->yields++;
  }
  c->suspends_after = 0;
  int r = iof_await(c, &never_vt);
  CHECK(r == -ECANCELED);
  return 0;
}

static void await_during_shutdown_ecanceled_without_suspending(void **state) {
  (void)state;
  iof_io_context *io = new_io();
  struct cancel_run c = {0};
  assert_int_equal(iof_launch(iof_io_context_executor(io), cancel_fn, &c), 0);
  for (int i = 0; i < 5; i++) assert_true(iof_io_context_poll(io) >= 1);
  assert_true(c.yields >= 4);
  assert_int_equal(iof_io_context_destroy(io), 0);
  assert_int_equal(c.last, -ECANCELED);
  assert_int_equal(c.suspends_after, 0);
  assert_no_failures();
}

/* ---- 11. synchronization: plain writes across hops --------------------- */

struct hops {
  iof_executor_ref pool;
  pthread_t io_thread;
  long rounds;
  /* Plain, non-atomic: every access is ordered by a post, dispatch, await
   * or launch; TSan reports any race. */
  struct {
    long a, b;
    char text[64];
  } data;
  long pool_side_ok;
  int launched_value;
};

static int hop_body(void *arg) {
  struct hops *h = arg;
  CHECK(!pthread_equal(self_thread(), h->io_thread));
  long i = h->data.a;
  CHECK(h->data.b == i * 2);
  if (strcmp(h->data.text, "io") != 0) CHECK(!"text from io lost");
  h->data.b = i * 3;
  snprintf(h->data.text, sizeof h->data.text, "pool");
  h->pool_side_ok++;
  return 0;
}

static int hops_fn(void *arg) {
  struct hops *h = arg;
  CHECK(h->launched_value == 4242); /* written by main before run_async */
  for (long i = 0; i < h->rounds; i++) {
    h->data.a = i;
    h->data.b = i * 2;
    snprintf(h->data.text, sizeof h->data.text, "io");
    CHECK(iof_run(h->pool, NULL, hop_body, h) == 0);
    CHECK(pthread_equal(self_thread(), h->io_thread));
    CHECK(h->data.b == i * 3);
    if (strcmp(h->data.text, "pool") != 0) CHECK(!"text from pool lost");
  }
  return 0;
}

static void sync_plain_writes_visible_across_hops(void **state) {
  (void)state;
  iof_io_context *io = new_io();
  iof_thread_pool *p = iof_thread_pool_create(3);
  assert_non_null(p);
  struct hops h = {.pool = iof_thread_pool_executor(p),
                   .io_thread = pthread_self(),
                   .rounds = 2000};
  h.launched_value = 4242;
  assert_int_equal(iof_launch(iof_io_context_executor(io), hops_fn, &h), 0);
  assert_true(iof_io_context_run(io) >= 1);
  assert_int_equal(h.pool_side_ok, h.rounds);
  assert_int_equal(iof_thread_pool_destroy(p), 0);
  assert_int_equal(iof_io_context_destroy(io), 0);
  assert_no_failures();
}

/* run_async from a foreign thread onto the pool: the fiber sees the plain
 * writes made before the launch; the launcher sees the fiber's writes after
 * the pool's join. */
struct launched {
  long in[8];
  long out[8];
};

static int launched_fn(void *arg) {
  struct launched *l = arg;
  for (int i = 0; i < 8; i++) {
    CHECK(l->in[i] == i * 11);
    l->out[i] = l->in[i] + 1;
  }
  return 0;
}

static void sync_run_async_publishes_plain_writes(void **state) {
  (void)state;
  enum { N = 64 };
  iof_thread_pool *p = iof_thread_pool_create(4);
  assert_non_null(p);
  static struct launched l[N];
  for (int k = 0; k < N; k++) {
    for (int i = 0; i < 8; i++) l[k].in[i] = i * 11;
    assert_int_equal(
        iof_launch(iof_thread_pool_executor(p), launched_fn, &l[k]), 0);
  }
  assert_int_equal(iof_thread_pool_join(p), 0);
  for (int k = 0; k < N; k++)
    for (int i = 0; i < 8; i++) assert_int_equal(l[k].out[i], i * 11 + 1);
  assert_int_equal(iof_thread_pool_destroy(p), 0);
  assert_no_failures();
}

#define T(f) cmocka_unit_test_setup_teardown(f, begin, end)

int main(void) {
  const struct CMUnitTest tests[] = {
      T(await_suspends_first_then_calls_suspend_on_resumers_stack),
      T(await_sync_completion_by_dispatch_never_resumes_running_fiber),
      T(await_million_sync_awaits_constant_stack_in_64k),
      T(await_ready_true_skips_suspension),
      T(await_suspend_null_then_other_thread_posts_resumes_on_executor),
      T(await_suspend_returning_other_fiber_is_symmetric_transfer),
      T(await_returns_resume_value),
      T(await_outside_fiber_eperm),
      T(await_null_einval),
      T(await_env_is_callers_env_until_completion),
      T(await_during_shutdown_ecanceled_without_suspending),
      T(sync_plain_writes_visible_across_hops),
      T(sync_run_async_publishes_plain_writes),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
