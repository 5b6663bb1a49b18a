/* compat's waits for child processes (compat_io.h): waitpid, wait, wait4
 * and waitid suspend only the calling fiber (another fiber of the thread
 * keeps ticking) and return the kernel's answer: the pid, the exit status,
 * a stop under WUNTRACED, ECHILD without children, 0 under WNOHANG.
 * system() runs its shell while the other fiber ticks, with SIGINT
 * ignored meanwhile and restored after. A traced child's stop, which
 * waitpid reports without WUNTRACED, ends the wait for that one child
 * (the exit-only pidfd it waits on never shows it).
 *
 * IOF_TEST_THREADED */
#include "compat_io_test.h"

#include <signal.h>
#include <stdatomic.h>
#include <sys/ptrace.h>
#include <sys/resource.h>
#include <sys/wait.h>

IOF_TEST_CHECK_FIXTURES(setup, teardown, 60)

static atomic_int ticks;
static atomic_bool stop;

static int ticker(void *arg) {
  (void)arg;
  for (int i = 0; i < 4000 && !atomic_load(&stop); i++) {
    CHECK(iof_sleep_for(2 * MS) == 0);
    atomic_fetch_add(&ticks, 1);
  }
  return 0;
}

/* A child that sleeps ms, then exits with code. */
static pid_t child(int ms, int code) {
  pid_t p = fork();
  if (p == 0) {
    struct timespec t = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&t, NULL);
    _exit(code);
  }
  return p;
}

static int sc_waits(void *arg) {
  (void)arg;
  errno = 31;
  int st = 0;
  /* One child, by pid: the pidfd path. */
  int t0 = atomic_load(&ticks);
  pid_t p = child(80, 7);
  CHECK(p > 0);
  CHECK(iof_compat_waitpid(p, &st, WNOHANG) == 0); /* still running */
  CHECK(iof_compat_waitpid(p, &st, 0) == p);
  CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 7);
  CHECK(atomic_load(&ticks) >= t0 + 10); /* the thread was not blocked */
  CHECK(errno == 31);
  /* Any child: the polling path. */
  t0 = atomic_load(&ticks);
  p = child(60, 3);
  CHECK(iof_compat_wait(&st) == p);
  CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 3);
  CHECK(atomic_load(&ticks) >= t0 + 5);
  /* wait3 (glibc's calls its own wait4, past any interposer). */
  t0 = atomic_load(&ticks);
  p = child(60, 2);
  struct rusage ru3;
  CHECK(iof_compat_wait3(&st, 0, &ru3) == p && WEXITSTATUS(st) == 2);
  CHECK(atomic_load(&ticks) >= t0 + 5);
  /* wait4 with its usage report, waitid with its siginfo. */
  p = child(30, 4);
  struct rusage ru;
  memset(&ru, 0xff, sizeof ru);
  CHECK(iof_compat_wait4(p, &st, 0, &ru) == p && WEXITSTATUS(st) == 4);
  CHECK(ru.ru_utime.tv_sec >= 0 && ru.ru_utime.tv_sec < 100);
  p = child(30, 5);
  siginfo_t si;
  memset(&si, 0, sizeof si);
  CHECK(iof_compat_waitid(P_PID, (id_t)p, &si, WEXITED) == 0);
  CHECK(si.si_pid == p && si.si_code == CLD_EXITED && si.si_status == 5);
  /* Linux takes a NULL siginfo; the fiber still waits alone. */
  t0 = atomic_load(&ticks);
  p = child(60, 6);
  CHECK(iof_compat_waitid(P_PID, (id_t)p, NULL, WEXITED) == 0);
  CHECK(atomic_load(&ticks) >= t0 + 5);
  /* A stop under WUNTRACED (polling: a pidfd tells exits only). */
  p = child(5000, 0);
  CHECK(kill(p, SIGSTOP) == 0);
  CHECK(iof_compat_waitpid(p, &st, WUNTRACED) == p && WIFSTOPPED(st));
  CHECK(kill(p, SIGKILL) == 0);
  CHECK(iof_compat_waitpid(p, &st, 0) == p && WIFSIGNALED(st) &&
        WTERMSIG(st) == SIGKILL);
  /* No child left. */
  errno = 0;
  CHECK(iof_compat_waitpid(-1, &st, 0) == -1 && errno == ECHILD);
  errno = 0;
  CHECK(iof_compat_wait(NULL) == -1 && errno == ECHILD);
  errno = 0;
  CHECK(iof_compat_wait3(NULL, 0, NULL) == -1 && errno == ECHILD);
  errno = 0;
  CHECK(iof_compat_waitid(P_ALL, 0, &si, WEXITED) == -1 && errno == ECHILD);
  errno = 0;
  CHECK(iof_compat_waitid(P_ALL, 0, NULL, WEXITED) == -1);
  atomic_store(&stop, true);
  return 0;
}

