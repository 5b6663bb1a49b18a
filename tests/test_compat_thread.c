/* compat's pthread and semaphore shims: mutex, cond, rwlock, barrier,
 * once, keys and sems under 1,000 fiber threads and shared with real
 * threads (IOF_TEST_THREADED), POSIX error codes, fiber threads (create,
 * join, detach, exit, stacks) and iof_main. */
#include "check_test.h"

#include <iofiber/iofiber.h>

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <limits.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <poll.h>
#include <signal.h>
#include <string.h>
#include <time.h>

#if defined(__SANITIZE_THREAD__)
#define TSAN_BUILD 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define TSAN_BUILD 1
#endif
#endif

IOF_TEST_CHECK_FIXTURES(setup, teardown, 60)

#define NFIB 1000

static int64_t mono_ns(void) {
  return (int64_t)iof_test_now_ns();
}

/* abstime `ms` from now on `clock`. */
static struct timespec abs_in(clockid_t clock, long ms) {
  struct timespec ts;
  clock_gettime(clock, &ts);
  ts.tv_sec += ms / 1000;
  ts.tv_nsec += (ms % 1000) * 1000000L;
  if (ts.tv_nsec >= 1000000000L) {
    ts.tv_sec++;
    ts.tv_nsec -= 1000000000L;
  }
  return ts;
}

/* Starts n fiber threads running fn(arg) and joins them all. */
static void run_threads(int n, void *(*fn)(void *), void *arg) {
  pthread_t *t = calloc((size_t)n, sizeof *t);
  CHECK(t != NULL);
  if (!t) return;
  for (int i = 0; i < n; i++)
    CHECK(iof_compat_pthread_create(&t[i], NULL, fn, arg) == 0);
  for (int i = 0; i < n; i++) CHECK(iof_compat_pthread_join(t[i], NULL) == 0);
  free(t);
}

/* ---- mutex ------------------------------------------------------------ */

static pthread_mutex_t mx = PTHREAD_MUTEX_INITIALIZER;
static long counter;
static atomic_int inside;

static void *mutex_worker(void *arg) {
  int rounds = (int)(intptr_t)arg;
  for (int i = 0; i < rounds; i++) {
    CHECK(iof_compat_pthread_mutex_lock(&mx) == 0);
    CHECK(atomic_fetch_add(&inside, 1) == 0);
    long c = counter;
    if (i % 3 == 0) iof_yield(); /* suspend while holding it */
    counter = c + 1;
    atomic_fetch_sub(&inside, 1);
    CHECK(iof_compat_pthread_mutex_unlock(&mx) == 0);
  }
  return NULL;
}

static int mutex_fibers_main(void *arg) {
  (void)arg;
  run_threads(NFIB, mutex_worker, (void *)(intptr_t)5);
  return 0;
}

static void test_mutex_1000_fibers(void **state) {
  (void)state;
  counter = 0;
  assert_int_equal(iof_main(mutex_fibers_main, NULL), 0);
  assert_int_equal(counter, NFIB * 5);
  assert_int_equal(iof_compat_pthread_mutex_destroy(&mx), 0);
  assert_no_failures();
}

static void *plain_mutex_worker(void *arg) {
  (void)arg;
  for (int i = 0; i < 2000; i++) {
    CHECK(iof_compat_pthread_mutex_lock(&mx) == 0);
    CHECK(atomic_fetch_add(&inside, 1) == 0);
    counter++;
    atomic_fetch_sub(&inside, 1);
    CHECK(iof_compat_pthread_mutex_unlock(&mx) == 0);
  }
  return NULL;
}

static int mixed_main(void *arg) {
  pthread_t *plain = arg; /* real threads, started before */
  run_threads(200, mutex_worker, (void *)(intptr_t)10);
  for (int i = 0; i < 3; i++) CHECK(pthread_join(plain[i], NULL) == 0);
  return 0;
}

/* IOF_TEST_THREADED: real threads and fiber threads share one mutex. */
static void test_mutex_mixed_threads(void **state) {
  (void)state;
  counter = 0;
  pthread_t plain[3];
  /* Outside a fiber the shim is the real pthread_create. */
  for (int i = 0; i < 3; i++)
    assert_int_equal(
        iof_compat_pthread_create(&plain[i], NULL, plain_mutex_worker, NULL),
        0);
  for (int i = 0; i < 3; i++) assert_int_equal((uintptr_t)plain[i] & 1, 0);
  assert_int_equal(iof_main(mixed_main, plain), 0);
  assert_int_equal(counter, 3 * 2000 + 200 * 10);
  assert_no_failures();
}

static pthread_mutex_t rec = PTHREAD_RECURSIVE_MUTEX_INITIALIZER_NP;
static pthread_mutex_t chk = PTHREAD_ERRORCHECK_MUTEX_INITIALIZER_NP;

static void *unlock_other(void *arg) {
  pthread_mutex_t *m = arg;
  CHECK(iof_compat_pthread_mutex_unlock(m) == EPERM);
  CHECK(iof_compat_pthread_mutex_trylock(m) == EBUSY);
  struct timespec bad = {0, 2000000000L};
  CHECK(iof_compat_pthread_mutex_timedlock(m, &bad) == EINVAL);
  struct timespec ts = abs_in(CLOCK_REALTIME, 30);
  int64_t t0 = mono_ns();
  CHECK(iof_compat_pthread_mutex_timedlock(m, &ts) == ETIMEDOUT);
  CHECK(mono_ns() - t0 >= 25 * 1000000LL);
  return NULL;
}

static int mutex_errors_main(void *arg) {
  (void)arg;
  pthread_t t;
  /* errorcheck (static initializer) */
  CHECK(iof_compat_pthread_mutex_lock(&chk) == 0);
  CHECK(iof_compat_pthread_mutex_lock(&chk) == EDEADLK);
  CHECK(iof_compat_pthread_mutex_trylock(&chk) == EBUSY);
  CHECK(iof_compat_pthread_create(&t, NULL, unlock_other, &chk) == 0);
  CHECK(iof_compat_pthread_join(t, NULL) == 0);
  CHECK(iof_compat_pthread_mutex_destroy(&chk) == EBUSY);
  CHECK(iof_compat_pthread_mutex_unlock(&chk) == 0);
  CHECK(iof_compat_pthread_mutex_unlock(&chk) == EPERM);
  /* recursive (static initializer) */
  CHECK(iof_compat_pthread_mutex_lock(&rec) == 0);
  CHECK(iof_compat_pthread_mutex_lock(&rec) == 0);
  CHECK(iof_compat_pthread_mutex_trylock(&rec) == 0);
  CHECK(iof_compat_pthread_create(&t, NULL, unlock_other, &rec) == 0);
  CHECK(iof_compat_pthread_join(t, NULL) == 0);
  for (int i = 0; i < 3; i++) CHECK(iof_compat_pthread_mutex_unlock(&rec) == 0);
  CHECK(iof_compat_pthread_mutex_unlock(&rec) == EPERM);
  CHECK(iof_compat_pthread_mutex_trylock(&rec) == 0);
  CHECK(iof_compat_pthread_mutex_unlock(&rec) == 0);
  /* types from an attr */
  pthread_mutexattr_t a;
  pthread_mutexattr_init(&a);
  pthread_mutexattr_settype(&a, PTHREAD_MUTEX_ERRORCHECK);
  pthread_mutex_t m;
  CHECK(iof_compat_pthread_mutex_init(&m, &a) == 0);
  CHECK(iof_compat_pthread_mutex_lock(&m) == 0);
  CHECK(iof_compat_pthread_mutex_lock(&m) == EDEADLK);
  CHECK(iof_compat_pthread_mutex_unlock(&m) == 0);
  /* process-shared: glibc's own mutex, which errorcheck keeps */
  pthread_mutexattr_setpshared(&a, PTHREAD_PROCESS_SHARED);
  CHECK(iof_compat_pthread_mutex_init(&m, &a) == 0);
  CHECK(iof_compat_pthread_mutex_lock(&m) == 0);
  CHECK(iof_compat_pthread_mutex_trylock(&m) == EBUSY);
  CHECK(iof_compat_pthread_mutex_unlock(&m) == 0);
#ifndef TSAN_BUILD /* TSan reports glibc's unlock of an unlocked mutex */
  CHECK(iof_compat_pthread_mutex_unlock(&m) == EPERM);
#endif
  CHECK(iof_compat_pthread_mutex_destroy(&m) == 0);
  pthread_mutexattr_destroy(&a);
  /* normal: a relock reports EDEADLK rather than hanging */
  CHECK(iof_compat_pthread_mutex_init(&m, NULL) == 0);
  CHECK(iof_compat_pthread_mutex_lock(&m) == 0);
  CHECK(iof_compat_pthread_mutex_lock(&m) == EDEADLK);
  CHECK(iof_compat_pthread_mutex_trylock(&m) == EBUSY);
  CHECK(iof_compat_pthread_mutex_unlock(&m) == 0);
  struct timespec bad = {0, 2000000000L};
  CHECK(iof_compat_pthread_mutex_timedlock(&m, &bad) == 0); /* free: taken */
  CHECK(iof_compat_pthread_mutex_unlock(&m) == 0);
  /* A clock no clocked wait may use: EINVAL even on a free mutex, as
   * glibc says before it looks at the mutex. */
  struct timespec soon = {0, 0};
  CHECK(iof_compat_pthread_mutex_clocklock(&m, CLOCK_PROCESS_CPUTIME_ID,
                                           &soon) == EINVAL);
  CHECK(iof_compat_pthread_mutex_clocklock(&m, CLOCK_MONOTONIC, &soon) == 0);
  CHECK(iof_compat_pthread_mutex_unlock(&m) == 0);
  CHECK(iof_compat_pthread_mutex_destroy(&m) == 0);
  return 0;
}

