/* Stop tokens: request is true
 * only the first time; callbacks run synchronously in the requesting
 * thread, at once inside register after a request; unregister waits for a
 * callback running on another thread and never blocks a callback
 * unregistering itself; register/unregister/request race without a lost or
 * doubled callback; reference counting: tokens outlive their source, a
 * launch holds a reference for its chain's life.
 *
 * IOF_TEST_THREADED: requests and registrations from several threads. */
#include "test_support.h"
#include "check_test.h"

#include <iofiber/iofiber.h>

#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

IOF_TEST_CHECK_FIXTURES(begin, end, 120)

/* A callback record: how often it ran, and where. */
struct hit {
  atomic_int calls;
  pthread_t thread;
};

static void hit_cb(void *arg) {
  struct hit *h = arg;
  h->thread = self_thread();
  atomic_fetch_add(&h->calls, 1);
}

/* ---- request ----------------------------------------------------------- */

static void stop_request_returns_true_only_first_time(void **state) {
  (void)state;
  iof_stop_source src;
  assert_int_equal(iof_stop_source_init(&src), 0);
  iof_stop_token tok = iof_stop_source_token(&src);
  assert_non_null(tok.state);
  assert_false(iof_stop_requested(tok));
  assert_true(iof_stop_possible(tok));
  assert_true(iof_stop_source_request(&src));
  assert_true(iof_stop_requested(tok));
  assert_false(iof_stop_source_request(&src));
  assert_false(iof_stop_source_request(&src));
  assert_true(iof_stop_requested(tok));
  assert_true(iof_stop_possible(tok));
  iof_stop_source_destroy(&src);
  iof_stop_source_destroy(&src); /* idempotent */
  assert_null(src.state);
  assert_false(iof_stop_source_request(&src));
  assert_false(iof_stop_source_request(NULL));
  assert_int_equal(iof_stop_source_init(NULL), -EINVAL);
}

enum { RACERS = 6 };

struct req_race {
  iof_stop_source src;
  pthread_barrier_t bar;
  atomic_int wins;
  struct hit cb_hit;
  long rounds;
};

static void *req_racer(void *arg) {
  struct req_race *r = arg;
  for (long i = 0; i < r->rounds; i++) {
    pthread_barrier_wait(&r->bar); /* main set a fresh source */
    if (iof_stop_source_request(&r->src)) atomic_fetch_add(&r->wins, 1);
    pthread_barrier_wait(&r->bar); /* main checks */
    pthread_barrier_wait(&r->bar); /* main destroyed it */
  }
  return NULL;
}

static void stop_request_concurrent_exactly_one_true(void **state) {
  (void)state;
  static struct req_race r;
  memset(&r, 0, sizeof r);
  r.rounds = 500;
  pthread_barrier_init(&r.bar, NULL, RACERS + 1);
  pthread_t t[RACERS];
  for (int i = 0; i < RACERS; i++)
    assert_int_equal(pthread_create(&t[i], NULL, req_racer, &r), 0);
  int bad_wins = 0, bad_calls = 0;
  for (long i = 0; i < r.rounds; i++) {
    assert_int_equal(iof_stop_source_init(&r.src), 0);
    iof_stop_callback cb;
    atomic_store(&r.wins, 0);
    atomic_store(&r.cb_hit.calls, 0);
    assert_int_equal(iof_stop_callback_register(
                         &cb, iof_stop_source_token(&r.src), hit_cb, &r.cb_hit),
                     0);
    pthread_barrier_wait(&r.bar);
    pthread_barrier_wait(&r.bar);
    if (atomic_load(&r.wins) != 1) bad_wins++;
    if (atomic_load(&r.cb_hit.calls) != 1) bad_calls++;
    iof_stop_callback_unregister(&cb);
    iof_stop_source_destroy(&r.src);
    pthread_barrier_wait(&r.bar);
  }
  for (int i = 0; i < RACERS; i++) pthread_join(t[i], NULL);
  pthread_barrier_destroy(&r.bar);
  assert_int_equal(bad_wins, 0);
  assert_int_equal(bad_calls, 0);
}

/* ---- callbacks --------------------------------------------------------- */