static void test_waits_suspend_the_fiber(void **s) {
  (void)s;
  iof_io_context *io = iof_io_context_create();
  assert_non_null(io);
  int st_w = -12345, st_t = -12345;
  iof_launch_opts o = {0};
  o.on_done = compat_done;
  iof_executor_ref ex = iof_io_context_executor(io);
  o.user = &st_t;
  assert_int_equal(iof_run_async(ex, &o, ticker, NULL), 0);
  o.user = &st_w;
  assert_int_equal(iof_run_async(ex, &o, sc_waits, NULL), 0);
  assert_true(iof_io_context_run(io) >= 0);
  assert_int_equal(iof_io_context_destroy(io), 0);
  assert_int_equal(st_w, 0);
  assert_int_equal(st_t, 0);
  assert_no_failures();
}

static atomic_int int_ignored_seen;

static int watcher(void *arg) {
  (void)arg;
  for (int i = 0; i < 50; i++) {
    iof_sleep_for(2 * MS);
    struct sigaction sa;
    sigaction(SIGINT, NULL, &sa);
    if (sa.sa_handler == SIG_IGN) atomic_store(&int_ignored_seen, 1);
  }
  return 0;
}

static int sc_system(void *arg) {
  (void)arg;
  int t0 = atomic_load(&ticks);
  int st = iof_compat_system("sleep 0.15; exit 3");
  CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 3);
  CHECK(atomic_load(&ticks) >= t0 + 20);
  CHECK(iof_compat_system(NULL) != 0); /* a shell is there */
  st = iof_compat_system("kill -INT $$");
  CHECK(WIFSIGNALED(st) && WTERMSIG(st) == SIGINT); /* default in the child */
  struct sigaction sa;
  sigaction(SIGINT, NULL, &sa);
  CHECK(sa.sa_handler == SIG_DFL); /* restored */
  atomic_store(&stop, true);
  return 0;
}

static void test_system(void **s) {
  (void)s;
  atomic_store(&stop, false);
  atomic_store(&int_ignored_seen, 0);
  iof_io_context *io = iof_io_context_create();
  assert_non_null(io);
  int st[3] = {-1, -1, -1};
  iof_launch_opts o = {0};
  o.on_done = compat_done;
  iof_executor_ref ex = iof_io_context_executor(io);
  o.user = &st[0];
  assert_int_equal(iof_run_async(ex, &o, ticker, NULL), 0);
  o.user = &st[1];
  assert_int_equal(iof_run_async(ex, &o, watcher, NULL), 0);
  o.user = &st[2];
  assert_int_equal(iof_run_async(ex, &o, sc_system, NULL), 0);
  assert_true(iof_io_context_run(io) >= 0);
  assert_int_equal(iof_io_context_destroy(io), 0);
  assert_int_equal(st[2], 0);
  assert_int_equal(atomic_load(&int_ignored_seen), 1);
  assert_no_failures();
}

/* Outside fibers the calls are the plain ones. */
static int sc_traced(void *arg) {
  (void)arg;
  pid_t pid = fork();
  if (pid == 0) {
    if (ptrace(PTRACE_TRACEME, 0, NULL, NULL) != 0) _exit(42);
    raise(SIGSTOP);
    _exit(7);
  }
  CHECK(pid > 0);
  int st = 0;
  int64_t t0 = iof_now_ns();
  CHECK(iof_compat_waitpid(pid, &st, 0) == pid);
  if (WIFEXITED(st) && WEXITSTATUS(st) == 42) return 0; /* no ptrace here */
  CHECK(WIFSTOPPED(st) && WSTOPSIG(st) == SIGSTOP);
  CHECK(iof_now_ns() - t0 < 5000 * MS);
  CHECK(ptrace(PTRACE_DETACH, pid, NULL, NULL) == 0);
  CHECK(iof_compat_waitpid(pid, &st, 0) == pid);
  CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 7);
  return 0;
}

static void test_traced_child_stop(void **s) {
  (void)s;
  assert_int_equal(in_fiber(sc_traced, NULL), 0);
  assert_no_failures();
}

static void test_plain_thread(void **s) {
  (void)s;
  int st = 0;
  pid_t p = child(10, 9);
  assert_int_equal(iof_compat_waitpid(p, &st, 0), p);
  assert_int_equal(WEXITSTATUS(st), 9);
  errno = 0;
  assert_int_equal(iof_compat_wait(&st), -1);
  assert_int_equal(errno, ECHILD);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_waits_suspend_the_fiber, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(test_system, setup, teardown),
      cmocka_unit_test_setup_teardown(test_traced_child_stop, setup, teardown),
      cmocka_unit_test_setup_teardown(test_plain_thread, setup, teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
