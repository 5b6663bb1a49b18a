/* Thread-locals per fiber thread (fiber/thread_locals.c): the program's own
 * __thread variables are per fiber thread, as per thread under real
 * threads: a new one starts from the initial values, main keeps the OS
 * thread's, values survive other threads running in between on the same
 * OS thread and a fiber thread's moves between a pool's threads, and a
 * C++ thread_local's destructor runs at the thread's end on its values.
 * Linked with the shared library: an executable that contains the runtime
 * keeps one block per OS thread. With IOF_THREAD_LOCALS=shared (the test
 * runs a second time so) the same checks must see the values clobbered.
 * The hops also check, under TSan, that compat sets errno after a wait on
 * the OS thread it came back on (compat/errno_here.h).
 * IOF_TEST_THREADED */
#include <iofiber/compat_io.h>
#include <iofiber/compat_thread.h>
#include <iofiber/env.h>
#include <iofiber/launch.h>
#include <iofiber/thread_pool.h>

#include <errno.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "test_support.h"

#define THREADS 8
#define ROUNDS 200

static __thread int tl_id = -1;
static __thread long tl_count = 42;
static __thread char tl_name[48];

static bool shared_mode(void) {
  const char *e = getenv("IOF_THREAD_LOCALS");
  return e && strcmp(e, "shared") == 0;
}

/* Each access computes the variable's address anew: code built for threads
 * may keep a thread-local's address across a call, and a fiber thread that
 * hops to another executor (iof_run) continues on another OS thread after
 * one (docs/porting.md). noipa: GCC would otherwise find these functions
 * const and reuse their results across the hop. */
#ifdef __clang__
#define FRESH __attribute__((noinline, optnone))
#else
#define FRESH __attribute__((noinline, noipa))
#endif
static FRESH int *id_p(void) {
  return &tl_id;
}
static FRESH long *count_p(void) {
  return &tl_count;
}
static FRESH char *name_p(void) {
  return tl_name;
}

/* Checks the calling thread's values: 0, or 1 (and puts them right). */
static int check(int id, long count) {
  char want[48];
  snprintf(want, sizeof want, "thread %d", id);
  if (*id_p() == id && strcmp(name_p(), want) == 0 && *count_p() == count)
    return 0;
  *id_p() = id;
  strcpy(name_p(), want);
  *count_p() = count;
  return 1;
}

static int worker_start(int id) {
  int bad = *id_p() == -1 && *count_p() == 42 && name_p()[0] == 0 ? 0 : 1;
  *id_p() = id;
  snprintf(name_p(), sizeof tl_name, "thread %d", id);
  return bad;
}

/* Returns how many checks found another thread's values. */
static void *worker(void *p) {
  int id = (int)(intptr_t)p;
  intptr_t bad = worker_start(id);
  for (int i = 0; i < ROUNDS; i++) {
    iof_compat_sched_yield();
    bad += check(id, 42 + i);
    ++*count_p();
  }
  return (void *)bad;
}

static long run_workers(void *(*fn)(void *)) {
  pthread_t t[THREADS];
  for (int i = 0; i < THREADS; i++)
    assert_int_equal(
        iof_compat_pthread_create(&t[i], NULL, fn, (void *)(intptr_t)i), 0);
  long bad = 0;
  for (int i = 0; i < THREADS; i++) {
    void *r = NULL;
    assert_int_equal(iof_compat_pthread_join(t[i], &r), 0);
    bad += (long)(intptr_t)r;
  }
  return bad;
}

static int main_fn(void *p) {
  long *bad = p;
  /* main keeps the values the OS thread had before iof_main. */
  if (tl_id != 777) (*bad)++;
  *bad += run_workers(worker);
  if (tl_id != 777) (*bad)++;
  tl_id = 778;
  return 0;
}

static void test_one_io_thread(void **state) {
  (void)state;
  tl_id = 777;
  long bad = 0;
  assert_int_equal(iof_main(main_fn, &bad), 0);
  if (shared_mode()) {
    assert_true(bad > 0);
  } else {
    assert_int_equal(bad, 0);
    /* main ran last: its values are the ones left in place. */
    assert_int_equal(tl_id, 778);
  }
}