static void
stop_callback_after_request_runs_at_once_inside_register(void **state) {
  (void)state;
  iof_stop_source src;
  assert_int_equal(iof_stop_source_init(&src), 0);
  assert_true(iof_stop_source_request(&src));
  struct hit h = {0};
  iof_stop_callback cb;
  assert_int_equal(
      iof_stop_callback_register(&cb, iof_stop_source_token(&src), hit_cb, &h),
      1);
  assert_int_equal(atomic_load(&h.calls), 1); /* already, on return */
  assert_true(pthread_equal(h.thread, pthread_self()));
  iof_stop_callback_unregister(&cb); /* nothing to do; must not block */
  iof_stop_callback_unregister(&cb);
  assert_false(iof_stop_source_request(&src));
  assert_int_equal(atomic_load(&h.calls), 1);
  iof_stop_source_destroy(&src);
}

static void stop_register_empty_token_and_null_args(void **state) {
  (void)state;
  struct hit h = {0};
  iof_stop_callback cb;
  iof_stop_token empty = {0};
  assert_int_equal(iof_stop_callback_register(&cb, empty, hit_cb, &h), 0);
  iof_stop_callback_unregister(&cb);
  assert_int_equal(atomic_load(&h.calls), 0);
  assert_false(iof_stop_requested(empty));
  assert_false(iof_stop_possible(empty));
  iof_stop_source src;
  assert_int_equal(iof_stop_source_init(&src), 0);
  iof_stop_token tok = iof_stop_source_token(&src);
  assert_int_equal(iof_stop_callback_register(NULL, tok, hit_cb, &h), -EINVAL);
  assert_int_equal(iof_stop_callback_register(&cb, tok, NULL, &h), -EINVAL);
  assert_true(iof_stop_source_request(&src));
  assert_int_equal(atomic_load(&h.calls), 0); /* nothing was registered */
  iof_stop_source_destroy(&src);
  iof_stop_callback_unregister(NULL);
  /* A NULL or destroyed source gives an empty token. */
  assert_null(iof_stop_source_token(NULL).state);
  assert_null(iof_stop_source_token(&src).state);
}

struct other {
  iof_stop_source *src;
  bool result;
  pthread_t thread;
};

static void *request_thread(void *arg) {
  struct other *o = arg;
  o->thread = self_thread();
  o->result = iof_stop_source_request(o->src);
  return NULL;
}

static void
stop_request_from_other_thread_runs_callbacks_once_there(void **state) {
  (void)state;
  iof_stop_source src;
  assert_int_equal(iof_stop_source_init(&src), 0);
  iof_stop_token tok = iof_stop_source_token(&src);
  struct hit h[4];
  iof_stop_callback cb[4];
  memset(h, 0, sizeof h);
  for (int i = 0; i < 4; i++)
    assert_int_equal(iof_stop_callback_register(&cb[i], tok, hit_cb, &h[i]), 0);
  iof_stop_callback_unregister(&cb[2]); /* removed: never runs */
  struct other o = {.src = &src};
  pthread_t t;
  assert_int_equal(pthread_create(&t, NULL, request_thread, &o), 0);
  pthread_join(t, NULL);
  assert_true(o.result);
  for (int i = 0; i < 4; i++) {
    if (i == 2) {
      assert_int_equal(atomic_load(&h[i].calls), 0);
      continue;
    }
    assert_int_equal(atomic_load(&h[i].calls), 1);
    assert_true(pthread_equal(h[i].thread, o.thread));
  }
  /* A second request (any thread) runs nothing. */
  assert_false(iof_stop_source_request(&src));
  for (int i = 0; i < 4; i++) {
    iof_stop_callback_unregister(&cb[i]);
    assert_int_equal(atomic_load(&h[i].calls), i == 2 ? 0 : 1);
  }
  iof_stop_source_destroy(&src);
}

struct slow {
  atomic_int started;
  atomic_int finished;
};

static void slow_cb(void *arg) {
  struct slow *s = arg;
  atomic_store(&s->started, 1);
  sleep_ms(50);
  atomic_store(&s->finished, 1);
}

static void
stop_unregister_waits_for_callback_running_on_other_thread(void **state) {
  (void)state;
  iof_stop_source src;
  assert_int_equal(iof_stop_source_init(&src), 0);
  struct slow s = {0};
  iof_stop_callback cb;
  assert_int_equal(
      iof_stop_callback_register(&cb, iof_stop_source_token(&src), slow_cb, &s),
      0);
  struct other o = {.src = &src};
  pthread_t t;
  assert_int_equal(pthread_create(&t, NULL, request_thread, &o), 0);
  assert_true(wait_flag_ms(&s.started, 10000));
  iof_stop_callback_unregister(&cb);
  /* Returned only once the callback had finished (it sleeps 50 ms). */
  assert_int_equal(atomic_load(&s.finished), 1);
  pthread_join(t, NULL);
  assert_true(o.result);
  iof_stop_source_destroy(&src);
}

