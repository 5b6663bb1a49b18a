/* Helpers shared by the io tests (sockets, timers, signals, deadlines,
 * resolver, faults): bounded waits, launching and running chains on an
 * io_context, and a loopback TCP pair. Header-only. */
#ifndef IOF_IO_TEST_H
#define IOF_IO_TEST_H

#include "test_support.h"

#include <iofiber/iofiber.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

/* Bounded wait (about 10 s) for *flag != 0. */
static inline bool wait_flag(atomic_int *flag) {
  for (int i = 0; i < 10000; i++) {
    if (atomic_load(flag)) return true;
    sleep_ms(1);
  }
  return false;
}

static inline int count_pool_suspended(const iof_fiber_info *info, void *arg) {
  if (info->state == IOF_FIBER_SUSPENDED &&
      !strcmp(info->executor_kind, "thread_pool"))
    atomic_fetch_add((atomic_int *)arg, 1);
  return 0;
}

/* Bounded wait (about 5 s) until exactly one thread-pool fiber of the
 * process is suspended (iof_fiber_walk). */
static inline bool wait_one_pool_fiber_suspended(void) {
  for (int i = 0; i < 5000; i++) {
    atomic_int n = 0;
    if (iof_fiber_walk(count_pool_suspended, &n) < 0) return false;
    if (atomic_load(&n) == 1) return true;
    sleep_ms(1);
  }
  return false;
}

/* Launches fn(arg) as a chain on io's executor. */
static inline void launch(iof_io_context *io, iof_fn fn, void *arg) {
  assert_int_equal(iof_launch(iof_io_context_executor(io), fn, arg), 0);
}

/* Restarts io and runs it until it runs out of work. */
static inline void run_all(iof_io_context *io) {
  iof_io_context_restart(io);
  assert_true(iof_io_context_run(io) >= 0);
}

/* A connected TCP pair of raw fds over 127.0.0.1. */
static inline void raw_tcp_pair(int fds[2]) {
  int l = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  assert_true(l >= 0);
  struct sockaddr_in a = {0};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  assert_int_equal(bind(l, (struct sockaddr *)&a, sizeof a), 0);
  socklen_t al = sizeof a;
  assert_int_equal(getsockname(l, (struct sockaddr *)&a, &al), 0);
  assert_int_equal(listen(l, 1), 0);
  fds[0] = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  assert_true(fds[0] >= 0);
  assert_int_equal(connect(fds[0], (struct sockaddr *)&a, sizeof a), 0);
  fds[1] = accept4(l, NULL, NULL, SOCK_CLOEXEC);
  assert_true(fds[1] >= 0);
  close(l);
}

#endif
