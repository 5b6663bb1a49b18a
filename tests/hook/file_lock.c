/* A program that serialises its threads with file locks, run plain (real
 * threads: the reference), under iofiber-run and with the header swap,
 * where its threads are fibers sharing one OS thread:
 * - 4 threads, each with its own open of a counter file, add 1 to the
 *   counter 20 times under flock(LOCK_EX), holding the lock across a
 *   sleep: the final count is exact (a fiber's flock that blocked its
 *   thread would deadlock: the holder could never wake to unlock);
 * - the same with fcntl(F_OFD_SETLKW) and with lockf(F_LOCK) against a
 *   child process that holds a record lock for 100 ms;
 * - alarm() around fcntl(F_SETLKW) on a lock a child holds: EINTR from
 *   the SIGALRM handler (no SA_RESTART), as the kernel gives; with
 *   SA_RESTART the wait goes on until the child lets go;
 * - alarm() around sem_wait on a semaphore libc made (sem_open): the
 *   same (Linux restarts its futex wait after an SA_RESTART handler);
 *   sem_timedwait is never restarted.
 * Prints "all steps right" when every step is. */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <semaphore.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define STEPS_NAME "file_lock"
#include "steps.h"

#define THREADS 4
#define ROUNDS 20

static char path[64];
static int use_ofd;

static int64_t mono_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static int lock_ex(int fd) {
  if (!use_ofd) return flock(fd, LOCK_EX);
  struct flock l = {.l_type = F_WRLCK, .l_whence = SEEK_SET};
  return fcntl(fd, F_OFD_SETLKW, &l);
}

static int unlock(int fd) {
  if (!use_ofd) return flock(fd, LOCK_UN);
  struct flock l = {.l_type = F_UNLCK, .l_whence = SEEK_SET};
  return fcntl(fd, F_OFD_SETLK, &l);
}

static void *adder(void *p) {
  (void)p;
  int fd = open(path, O_RDWR);
  CHECK(fd >= 0, "open");
  for (int r = 0; r < ROUNDS; r++) {
    CHECK(lock_ex(fd) == 0, "lock");
    char buf[32] = {0};
    CHECK(pread(fd, buf, sizeof buf - 1, 0) >= 0, "pread");
    int v = atoi(buf);
    usleep(300);
    int n = snprintf(buf, sizeof buf, "%d\n", v + 1);
    CHECK(pwrite(fd, buf, (size_t)n, 0) == n, "pwrite");
    CHECK(unlock(fd) == 0, "unlock");
  }
  close(fd);
  return NULL;
}

static int counter_value(void) {
  char buf[32] = {0};
  int fd = open(path, O_RDONLY);
  ssize_t n = fd >= 0 ? pread(fd, buf, sizeof buf - 1, 0) : -1;
  if (fd >= 0) close(fd);
  return n > 0 ? atoi(buf) : -1;
}

static void run_adders(int ofd, const char *what) {
  use_ofd = ofd;
  int fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0600);
  CHECK(fd >= 0 && write(fd, "0\n", 2) == 2, "reset the counter");
  close(fd);
  pthread_t t[THREADS];
  for (int i = 0; i < THREADS; i++)
    CHECK(pthread_create(&t[i], NULL, adder, NULL) == 0, "pthread_create");
  for (int i = 0; i < THREADS; i++)
    CHECK(pthread_join(t[i], NULL) == 0, "pthread_join");
  CHECK(counter_value() == THREADS * ROUNDS, what);
}

/* A child holding a write lock on the file for hold_ms (lockf or fcntl);
 * returns once it holds it. */
static pid_t child_holds(int with_lockf, int hold_ms) {
  int p[2];
  CHECK(pipe(p) == 0, "pipe");
  pid_t pid = fork();
  if (pid == 0) {
    int fd = open(path, O_RDWR);
    struct flock l = {.l_type = F_WRLCK, .l_whence = SEEK_SET};
    int r = with_lockf ? lockf(fd, F_LOCK, 0) : fcntl(fd, F_SETLK, &l);
    if (write(p[1], "L", 1) != 1 || r != 0) _exit(1);
    usleep((useconds_t)hold_ms * 1000);
    _exit(0);
  }
  char c;
  CHECK(pid > 0 && read(p[0], &c, 1) == 1, "the child holds the lock");
  close(p[0]);
  close(p[1]);
  return pid;
}

static volatile sig_atomic_t alarms;
static void on_alarm(int sig) {
  (void)sig;
  alarms++;
}

