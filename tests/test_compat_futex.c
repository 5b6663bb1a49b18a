/* iof_compat_futex and iof_compat_syscall(SYS_futex): a fiber's wait
 * suspends the fiber (the waker may be a fiber of the same io thread),
 * wakes reach fibers and plain threads alike, with the system call's
 * counts, orders and error codes; requeue, wake-op and bitsets; a
 * process-shared word woken behind the table's back; a futex lock shared
 * by fibers on two io threads and plain threads (IOF_TEST_THREADED). */
#include "check_test.h"

#include <iofiber/compat_io.h>
#include <iofiber/compat_thread.h>

#include <errno.h>
#include <signal.h>
#include <sys/wait.h>
#include <limits.h>
#include <linux/futex.h>
#include <stdint.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

static int64_t mono_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static long fx(_Atomic uint32_t *a, int op, uint32_t val,
               const struct timespec *t, _Atomic uint32_t *a2, uint32_t v3) {
  return iof_compat_futex((uint32_t *)a, op, val, t, (uint32_t *)a2, v3);
}

static const struct timespec five_s = {5, 0};

static void run_fibers(int n, int (*fn)(void *), void *arg) {
  iof_io_context *io = iof_io_context_create();
  assert_non_null(io);
  iof_executor_ref ex = iof_io_context_executor(io);
  for (int i = 0; i < n; i++)
    assert_int_equal(iof_run_async(ex, NULL, fn, arg), 0);
  assert_true(iof_io_context_run(io) >= 0);
  assert_int_equal(iof_io_context_destroy(io), 0);
}

/* ---- a waiter and its waker on one io thread --------------------------- */

static _Atomic uint32_t word;
static atomic_int order[16], norder;

static void mark(int what) {
  order[atomic_fetch_add(&norder, 1) % 16] = what;
}

static int same_thread_waiter(void *arg) {
  (void)arg;
  mark(1);
  int64_t t0 = mono_ns();
  /* On the kernel this would hold the thread: the waker could not run
   * and the wait would time out after 5 s. */
  CHECK(fx(&word, FUTEX_WAIT_PRIVATE, 0, &five_s, NULL, 0) == 0);
  CHECK(mono_ns() - t0 < 2000000000LL);
  CHECK(atomic_load(&word) == 1);
  mark(4);
  return 0;
}

static int same_thread_waker(void *arg) {
  (void)arg;
  mark(2);
  iof_yield();
  atomic_store(&word, 1);
  CHECK(fx(&word, FUTEX_WAKE_PRIVATE, 1, NULL, NULL, 0) == 1);
  mark(3);
  return 0;
}

static int pair_main(void *arg) {
  (void)arg;
  iof_executor_ref ex = iof_env_current()->executor;
  CHECK(iof_run_async(ex, NULL, same_thread_waiter, NULL) == 0);
  CHECK(iof_run_async(ex, NULL, same_thread_waker, NULL) == 0);
  return 0;
}

static void test_wait_wake_one_thread(void **state) {
  (void)state;
  atomic_store(&word, 0);
  atomic_store(&norder, 0);
  run_fibers(1, pair_main, NULL);
  assert_no_failures();
  assert_int_equal(atomic_load(&norder), 4);
  for (int i = 0; i < 4; i++) assert_int_equal(order[i], i + 1);
}

/* ---- counts and bitsets ----------------------------------------------- */

static atomic_int woke;

static int counted_waiter(void *arg) {
  uint32_t bits = (uint32_t)(uintptr_t)arg;
  CHECK(fx(&word, FUTEX_WAIT_BITSET_PRIVATE, 0, NULL, NULL, bits) == 0);
  atomic_fetch_add(&woke, 1);
  return 0;
}

