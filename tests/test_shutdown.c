/* Destroying a context with suspended fibers: a test service holds pending
 * operations (fibers suspended through iof_await); its shutdown completes them
 * with -ECANCELED by posting them to their executor; they then fail every new
 * await at once and run to their end on the destroying thread; never
 * started chains get on_done(-ECANCELED) without fn; services are
 * destroyed last, newest first; nothing leaks. For an io_context and a
 * thread pool.
 *
 * IOF_TEST_THREADED */
#include "test_support.h"

#include <iofiber/iofiber.h>

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* Per-test watchdog (support/test_support.h). */
IOF_TEST_WATCHDOG(arm, disarm, 30)

static bool wait_count(atomic_int *c, int want) {
  for (int i = 0; i < 10000; i++) {
    if (atomic_load(c) >= want) return true;
    sleep_ms(1);
  }
  return false;
}

/* ---- the event log ----------------------------------------------------------
 */

enum {
  EV_START = 1,     /* a started chain began (before destroy) */
  EV_SHUT_OTHER,    /* the newer service's shutdown */
  EV_SHUT_PEND,     /* the pending-op service's shutdown began */
  EV_CANCELLED,     /* it posted every pending op back */
  EV_RESUMED,       /* a started chain resumed with -ECANCELED */
  EV_END,           /* it reached the end of fn */
  EV_DONE,          /* its on_done */
  EV_NEVER_DONE,    /* on_done of a never-started chain */
  EV_GATE_DONE,     /* thread pool: the chain that held the only thread */
  EV_DESTROY_OTHER, /* service destroy, newest first */
  EV_DESTROY_PEND,
};

#define LOG_MAX 128

static pthread_mutex_t log_lock = PTHREAD_MUTEX_INITIALIZER;
static int event_log[LOG_MAX];
static int log_len;

static void log_event(int e) {
  pthread_mutex_lock(&log_lock);
  if (log_len < LOG_MAX) event_log[log_len++] = e;
  pthread_mutex_unlock(&log_lock);
}

static void log_reset(void) {
  pthread_mutex_lock(&log_lock);
  log_len = 0;
  pthread_mutex_unlock(&log_lock);
}

static int first_of(int e) {
  for (int i = 0; i < log_len; i++)
    if (event_log[i] == e) return i;
  return -1;
}

static int last_of(int e) {
  for (int i = log_len - 1; i >= 0; i--)
    if (event_log[i] == e) return i;
  return -1;
}

static int count_of(int e) {
  int n = 0;
  for (int i = 0; i < log_len; i++) n += event_log[i] == e;
  return n;
}

static void dump_log(void) {
  fprintf(stderr, "event log:");
  for (int i = 0; i < log_len; i++) fprintf(stderr, " %d", event_log[i]);
  fprintf(stderr, "\n");
}

/* ---- a service holding pending operations -----------------------------------
 */

typedef struct pend_svc pend_svc;

typedef struct pend_op {
  struct pend_op *next;
  pend_svc *svc;
  iof_fiber *h;
  iof_executor_ref ex;
  int result;
  atomic_int suspend_calls;
} pend_op;

struct pend_svc {
  iof_service base;
  pthread_mutex_t lock;
  pend_op *head;
  atomic_int registered;
  /* What shutdown saw. */
  int shutdown_calls;
  int stopping;
  int launch_status;
  int raw_post_status;
  int raw_destroy_status;
  int cancelled;
  int bad_posts;
  pthread_t shutdown_thread;
  iof_executor_ref launch_ex; /* set by the test */
};

static pend_svc *pend_global;
static atomic_int pend_destroyed;

static iof_service *pend_create(iof_execution_context *ctx) {
  (void)ctx;
  pend_svc *s = calloc(1, sizeof *s);
  if (!s) return NULL;
  pthread_mutex_init(&s->lock, NULL);
  pend_global = s;
  return &s->base;
}

static int never_fn(void *arg) {
  atomic_fetch_add((atomic_int *)arg, 1);
  return 0;
}

static atomic_int stray_fn_runs;