static void test_mutex_errors(void **state) {
  (void)state;
  assert_int_equal(iof_main(mutex_errors_main, NULL), 0);
  assert_no_failures();
}

/* Timed lock from a plain thread while a fiber holds the mutex. */
static atomic_int held;
static void *timed_plain(void *arg) {
  pthread_mutex_t *m = arg;
  while (!atomic_load(&held)) sched_yield();
  struct timespec ts = abs_in(CLOCK_REALTIME, 40);
  int64_t t0 = mono_ns();
  CHECK(iof_compat_pthread_mutex_timedlock(m, &ts) == ETIMEDOUT);
  CHECK(mono_ns() - t0 >= 35 * 1000000LL);
  CHECK(iof_compat_pthread_mutex_lock(m) == 0); /* handed over on unlock */
  CHECK(iof_compat_pthread_mutex_unlock(m) == 0);
  return NULL;
}

static int hold_main(void *arg) {
  pthread_mutex_t *m = arg;
  CHECK(iof_compat_pthread_mutex_lock(m) == 0);
  atomic_store(&held, 1);
  usleep(150 * 1000); /* blocks this OS thread: the waiter is elsewhere */
  CHECK(iof_compat_pthread_mutex_unlock(m) == 0);
  return 0;
}

static void test_mutex_timed_thread(void **state) {
  (void)state;
  static pthread_mutex_t m = PTHREAD_MUTEX_INITIALIZER;
  atomic_store(&held, 0);
  pthread_t t;
  assert_int_equal(pthread_create(&t, NULL, timed_plain, &m), 0);
  assert_int_equal(iof_main(hold_main, &m), 0);
  assert_int_equal(pthread_join(t, NULL), 0);
  assert_no_failures();
}

/* A plain thread using the locks gets no fiber state (the runtime's
 * per-thread setup includes an alternate signal stack: a program that
 * only locks mutexes under the preload hook must not get one). */
static void *plain_locker(void *arg) {
  (void)arg;
  stack_t before; /* ASan gives threads one of its own: compare */
  CHECK(sigaltstack(NULL, &before) == 0);
  pthread_mutex_t m = PTHREAD_ERRORCHECK_MUTEX_INITIALIZER_NP;
  pthread_cond_t c = PTHREAD_COND_INITIALIZER;
  CHECK(iof_compat_pthread_mutex_lock(&m) == 0);
  CHECK(iof_compat_pthread_mutex_lock(&m) == EDEADLK);
  struct timespec ts = abs_in(CLOCK_REALTIME, 5);
  CHECK(iof_compat_pthread_cond_timedwait(&c, &m, &ts) == ETIMEDOUT);
  CHECK(iof_compat_pthread_mutex_unlock(&m) == 0);
  pthread_key_t k;
  CHECK(iof_compat_pthread_key_create(&k, NULL) == 0);
  CHECK(iof_compat_pthread_getspecific(k) == NULL);
  CHECK(iof_compat_pthread_key_delete(k) == 0);
  CHECK(((uintptr_t)iof_compat_pthread_self() & 1) == 0);
  stack_t cur;
  CHECK(sigaltstack(NULL, &cur) == 0);
  CHECK(cur.ss_flags == before.ss_flags && cur.ss_sp == before.ss_sp);
  return NULL;
}

static void test_plain_thread_stays_plain(void **state) {
  (void)state;
  pthread_t t;
  assert_int_equal(pthread_create(&t, NULL, plain_locker, NULL), 0);
  assert_int_equal(pthread_join(t, NULL), 0);
  assert_no_failures();
}

/* ---- condition variables ---------------------------------------------- */

static pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
static int ready, woken;

static void *cond_waiter(void *arg) {
  (void)arg;
  CHECK(iof_compat_pthread_mutex_lock(&mx) == 0);
  ready++;
  while (!woken) CHECK(iof_compat_pthread_cond_wait(&cv, &mx) == 0);
  woken++;
  CHECK(iof_compat_pthread_mutex_unlock(&mx) == 0);
  return NULL;
}

static int cond_broadcast_main(void *arg) {
  (void)arg;
  pthread_t *t = calloc(NFIB, sizeof *t);
  for (int i = 0; i < NFIB; i++)
    CHECK(iof_compat_pthread_create(&t[i], NULL, cond_waiter, NULL) == 0);
  for (;;) {
    iof_compat_pthread_mutex_lock(&mx);
    int r = ready;
    iof_compat_pthread_mutex_unlock(&mx);
    if (r == NFIB) break;
    iof_yield();
  }
  CHECK(iof_compat_pthread_mutex_lock(&mx) == 0);
  woken = 1;
  CHECK(iof_compat_pthread_cond_broadcast(&cv) == 0);
  CHECK(iof_compat_pthread_mutex_unlock(&mx) == 0);
  for (int i = 0; i < NFIB; i++)
    CHECK(iof_compat_pthread_join(t[i], NULL) == 0);
  free(t);
  return woken;
}

static void test_cond_broadcast_1000(void **state) {
  (void)state;
  ready = woken = 0;
  assert_int_equal(iof_main(cond_broadcast_main, NULL), NFIB + 1);
  assert_int_equal(iof_compat_pthread_cond_destroy(&cv), 0);
  assert_no_failures();
}

/* Producer/consumer with signal, a fiber one side and a real thread the
 * other, both ways. */
static int queue_n, produced, consumed;
#define ITEMS 2000

static void *consumer(void *arg) {
  (void)arg;
  for (int i = 0; i < ITEMS; i++) {
    iof_compat_pthread_mutex_lock(&mx);
    while (queue_n == 0) CHECK(iof_compat_pthread_cond_wait(&cv, &mx) == 0);
    queue_n--;
    consumed++;
    iof_compat_pthread_cond_signal(&cv);
    iof_compat_pthread_mutex_unlock(&mx);
  }
  return NULL;
}

static void *producer(void *arg) {
  (void)arg;
  for (int i = 0; i < ITEMS; i++) {
    iof_compat_pthread_mutex_lock(&mx);
    while (queue_n == 4) CHECK(iof_compat_pthread_cond_wait(&cv, &mx) == 0);
    queue_n++;
    produced++;
    iof_compat_pthread_cond_signal(&cv);
    iof_compat_pthread_mutex_unlock(&mx);
  }
  return NULL;
}

static int pc_main(void *arg) {
  void *(*fiber_side)(void *) = arg;
  fiber_side(NULL);
  return 0;
}

static void test_cond_fiber_and_thread(void **state) {
  (void)state;
  for (int way = 0; way < 2; way++) {
    queue_n = produced = consumed = 0;
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, way ? producer : consumer, NULL),
                     0);
    assert_int_equal(
        iof_main(pc_main, way ? (void *)consumer : (void *)producer), 0);
    assert_int_equal(pthread_join(t, NULL), 0);
    assert_int_equal(produced, ITEMS);
    assert_int_equal(consumed, ITEMS);
  }
  assert_no_failures();
}

/* Timed waits on the default clock and on a CLOCK_MONOTONIC condattr,
 * in a fiber (ctx != NULL) and on a plain thread. */
