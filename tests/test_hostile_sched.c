/* Hostile calls into sched/: executors, contexts and services, work
 * guards, stop tokens, launch/await/run, strands, thread pools, the sync
 * primitives, channels and when_all/any, fed NULLs, out-of-range values,
 * dead objects and the wrong context (plain thread, raw fiber, launched
 * fiber). Each call must give its documented error and leave the objects
 * usable.
 *
 * IOF_TEST_THREADED: thread pool calls from its own threads. */
#include "test_support.h"

#if defined(__SANITIZE_THREAD__)
#define TEST_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define TEST_TSAN 1
#endif
#endif
#include "io_test.h"

#include <iofiber/iofiber.h>

#include <errno.h>
#include <limits.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int disarm(void **state) {
  (void)state;
  alarm(0);
  return 0;
}

/* cmocka's asserts longjmp: fibers record failed checks, tests assert
 * none happened. */
static atomic_int failures;
#define CHECK_EQ(a, b)                                                         \
  do {                                                                         \
    long long va_ = (long long)(a), vb_ = (long long)(b);                      \
    if (va_ != vb_) {                                                          \
      atomic_fetch_add(&failures, 1);                                          \
      fprintf(stderr, "%s:%d: %s = %lld, expected %lld\n", __FILE__, __LINE__, \
              #a, va_, vb_);                                                   \
    }                                                                          \
  } while (0)

static int reset(void **state) {
  (void)state;
  atomic_store(&failures, 0);
  iof_test_watchdog_arm(20);
  return 0;
}

static int ret0(void *arg) {
  (void)arg;
  return 0;
}

/* Runs fn(arg) as a launched fiber on a fresh io_context, to its end. */
static void in_fiber(iof_fn fn, void *arg) {
  iof_io_context *io = iof_io_context_create();
  assert_non_null(io);
  launch(io, fn, arg);
  run_all(io);
  assert_int_equal(iof_io_context_destroy(io), 0);
  assert_int_equal(atomic_load(&failures), 0);
}

/* ---- executors, contexts, services, guards ---------------------------- */

static iof_service *null_create(iof_execution_context *ctx) {
  (void)ctx;
  return NULL;
}

static void executor_and_context_bad_arguments(void **state) {
  (void)state;
  iof_executor_ref empty = {0};
  errno = 0;
  assert_null(iof_executor_dispatch(empty, NULL));
  assert_int_equal(errno, EINVAL);
  assert_int_equal(iof_executor_post(empty, NULL), -EINVAL);
  assert_true(iof_executor_equal(empty, empty));
  assert_null(iof_executor_target(empty, NULL));
  assert_null(iof_executor_context(empty));
  iof_executor_on_work_started(empty);
  iof_executor_on_work_finished(empty);

  iof_io_context *io = iof_io_context_create();
  assert_non_null(io);
  iof_executor_ref ex = iof_io_context_executor(io);
  assert_int_equal(iof_executor_post(ex, NULL), -EINVAL);
  errno = 0;
  assert_null(iof_executor_dispatch(ex, NULL));
  assert_int_equal(errno, EINVAL);
  assert_false(iof_executor_equal(ex, empty));

  assert_int_equal(iof_execution_context_init(NULL), -EINVAL);
  iof_execution_context_shutdown(NULL);
  iof_execution_context_destroy(NULL);
  assert_false(iof_execution_context_stopping(NULL));
  iof_service_key good = {"hostile", null_create, NULL, NULL};
  iof_service_key nocreate = {"nocreate", NULL, NULL, NULL};
  errno = 0;
  assert_null(iof_use_service(NULL, &good));
  assert_int_equal(errno, EINVAL);
  iof_execution_context *ctx = iof_io_context_context(io);
  errno = 0;
  assert_null(iof_use_service(ctx, NULL));
  assert_int_equal(errno, EINVAL);
  errno = 0;
  assert_null(iof_use_service(ctx, &nocreate));
  assert_int_equal(errno, EINVAL);
  errno = 0;
  assert_null(iof_make_service(ctx, &nocreate));
  assert_int_equal(errno, EINVAL);
  errno = 0;
  assert_null(iof_use_service(ctx, &good)); /* create fails */
  assert_int_equal(errno, ENOMEM);
  assert_false(iof_has_service(ctx, &good));
  assert_null(iof_find_service(NULL, &good));
  assert_null(iof_find_service(ctx, NULL));
  assert_false(iof_has_service(NULL, NULL));
  assert_non_null(iof_context_frame_allocator(NULL));
  assert_int_equal(iof_context_set_frame_allocator(NULL, NULL), -EINVAL);
  /* A zeroed allocator object is refused where it is handed over (a
   * launch called through its NULL vtbl and crashed); the context keeps
   * its allocator. */
  iof_frame_allocator zeroed = {NULL};
  assert_int_equal(iof_context_set_frame_allocator(ctx, &zeroed), -EINVAL);
  assert_ptr_equal(iof_context_frame_allocator(ctx),
                   iof_default_frame_allocator());
  iof_launch_opts zo = {0};
  zo.frame_allocator = &zeroed;
  assert_int_equal(iof_run_async(ex, &zo, ret0, NULL), -EINVAL);

  iof_work_guard g;
  assert_int_equal(iof_work_guard_init(NULL, ex), -EINVAL);
  assert_int_equal(iof_work_guard_init(&g, empty), -EINVAL);
  assert_false(iof_work_guard_owns(&g));
  iof_work_guard_reset(&g);
  iof_work_guard_reset(NULL);
  assert_false(iof_work_guard_owns(NULL));
  assert_int_equal(iof_work_guard_init(&g, ex), 0);
  iof_work_guard_reset(&g);
  iof_work_guard_reset(&g); /* twice: once only */
  /* The guard count is back to 0: run returns at once. */
  assert_int_equal(iof_io_context_run(io), 0);
  assert_int_equal(iof_io_context_destroy(io), 0);
}

static void user_executor_without_slots(void **state) {
  (void)state;
  static const iof_executor_vtbl empty_vt = {NULL, NULL, NULL,
                                             NULL, NULL, NULL};
  static int obj;
  iof_executor_ref ex = iof_executor_make(&obj, &empty_vt);
  iof_fiber *f = iof_fiber_create(NULL, 0, ret0, NULL);
  assert_non_null(f);
  assert_int_equal(iof_executor_post(ex, f), -EINVAL);
  errno = 0;
  assert_null(iof_executor_dispatch(ex, f));
  assert_int_equal(errno, EINVAL);
  assert_null(iof_executor_context(ex));
  assert_false(iof_executor_equal(ex, iof_executor_make(&f, &empty_vt)));
  iof_executor_on_work_started(ex);
  iof_executor_on_work_finished(ex);
  assert_int_equal(iof_launch(ex, ret0, NULL), -EINVAL);
  /* Nor a strand over it: its launches called the NULL post (segfault). */
  errno = 0;
  assert_null(iof_strand_create(ex));
  assert_int_equal(errno, EINVAL);
  assert_int_equal(iof_fiber_destroy(f), 0);
  iof_work_guard g;
  assert_int_equal(iof_work_guard_init(&g, ex), 0);
  iof_work_guard_reset(&g);
}

/* A raw fiber posted while it already waits in a run queue is refused:
 * linked in twice, the intrusive queue lost the fibers queued between the
 * two posts (and everything posted after: head and tail disagreed). A
 * finished fiber is refused too. */
static int count_ran(void *arg) {
  atomic_fetch_add((atomic_int *)arg, 1);
  return 0;
}

static void post_twice_is_ebusy(void **state) {
  (void)state;
  atomic_int ran = 0;
  iof_io_context *io = iof_io_context_create();
  assert_non_null(io);
  iof_executor_ref ex = iof_io_context_executor(io);
  iof_fiber *a = iof_fiber_create(NULL, 0, count_ran, &ran);
  iof_fiber *b = iof_fiber_create(NULL, 0, count_ran, &ran);
  iof_fiber *c = iof_fiber_create(NULL, 0, count_ran, &ran);
  assert_true(a && b && c);
  assert_int_equal(iof_executor_post(ex, a), 0);
  assert_int_equal(iof_executor_post(ex, b), 0);
  assert_int_equal(iof_executor_post(ex, a), -EBUSY);
  errno = 0;
  assert_null(iof_executor_dispatch(ex, b));
  assert_int_equal(errno, EBUSY);
  assert_int_equal(iof_executor_post(ex, c), 0);
  assert_int_equal(iof_io_context_run(io), 3);
  assert_int_equal(atomic_load(&ran), 3);
  /* Finished: nothing to run. */
  assert_int_equal(iof_executor_post(ex, a), -EINVAL);
  errno = 0;
  assert_null(iof_executor_dispatch(ex, a));
  assert_int_equal(errno, EINVAL);
  for (int i = 0; i < 3; i++)
    assert_int_equal(iof_fiber_destroy((iof_fiber *[]){a, b, c}[i]), 0);
  assert_int_equal(iof_io_context_destroy(io), 0);
}

/* ---- stop tokens ------------------------------------------------------ */

static void noop_cb(void *arg) {
  (*(int *)arg)++;
}

static void stop_bad_arguments(void **state) {
  (void)state;
  assert_int_equal(iof_stop_source_init(NULL), -EINVAL);
  iof_stop_source_destroy(NULL);
  iof_stop_source zero = {0};
  iof_stop_source_destroy(&zero);
  assert_null(iof_stop_source_token(NULL).state);
  assert_false(iof_stop_source_request(NULL));
  assert_false(iof_stop_source_request(&zero));
  iof_stop_token empty = {0};
  assert_false(iof_stop_requested(empty));
  assert_false(iof_stop_possible(empty));
  iof_stop_token_release(iof_stop_token_retain(empty));
  int hits = 0;
  iof_stop_callback cb;
  memset(&cb, 0, sizeof cb);
  assert_int_equal(iof_stop_callback_register(NULL, empty, noop_cb, &hits),
                   -EINVAL);
  assert_int_equal(iof_stop_callback_register(&cb, empty, NULL, &hits),
                   -EINVAL);
  assert_int_equal(iof_stop_callback_register(&cb, empty, noop_cb, &hits), 0);
  iof_stop_callback_unregister(&cb);
  iof_stop_callback_unregister(&cb);
  iof_stop_callback_unregister(NULL);
  iof_stop_callback fresh;
  memset(&fresh, 0, sizeof fresh);
  iof_stop_callback_unregister(&fresh); /* never registered */

  iof_stop_source src;
  assert_int_equal(iof_stop_source_init(&src), 0);
  iof_stop_token t = iof_stop_token_retain(iof_stop_source_token(&src));
  assert_int_equal(iof_stop_callback_register(&cb, t, noop_cb, &hits), 0);
  assert_true(iof_stop_source_request(&src));
  assert_false(iof_stop_source_request(&src));
  assert_int_equal(hits, 1);
  iof_stop_callback_unregister(&cb);
  iof_stop_callback_unregister(&cb);
  iof_stop_source_destroy(&src);
  iof_stop_source_destroy(&src); /* idempotent */
  assert_true(iof_stop_requested(t));
  assert_int_equal(iof_stop_callback_register(&cb, t, noop_cb, &hits), 1);
  assert_int_equal(hits, 2);
  iof_stop_token_release(t);
}

static void stop_double_register_is_ebusy(void **state) {
  (void)state;
  iof_stop_source src;
  assert_int_equal(iof_stop_source_init(&src), 0);
  iof_stop_token t = iof_stop_source_token(&src);
  int hits = 0, other = 0;
  iof_stop_callback cb, cb2;
  memset(&cb, 0, sizeof cb);
  memset(&cb2, 0, sizeof cb2);
  assert_int_equal(iof_stop_callback_register(&cb, t, noop_cb, &hits), 0);
  assert_int_equal(iof_stop_callback_register(&cb2, t, noop_cb, &other), 0);
  /* Again while linked, as head and not head: refused, list intact. */
  assert_int_equal(iof_stop_callback_register(&cb, t, noop_cb, &hits), -EBUSY);
  assert_int_equal(iof_stop_callback_register(&cb2, t, noop_cb, &other),
                   -EBUSY);
  assert_true(iof_stop_source_request(&src)); /* no loop, each once */
  assert_int_equal(hits, 1);
  assert_int_equal(other, 1);
  iof_stop_callback_unregister(&cb);
  iof_stop_callback_unregister(&cb2);
  /* Unregistered: it may be registered again (fires at once now). */
  assert_int_equal(iof_stop_callback_register(&cb, t, noop_cb, &hits), 1);
  assert_int_equal(hits, 2);
  iof_stop_source_destroy(&src);
}

/* A record still linked on one token, registered on another: refused, and
 * the first token's list keeps both records. */
static void stop_register_on_other_token_is_ebusy(void **state) {
  (void)state;
  iof_stop_source a, b;
  assert_int_equal(iof_stop_source_init(&a), 0);
  assert_int_equal(iof_stop_source_init(&b), 0);
  int on_a = 0, other = 0, on_b = 0;
  iof_stop_callback cb, cb2;
  memset(&cb, 0xa5, sizeof cb); /* garbage, as on a fresh stack */
  memset(&cb2, 0x5a, sizeof cb2);
  assert_int_equal(iof_stop_callback_register(&cb2, iof_stop_source_token(&a),
                                              noop_cb, &other),
                   0);
  assert_int_equal(iof_stop_callback_register(&cb, iof_stop_source_token(&a),
                                              noop_cb, &on_a),
                   0);
  assert_int_equal(iof_stop_callback_register(&cb, iof_stop_source_token(&b),
                                              noop_cb, &on_b),
                   -EBUSY);
  assert_true(iof_stop_source_request(&b));
  assert_int_equal(on_b, 0);
  iof_stop_callback_unregister(&cb);
  assert_true(iof_stop_source_request(&a));
  assert_int_equal(on_a, 0); /* unregistered before the request */
  assert_int_equal(other, 1);
  iof_stop_callback_unregister(&cb2);
  iof_stop_source_destroy(&a);
  iof_stop_source_destroy(&b);
}

/* A record whose callback ran holds the state until unregistered; a new
 * registration of it releases that hold first (LeakSanitizer and the
 * reference count would see the state kept forever otherwise). */
static int self_regs;
static iof_stop_callback self_cb;
static iof_stop_token self_tok;
static void reregister_self(void *arg) {
  int *hits = arg;
  if (++*hits == 1)
    self_regs =
        iof_stop_callback_register(&self_cb, self_tok, reregister_self, hits);
}

static void stop_register_after_fired_keeps_no_state(void **state) {
  (void)state;
  iof_stop_source src;
  assert_int_equal(iof_stop_source_init(&src), 0);
  iof_stop_token t = iof_stop_token_retain(iof_stop_source_token(&src));
  int hits = 0;
  iof_stop_callback cb;
  assert_int_equal(iof_stop_callback_register(&cb, t, noop_cb, &hits), 0);
  assert_true(iof_stop_source_request(&src));
  assert_int_equal(hits, 1);
  /* Not unregistered: registering again fires at once and holds nothing. */
  assert_int_equal(iof_stop_callback_register(&cb, t, noop_cb, &hits), 1);
  assert_int_equal(hits, 2);
  iof_stop_callback_unregister(&cb); /* safe: holds nothing now */
  iof_stop_source_destroy(&src);
  iof_stop_token_release(t); /* the last reference: the state is freed */

  /* The same from inside the callback itself, during the request. */
  assert_int_equal(iof_stop_source_init(&src), 0);
  self_tok = iof_stop_source_token(&src);
  int n = 0;
  assert_int_equal(
      iof_stop_callback_register(&self_cb, self_tok, reregister_self, &n), 0);
  assert_true(iof_stop_source_request(&src));
  assert_int_equal(n, 2); /* ran, re-registered, ran at once */
  assert_int_equal(self_regs, 1);
  iof_stop_callback_unregister(&self_cb);
  iof_stop_source_destroy(&src);
}

/* Callbacks that turn on their own source: request again, unregister
 * themselves and others, destroy the source, register a new callback. */
typedef struct reentrant {
  iof_stop_source src;
  iof_stop_callback cb[3];
  int again, late;
} reentrant;

static void late_cb(void *arg) {
  ((reentrant *)arg)->late++;
}

static void cb0(void *arg) {
  reentrant *r = arg;
  r->again = iof_stop_source_request(&r->src) ? 1 : 2;
  iof_stop_callback_unregister(&r->cb[0]); /* itself */
  iof_stop_callback_unregister(&r->cb[1]); /* another one, not yet run */
  iof_stop_token t = iof_stop_source_token(&r->src);
  iof_stop_callback_register(&r->cb[2], t, late_cb, r); /* runs at once */
  iof_stop_source_destroy(&r->src);
}

static void cb1(void *arg) {
  (void)arg;
}

static void stop_callbacks_reentering(void **state) {
  (void)state;
  reentrant r;
  memset(&r, 0, sizeof r);
  assert_int_equal(iof_stop_source_init(&r.src), 0);
  iof_stop_token t = iof_stop_token_retain(iof_stop_source_token(&r.src));
  assert_int_equal(iof_stop_callback_register(&r.cb[1], t, cb1, &r), 0);
  assert_int_equal(iof_stop_callback_register(&r.cb[0], t, cb0, &r), 0);
  assert_true(iof_stop_source_request(&r.src));
  assert_int_equal(r.again, 2);
  assert_int_equal(r.late, 1);
  assert_true(iof_stop_requested(t));
  iof_stop_callback_unregister(&r.cb[0]);
  iof_stop_callback_unregister(&r.cb[1]);
  iof_stop_callback_unregister(&r.cb[2]);
  iof_stop_source_destroy(&r.src);
  iof_stop_token_release(t);
}

/* ---- launch, await, run, yield ---------------------------------------- */

static iof_fiber *aw_suspend(void *self, iof_fiber *h, const iof_env *env) {
  (void)self;
  (void)env;
  return h;
}

static const iof_awaitable_vtbl aw_vt = {NULL, aw_suspend, NULL};
static const iof_awaitable_vtbl aw_nosuspend = {NULL, NULL, NULL};

static int raw_fiber_calls(void *arg) {
  (void)arg;
  /* A raw fiber: not launched. */
  CHECK_EQ(iof_yield(), -EPERM);
  int x = 0;
  CHECK_EQ(iof_await(&x, &aw_vt), -EPERM);
  CHECK_EQ(iof_run((iof_executor_ref){0}, NULL, ret0, NULL), -EPERM);
  CHECK_EQ(iof_env_current() == NULL, 1);
  return 0;
}

static void launch_bad_arguments(void **state) {
  (void)state;
  iof_io_context *io = iof_io_context_create();
  assert_non_null(io);
  iof_executor_ref ex = iof_io_context_executor(io);
  iof_executor_ref empty = {0};
  assert_int_equal(iof_run_async(empty, NULL, ret0, NULL), -EINVAL);
  assert_int_equal(iof_run_async(ex, NULL, NULL, NULL), -EINVAL);
  assert_int_equal(iof_launch(empty, ret0, NULL), -EINVAL);
  assert_int_equal(iof_launch(ex, NULL, NULL), -EINVAL);
  size_t bad[] = {1, IOF_FIBER_STACK_MIN - 1, IOF_FIBER_STACK_MAX + 1,
                  SIZE_MAX};
  for (size_t i = 0; i < 4; i++) {
    iof_launch_opts o = {0};
    o.stack_size = bad[i];
    assert_int_equal(iof_run_async(ex, &o, ret0, NULL), -EINVAL);
  }
  assert_int_equal(iof_launch_cancel(NULL), -EINVAL);
  iof_fiber *raw = iof_fiber_create(NULL, 0, raw_fiber_calls, NULL);
  assert_non_null(raw);
  assert_int_equal(iof_launch_cancel(raw), -EINVAL);
  assert_int_equal(iof_fiber_resume(raw), 0);
  assert_int_equal(iof_launch_cancel(raw), -EINVAL);
  assert_int_equal(iof_fiber_destroy(raw), 0);
  assert_int_equal(atomic_load(&failures), 0);
  /* Nothing was counted as work by the refusals. */
  assert_int_equal(iof_io_context_run(io), 0);

  /* Outside any fiber. */
  assert_int_equal(iof_yield(), -EPERM);
  int x = 0;
  assert_int_equal(iof_await(&x, &aw_vt), -EPERM);
  assert_int_equal(iof_run(empty, NULL, ret0, NULL), -EPERM);
  assert_null(iof_env_current());

  /* After shutdown. */
  iof_execution_context_shutdown(iof_io_context_context(io));
  assert_int_equal(iof_launch(ex, ret0, NULL), -ESHUTDOWN);
  assert_int_equal(iof_io_context_destroy(io), 0);
}

/* A launched fiber still in its context's run queue belongs to that
 * context: the raw calls refuse it, and the context then runs it once. */
static iof_fiber *walked[4];
static int nwalked, nrunning;
static int collect_fiber(const iof_fiber_info *info, void *arg) {
  (void)arg;
  if (info->state == IOF_FIBER_RUNNING) nrunning++;
  if (info->state == IOF_FIBER_CREATED && nwalked < 4)
    walked[nwalked++] = (iof_fiber *)info->fiber;
  return 0;
}

static int count_run(void *arg) {
  atomic_fetch_add((atomic_int *)arg, 1);
  return 0;
}

static void refuse_queued(void) {
  for (int i = 0; i < nwalked; i++) {
    assert_int_equal(iof_fiber_destroy(walked[i]), -EBUSY);
    assert_int_equal(iof_launch_cancel(walked[i]), -EBUSY);
    assert_int_equal(iof_fiber_resume(walked[i]), -EBUSY);
  }
}

#ifndef TEST_TSAN
/* Blocks the pool's one thread itself (a fiber that suspended would free
 * it for the next launch). */
static int hold_pool(void *arg) {
  atomic_bool *release = arg;
  for (int i = 0; i < 10000 && !atomic_load(release); i++) sleep_ms(1);
  return 0;
}
#endif

static void raw_calls_refuse_queued_launches(void **state) {
  (void)state;
  atomic_int ran = 0;
  iof_io_context *io = iof_io_context_create();
  assert_non_null(io);
  assert_int_equal(iof_launch(iof_io_context_executor(io), count_run, &ran), 0);
  assert_int_equal(iof_launch(iof_io_context_executor(io), count_run, &ran), 0);
  nwalked = nrunning = 0;
  assert_true(iof_fiber_walk(collect_fiber, NULL) >= 0);
  assert_int_equal(nwalked, 2);
  refuse_queued();
  assert_int_equal(atomic_load(&ran), 0);
  assert_int_equal(iof_io_context_run(io), 2);
  assert_int_equal(atomic_load(&ran), 2);
  assert_int_equal(iof_io_context_destroy(io), 0);

#ifndef TEST_TSAN
  /* A pool's inbox: its one thread is blocked, so the launch stays there.
   * Not under TSan: iof_fiber_walk's states are a snapshot read while the
   * pool thread writes them (documented), which TSan reports. */
  iof_thread_pool *p = iof_thread_pool_create(1);
  assert_non_null(p);
  atomic_bool release = false;
  assert_int_equal(iof_launch(iof_thread_pool_executor(p), hold_pool, &release),
                   0);
  for (int i = 0; i < 2000; i++) { /* until the holder runs */
    nwalked = nrunning = 0;
    assert_true(iof_fiber_walk(collect_fiber, NULL) >= 0);
    if (nrunning == 1) break;
    sleep_ms(1);
  }
  assert_int_equal(nrunning, 1);
  assert_int_equal(iof_launch(iof_thread_pool_executor(p), count_run, &ran), 0);
  nwalked = 0;
  assert_true(iof_fiber_walk(collect_fiber, NULL) >= 0);
  assert_int_equal(nwalked, 1);
  refuse_queued();
  atomic_store(&release, true);
  assert_int_equal(iof_thread_pool_join(p), 0);
  assert_int_equal(atomic_load(&ran), 3);
  assert_int_equal(iof_thread_pool_destroy(p), 0);
#endif
}

/* A launched fiber parked in one of the library's waits belongs to that
 * wait until something claims it: a raw resume, post or dispatch is
 * refused, and the wait
 * then ends as it would have (the lock after its holder, the sleep at its
 * deadline, the read with the bytes). */
typedef struct parked {
  iof_mutex m;
  iof_fiber *locker, *sleeper, *reader;
  iof_fiber *raw; /* posted to io by the poker: queued there */
  int raw_ran;
  iof_socket *rs;
  int ws;               /* the other end of rs */
  int order[4], norder; /* 1: holder unlocks, 2: locker got the lock */
  int64_t slept_ns;
  char got[8];
} parked;

static int park_holder(void *arg) {
  parked *p = arg;
  CHECK_EQ(iof_mutex_lock(&p->m), 0);
  CHECK_EQ(iof_sleep_for(30 * 1000000), 0);
  p->order[p->norder++] = 1;
  CHECK_EQ(iof_mutex_unlock(&p->m), 0);
  return 0;
}

static int park_locker(void *arg) {
  parked *p = arg;
  p->locker = iof_fiber_current();
  CHECK_EQ(iof_mutex_lock(&p->m), 0);
  p->order[p->norder++] = 2;
  CHECK_EQ(iof_mutex_unlock(&p->m), 0);
  return 0;
}

static int park_sleeper(void *arg) {
  parked *p = arg;
  p->sleeper = iof_fiber_current();
  int64_t t0 = iof_now_ns();
  CHECK_EQ(iof_sleep_for(40 * 1000000), 0);
  p->slept_ns = iof_now_ns() - t0;
  return 0;
}

static int park_reader(void *arg) {
  parked *p = arg;
  p->reader = iof_fiber_current();
  CHECK_EQ(iof_read(p->rs, p->got, 4), 4);
  return 0;
}

static int park_raw(void *arg) {
  ((parked *)arg)->raw_ran++;
  return 0;
}

static int park_poker(void *arg) {
  parked *p = arg;
  CHECK_EQ(iof_sleep_for(5 * 1000000), 0);
  iof_fiber *all[] = {p->locker, p->sleeper, p->reader};
  for (int round = 0; round < 2; round++)
    for (int i = 0; i < 3; i++) {
      CHECK_EQ(all[i] != NULL, 1);
      if (!all[i]) continue;
      CHECK_EQ(iof_fiber_resume(all[i]), -EBUSY);
      /* A symmetric transfer would end the wait just as early. */
      CHECK_EQ(iof_fiber_transfer(all[i]), -EBUSY);
      iof_executor_ref ex = iof_env_current()->executor;
      CHECK_EQ(iof_executor_post(ex, all[i]), -EBUSY);
      errno = 0;
      CHECK_EQ(iof_executor_dispatch(ex, all[i]) == NULL, 1);
      CHECK_EQ(errno, EBUSY);
    }
  CHECK_EQ(p->norder, 0);
  /* A raw fiber in io's run queue belongs to it: no transfer either. */
  p->raw = iof_fiber_create(NULL, 0, park_raw, p);
  CHECK_EQ(p->raw != NULL, 1);
  if (p->raw) {
    CHECK_EQ(iof_executor_post(iof_env_current()->executor, p->raw), 0);
    CHECK_EQ(iof_fiber_transfer(p->raw), -EBUSY);
    CHECK_EQ(p->raw_ran, 0);
  }
  CHECK_EQ(write(p->ws, "ping", 4), 4);
  return 0;
}

static void raw_resume_refuses_parked_fibers(void **state) {
  (void)state;
  parked p = {0};
  assert_int_equal(iof_mutex_init(&p.m), 0);
  int sv[2];
  assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
  iof_io_context *io = iof_io_context_create();
  assert_non_null(io);
  assert_int_equal(iof_socket_adopt(io, sv[0], &p.rs), 0);
  p.ws = sv[1];
  launch(io, park_holder, &p);
  launch(io, park_locker, &p);
  launch(io, park_sleeper, &p);
  launch(io, park_reader, &p);
  launch(io, park_poker, &p);
  run_all(io);
  assert_int_equal(atomic_load(&failures), 0);
  assert_int_equal(p.norder, 2);
  assert_int_equal(p.order[0], 1);
  assert_int_equal(p.order[1], 2);
  assert_true(p.slept_ns >= 40 * 1000000);
  assert_memory_equal(p.got, "ping", 4);
  assert_int_equal(p.raw_ran, 1);
  assert_int_equal(iof_fiber_destroy(p.raw), 0);
  assert_int_equal(iof_socket_free(p.rs), 0);
  close(sv[1]);
  assert_int_equal(iof_io_context_destroy(io), 0);
  assert_int_equal(iof_mutex_destroy(&p.m), 0);
}

static int misuse_inside(void *arg) {
  (void)arg;
  int x = 0;
  CHECK_EQ(iof_await(NULL, &aw_vt), -EINVAL);
  CHECK_EQ(iof_await(&x, NULL), -EINVAL);
  CHECK_EQ(iof_await(&x, &aw_nosuspend), -EINVAL);
  CHECK_EQ(iof_run((iof_executor_ref){0}, NULL, NULL, NULL), -EINVAL);
  iof_launch_opts o = {0};
  o.stack_size = 65536;
  CHECK_EQ(iof_run((iof_executor_ref){0}, &o, ret0, NULL), -EINVAL);
  o.stack_size = 0;
  o.name = "x";
  CHECK_EQ(iof_run((iof_executor_ref){0}, &o, ret0, NULL), -EINVAL);
  /* The current launched fiber is not cancellable as never-started. */
  CHECK_EQ(iof_launch_cancel(iof_fiber_current()), -EBUSY);
  CHECK_EQ(iof_fiber_destroy(iof_fiber_current()), -EBUSY);
  CHECK_EQ(iof_fiber_resume(iof_fiber_current()), -EBUSY);
  CHECK_EQ(iof_yield(), 0);
  CHECK_EQ(iof_await(&x, &aw_vt), 0);
  return 0;
}

static void launch_misuse_inside_fiber(void **state) {
  (void)state;
  in_fiber(misuse_inside, NULL);
}

/* ---- the fiber registry (debug.h) ------------------------------------- */

typedef struct walker {
  iof_executor_ref ex;
  iof_io_context *io;
  iof_thread_pool *pool;
  int seen, launch_rc, nested_rc, dump_rc;
  int run_rc[4], destroy_rc, join_rc, pool_destroy_rc;
} walker;

static int walk_cb(const iof_fiber_info *info, void *arg) {
  walker *w = arg;
  (void)info;
  w->seen++;
  w->launch_rc = iof_launch(w->ex, ret0, NULL); /* would spin */
  w->nested_rc = iof_fiber_walk(walk_cb, arg);  /* would spin */
  FILE *null = fopen("/dev/null", "w");
  w->dump_rc = iof_fiber_dump(null);
  fclose(null);
  /* A fiber ending inside (run, destroy's drain, a pool's worker) would
   * wait for the registry the walk holds: hung before. */
  w->run_rc[0] = iof_io_context_run(w->io);
  w->run_rc[1] = iof_io_context_run_one(w->io);
  w->run_rc[2] = iof_io_context_poll(w->io);
  w->run_rc[3] = iof_io_context_run_for(w->io, 1000000);
  w->destroy_rc = iof_io_context_destroy(w->io);
  w->join_rc = iof_thread_pool_join(w->pool);
  w->pool_destroy_rc = iof_thread_pool_destroy(w->pool);
  return 1; /* stop after one */
}

static void fiber_walk_misuse(void **state) {
  (void)state;
  assert_int_equal(iof_fiber_walk(NULL, NULL), -EINVAL);
  iof_io_context *io = iof_io_context_create();
  walker w = {0};
  w.io = io;
  w.ex = iof_io_context_executor(io);
  w.pool = iof_thread_pool_create(1);
  assert_non_null(w.pool);
  assert_int_equal(iof_launch(w.ex, ret0, NULL), 0);
  assert_int_equal(iof_launch(w.ex, ret0, NULL), 0);
  assert_int_equal(iof_launch(iof_thread_pool_executor(w.pool), ret0, NULL), 0);
  assert_int_equal(iof_fiber_walk(walk_cb, &w), 1);
  assert_int_equal(w.seen, 1);
  assert_int_equal(w.launch_rc, -EDEADLK);
  assert_int_equal(w.nested_rc, -EDEADLK);
  assert_int_equal(w.dump_rc, -EDEADLK);
  for (int i = 0; i < 4; i++) assert_int_equal(w.run_rc[i], -EDEADLK);
  assert_int_equal(w.destroy_rc, -EDEADLK);
  assert_int_equal(w.join_rc, -EDEADLK);
  assert_int_equal(w.pool_destroy_rc, -EDEADLK);
  assert_int_equal(iof_thread_pool_destroy(w.pool), 0);
  /* A stream that cannot be written: -EIO, nothing else breaks. */
  FILE *ro = fopen("/dev/null", "r");
  assert_non_null(ro);
  assert_int_equal(iof_fiber_dump(ro), -EIO);
  fclose(ro);
  FILE *null = fopen("/dev/null", "w");
  assert_int_equal(iof_fiber_dump(null), 2);
  fclose(null);
  run_all(io);
  assert_int_equal(iof_io_context_destroy(io), 0);
}

/* Every wait or suspension from a walk callback is refused with -EDEADLK
 * (a fiber's sleep there hung: another fiber of the thread ended while the
 * walker was away and spun on the registry's locks the walk holds); the
 * objects waited on are untouched, calls that need no wait still work. */
typedef struct walk_waits {
  iof_io_context *io;
  iof_thread_pool *pool;
  iof_mutex held, own;
  iof_cond cond;
  iof_sem sem;
  iof_event ev;
  iof_chan *ch;
  iof_timer *timer;
  iof_socket *rs;
  int calls;
} walk_waits;

static int walk_waits_cb(const iof_fiber_info *info, void *arg) {
  walk_waits *ww = arg;
  (void)info;
  ww->calls++;
  char b;
  iof_fn fns[1] = {ret0};
  CHECK_EQ(iof_sleep_for(1000000), -EDEADLK);
  CHECK_EQ(iof_yield(), -EDEADLK);
  CHECK_EQ(iof_mutex_lock(&ww->held), -EDEADLK);
  CHECK_EQ(iof_mutex_timedlock(&ww->held, iof_deadline_after(1000000)),
           -EDEADLK);
  CHECK_EQ(iof_cond_wait(&ww->cond, &ww->own), -EDEADLK);
  CHECK_EQ(iof_sem_wait(&ww->sem), -EDEADLK);
  CHECK_EQ(iof_event_wait(&ww->ev), -EDEADLK);
  CHECK_EQ(iof_chan_recv(ww->ch, NULL), -EDEADLK);
  CHECK_EQ(iof_timer_wait(ww->timer), -EDEADLK);
  CHECK_EQ(iof_read_some(ww->rs, &b, 1), -EDEADLK);
  CHECK_EQ(iof_run(iof_thread_pool_executor(ww->pool), NULL, ret0, NULL),
           -EDEADLK);
  CHECK_EQ(iof_when_all(1, fns, NULL, NULL), -EDEADLK);
  /* What needs no wait still works. */
  CHECK_EQ(iof_mutex_unlock(&ww->own), 0); /* still the caller's */
  CHECK_EQ(iof_mutex_lock(&ww->own), 0);
  CHECK_EQ(iof_sem_post(&ww->sem), 0);
  CHECK_EQ(iof_sem_wait(&ww->sem), 0);
  CHECK_EQ(iof_chan_try_recv(ww->ch, NULL), -EAGAIN);
  return 1;
}

static int walk_waits_fiber(void *arg) {
  walk_waits *ww = arg;
  CHECK_EQ(iof_mutex_lock(&ww->own), 0);
  /* A fiber of this thread that ends while the walker would be away. */
  CHECK_EQ(iof_launch(iof_io_context_executor(ww->io), ret0, NULL), 0);
  CHECK_EQ(iof_fiber_walk(walk_waits_cb, ww), 1);
  CHECK_EQ(iof_mutex_unlock(&ww->own), 0);
  CHECK_EQ(iof_sleep_for(1000000), 0); /* after the walk, as before */
  return 0;
}

static int walk_plain_cb(const iof_fiber_info *info, void *arg) {
  walk_waits *ww = arg;
  (void)info;
  ww->calls++;
  CHECK_EQ(iof_sem_timedwait(&ww->sem, iof_deadline_after(50000000)), -EDEADLK);
  CHECK_EQ(iof_mutex_lock(&ww->held), -EDEADLK);
  CHECK_EQ(iof_chan_recv_until(ww->ch, NULL, iof_deadline_after(50000000)),
           -EDEADLK);
  return 1;
}

static void fiber_walk_callback_waits_are_edeadlk(void **state) {
  (void)state;
  walk_waits ww = {0};
  ww.io = iof_io_context_create();
  assert_non_null(ww.io);
  ww.pool = iof_thread_pool_create(1);
  assert_non_null(ww.pool);
  assert_int_equal(iof_mutex_init(&ww.held), 0);
  assert_int_equal(iof_mutex_init(&ww.own), 0);
  assert_int_equal(iof_cond_init(&ww.cond), 0);
  assert_int_equal(iof_sem_init(&ww.sem, 0), 0);
  assert_int_equal(iof_event_init(&ww.ev, false), 0);
  ww.ch = iof_chan_create(0, 1);
  assert_non_null(ww.ch);
  ww.timer = iof_timer_create(ww.io);
  assert_non_null(ww.timer);
  assert_true(iof_timer_expires_after(ww.timer, 10000000000LL) >= 0);
  int sv[2];
  assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
  assert_int_equal(iof_socket_adopt(ww.io, sv[0], &ww.rs), 0);
  assert_int_equal(iof_mutex_lock(&ww.held), 0); /* this thread's */
  launch(ww.io, walk_waits_fiber, &ww);
  run_all(ww.io);
  assert_int_equal(ww.calls, 1);
  /* From a plain thread: a blocking wait is refused the same way. */
  launch(ww.io, ret0, NULL); /* a fiber to walk over */
  ww.calls = 0;
  assert_int_equal(iof_fiber_walk(walk_plain_cb, &ww), 1);
  assert_int_equal(ww.calls, 1);
  run_all(ww.io);
  assert_int_equal(atomic_load(&failures), 0);
  /* Nothing was left queued on the objects. */
  assert_int_equal(iof_mutex_unlock(&ww.held), 0);
  assert_int_equal(iof_mutex_destroy(&ww.held), 0);
  assert_int_equal(iof_mutex_destroy(&ww.own), 0);
  assert_int_equal(iof_cond_destroy(&ww.cond), 0);
  assert_int_equal(iof_sem_destroy(&ww.sem), 0);
  assert_int_equal(iof_event_destroy(&ww.ev), 0);
  assert_int_equal(iof_chan_destroy(ww.ch), 0);
  assert_int_equal(iof_timer_destroy(ww.timer), 0);
  assert_int_equal(iof_socket_free(ww.rs), 0);
  close(sv[1]);
  assert_int_equal(iof_thread_pool_destroy(ww.pool), 0);
  assert_int_equal(iof_io_context_destroy(ww.io), 0);
}

/* ---- strands and thread pools ----------------------------------------- */

static void strand_and_pool_bad_arguments(void **state) {
  (void)state;
  errno = 0;
  assert_null(iof_strand_create((iof_executor_ref){0}));
  assert_int_equal(errno, EINVAL);
  assert_int_equal(iof_strand_destroy(NULL), -EINVAL);
  assert_true(iof_executor_empty(iof_strand_executor(NULL)));
  assert_false(iof_strand_running_in_this_thread(NULL));

  size_t bad[] = {0, 1025, SIZE_MAX};
  for (size_t i = 0; i < 3; i++) {
    errno = 0;
    assert_null(iof_thread_pool_create(bad[i]));
    assert_int_equal(errno, EINVAL);
  }
  assert_true(iof_executor_empty(iof_thread_pool_executor(NULL)));
  assert_null(iof_thread_pool_context(NULL));
  iof_thread_pool_stop(NULL);
  assert_int_equal(iof_thread_pool_join(NULL), -EINVAL);
  assert_int_equal(iof_thread_pool_destroy(NULL), -EINVAL);
}

typedef struct pool_self {
  iof_thread_pool *p;
  int join, destroy;
} pool_self;

static int pool_self_fn(void *arg) {
  pool_self *ps = arg;
  ps->join = iof_thread_pool_join(ps->p);
  ps->destroy = iof_thread_pool_destroy(ps->p);
  return 0;
}

static void pool_calls_from_its_own_thread(void **state) {
  (void)state;
  pool_self ps = {0};
  ps.p = iof_thread_pool_create(1);
  assert_non_null(ps.p);
  assert_int_equal(
      iof_launch(iof_thread_pool_executor(ps.p), pool_self_fn, &ps), 0);
  assert_int_equal(iof_thread_pool_join(ps.p), 0);
  assert_int_equal(ps.join, -EDEADLK);
  assert_int_equal(ps.destroy, -EDEADLK);
  assert_int_equal(iof_thread_pool_destroy(ps.p), 0);
}

/* A fiber joining a pool whose chain waits on that fiber's own context (an
 * iof_run hop to it): the join must not hold the thread the chain needs. */
typedef struct join_hop {
  iof_io_context *io;
  iof_thread_pool *p;
  int hop, join;
} join_hop;

static int hop_nap(void *arg) {
  (void)arg;
  return iof_sleep_for(5000000);
}

static int hop_to_io(void *arg) {
  join_hop *j = arg;
  j->hop = iof_run(iof_io_context_executor(j->io), NULL, hop_nap, NULL);
  return 0;
}

static int join_from_io(void *arg) {
  join_hop *j = arg;
  iof_sleep_for(1000000); /* the pool chain is on its way here */
  j->join = iof_thread_pool_join(j->p);
  return 0;
}

static void pool_join_from_a_fiber_its_chain_needs(void **state) {
  (void)state;
  join_hop j = {0};
  j.hop = j.join = 1;
  j.io = iof_io_context_create();
  assert_non_null(j.io);
  j.p = iof_thread_pool_create(1);
  assert_non_null(j.p);
  assert_int_equal(iof_launch(iof_io_context_executor(j.io), join_from_io, &j),
                   0);
  assert_int_equal(iof_launch(iof_thread_pool_executor(j.p), hop_to_io, &j), 0);
  iof_io_context_run(j.io);
  assert_int_equal(j.join, 0);
  assert_int_equal(j.hop, 0);
  assert_int_equal(iof_thread_pool_join(j.p), 0); /* again: done */
  assert_int_equal(iof_thread_pool_destroy(j.p), 0);
  assert_int_equal(iof_io_context_destroy(j.io), 0);
}

/* The same join from a fiber that its context's destroy is draining: the
 * drain runs no timers, so the join blocks the thread as a plain thread's
 * (the pool's work does not need this context), and destroy succeeds. */
static int pool_busy(void *arg) {
  (void)arg;
  usleep(20000);
  return 0;
}

static int join_in_drain(void *arg) {
  join_hop *j = arg;
  iof_sleep_for(INT64_MAX); /* until the shutdown */
  CHECK_EQ(iof_launch(iof_thread_pool_executor(j->p), pool_busy, NULL), 0);
  j->join = iof_thread_pool_join(j->p);
  return 0;
}

static void pool_join_from_a_fiber_in_its_context_drain(void **state) {
  (void)state;
  join_hop j = {0};
  j.join = 1;
  j.io = iof_io_context_create();
  assert_non_null(j.io);
  j.p = iof_thread_pool_create(1);
  assert_non_null(j.p);
  assert_int_equal(iof_launch(iof_io_context_executor(j.io), join_in_drain, &j),
                   0);
  assert_int_equal(iof_io_context_run_for(j.io, 2000000), 1);
  assert_int_equal(iof_io_context_destroy(j.io), 0);
  assert_int_equal(j.join, 0);
  assert_int_equal(iof_thread_pool_destroy(j.p), 0);
  assert_int_equal(atomic_load(&failures), 0);
}

/* Two threads joining one pool: the second join also returns only once
 * the work is done and the workers are gone (it returned at once, the
 * job still running). */
static atomic_int two_done;

static int two_job(void *arg) {
  (void)arg;
  usleep(30000);
  atomic_store(&two_done, 1);
  return 0;
}

static void *two_first_join(void *arg) {
  return (void *)(intptr_t)iof_thread_pool_join(arg);
}

static void pool_second_join_waits_too(void **state) {
  (void)state;
  atomic_store(&two_done, 0);
  iof_thread_pool *p = iof_thread_pool_create(2);
  assert_non_null(p);
  assert_int_equal(iof_launch(iof_thread_pool_executor(p), two_job, NULL), 0);
  pthread_t t;
  assert_int_equal(pthread_create(&t, NULL, two_first_join, p), 0);
  usleep(5000); /* the first join waits */
  assert_int_equal(iof_thread_pool_join(p), 0);
  assert_int_equal(atomic_load(&two_done), 1);
  void *rv = (void *)1;
  pthread_join(t, &rv);
  assert_int_equal((intptr_t)rv, 0);
  assert_int_equal(iof_thread_pool_join(p), 0); /* long after: at once */
  assert_int_equal(iof_thread_pool_destroy(p), 0);
}

static void count_done(void *user, int status) {
  int *d = user;
  d[0]++;
  d[1] = status;
}

static void pool_launch_after_stop(void **state) {
  (void)state;
  iof_thread_pool *p = iof_thread_pool_create(2);
  assert_non_null(p);
  iof_thread_pool_stop(p);
  iof_thread_pool_stop(p); /* twice */
  int done[2] = {0, 0};
  iof_launch_opts o = {0};
  o.on_done = count_done;
  o.user = done;
  int r = iof_run_async(iof_thread_pool_executor(p), &o, ret0, NULL);
  assert_true(r == 0 || r == -ESHUTDOWN);
  assert_int_equal(iof_thread_pool_join(p), 0);
  assert_int_equal(iof_thread_pool_join(p), 0); /* twice */
  assert_int_equal(iof_thread_pool_destroy(p), 0);
  if (r == 0) { /* queued: run or cancelled by destroy, exactly once */
    assert_int_equal(done[0], 1);
    assert_true(done[1] == 0 || done[1] == -ECANCELED);
  } else {
    assert_int_equal(done[0], 0);
  }
}

/* ---- sync primitives -------------------------------------------------- */

static void sync_null_arguments(void **state) {
  (void)state;
  assert_int_equal(iof_mutex_init(NULL), -EINVAL);
  assert_int_equal(iof_mutex_destroy(NULL), -EINVAL);
  assert_int_equal(iof_mutex_lock(NULL), -EINVAL);
  assert_int_equal(iof_mutex_timedlock(NULL, 0), -EINVAL);
  assert_int_equal(iof_mutex_trylock(NULL), -EINVAL);
  assert_int_equal(iof_mutex_unlock(NULL), -EINVAL);
  assert_int_equal(iof_cond_init(NULL), -EINVAL);
  assert_int_equal(iof_cond_destroy(NULL), -EINVAL);
  iof_mutex m = IOF_MUTEX_INIT;
  iof_cond c = IOF_COND_INIT;
  assert_int_equal(iof_cond_wait(NULL, &m), -EINVAL);
  assert_int_equal(iof_cond_wait(&c, NULL), -EINVAL);
  assert_int_equal(iof_cond_timedwait(NULL, &m, 0), -EINVAL);
  assert_int_equal(iof_cond_timedwait(&c, NULL, 0), -EINVAL);
  assert_int_equal(iof_cond_signal(NULL), -EINVAL);
  assert_int_equal(iof_cond_broadcast(NULL), -EINVAL);
  assert_int_equal(iof_sem_init(NULL, 0), -EINVAL);
  assert_int_equal(iof_sem_destroy(NULL), -EINVAL);
  assert_int_equal(iof_sem_wait(NULL), -EINVAL);
  assert_int_equal(iof_sem_timedwait(NULL, 0), -EINVAL);
  assert_int_equal(iof_sem_trywait(NULL), -EINVAL);
  assert_int_equal(iof_sem_post(NULL), -EINVAL);
  assert_int_equal(iof_sem_value(NULL), 0);
  assert_int_equal(iof_event_init(NULL, true), -EINVAL);
  assert_int_equal(iof_event_destroy(NULL), -EINVAL);
  assert_int_equal(iof_event_set(NULL), -EINVAL);
  assert_int_equal(iof_event_reset(NULL), -EINVAL);
  assert_false(iof_event_is_set(NULL));
  assert_int_equal(iof_event_wait(NULL), -EINVAL);
  assert_int_equal(iof_event_timedwait(NULL, 0), -EINVAL);
  assert_int_equal(iof_event_trywait(NULL), -EINVAL);
}

/* The read-write lock's try and timed calls: NULL, the caller's own
 * hold, extreme deadlines, a full reader count; the lock still works
 * after each refusal. */
static int rwlock_calls(void *arg) {
  (void)arg;
  CHECK_EQ(iof_rwlock_init(NULL), -EINVAL);
  CHECK_EQ(iof_rwlock_destroy(NULL), -EINVAL);
  CHECK_EQ(iof_rwlock_rdlock(NULL), -EINVAL);
  CHECK_EQ(iof_rwlock_wrlock(NULL), -EINVAL);
  CHECK_EQ(iof_rwlock_tryrdlock(NULL), -EINVAL);
  CHECK_EQ(iof_rwlock_trywrlock(NULL), -EINVAL);
  CHECK_EQ(iof_rwlock_timedrdlock(NULL, INT64_MAX), -EINVAL);
  CHECK_EQ(iof_rwlock_timedwrlock(NULL, INT64_MIN), -EINVAL);
  CHECK_EQ(iof_rwlock_unlock(NULL), -EINVAL);
  iof_rwlock rw;
  CHECK_EQ(iof_rwlock_init(&rw), 0);
  CHECK_EQ(iof_rwlock_unlock(&rw), -EPERM);
  /* Free: taken whatever the deadline. */
  CHECK_EQ(iof_rwlock_timedwrlock(&rw, INT64_MIN), 0);
  CHECK_EQ(iof_rwlock_trywrlock(&rw), -EDEADLK);
  CHECK_EQ(iof_rwlock_tryrdlock(&rw), -EDEADLK);
  CHECK_EQ(iof_rwlock_timedrdlock(&rw, INT64_MAX), -EDEADLK);
  CHECK_EQ(iof_rwlock_timedwrlock(&rw, -1), -EDEADLK);
  CHECK_EQ(iof_rwlock_destroy(&rw), -EBUSY);
  CHECK_EQ(iof_rwlock_unlock(&rw), 0);
  CHECK_EQ(iof_rwlock_unlock(&rw), -EPERM);
  CHECK_EQ(iof_rwlock_timedrdlock(&rw, INT64_MIN), 0);
  CHECK_EQ(iof_rwlock_tryrdlock(&rw), 0);
  CHECK_EQ(iof_rwlock_trywrlock(&rw), -EBUSY);
  /* A reader asking to write waits for itself: only a deadline ends it. */
  CHECK_EQ(iof_rwlock_timedwrlock(&rw, INT64_MIN), -ETIMEDOUT);
  CHECK_EQ(iof_rwlock_timedwrlock(&rw, iof_deadline_after(1000000)),
           -ETIMEDOUT);
  CHECK_EQ(iof_rwlock_destroy(&rw), -EBUSY);
  CHECK_EQ(iof_rwlock_unlock(&rw), 0);
  CHECK_EQ(iof_rwlock_unlock(&rw), 0);
  CHECK_EQ(iof_rwlock_unlock(&rw), -EPERM);
  /* A full reader count: -EAGAIN, nothing counted. */
  rw.readers = UINT_MAX;
  CHECK_EQ(iof_rwlock_tryrdlock(&rw), -EAGAIN);
  CHECK_EQ(iof_rwlock_rdlock(&rw), -EAGAIN);
  CHECK_EQ(iof_rwlock_timedrdlock(&rw, INT64_MAX), -EAGAIN);
  CHECK_EQ(rw.readers, UINT_MAX);
  rw.readers = 0;
  CHECK_EQ(iof_rwlock_wrlock(&rw), 0);
  CHECK_EQ(iof_rwlock_unlock(&rw), 0);
  CHECK_EQ(iof_rwlock_destroy(&rw), 0);
  return 0;
}

static void rwlock_bad_arguments(void **state) {
  (void)state;
  assert_int_equal(rwlock_calls(NULL), 0); /* a plain thread */
  assert_int_equal(atomic_load(&failures), 0);
  in_fiber(rwlock_calls, NULL);
}

static void sync_misuse_from_a_thread(void **state) {
  (void)state;
  iof_mutex m;
  assert_int_equal(iof_mutex_init(&m), 0);
  assert_int_equal(iof_mutex_unlock(&m), -EPERM); /* not locked */
  assert_int_equal(iof_mutex_lock(&m), 0);
  assert_int_equal(iof_mutex_lock(&m), -EDEADLK);
  assert_int_equal(iof_mutex_trylock(&m), -EBUSY);
  assert_int_equal(iof_mutex_timedlock(&m, INT64_MIN), -EDEADLK);
  assert_int_equal(iof_mutex_destroy(&m), -EBUSY);
  assert_int_equal(iof_mutex_unlock(&m), 0);
  assert_int_equal(iof_mutex_unlock(&m), -EPERM);
  /* Extreme deadlines on a free mutex: taken. */
  assert_int_equal(iof_mutex_timedlock(&m, INT64_MIN), 0);
  assert_int_equal(iof_mutex_unlock(&m), 0);
  assert_int_equal(iof_mutex_timedlock(&m, INT64_MAX), 0);
  assert_int_equal(iof_mutex_unlock(&m), 0);

  iof_cond c;
  assert_int_equal(iof_cond_init(&c), 0);
  assert_int_equal(iof_cond_wait(&c, &m), -EPERM); /* m not held */
  assert_int_equal(iof_cond_timedwait(&c, &m, INT64_MIN), -EPERM);
  assert_int_equal(iof_mutex_lock(&m), 0);
  assert_int_equal(iof_cond_timedwait(&c, &m, INT64_MIN), -ETIMEDOUT);
  assert_int_equal(iof_cond_timedwait(&c, &m, -1), -ETIMEDOUT);
  assert_int_equal(iof_mutex_unlock(&m), 0); /* held again after timeout */
  assert_int_equal(iof_cond_destroy(&c), 0);
  assert_int_equal(iof_mutex_destroy(&m), 0);

  iof_sem s;
  assert_int_equal(iof_sem_init(&s, IOF_SEM_VALUE_MAX + 1u), -EINVAL);
  assert_int_equal(iof_sem_init(&s, UINT_MAX), -EINVAL);
  assert_int_equal(iof_sem_init(&s, IOF_SEM_VALUE_MAX), 0);
  assert_int_equal(iof_sem_post(&s), -EOVERFLOW);
  assert_int_equal(iof_sem_value(&s), IOF_SEM_VALUE_MAX);
  assert_int_equal(iof_sem_trywait(&s), 0);
  assert_int_equal(iof_sem_post(&s), 0);
  assert_int_equal(iof_sem_destroy(&s), 0);
  assert_int_equal(iof_sem_init(&s, 0), 0);
  assert_int_equal(iof_sem_trywait(&s), -EAGAIN);
  assert_int_equal(iof_sem_timedwait(&s, INT64_MIN), -ETIMEDOUT);
  assert_int_equal(iof_sem_destroy(&s), 0);

  iof_event e;
  assert_int_equal(iof_event_init(&e, false), 0);
  assert_int_equal(iof_event_trywait(&e), -EAGAIN);
  assert_int_equal(iof_event_timedwait(&e, INT64_MIN), -ETIMEDOUT);
  assert_int_equal(iof_event_destroy(&e), 0);

  int64_t now = iof_deadline_after(0);
  assert_true(iof_deadline_after(INT64_MIN) >= now);
  assert_true(iof_deadline_after(INT64_MIN) < now + 1000000000LL);
  assert_int_equal(iof_deadline_after(INT64_MAX), INT64_MAX);
  assert_int_equal(iof_deadline_after(INT64_MAX - 1), INT64_MAX);
}

static int sync_misuse_fiber(void *arg) {
  (void)arg;
  iof_mutex m = IOF_MUTEX_INIT;
  CHECK_EQ(iof_mutex_unlock(&m), -EPERM);
  CHECK_EQ(iof_mutex_lock(&m), 0);
  CHECK_EQ(iof_mutex_lock(&m), -EDEADLK);
  CHECK_EQ(iof_mutex_timedlock(&m, INT64_MIN), -EDEADLK);
  CHECK_EQ(iof_mutex_unlock(&m), 0);
  iof_cond c = IOF_COND_INIT;
  CHECK_EQ(iof_cond_wait(&c, &m), -EPERM);
  CHECK_EQ(iof_mutex_lock(&m), 0);
  CHECK_EQ(iof_cond_timedwait(&c, &m, INT64_MIN), -ETIMEDOUT);
  CHECK_EQ(iof_mutex_unlock(&m), 0);
  iof_sem s = IOF_SEM_INIT(0);
  CHECK_EQ(iof_sem_timedwait(&s, INT64_MIN), -ETIMEDOUT);
  CHECK_EQ(iof_sem_timedwait(&s, 0), -ETIMEDOUT);
  iof_event e = IOF_EVENT_INIT(true);
  CHECK_EQ(iof_event_timedwait(&e, INT64_MIN), -ETIMEDOUT);
  return 0;
}

static void sync_misuse_from_a_fiber(void **state) {
  (void)state;
  in_fiber(sync_misuse_fiber, NULL);
}

/* Destroying primitives while fibers wait on them: -EBUSY, nothing
 * broken, the waiters complete normally afterwards. */
typedef struct waited {
  iof_chan *ch;
  iof_mutex m;
  iof_sem s;
  iof_event e;
  int done;
} waited;

static int w_chan(void *arg) {
  waited *w = arg;
  CHECK_EQ(iof_chan_recv(w->ch, NULL), -EPIPE);
  w->done++;
  return 0;
}

static int w_mutex(void *arg) {
  waited *w = arg;
  CHECK_EQ(iof_mutex_lock(&w->m), 0);
  CHECK_EQ(iof_mutex_unlock(&w->m), 0);
  w->done++;
  return 0;
}

static int w_sem(void *arg) {
  waited *w = arg;
  CHECK_EQ(iof_sem_wait(&w->s), 0);
  w->done++;
  return 0;
}

static int w_event(void *arg) {
  waited *w = arg;
  CHECK_EQ(iof_event_wait(&w->e), 0);
  w->done++;
  return 0;
}

static int w_checker(void *arg) {
  waited *w = arg;
  iof_executor_ref ex = iof_env_current()->executor;
  CHECK_EQ(iof_mutex_lock(&w->m), 0);
  iof_fn fns[] = {w_chan, w_mutex, w_sem, w_event};
  for (size_t i = 0; i < 4; i++) CHECK_EQ(iof_launch(ex, fns[i], w), 0);
  for (int i = 0; i < 5; i++) iof_yield();
  CHECK_EQ(iof_chan_destroy(w->ch), -EBUSY);
  CHECK_EQ(iof_mutex_destroy(&w->m), -EBUSY);
  CHECK_EQ(iof_sem_destroy(&w->s), -EBUSY);
  CHECK_EQ(iof_event_destroy(&w->e), -EBUSY);
  CHECK_EQ(iof_sem_value(&w->s), 0);
  CHECK_EQ(w->done, 0);
  CHECK_EQ(iof_chan_close(w->ch), 0);
  CHECK_EQ(iof_mutex_unlock(&w->m), 0);
  CHECK_EQ(iof_sem_post(&w->s), 0);
  CHECK_EQ(iof_event_set(&w->e), 0);
  return 0;
}

static void destroy_with_waiters_is_ebusy(void **state) {
  (void)state;
  waited w;
  memset(&w, 0, sizeof w);
  w.ch = iof_chan_create(sizeof(int), 0);
  assert_non_null(w.ch);
  assert_int_equal(iof_mutex_init(&w.m), 0);
  assert_int_equal(iof_sem_init(&w.s, 0), 0);
  assert_int_equal(iof_event_init(&w.e, true), 0);
  in_fiber(w_checker, &w);
  assert_int_equal(w.done, 4);
  assert_int_equal(iof_chan_destroy(w.ch), 0);
  assert_int_equal(iof_mutex_destroy(&w.m), 0);
  assert_int_equal(iof_sem_destroy(&w.s), 0);
  assert_int_equal(iof_event_destroy(&w.e), 0);
}

/* A waiter whose wait a stop request ended is still inside the call until
 * its fiber runs again: it then locks the primitive to take its node out
 * of the queue. A destroy in between (after a post, unlock, signal or send
 * that passed over that node) must say -EBUSY, not free the primitive
 * under it; once the waiter has returned, destroy succeeds. */
enum { K_SEM, K_MUTEX, K_EVENT, K_RWLOCK, K_COND, K_CHAN, K_KINDS };

typedef struct leaving {
  int kind;
  iof_stop_source src;
  iof_sem s;
  iof_mutex m, cm;
  iof_event e;
  iof_rwlock rw;
  iof_cond c;
  iof_chan *ch;
  int waited, busy_rc, later_rc;
} leaving;

static int leaving_waiter(void *arg) {
  leaving *l = arg;
  int r = -1;
  switch (l->kind) {
  case K_SEM:
    r = iof_sem_wait(&l->s);
    break;
  case K_MUTEX:
    r = iof_mutex_lock(&l->m);
    break;
  case K_EVENT:
    r = iof_event_wait(&l->e);
    break;
  case K_RWLOCK:
    r = iof_rwlock_wrlock(&l->rw);
    break;
  case K_COND:
    CHECK_EQ(iof_mutex_lock(&l->cm), 0);
    r = iof_cond_wait(&l->c, &l->cm);
    CHECK_EQ(iof_mutex_unlock(&l->cm), 0);
    break;
  case K_CHAN:
    r = iof_chan_recv(l->ch, NULL);
    break;
  }
  l->waited = r;
  return 0;
}

/* Destroys the primitive of l's kind; 0 or the error. */
static int leaving_destroy(leaving *l) {
  switch (l->kind) {
  case K_SEM:
    return iof_sem_destroy(&l->s);
  case K_MUTEX:
    return iof_mutex_destroy(&l->m);
  case K_EVENT:
    return iof_event_destroy(&l->e);
  case K_RWLOCK:
    return iof_rwlock_destroy(&l->rw);
  case K_COND:
    return iof_cond_destroy(&l->c);
  default:
    return iof_chan_destroy(l->ch);
  }
}

static int leaving_main(void *arg) {
  leaving *l = arg;
  if (l->kind == K_MUTEX) CHECK_EQ(iof_mutex_lock(&l->m), 0);
  if (l->kind == K_RWLOCK) CHECK_EQ(iof_rwlock_rdlock(&l->rw), 0);
  iof_launch_opts o = {0};
  o.stop_token = iof_stop_source_token(&l->src);
  CHECK_EQ(iof_run_async(iof_env_current()->executor, &o, leaving_waiter, l),
           0);
  for (int i = 0; i < 3; i++) iof_yield(); /* it waits */
  CHECK_EQ(l->waited, 1);
  CHECK_EQ(iof_stop_source_request(&l->src), true);
  /* The waiter is claimed, not yet back: pass over its node. */
  int v = 0;
  switch (l->kind) {
  case K_SEM:
    CHECK_EQ(iof_sem_post(&l->s), 0);
    CHECK_EQ(iof_sem_trywait(&l->s), 0);
    break;
  case K_MUTEX:
    CHECK_EQ(iof_mutex_unlock(&l->m), 0);
    break;
  case K_EVENT:
    CHECK_EQ(iof_event_set(&l->e), 0);
    CHECK_EQ(iof_event_trywait(&l->e), 0);
    break;
  case K_RWLOCK:
    CHECK_EQ(iof_rwlock_unlock(&l->rw), 0);
    break;
  case K_COND:
    CHECK_EQ(iof_cond_broadcast(&l->c), 0);
    break;
  case K_CHAN:
    CHECK_EQ(iof_chan_try_send(l->ch, &v), 0);
    CHECK_EQ(iof_chan_try_recv(l->ch, &v), 0);
    break;
  }
  l->busy_rc = leaving_destroy(l);
  for (int i = 0; i < 3 && l->waited == 1; i++) iof_yield();
  CHECK_EQ(l->waited, -ECANCELED);
  /* Not twice: a channel is freed by its destroy. */
  l->later_rc = l->busy_rc == 0 ? -1 : leaving_destroy(l);
  return 0;
}

static void destroy_while_a_cancelled_waiter_leaves_is_ebusy(void **state) {
  (void)state;
  int bad = 0;
  for (int k = 0; k < K_KINDS; k++) {
    leaving *l = calloc(1, sizeof *l);
    assert_non_null(l);
    l->kind = k;
    l->waited = 1;
    assert_int_equal(iof_stop_source_init(&l->src), 0);
    assert_int_equal(iof_sem_init(&l->s, 0), 0);
    assert_int_equal(iof_mutex_init(&l->m), 0);
    assert_int_equal(iof_mutex_init(&l->cm), 0);
    assert_int_equal(iof_event_init(&l->e, false), 0);
    assert_int_equal(iof_rwlock_init(&l->rw), 0);
    assert_int_equal(iof_cond_init(&l->c), 0);
    l->ch = iof_chan_create(sizeof(int), 1);
    assert_non_null(l->ch);
    in_fiber(leaving_main, l);
    if (l->busy_rc != -EBUSY || l->later_rc != 0) {
      fprintf(stderr, "kind %d: destroy gave %d, then %d\n", k, l->busy_rc,
              l->later_rc);
      bad++;
      free(l); /* the objects may be half destroyed: leave them */
      continue;
    }
    if (k != K_SEM) assert_int_equal(iof_sem_destroy(&l->s), 0);
    if (k != K_MUTEX) assert_int_equal(iof_mutex_destroy(&l->m), 0);
    assert_int_equal(iof_mutex_destroy(&l->cm), 0);
    if (k != K_EVENT) assert_int_equal(iof_event_destroy(&l->e), 0);
    if (k != K_RWLOCK) assert_int_equal(iof_rwlock_destroy(&l->rw), 0);
    if (k != K_COND) assert_int_equal(iof_cond_destroy(&l->c), 0);
    if (k != K_CHAN) assert_int_equal(iof_chan_destroy(l->ch), 0);
    iof_stop_source_destroy(&l->src);
    free(l);
  }
  assert_int_equal(bad, 0);
}

/* ---- channels --------------------------------------------------------- */

static void chan_bad_arguments(void **state) {
  (void)state;
  errno = 0;
  assert_null(iof_chan_create(SIZE_MAX, 2));
  assert_int_equal(errno, EINVAL);
  errno = 0;
  assert_null(iof_chan_create(2, SIZE_MAX));
  assert_int_equal(errno, EINVAL);
  errno = 0;
  assert_null(iof_chan_create(SIZE_MAX / 2, SIZE_MAX / 2));
  assert_int_equal(errno, EINVAL);
  assert_int_equal(iof_chan_destroy(NULL), -EINVAL);
  int v = 1;
  assert_int_equal(iof_chan_send(NULL, &v), -EINVAL);
  assert_int_equal(iof_chan_recv(NULL, &v), -EINVAL);
  assert_int_equal(iof_chan_try_send(NULL, &v), -EINVAL);
  assert_int_equal(iof_chan_try_recv(NULL, &v), -EINVAL);
  assert_int_equal(iof_chan_send_until(NULL, &v, 0), -EINVAL);
  assert_int_equal(iof_chan_recv_until(NULL, &v, 0), -EINVAL);
  assert_int_equal(iof_chan_close(NULL), -EINVAL);
  assert_int_equal(iof_chan_len(NULL), 0);
  assert_int_equal(iof_chan_cap(NULL), 0);
  assert_int_equal(iof_chan_elem_size(NULL), 0);
  assert_false(iof_chan_closed(NULL));

  iof_chan *ch = iof_chan_create(sizeof(int), 1);
  assert_non_null(ch);
  assert_int_equal(iof_chan_send(ch, NULL), -EINVAL);
  assert_int_equal(iof_chan_try_send(ch, NULL), -EINVAL);
  assert_int_equal(iof_chan_send_until(ch, NULL, INT64_MIN), -EINVAL);
  assert_int_equal(iof_chan_recv_until(ch, &v, INT64_MIN), -ETIMEDOUT);
  assert_int_equal(iof_chan_try_recv(ch, &v), -EAGAIN);
  assert_int_equal(iof_chan_try_send(ch, &v), 0);
  assert_int_equal(iof_chan_send_until(ch, &v, INT64_MIN), -ETIMEDOUT);
  assert_int_equal(iof_chan_len(ch), 1);

  iof_chan_case cs[IOF_CHAN_SELECT_MAX + 1];
  memset(cs, 0, sizeof cs);
  assert_int_equal(iof_chan_select(NULL, 1), -EINVAL);
  assert_int_equal(iof_chan_select(cs, 0), -EINVAL);
  assert_int_equal(iof_chan_select(cs, IOF_CHAN_SELECT_MAX + 1), -EINVAL);
  assert_int_equal(iof_chan_select(cs, SIZE_MAX), -EINVAL);
  assert_int_equal(iof_chan_select(cs, 2), -EINVAL); /* all disabled */
  int ops[] = {0, 3, -1, INT_MAX, INT_MIN};
  for (size_t i = 0; i < 5; i++) {
    cs[0] = (iof_chan_case){ch, ops[i], &v, 12345};
    assert_int_equal(iof_chan_select(cs, 1), -EINVAL);
    assert_int_equal(iof_chan_try_select(cs, 1), -EINVAL);
    assert_int_equal(iof_chan_select_until(cs, 1, INT64_MIN), -EINVAL);
    assert_int_equal(cs[0].status, 12345);
  }
  cs[0] = (iof_chan_case){ch, IOF_CHAN_SEND, NULL, 0};
  assert_int_equal(iof_chan_try_select(cs, 1), -EINVAL);
  cs[0] = (iof_chan_case){ch, IOF_CHAN_SEND, &v, 0};
  assert_int_equal(iof_chan_try_select(cs, 1), -EAGAIN); /* full */
  assert_int_equal(iof_chan_select_until(cs, 1, INT64_MIN), -ETIMEDOUT);
  /* The same channel in many cases. */
  for (size_t i = 0; i < IOF_CHAN_SELECT_MAX; i++)
    cs[i] = (iof_chan_case){ch, IOF_CHAN_RECV, NULL, 0};
  assert_true(iof_chan_try_select(cs, IOF_CHAN_SELECT_MAX) >= 0);
  assert_int_equal(iof_chan_len(ch), 0);

  assert_int_equal(iof_chan_close(ch), 0);
  assert_int_equal(iof_chan_close(ch), -EPIPE);
  assert_int_equal(iof_chan_send(ch, &v), -EPIPE);
  assert_int_equal(iof_chan_recv(ch, &v), -EPIPE);
  assert_int_equal(iof_chan_destroy(ch), 0);

  /* Signals only, an absurd capacity: no allocation for the buffer. */
  ch = iof_chan_create(0, SIZE_MAX);
  if (ch) {
    for (int i = 0; i < 100; i++)
      assert_int_equal(iof_chan_try_send(ch, NULL), 0);
    assert_int_equal(iof_chan_len(ch), 100);
    for (int i = 0; i < 100; i++)
      assert_int_equal(iof_chan_try_recv(ch, NULL), 0);
    assert_int_equal(iof_chan_try_recv(ch, NULL), -EAGAIN);
    assert_int_equal(iof_chan_destroy(ch), 0);
  } else {
    assert_int_equal(errno, EINVAL);
  }
}

/* ---- when_all / when_any ---------------------------------------------- */

static int when_inside(void *arg) {
  (void)arg;
  iof_fn fns[2] = {ret0, NULL};
  int w = 99;
  CHECK_EQ(iof_when_all(0, NULL, NULL, NULL), 0);
  CHECK_EQ(iof_when_all(1, NULL, NULL, NULL), -EINVAL);
  CHECK_EQ(iof_when_all(2, fns, NULL, NULL), -EINVAL);
  CHECK_EQ(iof_when_any(0, fns, NULL, &w), -EINVAL);
  CHECK_EQ(w, -1);
  CHECK_EQ(iof_when_any(1, NULL, NULL, &w), -EINVAL);
  CHECK_EQ(iof_when_any((size_t)INT_MAX + 1, fns, NULL, &w), -EINVAL);
  CHECK_EQ(iof_when_any(2, fns, NULL, NULL), -EINVAL);
  CHECK_EQ(iof_when_all(1, fns, NULL, NULL), 0);
  CHECK_EQ(iof_when_any(1, fns, NULL, &w), 0);
  CHECK_EQ(w, 0);
  return 0;
}

/* A select sending and receiving on the same unbuffered channel must not
 * rendezvous with itself. */
static int self_select_fn(void *arg) {
  (void)arg;
  iof_chan *ch = iof_chan_create(sizeof(int), 0);
  int v = 7, out = 0;
  iof_chan_case cs[2] = {{ch, IOF_CHAN_SEND, &v, 0},
                         {ch, IOF_CHAN_RECV, &out, 0}};
  CHECK_EQ(iof_chan_try_select(cs, 2), -EAGAIN);
  CHECK_EQ(iof_chan_select_until(cs, 2, iof_deadline_after(20000000)),
           -ETIMEDOUT);
  CHECK_EQ(out, 0);
  CHECK_EQ(iof_chan_len(ch), 0);
  CHECK_EQ(iof_chan_destroy(ch), 0);
  return 0;
}

static void select_never_matches_itself(void **state) {
  (void)state;
  assert_int_equal(self_select_fn(NULL), 0); /* a plain thread */
  assert_int_equal(atomic_load(&failures), 0);
  in_fiber(self_select_fn, NULL);
}

static void when_bad_arguments(void **state) {
  (void)state;
  iof_fn fns[1] = {ret0};
  int w = 5;
  assert_int_equal(iof_when_all(1, fns, NULL, NULL), -EPERM);
  assert_int_equal(iof_when_any(1, fns, NULL, &w), -EPERM);
  assert_int_equal(w, -1);
  in_fiber(when_inside, NULL);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(executor_and_context_bad_arguments, reset,
                                      disarm),
      cmocka_unit_test_setup_teardown(user_executor_without_slots, reset,
                                      disarm),
      cmocka_unit_test_setup_teardown(post_twice_is_ebusy, reset, disarm),
      cmocka_unit_test_setup_teardown(stop_bad_arguments, reset, disarm),
      cmocka_unit_test_setup_teardown(stop_double_register_is_ebusy, reset,
                                      disarm),
      cmocka_unit_test_setup_teardown(stop_register_on_other_token_is_ebusy,
                                      reset, disarm),
      cmocka_unit_test_setup_teardown(stop_register_after_fired_keeps_no_state,
                                      reset, disarm),
      cmocka_unit_test_setup_teardown(stop_callbacks_reentering, reset, disarm),
      cmocka_unit_test_setup_teardown(launch_bad_arguments, reset, disarm),
      cmocka_unit_test_setup_teardown(raw_calls_refuse_queued_launches, reset,
                                      disarm),
      cmocka_unit_test_setup_teardown(raw_resume_refuses_parked_fibers, reset,
                                      disarm),
      cmocka_unit_test_setup_teardown(launch_misuse_inside_fiber, reset,
                                      disarm),
      cmocka_unit_test_setup_teardown(fiber_walk_misuse, reset, disarm),
      cmocka_unit_test_setup_teardown(fiber_walk_callback_waits_are_edeadlk,
                                      reset, disarm),
      cmocka_unit_test_setup_teardown(strand_and_pool_bad_arguments, reset,
                                      disarm),
      cmocka_unit_test_setup_teardown(pool_calls_from_its_own_thread, reset,
                                      disarm),
      cmocka_unit_test_setup_teardown(pool_launch_after_stop, reset, disarm),
      cmocka_unit_test_setup_teardown(pool_join_from_a_fiber_its_chain_needs,
                                      reset, disarm),
      cmocka_unit_test_setup_teardown(
          pool_join_from_a_fiber_in_its_context_drain, reset, disarm),
      cmocka_unit_test_setup_teardown(pool_second_join_waits_too, reset,
                                      disarm),
      cmocka_unit_test_setup_teardown(sync_null_arguments, reset, disarm),
      cmocka_unit_test_setup_teardown(sync_misuse_from_a_thread, reset, disarm),
      cmocka_unit_test_setup_teardown(rwlock_bad_arguments, reset, disarm),
      cmocka_unit_test_setup_teardown(sync_misuse_from_a_fiber, reset, disarm),
      cmocka_unit_test_setup_teardown(destroy_with_waiters_is_ebusy, reset,
                                      disarm),
      cmocka_unit_test_setup_teardown(
          destroy_while_a_cancelled_waiter_leaves_is_ebusy, reset, disarm),
      cmocka_unit_test_setup_teardown(chan_bad_arguments, reset, disarm),
      cmocka_unit_test_setup_teardown(select_never_matches_itself, reset,
                                      disarm),
      cmocka_unit_test_setup_teardown(when_bad_arguments, reset, disarm),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
