/* Process-shared pthread objects (LMDB's robust mutexes, shared-memory
 * queues) in memory shared with a child process, run plain (real threads:
 * the reference), under iofiber-run and with the header swap, where the
 * threads are fibers sharing one OS thread:
 * - pthread_mutex_init, pthread_cond_init and pthread_rwlock_init accept
 *   PTHREAD_PROCESS_SHARED and a robust mutex;
 * - a mutex the child holds for 300 ms: the parent's lock waits for it
 *   (no EDEADLK), its timed lock times out first, and a ticker thread
 *   keeps running meanwhile;
 * - two threads of the parent take turns on a shared mutex, one holding it
 *   across a sleep;
 * - a shared condition variable the child broadcasts after 300 ms wakes a
 *   waiting thread of the parent; a timed wait no one signals times out;
 * - a robust mutex whose owner (the child) exits holding it: EOWNERDEAD,
 *   then pthread_mutex_consistent makes it usable;
 * - a shared read-write lock the child write-locks for 200 ms: the
 *   parent's read lock waits for it;
 * - a shared barrier of three: two threads of the parent wait at it (on
 *   one OS thread under fibers) until the child arrives 200 ms later;
 *   each party passes, exactly one as the serial thread, and the ticker
 *   runs meanwhile.
 * Prints "all steps right" when every step is. */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define STEPS_NAME "pshared"
#include "steps.h"

struct shared {
  pthread_mutex_t m, robust;
  pthread_cond_t c;
  pthread_rwlock_t rw;
  pthread_barrier_t bar;
  atomic_int serials; /* PTHREAD_BARRIER_SERIAL_THREAD returns */
  atomic_int child_has_it;
  int flag;
  _Atomic int64_t released_ms; /* when the child let go (CLOCK_MONOTONIC) */
};

static struct shared *sh;
static atomic_int ticks, stop_ticker;

static int64_t mono_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* The time on clock 50 ms from now, as an absolute deadline. */
static struct timespec in_50ms(clockid_t clock) {
  struct timespec t;
  clock_gettime(clock, &t);
  t.tv_nsec += 50000000;
  if (t.tv_nsec >= 1000000000) {
    t.tv_sec++;
    t.tv_nsec -= 1000000000;
  }
  return t;
}

static void *ticker(void *p) {
  (void)p;
  while (!atomic_load(&stop_ticker)) {
    usleep(5000);
    atomic_fetch_add(&ticks, 1);
  }
  return NULL;
}

/* Forks a child that runs fn, after which it exits; returns when the child
 * says it holds what it took. */
static pid_t child(void (*fn)(void)) {
  atomic_store(&sh->child_has_it, 0);
  pid_t pid = fork();
  if (pid == 0) {
    fn();
    _exit(0);
  }
  CHECK(pid > 0, "fork");
  while (pid > 0 && !atomic_load(&sh->child_has_it)) usleep(1000);
  return pid;
}

static void reap(pid_t pid) {
  int st;
  CHECK(pid > 0 && waitpid(pid, &st, 0) == pid && WIFEXITED(st) &&
            WEXITSTATUS(st) == 0,
        "the child exited 0");
}

static void hold_mutex(void) {
  pthread_mutex_lock(&sh->m);
  atomic_store(&sh->child_has_it, 1);
  usleep(300000);
  atomic_store(&sh->released_ms, mono_ms());
  pthread_mutex_unlock(&sh->m);
}

static void broadcast_later(void) {
  atomic_store(&sh->child_has_it, 1);
  usleep(300000);
  pthread_mutex_lock(&sh->m);
  sh->flag = 1;
  atomic_store(&sh->released_ms, mono_ms());
  pthread_cond_broadcast(&sh->c);
  pthread_mutex_unlock(&sh->m);
}

static void die_holding(void) {
  pthread_mutex_lock(&sh->robust);
  atomic_store(&sh->child_has_it, 1);
  usleep(100000);
}

static void write_lock(void) {
  pthread_rwlock_wrlock(&sh->rw);
  atomic_store(&sh->child_has_it, 1);
  usleep(200000);
  pthread_rwlock_unlock(&sh->rw);
}

