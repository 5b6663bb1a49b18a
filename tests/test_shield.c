/* Shields from cancellation: after a stop request, cleanup inside
 * iof_shield locks a contended mutex, sleeps and writes (each of which
 * fails with -ECANCELED outside the shield), a stop request arriving
 * while a shielded sleep runs does not cut it short, the token is back
 * after the shield, iof_shield_for bounds the cleanup whatever the
 * caller's token does, and the argument checks. */
#include "test_support.h"
#include "io_test.h"

#include <iofiber/iofiber.h>

#include <errno.h>
#include <string.h>

#define MS 1000000LL

IOF_TEST_WATCHDOG(setup, teardown, 20)

typedef struct member {
  struct member *next;
} member;

typedef struct shared {
  iof_mutex mu;
  member *head;
  int holder_done;
} shared;

typedef struct conn {
  shared *sh;
  member self;
  iof_stop_source *src;
  int r_wait;    /* the wait the stop request ended */
  int r_lock;    /* a lock outside the shield (contended) */
  int r_shield;  /* iof_shield's status */
  int r_inside;  /* the lock inside */
  int r_sleep;   /* a sleep inside */
  int r_after;   /* a sleep after the shield */
  bool unlinked; /* the cleanup ran */
} conn;

static int holder_fn(void *arg) {
  shared *sh = arg;
  assert_int_equal(iof_mutex_lock(&sh->mu), 0);
  iof_sleep_for(60 * MS); /* the connection's cleanup contends meanwhile */
  iof_mutex_unlock(&sh->mu);
  sh->holder_done = 1;
  return 0;
}

static int cleanup(void *arg) {
  conn *c = arg;
  c->r_inside = iof_mutex_lock(&c->sh->mu);
  if (c->r_inside < 0) return c->r_inside;
  for (member **pp = &c->sh->head; *pp; pp = &(*pp)->next)
    if (*pp == &c->self) {
      *pp = c->self.next;
      c->unlinked = true;
      break;
    }
  iof_mutex_unlock(&c->sh->mu);
  c->r_sleep = iof_sleep_for(5 * MS);
  return 7;
}

static int conn_fn(void *arg) {
  conn *c = arg;
  c->r_wait = iof_sleep_for(10000 * MS); /* ended by the stop request */
  c->r_lock = iof_mutex_lock(&c->sh->mu);
  if (c->r_lock == 0) iof_mutex_unlock(&c->sh->mu);
  c->r_shield = iof_shield(cleanup, c);
  c->r_after = iof_sleep_for(1 * MS);
  return 0;
}

static int stopper_fn(void *arg) {
  conn *c = arg;
  iof_sleep_for(20 * MS);
  iof_stop_source_request(c->src);
  return 0;
}

static void cleanup_completes_after_stop(void **state) {
  (void)state;
  iof_io_context *io = iof_io_context_create();
  shared sh;
  memset(&sh, 0, sizeof sh);
  iof_mutex_init(&sh.mu);
  iof_stop_source src;
  assert_int_equal(iof_stop_source_init(&src), 0);
  conn c;
  memset(&c, 0, sizeof c);
  c.sh = &sh;
  c.src = &src;
  sh.head = &c.self;
  launch(io, holder_fn, &sh);
  iof_launch_opts o = {0};
  o.stop_token = iof_stop_source_token(&src);
  assert_int_equal(iof_run_async(iof_io_context_executor(io), &o, conn_fn, &c),
                   0);
  launch(io, stopper_fn, &c);
  run_all(io);
  assert_int_equal(c.r_wait, -ECANCELED);
  assert_int_equal(c.r_lock, -ECANCELED); /* the detour users hit */
  assert_int_equal(c.r_inside, 0);
  assert_int_equal(c.r_sleep, 0);
  assert_int_equal(c.r_shield, 7);
  assert_true(c.unlinked);
  assert_null(sh.head);
  assert_int_equal(c.r_after, -ECANCELED); /* the token is back */
  assert_int_equal(sh.holder_done, 1);
  iof_stop_source_destroy(&src);
  iof_mutex_destroy(&sh.mu);
  assert_int_equal(iof_io_context_destroy(io), 0);
}

/* A stop request that arrives during the shield. */
typedef struct during {
  iof_stop_source *src;
  int r_inner, r_shield, r_after;
  int64_t inner_ms;
} during;

