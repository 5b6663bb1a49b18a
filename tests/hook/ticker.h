/* The ticker thread of the plain POSIX test programs under tests/hook: it
 * counts while it runs, so a step can tell whether its OS thread was held
 * (under iofiber-run and the header swap the threads are fibers of one
 * OS thread: a call that blocks it stops the count). Set `stop` to end it.
 */
#ifndef IOF_TESTS_HOOK_TICKER_H
#define IOF_TESTS_HOOK_TICKER_H

#include <stdatomic.h>
#include <stdbool.h>
#include <unistd.h>

static atomic_int ticks;
static atomic_bool stop;

/* One tick per 2 ms. */
static void *ticker(void *p) {
  (void)p;
  while (!atomic_load(&stop)) {
    atomic_fetch_add(&ticks, 1);
    usleep(2000);
  }
  return NULL;
}

#endif
