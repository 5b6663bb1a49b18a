/* Execution context services and frame allocator: use/make/find/has, creation
 * once under racing threads, nested factories, EDEADLK for a self-referencing
 * factory, ENOMEM for a failed create, shutdown/destroy order, and
 * iof_context_frame_allocator.
 *
 * IOF_TEST_THREADED */
#include "test_support.h"

#include <iofiber/iofiber.h>

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* Per-test watchdog (support/test_support.h). */
IOF_TEST_WATCHDOG(arm, disarm, 30)

/* ---- an event log -----------------------------------------------------------
 */

static pthread_mutex_t log_lock = PTHREAD_MUTEX_INITIALIZER;
static char event_log[256];
static size_t log_len;

static void log_event(char a, char b) {
  pthread_mutex_lock(&log_lock);
  if (log_len + 3 < sizeof event_log) {
    event_log[log_len++] = a;
    event_log[log_len++] = b;
    event_log[log_len++] = ' ';
    event_log[log_len] = 0;
  }
  pthread_mutex_unlock(&log_lock);
}

static void log_reset(void) {
  pthread_mutex_lock(&log_lock);
  log_len = 0;
  event_log[0] = 0;
  pthread_mutex_unlock(&log_lock);
}

/* ---- logging services: id '1'..'9' ------------------------------------------
 */

typedef struct tsvc {
  iof_service base;
  char id;
  iof_execution_context *ctx_at_create;
  iof_service *dep; /* a service this one obtained in its create */
  iof_service *self_lookup;
  int self_lookup_errno;
} tsvc;

static atomic_int creates[10];

static tsvc *tsvc_new(iof_execution_context *ctx, char id) {
  tsvc *s = calloc(1, sizeof *s);
  if (!s) return NULL;
  s->id = id;
  s->ctx_at_create = ctx;
  atomic_fetch_add(&creates[id - '0'], 1);
  log_event('c', id);
  return s;
}

static void tsvc_shutdown(iof_service *svc) {
  log_event('s', ((tsvc *)svc)->id);
}

static void tsvc_destroy(iof_service *svc) {
  log_event('d', ((tsvc *)svc)->id);
  free(svc);
}

#define PLAIN_SERVICE(n)                                                       \
  static iof_service *create_##n(iof_execution_context *ctx) {                 \
    return &tsvc_new(ctx, '0' + n)->base;                                      \
  }                                                                            \
  static const iof_service_key key##n = {"svc" #n, create_##n, tsvc_shutdown,  \
                                         tsvc_destroy};

PLAIN_SERVICE(1)
PLAIN_SERVICE(2)
PLAIN_SERVICE(3)

/* 4: slow create, for the race. */
static iof_service *create_4(iof_execution_context *ctx) {
  sleep_ms(20);
  return &tsvc_new(ctx, '4')->base;
}
static const iof_service_key key4 = {"slow", create_4, tsvc_shutdown,
                                     tsvc_destroy};

/* 5 uses 2 in its create (a factory using another service). */
static iof_service *create_5(iof_execution_context *ctx) {
  tsvc *s = tsvc_new(ctx, '5');
  s->dep = iof_use_service(ctx, &key2);
  return &s->base;
}
static const iof_service_key key5 = {"uses2", create_5, tsvc_shutdown,
                                     tsvc_destroy};

/* 6 asks for itself in its create. */
static const iof_service_key key6;
static iof_service *create_6(iof_execution_context *ctx) {
  tsvc *s = tsvc_new(ctx, '6');
  errno = 0;
  s->self_lookup = iof_use_service(ctx, &key6);
  s->self_lookup_errno = errno;
  return &s->base;
}
static const iof_service_key key6 = {"self", create_6, tsvc_shutdown,
                                     tsvc_destroy};

/* 7 asks for 8, whose create asks for 7 (a cycle through two keys). */
static const iof_service_key key7, key8;
static iof_service *create_7(iof_execution_context *ctx) {
  tsvc *s = tsvc_new(ctx, '7');
  s->dep = iof_use_service(ctx, &key8);
  return &s->base;
}
static iof_service *create_8(iof_execution_context *ctx) {
  tsvc *s = tsvc_new(ctx, '8');
  errno = 0;
  s->self_lookup = iof_use_service(ctx, &key7);
  s->self_lookup_errno = errno;
  return &s->base;
}
static const iof_service_key key7 = {"cycle7", create_7, tsvc_shutdown,
                                     tsvc_destroy};
