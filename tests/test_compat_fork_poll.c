/* Patterns met in real programs (Python's multiprocessing under
 * iofiber-run):
 * - a "thread" that polls with a zero timeout in a loop, waiting for
 *   another one's progress: in a fiber a zero-timeout poll that finds
 *   nothing lets the other fibers run;
 * - a child forked by a fiber continues on that fiber's stack: its compat
 *   calls are plain there (the event loop copy is not driven), and a read
 *   of an fd the runtime made non-blocking still blocks until data comes. */
#include "compat_io_test.h"

#include <poll.h>
#include <sys/epoll.h>
#include <sys/wait.h>

static int pfd[2];
static int spins;

static int writer(void *arg) {
  (void)arg;
  CHECK(iof_compat_write(pfd[1], "x", 1) == 1);
  return 0;
}

static int spinner(void *arg) {
  (void)arg;
  struct pollfd p = {pfd[0], POLLIN, 0};
  /* The writer fiber is queued behind us: without a yield this loops on. */
  while (iof_compat_poll(&p, 1, 0) == 0 && spins < 1000000) spins++;
  CHECK(p.revents & POLLIN);
  return 0;
}

static void test_zero_timeout_poll_yields(void **s) {
  (void)s;
  CHECK(pipe(pfd) == 0);
  iof_io_context *io = iof_io_context_create();
  assert_non_null(io);
  iof_executor_ref ex = iof_io_context_executor(io);
  assert_int_equal(iof_run_async(ex, NULL, spinner, NULL), 0);
  assert_int_equal(iof_run_async(ex, NULL, writer, NULL), 0);
  assert_true(iof_io_context_run(io) >= 0);
  assert_int_equal(iof_io_context_destroy(io), 0);
  assert_no_failures();
  assert_true(spins < 10);
  close(pfd[0]);
  close(pfd[1]);
}

/* Always something ready that the looping fiber ignores (a writable pipe
 * end): every 64th such check in a row yields, so the fiber that ends the
 * loop gets to run. */
static volatile int flag;
static int busy_loops;

static int setter(void *arg) {
  (void)arg;
  flag = 1;
  return 0;
}

static int busy_epoll(void *arg) {
  (void)arg;
  int ep = epoll_create1(EPOLL_CLOEXEC);
  struct epoll_event e = {.events = EPOLLOUT, .data.fd = pfd[1]};
  CHECK(ep >= 0 && epoll_ctl(ep, EPOLL_CTL_ADD, pfd[1], &e) == 0);
  struct pollfd p = {pfd[1], POLLOUT, 0};
  while (!flag && busy_loops < 1000000) {
    busy_loops++;
    if (busy_loops & 1)
      CHECK(iof_compat_epoll_wait(ep, &e, 1, 1000) == 1);
    else
      CHECK(iof_compat_poll(&p, 1, 1000) == 1);
  }
  close(ep);
  return 0;
}

static void test_ready_loop_yields(void **s) {
  (void)s;
  CHECK(pipe(pfd) == 0);
  iof_io_context *io = iof_io_context_create();
  assert_non_null(io);
  iof_executor_ref ex = iof_io_context_executor(io);
  assert_int_equal(iof_run_async(ex, NULL, busy_epoll, NULL), 0);
  assert_int_equal(iof_run_async(ex, NULL, setter, NULL), 0);
  assert_true(iof_io_context_run(io) >= 0);
  assert_int_equal(iof_io_context_destroy(io), 0);
  assert_no_failures();
  assert_true(busy_loops <= 64);
  close(pfd[0]);
  close(pfd[1]);
}

/* In a fiber: makes the pipe's read end managed (non-blocking for the
 * runtime) by waiting on it once, then forks; the child reads it. */
static int forker(void *arg) {
  (void)arg;
  char c;
  CHECK(iof_compat_write(pfd[1], "a", 1) == 1);
  CHECK(iof_compat_read(pfd[0], &c, 1) == 1 && c == 'a');
  pid_t child = fork();
  if (child == 0) {
    /* Plain in the child: blocks (poll) until the parent writes, 50 ms
     * later; a non-blocking read would fail with EAGAIN at once. */
    ssize_t r = iof_compat_read(pfd[0], &c, 1);
    _exit(r == 1 && c == 'b' ? 0 : 10 + (r < 0 ? errno % 100 : 99));
  }
  CHECK(child > 0);
  struct timespec ts = {0, 50000000};
  CHECK(iof_compat_nanosleep(&ts, NULL) == 0);
  CHECK(iof_compat_write(pfd[1], "b", 1) == 1);
  int st = 0;
  CHECK(waitpid(child, &st, 0) == child);
  CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
  return 0;
}

static void test_forked_child_reads_plainly(void **s) {
  (void)s;
  CHECK(pipe(pfd) == 0);
  assert_int_equal(in_fiber(forker, NULL), 0);
  assert_no_failures();
  close(pfd[0]);
  close(pfd[1]);
}

IOF_TEST_WATCHDOG(setup, teardown, 20)

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_zero_timeout_poll_yields, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(test_forked_child_reads_plainly, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(test_ready_loop_yields, setup, teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
