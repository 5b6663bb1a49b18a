/* compat's signal masks per fiber thread (compat_io.h), without the hook:
 * iof_compat_pthread_sigmask/sigprocmask in a fiber thread change and
 * report that thread's own mask; the OS thread blocks a signal only while
 * every fiber thread it runs blocks it; a new thread inherits its
 * creator's mask; SIGKILL and SIGSTOP never appear; a bad `how` is EINVAL
 * and changes nothing; a fiber thread on a thread pool keeps its own mask
 * without touching the pool threads'; outside fibers the plain calls.
 *
 * IOF_TEST_THREADED */
#include "compat_io_test.h"

#include <iofiber/compat_thread.h>
#include <iofiber/thread_pool.h>

#include <signal.h>
#include <pthread.h>
#include <sys/socket.h>
#include <poll.h>
#include <stdatomic.h>
#include <stdint.h>
#include <sys/syscall.h>
#include <unistd.h>

IOF_TEST_CHECK_FIXTURES(setup, teardown, 60)

/* The OS thread's mask, from the kernel. */
static bool os_blocks(int sig) {
  uint64_t m = 0;
  syscall(SYS_rt_sigprocmask, SIG_BLOCK, NULL, &m, sizeof m);
  return (m >> (sig - 1)) & 1;
}

static bool own_blocks(int sig) {
  sigset_t m;
  if (iof_compat_pthread_sigmask(SIG_BLOCK, NULL, &m) != 0) return false;
  return sigismember(&m, sig) == 1;
}

static sigset_t one(int sig) {
  sigset_t s;
  sigemptyset(&s);
  sigaddset(&s, sig);
  return s;
}

static void test_plain_thread(void **st) {
  (void)st;
  sigset_t u = one(SIGUSR1), old;
  assert_false(os_blocks(SIGUSR1));
  assert_int_equal(iof_compat_pthread_sigmask(SIG_BLOCK, &u, &old), 0);
  assert_true(os_blocks(SIGUSR1));
  assert_int_equal(sigismember(&old, SIGUSR1), 0);
  assert_int_equal(iof_compat_sigprocmask(SIG_UNBLOCK, &u, NULL), 0);
  assert_false(os_blocks(SIGUSR1));
  assert_int_equal(iof_compat_pthread_sigmask(12345, &u, NULL), EINVAL);
  errno = 0;
  assert_int_equal(iof_compat_sigprocmask(12345, &u, NULL), -1);
  assert_int_equal(errno, EINVAL);
  /* Without a set, how is not looked at. */
  assert_int_equal(iof_compat_pthread_sigmask(12345, NULL, &old), 0);
}

static atomic_bool ticker_up, ticker_stop;

static void *ticker(void *arg) {
  (void)arg;
  atomic_store(&ticker_up, true);
  for (int i = 0; i < 20000 && !atomic_load(&ticker_stop); i++)
    iof_sleep_for(MS);
  return NULL;
}

static void *probe(void *arg) {
  *(bool *)arg = own_blocks(SIGUSR1);
  return NULL;
}

static int masks_main(void *arg) {
  (void)arg;
  sigset_t u = one(SIGUSR1), old;
  atomic_store(&ticker_up, false);
  atomic_store(&ticker_stop, false);
  pthread_t t;
  CHECK(iof_compat_pthread_create(&t, NULL, ticker, NULL) == 0);
  for (int i = 0; i < 5000 && !atomic_load(&ticker_up); i++) iof_yield();
  CHECK(atomic_load(&ticker_up));

  /* main blocks it; the ticker, made before, leaves it open. */
  CHECK(iof_compat_pthread_sigmask(SIG_BLOCK, &u, &old) == 0);
  CHECK(sigismember(&old, SIGUSR1) == 0);
  CHECK(own_blocks(SIGUSR1));
  CHECK(!os_blocks(SIGUSR1));

  bool seen = false;
  pthread_t p;
  CHECK(iof_compat_pthread_create(&p, NULL, probe, &seen) == 0);
  CHECK(iof_compat_pthread_join(p, NULL) == 0);
  CHECK(seen); /* inherited */

  /* The ticker ends: every thread left blocks it. */
  atomic_store(&ticker_stop, true);
  CHECK(iof_compat_pthread_join(t, NULL) == 0);
  CHECK(os_blocks(SIGUSR1));
  CHECK(iof_compat_sigprocmask(SIG_SETMASK, &old, NULL) == 0);
  CHECK(!own_blocks(SIGUSR1));
  CHECK(!os_blocks(SIGUSR1));

  /* A bad how changes nothing; KILL and STOP are never blocked. */
  CHECK(iof_compat_pthread_sigmask(12345, &u, NULL) == EINVAL);
  errno = 0;
  CHECK(iof_compat_sigprocmask(-1, &u, NULL) == -1 && errno == EINVAL);
  CHECK(!own_blocks(SIGUSR1));
  sigset_t all, got;
  sigfillset(&all);
  CHECK(iof_compat_pthread_sigmask(SIG_SETMASK, &all, &old) == 0);
  CHECK(iof_compat_pthread_sigmask(SIG_BLOCK, NULL, &got) == 0);
  CHECK(sigismember(&got, SIGKILL) == 0 && sigismember(&got, SIGSTOP) == 0);
  CHECK(sigismember(&got, SIGTERM) == 1 && os_blocks(SIGTERM));
  CHECK(iof_compat_pthread_sigmask(SIG_SETMASK, &old, NULL) == 0);
  CHECK(!os_blocks(SIGTERM));
  return 0;
}