static void timedwait_both_clocks(void) {
  pthread_condattr_t ca;
  pthread_condattr_init(&ca);
  pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
  pthread_cond_t mono, real;
  CHECK(iof_compat_pthread_cond_init(&mono, &ca) == 0);
  CHECK(iof_compat_pthread_cond_init(&real, NULL) == 0);
  pthread_condattr_destroy(&ca);
  pthread_mutex_t m = PTHREAD_MUTEX_INITIALIZER;
  CHECK(iof_compat_pthread_mutex_lock(&m) == 0);
  struct timespec ts = abs_in(CLOCK_MONOTONIC, 40);
  int64_t t0 = mono_ns();
  CHECK(iof_compat_pthread_cond_timedwait(&mono, &m, &ts) == ETIMEDOUT);
  int64_t el = mono_ns() - t0;
  CHECK(el >= 35 * 1000000LL && el < 2000 * 1000000LL);
  ts = abs_in(CLOCK_REALTIME, 40);
  t0 = mono_ns();
  CHECK(iof_compat_pthread_cond_timedwait(&real, &m, &ts) == ETIMEDOUT);
  el = mono_ns() - t0;
  CHECK(el >= 35 * 1000000LL && el < 2000 * 1000000LL);
  /* still held after a timeout */
  CHECK(iof_compat_pthread_mutex_trylock(&m) == EDEADLK ||
        iof_compat_pthread_mutex_unlock(&m) == 0);
  CHECK(iof_compat_pthread_mutex_trylock(&m) == 0);
  CHECK(iof_compat_pthread_mutex_unlock(&m) == 0);
  /* cond_wait without the mutex */
  CHECK(iof_compat_pthread_cond_wait(&real, &m) == EPERM);
  struct timespec bad = {0, -1};
  CHECK(iof_compat_pthread_mutex_lock(&m) == 0);
  CHECK(iof_compat_pthread_cond_timedwait(&real, &m, &bad) == EINVAL);
  CHECK(iof_compat_pthread_mutex_unlock(&m) == 0);
}

static int timedwait_main(void *arg) {
  (void)arg;
  timedwait_both_clocks();
  return 0;
}

static void test_cond_timedwait_clocks(void **state) {
  (void)state;
  assert_int_equal(iof_main(timedwait_main, NULL), 0);
  timedwait_both_clocks(); /* plain thread */
  assert_no_failures();
}

/* ---- rwlock ----------------------------------------------------------- */

static pthread_rwlock_t rw = PTHREAD_RWLOCK_INITIALIZER;
static atomic_int readers_in, max_readers, writers_in;
static long rw_value;

static void *rw_worker(void *arg) {
  int id = (int)(intptr_t)arg;
  for (int i = 0; i < 5; i++) {
    if ((id + i) % 5 == 0) {
      CHECK(iof_compat_pthread_rwlock_wrlock(&rw) == 0);
      CHECK(atomic_fetch_add(&writers_in, 1) == 0);
      CHECK(atomic_load(&readers_in) == 0);
      long v = rw_value;
      iof_yield();
      rw_value = v + 1;
      atomic_fetch_sub(&writers_in, 1);
    } else {
      CHECK(iof_compat_pthread_rwlock_rdlock(&rw) == 0);
      int n = atomic_fetch_add(&readers_in, 1) + 1;
      CHECK(atomic_load(&writers_in) == 0);
      int m = atomic_load(&max_readers);
      while (n > m && !atomic_compare_exchange_weak(&max_readers, &m, n))
        ;
      iof_yield();
      atomic_fetch_sub(&readers_in, 1);
    }
    CHECK(iof_compat_pthread_rwlock_unlock(&rw) == 0);
  }
  return NULL;
}

static int rw_main(void *arg) {
  (void)arg;
  pthread_t *t = calloc(NFIB, sizeof *t);
  for (int i = 0; i < NFIB; i++)
    CHECK(iof_compat_pthread_create(&t[i], NULL, rw_worker,
                                    (void *)(intptr_t)i) == 0);
  for (int i = 0; i < NFIB; i++)
    CHECK(iof_compat_pthread_join(t[i], NULL) == 0);
  free(t);
  /* error codes */
  CHECK(iof_compat_pthread_rwlock_rdlock(&rw) == 0);
  CHECK(iof_compat_pthread_rwlock_rdlock(&rw) == 0); /* readers re-enter */
  CHECK(iof_compat_pthread_rwlock_trywrlock(&rw) == EBUSY);
  struct timespec ts = abs_in(CLOCK_REALTIME, 30);
  CHECK(iof_compat_pthread_rwlock_timedwrlock(&rw, &ts) == ETIMEDOUT);
  ts = abs_in(CLOCK_MONOTONIC, 30);
  CHECK(iof_compat_pthread_rwlock_clockwrlock(&rw, CLOCK_MONOTONIC, &ts) ==
        ETIMEDOUT);
  CHECK(iof_compat_pthread_rwlock_clockwrlock(&rw, CLOCK_PROCESS_CPUTIME_ID,
                                              &ts) == EINVAL);
  CHECK(iof_compat_pthread_rwlock_clockrdlock(&rw, CLOCK_MONOTONIC, &ts) ==
        0); /* readers re-enter */
  CHECK(iof_compat_pthread_rwlock_unlock(&rw) == 0);
  CHECK(iof_compat_pthread_rwlock_unlock(&rw) == 0);
  CHECK(iof_compat_pthread_rwlock_unlock(&rw) == 0);
  CHECK(iof_compat_pthread_rwlock_unlock(&rw) == EPERM);
  CHECK(iof_compat_pthread_rwlock_wrlock(&rw) == 0);
  CHECK(iof_compat_pthread_rwlock_wrlock(&rw) == EDEADLK);
  CHECK(iof_compat_pthread_rwlock_rdlock(&rw) == EDEADLK);
  ts = abs_in(CLOCK_REALTIME, 30);
  CHECK(iof_compat_pthread_rwlock_clockrdlock(&rw, CLOCK_REALTIME, &ts) ==
        EDEADLK);
  CHECK(iof_compat_pthread_rwlock_destroy(&rw) == EBUSY);
  CHECK(iof_compat_pthread_rwlock_unlock(&rw) == 0);
  /* free, and a clock no clocked wait may use: EINVAL (glibc's check) */
  CHECK(iof_compat_pthread_rwlock_clockrdlock(&rw, CLOCK_PROCESS_CPUTIME_ID,
                                              &ts) == EINVAL);
  CHECK(iof_compat_pthread_rwlock_clockwrlock(&rw, CLOCK_PROCESS_CPUTIME_ID,
                                              &ts) == EINVAL);
  CHECK(iof_compat_pthread_rwlock_destroy(&rw) == 0);
  return 0;
}

static void test_rwlock(void **state) {
  (void)state;
  assert_int_equal(iof_main(rw_main, NULL), 0);
  assert_int_equal(rw_value, NFIB); /* one write per worker */
  assert_true(atomic_load(&max_readers) > 1);
  assert_no_failures();
}

/* ---- once ------------------------------------------------------------- */

static pthread_once_t once = PTHREAD_ONCE_INIT;
static atomic_int once_runs, once_done;

static void once_init(void) {
  atomic_fetch_add(&once_runs, 1);
  for (int i = 0; i < 5; i++) iof_yield(); /* others arrive meanwhile */
  atomic_store(&once_done, 1);
}

static void *once_caller(void *arg) {
  (void)arg;
  CHECK(iof_compat_pthread_once(&once, once_init) == 0);
  CHECK(atomic_load(&once_done) == 1);
  return NULL;
}

static int once_main(void *arg) {
  (void)arg;
  run_threads(NFIB, once_caller, NULL);
  return 0;
}

static void test_once_1000(void **state) {
  (void)state;
  assert_int_equal(iof_main(once_main, NULL), 0);
  assert_int_equal(atomic_load(&once_runs), 1);
  assert_int_equal(iof_compat_pthread_once(&once, once_init), 0);
  assert_int_equal(atomic_load(&once_runs), 1);
  assert_no_failures();
}

/* ---- keys ------------------------------------------------------------- */

static pthread_key_t key;
static atomic_long dtor_sum;
static atomic_int dtor_calls;

static void key_dtor(void *v) {
  atomic_fetch_add(&dtor_sum, (long)(intptr_t)v);
  atomic_fetch_add(&dtor_calls, 1);
}

static void *key_worker(void *arg) {
  intptr_t id = (intptr_t)arg;
  CHECK(iof_compat_pthread_getspecific(key) == NULL);
  CHECK(iof_compat_pthread_setspecific(key, (void *)(id + 1)) == 0);
  iof_yield(); /* others set theirs meanwhile */
  CHECK(iof_compat_pthread_getspecific(key) == (void *)(id + 1));
  if (id % 2) iof_compat_pthread_exit(NULL); /* destructors run too */
  return NULL;
}

