/* Signal waits: iof_signal_wait returns the
 * signal raised by another fiber or sent to the process from another
 * thread, every waiter of the signal wakes, a second io_context gets
 * -EBUSY while one watches it (and may watch it once that is over),
 * destroying the context cancels a pending wait, bad input is refused,
 * and the program's own disposition of the signal survives the waits.
 *
 * IOF_TEST_THREADED */
#include "test_support.h"
#include "io_test.h"

#include <iofiber/iofiber.h>

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define MS 1000000LL

/* Per-test watchdog (support/test_support.h). */
IOF_TEST_WATCHDOG(arm_watchdog, disarm_watchdog, 30)

typedef struct sig_waiter {
  iof_io_context *io;
  int signo;
  atomic_int waiting;
  int r;
} sig_waiter;

static int sig_wait_fn(void *arg) {
  sig_waiter *w = arg;
  atomic_store(&w->waiting, 1);
  w->r = iof_signal_wait(w->io, w->signo);
  return 0;
}

typedef struct raiser {
  int signo;
  int r;
} raiser;

static int raise_fn(void *arg) {
  raiser *r = arg;
  iof_sleep_for(10 * MS); /* the waiters launched before are armed */
  r->r = raise(r->signo);
  return 0;
}

static void signal_raised_by_another_fiber_wakes_the_waiter(void **state) {
  (void)state;
  iof_io_context *io = iof_io_context_create();
  assert_non_null(io);
  sig_waiter w = {io, SIGUSR1, 0, 0};
  raiser r = {SIGUSR1, -1};
  launch(io, sig_wait_fn, &w);
  launch(io, raise_fn, &r);
  run_all(io);
  assert_int_equal(r.r, 0);
  assert_int_equal(w.r, SIGUSR1);
  /* And again: the wait can be repeated. */
  w.r = 0;
  launch(io, sig_wait_fn, &w);
  launch(io, raise_fn, &r);
  run_all(io);
  assert_int_equal(w.r, SIGUSR1);
  assert_int_equal(iof_io_context_destroy(io), 0);
}

typedef struct killer {
  atomic_int *waiting;
  int n;
  int signo;
  bool ok;
} killer;

static void *kill_later(void *arg) {
  killer *k = arg;
  k->ok = true;
  for (int i = 0; i < k->n; i++) k->ok &= wait_flag(&k->waiting[i]);
  sleep_ms(30);
  k->ok &= kill(getpid(), k->signo) == 0;
  return NULL;
}

static void signal_sent_from_another_thread_wakes_the_waiter(void **state) {
  (void)state;
  iof_io_context *io = iof_io_context_create();
  assert_non_null(io);
  sig_waiter w = {io, SIGUSR1, 0, 0};
  launch(io, sig_wait_fn, &w);
  killer k = {&w.waiting, 1, SIGUSR1, false};
  pthread_t t;
  assert_int_equal(pthread_create(&t, NULL, kill_later, &k), 0);
  run_all(io);
  pthread_join(t, NULL);
  assert_true(k.ok);
  assert_int_equal(w.r, SIGUSR1);
  assert_int_equal(iof_io_context_destroy(io), 0);
}

#define NSW 3

static void every_waiter_of_the_signal_wakes(void **state) {
  (void)state;
  iof_io_context *io = iof_io_context_create();
  assert_non_null(io);
  sig_waiter w[NSW];
  memset(w, 0, sizeof w);
  for (int i = 0; i < NSW; i++) {
    w[i].io = io;
    w[i].signo = SIGUSR2;
    launch(io, sig_wait_fn, &w[i]);
  }
  raiser r = {SIGUSR2, -1};
  launch(io, raise_fn, &r);
  run_all(io);
  for (int i = 0; i < NSW; i++) assert_int_equal(w[i].r, SIGUSR2);
  assert_int_equal(iof_io_context_destroy(io), 0);
}

typedef struct io_runner {
  iof_io_context *io;
} io_runner;

