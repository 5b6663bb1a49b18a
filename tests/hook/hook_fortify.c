/* Built with -O2 -D_FORTIFY_SOURCE=2: glibc's headers turn read, recv,
 * recvfrom and poll on buffers of known size into __read_chk, __recv_chk,
 * __recvfrom_chk and __poll_chk. Those entry points must reach the fiber
 * layer too: a reader fiber waits while a writer fiber fills the fd. */
#include <errno.h>
#include <poll.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cmocka.h>

#include "hook_support.h"
#include "test_support.h"

typedef struct fort_case {
  int pipe_fds[2], sv[2];
  char rbuf[8], cbuf[8], fbuf[8];
  ssize_t r, c, f;
  int polled;
  int steps;
} fort_case;

/* Lengths the compiler cannot see: fortify then calls the _chk entry
 * points (with known constants it proves the call safe and calls plain). */
static volatile size_t len = 8;
static volatile nfds_t nfds = 1;

static int reader(void *arg) {
  fort_case *c = arg;
  struct pollfd pf[1] = {{.fd = c->pipe_fds[0], .events = POLLIN}};
  c->polled = poll(pf, nfds, 5000);
  char rb[8] = {0}, cb[8] = {0}, fb[8] = {0}; /* sizes known to fortify */
  c->r = read(c->pipe_fds[0], rb, len);
  c->c = recv(c->sv[0], cb, len, 0);
  c->f = recvfrom(c->sv[0], fb, len, 0, NULL, NULL);
  memcpy(c->rbuf, rb, sizeof rb);
  memcpy(c->cbuf, cb, sizeof cb);
  memcpy(c->fbuf, fb, sizeof fb);
  c->steps++;
  return 0;
}

static int writer(void *arg) {
  fort_case *c = arg;
  usleep(30 * 1000);
  if (write(c->pipe_fds[1], "pipe", 4) != 4) return -EIO;
  usleep(10 * 1000);
  if (send(c->sv[1], "sock", 4, 0) != 4) return -EIO;
  usleep(10 * 1000);
  if (send(c->sv[1], "from", 4, 0) != 4) return -EIO;
  c->steps++;
  return 0;
}

static int pair(void *arg) {
  const iof_env *env = iof_env_current();
  int r = iof_launch(env->executor, reader, arg);
  return r ? r : iof_launch(env->executor, writer, arg);
}

static void test_fortified_calls_suspend(void **state) {
  (void)state;
  fort_case c = {.r = -2, .c = -2, .f = -2};
  assert_int_equal(pipe(c.pipe_fds), 0);
  assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, c.sv), 0);
  unsigned long p0 = hook_count("poll", 0), r0 = hook_count("read", 0),
                c0 = hook_count("recv", 0), f0 = hook_count("recvfrom", 0);
  assert_int_equal(hook_run_fibers(1, pair, &c), 0);
  assert_int_equal(c.steps, 2);
  assert_int_equal(c.polled, 1);
  assert_int_equal(c.r, 4);
  assert_memory_equal(c.rbuf, "pipe", 4);
  assert_int_equal(c.c, 4);
  assert_memory_equal(c.cbuf, "sock", 4);
  assert_int_equal(c.f, 4);
  assert_memory_equal(c.fbuf, "from", 4);
  assert_int_equal(hook_count("poll", 0), p0 + 1);
  assert_int_equal(hook_count("read", 0), r0 + 1);
  assert_int_equal(hook_count("recv", 0), c0 + 1);
  assert_int_equal(hook_count("recvfrom", 0), f0 + 1);
  close(c.pipe_fds[0]), close(c.pipe_fds[1]);
  close(c.sv[0]), close(c.sv[1]);
}

IOF_TEST_WATCHDOG(setup, teardown, 20)

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_fortified_calls_suspend, setup,
                                      teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