static int key_main(void *arg) {
  (void)arg;
  CHECK(iof_compat_pthread_key_create(&key, key_dtor) == 0);
  pthread_t *t = calloc(NFIB, sizeof *t);
  for (intptr_t i = 0; i < NFIB; i++)
    CHECK(iof_compat_pthread_create(&t[i], NULL, key_worker, (void *)i) == 0);
  for (int i = 0; i < NFIB; i++)
    CHECK(iof_compat_pthread_join(t[i], NULL) == 0);
  free(t);
  /* Destructors ran before each join returned. */
  CHECK(atomic_load(&dtor_calls) == NFIB);
  CHECK(iof_compat_pthread_key_delete(key) == 0);
  CHECK(iof_compat_pthread_key_delete(key) == EINVAL);
  CHECK(iof_compat_pthread_setspecific(key, (void *)1) == EINVAL);
  /* More keys than the old 128 limit, values on the highest. */
  static pthread_key_t many[300];
  for (int i = 0; i < 300; i++)
    CHECK(iof_compat_pthread_key_create(&many[i], NULL) == 0);
  CHECK(iof_compat_pthread_setspecific(many[299], (void *)7) == 0);
  CHECK(iof_compat_pthread_getspecific(many[299]) == (void *)7);
  CHECK(iof_compat_pthread_setspecific(many[299], NULL) == 0);
  for (int i = 0; i < 300; i++)
    CHECK(iof_compat_pthread_key_delete(many[i]) == 0);
  return 0;
}

static void test_keys(void **state) {
  (void)state;
  atomic_store(&dtor_sum, 0);
  atomic_store(&dtor_calls, 0);
  assert_int_equal(iof_main(key_main, NULL), 0);
  assert_int_equal(atomic_load(&dtor_sum), (long)NFIB * (NFIB + 1) / 2);
  assert_no_failures();
}

/* rwlock, once and keys shared by real threads and fiber threads at once
 * (IOF_TEST_THREADED). */
static pthread_rwlock_t mrw = PTHREAD_RWLOCK_INITIALIZER;
static pthread_once_t monce = PTHREAD_ONCE_INIT;
static atomic_int monce_runs, mwriters, mreaders;
static long mvalue;
static pthread_key_t mkey;
static atomic_int mkey_dtors;

static void monce_init(void) {
  atomic_fetch_add(&monce_runs, 1);
  usleep(20 * 1000); /* others (fibers and threads) pile up meanwhile */
}

static void mkey_dtor(void *v) {
  (void)v;
  atomic_fetch_add(&mkey_dtors, 1);
}

static void *mixed_worker(void *arg) {
  intptr_t id = (intptr_t)arg;
  CHECK(iof_compat_pthread_once(&monce, monce_init) == 0);
  CHECK(atomic_load(&monce_runs) == 1);
  CHECK(iof_compat_pthread_setspecific(mkey, (void *)(id + 1)) == 0);
  for (int i = 0; i < 200; i++) {
    if (i % 4 == 0) {
      CHECK(iof_compat_pthread_rwlock_wrlock(&mrw) == 0);
      CHECK(atomic_fetch_add(&mwriters, 1) == 0);
      CHECK(atomic_load(&mreaders) == 0);
      mvalue++;
      atomic_fetch_sub(&mwriters, 1);
    } else {
      CHECK(iof_compat_pthread_rwlock_rdlock(&mrw) == 0);
      atomic_fetch_add(&mreaders, 1);
      CHECK(atomic_load(&mwriters) == 0);
      atomic_fetch_sub(&mreaders, 1);
    }
    CHECK(iof_compat_pthread_rwlock_unlock(&mrw) == 0);
    if (iof_compat_pthread_self() & 1) iof_yield();
    CHECK(iof_compat_pthread_getspecific(mkey) == (void *)(id + 1));
  }
  return NULL;
}

static int mixed_sync_main(void *arg) {
  pthread_t *plain = arg;
  pthread_t t[100];
  for (intptr_t i = 0; i < 100; i++)
    CHECK(iof_compat_pthread_create(&t[i], NULL, mixed_worker,
                                    (void *)(i + 10)) == 0);
  for (int i = 0; i < 100; i++) CHECK(iof_compat_pthread_join(t[i], NULL) == 0);
  for (int i = 0; i < 3; i++) CHECK(pthread_join(plain[i], NULL) == 0);
  return 0;
}

static void test_rwlock_once_keys_mixed(void **state) {
  (void)state;
  assert_int_equal(iof_compat_pthread_key_create(&mkey, mkey_dtor), 0);
  pthread_t plain[3];
  for (intptr_t i = 0; i < 3; i++)
    assert_int_equal(pthread_create(&plain[i], NULL, mixed_worker, (void *)i),
                     0);
  assert_int_equal(iof_main(mixed_sync_main, plain), 0);
  assert_int_equal(atomic_load(&monce_runs), 1);
  assert_int_equal(mvalue, 103 * 50);
  /* every fiber thread and every real thread ran its destructor */
  assert_int_equal(atomic_load(&mkey_dtors), 103);
  assert_int_equal(iof_compat_pthread_key_delete(mkey), 0);
  assert_no_failures();
}

/* ---- threads ---------------------------------------------------------- */

static void *ret_arg(void *arg) {
  return arg;
}

static volatile int exit_now = 1;
static int deep_exit(int depth, void *v) {
  if (depth == 0) {
    if (exit_now) iof_compat_pthread_exit(v);
    return 0;
  }
  return deep_exit(depth - 1, v) + 1;
}

static void *exits(void *arg) {
  return (void *)(intptr_t)deep_exit(10, arg); /* not reached */
}

static atomic_int detached_ran;
static void *detached_fn(void *arg) {
  (void)arg;
  iof_yield();
  pthread_t me = iof_compat_pthread_self();
  CHECK(((uintptr_t)me & 1) == 1);
  CHECK(iof_compat_pthread_detach(me) == EINVAL); /* detached already */
  atomic_fetch_add(&detached_ran, 1);
  return NULL;
}

static void *self_fn(void *arg) {
  pthread_t *out = arg;
  *out = iof_compat_pthread_self();
  pthread_t me = *out;
  CHECK(iof_compat_pthread_join(me, NULL) == EDEADLK);
  /* calls glibc would crash on with a fiber id */
  char name[16] = "x";
  CHECK(iof_compat_pthread_setname_np(me, "conn-42") == 0);
  CHECK(iof_compat_pthread_getname_np(me, name, sizeof name) == 0);
  CHECK(strcmp(name, "conn-42") == 0);
  CHECK(iof_compat_pthread_setname_np(me, "a-name-too-long-x") == ERANGE);
  CHECK(iof_compat_pthread_kill(me, 0) == 0);
  /* held: cancel disabled (this thread goes on) */
  int old = -1;
  CHECK(iof_compat_pthread_setcancelstate(PTHREAD_CANCEL_DISABLE, &old) == 0);
  CHECK(old == PTHREAD_CANCEL_ENABLE);
  CHECK(iof_compat_pthread_cancel(me) == 0);
  pthread_attr_t a;
  size_t sz = 0;
  int det = -1;
  CHECK(iof_compat_pthread_getattr_np(me, &a) == 0);
  pthread_attr_getstacksize(&a, &sz);
  pthread_attr_getdetachstate(&a, &det);
  CHECK(sz == IOF_FIBER_STACK_DEFAULT && det == PTHREAD_CREATE_JOINABLE);
  pthread_attr_destroy(&a);
  return NULL;
}

static void *big_stack(void *arg) {
  (void)arg;
  volatile char buf[400 * 1024]; /* far more than the 64 KiB default */
  for (size_t i = 0; i < sizeof buf; i += 4096) buf[i] = (char)i;
  return (void *)(uintptr_t)buf[4096];
}

static void *own_stack(void *arg) {
  (void)arg;
  pthread_attr_t a;
  size_t sz = 0;
  if (iof_compat_pthread_getattr_np(iof_compat_pthread_self(), &a) != 0)
    return NULL;
  pthread_attr_getstacksize(&a, &sz);
  pthread_attr_destroy(&a);
  return (void *)(uintptr_t)sz;
}

/* A size the attr was given is honoured even when it equals glibc's
 * default (OpenLDAP sets 8 MiB); an attr with no size gives the fiber
 * default; a size no stack can have fails as mmap would. */
static int stack_sizes_main(void *arg) {
  (void)arg;
  pthread_attr_t a;
  pthread_t t;
  void *r = NULL;
  size_t dflt = 0;
  pthread_attr_init(&a);
  pthread_attr_getstacksize(&a, &dflt);
  CHECK(iof_compat_pthread_create(&t, &a, own_stack, NULL) == 0);
  CHECK(iof_compat_pthread_join(t, &r) == 0);
  CHECK((size_t)(uintptr_t)r == IOF_FIBER_STACK_DEFAULT);
  CHECK(pthread_attr_setstacksize(&a, dflt) == 0);
  CHECK(iof_compat_pthread_create(&t, &a, own_stack, NULL) == 0);
  CHECK(iof_compat_pthread_join(t, &r) == 0);
  CHECK((size_t)(uintptr_t)r == dflt);
  CHECK(pthread_attr_setstacksize(&a, IOF_FIBER_STACK_MAX * 2) == 0);
  CHECK(iof_compat_pthread_create(&t, &a, own_stack, NULL) == EAGAIN);
  pthread_attr_destroy(&a);
  return 7;
}

