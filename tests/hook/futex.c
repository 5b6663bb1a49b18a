/* A program with its own futex-based lock and event (as InnoDB, Rust's std
 * and libstdc++'s std::atomic::wait have), built on syscall(SYS_futex),
 * run plain (real threads: the reference), under iofiber-run and with the
 * header swap, where its threads are fibers sharing one OS thread:
 * - 8 threads take the lock 400 times each, holding it across a sleep now
 *   and then so that the others wait in FUTEX_WAIT; the count is exact and
 *   no wait times out (a waiter that held its OS thread would keep the
 *   holder from running: every wait would time out);
 * - main waits for an event another thread sets after 20 ms (absolute
 *   CLOCK_MONOTONIC deadline, FUTEX_WAIT_BITSET) while a third thread
 *   ticks: the ticks go on during the wait;
 * - relative timeouts, EAGAIN, and other system calls through syscall().
 * Prints "all steps right" when every step is. */
#include <errno.h>
#include <limits.h>
#include <linux/futex.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define STEPS_NAME "futex"
#include "steps.h"

#define THREADS 8
#define ROUNDS 400

static long futex(_Atomic uint32_t *a, int op, uint32_t val,
                  const struct timespec *t, uint32_t val3) {
  return syscall(SYS_futex, a, op, val, t, NULL, val3);
}

static int64_t mono_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* ---- the lock: 0 free, 1 locked, 2 locked with waiters ----------------- */

static _Atomic uint32_t mtx;
static atomic_int timeouts;
static long counter;

static void lock(void) {
  uint32_t c = 0;
  if (atomic_compare_exchange_strong(&mtx, &c, 1)) return;
  if (c != 2) c = atomic_exchange(&mtx, 2);
  while (c != 0) {
    struct timespec t = {3, 0};
    if (futex(&mtx, FUTEX_WAIT_PRIVATE, 2, &t, 0) == -1 && errno == ETIMEDOUT)
      atomic_fetch_add(&timeouts, 1);
    c = atomic_exchange(&mtx, 2);
  }
}

static void unlock(void) {
  if (atomic_exchange(&mtx, 0) == 2)
    futex(&mtx, FUTEX_WAKE_PRIVATE, 1, NULL, 0);
}

static void *worker(void *p) {
  int id = (int)(intptr_t)p;
  for (int r = 0; r < ROUNDS && !atomic_load(&timeouts); r++) {
    lock();
    long v = counter;
    if (r % 50 == id) usleep(500);
    counter = v + 1;
    unlock();
  }
  return NULL;
}

/* ---- the event -------------------------------------------------------- */

static _Atomic uint32_t event;
static atomic_int ticks;

static void *setter(void *p) {
  (void)p;
  usleep(20000);
  atomic_store(&event, 1);
  futex(&event, FUTEX_WAKE_PRIVATE, INT_MAX, NULL, 0);
  return NULL;
}

static void *ticker(void *p) {
  (void)p;
  while (!atomic_load(&event)) {
    atomic_fetch_add(&ticks, 1);
    usleep(1000);
  }
  return NULL;
}

int main(void) {
  pthread_t t[THREADS];
  for (int i = 0; i < THREADS; i++)
    CHECK(pthread_create(&t[i], NULL, worker, (void *)(intptr_t)i) == 0,
          "pthread_create");
  for (int i = 0; i < THREADS; i++)
    CHECK(pthread_join(t[i], NULL) == 0, "pthread_join");
  CHECK(atomic_load(&timeouts) == 0, "no lock wait timed out");
  CHECK(counter == THREADS * ROUNDS, "the lock kept the count exact");
  CHECK(atomic_load(&mtx) == 0, "the lock is free at the end");

  pthread_t s, k;
  CHECK(pthread_create(&k, NULL, ticker, NULL) == 0, "ticker");
  usleep(2000);
  CHECK(pthread_create(&s, NULL, setter, NULL) == 0, "setter");
  struct timespec until;
  clock_gettime(CLOCK_MONOTONIC, &until);
  until.tv_sec += 3;
  int ticks0 = atomic_load(&ticks);
  int64_t t0 = mono_ns();
  long r;
  do
    r = futex(&event, FUTEX_WAIT_BITSET_PRIVATE, 0, &until,
              FUTEX_BITSET_MATCH_ANY);
  while (r == -1 && errno == EINTR);
  CHECK((r == 0 || errno == EAGAIN) && atomic_load(&event) == 1,
        "the event woke main");
  CHECK(mono_ns() - t0 < 2000000000LL, "main woke before its deadline");
  CHECK(atomic_load(&ticks) - ticks0 >= 5, "the ticker ran while main waited");
  CHECK(pthread_join(s, NULL) == 0 && pthread_join(k, NULL) == 0, "join");

  _Atomic uint32_t w = 5;
  struct timespec rel = {0, 30000000};
  t0 = mono_ns();
  errno = 0;
  CHECK(futex(&w, FUTEX_WAIT_PRIVATE, 5, &rel, 0) == -1 && errno == ETIMEDOUT,
        "a relative timeout");
  CHECK(mono_ns() - t0 >= 25000000, "it took the time");
  errno = 0;
  CHECK(futex(&w, FUTEX_WAIT_PRIVATE, 6, NULL, 0) == -1 && errno == EAGAIN,
        "EAGAIN on another value");
  CHECK(futex(&w, FUTEX_WAKE_PRIVATE, 1, NULL, 0) == 0, "nobody to wake");
  CHECK(syscall(SYS_getpid) == getpid(), "other numbers pass through");
  if (!failed) printf("all steps right\n");
  return failed;
}
