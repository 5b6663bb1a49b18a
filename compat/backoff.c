/* Pauses of a call that polls for a change nothing announces: nothing
 * tells a process when a file lock frees or a semaphore that libc made is
 * posted. Short pauses first (the holder is often a fiber of this thread,
 * about to run), growing so that a long wait costs little. Each pause is
 * a wait like compat's others: interruptible for main (EINTR from a
 * handler, also one that ran between two pauses), a cancellation point of
 * a fiber thread. */
#include "compat/backoff.h"

#include "compat/signal_internal.h"
#include "compat/thread_internal.h"
#include "sched/sched_internal.h"

#include <errno.h>

void iof__backoff_init(iof__backoff *b, iof_fiber *f, int64_t min_ns,
                       int64_t max_ns, bool restartable) {
  *b = (iof__backoff){f,           min_ns,
                      max_ns,      iof__compat_intr_snap(f, restartable),
                      restartable, false};
}

void iof__backoff_init_quiet(iof__backoff *b, int64_t min_ns, int64_t max_ns) {
  *b = (iof__backoff){NULL, min_ns, max_ns, 0, false, true};
}

static bool nap_begin(void *op, iof__wait *w) {
  (void)op;
  return iof__wait_publish(w);
}

void iof__nap_until(int64_t until) {
  iof__cwait cw;
  (void)iof__cwait_block(NULL, nap_begin, &cw, until);
}

int iof__backoff_pause(iof__backoff *b, int64_t deadline_ns) {
  int64_t now = iof__now_ns();
  if (deadline_ns <= now) return -ETIMEDOUT;
  int64_t until = iof__sat_add(now, b->pause_ns);
  if (until > deadline_ns) until = deadline_ns;
  if (b->pause_ns < b->max_ns)
    b->pause_ns = b->pause_ns * 2 < b->max_ns ? b->pause_ns * 2 : b->max_ns;
  if (b->quiet) {
    iof__nap_until(until);
    return 0;
  }
  int r = iof__compat_intr_sleep(b->f, until, b->restartable);
  if (r != -ETIMEDOUT) return r;
  return iof__compat_intr_since(b->f, b->snap, b->restartable) ? -EINTR : 0;
}