static int long_sleep(void *arg) {
  during *d = arg;
  uint64_t t0 = iof_test_now_ns();
  d->r_inner = iof_sleep_for(60 * MS);
  d->inner_ms = ms_since(t0);
  return d->r_inner;
}

static int during_fn(void *arg) {
  during *d = arg;
  d->r_shield = iof_shield(long_sleep, d);
  d->r_after = iof_sleep_for(1 * MS);
  return 0;
}

static int during_stopper(void *arg) {
  during *d = arg;
  iof_sleep_for(10 * MS);
  iof_stop_source_request(d->src);
  return 0;
}

static void stop_during_shield_waits_for_it(void **state) {
  (void)state;
  iof_io_context *io = iof_io_context_create();
  iof_stop_source src;
  assert_int_equal(iof_stop_source_init(&src), 0);
  during d = {&src, 1, 1, 1, 0};
  iof_launch_opts o = {0};
  o.stop_token = iof_stop_source_token(&src);
  assert_int_equal(
      iof_run_async(iof_io_context_executor(io), &o, during_fn, &d), 0);
  launch(io, during_stopper, &d);
  run_all(io);
  assert_int_equal(d.r_inner, 0);
  assert_true(d.inner_ms >= 55);
  assert_int_equal(d.r_shield, 0);
  assert_int_equal(d.r_after, -ECANCELED);
  iof_stop_source_destroy(&src);
  assert_int_equal(iof_io_context_destroy(io), 0);
}

/* iof_shield_for: bounded cleanup in a stopped chain. */
typedef struct bounded {
  int64_t sleep_ns;
  int r_inner, r;
  int64_t ms;
} bounded;

static int bounded_body(void *arg) {
  bounded *b = arg;
  b->r_inner = iof_sleep_for(b->sleep_ns);
  return b->r_inner == 0 ? 3 : b->r_inner;
}

static int bounded_fn(void *arg) {
  bounded *b = arg;
  uint64_t t0 = iof_test_now_ns();
  b->r = iof_shield_for(40 * MS, bounded_body, b);
  b->ms = ms_since(t0);
  return 0;
}

static void shield_for_bounds_cleanup(void **state) {
  (void)state;
  iof_io_context *io = iof_io_context_create();
  iof_stop_source src;
  assert_int_equal(iof_stop_source_init(&src), 0);
  iof_stop_source_request(&src); /* stopped before it even starts */
  bounded slow = {5000 * MS, 1, 1, 0}, quick = {5 * MS, 1, 1, 0};
  iof_launch_opts o = {0};
  o.stop_token = iof_stop_source_token(&src);
  assert_int_equal(
      iof_run_async(iof_io_context_executor(io), &o, bounded_fn, &slow), 0);
  assert_int_equal(
      iof_run_async(iof_io_context_executor(io), &o, bounded_fn, &quick), 0);
  run_all(io);
  assert_int_equal(slow.r_inner, -ECANCELED);
  assert_int_equal(slow.r, -ETIMEDOUT);
  assert_true(slow.ms >= 35 && slow.ms < 2000);
  assert_int_equal(quick.r_inner, 0);
  assert_int_equal(quick.r, 3);
  iof_stop_source_destroy(&src);
  assert_int_equal(iof_io_context_destroy(io), 0);
}

static int nop(void *arg) {
  (void)arg;
  return 0;
}

static int checks_fn(void *arg) {
  int *r = arg;
  r[0] = iof_shield(NULL, NULL);
  r[1] = iof_shield_for(MS, NULL, NULL);
  r[2] = iof_shield(nop, NULL);
  return 0;
}

static void argument_checks(void **state) {
  (void)state;
  assert_int_equal(iof_shield(nop, NULL), -EPERM);
  assert_int_equal(iof_shield_for(MS, nop, NULL), -EPERM);
  iof_io_context *io = iof_io_context_create();
  int r[3] = {1, 1, 1};
  launch(io, checks_fn, r);
  run_all(io);
  assert_int_equal(r[0], -EINVAL);
  assert_int_equal(r[1], -EINVAL);
  assert_int_equal(r[2], 0);
  assert_int_equal(iof_io_context_destroy(io), 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(cleanup_completes_after_stop, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(stop_during_shield_waits_for_it, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(shield_for_bounds_cleanup, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(argument_checks, setup, teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
