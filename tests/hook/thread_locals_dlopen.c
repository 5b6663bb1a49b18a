/* Thread-locals of a module loaded with dlopen after the start (dynamic
 * TLS: Python's extension modules), run plain (real threads: the
 * reference) and under iofiber-run, where the threads are fibers sharing
 * one OS thread: each thread starts from the module's initial values and
 * keeps its own across blocking calls, and a context pointer it set stays
 * its own while the others set and clear theirs. Python's gRPC
 * (`import grpc` loads cygrpc) crashed under iofiber-run on a NULL
 * execution context another fiber thread had cleared. With
 * IOF_THREAD_LOCALS=shared the values are shared and the steps fail.
 * Prints "all steps right" when every step is. */
#include <dlfcn.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#define STEPS_NAME "thread_locals_dlopen"
#include "steps.h"

#define THREADS 6
#define ROUNDS 20

static void (*set)(int id, const char *name);
static int (*get_id)(void);
static const char *(*get_name)(void);
static int (*with_ctx)(int *ctx, int (*fn)(void *), void *arg);
static int *(*get_ctx)(void);

/* One pipe per thread: thread i waits to read what thread i - 1 wrote, so
 * every thread is switched out while the others run. */
static int ring[THREADS][2];

typedef struct round_arg {
  int id, round, *ctx;
  const char *want;
} round_arg;

/* One round inside the thread's context: a sleep and a read in it. */
static int round_in_ctx(void *p) {
  round_arg *r = p;
  usleep(500 + 100 * r->id);
  CHECK(get_ctx() == r->ctx, "the context pointer after a sleep");
  char c = (char)r->round;
  CHECK(write(ring[(r->id + 1) % THREADS][1], &c, 1) == 1, "write");
  CHECK(read(ring[r->id][0], &c, 1) == 1 && c == (char)r->round, "read");
  CHECK(get_ctx() == r->ctx, "the context pointer after a read");
  CHECK(get_id() == r->id && strcmp(get_name(), r->want) == 0,
        "the module's values after a read");
  return 0;
}

static void *worker(void *p) {
  int id = (int)(intptr_t)p;
  char want[48];
  snprintf(want, sizeof want, "worker %d", id);
  CHECK(get_id() == -1 && get_name()[0] == 0 && get_ctx() == NULL,
        "a new thread has the module's initial values");
  set(id, want);
  int ctx = id;
  for (int r = 0; r < ROUNDS; r++) {
    round_arg a = {id, r, &ctx, want};
    with_ctx(&ctx, round_in_ctx, &a);
    CHECK(get_ctx() == NULL, "no context once it is closed");
  }
  return NULL;
}

int main(void) {
  void *m = dlopen(TLD_MODULE, RTLD_NOW | RTLD_LOCAL);
  CHECK(m != NULL, "dlopen");
  if (!m) {
    fprintf(stderr, "%s\n", dlerror());
    return 1;
  }
  *(void **)&set = dlsym(m, "tld_set");
  *(void **)&get_id = dlsym(m, "tld_id");
  *(void **)&get_name = dlsym(m, "tld_name");
  *(void **)&with_ctx = dlsym(m, "tld_with_ctx");
  *(void **)&get_ctx = dlsym(m, "tld_ctx");
  set(1000, "main");
  for (int i = 0; i < THREADS; i++) CHECK(pipe(ring[i]) == 0, "pipe");
  pthread_t t[THREADS];
  for (int i = 0; i < THREADS; i++)
    CHECK(pthread_create(&t[i], NULL, worker, (void *)(intptr_t)i) == 0,
          "pthread_create");
  for (int i = 0; i < THREADS; i++)
    CHECK(pthread_join(t[i], NULL) == 0, "pthread_join");
  CHECK(get_id() == 1000 && strcmp(get_name(), "main") == 0,
        "main's values after the threads ran");
  if (!failed) printf("all steps right\n");
  return failed;
}
