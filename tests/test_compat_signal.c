/* compat's signal waits in fibers (compat_io.h), without the hook:
 * sigtimedwait/sigwaitinfo/sigwait suspend only the fiber (another fiber
 * keeps ticking on the same thread) and take the signal the kernel
 * chooses, with its siginfo; a timeout gives EAGAIN. ppoll, pselect and
 * epoll_pwait whose mask lets in a signal the thread blocks end with
 * EINTR when it arrives, its handler run, as the plain calls do (make -j
 * waits for SIGCHLD this way). SIGUSR1/SIGUSR2 are blocked in every
 * thread from the start, so a kill never lands elsewhere.
 *
 * IOF_TEST_THREADED */
#include "compat_io_test.h"

#include <signal.h>
#include <stdatomic.h>
#include <sys/epoll.h>
#include <sys/select.h>

IOF_TEST_CHECK_FIXTURES(setup, teardown, 60)

static volatile sig_atomic_t hits;
static void on_usr2(int s) {
  (void)s;
  hits++;
}

/* Another fiber of the same thread: ticks, then sends sig to the process
 * after `after` ticks of 5 ms. */
typedef struct pair {
  int sig;
  int after;
  atomic_int ticks;
  atomic_bool stop;
} pair;

static int ticker(void *arg) {
  pair *p = arg;
  for (int i = 0; i < 2000 && !atomic_load(&p->stop); i++) {
    CHECK(iof_sleep_for(5 * MS) == 0);
    if (atomic_fetch_add(&p->ticks, 1) + 1 == p->after && p->sig)
      CHECK(kill(getpid(), p->sig) == 0);
  }
  return 0;
}

/* Runs fn in a fiber beside a ticker on one io_context. */
static int with_ticker(iof_fn fn, pair *p) {
  iof_io_context *io = iof_io_context_create();
  assert_non_null(io);
  int st_fn = -12345, st_tick = -12345;
  iof_launch_opts o = {0};
  o.on_done = compat_done;
  o.user = &st_tick;
  iof_executor_ref ex = iof_io_context_executor(io);
  assert_int_equal(iof_run_async(ex, &o, ticker, p), 0);
  o.user = &st_fn;
  assert_int_equal(iof_run_async(ex, &o, fn, p), 0);
  assert_true(iof_io_context_run(io) >= 0);
  assert_int_equal(iof_io_context_destroy(io), 0);
  assert_int_equal(st_tick, 0);
  return st_fn;
}

static sigset_t usr1_set(void) {
  sigset_t s;
  sigemptyset(&s);
  sigaddset(&s, SIGUSR1);
  return s;
}

static int sc_sigtimedwait(void *arg) {
  pair *p = arg;
  sigset_t s = usr1_set();
  siginfo_t si;
  memset(&si, 0, sizeof si);
  errno = 31;
  int sig = iof_compat_sigtimedwait(&s, &si, NULL);
  CHECK(sig == SIGUSR1);
  CHECK(si.si_signo == SIGUSR1 && si.si_pid == getpid());
  CHECK(errno == 31);
  CHECK(atomic_load(&p->ticks) >= p->after); /* the ticker ran meanwhile */
  /* Nothing pending: the timeout, as EAGAIN. */
  struct timespec t50 = {0, 50 * MS};
  uint64_t t0 = iof_test_now_ns();
  CHECK(iof_compat_sigtimedwait(&s, NULL, &t50) == -1 && errno == EAGAIN);
  CHECK(ms_since(t0) >= 49);
  struct timespec bad = {0, 1000000000};
  CHECK(iof_compat_sigtimedwait(&s, NULL, &bad) == -1 && errno == EINVAL);
  atomic_store(&p->stop, true);
  return 0;
}

static void test_sigtimedwait(void **st) {
  (void)st;
  pair p = {.sig = SIGUSR1, .after = 6};
  assert_int_equal(with_ticker(sc_sigtimedwait, &p), 0);
  assert_no_failures();
}

