/* A futex word inside a thread-local record whose address other threads
 * are handed, as InnoDB's group commit does (each thread queues its own
 * thread_local waiter on a shared list, then waits with
 * syscall(SYS_futex) until the leader posts it). Run plain, and under
 * iofiber-run with 2 io threads, where fiber threads of one io thread
 * share each thread-local's address: a second fiber of that io thread
 * must not queue the same record again while the first waits in it (the
 * list would get a cycle and posts land in the wrong thread's values).
 * The leader's work blocks its OS thread, as a log write does.
 * Prints "all steps right" when every step is. */
#include <linux/futex.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define STEPS_NAME "tls_futex"
#include "steps.h"

#define THREADS 8
#define ROUNDS 200

typedef struct rec {
  _Atomic int posted;
  struct rec *next;
} rec;

static __thread rec my_rec;
static pthread_mutex_t lk = PTHREAD_MUTEX_INITIALIZER;
static int leading;
static rec *queue;
static long work;
static atomic_int cycles;

static void rec_wait(rec *r) {
  while (atomic_exchange(&r->posted, 0) != 1)
    syscall(SYS_futex, &r->posted, FUTEX_WAIT_PRIVATE, 0, NULL, NULL, 0);
}

static void rec_post(rec *r) {
  atomic_store(&r->posted, 1);
  syscall(SYS_futex, &r->posted, FUTEX_WAKE_PRIVATE, 1, NULL, NULL, 0);
}

static void one_round(void) {
  for (;;) {
    pthread_mutex_lock(&lk);
    if (!leading) {
      leading = 1;
      pthread_mutex_unlock(&lk);
      struct timespec t = {0, 200000};
      syscall(SYS_nanosleep, &t, NULL); /* blocks the OS thread */
      pthread_mutex_lock(&lk);
      work++;
      leading = 0;
      rec *r = queue;
      queue = NULL;
      pthread_mutex_unlock(&lk);
      for (int n = 0; r; n++) {
        if (n == THREADS) { /* a record queued twice: a cycle */
          atomic_fetch_add(&cycles, 1);
          break;
        }
        rec *next = r->next;
        rec_post(r);
        r = next;
      }
      return;
    }
    my_rec.next = queue;
    queue = &my_rec;
    pthread_mutex_unlock(&lk);
    rec_wait(&my_rec); /* then lead, or queue again */
  }
}

static void *worker(void *p) {
  (void)p;
  for (int i = 0; i < ROUNDS && !atomic_load(&cycles); i++) one_round();
  return NULL;
}

int main(void) {
  pthread_t t[THREADS];
  for (int i = 0; i < THREADS; i++)
    CHECK(pthread_create(&t[i], NULL, worker, NULL) == 0, "pthread_create");
  for (int i = 0; i < THREADS; i++)
    CHECK(pthread_join(t[i], NULL) == 0, "pthread_join");
  CHECK(atomic_load(&cycles) == 0, "no record was queued twice");
  CHECK(work == THREADS * ROUNDS, "every round's work done");
  if (!failed) printf("all steps right\n");
  return failed;
}