int main(void) {
  snprintf(path, sizeof path, "/tmp/iof-flock-%d", (int)getpid());
  run_adders(0, "flock kept the count exact");
  run_adders(1, "OFD locks kept the count exact");

  /* lockf against another process's lock. */
  pid_t pid = child_holds(1, 100);
  int fd = open(path, O_RDWR);
  int64_t t0 = mono_ms();
  CHECK(lockf(fd, F_LOCK, 0) == 0, "lockf waits for the child's lock");
  CHECK(mono_ms() - t0 >= 50, "lockf waited");
  CHECK(lockf(fd, F_ULOCK, 0) == 0, "lockf unlock");
  close(fd);
  int st;
  CHECK(waitpid(pid, &st, 0) == pid && WIFEXITED(st) && !WEXITSTATUS(st),
        "child 1");

  /* alarm() around F_SETLKW: the wait ends with EINTR. */
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_alarm;
  CHECK(sigaction(SIGALRM, &sa, NULL) == 0, "sigaction");
  pid = child_holds(0, 3000);
  fd = open(path, O_RDWR);
  struct flock l = {.l_type = F_WRLCK, .l_whence = SEEK_SET};
  alarm(1);
  t0 = mono_ms();
  errno = 0;
  CHECK(fcntl(fd, F_SETLKW, &l) == -1 && errno == EINTR,
        "the alarm ends the lock wait with EINTR");
  CHECK(alarms == 1 && mono_ms() - t0 < 2500, "after the alarm");
  alarm(0);
  close(fd);
  kill(pid, SIGKILL);
  CHECK(waitpid(pid, &st, 0) == pid, "child 2");

  /* With SA_RESTART the lock wait goes on after the handler. */
  sa.sa_flags = SA_RESTART;
  CHECK(sigaction(SIGALRM, &sa, NULL) == 0, "sigaction SA_RESTART");
  pid = child_holds(0, 1500);
  fd = open(path, O_RDWR);
  alarm(1);
  t0 = mono_ms();
  CHECK(fcntl(fd, F_SETLKW, &l) == 0, "SA_RESTART: the lock wait goes on");
  CHECK(alarms == 2 && mono_ms() - t0 >= 1200, "the lock after the child's");
  close(fd);
  CHECK(waitpid(pid, &st, 0) == pid && WIFEXITED(st) && !WEXITSTATUS(st),
        "child 3");

  /* sem_wait on libc's semaphore: restarted after an SA_RESTART handler
   * (a child posts after 1.5 s), EINTR after one without. */
  char name[64];
  snprintf(name, sizeof name, "/iof-hook-sem-%d", (int)getpid());
  sem_t *sem = sem_open(name, O_CREAT | O_EXCL, 0600, 0);
  CHECK(sem != SEM_FAILED, "sem_open");
  sem_unlink(name);
  pid = fork();
  if (pid == 0) {
    usleep(1500000);
    _exit(sem_post(sem) == 0 ? 0 : 1);
  }
  alarm(1);
  t0 = mono_ms();
  CHECK(sem_wait(sem) == 0, "SA_RESTART: sem_wait goes on to the post");
  CHECK(alarms == 3 && mono_ms() - t0 >= 1200, "the post after the alarm");
  CHECK(waitpid(pid, &st, 0) == pid && WIFEXITED(st) && !WEXITSTATUS(st),
        "child 4");
  sa.sa_flags = 0;
  CHECK(sigaction(SIGALRM, &sa, NULL) == 0, "sigaction without SA_RESTART");
  alarm(1);
  t0 = mono_ms();
  errno = 0;
  CHECK(sem_wait(sem) == -1 && errno == EINTR,
        "the alarm ends sem_wait with EINTR");
  CHECK(alarms == 4 && mono_ms() - t0 < 2500, "after the fourth alarm");
  /* sem_timedwait is never restarted, SA_RESTART or not. */
  sa.sa_flags = SA_RESTART;
  CHECK(sigaction(SIGALRM, &sa, NULL) == 0, "sigaction SA_RESTART again");
  struct timespec until;
  clock_gettime(CLOCK_REALTIME, &until);
  until.tv_sec += 4;
  alarm(1);
  t0 = mono_ms();
  errno = 0;
  CHECK(sem_timedwait(sem, &until) == -1 && errno == EINTR,
        "the alarm ends sem_timedwait with EINTR despite SA_RESTART");
  CHECK(alarms == 5 && mono_ms() - t0 < 2500, "after the last alarm");
  alarm(0);
  sem_close(sem);
  unlink(path);
  if (!failed) printf("all steps right\n");
  return failed;
}