static void test_stack_sizes(void **state) {
  (void)state;
  assert_int_equal(iof_main(stack_sizes_main, NULL), 7);
  assert_no_failures();
}

static void *named_fn(void *arg) {
  (void)arg;
  char nm[16] = "";
  iof_compat_pthread_getname_np(iof_compat_pthread_self(), nm, sizeof nm);
  return (void *)(uintptr_t)(strcmp(nm, "worker-1") == 0);
}

static int threads_main(void *arg) {
  (void)arg;
  pthread_t t, t2;
  void *r = NULL;
  CHECK(iof_compat_pthread_create(&t, NULL, ret_arg, (void *)0x1234) == 0);
  CHECK(iof_compat_pthread_join(t, &r) == 0 && r == (void *)0x1234);
  CHECK(iof_compat_pthread_create(&t, NULL, exits, (void *)0x55) == 0);
  CHECK(iof_compat_pthread_join(t, &r) == 0 && r == (void *)0x55);
  /* detached through the attr and with pthread_detach */
  pthread_attr_t a;
  pthread_attr_init(&a);
  pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
  CHECK(iof_compat_pthread_create(&t, &a, detached_fn, NULL) == 0);
  CHECK(iof_compat_pthread_join(t, NULL) == EINVAL);
  pthread_attr_destroy(&a);
  CHECK(iof_compat_pthread_create(&t, NULL, ret_arg, NULL) == 0);
  CHECK(iof_compat_pthread_detach(t) == 0);
  /* self, equal, join of itself */
  CHECK(iof_compat_pthread_create(&t, NULL, self_fn, &t2) == 0);
  CHECK(iof_compat_pthread_join(t, NULL) == 0);
  CHECK(iof_compat_pthread_equal(t, t2));
  CHECK(!iof_compat_pthread_equal(t, iof_compat_pthread_self()));
  /* named before it ever ran (the usual idiom right after create) */
  CHECK(iof_compat_pthread_create(&t, NULL, named_fn, NULL) == 0);
  CHECK(iof_compat_pthread_setname_np(t, "worker-0") == 0);
  CHECK(iof_compat_pthread_setname_np(t, "worker-1") == 0);
  char nm[16] = "";
  CHECK(iof_compat_pthread_getname_np(t, nm, sizeof nm) == 0);
  CHECK(strcmp(nm, "worker-1") == 0);
  CHECK(iof_compat_pthread_join(t, &r) == 0 && r == (void *)1);
  /* stack size from the attr */
  pthread_attr_init(&a);
  pthread_attr_setstacksize(&a, 1024 * 1024);
  CHECK(iof_compat_pthread_create(&t, &a, big_stack, NULL) == 0);
  CHECK(iof_compat_pthread_join(t, &r) == 0 && r == (void *)(uintptr_t)0);
  pthread_attr_destroy(&a);
  while (atomic_load(&detached_ran) < 1) iof_yield();
  return 42;
}

static void test_threads(void **state) {
  (void)state;
  atomic_store(&detached_ran, 0);
  assert_int_equal(iof_main(threads_main, NULL), 42);
  assert_no_failures();
}

/* 10,000 short threads nobody joins or detaches: their stacks all go back
 * to the pool (only the join records stay, as a real thread's would). */
static void *short_fn(void *arg) {
  atomic_fetch_add((atomic_int *)arg, 1);
  return NULL;
}

static int unjoined_main(void *arg) {
  iof_stack_pool *pool = (iof_stack_pool *)iof_default_frame_allocator();
  struct iof_stack_pool_stats s0, s1;
  iof_stack_pool_stats(pool, &s0);
  atomic_int ran = 0;
  pthread_t *ids = calloc(10000, sizeof *ids);
  for (int i = 0; i < 10000; i++) {
    CHECK(iof_compat_pthread_create(&ids[i], NULL, short_fn, &ran) == 0);
    if (i % 100 == 99) iof_yield(); /* let them run and end */
  }
  while (atomic_load(&ran) < 10000) iof_yield();
  iof_yield();
  iof_stack_pool_stats(pool, &s1);
  size_t *peak = arg;
  *peak = s1.peak;
  CHECK(s1.live == s0.live);
  CHECK(s1.cached <= s0.cached + 300);
  /* What stayed is the join records: joining them now frees them (and
   * keeps the leak checker quiet). */
  for (int i = 0; i < 10000; i++) {
    void *r = (void *)1;
    CHECK(iof_compat_pthread_join(ids[i], &r) == 0 && r == NULL);
  }
  free(ids);
  return 0;
}

static void test_unjoined_threads_free_stacks(void **state) {
  (void)state;
  size_t peak = 0;
  assert_int_equal(iof_main(unjoined_main, &peak), 0);
  assert_true(peak < 10000); /* never all alive at once */
  assert_no_failures();
}

/* pthread_exit in main: the program lives on until the last thread. */
static atomic_int late_done;
static void *late(void *arg) {
  (void)arg;
  for (int i = 0; i < 50; i++) iof_yield();
  atomic_store(&late_done, 1);
  return NULL;
}

static int exit_main(void *arg) {
  (void)arg;
  pthread_t t;
  pthread_attr_t a;
  pthread_attr_init(&a);
  pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
  CHECK(iof_compat_pthread_create(&t, &a, late, NULL) == 0);
  pthread_attr_destroy(&a);
  iof_compat_pthread_exit(NULL);
}

static void test_main_pthread_exit(void **state) {
  (void)state;
  atomic_store(&late_done, 0);
  assert_int_equal(iof_main(exit_main, NULL), 0);
  assert_int_equal(atomic_load(&late_done), 1);
  assert_no_failures();
}

/* pthread_exit in a fiber that pthread_create did not start (a launched
 * chain, a raw fiber): it ends there as if its function returned 0, with
 * its fiber-local destructors run and on_done called; nothing after the
 * call runs, and the io_context's run ends (its work was released). */
static atomic_int after_exit, fls_freed, chain_status = 99;

static void fls_dtor(void *v) {
  (void)v;
  atomic_fetch_add(&fls_freed, 1);
}

static void deep(int n) {
  if (n < 0) return;
  if (n == 0) iof_compat_pthread_exit(NULL);
  deep(n - 1);
  atomic_store(&after_exit, 1);
}

static int exiting_chain(void *arg) {
  iof_fls_key *key = arg;
  CHECK(iof_fls_set(*key, (void *)1) == 0);
  iof_yield();
  deep(20);
  atomic_store(&after_exit, 1);
  return 7;
}

static void on_chain_done(void *user, int status) {
  (void)user;
  atomic_store(&chain_status, status);
}

static int exiting_raw(void *arg) {
  (void)arg;
  iof_compat_pthread_exit(NULL);
  atomic_store(&after_exit, 1);
  return 5;
}

static void test_pthread_exit_in_plain_fiber(void **state) {
  (void)state;
  iof_fls_key key;
  assert_int_equal(iof_fls_key_create(&key, fls_dtor), 0);
  iof_io_context *io = iof_io_context_create();
  assert_non_null(io);
  iof_launch_opts o = {0};
  o.on_done = on_chain_done;
  for (int i = 0; i < 3; i++)
    assert_int_equal(
        iof_run_async(iof_io_context_executor(io), &o, exiting_chain, &key), 0);
  assert_true(iof_io_context_run(io) >= 0);
  assert_int_equal(iof_io_context_destroy(io), 0);
  assert_int_equal(atomic_load(&chain_status), 0);
  assert_int_equal(atomic_load(&fls_freed), 3);
  /* A raw fiber: resume returns when it exits. */
  iof_fiber *f = iof_fiber_create(NULL, 0, exiting_raw, NULL);
  assert_non_null(f);
  assert_int_equal(iof_fiber_resume(f), 0);
  assert_int_equal(iof_fiber_status(f), 0);
  assert_int_equal(iof_fiber_destroy(f), 0);
  assert_int_equal(atomic_load(&after_exit), 0);
  assert_int_equal(iof_fls_key_delete(key), 0);
  assert_no_failures();
}

/* Several io_contexts: new threads are spread over the OS threads. */
static _Atomic long tids[4];
static void *where(void *arg) {
  int i = (int)(intptr_t)arg;
  iof_yield();
  atomic_store(&tids[i], (long)syscall(SYS_gettid));
  return NULL;
}