static int raw_fn(void *arg) {
  (void)arg;
  atomic_fetch_add(&stray_fn_runs, 1);
  return 0;
}

static void pend_shutdown(iof_service *svc) {
  pend_svc *s = (pend_svc *)svc;
  log_event(EV_SHUT_PEND);
  s->shutdown_calls++;
  s->shutdown_thread = pthread_self();
  /* (1) already holds: launches and posts of new fibers fail. */
  s->stopping = iof_execution_context_stopping(svc->ctx);
  s->launch_status = iof_launch(s->launch_ex, never_fn, &stray_fn_runs);
  iof_fiber *raw = iof_fiber_create(NULL, IOF_FIBER_STACK_MIN, raw_fn, NULL);
  s->raw_post_status = iof_executor_post(s->launch_ex, raw);
  s->raw_destroy_status = iof_fiber_destroy(raw);
  /* (2) cancel what it holds: complete with -ECANCELED, dispatching each
   * fiber to its own executor (post: never resumed inside shutdown). */
  pthread_mutex_lock(&s->lock);
  pend_op *list = s->head;
  s->head = NULL;
  pthread_mutex_unlock(&s->lock);
  while (list) {
    pend_op *op = list;
    list = op->next;
    iof_fiber *h = op->h;
    op->h = NULL;
    op->result = -ECANCELED;
    if (iof_executor_post(op->ex, h) != 0) s->bad_posts++;
    s->cancelled++;
  }
  log_event(EV_CANCELLED);
}

static void pend_destroy(iof_service *svc) {
  pend_svc *s = (pend_svc *)svc;
  log_event(EV_DESTROY_PEND);
  atomic_fetch_add(&pend_destroyed, 1);
  pthread_mutex_destroy(&s->lock);
  free(s);
}

static const iof_service_key pend_key = {"pending", pend_create, pend_shutdown,
                                         pend_destroy};

static iof_fiber *pend_suspend(void *self, iof_fiber *h, const iof_env *env) {
  pend_op *op = self;
  atomic_fetch_add(&op->suspend_calls, 1);
  op->h = h;
  op->ex = env->executor; /* captured at initiation */
  op->result = 0;
  pend_svc *s = op->svc;
  pthread_mutex_lock(&s->lock);
  op->next = s->head;
  s->head = op;
  pthread_mutex_unlock(&s->lock);
  atomic_fetch_add(&s->registered, 1);
  return NULL;
}

static int pend_resume(void *self) {
  return ((pend_op *)self)->result;
}

static const iof_awaitable_vtbl pend_vt = {NULL, pend_suspend, pend_resume};

/* A second service, added after the first. */
static atomic_int other_destroyed;

static iof_service *other_create(iof_execution_context *ctx) {
  (void)ctx;
  return calloc(1, sizeof(iof_service));
}

static void other_shutdown(iof_service *svc) {
  (void)svc;
  log_event(EV_SHUT_OTHER);
}

static void other_destroy(iof_service *svc) {
  log_event(EV_DESTROY_OTHER);
  atomic_fetch_add(&other_destroyed, 1);
  free(svc);
}

/* ---- chains
 * -------------------------------------------------------------------- */

#define STARTED 3
#define NEVER 4

typedef struct started_chain {
  int idx;
  pend_op op, op2;
  int first;           /* the cancelled await */
  int second;          /* an await started after (1) */
  int second_suspends; /* suspend calls of that second await */
  int yield;           /* iof_yield after (1) */
  int launch_inside;   /* iof_launch from the fiber after (1) */
  pthread_t resumed_on;
  int done_calls;
  int done_status;
} started_chain;

static int started_fn(void *arg) {
  started_chain *c = arg;
  log_event(EV_START);
  c->first = iof_await(&c->op, &pend_vt);
  log_event(EV_RESUMED);
  c->resumed_on = pthread_self();
  c->second = iof_await(&c->op2, &pend_vt);
  c->second_suspends = atomic_load(&c->op2.suspend_calls);
  c->yield = iof_yield();
  c->launch_inside =
      iof_launch(iof_env_current()->executor, never_fn, &stray_fn_runs);
  log_event(EV_END);
  return 100 + c->idx;
}

