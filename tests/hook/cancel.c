/* Thread cancellation and cleanup handlers, as glibc does them (run under
 * iofiber-run, plain, and built with the header swap):
 * - pthread_cancel ends the blocking call a thread waits in (poll, read,
 *   sleep, poll of several fds, cond wait, sem_wait, join, waitpid) or acts
 *   at its next one; the thread's cleanup handlers run newest first, then
 *   its key destructors; join gets PTHREAD_CANCELED;
 * - a cond wait re-locks the mutex before the handlers run;
 * - pthread_setcancelstate(DISABLE) holds a cancel until re-enabled, and
 *   pthread_testcancel acts on it;
 * - pthread_exit runs the handlers too, and cleanup_pop(1) runs one;
 * - a joiner that is cancelled leaves its target joinable; a cancel of a
 *   thread that has ended is 0;
 * - an init routine of pthread_once that exits lets a later call run one;
 * - a cancelled wait leaves no fd behind.
 * Prints "all steps right" when every step is. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <semaphore.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/select.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define STEPS_NAME "cancel"
#include "steps.h"

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

/* The handlers' log: their order, as letters. */
static char trail[32];
static atomic_int trail_n;
static void note(void *c) {
  int i = atomic_fetch_add(&trail_n, 1);
  if (i < (int)sizeof trail - 1) trail[i] = *(const char *)c;
}

static void reset_trail(void) {
  memset(trail, 0, sizeof trail);
  atomic_store(&trail_n, 0);
}

static pthread_key_t key;
static void key_dtor(void *v) {
  (void)v;
  note("k");
}

enum { W_POLL, W_READ, W_SLEEP, W_POLLSET, W_SELECT, W_WAITPID };
static int pipe_fds[2];
static pid_t child;

static void *blocker(void *arg) {
  int how = (int)(long)arg;
  pthread_setspecific(key, (void *)1);
  pthread_cleanup_push(note, "a");
  pthread_cleanup_push(note, "b");
  char c;
  struct pollfd p[2] = {{pipe_fds[0], POLLIN, 0}, {pipe_fds[0], POLLPRI, 0}};
  fd_set rd;
  switch (how) {
  case W_POLL:
    for (;;) poll(NULL, 0, 10);
  case W_READ:
    (void)read(pipe_fds[0], &c, 1);
    break;
  case W_SLEEP:
    sleep(100);
    break;
  case W_POLLSET:
    (void)poll(p, 2, -1);
    break;
  case W_SELECT:
    FD_ZERO(&rd);
    FD_SET(pipe_fds[0], &rd);
    (void)select(pipe_fds[0] + 1, &rd, NULL, NULL, NULL);
    break;
  case W_WAITPID:
    (void)waitpid(child, NULL, 0);
    break;
  }
  note("x"); /* never: the call above is cancelled */
  pthread_cleanup_pop(0);
  pthread_cleanup_pop(0);
  return NULL;
}

/* The lowest free fd: a cancelled wait must not leave one open. */
static int lowest_free_fd(void) {
  int fd = open("/dev/null", O_RDONLY);
  close(fd);
  return fd;
}

static void cancel_blocked(int how, const char *what) {
  reset_trail();
  int low = lowest_free_fd();
  pthread_t t;
  CHECK(pthread_create(&t, NULL, blocker, (void *)(long)how) == 0, what);
  usleep(50000);
  double t0 = now_s();
  CHECK(pthread_cancel(t) == 0, what);
  void *res = NULL;
  CHECK(pthread_join(t, &res) == 0, what);
  CHECK(res == PTHREAD_CANCELED, what);
  CHECK(now_s() - t0 < 2.0, what);
  CHECK(strcmp(trail, "bak") == 0, what);
  if (strcmp(trail, "bak") != 0) fprintf(stderr, "  trail %s\n", trail);
  CHECK(lowest_free_fd() == low, what);
}

/* ---- cond wait: the handler finds the mutex locked by the thread ---- */
static pthread_mutex_t m = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
static int held_in_handler;

static void unlock_m(void *a) {
  (void)a;
  held_in_handler = pthread_mutex_trylock(&m) == EBUSY;
  pthread_mutex_unlock(&m);
}

static void *cond_waiter(void *a) {
  (void)a;
  pthread_mutex_lock(&m);
  pthread_cleanup_push(unlock_m, NULL);
  for (;;) pthread_cond_wait(&cv, &m);
  pthread_cleanup_pop(1);
  return NULL;
}

static sem_t sem;
static void *sem_waiter(void *a) {
  (void)a;
  pthread_cleanup_push(note, "s");
  sem_wait(&sem);
  note("x");
  pthread_cleanup_pop(0);
  return NULL;
}

/* ---- disabled, then testcancel ---- */
static atomic_int reached;
static void *disabler(void *a) {
  (void)a;
  int old = -1;
  pthread_setcancelstate(PTHREAD_CANCEL_DISABLE, &old);
  CHECK(old == PTHREAD_CANCEL_ENABLE, "disable: old state");
  usleep(100000); /* the cancel comes meanwhile: held */
  atomic_store(&reached, 1);
  pthread_setcancelstate(PTHREAD_CANCEL_ENABLE, &old);
  CHECK(old == PTHREAD_CANCEL_DISABLE, "enable: old state");
  atomic_store(&reached, 2);
  pthread_testcancel();
  atomic_store(&reached, 3);
  return NULL;
}