static int counts_main(void *arg) {
  (void)arg;
  iof_executor_ref ex = iof_env_current()->executor;
  /* Waiters 0-5 have bit 1, 6-7 bit 2. */
  for (int i = 0; i < 8; i++)
    CHECK(iof_run_async(ex, NULL, counted_waiter,
                        (void *)(uintptr_t)(i < 6 ? 1 : 2)) == 0);
  iof_yield(); /* each runs to its wait */
  CHECK(fx(&word, FUTEX_WAKE_PRIVATE, 3, NULL, NULL, 0) == 3);
  CHECK(fx(&word, FUTEX_WAKE_BITSET_PRIVATE, INT_MAX, NULL, NULL, 2) == 2);
  iof_yield();
  CHECK(atomic_load(&woke) == 5);
  /* A count of 0 wakes one, as the kernel's does. */
  CHECK(fx(&word, FUTEX_WAKE_PRIVATE, 0, NULL, NULL, 0) == 1);
  CHECK(fx(&word, FUTEX_WAKE_BITSET_PRIVATE, INT_MAX, NULL, NULL, 2) == 0);
  CHECK(fx(&word, FUTEX_WAKE_BITSET_PRIVATE, INT_MAX, NULL, NULL, 1) == 2);
  CHECK(fx(&word, FUTEX_WAKE_PRIVATE, INT_MAX, NULL, NULL, 0) == 0);
  iof_yield();
  CHECK(atomic_load(&woke) == 8);
  return 0;
}

static void test_counts_and_bitsets(void **state) {
  (void)state;
  atomic_store(&word, 0);
  atomic_store(&woke, 0);
  run_fibers(1, counts_main, NULL);
  assert_no_failures();
  assert_int_equal(atomic_load(&woke), 8);
}

/* ---- errors and timeouts ---------------------------------------------- */

/* Three arguments where syscall reads six: the sixth comes from this
 * frame's bottom, an ASan redzone here (a local whose address is taken). */
static __attribute__((noinline)) long read_few_args(void) {
  char buf[16];
  errno = 0;
  return iof_compat_syscall(SYS_read, -1, buf, sizeof buf);
}

static int errors_main(void *arg) {
  (void)arg;
  _Atomic uint32_t w = 7;
  errno = 0;
  CHECK(fx(&w, FUTEX_WAIT_PRIVATE, 8, NULL, NULL, 0) == -1 && errno == EAGAIN);
  errno = 0;
  CHECK(fx(NULL, FUTEX_WAIT_PRIVATE, 0, NULL, NULL, 0) == -1 &&
        errno == EFAULT);
  errno = 0;
  CHECK(iof_compat_futex((uint32_t *)((char *)&w + 1), FUTEX_WAIT_PRIVATE, 0,
                         NULL, NULL, 0) == -1 &&
        errno == EINVAL);
  errno = 0;
  CHECK(fx(&w, FUTEX_WAIT_BITSET_PRIVATE, 7, NULL, NULL, 0) == -1 &&
        errno == EINVAL);
  errno = 0;
  CHECK(fx(&w, FUTEX_WAKE_BITSET_PRIVATE, 1, NULL, NULL, 0) == -1 &&
        errno == EINVAL);
  struct timespec bad = {0, 1000000000};
  errno = 0;
  CHECK(fx(&w, FUTEX_WAIT_PRIVATE, 7, &bad, NULL, 0) == -1 && errno == EINVAL);
  struct timespec neg = {-1, 0};
  errno = 0;
  CHECK(fx(&w, FUTEX_WAIT_PRIVATE, 7, &neg, NULL, 0) == -1 && errno == EINVAL);
  errno = 0;
  CHECK(fx(&w, 99, 0, NULL, NULL, 0) == -1 && errno == ENOSYS);

  /* Relative timeout. */
  struct timespec rel = {0, 30000000};
  int64_t t0 = mono_ns();
  errno = 0;
  CHECK(fx(&w, FUTEX_WAIT_PRIVATE, 7, &rel, NULL, 0) == -1 &&
        errno == ETIMEDOUT);
  int64_t took = mono_ns() - t0;
  CHECK(took >= 29000000 && took < 2000000000LL);
  /* Absolute, on both clocks. */
  for (int rt = 0; rt < 2; rt++) {
    struct timespec abs;
    clock_gettime(rt ? CLOCK_REALTIME : CLOCK_MONOTONIC, &abs);
    abs.tv_nsec += 30000000;
    if (abs.tv_nsec >= 1000000000) abs.tv_sec++, abs.tv_nsec -= 1000000000;
    t0 = mono_ns();
    errno = 0;
    CHECK(fx(&w, FUTEX_WAIT_BITSET_PRIVATE | (rt ? FUTEX_CLOCK_REALTIME : 0), 7,
             &abs, NULL, FUTEX_BITSET_MATCH_ANY) == -1 &&
          errno == ETIMEDOUT);
    took = mono_ns() - t0;
    CHECK(took >= 25000000 && took < 2000000000LL);
  }
  /* A deadline already passed. */
  struct timespec past = {0, 0};
  errno = 0;
  CHECK(fx(&w, FUTEX_WAIT_BITSET_PRIVATE, 7, &past, NULL,
           FUTEX_BITSET_MATCH_ANY) == -1 &&
        errno == ETIMEDOUT);
  /* A wild timeout pointer, and flags the kernel refuses. */
  errno = 0;
  CHECK(fx(&w, FUTEX_WAIT_PRIVATE, 7, (void *)0x10, NULL, 0) == -1 &&
        errno == EFAULT);
  errno = 0;
  CHECK(fx(&w, FUTEX_WAKE_PRIVATE | FUTEX_CLOCK_REALTIME, 1, NULL, NULL, 0) ==
            -1 &&
        errno == ENOSYS);
  _Atomic uint32_t odd[2];
  errno = 0;
  CHECK(fx(&w, FUTEX_REQUEUE_PRIVATE, 1, (void *)(uintptr_t)1,
           (_Atomic uint32_t *)((char *)odd + 1), 0) == -1 &&
        errno == EINVAL);
  /* Nothing waits: wakes find nobody. */
  CHECK(fx(&w, FUTEX_WAKE_PRIVATE, INT_MAX, NULL, NULL, 0) == 0);
  /* Other numbers pass through iof_compat_syscall. */
  CHECK(iof_compat_syscall(SYS_getpid) == getpid());
  CHECK(read_few_args() == -1 && errno == EBADF);
  errno = 0;
  CHECK(iof_compat_syscall(SYS_futex, &w, FUTEX_WAIT_PRIVATE, 8, NULL, NULL,
                           0) == -1 &&
        errno == EAGAIN);
  return 0;
}