/* Fiber threads that hop to a 2-thread pool and back (iof_run): their
 * values follow them to the pool's threads and back, while the others
 * come and go on the same OS threads. */
static iof_thread_pool *hop_pool;
static atomic_int hops_elsewhere; /* hops that ran on another OS thread */

typedef struct hop {
  int id;
  long count;
  long io_tid;
  int bad;
} hop;

static int on_pool(void *p) {
  hop *h = p;
  if (syscall(SYS_gettid) != h->io_tid) atomic_fetch_add(&hops_elsewhere, 1);
  h->bad += check(h->id, h->count);
  iof_compat_sched_yield(); /* others run here meanwhile */
  h->bad += check(h->id, h->count);
  ++*count_p();
  return 0;
}

static void *hopper(void *p) {
  hop h = {(int)(intptr_t)p, 42, syscall(SYS_gettid), 0};
  h.bad = worker_start(h.id);
  for (int i = 0; i < ROUNDS / 4; i++) {
    if (iof_run(iof_thread_pool_executor(hop_pool), NULL, on_pool, &h) != 0)
      h.bad++;
    h.count++;
    h.bad += check(h.id, h.count);
    iof_compat_sched_yield();
    h.bad += check(h.id, h.count);
  }
  return (void *)(intptr_t)h.bad;
}

static int hop_main(void *p) {
  *(long *)p = run_workers(hopper);
  return 0;
}

static void test_hops(void **state) {
  (void)state;
  hop_pool = iof_thread_pool_create(2);
  assert_non_null(hop_pool);
  atomic_store(&hops_elsewhere, 0);
  long bad = 0;
  assert_int_equal(iof_main(hop_main, &bad), 0);
  assert_int_equal(iof_thread_pool_destroy(hop_pool), 0);
  assert_int_equal(atomic_load(&hops_elsewhere), THREADS * (ROUNDS / 4));
  if (shared_mode())
    assert_true(bad > 0);
  else
    assert_int_equal(bad, 0);
}

static __thread int tl_obj;
static atomic_int dtor_saw[THREADS];

static void dtor(void *obj) {
  /* Runs on the ending thread's own values. */
  atomic_store(&dtor_saw[*(int *)obj], tl_id + 1);
}

static void *dtor_worker(void *p) {
  int id = (int)(intptr_t)p;
  tl_id = id;
  tl_obj = id;
  intptr_t r = iof_compat_cxa_thread_atexit_impl(dtor, &tl_obj, NULL);
  iof_compat_sched_yield(); /* the others set theirs meanwhile */
  return (void *)r;
}

static int dtor_main(void *p) {
  intptr_t *res = p;
  static int global;
  /* Not one of its thread-locals: glibc's business. */
  res[THREADS] = iof_compat_cxa_thread_atexit_impl(dtor, &global, NULL);
  pthread_t t[THREADS];
  for (int i = 0; i < THREADS; i++)
    if (iof_compat_pthread_create(&t[i], NULL, dtor_worker,
                                  (void *)(intptr_t)i) != 0)
      res[i] = -1000;
  for (int i = 0; i < THREADS; i++) {
    void *r = NULL;
    if (iof_compat_pthread_join(t[i], &r) == 0) res[i] = (intptr_t)r;
  }
  return 0;
}

static void test_cxx_dtors(void **state) {
  (void)state;
  if (shared_mode()) skip();
  intptr_t res[THREADS + 1] = {0};
  /* Outside fiber threads nothing is registered. */
  assert_int_equal(iof_compat_cxa_thread_atexit_impl(dtor, &tl_obj, NULL),
                   -ESRCH);
  assert_int_equal(iof_main(dtor_main, res), 0);
  assert_int_equal(res[THREADS], -ESRCH);
  for (int i = 0; i < THREADS; i++) {
    assert_int_equal(res[i], 0);
    assert_int_equal(atomic_load(&dtor_saw[i]), i + 1);
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_one_io_thread),
      cmocka_unit_test(test_hops),
      cmocka_unit_test(test_cxx_dtors),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