/* ---- pthread_exit: handlers newest first, pop(1) runs one ---- */
static void *exiter(void *a) {
  (void)a;
  pthread_setspecific(key, (void *)1);
  pthread_cleanup_push(note, "a");
  pthread_cleanup_push(note, "b");
  pthread_cleanup_push(note, "p");
  pthread_cleanup_pop(1);
  pthread_exit((void *)7);
  pthread_cleanup_pop(0);
  pthread_cleanup_pop(0);
  return NULL;
}

/* ---- a cancelled joiner ---- */
static void *sleeper(void *a) {
  usleep(300000);
  return a;
}

static void *joiner(void *a) {
  pthread_t t = *(pthread_t *)a;
  pthread_cleanup_push(note, "j");
  pthread_join(t, NULL);
  note("x");
  pthread_cleanup_pop(0);
  return NULL;
}

/* ---- pthread_once whose init exits ---- */
static pthread_once_t once = PTHREAD_ONCE_INIT;
static int once_runs;
static void init_exit(void) {
  once_runs++;
  pthread_exit(NULL);
}
static void init_ok(void) {
  once_runs += 10;
}
static void *once_caller(void *a) {
  (void)a;
  pthread_once(&once, init_exit);
  return NULL;
}

static void *quick(void *a) {
  return a;
}

int main(void) {
  setvbuf(stdout, NULL, _IONBF, 0);
  pthread_key_create(&key, key_dtor);
  if (pipe(pipe_fds) != 0) return 1;

  cancel_blocked(W_POLL, "poll(NULL, 0, 10) loop");
  cancel_blocked(W_READ, "read of an empty pipe");
  cancel_blocked(W_SLEEP, "sleep(100)");
  cancel_blocked(W_POLLSET, "poll of two fds");
  cancel_blocked(W_SELECT, "select");
  child = fork();
  if (child == 0) {
    sleep(100);
    _exit(0);
  }
  cancel_blocked(W_WAITPID, "waitpid");
  kill(child, SIGKILL);
  waitpid(child, NULL, 0);

  /* cond wait */
  pthread_t t;
  void *res = NULL;
  pthread_create(&t, NULL, cond_waiter, NULL);
  usleep(50000);
  pthread_cancel(t);
  CHECK(pthread_join(t, &res) == 0 && res == PTHREAD_CANCELED, "cond wait");
  CHECK(held_in_handler, "cond wait: mutex held in the handler");
  CHECK(pthread_mutex_trylock(&m) == 0, "cond wait: mutex released");
  pthread_mutex_unlock(&m);

  /* sem_wait, and the post after it is not lost */
  reset_trail();
  sem_init(&sem, 0, 0);
  pthread_create(&t, NULL, sem_waiter, NULL);
  usleep(50000);
  pthread_cancel(t);
  CHECK(pthread_join(t, &res) == 0 && res == PTHREAD_CANCELED, "sem_wait");
  CHECK(strcmp(trail, "s") == 0, "sem_wait: handler");
  sem_post(&sem);
  CHECK(sem_trywait(&sem) == 0, "sem_wait: value kept");

  /* disabled cancel, then testcancel */
  pthread_create(&t, NULL, disabler, NULL);
  usleep(20000);
  pthread_cancel(t);
  CHECK(pthread_join(t, &res) == 0 && res == PTHREAD_CANCELED, "disabled");
  CHECK(atomic_load(&reached) == 2, "disabled: acts at testcancel only");
  int old;
  CHECK(pthread_setcancelstate(42, &old) == EINVAL, "bad state");

  /* pthread_exit */
  reset_trail();
  pthread_create(&t, NULL, exiter, NULL);
  CHECK(pthread_join(t, &res) == 0 && res == (void *)7, "pthread_exit");
  CHECK(strcmp(trail, "pbak") == 0, "pthread_exit: handlers, destructors");

  /* a cancelled joiner leaves its target joinable */
  reset_trail();
  pthread_t s, j;
  pthread_create(&s, NULL, sleeper, (void *)5);
  pthread_create(&j, NULL, joiner, &s);
  usleep(50000);
  pthread_cancel(j);
  CHECK(pthread_join(j, &res) == 0 && res == PTHREAD_CANCELED, "joiner");
  CHECK(strcmp(trail, "j") == 0, "joiner: handler");
  CHECK(pthread_join(s, &res) == 0 && res == (void *)5, "joiner: target");

  /* cancel of a thread that has ended */
  pthread_create(&t, NULL, quick, (void *)9);
  usleep(50000);
  CHECK(pthread_cancel(t) == 0, "ended thread: cancel");
  CHECK(pthread_join(t, &res) == 0 && res == (void *)9, "ended thread: join");

  /* once */
  pthread_create(&t, NULL, once_caller, NULL);
  pthread_join(t, NULL);
  pthread_once(&once, init_ok);
  CHECK(once_runs == 11, "once: init run again after an exit");

  if (failed) return 1;
  puts("all steps right");
  return 0;
}
