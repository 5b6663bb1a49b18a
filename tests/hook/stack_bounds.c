/* pthread_getattr_np on the calling thread describes a stack that holds
 * the caller's stack pointer: in main, in a thread with a 1 MiB stack and
 * in one with the default. Stack scanners and guard-page makers rely on it
 * (the JVM's first act is to commit guard pages at the low end: with a
 * made-up address it stopped at once). Run plain, under iofiber-run and
 * with the header swap. Prints "all steps right" when every step is. */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>

#define STEPS_NAME "stack_bounds"
#include "steps.h"

static void check(const char *who, size_t want) {
  pthread_attr_t a;
  void *addr = NULL;
  size_t size = 0;
  volatile char here = 0;
  CHECK(pthread_getattr_np(pthread_self(), &a) == 0, who);
  CHECK(pthread_attr_getstack(&a, &addr, &size) == 0, who);
  pthread_attr_destroy(&a);
  uintptr_t lo = (uintptr_t)addr, sp = (uintptr_t)&here;
  CHECK(sp > lo && sp <= lo + size, who);
  if (want) CHECK(size >= want, who);
}

static void *thread_fn(void *want) {
  check("a thread's stack", (size_t)(uintptr_t)want);
  return NULL;
}

int main(void) {
  check("main's stack", 0);
  pthread_attr_t a;
  pthread_attr_init(&a);
  pthread_attr_setstacksize(&a, (size_t)1 << 20);
  pthread_t t;
  CHECK(pthread_create(&t, &a, thread_fn, (void *)(uintptr_t)(1u << 20)) == 0,
        "create with 1 MiB");
  CHECK(pthread_join(t, NULL) == 0, "join");
  pthread_attr_destroy(&a);
  CHECK(pthread_create(&t, NULL, thread_fn, NULL) == 0, "create");
  CHECK(pthread_join(t, NULL) == 0, "join");
  if (!failed) printf("all steps right\n");
  return failed;
}
