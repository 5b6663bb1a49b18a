/* Semaphores compat did not initialize are libc's: named ones (sem_open,
 * which Python's multiprocessing locks use) and process-shared ones. The
 * compat calls keep them working: across processes, and in a fiber
 * without blocking the other fibers of its thread. */
#include "check_test.h"

#include <iofiber/compat_thread.h>
#include <iofiber/iofiber.h>

#include <errno.h>
#include <fcntl.h>
#include <semaphore.h>
#include <stdio.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static int64_t mono_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static sem_t *named;
static int ticks;
static volatile int waiting_done;

static int ticker(void *arg) {
  (void)arg;
  while (!waiting_done) {
    ticks++;
    struct timespec ts = {0, 2000000};
    iof_compat_nanosleep(&ts, NULL);
  }
  return 0;
}

/* The fiber waits for a post made by a child process 100 ms later; the
 * ticker fiber on the same thread keeps running meanwhile. */
static int waiter(void *arg) {
  (void)arg;
  int64_t t0 = mono_ns(); /* before the fork: the child's 100 ms follow it */
  pid_t child = fork();
  if (child == 0) {
    usleep(100000);
    _exit(sem_post(named) == 0 ? 0 : 1);
  }
  CHECK(child > 0);
  int ticks0 = ticks;
  CHECK(iof_compat_sem_wait(named) == 0);
  int64_t waited = mono_ns() - t0;
  /* The thread was not blocked: the ticker ran during the wait (about 50
   * ticks; none if the wait held the thread). */
  CHECK(ticks - ticks0 >= 5);
  CHECK(waited >= 90 * 1000000LL && waited < 2000 * 1000000LL);
  int st;
  CHECK(waitpid(child, &st, 0) == child && WIFEXITED(st) &&
        WEXITSTATUS(st) == 0);
  /* Timed: nobody posts. */
  struct timespec abs;
  clock_gettime(CLOCK_MONOTONIC, &abs);
  abs.tv_nsec += 30000000;
  if (abs.tv_nsec >= 1000000000) abs.tv_sec++, abs.tv_nsec -= 1000000000;
  t0 = mono_ns();
  errno = 0;
  CHECK(iof_compat_sem_clockwait(named, CLOCK_MONOTONIC, &abs) == -1 &&
        errno == ETIMEDOUT);
  CHECK(mono_ns() - t0 >= 25 * 1000000LL);
  waiting_done = 1;
  return 0;
}

static void test_named_in_fibers(void **state) {
  (void)state;
  char name[64];
  snprintf(name, sizeof name, "/iof-test-%d", (int)getpid());
  named = sem_open(name, O_CREAT | O_EXCL, 0600, 0);
  assert_true(named != SEM_FAILED);
  sem_unlink(name);
  /* Outside fibers: libc's own behaviour through the compat calls. */
  assert_int_equal(iof_compat_sem_post(named), 0);
  int v = -1;
  assert_int_equal(iof_compat_sem_getvalue(named, &v), 0);
  assert_int_equal(v, 1);
  assert_int_equal(iof_compat_sem_trywait(named), 0);
  errno = 0;
  assert_int_equal(iof_compat_sem_trywait(named), -1);
  assert_int_equal(errno, EAGAIN);

  iof_io_context *io = iof_io_context_create();
  assert_non_null(io);
  iof_executor_ref ex = iof_io_context_executor(io);
  assert_int_equal(iof_run_async(ex, NULL, ticker, NULL), 0);
  assert_int_equal(iof_run_async(ex, NULL, waiter, NULL), 0);
  assert_true(iof_io_context_run(io) >= 0);
  assert_int_equal(iof_io_context_destroy(io), 0);
  assert_no_failures();
  sem_close(named);
}

/* A process-shared sem_init'd semaphore in shared memory, posted by a
 * child, waited for by a plain thread. */
static void test_pshared(void **state) {
  (void)state;
  sem_t *s = mmap(NULL, sizeof *s, PROT_READ | PROT_WRITE,
                  MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  assert_true(s != MAP_FAILED);
  assert_int_equal(iof_compat_sem_init(s, 1, 0), 0);
  pid_t child = fork();
  if (child == 0) {
    usleep(50000);
    _exit(iof_compat_sem_post(s) == 0 ? 0 : 1);
  }
  assert_int_equal(iof_compat_sem_wait(s), 0);
  int st;
  assert_int_equal(waitpid(child, &st, 0), child);
  assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
  assert_int_equal(iof_compat_sem_destroy(s), 0);
  munmap(s, sizeof *s);
}

IOF_TEST_CHECK_FIXTURES(setup, teardown, 20)

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_named_in_fibers, setup, teardown),
      cmocka_unit_test_setup_teardown(test_pshared, setup, teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