static void barrier_later(void) {
  atomic_store(&sh->child_has_it, 1);
  usleep(200000);
  int r = pthread_barrier_wait(&sh->bar);
  if (r == PTHREAD_BARRIER_SERIAL_THREAD) atomic_fetch_add(&sh->serials, 1);
  _exit(r == 0 || r == PTHREAD_BARRIER_SERIAL_THREAD ? 0 : 1);
}

static void *barrier_party(void *p) {
  (void)p;
  int r = pthread_barrier_wait(&sh->bar);
  CHECK(r == 0 || r == PTHREAD_BARRIER_SERIAL_THREAD, "a party passes");
  if (r == PTHREAD_BARRIER_SERIAL_THREAD) atomic_fetch_add(&sh->serials, 1);
  return NULL;
}

static atomic_int turns;

static void *taker(void *p) {
  (void)p;
  for (int i = 0; i < 20; i++) {
    CHECK(pthread_mutex_lock(&sh->m) == 0, "a thread's lock");
    int v = atomic_load(&turns);
    usleep(1000);
    atomic_store(&turns, v + 1);
    CHECK(pthread_mutex_unlock(&sh->m) == 0, "a thread's unlock");
  }
  return NULL;
}

static void *cond_waiter(void *p) {
  int64_t *woke = p;
  CHECK(pthread_mutex_lock(&sh->m) == 0, "lock before the wait");
  while (!sh->flag) CHECK(pthread_cond_wait(&sh->c, &sh->m) == 0, "cond_wait");
  CHECK(pthread_mutex_unlock(&sh->m) == 0, "unlock after the wait");
  *woke = mono_ms();
  return NULL;
}

