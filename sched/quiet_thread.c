/* Threads the runtime makes for itself. Process-directed signals belong to
 * the program's own threads: a program that blocks them everywhere and
 * waits in sigwait, or expects its handler on the main thread, must never
 * see one taken by a resolver, timer, pool or io worker thread that it
 * never made. Signals a thread raises on itself (faults, SIGPIPE from its
 * own write) stay open, so a fault still reaches its handler there (the
 * stack-overflow report). */
#include "sched/sched_internal.h"

#include <signal.h>

int iof__thread_create_quiet(pthread_t *t, void *(*fn)(void *), void *arg) {
  static const int own[] = {SIGSEGV, SIGBUS, SIGFPE, SIGILL,
                            SIGTRAP, SIGSYS, SIGPIPE};
  sigset_t quiet, old;
  sigfillset(&quiet);
  for (size_t i = 0; i < sizeof own / sizeof own[0]; i++)
    sigdelset(&quiet, own[i]);
  /* The new thread starts with the creator's mask: no window in which a
   * signal could land on it. */
  pthread_sigmask(SIG_SETMASK, &quiet, &old);
  int r = pthread_create(t, NULL, fn, arg);
  pthread_sigmask(SIG_SETMASK, &old, NULL);
  return r;
}