static void test_errors_and_timeouts(void **state) {
  (void)state;
  run_fibers(1, errors_main, NULL);
  assert_no_failures();
}

/* ---- requeue and wake-op ---------------------------------------------- */

static _Atomic uint32_t cv, lk;

static int cv_waiter(void *arg) {
  (void)arg;
  CHECK(fx(&cv, FUTEX_WAIT_PRIVATE, 0, &five_s, NULL, 0) == 0);
  atomic_fetch_add(&woke, 1);
  return 0;
}

static int requeue_main(void *arg) {
  (void)arg;
  iof_executor_ref ex = iof_env_current()->executor;
  for (int i = 0; i < 4; i++)
    CHECK(iof_run_async(ex, NULL, cv_waiter, NULL) == 0);
  iof_yield();
  /* The compared value is wrong: nothing happens. */
  errno = 0;
  CHECK(fx(&cv, FUTEX_CMP_REQUEUE_PRIVATE, 1, (void *)(uintptr_t)1, &lk, 5) ==
            -1 &&
        errno == EAGAIN);
  /* Wake 1, move 2 to lk: 3 (woken + moved). */
  CHECK(fx(&cv, FUTEX_CMP_REQUEUE_PRIVATE, 1, (void *)(uintptr_t)2, &lk, 0) ==
        3);
  iof_yield();
  CHECK(atomic_load(&woke) == 1);
  /* The moved ones wait on lk now, the last one still on cv. */
  CHECK(fx(&cv, FUTEX_WAKE_PRIVATE, INT_MAX, NULL, NULL, 0) == 1);
  iof_yield();
  CHECK(atomic_load(&woke) == 2);
  /* FUTEX_REQUEUE: wake 1, move the other; counts both, as the kernel. */
  CHECK(fx(&lk, FUTEX_REQUEUE_PRIVATE, 1, (void *)(uintptr_t)1, &cv, 0) == 2);
  iof_yield();
  CHECK(atomic_load(&woke) == 3);
  /* Wake-op: set cv to 1, wake one on cv; old value 0 == 0: one on lk. */
  CHECK(iof_run_async(ex, NULL, cv_waiter, NULL) == 0);
  iof_yield();
  /* Now: one waiter on cv (requeued), one on cv (new): wake 2 there. */
  int op = FUTEX_OP(FUTEX_OP_SET, 1, FUTEX_OP_CMP_EQ, 0);
  CHECK(fx(&lk, FUTEX_WAKE_OP_PRIVATE, 0, (void *)(uintptr_t)2, &cv,
           (uint32_t)op) == 2);
  CHECK(atomic_load(&cv) == 1);
  iof_yield();
  CHECK(atomic_load(&woke) == 5);
  return 0;
}