struct selfunreg {
  iof_stop_callback cb;
  iof_stop_callback other; /* registered, not yet run: removed by cb */
  struct hit other_hit;
  atomic_int calls;
  atomic_int returned;
};

static void selfunreg_cb(void *arg) {
  struct selfunreg *s = arg;
  atomic_fetch_add(&s->calls, 1);
  iof_stop_callback_unregister(&s->cb);    /* itself: must not block */
  iof_stop_callback_unregister(&s->other); /* still pending: removed */
  atomic_store(&s->returned, 1);
}

static void stop_unregister_inside_own_callback_does_not_block(void **state) {
  (void)state;
  static struct selfunreg s;
  memset(&s, 0, sizeof s);
  iof_stop_source src;
  assert_int_equal(iof_stop_source_init(&src), 0);
  iof_stop_token tok = iof_stop_source_token(&src);
  /* Callbacks run newest first or oldest first: register `other` on both
   * sides so one of them is still pending whichever order is used. */
  assert_int_equal(
      iof_stop_callback_register(&s.other, tok, hit_cb, &s.other_hit), 0);
  assert_int_equal(iof_stop_callback_register(&s.cb, tok, selfunreg_cb, &s), 0);
  iof_stop_callback dup;
  struct hit dup_hit = {0};
  assert_int_equal(iof_stop_callback_register(&dup, tok, hit_cb, &dup_hit), 0);
  /* On this thread, then on another one. */
  assert_true(iof_stop_source_request(&src));
  assert_int_equal(atomic_load(&s.calls), 1);
  assert_int_equal(atomic_load(&s.returned), 1);
  assert_true(atomic_load(&s.other_hit.calls) <= 1);
  assert_int_equal(atomic_load(&dup_hit.calls), 1);
  iof_stop_callback_unregister(&dup);
  iof_stop_callback_unregister(&s.other);
  iof_stop_source_destroy(&src);

  memset(&s, 0, sizeof s);
  assert_int_equal(iof_stop_source_init(&src), 0);
  assert_int_equal(iof_stop_callback_register(
                       &s.cb, iof_stop_source_token(&src), selfunreg_cb, &s),
                   0);
  struct other o = {.src = &src};
  pthread_t t;
  assert_int_equal(pthread_create(&t, NULL, request_thread, &o), 0);
  pthread_join(t, NULL); /* alarm() catches a self-deadlock */
  assert_true(o.result);
  assert_int_equal(atomic_load(&s.calls), 1);
  assert_int_equal(atomic_load(&s.returned), 1);
  iof_stop_source_destroy(&src);
}

/* ---- the race: register / unregister / request ------------------------- */

struct race {
  pthread_barrier_t bar;
  iof_stop_source src;
  long rounds;
  /* per round */
  int reg_result;
  int unregistered;
  atomic_int calls;
  atomic_int active;
  atomic_int ran_after_unregister;
  atomic_int done_unregistering;
};

static void race_cb(void *arg) {
  struct race *r = arg;
  atomic_fetch_add(&r->active, 1);
  if (atomic_load(&r->done_unregistering))
    atomic_fetch_add(&r->ran_after_unregister, 1);
  atomic_fetch_add(&r->calls, 1);
  atomic_fetch_sub(&r->active, 1);
}

static void *race_registrar(void *arg) {
  struct race *r = arg;
  for (long i = 0; i < r->rounds; i++) {
    pthread_barrier_wait(&r->bar);
    iof_stop_callback cb;
    /* Our own reference: main destroys the source while we may still be
     * unregistering. */
    iof_stop_token tok = iof_stop_token_retain(iof_stop_source_token(&r->src));
    r->reg_result = iof_stop_callback_register(&cb, tok, race_cb, r);
    r->unregistered = (int)(i % 2);
    if (r->unregistered) {
      iof_stop_callback_unregister(&cb);
      /* After unregister returns the callback is not running, and never
       * will. */
      atomic_store(&r->done_unregistering, 1);
      if (atomic_load(&r->active) != 0) CHECK(!"callback ran on");
    }
    pthread_barrier_wait(&r->bar);
    if (!r->unregistered) iof_stop_callback_unregister(&cb);
    iof_stop_token_release(tok);
  }
  return NULL;
}

