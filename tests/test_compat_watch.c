/* How compat's fd waits use the event loop: a fiber that waits on the same
 * fd again keeps libev's kernel registration (request/response traffic
 * makes no epoll_ctl per round trip), while a number that names a new file
 * (closed and reused, or another io_context) is registered anew, so that
 * no wait misses its readiness. epoll_ctl is counted by interposing it in
 * this program, in front of libev's call. */
#include "compat_io_test.h"

#include <dlfcn.h>
#include <poll.h>
#include <stdbool.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

IOF_TEST_CHECK_FIXTURES(setup, teardown, 60)

static atomic_long ctl_calls;

int epoll_ctl(int epfd, int op, int fd, struct epoll_event *ev) {
  static int (*real)(int, int, int, struct epoll_event *);
  if (!real) {
    *(void **)&real = dlsym(RTLD_NEXT, "epoll_ctl");
    if (!real) {
      errno = ENOSYS;
      return -1;
    }
  }
  atomic_fetch_add(&ctl_calls, 1);
  return real(epfd, op, fd, ev);
}

enum { ROUNDS = 400, WARMUP = 20 };

typedef struct pingpong {
  int fd[2];
  bool use_poll; /* each side polls for input before it reads */
  long ctl_before, ctl_after;
} pingpong;

/* Waits in poll() first when asked, as client libraries often do. */
static ssize_t read_msg(pingpong *p, int fd, char *b, size_t n) {
  if (p->use_poll) {
    struct pollfd q = {fd, POLLIN, 0};
    CHECK(iof_compat_poll(&q, 1, -1) == 1 && (q.revents & POLLIN));
  }
  return iof_compat_read(fd, b, n);
}

/* Echoes ROUNDS messages back on fd[1]. */
static int echo_side(void *arg) {
  pingpong *p = arg;
  char b[32];
  for (int i = 0; i < ROUNDS; i++) {
    ssize_t n = read_msg(p, p->fd[1], b, sizeof b);
    CHECK(n == 8);
    if (n <= 0) return -1;
    CHECK(iof_compat_write(p->fd[1], b, (size_t)n) == n);
  }
  return 0;
}

/* Sends ROUNDS messages on fd[0] and checks each echo. */
static int client_side(void *arg) {
  pingpong *p = arg;
  char b[32];
  for (int i = 0; i < ROUNDS; i++) {
    if (i == WARMUP) p->ctl_before = atomic_load(&ctl_calls);
    char m[9];
    snprintf(m, sizeof m, "%08d", i);
    CHECK(iof_compat_write(p->fd[0], m, 8) == 8);
    ssize_t n = read_msg(p, p->fd[0], b, sizeof b);
    CHECK(n == 8 && memcmp(b, m, 8) == 0);
    if (n <= 0) return -1;
  }
  p->ctl_after = atomic_load(&ctl_calls);
  return 0;
}

static void run_two(iof_fn a, iof_fn b, void *arg) {
  iof_io_context *io = iof_io_context_create();
  assert_non_null(io);
  int sa = -1, sb = -1;
  iof_launch_opts o = {0};
  o.on_done = compat_done;
  o.user = &sa;
  assert_int_equal(iof_run_async(iof_io_context_executor(io), &o, a, arg), 0);
  o.user = &sb;
  assert_int_equal(iof_run_async(iof_io_context_executor(io), &o, b, arg), 0);
  assert_true(iof_io_context_run(io) >= 0);
  assert_int_equal(iof_io_context_destroy(io), 0);
  assert_int_equal(sa, 0);
  assert_int_equal(sb, 0);
}

/* Two fibers ping-pong over a socketpair: after the first round trips,
 * the waits reuse the registration (a re-registration per wait would
 * make 2 * (ROUNDS - WARMUP) calls). */
static void round_trips(bool use_poll) {
  pingpong p = {.use_poll = use_poll};
  assert_int_equal(iof_compat_socketpair(AF_UNIX, SOCK_STREAM, 0, p.fd), 0);
  run_two(echo_side, client_side, &p);
  assert_no_failures();
  long calls = p.ctl_after - p.ctl_before;
  print_message("epoll_ctl calls in %d round trips: %ld\n", ROUNDS - WARMUP,
                calls);
  assert_true(calls < (ROUNDS - WARMUP) / 10);
  assert_int_equal(iof_compat_close(p.fd[0]), 0);
  assert_int_equal(iof_compat_close(p.fd[1]), 0);
}

