/* File locks from fibers (iof_compat_flock, iof_compat_lockf, fcntl's
 * F_SETLKW / F_OFD_SETLKW): a fiber waiting for a lock lets the other
 * fibers of its thread run, including the one holding the lock through
 * its own open of the file (in the kernel that wait would deadlock the
 * thread); record locks held by another process; error codes. */
#include "check_test.h"

#include <iofiber/compat_io.h>

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <sys/file.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static char path[64];

static int64_t mono_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static int file_setup(void **state) {
  (void)state;
  checks_begin(30);
  snprintf(path, sizeof path, "/tmp/iof-lock-XXXXXX");
  int fd = mkstemp(path);
  if (fd < 0) return -1;
  close(fd);
  return 0;
}

static int file_teardown(void **state) {
  (void)state;
  unlink(path);
  alarm(0);
  return 0;
}

/* ---- two fibers of one thread, each with its own open of the file ----- */

static atomic_int step, ticks;
static atomic_bool done;
static bool use_ofd;

static int lock_excl(int fd) {
  if (!use_ofd) return iof_compat_flock(fd, LOCK_EX);
  struct flock l = {.l_type = F_WRLCK, .l_whence = SEEK_SET};
  return iof_compat_fcntl(fd, F_OFD_SETLKW, &l);
}

static int unlock(int fd) {
  if (!use_ofd) return iof_compat_flock(fd, LOCK_UN);
  struct flock l = {.l_type = F_UNLCK, .l_whence = SEEK_SET};
  return iof_compat_fcntl(fd, F_OFD_SETLK, &l);
}

static int holder(void *arg) {
  (void)arg;
  int fd = open(path, O_RDWR);
  CHECK(fd >= 0);
  CHECK(lock_excl(fd) == 0);
  atomic_store(&step, 1);
  iof_sleep_for(50000000);
  CHECK(atomic_load(&step) == 2); /* the other one is waiting */
  atomic_store(&step, 3);
  CHECK(unlock(fd) == 0);
  close(fd);
  return 0;
}

static int contender(void *arg) {
  (void)arg;
  while (atomic_load(&step) == 0) iof_yield();
  int fd = open(path, O_RDWR);
  CHECK(fd >= 0);
  atomic_store(&step, 2);
  int64_t t0 = mono_ns();
  errno = 1234;
  CHECK(lock_excl(fd) == 0);
  CHECK(errno == 1234); /* kept on success */
  CHECK(atomic_load(&step) == 3);
  CHECK(mono_ns() - t0 >= 30000000);
  CHECK(unlock(fd) == 0);
  close(fd);
  atomic_store(&done, true);
  return 0;
}

static int ticker(void *arg) {
  (void)arg;
  while (!atomic_load(&done)) {
    atomic_fetch_add(&ticks, 1);
    iof_sleep_for(2000000);
  }
  return 0;
}

static void two_fibers(bool ofd) {
  use_ofd = ofd;
  atomic_store(&step, 0);
  atomic_store(&ticks, 0);
  atomic_store(&done, false);
  run_fibers3(holder, contender, ticker);
  assert_no_failures();
  assert_true(atomic_load(&done));
  assert_true(atomic_load(&ticks) >= 10);
}

static void test_flock_same_thread(void **state) {
  (void)state;
  two_fibers(false);
}

static void test_ofd_same_thread(void **state) {
  (void)state;
  two_fibers(true);
}

/* ---- record locks held by another process ----------------------------- */

/* A child that takes a write lock on the whole file (fcntl or lockf), says
 * so on the pipe, holds it 100 ms and exits. */
static pid_t child_holds(bool with_lockf, int *rd) {
  int p[2];
  assert_int_equal(pipe(p), 0);
  pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) {
    int fd = open(path, O_RDWR);
    struct flock l = {.l_type = F_WRLCK, .l_whence = SEEK_SET};
    int r = with_lockf ? lockf(fd, F_LOCK, 0) : fcntl(fd, F_SETLK, &l);
    if (write(p[1], "L", 1) != 1 || r != 0) _exit(1);
    usleep(100000);
    _exit(0);
  }
  close(p[1]);
  *rd = p[0];
  return pid;
}