static void test_fiber_threads(void **st) {
  (void)st;
  assert_int_equal(iof_main(masks_main, NULL), 0);
  assert_no_failures();
  assert_false(os_blocks(SIGUSR1)); /* iof_main's thread as it was */
}

/* ppoll with a mask, ended by a close from another fiber thread while a
 * signal the mask lets in (the thread blocks it) is pending: the answer is
 * the closed entry's POLLNVAL, as the kernel's ppoll of a closed number
 * (a positive count delivers no signal), and the thread's own mask is back
 * on return: the signal stays pending until the thread unblocks it. */
static atomic_int usr2_runs;
static void on_usr2(int sig) {
  (void)sig;
  atomic_fetch_add(&usr2_runs, 1);
}

static void *kill_then_close(void *arg) {
  int fd = *(int *)arg;
  iof_sleep_for(30 * MS);
  kill(getpid(), SIGUSR2); /* seen by the loop only after the close */
  iof_compat_close(fd);
  return NULL;
}

static int ppoll_close_main(void *arg) {
  (void)arg;
  sigset_t u = one(SIGUSR2), old;
  CHECK(iof_compat_pthread_sigmask(SIG_BLOCK, &u, &old) == 0);
  int sv[2];
  CHECK(iof_compat_socketpair(AF_UNIX, SOCK_STREAM, 0, sv) == 0);
  pthread_t t;
  CHECK(iof_compat_pthread_create(&t, NULL, kill_then_close, &sv[0]) == 0);
  struct pollfd f = {sv[0], POLLIN, 0};
  errno = 0;
  int r = iof_compat_ppoll(&f, 1, NULL, &old); /* old lets SIGUSR2 in */
  CHECK(r == 1 && f.revents == POLLNVAL && errno == 0);
  CHECK(atomic_load(&usr2_runs) == 0);
  CHECK(own_blocks(SIGUSR2));
  CHECK(iof_compat_pthread_join(t, NULL) == 0);
  sigset_t pend;
  CHECK(sigpending(&pend) == 0 && sigismember(&pend, SIGUSR2) == 1);
  CHECK(iof_compat_pthread_sigmask(SIG_SETMASK, &old, NULL) == 0);
  CHECK(atomic_load(&usr2_runs) == 1); /* delivered once unblocked */
  iof_compat_close(sv[1]);
  return 0;
}

static void test_ppoll_mask_on_close(void **st) {
  (void)st;
  struct sigaction sa = {0}, prev;
  sa.sa_handler = on_usr2;
  sigemptyset(&sa.sa_mask);
  assert_int_equal(sigaction(SIGUSR2, &sa, &prev), 0);
  atomic_store(&usr2_runs, 0);
  assert_int_equal(iof_main(ppoll_close_main, NULL), 0);
  assert_no_failures();
  assert_int_equal(sigaction(SIGUSR2, &prev, NULL), 0);
  assert_false(os_blocks(SIGUSR2));
}

/* A fiber thread on a thread pool: its own mask, the pool's untouched. */
static atomic_int pool_ok;

static void *pool_thread(void *arg) {
  (void)arg;
  sigset_t u = one(SIGUSR2);
  bool before = os_blocks(SIGUSR2);
  CHECK(iof_compat_pthread_sigmask(SIG_UNBLOCK, &u, NULL) == 0);
  CHECK(!own_blocks(SIGUSR2));
  CHECK(os_blocks(SIGUSR2) == before);
  CHECK(iof_compat_pthread_sigmask(SIG_BLOCK, &u, NULL) == 0);
  CHECK(own_blocks(SIGUSR2));
  atomic_store(&pool_ok, 1);
  return NULL;
}

static int pool_starter(void *arg) {
  (void)arg;
  pthread_t t;
  CHECK(iof_compat_pthread_create(&t, NULL, pool_thread, NULL) == 0);
  CHECK(iof_compat_pthread_join(t, NULL) == 0);
  return 0;
}

static void pool_done(void *user, int status) {
  atomic_store((atomic_int *)user, status);
}

static void test_pool_fiber_thread(void **st) {
  (void)st;
  iof_thread_pool *tp = iof_thread_pool_create(2);
  assert_non_null(tp);
  atomic_int status = -12345;
  iof_launch_opts o = {0};
  o.on_done = pool_done;
  o.user = &status;
  atomic_store(&pool_ok, 0);
  assert_int_equal(
      iof_run_async(iof_thread_pool_executor(tp), &o, pool_starter, NULL), 0);
  for (int i = 0; i < 5000 && atomic_load(&status) == -12345; i++) usleep(1000);
  assert_int_equal(atomic_load(&status), 0);
  assert_int_equal(atomic_load(&pool_ok), 1);
  iof_thread_pool_stop(tp);
  assert_int_equal(iof_thread_pool_join(tp), 0);
  assert_int_equal(iof_thread_pool_destroy(tp), 0);
  assert_no_failures();
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_plain_thread, setup, teardown),
      cmocka_unit_test_setup_teardown(test_fiber_threads, setup, teardown),
      cmocka_unit_test_setup_teardown(test_ppoll_mask_on_close, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(test_pool_fiber_thread, setup, teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
