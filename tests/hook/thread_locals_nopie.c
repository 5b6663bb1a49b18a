/* A non-PIE executable that takes malloc's address (node is one): its
 * malloc is then its own PLT entry, which the runtime once took for "this
 * module is the allocator" and left the executable's thread-locals shared
 * by the fiber threads of an io thread (node's worker_threads crashed).
 * Built -fno-pie -no-pie; three threads each keep their own pointer in a
 * __thread variable across waits. Prints "all steps right". */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#define STEPS_NAME "thread_locals_nopie"
#include "steps.h"

/* Taken in code built without PIE: the linker makes the executable's PLT
 * entry malloc's canonical address. */
__attribute__((noinline)) void *malloc_address(void) {
  return (void *)(uintptr_t)malloc;
}

static __thread void *mine;

static void *thread_fn(void *me) {
  mine = me;
  for (int i = 0; i < 20; i++) {
    usleep(200);
    CHECK(mine == me, "a thread's __thread value stays its own");
  }
  return NULL;
}

int main(void) {
  CHECK(malloc_address() != NULL, "malloc's address");
  static int m, v[2];
  mine = &m;
  pthread_t t[2];
  for (int i = 0; i < 2; i++)
    CHECK(pthread_create(&t[i], NULL, thread_fn, &v[i]) == 0, "create");
  for (int i = 0; i < 40; i++) {
    usleep(200);
    CHECK(mine == &m, "main's __thread value stays its own");
  }
  for (int i = 0; i < 2; i++) CHECK(pthread_join(t[i], NULL) == 0, "join");
  if (!failed) printf("all steps right\n");
  return failed;
}