static int spread_main(void *arg) {
  (void)arg;
  run_threads(4, where, NULL);
  pthread_t t[4];
  for (intptr_t i = 0; i < 4; i++)
    CHECK(iof_compat_pthread_create(&t[i], NULL, where, (void *)i) == 0);
  for (int i = 0; i < 4; i++) CHECK(iof_compat_pthread_join(t[i], NULL) == 0);
  return 7;
}

static void test_main_threads_option(void **state) {
  (void)state;
  iof_main_opts o = {0};
  o.threads = 2;
  assert_int_equal(iof_main_ex(spread_main, NULL, &o), 7);
  int distinct = 1;
  for (int i = 1; i < 4; i++)
    if (atomic_load(&tids[i]) != atomic_load(&tids[0])) distinct = 2;
  assert_int_equal(distinct, 2);
  assert_int_equal(iof_main(NULL, NULL), -EINVAL);
  assert_no_failures();
}

/* exit() inside the fiber main is a normal exit; returning from it ends
 * the program even while a detached thread still waits; IOF_THREADS. */
static sem_t never;
static void *blocked_forever(void *arg) {
  (void)arg;
  iof_compat_sem_wait(&never);
  return NULL;
}

#ifdef __SANITIZE_ADDRESS__
/* The leak check at exit would count the running program's live objects
 * (as it would for any exit from main with threads about): atexit
 * handlers run before it, so end there, with the same status. */
static void end_before_leak_check(void) {
  _exit(3);
}
#endif

static int exits_main(void *arg) {
  (void)arg;
#ifdef __SANITIZE_ADDRESS__
  atexit(end_before_leak_check);
#endif
  fflush(NULL);
  exit(3);
}

static int leaves_thread_main(void *arg) {
  (void)arg;
  iof_compat_sem_init(&never, 0, 0);
  pthread_t t;
  pthread_attr_t a;
  pthread_attr_init(&a);
  pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
  CHECK(iof_compat_pthread_create(&t, &a, blocked_forever, NULL) == 0);
  pthread_attr_destroy(&a);
  iof_yield();
  return 5;
}

static int env_threads_main(void *arg) {
  (void)arg;
  pthread_t t[4];
  for (intptr_t i = 0; i < 4; i++)
    CHECK(iof_compat_pthread_create(&t[i], NULL, where, (void *)i) == 0);
  for (int i = 0; i < 4; i++) CHECK(iof_compat_pthread_join(t[i], NULL) == 0);
  int distinct = 0;
  for (int i = 1; i < 4; i++)
    distinct |= atomic_load(&tids[i]) != atomic_load(&tids[0]);
  return distinct ? 9 : 8;
}

/* Runs a scenario under iof_main in a fresh process (this program run
 * again with --child NAME: a plain fork of a threaded process may not
 * start threads under TSan); its exit status, -1 if killed. */
static const struct {
  const char *name;
  iof_fn fn;
} scenarios[] = {{"exits", exits_main},
                 {"leaves_thread", leaves_thread_main},
                 {"env_threads", env_threads_main}};

static int child_main(const char *name) {
  for (size_t i = 0; i < sizeof scenarios / sizeof scenarios[0]; i++)
    if (!strcmp(scenarios[i].name, name)) {
      int r = iof_main(scenarios[i].fn, NULL);
      fflush(NULL);
      _exit(r < 0 ? 100 : r);
    }
  return 101;
}

static int child_status(const char *name, const char *threads_env) {
  pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) {
    if (threads_env) setenv("IOF_THREADS", threads_env, 1);
    execl("/proc/self/exe", "test_compat_thread", "--child", name,
          (char *)NULL);
    _exit(102);
  }
  int st = 0;
  assert_int_equal(waitpid(pid, &st, 0), pid);
  return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static void test_main_exit_paths(void **state) {
  (void)state;
  assert_int_equal(child_status("exits", NULL), 3);
  assert_int_equal(child_status("leaves_thread", NULL), 5);
  assert_int_equal(child_status("env_threads", "2"), 9);
  assert_int_equal(child_status("env_threads", "1"), 8);
  /* not a count: one io thread (strtoul read "-1" as 1,024 of them) */
  assert_int_equal(child_status("env_threads", "-1"), 8);
  assert_int_equal(child_status("env_threads", "2x"), 8);
}

/* ---- semaphores and barriers ------------------------------------------ */

static sem_t sem;
static void *sem_taker(void *arg) {
  (void)arg;
  CHECK(iof_compat_sem_wait(&sem) == 0);
  return NULL;
}

static int sem_main(void *arg) {
  (void)arg;
  CHECK(iof_compat_sem_init(&sem, 0, 0) == 0);
  pthread_t *t = calloc(NFIB, sizeof *t);
  for (int i = 0; i < NFIB; i++)
    CHECK(iof_compat_pthread_create(&t[i], NULL, sem_taker, NULL) == 0);
  iof_yield();
  for (int i = 0; i < NFIB; i++) CHECK(iof_compat_sem_post(&sem) == 0);
  for (int i = 0; i < NFIB; i++)
    CHECK(iof_compat_pthread_join(t[i], NULL) == 0);
  free(t);
  int v = -1;
  CHECK(iof_compat_sem_getvalue(&sem, &v) == 0 && v == 0);
  errno = 0;
  CHECK(iof_compat_sem_trywait(&sem) == -1 && errno == EAGAIN);
  struct timespec ts = abs_in(CLOCK_REALTIME, 30);
  int64_t t0 = mono_ns();
  CHECK(iof_compat_sem_timedwait(&sem, &ts) == -1 && errno == ETIMEDOUT);
  CHECK(mono_ns() - t0 >= 25 * 1000000LL);
  CHECK(iof_compat_sem_post(&sem) == 0);
  CHECK(iof_compat_sem_timedwait(&sem, &ts) == 0);
  CHECK(iof_compat_sem_destroy(&sem) == 0);
  sem_t s2;
  /* Process-shared: libc's semaphore, through the same calls. */
  CHECK(iof_compat_sem_init(&s2, 1, 0) == 0);
  CHECK(iof_compat_sem_post(&s2) == 0);
  CHECK(iof_compat_sem_getvalue(&s2, &v) == 0 && v == 1);
  CHECK(iof_compat_sem_trywait(&s2) == 0);
  CHECK(iof_compat_sem_trywait(&s2) == -1 && errno == EAGAIN);
  CHECK(iof_compat_sem_destroy(&s2) == 0);
  CHECK(iof_compat_sem_init(&s2, 0, (unsigned)SEM_VALUE_MAX + 1u) == -1 &&
        errno == EINVAL);
  return 0;
}

static void test_sem(void **state) {
  (void)state;
  assert_int_equal(iof_main(sem_main, NULL), 0);
  /* plain thread: timed wait and a post from a fiber to a thread */
  sem_t s;
  assert_int_equal(iof_compat_sem_init(&s, 0, 0), 0);
  struct timespec ts = abs_in(CLOCK_REALTIME, 20);
  assert_int_equal(iof_compat_sem_timedwait(&s, &ts), -1);
  assert_int_equal(errno, ETIMEDOUT);
  assert_no_failures();
}

/* A waiter whose timeout expired is still inside its call until its fiber
 * runs again, and it then takes its node out of the object's queue. A
 * destroy in between must wait for it (the program frees the object right
 * after): when destroy returns 0 the waiter has returned. Order, all on
 * one io thread: the waiter W waits until D; main sleeps until D - 5 ms; a
 * third thread holds the io thread past D, so both timers fire in one
 * round, main's first: main destroys while W's wait is over but W has not
 * run. */
enum { L_COND, L_MUTEX, L_RWLOCK, L_SEM, L_KINDS };

typedef struct leaver {
  int kind;
  pthread_mutex_t m;
  pthread_cond_t c;
  pthread_rwlock_t rw;
  sem_t s;
  struct timespec abs;
  atomic_int waiting, done;
  int rc;
} leaver;