static const iof_service_key key8 = {"cycle8", create_8, tsvc_shutdown,
                                     tsvc_destroy};

/* 9 fails to create while `fail9` is set. */
static atomic_int fail9;
static iof_service *create_9(iof_execution_context *ctx) {
  if (atomic_load(&fail9)) {
    atomic_fetch_add(&creates[9], 1);
    return NULL;
  }
  return &tsvc_new(ctx, '9')->base;
}
static const iof_service_key key9 = {"failing", create_9, tsvc_shutdown,
                                     tsvc_destroy};

static void reset_counts(void) {
  for (int i = 0; i < 10; i++) atomic_store(&creates[i], 0);
  atomic_store(&fail9, 0);
  log_reset();
}

static iof_execution_context *new_ctx(void) {
  iof_execution_context *c = calloc(1, sizeof *c);
  assert_non_null(c);
  assert_int_equal(iof_execution_context_init(c), 0);
  return c;
}

static void free_ctx(iof_execution_context *c) {
  iof_execution_context_destroy(c);
  free(c);
}

/* ---- tests
 * ---------------------------------------------------------------------- */

typedef struct race {
  iof_execution_context *ctx;
  const iof_service_key *key;
  pthread_barrier_t *bar;
  iof_service *got;
} race;

static void *racer(void *arg) {
  race *r = arg;
  pthread_barrier_wait(r->bar);
  r->got = iof_use_service(r->ctx, r->key);
  return NULL;
}

static void use_service_creates_once_under_8_racing_threads(void **state) {
  (void)state;
  for (int round = 0; round < 40; round++) {
    reset_counts();
    const iof_service_key *key = round % 4 == 0 ? &key4 : &key1;
    iof_execution_context *ctx = new_ctx();
    pthread_barrier_t bar;
    pthread_barrier_init(&bar, NULL, 8);
    race r[8];
    pthread_t t[8];
    for (int i = 0; i < 8; i++) {
      r[i] = (race){ctx, key, &bar, NULL};
      assert_int_equal(pthread_create(&t[i], NULL, racer, &r[i]), 0);
    }
    for (int i = 0; i < 8; i++) pthread_join(t[i], NULL);
    pthread_barrier_destroy(&bar);
    int id = key == &key4 ? 4 : 1;
    assert_int_equal(atomic_load(&creates[id]), 1);
    assert_non_null(r[0].got);
    for (int i = 1; i < 8; i++) assert_ptr_equal(r[i].got, r[0].got);
    assert_ptr_equal(iof_find_service(ctx, key), r[0].got);
    assert_ptr_equal(((tsvc *)r[0].got)->ctx_at_create, ctx);
    free_ctx(ctx);
    assert_int_equal(atomic_load(&creates[id]), 1);
  }
}

static void make_service_fails_with_eexist_when_present(void **state) {
  (void)state;
  reset_counts();
  iof_execution_context *ctx = new_ctx();
  iof_service *s = iof_make_service(ctx, &key1);
  assert_non_null(s);
  errno = 0;
  assert_null(iof_make_service(ctx, &key1));
  assert_int_equal(errno, EEXIST);
  assert_ptr_equal(iof_use_service(ctx, &key1), s);
  assert_int_equal(atomic_load(&creates[1]), 1);
  /* Present through use_service first, then make: EEXIST too. */
  assert_non_null(iof_use_service(ctx, &key2));
  errno = 0;
  assert_null(iof_make_service(ctx, &key2));
  assert_int_equal(errno, EEXIST);
  assert_int_equal(atomic_load(&creates[2]), 1);
  free_ctx(ctx);
}