static void test_requeue_and_wake_op(void **state) {
  (void)state;
  atomic_store(&cv, 0);
  atomic_store(&lk, 0);
  atomic_store(&woke, 0);
  run_fibers(1, requeue_main, NULL);
  assert_no_failures();
  assert_int_equal(atomic_load(&woke), 5);
}

/* ---- requeue onto the same word: counted, not moved -------------------- */

static int self_requeue_main(void *arg) {
  (void)arg;
  iof_executor_ref ex = iof_env_current()->executor;
  for (int i = 0; i < 3; i++)
    CHECK(iof_run_async(ex, NULL, cv_waiter, NULL) == 0);
  iof_yield();
  CHECK(fx(&cv, FUTEX_CMP_REQUEUE_PRIVATE, 0, (void *)(uintptr_t)50, &cv, 0) ==
        3);
  CHECK(fx(&cv, FUTEX_WAKE_PRIVATE, INT_MAX, NULL, NULL, 0) == 3);
  return 0;
}

static void test_requeue_onto_itself(void **state) {
  (void)state;
  atomic_store(&cv, 0);
  atomic_store(&woke, 0);
  run_fibers(1, self_requeue_main, NULL);
  assert_no_failures();
  assert_int_equal(atomic_load(&woke), 3);
}

/* ---- a requeue racing a fiber that is starting its wait ---------------- */

static _Atomic uint32_t ra, rb;
static atomic_int rstage;

static int racing_waiter(void *arg) {
  (void)arg;
  atomic_store(&rstage, 1);
  CHECK(fx(&ra, FUTEX_WAIT_PRIVATE, 0, &five_s, NULL, 0) == 0);
  atomic_store(&rstage, 2);
  return 0;
}

static void *racing_io(void *arg) {
  (void)arg;
  iof_io_context *io = iof_io_context_create();
  if (!io) return NULL;
  iof_run_async(iof_io_context_executor(io), NULL, racing_waiter, NULL);
  iof_io_context_run(io);
  iof_io_context_destroy(io);
  return NULL;
}

/* The requeue moves the waiter as soon as it counts it; the wake on the
 * new word must then reach it (IOF_TEST_THREADED). */
static void test_requeue_races_wait_start(void **state) {
  (void)state;
  int lost = 0;
  struct timespec ms = {0, 1000000};
  for (int i = 0; i < 100; i++) {
    atomic_store(&rstage, 0);
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, racing_io, NULL), 0);
    while (atomic_load(&rstage) == 0) sched_yield();
    int64_t end = mono_ns() + 2000000000LL;
    while (fx(&ra, FUTEX_CMP_REQUEUE_PRIVATE, 0, (void *)(uintptr_t)1, &rb,
              0) == 0 &&
           mono_ns() < end)
      ;
    nanosleep(&ms, NULL);
    fx(&rb, FUTEX_WAKE_PRIVATE, 1, NULL, NULL, 0);
    end = mono_ns() + 200000000;
    while (atomic_load(&rstage) != 2 && mono_ns() < end) nanosleep(&ms, NULL);
    if (atomic_load(&rstage) != 2) lost++;
    while (atomic_load(&rstage) != 2) {
      fx(&ra, FUTEX_WAKE_PRIVATE, 1, NULL, NULL, 0);
      fx(&rb, FUTEX_WAKE_PRIVATE, 1, NULL, NULL, 0);
      nanosleep(&ms, NULL);
    }
    pthread_join(t, NULL);
  }
  assert_int_equal(lost, 0);
  assert_no_failures();
}

