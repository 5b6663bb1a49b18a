/* iof_compat_listen: in a fiber a small backlog is raised to
 * IOF_COMPAT_LISTEN_MIN (the accept loop shares its thread with the
 * connections it serves, so the kernel queue must absorb bursts); outside
 * fibers the program's backlog is used as given. Observed through the
 * kernel: how many of 40 simultaneous connects to a listener nobody
 * accepts from complete their handshake. */
#include "compat_io_test.h"

#include <poll.h>

#define CLIENTS 40

/* Listens with backlog 1 through the shim, fires CLIENTS non-blocking
 * connects, returns how many got established within 300 ms. */
static int established_with_backlog_1(void) {
  int l = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  assert_true(l >= 0);
  struct sockaddr_in a = loopback(0);
  assert_int_equal(bind(l, (struct sockaddr *)&a, sizeof a), 0);
  socklen_t al = sizeof a;
  assert_int_equal(getsockname(l, (struct sockaddr *)&a, &al), 0);
  assert_int_equal(iof_compat_listen(l, 1), 0);
  struct pollfd p[CLIENTS];
  for (int i = 0; i < CLIENTS; i++) {
    p[i].fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    assert_true(p[i].fd >= 0);
    p[i].events = POLLOUT;
    int r = connect(p[i].fd, (struct sockaddr *)&a, sizeof a);
    assert_true(r == 0 || errno == EINPROGRESS);
  }
  int64_t t0 = iof_test_now_ns();
  int done = 0;
  while (done < CLIENTS && iof_test_now_ns() - t0 < 300 * MS) {
    done = 0;
    for (int i = 0; i < CLIENTS; i++) p[i].revents = 0;
    poll(p, CLIENTS, 20);
    for (int i = 0; i < CLIENTS; i++) done += (p[i].revents & POLLOUT) != 0;
  }
  for (int i = 0; i < CLIENTS; i++) close(p[i].fd);
  close(l);
  return done;
}

static int in_fiber_count;

static int fiber_scenario(void *arg) {
  (void)arg;
  in_fiber_count = established_with_backlog_1();
  return 0;
}

static void test_listen_backlog(void **s) {
  (void)s;
  /* Plain: the kernel queue holds backlog + 1; the other SYNs wait. */
  int plain = established_with_backlog_1();
  assert_true(plain <= 4);
  /* In a fiber: all of them fit. */
  assert_int_equal(in_fiber(fiber_scenario, NULL), 0);
  assert_int_equal(in_fiber_count, CLIENTS);
}

static void test_listen_errors(void **s) {
  (void)s;
  errno = 0;
  assert_int_equal(iof_compat_listen(-1, 5), -1);
  assert_int_equal(errno, EBADF);
}

IOF_TEST_WATCHDOG(setup, teardown, 20)

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_listen_backlog, setup, teardown),
      cmocka_unit_test_setup_teardown(test_listen_errors, setup, teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