static void test_round_trips_keep_registration(void **s) {
  (void)s;
  round_trips(false);
}

/* The same when each read is preceded by a one-fd poll(). */
static void test_polled_round_trips_keep_registration(void **s) {
  (void)s;
  round_trips(true);
}

/* ---- a reused number is registered anew --------------------------------- */

typedef struct reuse {
  int fd[2];
  int reader_fd;
  atomic_int phase;
} reuse;

/* Waits on fd[0] (the registration is made), closes the pair, makes a new
 * pair that reuses the numbers, and waits on the new reading end while the
 * writer fiber sends later. */
static int reuse_reader(void *arg) {
  reuse *r = arg;
  char b[8];
  CHECK(iof_compat_read(r->fd[0], b, sizeof b) == 1);
  int old0 = r->fd[0], old1 = r->fd[1];
  CHECK(iof_compat_close(r->fd[0]) == 0);
  CHECK(iof_compat_close(r->fd[1]) == 0);
  CHECK(iof_compat_socketpair(AF_UNIX, SOCK_STREAM, 0, r->fd) == 0);
  /* Lowest free numbers: the new pair names what the old one did. */
  CHECK((r->fd[0] == old0 && r->fd[1] == old1) ||
        (r->fd[0] == old1 && r->fd[1] == old0));
  /* A hang here (a wait that trusted a stale registration) ends as EAGAIN
   * after 5 s rather than stalling the test. */
  struct timeval tv = {5, 0};
  CHECK(iof_compat_setsockopt(r->fd[0], SOL_SOCKET, SO_RCVTIMEO, &tv,
                              sizeof tv) == 0);
  atomic_store(&r->phase, 1);
  CHECK(iof_compat_read(r->fd[0], b, sizeof b) == 1 && b[0] == 'y');
  return 0;
}

static int reuse_writer(void *arg) {
  reuse *r = arg;
  CHECK(iof_sleep_for(5 * MS) == 0);
  CHECK(iof_compat_write(r->fd[1], "x", 1) == 1);
  for (int i = 0; i < 1000 && !atomic_load(&r->phase); i++)
    CHECK(iof_sleep_for(1 * MS) == 0);
  CHECK(iof_sleep_for(5 * MS) == 0); /* the reader is waiting by now */
  CHECK(iof_compat_write(r->fd[1], "y", 1) == 1);
  return 0;
}

static void test_reused_number_registered_anew(void **s) {
  (void)s;
  reuse r = {0};
  assert_int_equal(iof_compat_socketpair(AF_UNIX, SOCK_STREAM, 0, r.fd), 0);
  run_two(reuse_reader, reuse_writer, &r);
  assert_no_failures();
  assert_int_equal(iof_compat_close(r.fd[0]), 0);
  assert_int_equal(iof_compat_close(r.fd[1]), 0);
}

/* ---- the same fd from one io_context, then another ---------------------- */

typedef struct two_loops {
  int fd[2];
} two_loops;

static int wait_then_read(void *arg) {
  two_loops *t = arg;
  char b[8];
  CHECK(iof_compat_read(t->fd[0], b, sizeof b) == 1);
  return 0;
}

static int write_later(void *arg) {
  two_loops *t = arg;
  CHECK(iof_sleep_for(5 * MS) == 0);
  CHECK(iof_compat_write(t->fd[1], "z", 1) == 1);
  return 0;
}

static void test_fd_waited_from_two_contexts(void **s) {
  (void)s;
  two_loops t;
  assert_int_equal(iof_compat_socketpair(AF_UNIX, SOCK_STREAM, 0, t.fd), 0);
  struct timeval tv = {5, 0};
  assert_int_equal(
      iof_compat_setsockopt(t.fd[0], SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv),
      0);
  /* Three io_contexts in turn, each waiting on the same fd: a new loop
   * has no registration of it, whatever the last one had. */
  for (int i = 0; i < 3; i++) run_two(wait_then_read, write_later, &t);
  assert_no_failures();
  assert_int_equal(iof_compat_close(t.fd[0]), 0);
  assert_int_equal(iof_compat_close(t.fd[1]), 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_round_trips_keep_registration, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(test_polled_round_trips_keep_registration,
                                      setup, teardown),
      cmocka_unit_test_setup_teardown(test_reused_number_registered_anew, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(test_fd_waited_from_two_contexts, setup,
                                      teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
