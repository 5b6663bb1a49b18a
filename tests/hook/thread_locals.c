/* A thread-per-connection program's thread-locals, run plain (real
 * threads: the reference), under iofiber-run and with the header swap,
 * where its threads are fibers sharing OS threads:
 * - main keeps the value a constructor gave its __thread variable;
 * - each new thread starts from the initial values (data and bss);
 * - each keeps its own values across blocking calls (sleeps, a pipe read
 *   that waits for another thread's write), while the others run and set
 *   theirs on the same OS thread;
 * - a C++-style thread_local destructor (__cxa_thread_atexit_impl) runs
 *   when its thread ends, on that thread's values (not with the header
 *   swap, which does not cover C++);
 * - main's values are still its own after the threads ran.
 * Prints "all steps right" when every step is. */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#define STEPS_NAME "thread_locals"
#include "steps.h"

#define THREADS 8
#define ROUNDS 20

static __thread int tl_id = -1;
static __thread char tl_buf[64];
static __thread int tl_obj;

/* Through a volatile read: clang evaluates a constructor that stores a
 * constant at compile time and makes it the variable's initial value in
 * every thread. */
static volatile int main_value = 1000;
__attribute__((constructor)) static void set_main_value(void) {
  tl_id = main_value;
}

#ifndef IOFIBER_COMPAT_H
int __cxa_thread_atexit_impl(void (*fn)(void *), void *obj, void *dso);
extern void *__dso_handle;
static int dtor_saw[THREADS];

static void dtor(void *obj) {
  int i = *(int *)obj;
  if (i >= 0 && i < THREADS) dtor_saw[i] = tl_id + 1;
}
#endif

/* One pipe per thread: thread i waits to read what thread i - 1 wrote. */
static int ring[THREADS][2];

static void *worker(void *p) {
  int id = (int)(intptr_t)p;
  char want[64];
  snprintf(want, sizeof want, "request of thread %d", id);
  CHECK(tl_id == -1 && tl_buf[0] == 0, "a new thread has the initial values");
  tl_id = id;
  tl_obj = id;
  strcpy(tl_buf, want);
#ifndef IOFIBER_COMPAT_H
  CHECK(__cxa_thread_atexit_impl(dtor, &tl_obj, &__dso_handle) == 0,
        "register a thread_local destructor");
#endif
  for (int r = 0; r < ROUNDS; r++) {
    usleep(1000 + 100 * id);
    CHECK(tl_id == id && strcmp(tl_buf, want) == 0, "values after a sleep");
    char c = (char)r;
    CHECK(write(ring[(id + 1) % THREADS][1], &c, 1) == 1, "write");
    CHECK(read(ring[id][0], &c, 1) == 1 && c == (char)r, "read");
    CHECK(tl_id == id && strcmp(tl_buf, want) == 0, "values after a read");
  }
  return NULL;
}

int main(void) {
  CHECK(tl_id == 1000, "main has its constructor's value");
  for (int i = 0; i < THREADS; i++) CHECK(pipe(ring[i]) == 0, "pipe");
  pthread_t t[THREADS];
  for (int i = 0; i < THREADS; i++)
    CHECK(pthread_create(&t[i], NULL, worker, (void *)(intptr_t)i) == 0,
          "pthread_create");
  for (int i = 0; i < THREADS; i++)
    CHECK(pthread_join(t[i], NULL) == 0, "pthread_join");
#ifndef IOFIBER_COMPAT_H
  for (int i = 0; i < THREADS; i++)
    CHECK(dtor_saw[i] == i + 1, "the destructor ran on its thread's values");
#endif
  CHECK(tl_id == 1000, "main's value after the threads ran");
  if (!failed) printf("all steps right\n");
  return failed;
}