static void *run_io_thread(void *arg) {
  io_runner *r = arg;
  iof_io_context_run(r->io);
  return NULL;
}

typedef struct other_io {
  iof_io_context *io;
  int r_busy;
} other_io;

static int busy_fn(void *arg) {
  other_io *o = arg;
  o->r_busy = iof_signal_wait(o->io, SIGUSR1);
  return 0;
}

static void
second_io_context_gets_ebusy_while_one_watches_the_signal(void **state) {
  (void)state;
  iof_io_context *io1 = iof_io_context_create();
  iof_io_context *io2 = iof_io_context_create();
  assert_non_null(io1);
  assert_non_null(io2);
  sig_waiter w = {io1, SIGUSR1, 0, 0};
  launch(io1, sig_wait_fn, &w);
  io_runner r1 = {io1};
  pthread_t t;
  assert_int_equal(pthread_create(&t, NULL, run_io_thread, &r1), 0);
  assert_true(wait_flag(&w.waiting));
  sleep_ms(20); /* armed on io1's thread */
  other_io o = {io2, 0};
  launch(io2, busy_fn, &o);
  run_all(io2);
  assert_int_equal(o.r_busy, -EBUSY);
  assert_int_equal(kill(getpid(), SIGUSR1), 0);
  pthread_join(t, NULL);
  assert_int_equal(w.r, SIGUSR1);
  /* io1's wait is over: io2 may watch the signal now. */
  sig_waiter w2 = {io2, SIGUSR1, 0, 0};
  raiser rs = {SIGUSR1, -1};
  launch(io2, sig_wait_fn, &w2);
  launch(io2, raise_fn, &rs);
  run_all(io2);
  assert_int_equal(w2.r, SIGUSR1);
  assert_int_equal(iof_io_context_destroy(io1), 0);
  assert_int_equal(iof_io_context_destroy(io2), 0);
}

static void destroying_the_context_cancels_a_pending_signal_wait(void **state) {
  (void)state;
  iof_io_context *io = iof_io_context_create();
  assert_non_null(io);
  sig_waiter w = {io, SIGUSR2, 0, 0};
  launch(io, sig_wait_fn, &w);
  assert_int_equal(iof_io_context_poll(io), 1);
  assert_int_equal(atomic_load(&w.waiting), 1);
  assert_int_equal(iof_io_context_destroy(io), 0);
  assert_int_equal(w.r, -ECANCELED);
  /* The signal is free again: another context can watch it. */
  iof_io_context *io2 = iof_io_context_create();
  assert_non_null(io2);
  sig_waiter w2 = {io2, SIGUSR2, 0, 0};
  raiser r = {SIGUSR2, -1};
  launch(io2, sig_wait_fn, &w2);
  launch(io2, raise_fn, &r);
  run_all(io2);
  assert_int_equal(w2.r, SIGUSR2);
  assert_int_equal(iof_io_context_destroy(io2), 0);
}

typedef struct bad_sig {
  iof_io_context *io;
  int r[7];
} bad_sig;

static int bad_sig_fn(void *arg) {
  bad_sig *b = arg;
  b->r[0] = iof_signal_wait(b->io, 0);
  b->r[1] = iof_signal_wait(b->io, -1);
  b->r[2] = iof_signal_wait(b->io, NSIG);
  b->r[3] = iof_signal_wait(b->io, SIGKILL);
  b->r[4] = iof_signal_wait(b->io, SIGSTOP);
  b->r[5] = iof_signal_wait(NULL, SIGUSR1);
  b->r[6] = iof_signal_wait(b->io, 100000);
  return 0;
}

static void
bad_signal_numbers_are_einval_and_outside_a_fiber_eperm(void **state) {
  (void)state;
  iof_io_context *io = iof_io_context_create();
  assert_non_null(io);
  bad_sig b = {io, {0}};
  launch(io, bad_sig_fn, &b);
  run_all(io);
  for (int i = 0; i < 7; i++) assert_int_equal(b.r[i], -EINVAL);
  assert_int_equal(iof_signal_wait(io, SIGUSR1), -EPERM);
  assert_int_equal(iof_io_context_destroy(io), 0);
}