static void use_service_rejects_bad_arguments(void **state) {
  (void)state;
  iof_execution_context *ctx = new_ctx();
  static const iof_service_key nocreate = {"nocreate", NULL, NULL, NULL};
  errno = 0;
  assert_null(iof_use_service(NULL, &key1));
  assert_int_equal(errno, EINVAL);
  errno = 0;
  assert_null(iof_use_service(ctx, NULL));
  assert_int_equal(errno, EINVAL);
  errno = 0;
  assert_null(iof_use_service(ctx, &nocreate));
  assert_int_equal(errno, EINVAL);
  errno = 0;
  assert_null(iof_make_service(ctx, &nocreate));
  assert_int_equal(errno, EINVAL);
  assert_null(iof_find_service(NULL, &key1));
  assert_false(iof_has_service(ctx, NULL));
  assert_int_equal(iof_execution_context_init(NULL), -EINVAL);
  free_ctx(ctx);
}

static void find_and_has_never_create(void **state) {
  (void)state;
  reset_counts();
  iof_execution_context *ctx = new_ctx();
  assert_null(iof_find_service(ctx, &key1));
  assert_false(iof_has_service(ctx, &key1));
  assert_null(iof_find_service(ctx, &key1));
  assert_int_equal(atomic_load(&creates[1]), 0);
  iof_service *s = iof_use_service(ctx, &key1);
  assert_non_null(s);
  assert_ptr_equal(iof_find_service(ctx, &key1), s);
  assert_true(iof_has_service(ctx, &key1));
  assert_false(iof_has_service(ctx, &key2));
  assert_int_equal(atomic_load(&creates[1]), 1);
  assert_int_equal(atomic_load(&creates[2]), 0);
  free_ctx(ctx);
}

static void factory_using_another_service_does_not_deadlock(void **state) {
  (void)state;
  reset_counts();
  iof_execution_context *ctx = new_ctx();
  tsvc *s5 = (tsvc *)iof_use_service(ctx, &key5);
  assert_non_null(s5);
  assert_non_null(s5->dep);
  assert_ptr_equal(iof_find_service(ctx, &key2), s5->dep);
  assert_int_equal(atomic_load(&creates[5]), 1);
  assert_int_equal(atomic_load(&creates[2]), 1);
  /* Also from 8 racing threads: one creation each, nobody stuck. */
  iof_execution_context *ctx2 = new_ctx();
  pthread_barrier_t bar;
  pthread_barrier_init(&bar, NULL, 8);
  race r[8];
  pthread_t t[8];
  for (int i = 0; i < 8; i++) {
    r[i] = (race){ctx2, i % 2 ? &key5 : &key2, &bar, NULL};
    assert_int_equal(pthread_create(&t[i], NULL, racer, &r[i]), 0);
  }
  for (int i = 0; i < 8; i++) pthread_join(t[i], NULL);
  pthread_barrier_destroy(&bar);
  for (int i = 0; i < 8; i++) assert_non_null(r[i].got);
  assert_int_equal(atomic_load(&creates[5]), 2);
  assert_int_equal(atomic_load(&creates[2]), 2);
  assert_ptr_equal(((tsvc *)iof_find_service(ctx2, &key5))->dep,
                   iof_find_service(ctx2, &key2));
  free_ctx(ctx2);
  free_ctx(ctx);
}

/* The dependent service (5, whose create obtained 2) is added once its
 * create returns, after 2: it is shut down and destroyed before 2, so
 * its shutdown and destroy may still use 2. */
static void
nested_factory_service_shut_down_before_its_dependency(void **state) {
  (void)state;
  reset_counts();
  iof_execution_context *ctx = new_ctx();
  assert_non_null(iof_use_service(ctx, &key1));
  assert_non_null(iof_use_service(ctx, &key5));
  assert_non_null(iof_use_service(ctx, &key3));
  log_reset();
  iof_execution_context_shutdown(ctx);
  assert_string_equal(event_log, "s3 s5 s2 s1 ");
  log_reset();
  free_ctx(ctx);
  assert_string_equal(event_log, "d3 d5 d2 d1 ");
}