static void started_done(void *user, int status) {
  started_chain *c = user;
  c->done_calls++;
  c->done_status = status;
  log_event(EV_DONE);
}

typedef struct never_chain {
  atomic_int fn_runs;
  atomic_int done_calls;
  atomic_int done_status;
} never_chain;

static void never_done(void *user, int status) {
  never_chain *n = user;
  atomic_fetch_add(&n->done_calls, 1);
  atomic_store(&n->done_status, status);
  log_event(EV_NEVER_DONE);
}

typedef struct scenario {
  started_chain started[STARTED];
  never_chain never[NEVER];
  iof_frame_allocator *track;
} scenario;

static void launch_started(scenario *sc, iof_executor_ref ex) {
  for (int i = 0; i < STARTED; i++) {
    started_chain *c = &sc->started[i];
    memset(c, 0, sizeof *c);
    c->idx = i;
    c->op.svc = pend_global;
    c->op2.svc = pend_global;
    iof_launch_opts o;
    memset(&o, 0, sizeof o);
    o.on_done = started_done;
    o.user = c;
    assert_int_equal(iof_run_async(ex, &o, started_fn, c), 0);
  }
}

static void launch_never(scenario *sc, iof_executor_ref ex) {
  for (int i = 0; i < NEVER; i++) {
    never_chain *n = &sc->never[i];
    memset(n, 0, sizeof *n);
    iof_launch_opts o;
    memset(&o, 0, sizeof o);
    o.on_done = never_done;
    o.user = n;
    assert_int_equal(iof_run_async(ex, &o, never_fn, &n->fn_runs), 0);
  }
}

/* Checks everything the destroy must have done, steps (1)-(5). Snapshot
 * taken from the pend service (freed by now) in `seen`. */
typedef struct seen_shutdown {
  int shutdown_calls, stopping, launch_status, raw_post_status,
      raw_destroy_status, cancelled, bad_posts;
  pthread_t shutdown_thread;
} seen_shutdown;

static seen_shutdown seen;

static void snapshot_pend(pend_svc *s) {
  seen.shutdown_calls = s->shutdown_calls;
  seen.stopping = s->stopping;
  seen.launch_status = s->launch_status;
  seen.raw_post_status = s->raw_post_status;
  seen.raw_destroy_status = s->raw_destroy_status;
  seen.cancelled = s->cancelled;
  seen.bad_posts = s->bad_posts;
  seen.shutdown_thread = s->shutdown_thread;
}

/* The pend service's destroy runs last; take the snapshot in the other
 * service's destroy (which runs before it). */
static void other_destroy_snapshot(iof_service *svc) {
  snapshot_pend(pend_global);
  other_destroy(svc);
}

static const iof_service_key other_key_snap = {
    "other-snap", other_create, other_shutdown, other_destroy_snapshot};

static pend_svc *setup_services(iof_execution_context *ctx,
                                iof_executor_ref ex) {
  pend_global = NULL;
  atomic_store(&pend_destroyed, 0);
  atomic_store(&other_destroyed, 0);
  atomic_store(&stray_fn_runs, 0);
  pend_svc *s = (pend_svc *)iof_use_service(ctx, &pend_key);
  assert_non_null(s);
  assert_ptr_equal(s, pend_global);
  s->launch_ex = ex;
  assert_non_null(iof_use_service(ctx, &other_key_snap));
  return s;
}