static int rd_pipe;
static bool by_lockf;

static int record_waiter(void *arg) {
  (void)arg;
  char c;
  CHECK(iof_compat_read(rd_pipe, &c, 1) == 1 && c == 'L');
  int fd = open(path, O_RDWR);
  CHECK(fd >= 0);
  int64_t t0 = mono_ns();
  if (by_lockf) {
    errno = 0;
    CHECK(iof_compat_lockf(fd, F_TLOCK, 0) == -1 &&
          (errno == EACCES || errno == EAGAIN));
    CHECK(iof_compat_lockf(fd, F_LOCK, 0) == 0);
  } else {
    struct flock l = {.l_type = F_WRLCK, .l_whence = SEEK_SET};
    CHECK(iof_compat_fcntl(fd, F_SETLKW, &l) == 0);
  }
  CHECK(mono_ns() - t0 >= 50000000);
  close(fd);
  atomic_store(&done, true);
  return 0;
}

static void record_lock(bool with_lockf) {
  by_lockf = with_lockf;
  atomic_store(&ticks, 0);
  atomic_store(&done, false);
  pid_t pid = child_holds(with_lockf, &rd_pipe);
  run_fibers3(record_waiter, ticker, NULL);
  int st;
  assert_int_equal(waitpid(pid, &st, 0), pid);
  assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
  close(rd_pipe);
  assert_no_failures();
  assert_true(atomic_load(&done));
  assert_true(atomic_load(&ticks) >= 15);
}

static void test_setlkw_other_process(void **state) {
  (void)state;
  record_lock(false);
}

static void test_lockf_other_process(void **state) {
  (void)state;
  record_lock(true);
}

/* ---- errors ----------------------------------------------------------- */

static int errors(void *arg) {
  (void)arg;
  errno = 0;
  CHECK(iof_compat_flock(-1, LOCK_EX) == -1 && errno == EBADF);
  int fd = open(path, O_RDWR);
  CHECK(fd >= 0);
  errno = 0;
  CHECK(iof_compat_flock(fd, 0) == -1 && errno == EINVAL);
  errno = 0;
  CHECK(iof_compat_fcntl(fd, F_SETLKW, NULL) == -1 && errno == EFAULT);
  errno = 0;
  CHECK(iof_compat_lockf(fd, 99, 0) == -1 && errno == EINVAL);
  /* Free locks are taken at once, shared ones by two opens. */
  int fd2 = open(path, O_RDWR);
  CHECK(iof_compat_flock(fd, LOCK_SH) == 0);
  CHECK(iof_compat_flock(fd2, LOCK_SH) == 0);
  errno = 0;
  CHECK(iof_compat_flock(fd2, LOCK_EX | LOCK_NB) == -1 && errno == EWOULDBLOCK);
  CHECK(iof_compat_flock(fd, LOCK_UN) == 0);
  CHECK(iof_compat_flock(fd2, LOCK_EX) == 0);
  close(fd2);
  close(fd);
  return 0;
}

static void test_errors(void **state) {
  (void)state;
  run_fibers3(errors, NULL, NULL);
  assert_no_failures();
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_flock_same_thread, file_setup,
                                      file_teardown),
      cmocka_unit_test_setup_teardown(test_ofd_same_thread, file_setup,
                                      file_teardown),
      cmocka_unit_test_setup_teardown(test_setlkw_other_process, file_setup,
                                      file_teardown),
      cmocka_unit_test_setup_teardown(test_lockf_other_process, file_setup,
                                      file_teardown),
      cmocka_unit_test_setup_teardown(test_errors, file_setup, file_teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
