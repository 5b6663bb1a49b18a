/* Tutorial step 4: synchronization between fibers (docs/tutorial.md).
 *
 * A producer sends work items through a bounded channel to three workers;
 * the workers update shared totals under an iof_mutex. Both suspend the
 * fiber, never the thread, and work the same across threads. Closing the
 * channel tells the workers there is no more work. */
#include <stdio.h>

#include <iofiber/iofiber.h>

#define ITEMS 100

static iof_chan *work; /* ints, at most 4 queued */
static iof_mutex lock = IOF_MUTEX_INIT;
static long total;
static int handled[3];

static int producer(void *arg) {
  (void)arg;
  for (int i = 1; i <= ITEMS; i++)
    if (iof_chan_send(work, &i) != 0) return -1; /* waits while full */
  return iof_chan_close(work); /* receivers get -EPIPE once drained */
}

static int worker(void *arg) {
  int id = (int)(long)arg, item;
  while (iof_chan_recv(work, &item) == 0) {
    iof_mutex_lock(&lock);
    long t = total;
    iof_yield(); /* hold the lock across a suspension: still exclusive */
    total = t + item;
    handled[id]++;
    iof_mutex_unlock(&lock);
  }
  return 0;
}

int main(void) {
  iof_io_context *io = iof_io_context_create();
  work = iof_chan_create(sizeof(int), 4);
  if (!io || !work) return 1;
  iof_executor_ref ex = iof_io_context_executor(io);
  iof_launch(ex, producer, NULL);
  for (long w = 0; w < 3; w++) iof_launch(ex, worker, (void *)w);
  iof_io_context_run(io);
  printf("total %ld (expected %d); items per worker: %d %d %d\n", total,
         ITEMS * (ITEMS + 1) / 2, handled[0], handled[1], handled[2]);
  iof_chan_destroy(work);
  iof_io_context_destroy(io);
  return total == ITEMS * (ITEMS + 1) / 2 ? 0 : 1;
}
