/* The sleep family and sched_yield in fibers: the fiber sleeps on its
 * io_context's timers, other fibers keep the thread. A handler run
 * interrupts main's sleeps, as the kernel's (signal_internal.h). */
#include <iofiber/compat_io.h>
#include <iofiber/launch.h>
#include <iofiber/timer.h>

#include "compat/fd_table.h"
#include "compat/signal_internal.h"
#include "compat/thread_internal.h"

#include <errno.h>
#include <stdint.h>

/* Sleeps ns in the calling fiber; errno kept. 0, -EINTR (a handler ran,
 * main only) or -ECANCELED. */
static int fiber_sleep(int64_t ns) {
  int saved = errno;
  iof_fiber *f = iof__compat_fiber();
  int r = ns <= 0 ? iof_sleep_for(0)
                  : iof__compat_intr_sleep(f, iof__sat_add(iof__now_ns(), ns),
                                           false);
  errno = saved;
  return r == -ETIMEDOUT ? 0 : r;
}

unsigned iof_compat_sleep(unsigned seconds) {
  if (!iof__compat_fiber()) return iof__libc.sleep(seconds);
  int64_t end = iof__now_ns() + (int64_t)seconds * 1000000000;
  if (fiber_sleep((int64_t)seconds * 1000000000) == 0) return 0;
  int64_t left = end - iof__now_ns();
  return left > 0 ? (unsigned)(left / 1000000000) : 0; /* as glibc's */
}

int iof_compat_usleep(iof_compat_useconds_t usec) {
  if (!iof__compat_fiber()) return iof__libc.usleep(usec);
  int r = fiber_sleep((int64_t)usec * 1000);
  if (r < 0) {
    errno = -r;
    return -1;
  }
  return 0;
}

static int64_t ts_ns(const struct timespec *ts) {
  if (ts->tv_sec > INT64_MAX / 1000000000 - 1) return INT64_MAX;
  return (int64_t)ts->tv_sec * 1000000000 + ts->tv_nsec;
}

static void ns_ts(int64_t ns, struct timespec *ts) {
  if (ns < 0) ns = 0;
  ts->tv_sec = ns / 1000000000;
  ts->tv_nsec = ns % 1000000000;
}

/* A relative sleep of the calling fiber; rem gets what is left only when
 * the sleep was cut short (EINTR, ECANCELED). 0 or an errno value. */
static int sleep_rel(const struct timespec *req, struct timespec *rem) {
  int64_t ns = ts_ns(req);
  int64_t end = iof__now_ns() + (ns > INT64_MAX / 2 ? INT64_MAX / 2 : ns);
  int r = fiber_sleep(end - iof__now_ns());
  if (r == 0) return 0;
  if (rem) ns_ts(end - iof__now_ns(), rem);
  return -r;
}

int iof_compat_nanosleep(const struct timespec *req, struct timespec *rem) {
  if (!iof__compat_fiber() || !req || iof__ts_check(req) < 0)
    return iof__libc.nanosleep(req, rem); /* EFAULT, EINVAL: the kernel's */
  int e = sleep_rel(req, rem);
  if (!e) return 0;
  errno = e;
  return -1;
}

static bool fiber_clock(clockid_t c) {
  return c == CLOCK_REALTIME || c == CLOCK_MONOTONIC
#ifdef CLOCK_BOOTTIME
         || c == CLOCK_BOOTTIME
#endif
#ifdef CLOCK_TAI
         || c == CLOCK_TAI
#endif
      ;
}

int iof_compat_clock_nanosleep(clockid_t clock, int flags,
                               const struct timespec *req,
                               struct timespec *rem) {
  if (!iof__compat_fiber() || !req || !fiber_clock(clock) ||
      iof__ts_check(req) < 0)
    return iof__libc.clock_nanosleep(clock, flags, req, rem);
  if (!(flags & TIMER_ABSTIME)) return sleep_rel(req, rem);
  /* Until the clock reads req: checked again after each sleep, so a
   * realtime clock set back meanwhile still gets its full wait. */
  int64_t target = ts_ns(req);
  for (;;) {
    struct timespec now;
    if (clock_gettime(clock, &now) != 0) return errno;
    int64_t left = target - ts_ns(&now);
    if (left <= 0) return 0;
    int r = fiber_sleep(left);
    if (r < 0) return -r;
  }
}

int iof_compat_sched_yield(void) {
  if (!iof__compat_fiber()) return iof__libc.sched_yield();
  int saved = errno;
  iof_yield();
  errno = saved;
  return 0;
}