static int64_t ts_ns(struct timespec ts) {
  return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static void *leaver_thread(void *arg) {
  leaver *l = arg;
  atomic_store(&l->waiting, 1);
  switch (l->kind) {
  case L_COND:
    CHECK(iof_compat_pthread_mutex_lock(&l->m) == 0);
    l->rc = iof_compat_pthread_cond_clockwait(&l->c, &l->m, CLOCK_MONOTONIC,
                                              &l->abs);
    CHECK(iof_compat_pthread_mutex_unlock(&l->m) == 0);
    break;
  case L_MUTEX:
    l->rc = iof_compat_pthread_mutex_clocklock(&l->m, CLOCK_MONOTONIC, &l->abs);
    break;
  case L_RWLOCK:
    l->rc =
        iof_compat_pthread_rwlock_clockwrlock(&l->rw, CLOCK_MONOTONIC, &l->abs);
    break;
  default:
    l->rc = iof_compat_sem_clockwait(&l->s, CLOCK_MONOTONIC, &l->abs) == 0
                ? 0
                : errno;
  }
  atomic_store(&l->done, 1);
  return NULL;
}

/* Lets main and W reach their waits, then holds the io thread past D. */
static void *hold_thread(void *arg) {
  leaver *l = arg;
  for (int i = 0; i < 5; i++) iof_yield();
  int64_t past = ts_ns(l->abs) + 10000000;
  while (mono_ns() < past) {
  }
  return NULL;
}

static int leaver_destroy(leaver *l) {
  switch (l->kind) {
  case L_COND:
    return iof_compat_pthread_cond_destroy(&l->c);
  case L_MUTEX:
    return iof_compat_pthread_mutex_destroy(&l->m);
  case L_RWLOCK:
    return iof_compat_pthread_rwlock_destroy(&l->rw);
  default:
    return iof_compat_sem_destroy(&l->s) == 0 ? 0 : errno;
  }
}

static int leavers_main(void *arg) {
  int *bad = arg;
  for (int k = 0; k < L_KINDS; k++) {
    leaver *l = calloc(1, sizeof *l);
    CHECK(l != NULL);
    if (!l) return 1;
    l->kind = k;
    CHECK(iof_compat_pthread_mutex_init(&l->m, NULL) == 0);
    CHECK(iof_compat_pthread_cond_init(&l->c, NULL) == 0);
    CHECK(iof_compat_pthread_rwlock_init(&l->rw, NULL) == 0);
    CHECK(iof_compat_sem_init(&l->s, 0, 0) == 0);
    if (k == L_MUTEX) CHECK(iof_compat_pthread_mutex_lock(&l->m) == 0);
    if (k == L_RWLOCK) CHECK(iof_compat_pthread_rwlock_rdlock(&l->rw) == 0);
    /* Room for W and H to reach their places first, even under TSan on a
     * loaded machine (H must spin before main's wake-up is due). */
    l->abs = abs_in(CLOCK_MONOTONIC, 200);
    pthread_t t, h;
    CHECK(iof_compat_pthread_create(&t, NULL, leaver_thread, l) == 0);
    CHECK(iof_compat_pthread_create(&h, NULL, hold_thread, l) == 0);
    for (int i = 0; i < 2; i++) iof_yield(); /* W waits */
    CHECK(atomic_load(&l->waiting) == 1 && atomic_load(&l->done) == 0);
    int64_t wake = ts_ns(l->abs) - 5000000;
    struct timespec wts = {wake / 1000000000, wake % 1000000000};
    CHECK(iof_compat_clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &wts,
                                     NULL) == 0);
    if (k == L_MUTEX) CHECK(iof_compat_pthread_mutex_unlock(&l->m) == 0);
    if (k == L_RWLOCK) CHECK(iof_compat_pthread_rwlock_unlock(&l->rw) == 0);
    int d = leaver_destroy(l);
    if (d != 0 || atomic_load(&l->done) != 1) {
      fprintf(stderr, "kind %d: destroy %d, waiter done %d\n", k, d,
              atomic_load(&l->done));
      (*bad)++;
    }
    CHECK(iof_compat_pthread_join(t, NULL) == 0);
    CHECK(iof_compat_pthread_join(h, NULL) == 0);
    CHECK(l->rc == ETIMEDOUT);
    if (k != L_COND) CHECK(iof_compat_pthread_cond_destroy(&l->c) == 0);
    if (k != L_MUTEX) CHECK(iof_compat_pthread_mutex_destroy(&l->m) == 0);
    if (k != L_RWLOCK) CHECK(iof_compat_pthread_rwlock_destroy(&l->rw) == 0);
    if (k != L_SEM) CHECK(iof_compat_sem_destroy(&l->s) == 0);
    free(l);
  }
  return 0;
}

static void test_destroy_waits_for_timed_out_waiters(void **state) {
  (void)state;
  int bad = 0;
  assert_int_equal(iof_main(leavers_main, &bad), 0);
  assert_int_equal(bad, 0);
  assert_no_failures();
}

static pthread_barrier_t bar;
static atomic_int serials, passed;
static void *bar_fn(void *arg) {
  (void)arg;
  for (int round = 0; round < 3; round++) {
    int r = iof_compat_pthread_barrier_wait(&bar);
    CHECK(r == 0 || r == PTHREAD_BARRIER_SERIAL_THREAD);
    if (r) atomic_fetch_add(&serials, 1);
    atomic_fetch_add(&passed, 1);
  }
  return NULL;
}

static int bar_main(void *arg) {
  (void)arg;
  CHECK(iof_compat_pthread_barrier_init(&bar, NULL, 100) == 0);
  run_threads(100, bar_fn, NULL);
  CHECK(iof_compat_pthread_barrier_destroy(&bar) == 0);
  CHECK(iof_compat_pthread_barrier_init(&bar, NULL, 0) == EINVAL);
  return 0;
}

static void test_barrier(void **state) {
  (void)state;
  assert_int_equal(iof_main(bar_main, NULL), 0);
  assert_int_equal(atomic_load(&serials), 3);
  assert_int_equal(atomic_load(&passed), 300);
  assert_no_failures();
}

/* ---- pthread_kill to a fiber thread ------------------------------------ */

/* Apache's worker MPM wakes its listener thread this way: a flag, then
 * pthread_kill with a signal whose handler (no SA_RESTART) interrupts the
 * listener's poll. The handler runs in the target, and its blocking call
 * returns EINTR; with SA_RESTART a read goes on. */
static atomic_int kill_hits;
static pthread_t kill_ran_in;
static atomic_bool may_exit;
static int kill_pipe[2];

static void on_kill(int sig) {
  (void)sig;
  atomic_fetch_add(&kill_hits, 1);
  kill_ran_in = iof_compat_pthread_self();
}

typedef struct listener_out {
  int polls, eintr, read_r, hits_at_read;
} listener_out;

static void *listener(void *arg) {
  listener_out *o = arg;
  while (!atomic_load(&may_exit) && o->polls < 100) {
    struct pollfd p = {kill_pipe[0], POLLIN, 0};
    o->polls++;
    if (iof_compat_poll(&p, 1, -1) < 0 && errno == EINTR) o->eintr++;
  }
  return NULL;
}

static void *reader(void *arg) {
  listener_out *o = arg;
  char c = 0;
  o->read_r = (int)iof_compat_read(kill_pipe[0], &c, 1);
  o->hits_at_read = atomic_load(&kill_hits);
  return NULL;
}

static int pthread_kill_main(void *arg) {
  (void)arg;
  CHECK(iof_compat_pipe(kill_pipe) == 0);
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_kill;
  sigemptyset(&sa.sa_mask);
  CHECK(iof_compat_sigaction(SIGUSR1, &sa, NULL) == 0);
  listener_out lo = {0};
  pthread_t t;
  CHECK(iof_compat_pthread_create(&t, NULL, listener, &lo) == 0);
  CHECK(iof_compat_usleep(20 * 1000) == 0);
  atomic_store(&may_exit, true);
  CHECK(iof_compat_pthread_kill(t, SIGUSR1) == 0);
  CHECK(iof_compat_pthread_join(t, NULL) == 0);
  CHECK(lo.polls == 1 && lo.eintr == 1);
  CHECK(atomic_load(&kill_hits) == 1);
  CHECK(iof_compat_pthread_equal(kill_ran_in, t));

  /* SA_RESTART: the read is not interrupted; the handler runs in it. */
  sa.sa_flags = SA_RESTART;
  CHECK(iof_compat_sigaction(SIGUSR1, &sa, NULL) == 0);
  listener_out ro = {0};
  CHECK(iof_compat_pthread_create(&t, NULL, reader, &ro) == 0);
  CHECK(iof_compat_usleep(20 * 1000) == 0);
  CHECK(iof_compat_pthread_kill(t, SIGUSR1) == 0);
  CHECK(iof_compat_usleep(20 * 1000) == 0);
  CHECK(atomic_load(&kill_hits) == 2); /* ran while the read waits */
  CHECK(iof_compat_write(kill_pipe[1], "x", 1) == 1);
  CHECK(iof_compat_pthread_join(t, NULL) == 0);
  CHECK(ro.read_r == 1 && ro.hits_at_read == 2);
  CHECK(iof_compat_pthread_equal(kill_ran_in, t));

  /* To itself, as raise(): before pthread_kill returns. */
  CHECK(iof_compat_pthread_kill(iof_compat_pthread_self(), SIGUSR1) == 0);
  CHECK(atomic_load(&kill_hits) == 3);
  sa.sa_handler = SIG_DFL;
  CHECK(iof_compat_sigaction(SIGUSR1, &sa, NULL) == 0);
  CHECK(iof_compat_close(kill_pipe[0]) == 0);
  CHECK(iof_compat_close(kill_pipe[1]) == 0);
  return 0;
}