static void create_asking_for_its_own_key_gets_edeadlk(void **state) {
  (void)state;
  reset_counts();
  iof_execution_context *ctx = new_ctx();
  tsvc *s6 = (tsvc *)iof_use_service(ctx, &key6);
  assert_non_null(s6);
  assert_null(s6->self_lookup);
  assert_int_equal(s6->self_lookup_errno, EDEADLK);
  assert_int_equal(atomic_load(&creates[6]), 1);
  assert_ptr_equal(iof_use_service(ctx, &key6), s6);
  /* Through a second key: 7 -> 8 -> 7. */
  tsvc *s7 = (tsvc *)iof_use_service(ctx, &key7);
  assert_non_null(s7);
  tsvc *s8 = (tsvc *)s7->dep;
  assert_non_null(s8);
  assert_null(s8->self_lookup);
  assert_int_equal(s8->self_lookup_errno, EDEADLK);
  assert_int_equal(atomic_load(&creates[7]), 1);
  assert_int_equal(atomic_load(&creates[8]), 1);
  free_ctx(ctx);
}

static void failed_create_returns_enomem_and_leaves_nothing(void **state) {
  (void)state;
  reset_counts();
  iof_execution_context *ctx = new_ctx();
  atomic_store(&fail9, 1);
  errno = 0;
  assert_null(iof_use_service(ctx, &key9));
  assert_int_equal(errno, ENOMEM);
  assert_false(iof_has_service(ctx, &key9));
  assert_null(iof_find_service(ctx, &key9));
  errno = 0;
  assert_null(iof_make_service(ctx, &key9));
  assert_int_equal(errno, ENOMEM); /* not EEXIST: nothing was left */
  assert_int_equal(atomic_load(&creates[9]), 2);
  /* A later use tries again and succeeds. */
  atomic_store(&fail9, 0);
  tsvc *s = (tsvc *)iof_use_service(ctx, &key9);
  assert_non_null(s);
  assert_true(iof_has_service(ctx, &key9));
  log_reset();
  free_ctx(ctx);
  assert_string_equal(event_log, "s9 d9 ");
}

static void shutdown_runs_each_service_once_in_reverse_order(void **state) {
  (void)state;
  reset_counts();
  iof_execution_context *ctx = new_ctx();
  iof_service *s1 = iof_use_service(ctx, &key1);
  iof_service *s2 = iof_make_service(ctx, &key2);
  iof_service *s3 = iof_use_service(ctx, &key3);
  assert_non_null(s1);
  assert_non_null(s2);
  assert_non_null(s3);
  log_reset();
  assert_false(iof_execution_context_stopping(ctx));
  iof_execution_context_shutdown(ctx);
  assert_true(iof_execution_context_stopping(ctx));
  iof_execution_context_shutdown(ctx); /* a second call does nothing */
  assert_string_equal(event_log, "s3 s2 s1 ");
  /* find/has still valid after shutdown, until destroy. */
  assert_ptr_equal(iof_find_service(ctx, &key1), s1);
  assert_ptr_equal(iof_find_service(ctx, &key2), s2);
  assert_true(iof_has_service(ctx, &key3));
  assert_false(iof_has_service(ctx, &key4));
  /* No new service once shut down. */
  errno = 0;
  assert_null(iof_use_service(ctx, &key4));
  assert_int_equal(errno, ESHUTDOWN);
  assert_int_equal(atomic_load(&creates[4]), 0);
  log_reset();
  free_ctx(ctx);
  /* Destroy: no second shutdown, frees newest first. */
  assert_string_equal(event_log, "d3 d2 d1 ");
}

static void destroy_shuts_down_all_then_frees_in_reverse_order(void **state) {
  (void)state;
  reset_counts();
  iof_execution_context *ctx = new_ctx();
  assert_non_null(iof_use_service(ctx, &key2));
  assert_non_null(iof_use_service(ctx, &key3));
  assert_non_null(iof_use_service(ctx, &key1));
  log_reset();
  free_ctx(ctx); /* no explicit shutdown */
  assert_string_equal(event_log, "s1 s3 s2 d1 d3 d2 ");
}

