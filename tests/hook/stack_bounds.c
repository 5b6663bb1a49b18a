/* pthread_getattr_np on the calling thread describes a stack that holds
 * the caller's stack pointer: in main, in a thread with a 1 MiB stack and
 * in one with the default. Stack scanners and guard-page makers rely on it
 * (the JVM's first act is to commit guard pages at the low end: with a
 * made-up address it stopped at once). A thread given its own stack
 * (pthread_attr_setstack) runs on that memory, and its bounds lie in it.
 * Run plain, under iofiber-run and with the header swap. Prints "all
 * steps right" when every step is. */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/mman.h>

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

#define OWN_STACK ((size_t)256 << 10)

/* On the memory given, with pthread_getattr_np's bounds inside it. */
static void *own_stack_fn(void *mem) {
  volatile char here = 0;
  uintptr_t lo = (uintptr_t)mem, sp = (uintptr_t)&here;
  CHECK(sp > lo && sp < lo + OWN_STACK, "runs on the stack it was given");
  pthread_attr_t a;
  void *addr = NULL;
  size_t size = 0;
  CHECK(pthread_getattr_np(pthread_self(), &a) == 0, "own stack: getattr");
  CHECK(pthread_attr_getstack(&a, &addr, &size) == 0, "own stack: getstack");
  pthread_attr_destroy(&a);
  CHECK((uintptr_t)addr >= lo && (uintptr_t)addr + size <= lo + OWN_STACK,
        "own stack: bounds in the memory given");
  check("own stack", 0);
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
  /* Twice on the same memory: the first thread must be done with it when
   * its join returns. */
  void *mem = mmap(NULL, OWN_STACK, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  CHECK(mem != MAP_FAILED, "mmap a stack");
  for (int i = 0; i < 2 && mem != MAP_FAILED; i++) {
    pthread_attr_init(&a);
    CHECK(pthread_attr_setstack(&a, mem, OWN_STACK) == 0, "setstack");
    CHECK(pthread_create(&t, &a, own_stack_fn, mem) == 0,
          "create on own stack");
    CHECK(pthread_join(t, NULL) == 0, "join");
    pthread_attr_destroy(&a);
  }
  if (mem != MAP_FAILED) munmap(mem, OWN_STACK);
  if (!failed) printf("all steps right\n");
  return failed;
}
