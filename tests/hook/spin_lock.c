/* A spin lock held across a wait: one thread takes it and sleeps 100 ms
 * holding it, another asks for it meanwhile. Run plain (real threads: the
 * reference), under iofiber-run and with the header swap, where the
 * threads are fibers of one OS thread: glibc's spin would hold that
 * thread, the holder would never wake to let go, and the program would
 * hang (before the fix it did; an alarm ends it then). The second thread
 * must get the lock after the holder lets go, and a ticker thread must
 * run while it waits. Prints "all steps right" when every step is. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <unistd.h>

#define STEPS_NAME "spin_lock"
#include "steps.h"
#include "ticker.h"

static pthread_spinlock_t lock;
static atomic_bool held, released;

static void *holder(void *p) {
  (void)p;
  CHECK(pthread_spin_lock(&lock) == 0, "holder: lock");
  atomic_store(&held, true);
  usleep(100 * 1000);
  atomic_store(&released, true);
  CHECK(pthread_spin_unlock(&lock) == 0, "holder: unlock");
  return NULL;
}

static int ticks_waiting;

static void *asker(void *p) {
  (void)p;
  while (!atomic_load(&held)) usleep(1000);
  int t0 = atomic_load(&ticks);
  CHECK(pthread_spin_lock(&lock) == 0, "asker: lock");
  ticks_waiting = atomic_load(&ticks) - t0;
  CHECK(atomic_load(&released), "asker: only after the holder let go");
  CHECK(pthread_spin_trylock(&lock) == EBUSY, "asker: trylock of its own");
  CHECK(pthread_spin_unlock(&lock) == 0, "asker: unlock");
  return NULL;
}

int main(void) {
  alarm(20); /* a spin that holds the only OS thread never ends */
  CHECK(pthread_spin_init(&lock, PTHREAD_PROCESS_PRIVATE) == 0, "init");
  pthread_t t, h, a;
  CHECK(pthread_create(&t, NULL, ticker, NULL) == 0, "ticker");
  CHECK(pthread_create(&h, NULL, holder, NULL) == 0, "holder");
  CHECK(pthread_create(&a, NULL, asker, NULL) == 0, "asker");
  CHECK(pthread_join(h, NULL) == 0 && pthread_join(a, NULL) == 0, "join");
  atomic_store(&stop, true);
  CHECK(pthread_join(t, NULL) == 0, "join ticker");
  /* About 50 ticks in the holder's 100 ms. */
  CHECK(ticks_waiting >= 5, "the ticker ran while the asker waited");
  CHECK(pthread_spin_trylock(&lock) == 0, "free at the end");
  CHECK(pthread_spin_unlock(&lock) == 0 && pthread_spin_destroy(&lock) == 0,
        "destroy");
  if (!failed)
    printf("all steps right (%d ticks while waiting)\n", ticks_waiting);
  return failed;
}