static void new_context_has_no_services(void **state) {
  (void)state;
  reset_counts();
  const iof_service_key *keys[] = {&key1, &key2, &key3, &key4, &key5,
                                   &key6, &key7, &key8, &key9};
  iof_execution_context *ctx = new_ctx();
  iof_io_context *io = iof_io_context_create();
  iof_thread_pool *p = iof_thread_pool_create(1);
  assert_non_null(io);
  assert_non_null(p);
  iof_execution_context *ctxs[] = {ctx, iof_io_context_context(io),
                                   iof_thread_pool_context(p)};
  for (int c = 0; c < 3; c++) {
    for (size_t k = 0; k < sizeof keys / sizeof keys[0]; k++) {
      assert_false(iof_has_service(ctxs[c], keys[k]));
      assert_null(iof_find_service(ctxs[c], keys[k]));
    }
    assert_false(iof_execution_context_stopping(ctxs[c]));
  }
  /* One context's service is not another's. */
  assert_non_null(iof_use_service(iof_io_context_context(io), &key1));
  assert_false(iof_has_service(ctx, &key1));
  assert_false(iof_has_service(iof_thread_pool_context(p), &key1));
  free_ctx(ctx);
  assert_int_equal(iof_io_context_destroy(io), 0);
  assert_int_equal(iof_thread_pool_destroy(p), 0);
  for (int i = 0; i < 10; i++)
    assert_int_equal(atomic_load(&creates[i]), i == 1 ? 1 : 0);
}

/* ---- frame allocator -------------------------------------------------------
 */

typedef struct alloc_probe {
  iof_frame_allocator *seen;
  iof_frame_allocator *env_alloc;
} alloc_probe;

static int alloc_fn(void *arg) {
  alloc_probe *a = arg;
  a->seen = iof_current_frame_allocator();
  a->env_alloc = iof_env_current()->frame_allocator;
  return 0;
}

static void
context_frame_allocator_never_null_set_affects_later_launches(void **state) {
  (void)state;
  iof_io_context *io = iof_io_context_create();
  assert_non_null(io);
  iof_execution_context *ctx = iof_io_context_context(io);
  iof_executor_ref ex = iof_io_context_executor(io);
  iof_frame_allocator *def = iof_default_frame_allocator();
  assert_non_null(def);
  assert_ptr_equal(iof_context_frame_allocator(ctx), def);
  assert_non_null(iof_context_frame_allocator(NULL));
  assert_int_equal(iof_context_set_frame_allocator(NULL, def), -EINVAL);

  iof_frame_allocator *t1 = iof_tracking_allocator_create(NULL);
  iof_frame_allocator *t2 = iof_tracking_allocator_create(NULL);
  assert_non_null(t1);
  assert_non_null(t2);
  alloc_probe a, b, c, d;
  memset(&a, 0, sizeof a);
  memset(&b, 0, sizeof b);
  memset(&c, 0, sizeof c);
  memset(&d, 0, sizeof d);
  assert_int_equal(iof_launch(ex, alloc_fn, &a), 0); /* default */
  assert_int_equal(iof_context_set_frame_allocator(ctx, t1), 0);
  assert_ptr_equal(iof_context_frame_allocator(ctx), t1);
  assert_int_equal(iof_launch(ex, alloc_fn, &b), 0); /* t1 */
  /* An allocator in the launch options wins over the context's. */
  iof_launch_opts o;
  memset(&o, 0, sizeof o);
  o.frame_allocator = t2;
  assert_int_equal(iof_run_async(ex, &o, alloc_fn, &d), 0);
  assert_int_equal(iof_context_set_frame_allocator(ctx, NULL), 0);
  assert_ptr_equal(iof_context_frame_allocator(ctx), def);
  assert_int_equal(iof_launch(ex, alloc_fn, &c), 0); /* default again */

  iof_tracking_stats st;
  assert_int_equal(iof_tracking_allocator_stats(t1, &st), 0);
  assert_int_equal(st.total, 1); /* b only: set affects only later ones */
  assert_int_equal(st.live, 1);
  assert_int_equal(iof_tracking_allocator_stats(t2, &st), 0);
  assert_int_equal(st.total, 1);

  assert_int_equal(iof_io_context_run(io), 4);
  assert_ptr_equal(a.seen, def);
  assert_null(a.env_alloc);
  assert_ptr_equal(b.seen, t1); /* the effective allocator */
  assert_null(b.env_alloc);     /* unspecified at launch */
  assert_ptr_equal(c.seen, def);
  assert_ptr_equal(d.seen, t2);
  assert_ptr_equal(d.env_alloc, t2);
  assert_int_equal(iof_tracking_allocator_stats(t1, &st), 0);
  assert_int_equal(st.live, 0);
  assert_int_equal(st.total, 1);
  assert_int_equal(iof_io_context_destroy(io), 0);
  assert_int_equal(iof_tracking_allocator_destroy(t1), 0);
  assert_int_equal(iof_tracking_allocator_destroy(t2), 0);
}