static int sc_sigwait(void *arg) {
  pair *p = arg;
  sigset_t s = usr1_set();
  int sig = 0;
  CHECK(iof_compat_sigwait(&s, &sig) == 0 && sig == SIGUSR1);
  CHECK(atomic_load(&p->ticks) >= p->after);
  /* A signal already pending is taken at once. */
  CHECK(kill(getpid(), SIGUSR1) == 0);
  siginfo_t si;
  CHECK(iof_compat_sigwaitinfo(&s, &si) == SIGUSR1);
  atomic_store(&p->stop, true);
  return 0;
}

static void test_sigwait(void **st) {
  (void)st;
  pair p = {.sig = SIGUSR1, .after = 4};
  assert_int_equal(with_ticker(sc_sigwait, &p), 0);
  assert_no_failures();
}

/* The masked waits: SIGUSR2 blocked, let in by the call's mask only. */
enum { VIA_PPOLL, VIA_PSELECT, VIA_EPOLL };

typedef struct masked {
  pair p;
  int via;
} masked;

static int sc_masked(void *arg) {
  masked *m = arg;
  int fds[2];
  CHECK(pipe(fds) == 0);
  sigset_t now, let_in;
  pthread_sigmask(SIG_BLOCK, NULL, &now);
  let_in = now;
  sigdelset(&let_in, SIGUSR2);
  int h = hits;
  uint64_t t0 = iof_test_now_ns();
  struct timespec ten = {10, 0};
  int r = -2;
  if (m->via == VIA_PPOLL) {
    struct pollfd p = {fds[0], POLLIN, 0};
    r = iof_compat_ppoll(&p, 1, &ten, &let_in);
  } else if (m->via == VIA_PSELECT) {
    fd_set rd;
    FD_ZERO(&rd);
    FD_SET(fds[0], &rd);
    r = iof_compat_pselect(fds[0] + 1, &rd, NULL, NULL, &ten, &let_in);
  } else {
    int ep = epoll_create1(EPOLL_CLOEXEC);
    struct epoll_event e = {.events = EPOLLIN, .data.fd = fds[0]};
    CHECK(epoll_ctl(ep, EPOLL_CTL_ADD, fds[0], &e) == 0);
    r = iof_compat_epoll_pwait(ep, &e, 1, 10000, &let_in);
    close(ep);
  }
  CHECK(r == -1 && errno == EINTR);
  CHECK(hits == h + 1);
  CHECK(ms_since(t0) < 5000);
  CHECK(atomic_load(&m->p.ticks) >= m->p.after);
  /* The thread's own mask is as it was. */
  sigset_t after;
  pthread_sigmask(SIG_BLOCK, NULL, &after);
  CHECK(sigismember(&after, SIGUSR2) == 1);
  close(fds[0]);
  close(fds[1]);
  atomic_store(&m->p.stop, true);
  return 0;
}

static void run_masked(int via) {
  masked m = {.p = {.sig = SIGUSR2, .after = 6}, .via = via};
  assert_int_equal(with_ticker(sc_masked, &m.p), 0);
  assert_no_failures();
}

static void test_ppoll_lets_signal_in(void **st) {
  (void)st;
  run_masked(VIA_PPOLL);
}

static void test_pselect_lets_signal_in(void **st) {
  (void)st;
  run_masked(VIA_PSELECT);
}

static void test_epoll_pwait_lets_signal_in(void **st) {
  (void)st;
  run_masked(VIA_EPOLL);
}

int main(void) {
  sigset_t s;
  sigemptyset(&s);
  sigaddset(&s, SIGUSR1);
  sigaddset(&s, SIGUSR2);
  pthread_sigmask(SIG_BLOCK, &s, NULL); /* before any thread starts */
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_usr2;
  sigaction(SIGUSR2, &sa, NULL);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_sigtimedwait, setup, teardown),
      cmocka_unit_test_setup_teardown(test_sigwait, setup, teardown),
      cmocka_unit_test_setup_teardown(test_ppoll_lets_signal_in, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(test_pselect_lets_signal_in, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(test_epoll_pwait_lets_signal_in, setup,
                                      teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