static void check_scenario(scenario *sc) {
  dump_log();
  /* (1) */
  assert_int_equal(seen.shutdown_calls, 1);
  assert_true(seen.stopping);
  assert_int_equal(seen.launch_status, -ESHUTDOWN);
  assert_int_equal(seen.raw_post_status, -ESHUTDOWN);
  assert_int_equal(seen.raw_destroy_status, 0); /* the fiber was not lost */
  assert_true(pthread_equal(seen.shutdown_thread, pthread_self()));
  /* (2) */
  assert_int_equal(seen.cancelled, STARTED);
  assert_int_equal(seen.bad_posts, 0);
  /* (3) every started fiber unwound to its end, on this thread */
  for (int i = 0; i < STARTED; i++) {
    started_chain *c = &sc->started[i];
    assert_int_equal(c->first, -ECANCELED);
    assert_int_equal(c->second, -ECANCELED);
    assert_int_equal(c->second_suspends, 0); /* failed without suspending */
    assert_int_equal(c->yield, -ECANCELED);
    assert_int_equal(c->launch_inside, -ESHUTDOWN);
    assert_true(pthread_equal(c->resumed_on, pthread_self()));
    assert_int_equal(c->done_calls, 1);
    assert_int_equal(c->done_status, 100 + i);
    assert_int_equal(atomic_load(&c->op.suspend_calls), 1);
  }
  /* (4) never-started chains: on_done(-ECANCELED) once, fn never ran */
  for (int i = 0; i < NEVER; i++) {
    never_chain *n = &sc->never[i];
    assert_int_equal(atomic_load(&n->fn_runs), 0);
    assert_int_equal(atomic_load(&n->done_calls), 1);
    assert_int_equal(atomic_load(&n->done_status), -ECANCELED);
  }
  assert_int_equal(atomic_load(&stray_fn_runs), 0);
  /* (5) */
  assert_int_equal(atomic_load(&pend_destroyed), 1);
  assert_int_equal(atomic_load(&other_destroyed), 1);

  /* The order, from the log. */
  assert_int_equal(count_of(EV_START), STARTED);
  assert_int_equal(count_of(EV_SHUT_OTHER), 1);
  assert_int_equal(count_of(EV_SHUT_PEND), 1);
  assert_int_equal(count_of(EV_RESUMED), STARTED);
  assert_int_equal(count_of(EV_END), STARTED);
  assert_int_equal(count_of(EV_DONE), STARTED);
  assert_int_equal(count_of(EV_NEVER_DONE), NEVER);
  assert_int_equal(count_of(EV_DESTROY_OTHER), 1);
  assert_int_equal(count_of(EV_DESTROY_PEND), 1);
  /* Services shut down newest first, before anything is resumed. */
  assert_true(last_of(EV_START) < first_of(EV_SHUT_OTHER));
  assert_true(first_of(EV_SHUT_OTHER) < first_of(EV_SHUT_PEND));
  /* (2) before (3): no fiber resumed inside the shutdown call. */
  assert_true(first_of(EV_CANCELLED) < first_of(EV_RESUMED));
  /* (3) before (4): every started fiber ended before any never-started
   * chain is cancelled. */
  assert_true(last_of(EV_DONE) < first_of(EV_NEVER_DONE));
  /* (4) before (5); (5) newest first. */
  assert_true(last_of(EV_NEVER_DONE) < first_of(EV_DESTROY_OTHER));
  assert_true(first_of(EV_DESTROY_OTHER) < first_of(EV_DESTROY_PEND));
  assert_int_equal(event_log[log_len - 1], EV_DESTROY_PEND);

  /* Nothing leaked: every frame back to the tracking allocator. */
  iof_tracking_stats st;
  assert_int_equal(iof_tracking_allocator_stats(sc->track, &st), 0);
  assert_int_equal(st.live, 0);
  assert_int_equal(st.total, st.freed);
  assert_int_equal(iof_tracking_allocator_destroy(sc->track), 0);
}

/* ---- io_context
 * -------------------------------------------------------------- */

static void
destroy_io_context_cancels_pending_and_unwinds_in_order(void **state) {
  (void)state;
  log_reset();
  static scenario sc;
  memset(&sc, 0, sizeof sc);
  iof_io_context *io = iof_io_context_create();
  assert_non_null(io);
  iof_execution_context *ctx = iof_io_context_context(io);
  iof_executor_ref ex = iof_io_context_executor(io);
  sc.track = iof_tracking_allocator_create(NULL);
  assert_non_null(sc.track);
  assert_int_equal(iof_context_set_frame_allocator(ctx, sc.track), 0);
  pend_svc *s = setup_services(ctx, ex);

  launch_started(&sc, ex);
  /* Run them until they are all suspended on their pending op (the
   * pending ops keep counted work, so use poll: it does not block). */
  assert_int_equal(iof_io_context_poll(io), STARTED);
  assert_int_equal(atomic_load(&s->registered), STARTED);
  launch_never(&sc, ex);
  iof_tracking_stats st;
  assert_int_equal(iof_tracking_allocator_stats(sc.track, &st), 0);
  assert_int_equal(st.live, STARTED + NEVER);

  assert_int_equal(iof_io_context_destroy(io), 0);
  check_scenario(&sc);
}