static void
stop_race_register_unregister_request_no_lost_or_double(void **state) {
  (void)state;
  static struct race r;
  memset(&r, 0, sizeof r);
  r.rounds = 100000;
  pthread_barrier_init(&r.bar, NULL, 2);
  pthread_t t;
  assert_int_equal(pthread_create(&t, NULL, race_registrar, &r), 0);
  long lost = 0, doubled = 0, late = 0, inline_runs = 0, bad_inline = 0;
  for (long i = 0; i < r.rounds; i++) {
    assert_int_equal(iof_stop_source_init(&r.src), 0);
    atomic_store(&r.calls, 0);
    atomic_store(&r.done_unregistering, 0);
    pthread_barrier_wait(&r.bar);
    bool first = iof_stop_source_request(&r.src);
    if (!first) CHECK(!"first request returned false");
    pthread_barrier_wait(&r.bar);
    int calls = atomic_load(&r.calls);
    if (calls > 1) doubled++;
    if (r.reg_result == 1) {
      inline_runs++;
      if (calls != 1) bad_inline++;
    }
    /* Never unregistered: it must have run, inside register or request. */
    if (!r.unregistered && calls != 1) lost++;
    iof_stop_source_destroy(&r.src);
  }
  pthread_join(t, NULL);
  late = atomic_load(&r.ran_after_unregister);
  pthread_barrier_destroy(&r.bar);
  assert_int_equal(lost, 0);
  assert_int_equal(doubled, 0);
  assert_int_equal(bad_inline, 0);
  assert_int_equal(late, 0);
  (void)inline_runs;
  assert_no_failures();
}

/* ---- reference counting ------------------------------------------------ */

static void stop_token_outlives_source(void **state) {
  (void)state;
  /* Requested, then the source goes: still requested and possible. */
  iof_stop_source a;
  assert_int_equal(iof_stop_source_init(&a), 0);
  iof_stop_token ta = iof_stop_token_retain(iof_stop_source_token(&a));
  assert_true(iof_stop_source_request(&a));
  iof_stop_source_destroy(&a);
  assert_true(iof_stop_requested(ta));
  assert_true(iof_stop_possible(ta));
  struct hit h = {0};
  iof_stop_callback cb;
  assert_int_equal(iof_stop_callback_register(&cb, ta, hit_cb, &h), 1);
  assert_int_equal(atomic_load(&h.calls), 1);
  iof_stop_callback_unregister(&cb);
  /* Two retains, two releases. */
  iof_stop_token ta2 = iof_stop_token_retain(ta);
  assert_ptr_equal(ta2.state, ta.state);
  iof_stop_token_release(ta2);
  assert_true(iof_stop_requested(ta));
  iof_stop_token_release(ta);

  /* Not requested, then the source goes: a stop can never come. */
  iof_stop_source b;
  assert_int_equal(iof_stop_source_init(&b), 0);
  iof_stop_token tb = iof_stop_token_retain(iof_stop_source_token(&b));
  assert_true(iof_stop_possible(tb));
  iof_stop_source_destroy(&b);
  assert_false(iof_stop_requested(tb));
  assert_false(iof_stop_possible(tb));
  struct hit hb = {0};
  assert_int_equal(iof_stop_callback_register(&cb, tb, hit_cb, &hb), 0);
  iof_stop_callback_unregister(&cb);
  assert_int_equal(atomic_load(&hb.calls), 0);
  iof_stop_token_release(tb);

  /* retain/release accept an empty token. */
  iof_stop_token empty = {0};
  assert_null(iof_stop_token_retain(empty).state);
  iof_stop_token_release(empty);
}

static void stop_possible_false_for_empty_and_after_source_gone(void **state) {
  (void)state;
  iof_stop_token empty = {0};
  assert_false(iof_stop_possible(empty));
  assert_false(iof_stop_requested(empty));
  iof_stop_source s;
  assert_int_equal(iof_stop_source_init(&s), 0);
  iof_stop_token t = iof_stop_token_retain(iof_stop_source_token(&s));
  assert_true(iof_stop_possible(t));
  assert_false(iof_stop_requested(t));
  iof_stop_source_destroy(&s);
  assert_false(iof_stop_possible(t));
  assert_false(iof_stop_requested(t));
  assert_null(iof_stop_source_token(&s).state);
  iof_stop_token_release(t);
}