/* ---- a wake from a signal handler on a thread that is waking ----------- */

static _Atomic uint32_t words[4096];
static _Atomic uint32_t *hx, *hy; /* two words of one bucket */
static atomic_long handler_runs, wakes_done;
static atomic_bool stop_sig;
static pthread_t waker_thread;

static void on_usr1(int sig) {
  (void)sig;
  int e = errno;
  fx(hx, FUTEX_WAKE_PRIVATE, 1, NULL, NULL, 0);
  atomic_fetch_add(&handler_runs, 1);
  errno = e;
}

static int hy_waiter(void *arg) {
  (void)arg;
  CHECK(fx(hy, FUTEX_WAIT_PRIVATE, 0, &five_s, NULL, 0) == 0);
  return 0;
}

static void *hy_io(void *arg) {
  (void)arg;
  run_fibers(1, hy_waiter, NULL);
  return NULL;
}

static void *hx_waker(void *arg) {
  (void)arg;
  while (!atomic_load(&stop_sig)) {
    fx(hx, FUTEX_WAKE_PRIVATE, 1, NULL, NULL, 0);
    atomic_fetch_add(&wakes_done, 1);
  }
  return NULL;
}

static void *sender(void *arg) {
  (void)arg;
  while (!atomic_load(&stop_sig)) {
    pthread_kill(waker_thread, SIGUSR1);
    for (volatile int i = 0; i < 200; i++)
      ;
  }
  return NULL;
}

static unsigned bucket_no(const void *a) {
  return (unsigned)(((uint64_t)(uintptr_t)a * UINT64_C(0x9e3779b97f4a7c15)) >>
                    56);
}

/* A fiber waits on hy, so wakes of hx (same bucket) take the bucket lock;
 * a handler's wake of hx may land while its own thread holds it: no
 * deadlock, the waker keeps going. */
static void test_wake_from_signal_handler(void **state) {
  (void)state;
  hx = &words[0];
  hy = NULL;
  for (int i = 1; i < 4096 && !hy; i++)
    if (bucket_no(&words[i]) == bucket_no(hx)) hy = &words[i];
  assert_non_null(hy);
  struct sigaction sa, old;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_usr1;
  sa.sa_flags = SA_RESTART;
  assert_int_equal(sigaction(SIGUSR1, &sa, &old), 0);
  atomic_store(&stop_sig, false);
  pthread_t io, snd;
  assert_int_equal(pthread_create(&io, NULL, hy_io, NULL), 0);
  struct timespec ms20 = {0, 20000000};
  nanosleep(&ms20, NULL);
  assert_int_equal(pthread_create(&waker_thread, NULL, hx_waker, NULL), 0);
  assert_int_equal(pthread_create(&snd, NULL, sender, NULL), 0);
  long last = -1, stalls = 0, longest = 0;
  for (int i = 0; i < 40; i++) {
    nanosleep(&ms20, NULL);
    long now = atomic_load(&wakes_done) + atomic_load(&handler_runs);
    stalls = now == last ? stalls + 1 : 0;
    if (stalls > longest) longest = stalls;
    last = now;
  }
  /* Stalled at the end: progress must come back within 20 more steps. */
  for (int i = 0; i < 20 && stalls > 0; i++) {
    nanosleep(&ms20, NULL);
    long now = atomic_load(&wakes_done) + atomic_load(&handler_runs);
    stalls = now == last ? stalls + 1 : 0;
    if (stalls > longest) longest = stalls;
    last = now;
  }
  atomic_store(&stop_sig, true);
  /* Progress in the loop or in handlers: else the waker deadlocked (for
   * good). A loaded machine may leave the waker unscheduled for a step or
   * a few, never for 20 (400 ms). */
  assert_int_equal(stalls, 0);
  assert_true(longest < 20);
  pthread_join(snd, NULL);
  pthread_join(waker_thread, NULL);
  atomic_store(hy, 1);
  fx(hy, FUTEX_WAKE_PRIVATE, 1, NULL, NULL, 0);
  pthread_join(io, NULL);
  sigaction(SIGUSR1, &old, NULL);
  assert_true(atomic_load(&handler_runs) > 0);
  assert_no_failures();
}

