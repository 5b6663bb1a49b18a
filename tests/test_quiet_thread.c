/* The runtime's own threads (thread pool workers, resolver workers, the
 * timer service, compat's background io thread) take no process signal:
 * a program that blocks a signal on its threads and waits for it with
 * sigtimedwait gets it, even when those threads were made before it
 * blocked anything (apache's worker MPM under the hook lost SIGTERM to a
 * resolver thread). Faults stay open on them. */
#include "test_support.h"

#include <iofiber/compat_io.h>
#include <iofiber/iofiber.h>

#include <dirent.h>
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <netdb.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

static atomic_int handled;

static void record_status(void *user, int status) {
  atomic_store((atomic_int *)user, status);
}

static void on_usr1(int sig) {
  (void)sig;
  atomic_fetch_add(&handled, 1);
}

/* Starts every kind of runtime thread while nothing is blocked. */
static int resolve_fn(void *arg) {
  struct addrinfo *res = NULL;
  int r = iof_resolve(arg, "localhost", "80", NULL, &res);
  if (r == 0) freeaddrinfo(res);
  return r;
}

static int pool_fn(void *arg) {
  (void)arg;
  int r = iof_sleep_for(1000000); /* the timer service */
  if (r < 0) return r;
  int p[2];
  if (pipe(p) != 0) return -errno;
  /* A pool fiber's fd wait runs on compat's background io thread. */
  r = iof_compat_write(p[1], "x", 1) == 1 ? 0 : -errno;
  char c;
  if (r == 0) r = iof_compat_read(p[0], &c, 1) == 1 ? 0 : -errno;
  close(p[0]);
  close(p[1]);
  return r;
}

/* The mask of thread tid, from /proc: one bit per signal, SIGHUP = bit 0. */
static unsigned long long read_blocked(const char *tid) {
  char path[300], line[256];
  snprintf(path, sizeof path, "/proc/self/task/%s/status", tid);
  FILE *f = fopen(path, "r");
  if (!f) return 0;
  unsigned long long m = 0;
  while (fgets(line, sizeof line, f))
    if (!strncmp(line, "SigBlk:", 7)) m = strtoull(line + 7, NULL, 16);
  fclose(f);
  return m;
}

#define BIT(sig) (1ULL << ((sig)-1))

/* The mask a thread keeps: glibc's pthread_create blocks every signal in
 * the creating thread around its clone, so a runtime thread caught while
 * it starts another shows all blocked for a moment. */
static unsigned long long blocked_of(const char *tid) {
  unsigned long long m = read_blocked(tid);
  for (int i = 0; i < 100 && (m & BIT(SIGSEGV)); i++) {
    usleep(2000);
    m = read_blocked(tid);
  }
  return m;
}

static void runtime_threads_take_no_signal(void **state) {
  (void)state;
  iof_io_context *io = iof_io_context_create();
  assert_non_null(io);
  iof_thread_pool *pool = iof_thread_pool_create(2);
  assert_non_null(pool);
  atomic_int status[2] = {1, 1};
  iof_launch_opts o = {0};
  o.on_done = record_status;
  o.user = &status[0];
  assert_int_equal(
      iof_run_async(iof_io_context_executor(io), &o, resolve_fn, io), 0);
  assert_true(iof_io_context_run(io) >= 0);
  o.user = &status[1];
  assert_int_equal(
      iof_run_async(iof_thread_pool_executor(pool), &o, pool_fn, NULL), 0);
  for (int i = 0; i < 5000 && atomic_load(&status[1]) == 1; i++) sleep_ms(1);
  assert_int_equal(atomic_load(&status[0]), 0);
  assert_int_equal(atomic_load(&status[1]), 0);

  /* Every thread but this one blocks the process signals, not faults. */
  char me[32];
  snprintf(me, sizeof me, "%ld", (long)syscall(SYS_gettid));
  DIR *d = opendir("/proc/self/task");
  assert_non_null(d);
  int others = 0;
  struct dirent *e;
  while ((e = readdir(d))) {
    if (e->d_name[0] == '.' || !strcmp(e->d_name, me)) continue;
    unsigned long long m = blocked_of(e->d_name);
    assert_true(m & BIT(SIGUSR1));
    assert_true(m & BIT(SIGTERM));
    assert_true(m & BIT(SIGINT));
    assert_false(m & BIT(SIGSEGV));
    assert_false(m & BIT(SIGBUS));
    others++;
  }
  closedir(d);
  /* Two pool workers, a resolver worker and the timer service at least
   * (compat's background io thread too if the pipe read had to wait). */
  assert_true(others >= 4);

  /* So a signal this thread blocks stays pending for its sigtimedwait. */
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_usr1;
  assert_int_equal(sigaction(SIGUSR1, &sa, NULL), 0);
  sigset_t set, old;
  sigemptyset(&set);
  sigaddset(&set, SIGUSR1);
  assert_int_equal(pthread_sigmask(SIG_BLOCK, &set, &old), 0);
  for (int i = 0; i < 20; i++) {
    assert_int_equal(kill(getpid(), SIGUSR1), 0);
    struct timespec ts = {2, 0};
    assert_int_equal(sigtimedwait(&set, NULL, &ts), SIGUSR1);
  }
  assert_int_equal(atomic_load(&handled), 0);
  assert_int_equal(pthread_sigmask(SIG_SETMASK, &old, NULL), 0);
  sa.sa_handler = SIG_DFL;
  sigaction(SIGUSR1, &sa, NULL);

  assert_int_equal(iof_thread_pool_join(pool), 0);
  assert_int_equal(iof_thread_pool_destroy(pool), 0);
  assert_int_equal(iof_io_context_destroy(io), 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(runtime_threads_take_no_signal),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
