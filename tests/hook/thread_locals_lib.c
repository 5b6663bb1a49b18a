/* Thread-locals of a library the program links itself (its DT_NEEDED),
 * run plain (real threads: the reference) and under iofiber-run, where its
 * threads are fibers sharing one OS thread: each thread starts from the
 * library's initial values and keeps its own across blocking calls while
 * the others set theirs. named asserted at start under iofiber-run (its
 * libisc keeps each loop thread's index in a thread-local) and ruby
 * crashed in Thread.new (libruby's current execution context) while only
 * the executable's own thread-locals were kept per thread.
 * Prints "all steps right" when every step is. */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#define STEPS_NAME "thread_locals_lib"
#include "steps.h"

#define THREADS 6
#define ROUNDS 20

void tll_set(int id, const char *name);
int tll_id(void);
const char *tll_name(void);

/* One pipe per thread: thread i waits to read what thread i - 1 wrote, so
 * every thread is switched out while the others run. */
static int ring[THREADS][2];

static void *worker(void *p) {
  int id = (int)(intptr_t)p;
  char want[48];
  snprintf(want, sizeof want, "loop thread %d", id);
  CHECK(tll_id() == -1 && tll_name()[0] == 0,
        "a new thread has the library's initial values");
  tll_set(id, want);
  for (int r = 0; r < ROUNDS; r++) {
    usleep(500 + 100 * id);
    CHECK(tll_id() == id && strcmp(tll_name(), want) == 0,
          "the library's values after a sleep");
    char c = (char)r;
    CHECK(write(ring[(id + 1) % THREADS][1], &c, 1) == 1, "write");
    CHECK(read(ring[id][0], &c, 1) == 1 && c == (char)r, "read");
    CHECK(tll_id() == id && strcmp(tll_name(), want) == 0,
          "the library's values after a read");
  }
  return NULL;
}

int main(void) {
  tll_set(1000, "main");
  for (int i = 0; i < THREADS; i++) CHECK(pipe(ring[i]) == 0, "pipe");
  pthread_t t[THREADS];
  for (int i = 0; i < THREADS; i++)
    CHECK(pthread_create(&t[i], NULL, worker, (void *)(intptr_t)i) == 0,
          "pthread_create");
  for (int i = 0; i < THREADS; i++)
    CHECK(pthread_join(t[i], NULL) == 0, "pthread_join");
  CHECK(tll_id() == 1000 && strcmp(tll_name(), "main") == 0,
        "main's values after the threads ran");
  if (!failed) printf("all steps right\n");
  return failed;
}