/* ---- fork from a plain thread while a fiber waits ---------------------- */

static _Atomic uint32_t fxw;
static atomic_int child_woken;

static int fork_waiter(void *arg) {
  (void)arg;
  CHECK(fx(&fxw, FUTEX_WAIT_PRIVATE, 0, &five_s, NULL, 0) == 0);
  return 0;
}

static void *fork_io(void *arg) {
  (void)arg;
  run_fibers(1, fork_waiter, NULL);
  return NULL;
}

static void *child_waiter(void *arg) {
  (void)arg;
  struct timespec t = {2, 0};
  long r = fx(&fxw, FUTEX_WAIT_PRIVATE, 0, &t, NULL, 0);
  atomic_store(&child_woken, r == 0 ? 1 : 2);
  return NULL;
}

/* The child's wake reaches its own (kernel) waiter, not the parent's
 * fiber that its copy of the table would hold. */
static void test_fork_from_plain_thread(void **state) {
  (void)state;
#if defined(__SANITIZE_THREAD__)
  skip(); /* TSan refuses threads in the child of a threaded process */
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
  skip();
#endif
#endif
  atomic_store(&fxw, 0);
  pthread_t t;
  assert_int_equal(pthread_create(&t, NULL, fork_io, NULL), 0);
  struct timespec ms50 = {0, 50000000};
  nanosleep(&ms50, NULL);
  pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) {
    alarm(5);
    pthread_t c;
    if (pthread_create(&c, NULL, child_waiter, NULL) != 0) _exit(3);
    struct timespec ms100 = {0, 100000000};
    nanosleep(&ms100, NULL);
    long r = fx(&fxw, FUTEX_WAKE_PRIVATE, 1, NULL, NULL, 0);
    pthread_join(c, NULL);
    _exit(r == 1 && atomic_load(&child_woken) == 1 ? 0 : 1);
  }
  int st;
  assert_int_equal(waitpid(pid, &st, 0), pid);
  assert_true(WIFEXITED(st));
  assert_int_equal(WEXITSTATUS(st), 0);
  assert_int_equal(fx(&fxw, FUTEX_WAKE_PRIVATE, 1, NULL, NULL, 0), 1);
  pthread_join(t, NULL);
  assert_no_failures();
}

/* ---- a shared word woken behind the table's back ---------------------- */

static atomic_bool shared_started;

static void *raw_waker(void *arg) {
  (void)arg;
  /* 50 ms counted from the fiber's start of its wait (bounded). */
  for (int i = 0; i < 5000 && !atomic_load(&shared_started); i++) usleep(1000);
  usleep(50000);
  atomic_store(&word, 1);
  /* Straight to the kernel (another process would do the same). */
  syscall(SYS_futex, &word, FUTEX_WAKE, INT_MAX, NULL, NULL, 0);
  return NULL;
}

static atomic_int ticks;
static atomic_bool shared_done;

static int ticker(void *arg) {
  (void)arg;
  while (!atomic_load(&shared_done)) {
    atomic_fetch_add(&ticks, 1);
    iof_sleep_for(2000000);
  }
  return 0;
}

static int shared_waiter(void *arg) {
  (void)arg;
  int64_t t0 = mono_ns();
  atomic_store(&shared_started, true);
  CHECK(fx(&word, FUTEX_WAIT, 0, &five_s, NULL, 0) == 0);
  int64_t took = mono_ns() - t0;
  CHECK(took >= 45000000 && took < 2000000000LL);
  atomic_store(&shared_done, true);
  return 0;
}

static int shared_main(void *arg) {
  (void)arg;
  iof_executor_ref ex = iof_env_current()->executor;
  CHECK(iof_run_async(ex, NULL, ticker, NULL) == 0);
  CHECK(iof_run_async(ex, NULL, shared_waiter, NULL) == 0);
  return 0;
}

