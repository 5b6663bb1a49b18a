/* Calls that take a pthread_t, given the ids of running and ended threads
 * (under iofiber-run and the header swap fiber "threads", whose ids glibc
 * would read as its own thread descriptors: crashes, scribbles), run also
 * plain to check that the expected answers are glibc's:
 * - pthread_tryjoin_np: EBUSY while the thread runs, then its result;
 *   pthread_timedjoin_np: ETIMEDOUT at the limit, else its result;
 *   pthread_clockjoin_np likewise;
 * - pthread_getschedparam: SCHED_OTHER, priority 0; setschedparam back to
 *   that: 0; a bad policy: EINVAL; setschedprio 0: 0;
 * - pthread_getaffinity_np: a non-empty set; setaffinity_np to it: 0;
 * - pthread_getcpuclockid: 0 with a usable clock, or ENOTSUP;
 * - pthread_sigqueue with signal 0: 0.
 * Prints "all steps right" when every step is. */
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define STEPS_NAME "tid_calls"
#include "steps.h"

static void *sleeper(void *a) {
  usleep(300000);
  return a;
}

static struct timespec in_ms(clockid_t clock, long ms) {
  struct timespec d;
  clock_gettime(clock, &d);
  d.tv_sec += ms / 1000;
  d.tv_nsec += (ms % 1000) * 1000000;
  if (d.tv_nsec >= 1000000000) {
    d.tv_sec++;
    d.tv_nsec -= 1000000000;
  }
  return d;
}

static void sched_and_affinity(pthread_t t, const char *who) {
  int pol = -1;
  struct sched_param sp;
  memset(&sp, 0x55, sizeof sp);
  CHECK(pthread_getschedparam(t, &pol, &sp) == 0, who);
  CHECK(pol == SCHED_OTHER && sp.sched_priority == 0, who);
  sp.sched_priority = 0;
  CHECK(pthread_setschedparam(t, SCHED_OTHER, &sp) == 0, who);
  CHECK(pthread_setschedparam(t, 12345, &sp) == EINVAL, who);
  CHECK(pthread_setschedprio(t, 0) == 0, who);
  cpu_set_t cs;
  CPU_ZERO(&cs);
  CHECK(pthread_getaffinity_np(t, sizeof cs, &cs) == 0, who);
  CHECK(CPU_COUNT(&cs) > 0, who);
  CHECK(pthread_setaffinity_np(t, sizeof cs, &cs) == 0, who);
  clockid_t ck;
  int r = pthread_getcpuclockid(t, &ck);
  struct timespec ts;
  CHECK(r == ENOTSUP || (r == 0 && clock_gettime(ck, &ts) == 0), who);
  union sigval v = {0};
  CHECK(pthread_sigqueue(t, 0, v) == 0, who);
}

static void *self_calls(void *a) {
  sched_and_affinity(pthread_self(), "on itself");
  return a;
}

int main(void) {
  pthread_t t, s;
  void *res = NULL;
  CHECK(pthread_create(&t, NULL, sleeper, (void *)42) == 0, "create");
  sched_and_affinity(pthread_self(), "main on itself");
  sched_and_affinity(t, "main on a sleeper");
  CHECK(pthread_create(&s, NULL, self_calls, NULL) == 0, "create");
  CHECK(pthread_join(s, NULL) == 0, "join");

  CHECK(pthread_tryjoin_np(t, &res) == EBUSY, "tryjoin while it runs");
  struct timespec d = in_ms(CLOCK_REALTIME, 50);
  CHECK(pthread_timedjoin_np(t, &res, &d) == ETIMEDOUT, "timedjoin limit");
  d = in_ms(CLOCK_MONOTONIC, 50);
  CHECK(pthread_clockjoin_np(t, &res, CLOCK_MONOTONIC, &d) == ETIMEDOUT,
        "clockjoin limit");
  d = in_ms(CLOCK_REALTIME, 3000);
  CHECK(pthread_timedjoin_np(t, &res, &d) == 0 && res == (void *)42,
        "timedjoin");

  CHECK(pthread_create(&t, NULL, sleeper, (void *)7) == 0, "create");
  usleep(400000);
  res = NULL;
  CHECK(pthread_tryjoin_np(t, &res) == 0 && res == (void *)7,
        "tryjoin of an ended thread");

  if (failed) return 1;
  puts("all steps right");
  return 0;
}