int main(void) {
  sh = mmap(NULL, sizeof *sh, PROT_READ | PROT_WRITE,
            MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (sh == MAP_FAILED) return 1;
  pthread_mutexattr_t ma;
  pthread_mutexattr_init(&ma);
  pthread_mutexattr_setpshared(&ma, PTHREAD_PROCESS_SHARED);
  CHECK(pthread_mutex_init(&sh->m, &ma) == 0, "a shared mutex");
  pthread_mutexattr_setrobust(&ma, PTHREAD_MUTEX_ROBUST);
  CHECK(pthread_mutex_init(&sh->robust, &ma) == 0, "a robust mutex");
  pthread_condattr_t ca;
  pthread_condattr_init(&ca);
  pthread_condattr_setpshared(&ca, PTHREAD_PROCESS_SHARED);
  pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
  CHECK(pthread_cond_init(&sh->c, &ca) == 0, "a shared cond");
  pthread_rwlockattr_t ra;
  pthread_rwlockattr_init(&ra);
  pthread_rwlockattr_setpshared(&ra, PTHREAD_PROCESS_SHARED);
  CHECK(pthread_rwlock_init(&sh->rw, &ra) == 0, "a shared rwlock");

  pthread_t tk;
  CHECK(pthread_create(&tk, NULL, ticker, NULL) == 0, "ticker");

  /* The child holds the mutex. */
  pid_t pid = child(hold_mutex);
  int64_t m0 = mono_ms(); /* before the deadline: it is 50 ms later */
  struct timespec rt = in_50ms(CLOCK_REALTIME);
  CHECK(pthread_mutex_timedlock(&sh->m, &rt) == ETIMEDOUT,
        "a timed lock times out");
  CHECK(mono_ms() - m0 >= 40, "after its 50 ms");
  CHECK(pthread_mutex_trylock(&sh->m) == EBUSY, "trylock: EBUSY");
  int t0 = atomic_load(&ticks);
  CHECK(pthread_mutex_lock(&sh->m) == 0, "the lock waits for the child");
  CHECK(atomic_load(&sh->released_ms) != 0 &&
            mono_ms() >= atomic_load(&sh->released_ms),
        "it took the lock after the child let go");
  CHECK(atomic_load(&ticks) - t0 >= 10, "the ticker ran while main waited");
  CHECK(pthread_mutex_unlock(&sh->m) == 0, "unlock");
  reap(pid);

  /* Two threads of this process. */
  pthread_t a, b;
  bool a_ok = pthread_create(&a, NULL, taker, NULL) == 0;
  bool b_ok = pthread_create(&b, NULL, taker, NULL) == 0;
  CHECK(a_ok && b_ok, "takers");
  if (a_ok) pthread_join(a, NULL);
  if (b_ok) pthread_join(b, NULL);
  CHECK(atomic_load(&turns) == 40, "the takers' count is exact");

  /* The child broadcasts. */
  int64_t woke = -1;
  sh->flag = 0;
  atomic_store(&sh->released_ms, 0);
  pthread_t w;
  CHECK(pthread_create(&w, NULL, cond_waiter, &woke) == 0, "cond waiter");
  pid = child(broadcast_later);
  t0 = atomic_load(&ticks);
  pthread_join(w, NULL);
  CHECK(atomic_load(&sh->released_ms) != 0 &&
            woke >= atomic_load(&sh->released_ms) &&
            woke < atomic_load(&sh->released_ms) + 3000,
        "the broadcast woke the waiter");
  CHECK(atomic_load(&ticks) - t0 >= 10, "the ticker ran during the wait");
  reap(pid);
  m0 = mono_ms();
  struct timespec mt = in_50ms(CLOCK_MONOTONIC);
  CHECK(pthread_mutex_lock(&sh->m) == 0, "lock before a timed wait");
  int r;
  do r = pthread_cond_timedwait(&sh->c, &sh->m, &mt);
  while (r == 0);
  CHECK(r == ETIMEDOUT, "a timed wait no one signals times out");
  CHECK(mono_ms() - m0 >= 40, "after its 50 ms (the monotonic clock)");
  CHECK(pthread_mutex_unlock(&sh->m) == 0, "unlock after the timed wait");

  /* The child dies holding the robust mutex. */
  pid = child(die_holding);
  reap(pid);
  CHECK(pthread_mutex_lock(&sh->robust) == EOWNERDEAD, "EOWNERDEAD");
  CHECK(pthread_mutex_consistent(&sh->robust) == 0, "consistent");
  CHECK(pthread_mutex_unlock(&sh->robust) == 0, "unlock the robust mutex");
  CHECK(pthread_mutex_lock(&sh->robust) == 0, "lock it again");
  CHECK(pthread_mutex_unlock(&sh->robust) == 0, "unlock it again");

  /* The child write-locks the rwlock. */
  pid = child(write_lock);
  CHECK(pthread_rwlock_tryrdlock(&sh->rw) == EBUSY, "tryrdlock: EBUSY");
  t0 = atomic_load(&ticks);
  m0 = mono_ms();
  CHECK(pthread_rwlock_rdlock(&sh->rw) == 0, "rdlock waits for the writer");
  CHECK(mono_ms() - m0 >= 50, "it took the writer's time");
  CHECK(atomic_load(&ticks) - t0 >= 5, "the ticker ran meanwhile");
  CHECK(pthread_rwlock_unlock(&sh->rw) == 0, "rwlock unlock");
  reap(pid);

  /* Two threads and the child at a barrier of three. */
  pthread_barrierattr_t ba;
  pthread_barrierattr_init(&ba);
  pthread_barrierattr_setpshared(&ba, PTHREAD_PROCESS_SHARED);
  CHECK(pthread_barrier_init(&sh->bar, &ba, 3) == 0, "a shared barrier");
  pthread_t p1, p2;
  t0 = atomic_load(&ticks);
  m0 = mono_ms();
  bool p1_ok = pthread_create(&p1, NULL, barrier_party, NULL) == 0;
  bool p2_ok = pthread_create(&p2, NULL, barrier_party, NULL) == 0;
  CHECK(p1_ok && p2_ok, "barrier parties");
  pid = child(barrier_later);
  if (p1_ok) pthread_join(p1, NULL);
  if (p2_ok) pthread_join(p2, NULL);
  CHECK(mono_ms() - m0 >= 150, "the parties waited for the child");
  CHECK(atomic_load(&ticks) - t0 >= 5, "the ticker ran at the barrier");
  reap(pid);
  CHECK(atomic_load(&sh->serials) == 1, "one serial thread");
  CHECK(pthread_barrier_destroy(&sh->bar) == 0, "barrier destroy");

  atomic_store(&stop_ticker, 1);
  pthread_join(tk, NULL);
  CHECK(pthread_mutex_destroy(&sh->m) == 0 &&
            pthread_mutex_destroy(&sh->robust) == 0 &&
            pthread_cond_destroy(&sh->c) == 0 &&
            pthread_rwlock_destroy(&sh->rw) == 0,
        "destroy");
  if (!failed) printf("all steps right\n");
  return failed;
}