static void test_shared_word_polled(void **state) {
  (void)state;
  atomic_store(&word, 0);
  atomic_store(&ticks, 0);
  atomic_store(&shared_done, false);
  atomic_store(&shared_started, false);
  pthread_t t;
  assert_int_equal(pthread_create(&t, NULL, raw_waker, NULL), 0);
  run_fibers(1, shared_main, NULL);
  pthread_join(t, NULL);
  assert_no_failures();
  assert_true(atomic_load(&ticks) >= 10); /* the thread kept running */
}

/* ---- IOF_TEST_THREADED: one futex lock, fibers on two io threads and
 * plain threads ------------------------------------------------------- */

enum { FIBERS = 6, PLAIN = 2, ROUNDS = 2000 };
static _Atomic uint32_t mtx; /* 0 free, 1 locked, 2 locked with waiters */
static long counter;
static atomic_int timeouts;

static void lock(void) {
  uint32_t c = 0;
  if (atomic_compare_exchange_strong(&mtx, &c, 1)) return;
  if (c != 2) c = atomic_exchange(&mtx, 2);
  while (c != 0) {
    /* A lost wake-up shows as a timeout rather than a hang. */
    struct timespec t = {2, 0};
    if (iof_compat_syscall(SYS_futex, &mtx, FUTEX_WAIT_PRIVATE, 2, &t, NULL,
                           0) == -1 &&
        errno == ETIMEDOUT)
      atomic_fetch_add(&timeouts, 1);
    c = atomic_exchange(&mtx, 2);
  }
}

static void unlock(void) {
  if (atomic_exchange(&mtx, 0) == 2)
    iof_compat_syscall(SYS_futex, &mtx, FUTEX_WAKE_PRIVATE, 1, NULL, NULL, 0);
}

static void rounds(bool fiber) {
  for (int i = 0; i < ROUNDS; i++) {
    lock();
    long v = counter;
    /* Hold it across a switch now and then, so others queue up. */
    if (fiber && i % 64 == 0) iof_yield();
    counter = v + 1;
    unlock();
  }
}

static void *plain_rounds(void *arg) {
  (void)arg;
  rounds(false);
  return NULL;
}

static int fiber_rounds(void *arg) {
  (void)arg;
  rounds(true);
  return 0;
}

static void *io_thread(void *arg) {
  iof_io_context *io = arg;
  iof_io_context_run(io);
  return NULL;
}

static void test_lock_fibers_and_threads(void **state) {
  (void)state;
  counter = 0;
  atomic_store(&mtx, 0);
  atomic_store(&timeouts, 0);
  iof_io_context *io[2];
  pthread_t th[2 + PLAIN];
  for (int k = 0; k < 2; k++) {
    io[k] = iof_io_context_create();
    assert_non_null(io[k]);
    for (int i = 0; i < FIBERS / 2; i++)
      assert_int_equal(iof_run_async(iof_io_context_executor(io[k]), NULL,
                                     fiber_rounds, NULL),
                       0);
  }
  for (int k = 0; k < 2; k++)
    assert_int_equal(pthread_create(&th[k], NULL, io_thread, io[k]), 0);
  for (int k = 0; k < PLAIN; k++)
    assert_int_equal(pthread_create(&th[2 + k], NULL, plain_rounds, NULL), 0);
  for (int k = 0; k < 2 + PLAIN; k++) pthread_join(th[k], NULL);
  for (int k = 0; k < 2; k++)
    assert_int_equal(iof_io_context_destroy(io[k]), 0);
  assert_int_equal(counter, (long)(FIBERS + PLAIN) * ROUNDS);
  assert_int_equal(atomic_load(&timeouts), 0);
  assert_int_equal(atomic_load(&mtx), 0);
}

IOF_TEST_CHECK_FIXTURES(setup, teardown, 60)

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_wait_wake_one_thread, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(test_counts_and_bitsets, setup, teardown),
      cmocka_unit_test_setup_teardown(test_errors_and_timeouts, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(test_requeue_and_wake_op, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(test_requeue_onto_itself, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(test_requeue_races_wait_start, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(test_wake_from_signal_handler, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(test_fork_from_plain_thread, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(test_shared_word_polled, setup, teardown),
      cmocka_unit_test_setup_teardown(test_lock_fibers_and_threads, setup,
                                      teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