static void test_pthread_kill_fiber_thread(void **state) {
  (void)state;
  assert_int_equal(iof_main(pthread_kill_main, NULL), 0);
}

/* ---- iof_main's stack options ------------------------------------------ */

size_t iof__compat_thread_stack(void); /* the fiber threads' default stack */

static int stack_probe(void *arg) {
  *(size_t *)arg = iof__compat_thread_stack();
  return 0;
}

/* Bad stack sizes are refused, not handed to every pthread_create; the
 * option holds for its call only; a bad $IOF_STACK_SIZE is ignored. */
static void test_main_stack_options(void **state) {
  (void)state;
  size_t got = 0;
  iof_main_opts bad = {.thread_stack_size = SIZE_MAX};
  assert_int_equal(iof_main_ex(stack_probe, &got, &bad), -EINVAL);
  bad = (iof_main_opts){.main_stack_size = 1};
  assert_int_equal(iof_main_ex(stack_probe, &got, &bad), -EINVAL);
  bad = (iof_main_opts){.thread_stack_size = IOF_FIBER_STACK_MAX + 1};
  assert_int_equal(iof_main_ex(stack_probe, &got, &bad), -EINVAL);
  assert_int_equal(unsetenv("IOF_STACK_SIZE"), 0);
  iof_main_opts o = {.thread_stack_size = 256 * 1024};
  assert_int_equal(iof_main_ex(stack_probe, &got, &o), 0);
  assert_int_equal(got, 256 * 1024);
  assert_int_equal(iof_main(stack_probe, &got), 0); /* not sticky */
  assert_int_equal(got, IOF_FIBER_STACK_DEFAULT);
  const char *ignored[] = {
      "-5m",  "99999999999999999999k", "0", "1k", "2000000m", "64q", "",
      " 64k", "18014398509481984k"};
  for (size_t i = 0; i < sizeof ignored / sizeof ignored[0]; i++) {
    assert_int_equal(setenv("IOF_STACK_SIZE", ignored[i], 1), 0);
    got = 0;
    assert_int_equal(iof_main(stack_probe, &got), 0);
    assert_int_equal(got, IOF_FIBER_STACK_DEFAULT);
  }
  assert_int_equal(setenv("IOF_STACK_SIZE", "128k", 1), 0);
  assert_int_equal(iof_main(stack_probe, &got), 0);
  assert_int_equal(got, 128 * 1024);
  assert_int_equal(unsetenv("IOF_STACK_SIZE"), 0);
  assert_no_failures();
}

/* Threads with a stack size of their own (a pthread attr) take pooled
 * stacks of its size class, the next power of two: 20 threads in turn
 * with a 200 KiB attr are 20 allocations from the 256 KiB class and map
 * no stack per thread. */
struct iof_stack_pool;
struct iof_stack_pool *iof__compat_stack_class(size_t size);

static void *attr_fn(void *arg) {
  size_t *seen = arg;
  pthread_attr_t a;
  if (iof_compat_pthread_getattr_np(iof_compat_pthread_self(), &a) == 0) {
    (void)pthread_attr_getstacksize(&a, seen);
    pthread_attr_destroy(&a);
  }
  return NULL;
}

static int classes_main(void *arg) {
  (void)arg;
  pthread_attr_t attr;
  CHECK(pthread_attr_init(&attr) == 0);
  CHECK(pthread_attr_setstacksize(&attr, 200 * 1024) == 0);
  struct iof_stack_pool_stats s0 = {0}, s1 = {0};
  for (int i = 0; i < 20; i++) {
    pthread_t t;
    size_t seen = 0;
    CHECK(iof_compat_pthread_create(&t, &attr, attr_fn, &seen) == 0);
    CHECK(iof_compat_pthread_join(t, NULL) == 0);
    CHECK(seen == 256 * 1024);
    if (i == 0) {
      iof_stack_pool *p = (iof_stack_pool *)iof__compat_stack_class(256 * 1024);
      CHECK(p != NULL);
      if (p) iof_stack_pool_stats(p, &s0);
    }
  }
  iof_stack_pool *p = (iof_stack_pool *)iof__compat_stack_class(256 * 1024);
  if (p) iof_stack_pool_stats(p, &s1);
  CHECK(s1.allocated - s0.allocated == 19);
  CHECK(s1.mapped <= 2); /* reused, not mapped per thread */
  CHECK(s1.live == 0);
  pthread_attr_destroy(&attr);
  return 0;
}

static void test_attr_stacks_are_pooled(void **state) {
  (void)state;
  assert_int_equal(iof_main(classes_main, NULL), 0);
  assert_no_failures();
}

/* A thread on a stack of the program's (pthread_attr_setstack) runs on
 * that memory, and only itself: fibers it starts (iof_when_all's
 * children) get frames elsewhere, not that memory again over its own
 * frames. */
static char *own_mem;
static size_t own_size;

static int own_child(void *arg) {
  volatile char buf[2048];
  memset((char *)buf, 0x5a, sizeof buf);
  iof_yield();
  *(uintptr_t *)arg = (uintptr_t)buf; /* compared only */
  return buf[7] == 0x5a ? 0 : -1;
}

static void *own_stack_fn(void *arg) {
  (void)arg;
  volatile uint64_t canary = 0x0123456789abcdefULL;
  uintptr_t seen[2] = {0, 0};
  iof_fn fns[2] = {own_child, own_child};
  void *args[2] = {&seen[0], &seen[1]};
  int r = iof_when_all(2, fns, args, NULL);
  bool ok = r == 0 && canary == 0x0123456789abcdefULL;
  for (int i = 0; i < 2; i++)
    ok = ok && seen[i] &&
         !(seen[i] >= (uintptr_t)own_mem &&
           seen[i] < (uintptr_t)own_mem + own_size);
  return (void *)(uintptr_t)ok;
}

static int own_stack_main(void *arg) {
  (void)arg;
  own_size = 256 * 1024;
  own_mem = aligned_alloc(4096, own_size);
  CHECK(own_mem != NULL);
  if (!own_mem) return 0;
  pthread_attr_t a;
  pthread_attr_init(&a);
  CHECK(pthread_attr_setstack(&a, own_mem, own_size) == 0);
  pthread_t t;
  void *r = NULL;
  CHECK(iof_compat_pthread_create(&t, &a, own_stack_fn, NULL) == 0);
  CHECK(iof_compat_pthread_join(t, &r) == 0);
  CHECK(r == (void *)1);
  pthread_attr_destroy(&a);
  free(own_mem);
  return 0;
}

static void test_own_stack_children(void **state) {
  (void)state;
  assert_int_equal(iof_main(own_stack_main, NULL), 0);
  assert_no_failures();
}

int main(int argc, char **argv) {
  if (argc == 3 && !strcmp(argv[1], "--child")) return child_main(argv[2]);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_mutex_1000_fibers, setup, teardown),
      cmocka_unit_test_setup_teardown(test_mutex_mixed_threads, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(test_mutex_errors, setup, teardown),
      cmocka_unit_test_setup_teardown(test_mutex_timed_thread, setup, teardown),
      cmocka_unit_test_setup_teardown(test_plain_thread_stays_plain, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(test_cond_broadcast_1000, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(test_cond_fiber_and_thread, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(test_cond_timedwait_clocks, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(test_rwlock, setup, teardown),
      cmocka_unit_test_setup_teardown(test_once_1000, setup, teardown),
      cmocka_unit_test_setup_teardown(test_rwlock_once_keys_mixed, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(test_keys, setup, teardown),
      cmocka_unit_test_setup_teardown(test_threads, setup, teardown),
      cmocka_unit_test_setup_teardown(test_stack_sizes, setup, teardown),
      cmocka_unit_test_setup_teardown(test_unjoined_threads_free_stacks, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(test_main_pthread_exit, setup, teardown),
      cmocka_unit_test_setup_teardown(test_pthread_exit_in_plain_fiber, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(test_main_threads_option, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(test_main_exit_paths, setup, teardown),
      cmocka_unit_test_setup_teardown(test_sem, setup, teardown),
      cmocka_unit_test_setup_teardown(test_barrier, setup, teardown),
      cmocka_unit_test_setup_teardown(test_main_stack_options, setup, teardown),
      cmocka_unit_test_setup_teardown(test_attr_stacks_are_pooled, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(test_pthread_kill_fiber_thread, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(test_own_stack_children, setup, teardown),
      cmocka_unit_test_setup_teardown(test_destroy_waits_for_timed_out_waiters,
                                      setup, teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
