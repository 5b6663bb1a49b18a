/* Tutorial step 5: CPU work on a thread pool (docs/tutorial.md).
 *
 * A fiber on the io_context must not compute for long: every other fiber
 * of that thread would wait. iof_run() moves the *same* fiber to a thread
 * pool for the call and brings it back afterwards, so the code stays
 * straight-line. */
#include <pthread.h>
#include <stdio.h>

#include <iofiber/iofiber.h>

static iof_thread_pool *pool;

typedef struct job {
  long limit, primes;
  pthread_t ran_on;
} job;

static int count_primes(void *arg) { /* runs on a pool thread */
  job *j = arg;
  j->ran_on = pthread_self();
  for (long n = 2; n < j->limit; n++) {
    int prime = 1;
    for (long d = 2; d * d <= n && prime; d++) prime = n % d != 0;
    j->primes += prime;
  }
  return 0;
}

static int request(void *arg) {
  int *ok = arg;
  pthread_t home = pthread_self();
  job j = {200000, 0, 0};
  int r = iof_run(iof_thread_pool_executor(pool), NULL, count_primes, &j);
  /* Back on the io_context's thread. */
  printf("%ld primes below %ld; computed on %s thread, back home: %s\n",
         j.primes, j.limit,
         pthread_equal(j.ran_on, home) ? "the same" : "another",
         pthread_equal(pthread_self(), home) ? "yes" : "no");
  *ok = r == 0 && j.primes == 17984 && !pthread_equal(j.ran_on, home) &&
        pthread_equal(pthread_self(), home);
  return 0;
}

int main(void) {
  int ok = 0;
  iof_io_context *io = iof_io_context_create();
  pool = iof_thread_pool_create(2);
  if (!io || !pool) return 1;
  iof_launch(iof_io_context_executor(io), request, &ok);
  iof_io_context_run(io);
  iof_io_context_destroy(io);
  iof_thread_pool_destroy(pool);
  return ok ? 0 : 1;
}
