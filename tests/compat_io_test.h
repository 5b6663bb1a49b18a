/* Helpers shared by the compat io tests: running a scenario both on the
 * main thread and inside a fiber, loopback pairs, timing. Header-only. */
#ifndef IOF_COMPAT_IO_TEST_H
#define IOF_COMPAT_IO_TEST_H

#include "check_test.h"
#include "io_test.h"

#include <iofiber/compat_io.h>
#include <iofiber/iofiber.h>

#include <errno.h>
#include <fcntl.h>

#define MS 1000000LL

static void compat_done(void *user, int status) {
  *(int *)user = status;
}

/* Runs fn(arg) as one chain on a fresh io_context; returns fn's status. */
static inline int in_fiber(iof_fn fn, void *arg) {
  iof_io_context *io = iof_io_context_create();
  assert_non_null(io);
  int status = -12345;
  iof_launch_opts o = {0};
  o.on_done = compat_done;
  o.user = &status;
  o.stack_size = 256 * 1024;
  assert_int_equal(iof_run_async(iof_io_context_executor(io), &o, fn, arg), 0);
  assert_true(iof_io_context_run(io) >= 0);
  assert_int_equal(iof_io_context_destroy(io), 0);
  return status;
}

/* Runs a scenario outside any fiber, then inside one: both must pass. */
static inline void both_ways(iof_fn fn, void *arg) {
  assert_int_equal(fn(arg), 0);
  assert_no_failures();
  assert_int_equal(in_fiber(fn, arg), 0);
  assert_no_failures();
}

/* A listening TCP socket on 127.0.0.1 (plain libc); *port gets its port. */
static inline int listen_tcp(int *port, int backlog) {
  int l = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  assert_true(l >= 0);
  struct sockaddr_in a = {0};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  assert_int_equal(bind(l, (struct sockaddr *)&a, sizeof a), 0);
  socklen_t al = sizeof a;
  assert_int_equal(getsockname(l, (struct sockaddr *)&a, &al), 0);
  assert_int_equal(listen(l, backlog), 0);
  *port = ntohs(a.sin_port);
  return l;
}

static inline struct sockaddr_in loopback(int port) {
  struct sockaddr_in a = {0};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons((uint16_t)port);
  return a;
}

#endif