/* The program's own disposition of a signal comes back after the waits
 * end (libev resets it to SIG_DFL when its last watcher stops): a handler
 * still runs for a later signal, which would otherwise end the process;
 * SIG_IGN stays ignored. Also after a wait ended by a stop request. */
static volatile sig_atomic_t own_hits;

static void own_handler(int sig) {
  (void)sig;
  own_hits++;
}

static int stop_later(void *arg) {
  iof_sleep_for(10 * MS);
  iof_stop_source_request(arg);
  return 0;
}

static void the_programs_disposition_survives_a_wait(void **state) {
  (void)state;
  struct sigaction sa, old, now;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = own_handler;
  sigemptyset(&sa.sa_mask);
  assert_int_equal(sigaction(SIGUSR2, &sa, &old), 0);
  iof_io_context *io = iof_io_context_create();
  assert_non_null(io);
  sig_waiter w = {io, SIGUSR2, 0, 0};
  raiser r = {SIGUSR2, -1};
  launch(io, sig_wait_fn, &w);
  launch(io, raise_fn, &r);
  run_all(io);
  assert_int_equal(w.r, SIGUSR2);
  assert_int_equal(sigaction(SIGUSR2, NULL, &now), 0);
  assert_true(now.sa_handler == own_handler);
  own_hits = 0;
  assert_int_equal(raise(SIGUSR2), 0);
  assert_int_equal(own_hits, 1);
  /* A wait that a stop request ends. */
  iof_stop_source src;
  assert_int_equal(iof_stop_source_init(&src), 0);
  iof_launch_opts o = {0};
  o.stop_token = iof_stop_source_token(&src);
  w.r = 0;
  assert_int_equal(
      iof_run_async(iof_io_context_executor(io), &o, sig_wait_fn, &w), 0);
  launch(io, stop_later, &src);
  run_all(io);
  assert_int_equal(w.r, -ECANCELED);
  assert_int_equal(raise(SIGUSR2), 0);
  assert_int_equal(own_hits, 2);
  iof_stop_source_destroy(&src);
  /* SIG_IGN stays SIG_IGN. */
  sa.sa_handler = SIG_IGN;
  assert_int_equal(sigaction(SIGUSR2, &sa, NULL), 0);
  w.r = 0;
  launch(io, sig_wait_fn, &w);
  launch(io, raise_fn, &r);
  run_all(io);
  assert_int_equal(w.r, SIGUSR2);
  assert_int_equal(sigaction(SIGUSR2, NULL, &now), 0);
  assert_true(now.sa_handler == SIG_IGN);
  assert_int_equal(raise(SIGUSR2), 0);
  assert_int_equal(iof_io_context_destroy(io), 0);
  assert_int_equal(sigaction(SIGUSR2, &old, NULL), 0);
}

#define T(f) cmocka_unit_test_setup_teardown(f, arm_watchdog, disarm_watchdog)

int main(void) {
  const struct CMUnitTest tests[] = {
      T(signal_raised_by_another_fiber_wakes_the_waiter),
      T(signal_sent_from_another_thread_wakes_the_waiter),
      T(every_waiter_of_the_signal_wakes),
      T(second_io_context_gets_ebusy_while_one_watches_the_signal),
      T(destroying_the_context_cancels_a_pending_signal_wait),
      T(bad_signal_numbers_are_einval_and_outside_a_fiber_eperm),
      T(the_programs_disposition_survives_a_wait),
  };
  if (getenv("IOF_TEST_FILTER"))
    cmocka_set_test_filter(getenv("IOF_TEST_FILTER"));
  return cmocka_run_group_tests(tests, NULL, NULL);
}