/* ---- thread pool
 * ---------------------------------------------------------------- */

typedef struct gate {
  atomic_int started;
  atomic_int open;
} gate;

static int gate_fn(void *arg) {
  gate *g = arg;
  atomic_store(&g->started, 1);
  for (int i = 0; i < 10000 && !atomic_load(&g->open); i++) sleep_ms(1);
  return 0;
}

static void gate_done(void *user, int status) {
  (void)user;
  (void)status;
  log_event(EV_GATE_DONE);
}

static void
destroy_thread_pool_cancels_pending_and_unwinds_in_order(void **state) {
  (void)state;
  log_reset();
  static scenario sc;
  memset(&sc, 0, sizeof sc);
  iof_thread_pool *p = iof_thread_pool_create(1);
  assert_non_null(p);
  iof_execution_context *ctx = iof_thread_pool_context(p);
  iof_executor_ref ex = iof_thread_pool_executor(p);
  sc.track = iof_tracking_allocator_create(NULL);
  assert_non_null(sc.track);
  assert_int_equal(iof_context_set_frame_allocator(ctx, sc.track), 0);
  pend_svc *s = setup_services(ctx, ex);

  launch_started(&sc, ex);
  assert_true(wait_count(&s->registered, STARTED));
  /* Occupy the only thread, queue never-started chains behind it, stop
   * the pool (the queue is abandoned), then let the thread go. */
  gate g = {0, 0};
  iof_launch_opts o;
  memset(&o, 0, sizeof o);
  o.on_done = gate_done;
  assert_int_equal(iof_run_async(ex, &o, gate_fn, &g), 0);
  assert_true(wait_count(&g.started, 1));
  launch_never(&sc, ex);
  iof_thread_pool_stop(p);
  atomic_store(&g.open, 1);

  assert_int_equal(iof_thread_pool_destroy(p), 0);
  assert_int_equal(count_of(EV_GATE_DONE), 1);
  assert_true(first_of(EV_GATE_DONE) < first_of(EV_SHUT_OTHER));
  check_scenario(&sc);
}

/* ---- a ready (yielding) fiber at destroy
 * ----------------------------------------- */

typedef struct yielder {
  int yields_ok;
  int last;
  int done_status;
  int done_calls;
} yielder;

static int yield_forever_fn(void *arg) {
  yielder *y = arg;
  for (int i = 0; i < 1000000; i++) {
    int r = iof_yield();
    if (r != 0) {
      y->last = r;
      return r;
    }
    y->yields_ok++;
  }
  return 0;
}

static void yield_done(void *user, int status) {
  yielder *y = user;
  y->done_calls++;
  y->done_status = status;
}

static void destroy_runs_ready_fiber_whose_next_await_fails(void **state) {
  (void)state;
  iof_io_context *io = iof_io_context_create();
  assert_non_null(io);
  yielder y;
  memset(&y, 0, sizeof y);
  iof_launch_opts o;
  memset(&o, 0, sizeof o);
  o.on_done = yield_done;
  o.user = &y;
  assert_int_equal(
      iof_run_async(iof_io_context_executor(io), &o, yield_forever_fn, &y), 0);
  assert_int_equal(iof_io_context_run_one(io), 1);
  assert_int_equal(iof_io_context_run_one(io), 1);
  assert_int_equal(y.yields_ok, 1);
  assert_int_equal(iof_io_context_destroy(io), 0);
  /* Resumed once more (its pending yield completed), then the next yield
   * failed at once and the chain ended. */
  assert_int_equal(y.yields_ok, 2);
  assert_int_equal(y.last, -ECANCELED);
  assert_int_equal(y.done_calls, 1);
  assert_int_equal(y.done_status, -ECANCELED);
}