#define T(f) cmocka_unit_test_setup_teardown(f, arm, disarm)

/* A shutdown started on another thread is finished before a destroy on
 * the owner's thread frees the services: the destroy waits for the walk
 * (a service's shutdown that takes 50 ms here), never frees a service
 * whose shutdown is still running. */
typedef struct slow_svc {
  iof_service base;
  atomic_int in_shutdown, shutdown_done, destroyed_early;
} slow_svc;

static atomic_int slow_entered;

static iof_service *slow_create(iof_execution_context *ctx) {
  (void)ctx;
  slow_svc *s = calloc(1, sizeof *s);
  return s ? &s->base : NULL;
}

static void slow_shutdown(iof_service *svc) {
  slow_svc *s = (slow_svc *)svc;
  atomic_store(&s->in_shutdown, 1);
  atomic_store(&slow_entered, 1);
  struct timespec ts = {0, 50000000};
  nanosleep(&ts, NULL);
  atomic_store(&s->shutdown_done, 1);
}

static atomic_int slow_destroy_ok, slow_destroy_calls;

static void slow_destroy(iof_service *svc) {
  slow_svc *s = (slow_svc *)svc;
  atomic_fetch_add(&slow_destroy_calls, 1);
  atomic_store(&slow_destroy_ok, atomic_load(&s->shutdown_done));
  free(s);
}

static const iof_service_key slow_key = {"slow-shutdown", slow_create,
                                         slow_shutdown, slow_destroy};

static void *shutdown_thread(void *arg) {
  iof_execution_context_shutdown(arg);
  return NULL;
}

static void destroy_waits_for_a_shutdown_on_another_thread(void **state) {
  (void)state;
  iof_execution_context *ctx = calloc(1, sizeof *ctx);
  assert_non_null(ctx);
  assert_int_equal(iof_execution_context_init(ctx), 0);
  assert_non_null(iof_use_service(ctx, &slow_key));
  atomic_store(&slow_entered, 0);
  atomic_store(&slow_destroy_calls, 0);
  atomic_store(&slow_destroy_ok, 0);
  pthread_t t;
  assert_int_equal(pthread_create(&t, NULL, shutdown_thread, ctx), 0);
  for (int i = 0; i < 5000 && !atomic_load(&slow_entered); i++) {
    struct timespec ts = {0, 1000000};
    nanosleep(&ts, NULL);
  }
  assert_true(atomic_load(&slow_entered));
  assert_true(iof_execution_context_stopping(ctx));
  iof_execution_context_destroy(ctx); /* while the walk sleeps */
  assert_int_equal(atomic_load(&slow_destroy_calls), 1);
  assert_int_equal(atomic_load(&slow_destroy_ok), 1);
  assert_int_equal(pthread_join(t, NULL), 0);
  free(ctx);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      T(use_service_creates_once_under_8_racing_threads),
      T(make_service_fails_with_eexist_when_present),
      T(use_service_rejects_bad_arguments),
      T(find_and_has_never_create),
      T(factory_using_another_service_does_not_deadlock),
      T(nested_factory_service_shut_down_before_its_dependency),
      T(create_asking_for_its_own_key_gets_edeadlk),
      T(failed_create_returns_enomem_and_leaves_nothing),
      T(shutdown_runs_each_service_once_in_reverse_order),
      T(destroy_shuts_down_all_then_frees_in_reverse_order),
      T(destroy_waits_for_a_shutdown_on_another_thread),
      T(new_context_has_no_services),
      T(context_frame_allocator_never_null_set_affects_later_launches),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
