/* libiofiber-hook linked into a program: what must keep working exactly as
 * without it (calls before main, plain threads, regular files, errno,
 * signal handlers interrupting fibers). Runs with IOF_HOOK_VERBOSE=1 so the
 * counters show which path each call took. */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "hook_support.h"
#include "test_support.h"

/* ---- before main ------------------------------------------------------ */

static char ctor_magic[4];
static ssize_t ctor_n = -1;

__attribute__((constructor)) static void read_before_main(void) {
  int fd = open("/proc/self/exe", O_RDONLY);
  if (fd < 0) return;
  ctor_n = read(fd, ctor_magic, sizeof ctor_magic);
  close(fd);
}

static void test_constructor_read(void **state) {
  (void)state;
  assert_int_equal(ctor_n, 4);
  assert_memory_equal(ctor_magic, "\177ELF", 4);
  assert_non_null(iof_hook_version());
}

/* ---- regular files from a fiber --------------------------------------- */

static char tmpl[64];

static int file_fiber(void *arg) {
  (void)arg;
  int fd = open(tmpl, O_RDWR);
  if (fd < 0) return -errno;
  char buf[32] = {0};
  ssize_t w = write(fd, "fiber-file", 10);
  off_t o = lseek(fd, 0, SEEK_SET);
  ssize_t r = read(fd, buf, sizeof buf);
  close(fd);
  if (w != 10 || o != 0 || r != 10 || memcmp(buf, "fiber-file", 10)) return -5;
  return 0;
}

static void test_regular_file_in_fiber(void **state) {
  (void)state;
  strcpy(tmpl, "/tmp/iof-hook-XXXXXX");
  int fd = mkstemp(tmpl);
  assert_true(fd >= 0);
  close(fd);
  unsigned long before = hook_count("read", 0) + hook_count("read", 1);
  assert_int_equal(hook_run_fibers(1, file_fiber, NULL), 0);
  /* The read was made by a fiber: it went through the fiber path (compat
   * passes regular files through) or blocked the thread; never "outside". */
  assert_int_equal(hook_count("read", 0) + hook_count("read", 1), before + 1);
  unlink(tmpl);
}

/* ---- plain threads ---------------------------------------------------- */

static pthread_mutex_t mtx = PTHREAD_MUTEX_INITIALIZER;
static int shared;

static void *thread_main(void *arg) {
  int *p = arg;
  char c;
  if (read(p[0], &c, 1) != 1) return (void *)1;
  for (int i = 0; i < 1000; i++) {
    pthread_mutex_lock(&mtx);
    shared++;
    pthread_mutex_unlock(&mtx);
  }
  return write(p[1], &c, 1) == 1 ? NULL : (void *)2;
}

static void test_plain_threads(void **state) {
  (void)state;
  int a[2], b[2];
  assert_int_equal(pipe(a), 0);
  assert_int_equal(pipe(b), 0);
  int p[2] = {a[0], b[1]};
  unsigned long plain = hook_count("read", 2);
  pthread_t t[4];
  for (int i = 0; i < 4; i++)
    assert_int_equal(pthread_create(&t[i], NULL, thread_main, p), 0);
  assert_int_equal(write(a[1], "wxyz", 4), 4);
  char got[4];
  size_t n = 0;
  while (n < 4) {
    ssize_t r = read(b[0], got + n, 4 - n);
    assert_true(r > 0);
    n += (size_t)r;
  }
  for (int i = 0; i < 4; i++) {
    void *ret = (void *)-1;
    assert_int_equal(pthread_join(t[i], &ret), 0);
    assert_null(ret);
  }
  assert_int_equal(shared, 4000);
  assert_true(hook_count("read", 2) >= plain + 5);
  close(a[0]), close(a[1]), close(b[0]), close(b[1]);
}

/* ---- errno ------------------------------------------------------------ */

static int errno_fiber(void *arg) {
  int *out = arg;
  errno = 0;
  out[0] = (int)read(-1, NULL, 0);
  out[1] = errno;
  errno = 0;
  out[2] = close(-1);
  out[3] = errno;
  return 0;
}

static void test_errno(void **state) {
  (void)state;
  errno = 0;
  assert_int_equal(read(-1, NULL, 0), -1);
  assert_int_equal(errno, EBADF);
  errno = 0;
  assert_int_equal(fcntl(-1, F_GETFL), -1);
  assert_int_equal(errno, EBADF);
  int out[4] = {0};
  assert_int_equal(hook_run_fibers(1, errno_fiber, out), 0);
  assert_int_equal(out[0], -1);
  assert_int_equal(out[1], EBADF);
  assert_int_equal(out[2], -1);
  assert_int_equal(out[3], EBADF);
}

/* ---- signal handlers -------------------------------------------------- */

static int sig_pipe[2];
static volatile sig_atomic_t sig_wrote = -2;

static void on_usr1(int sig) {
  (void)sig;
  int e = errno;
  sig_wrote = (sig_atomic_t)write(sig_pipe[1], "s", 1);
  errno = e;
}

static int signal_fiber(void *arg) {
  (void)arg;
  return raise(SIGUSR1) == 0 ? 0 : -errno;
}

static void test_signal_handler_in_fiber(void **state) {
  (void)state;
  assert_int_equal(pipe(sig_pipe), 0);
  struct sigaction sa, old;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_usr1;
  sigemptyset(&sa.sa_mask);
  assert_int_equal(sigaction(SIGUSR1, &sa, &old), 0);
  struct sigaction now;
  assert_int_equal(sigaction(SIGUSR1, NULL, &now), 0);
  /* The wrapper stays invisible: the program sees its own handler. */
  assert_ptr_equal(now.sa_handler, on_usr1);
  unsigned long fiber_w = hook_count("write", 0) + hook_count("write", 1);
  unsigned long plain_w = hook_count("write", 2);
  assert_int_equal(hook_run_fibers(1, signal_fiber, NULL), 0);
  assert_int_equal(sig_wrote, 1);
  /* The handler interrupted a fiber, yet its write took the plain path. */
  assert_int_equal(hook_count("write", 0) + hook_count("write", 1), fiber_w);
  assert_int_equal(hook_count("write", 2), plain_w + 1);
  char c;
  assert_int_equal(read(sig_pipe[0], &c, 1), 1);
  assert_int_equal(sigaction(SIGUSR1, &old, NULL), 0);
  close(sig_pipe[0]), close(sig_pipe[1]);
}

IOF_TEST_WATCHDOG(setup, teardown, 20)

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_constructor_read, setup, teardown),
      cmocka_unit_test_setup_teardown(test_regular_file_in_fiber, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(test_plain_threads, setup, teardown),
      cmocka_unit_test_setup_teardown(test_errno, setup, teardown),
      cmocka_unit_test_setup_teardown(test_signal_handler_in_fiber, setup,
                                      teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
