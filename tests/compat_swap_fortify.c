/* The header swap under _FORTIFY_SOURCE=2 -O2 (built with -include
 * iofiber/compat.h): plain POSIX names in a fiber reach the compat shims,
 * not glibc's fortified wrappers (__read_chk, __recv_chk, __poll_chk...).
 * A fiber reads, receives and polls on empty fds that another fiber fills
 * later: had any call reached the real one, the thread would block and
 * the watchdog would fire. */
#define IOF_COMPAT_NO_MAIN 1
#include <iofiber/compat.h>

#include "check_test.h"
#include "io_test.h"

#if !defined(_FORTIFY_SOURCE) || _FORTIFY_SOURCE < 2
#error "build this file with -D_FORTIFY_SOURCE=2"
#endif

IOF_TEST_CHECK_FIXTURES(setup, teardown, 30)

typedef struct swap_ctx {
  int p[2], sv[2];
  int step;
} swap_ctx;

static int consumer(void *arg) {
  swap_ctx *c = arg;
  char b[8];
  CHECK(read(c->p[0], b, sizeof b) == 3 && !memcmp(b, "one", 3));
  CHECK(recv(c->sv[0], b, sizeof b, 0) == 3 && !memcmp(b, "two", 3));
  struct pollfd f = {c->p[0], POLLIN, 0};
  CHECK(poll(&f, 1, 10000) == 1 && f.revents == POLLIN);
  CHECK(read(c->p[0], b, sizeof b) == 5 && !memcmp(b, "three", 5));
  fd_set rd;
  FD_ZERO(&rd);
  FD_SET(c->sv[0], &rd);
  struct timeval tv = {10, 0};
  CHECK(select(c->sv[0] + 1, &rd, NULL, NULL, &tv) == 1);
  CHECK(FD_ISSET(c->sv[0], &rd));
  CHECK(recvfrom(c->sv[0], b, sizeof b, 0, NULL, NULL) == 4);
  c->step = 1;
  return 0;
}

static int producer(void *arg) {
  swap_ctx *c = arg;
  struct timespec ts = {0, 20 * 1000 * 1000};
  const char *msgs[] = {"one", "two", "three", "four"};
  for (int i = 0; i < 4; i++) {
    CHECK(nanosleep(&ts, NULL) == 0);
    if (i % 2 == 0)
      CHECK(write(c->p[1], msgs[i], strlen(msgs[i])) ==
            (ssize_t)strlen(msgs[i]));
    else
      CHECK(send(c->sv[1], msgs[i], strlen(msgs[i]), 0) ==
            (ssize_t)strlen(msgs[i]));
  }
  return 0;
}

static void test_swap_fortified(void **s) {
  (void)s;
  swap_ctx c = {0};
  assert_int_equal(pipe(c.p), 0);
  assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, c.sv), 0);
  iof_io_context *io = new_io();
  launch(io, consumer, &c);
  launch(io, producer, &c);
  run_all(io);
  assert_int_equal(iof_io_context_destroy(io), 0);
  assert_no_failures();
  assert_int_equal(c.step, 1);
  for (int i = 0; i < 2; i++) {
    close(c.p[i]);
    close(c.sv[i]);
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_swap_fortified, setup, teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