/* ---- a fiber nobody will ever wake: reported, destroy returns
 * ------------------- */

static iof_fiber *_Atomic dropped; /* the fiber nobody wakes (yet) */

static iof_fiber *drop_suspend(void *self, iof_fiber *h, const iof_env *env) {
  (void)env;
  atomic_store(&dropped, h);
  atomic_store((atomic_int *)self, 1);
  return NULL;
}

static const iof_awaitable_vtbl drop_vt = {NULL, drop_suspend, NULL};

static int stuck_fn(void *arg) {
  iof_await(arg, &drop_vt);
  return 0;
}

static void destroy_reports_a_fiber_that_will_not_end(void **state) {
  (void)state;
  iof_io_context *io = iof_io_context_create();
  assert_non_null(io);
  atomic_int suspended = 0;
  assert_int_equal(
      iof_launch(iof_io_context_executor(io), stuck_fn, &suspended), 0);
  assert_int_equal(iof_io_context_poll(io), 1);
  assert_int_equal(atomic_load(&suspended), 1);
  /* Capture stderr around the destroy. */
  fflush(stderr);
  FILE *tmp = tmpfile();
  assert_non_null(tmp);
  int saved = dup(2);
  assert_true(saved >= 0);
  assert_true(dup2(fileno(tmp), 2) >= 0);
  int r = iof_io_context_destroy(io);
  fflush(stderr);
  dup2(saved, 2);
  close(saved);
  /* Rule: a context is never freed under a chain still counted on it
   * (its wake would touch freed memory): -EBUSY, the context kept. */
  assert_int_equal(r, -EBUSY);
  char buf[512] = {0};
  rewind(tmp);
  size_t n = fread(buf, 1, sizeof buf - 1, tmp);
  fclose(tmp);
  assert_true(n > 0); /* a report on stderr */
  assert_non_null(strstr(buf, "io_context"));
  /* The late wake is still accepted (a started fiber), and a second
   * destroy drains it and frees the context. */
  iof_fiber *h = atomic_exchange(&dropped, NULL);
  assert_non_null(h);
  assert_int_equal(iof_executor_post(iof_io_context_executor(io), h), 0);
  assert_int_equal(iof_io_context_destroy(io), 0);
}

/* The same rule for a thread pool: the chain suspended outside the pool
 * makes destroy -EBUSY; after its wake a second destroy finishes. */
static void pool_destroy_is_ebusy_under_a_suspended_chain(void **state) {
  (void)state;
  iof_thread_pool *p = iof_thread_pool_create(2);
  assert_non_null(p);
  atomic_int suspended = 0;
  assert_int_equal(
      iof_launch(iof_thread_pool_executor(p), stuck_fn, &suspended), 0);
  for (int i = 0; i < 10000 && !atomic_load(&suspended); i++) sleep_ms(1);
  assert_int_equal(atomic_load(&suspended), 1);
  fflush(stderr);
  int saved = dup(2);
  int null = open("/dev/null", O_WRONLY);
  assert_true(saved >= 0 && null >= 0);
  dup2(null, 2);
  int r = iof_thread_pool_destroy(p);
  dup2(saved, 2);
  close(saved);
  close(null);
  assert_int_equal(r, -EBUSY);
  iof_fiber *h = atomic_exchange(&dropped, NULL);
  assert_non_null(h);
  assert_int_equal(iof_executor_post(iof_thread_pool_executor(p), h), 0);
  assert_int_equal(iof_thread_pool_destroy(p), 0);
}

#define T(f) cmocka_unit_test_setup_teardown(f, arm, disarm)

int main(void) {
  const struct CMUnitTest tests[] = {
      T(destroy_io_context_cancels_pending_and_unwinds_in_order),
      T(destroy_thread_pool_cancels_pending_and_unwinds_in_order),
      T(destroy_runs_ready_fiber_whose_next_await_fails),
      T(destroy_reports_a_fiber_that_will_not_end),
      T(pool_destroy_is_ebusy_under_a_suspended_chain),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