/* A launch with a token holds a reference for the chain's life. */
struct held {
  iof_stop_token tok;
  bool expect_requested;
  int checked;
  atomic_int started;
  atomic_int may_go;
  struct hit h;
};

static int held_fn(void *arg) {
  struct held *c = arg;
  const iof_env *env = iof_env_current();
  CHECK(env->stop_token.state == c->tok.state);
  atomic_store(&c->started, 1);
  if (!wait_flag_ms(&c->may_go, 10000)) CHECK(!"never released");
  /* The source is gone by now; the chain's reference keeps the state. */
  CHECK(iof_stop_requested(env->stop_token) == c->expect_requested);
  CHECK(iof_stop_possible(env->stop_token) == c->expect_requested);
  iof_stop_callback cb;
  int r = iof_stop_callback_register(&cb, env->stop_token, hit_cb, &c->h);
  CHECK(r == (c->expect_requested ? 1 : 0));
  iof_stop_callback_unregister(&cb);
  CHECK(iof_yield() == 0);
  CHECK(iof_stop_requested(env->stop_token) == c->expect_requested);
  c->checked = 1;
  return 0;
}

static void stop_launch_holds_token_reference_for_chain_life(void **state) {
  (void)state;
  /* Source destroyed before the chain even starts (io_context). */
  for (int requested = 0; requested < 2; requested++) {
    iof_io_context *io = iof_io_context_create();
    assert_non_null(io);
    iof_stop_source src;
    assert_int_equal(iof_stop_source_init(&src), 0);
    struct held c;
    memset(&c, 0, sizeof c);
    c.tok = iof_stop_source_token(&src);
    c.expect_requested = requested;
    atomic_store(&c.may_go, 1);
    iof_launch_opts o = {.stop_token = c.tok};
    assert_int_equal(
        iof_run_async(iof_io_context_executor(io), &o, held_fn, &c), 0);
    if (requested) assert_true(iof_stop_source_request(&src));
    iof_stop_source_destroy(&src);
    assert_int_equal(iof_io_context_run(io), 2);
    assert_int_equal(c.checked, 1);
    assert_int_equal(atomic_load(&c.h.calls), requested);
    assert_int_equal(iof_io_context_destroy(io), 0);
  }
  /* Source destroyed while the chain runs on a pool thread. */
  for (int requested = 0; requested < 2; requested++) {
    iof_thread_pool *p = iof_thread_pool_create(1);
    assert_non_null(p);
    iof_stop_source src;
    assert_int_equal(iof_stop_source_init(&src), 0);
    static struct held c;
    memset(&c, 0, sizeof c);
    c.tok = iof_stop_source_token(&src);
    c.expect_requested = requested;
    iof_launch_opts o = {.stop_token = c.tok};
    assert_int_equal(
        iof_run_async(iof_thread_pool_executor(p), &o, held_fn, &c), 0);
    assert_true(wait_flag_ms(&c.started, 10000));
    if (requested) assert_true(iof_stop_source_request(&src));
    iof_stop_source_destroy(&src);
    atomic_store(&c.may_go, 1);
    assert_int_equal(iof_thread_pool_join(p), 0);
    assert_int_equal(c.checked, 1);
    assert_int_equal(iof_thread_pool_destroy(p), 0);
  }
  assert_no_failures();
}

#define T(f) cmocka_unit_test_setup_teardown(f, begin, end)

int main(void) {
  const struct CMUnitTest tests[] = {
      T(stop_request_returns_true_only_first_time),
      T(stop_request_concurrent_exactly_one_true),
      T(stop_callback_after_request_runs_at_once_inside_register),
      T(stop_register_empty_token_and_null_args),
      T(stop_request_from_other_thread_runs_callbacks_once_there),
      T(stop_unregister_waits_for_callback_running_on_other_thread),
      T(stop_unregister_inside_own_callback_does_not_block),
      T(stop_race_register_unregister_request_no_lost_or_double),
      T(stop_token_outlives_source),
      T(stop_possible_false_for_empty_and_after_source_gone),
      T(stop_launch_holds_token_reference_for_chain_life),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
