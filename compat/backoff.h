/* Pauses between the tries of a call that polls (not installed). */
#ifndef IOF_COMPAT_BACKOFF_H
#define IOF_COMPAT_BACKOFF_H

#include "fiber/fiber_internal.h"

#include <stdbool.h>
#include <stdint.h>

/* The pauses of a call that polls for a change nothing announces (a file
 * lock freed, a libc semaphore posted): from min_ns doubling to max_ns,
 * the other fibers of the thread running meanwhile. */
typedef struct iof__backoff {
  iof_fiber *f;
  int64_t pause_ns, max_ns;
  unsigned snap; /* main's handler count at the call's start */
  bool restartable;
  bool quiet; /* iof__backoff_init_quiet */
} iof__backoff;

IOF_HIDDEN void iof__backoff_init(iof__backoff *b, iof_fiber *f, int64_t min_ns,
                                  int64_t max_ns, bool restartable);

/* The same for a call that neither a handler nor a cancellation ends
 * (a mutex lock): its pauses are iof__nap_until's. */
IOF_HIDDEN void iof__backoff_init_quiet(iof__backoff *b, int64_t min_ns,
                                        int64_t max_ns);

/* A pause until `until` (CLOCK_MONOTONIC) that only the clock ends: no
 * cancellation point, no EINTR. A fiber's lets the other fibers of its
 * thread run. */
IOF_HIDDEN void iof__nap_until(int64_t until);

/* One pause, ending by deadline_ns (INT64_MAX: none). 0: try again;
 * -ETIMEDOUT once the deadline has passed (after a last try); -EINTR when
 * a handler that interrupts the call ran since init, in a pause or between
 * two; -ECANCELED. */
IOF_HIDDEN int iof__backoff_pause(iof__backoff *b, int64_t deadline_ns);

#endif
