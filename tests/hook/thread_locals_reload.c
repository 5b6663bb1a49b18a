/* A plugin unloaded and another loaded in its place (a server's reload):
 * the loader gives the new module the old one's TLS module id. A thread
 * that used the old module's thread-locals, and one started after, must
 * see the new module's initial values in blocks of its size. Under
 * iofiber-run each fiber thread's blocks of dynamic TLS are its own, kept
 * by module id: the new module got the old one's 4-byte block (a heap
 * overflow at the first fill) or a copy of its unloaded image. Run plain
 * (the reference) and under iofiber-run. Prints "all steps right" when
 * every step is. */
#include <dlfcn.h>
#include <link.h>
#include <pthread.h>
#include <stdio.h>
#include <unistd.h>

#define STEPS_NAME "thread_locals_reload"
#include "steps.h"

static int go[2], ready[2];
static void *mod;

static void *sym(const char *name) {
  void *p = dlsym(mod, name);
  CHECK(p != NULL, name);
  return p;
}

/* Uses the small module, waits while main swaps the modules, then uses
 * the big one from the same thread. */
static void *early(void *arg) {
  (void)arg;
  int (*get)(void) = (int (*)(void))sym("small_get");
  void (*set)(int) = (void (*)(int))sym("small_set");
  if (!get || !set) return NULL;
  CHECK(get() == 5, "the small module's initial value");
  set(42);
  CHECK(get() == 42, "the small module's value as set");
  char c = 0;
  CHECK(write(ready[1], "r", 1) == 1, "write");
  CHECK(read(go[0], &c, 1) == 1, "read");
  int (*first)(void) = (int (*)(void))sym("big_first");
  int (*last)(void) = (int (*)(void))sym("big_last");
  void (*fill)(char) = (void (*)(char))sym("big_fill");
  if (!first || !last || !fill) return NULL;
  CHECK(first() == 'B', "the big module's initial value, same thread");
  fill('z');
  CHECK(first() == 'z' && last() == 'z', "the big module's values as set");
  return NULL;
}

static void *late(void *arg) {
  (void)arg;
  int (*first)(void) = (int (*)(void))sym("big_first");
  int (*last)(void) = (int (*)(void))sym("big_last");
  if (!first || !last) return NULL;
  CHECK(first() == 'B' && last() == 0, "the big module's initial values");
  return NULL;
}

int main(void) {
  CHECK(pipe(go) == 0 && pipe(ready) == 0, "pipe");
  mod = dlopen(SMALL_MODULE, RTLD_NOW | RTLD_LOCAL);
  CHECK(mod != NULL, "dlopen the small module");
  if (!mod) return 1;
  size_t small_id = 0, big_id = 0;
  CHECK(dlinfo(mod, RTLD_DI_TLS_MODID, &small_id) == 0, "dlinfo");
  pthread_t a, b;
  CHECK(pthread_create(&a, NULL, early, NULL) == 0, "pthread_create");
  char c = 0;
  CHECK(read(ready[0], &c, 1) == 1, "read");
  CHECK(dlclose(mod) == 0, "dlclose the small module");
  mod = dlopen(BIG_MODULE, RTLD_NOW | RTLD_LOCAL);
  CHECK(mod != NULL, "dlopen the big module");
  if (!mod) return 1;
  CHECK(dlinfo(mod, RTLD_DI_TLS_MODID, &big_id) == 0, "dlinfo");
  if (big_id != small_id) /* what the test is about did not happen */
    fprintf(stderr, "note: module ids %zu then %zu\n", small_id, big_id);
  CHECK(write(go[1], "g", 1) == 1, "write");
  CHECK(pthread_join(a, NULL) == 0, "pthread_join");
  CHECK(pthread_create(&b, NULL, late, NULL) == 0, "pthread_create");
  CHECK(pthread_join(b, NULL) == 0, "pthread_join");
  CHECK(dlclose(mod) == 0, "dlclose the big module");
  if (!failed) printf("all steps right\n");
  return failed;
}
