/* Fiber-local storage: keys, values per fiber, destructors at fiber end,
 * values following a fiber to another thread, deleted keys, and the
 * thread-level values used outside fibers.
 *
 * IOF_TEST_THREADED: migration and thread-exit destructors. */
#include "test_support.h"

#include <iofiber/fiber.h>
#include <iofiber/fls.h>

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

/* cmocka's asserts longjmp: fibers record failures, the test checks them. */
static atomic_int fiber_failures;

static void fiber_fail(const char *file, int line, const char *expr) {
  if (atomic_fetch_add(&fiber_failures, 1) < 20)
    fprintf(stderr, "%s:%d: check failed in fiber/thread: %s\n", file, line,
            expr);
}

#define FCHECK(c)                                                              \
  do {                                                                         \
    if (!(c)) fiber_fail(__FILE__, __LINE__, #c);                              \
  } while (0)

static int reset_failures(void **state) {
  (void)state;
  atomic_store(&fiber_failures, 0);
  return 0;
}

#define assert_no_fiber_failures()                                             \
  assert_int_equal(atomic_load(&fiber_failures), 0)

static __attribute__((noinline)) long self_tid(void) {
  return syscall(SYS_gettid);
}

/* A value whose destructor calls are recorded. */
struct val {
  _Atomic int calls;
  long tid;           /* thread of the last call */
  iof_fiber *current; /* iof_fiber_current() in the last call */
  int id;
};

static void record_dtor(void *p) {
  struct val *v = p;
  v->tid = self_tid();
  v->current = iof_fiber_current();
  atomic_fetch_add(&v->calls, 1);
}

/* ---- keys -------------------------------------------------------------- */

static void noop_dtor(void *p) {
  (void)p;
}

static void test_keys(void **state) {
  (void)state;
  assert_int_equal(iof_fls_key_create(NULL, NULL), -EINVAL);
  iof_fls_key keys[IOF_FLS_KEYS_MAX + 1];
  int n = 0;
  while (n <= IOF_FLS_KEYS_MAX &&
         iof_fls_key_create(&keys[n], n % 2 ? noop_dtor : NULL) == 0)
    n++;
  /* This process made no key before: exactly the maximum fits. */
  assert_int_equal(n, IOF_FLS_KEYS_MAX);
  iof_fls_key extra;
  assert_int_equal(iof_fls_key_create(&extra, NULL), -EAGAIN);
  for (int i = 0; i < n; i++) {
    assert_int_not_equal(keys[i].gen, 0);
    for (int j = 0; j < i; j++)
      assert_int_not_equal(keys[i].index, keys[j].index);
  }
  /* Every key holds its own value. */
  for (int i = 0; i < n; i++)
    assert_int_equal(iof_fls_set(keys[i], (void *)(uintptr_t)(i + 1)), 0);
  for (int i = 0; i < n; i++)
    assert_ptr_equal(iof_fls_get(keys[i]), (void *)(uintptr_t)(i + 1));

  /* Deleting one frees a slot; the old handle stays dead. */
  iof_fls_key old = keys[7];
  assert_int_equal(iof_fls_key_delete(old), 0);
  assert_int_equal(iof_fls_key_delete(old), -EINVAL);
  assert_null(iof_fls_get(old));
  assert_int_equal(iof_fls_set(old, (void *)1), -EINVAL);
  assert_int_equal(iof_fls_key_create(&keys[7], NULL), 0);
  assert_false(keys[7].index == old.index && keys[7].gen == old.gen);
  assert_null(iof_fls_get(keys[7])); /* not the deleted key's value */
  assert_null(iof_fls_get(old));
  assert_int_equal(iof_fls_key_create(&extra, NULL), -EAGAIN);

  /* Bogus handles. */
  iof_fls_key zero = {0, 0};
  iof_fls_key far = {IOF_FLS_KEYS_MAX + 5, 1};
  iof_fls_key big = {UINT32_MAX, UINT32_MAX};
  assert_int_equal(iof_fls_key_delete(zero), -EINVAL);
  assert_int_equal(iof_fls_key_delete(far), -EINVAL);
  assert_int_equal(iof_fls_key_delete(big), -EINVAL);
  assert_null(iof_fls_get(far));
  assert_null(iof_fls_get(big));
  assert_int_equal(iof_fls_set(far, (void *)1), -EINVAL);
  assert_int_equal(iof_fls_set(big, (void *)1), -EINVAL);
  iof_fls_key wronggen = keys[3];
  wronggen.gen += 2;
  assert_null(iof_fls_get(wronggen));
  assert_int_equal(iof_fls_set(wronggen, (void *)1), -EINVAL);
  assert_int_equal(iof_fls_key_delete(wronggen), -EINVAL);

  for (int i = 0; i < n; i++) {
    assert_int_equal(iof_fls_set(keys[i], NULL), 0);
    assert_int_equal(iof_fls_key_delete(keys[i]), 0);
  }
  /* All free again. */
  for (int i = 0; i < n; i++)
    assert_int_equal(iof_fls_key_create(&keys[i], NULL), 0);
  for (int i = 0; i < n; i++) assert_int_equal(iof_fls_key_delete(keys[i]), 0);
}

/* ---- 1,000 fibers, distinct values -------------------------------------- */

#define NFIBERS 1000

struct many {
  iof_fls_key key, key2;
  struct val vals[NFIBERS];
  struct val vals2[NFIBERS];
  iof_fiber *fs[NFIBERS];
  void *main_value;
};

static struct many many;

static int many_fiber(void *arg) {
  int i = (int)(intptr_t)arg;
  FCHECK(iof_fls_get(many.key) == NULL); /* not the thread's value */
  FCHECK(iof_fls_get(many.key2) == NULL);
  FCHECK(iof_fls_set(many.key, &many.vals[i]) == 0);
  FCHECK(iof_fls_get(many.key) == &many.vals[i]);
  if (i % 3 == 0) FCHECK(iof_fls_set(many.key2, &many.vals2[i]) == 0);
  FCHECK(iof_fiber_suspend() == 0);
  /* Every other fiber has set its own value meanwhile. */
  FCHECK(iof_fls_get(many.key) == &many.vals[i]);
  FCHECK(iof_fls_get(many.key2) == (i % 3 == 0 ? &many.vals2[i] : NULL));
  FCHECK(atomic_load(&many.vals[i].calls) == 0);
  return i;
}

static void test_many_fibers(void **state) {
  (void)state;
  memset(&many, 0, sizeof many);
  assert_int_equal(iof_fls_key_create(&many.key, record_dtor), 0);
  assert_int_equal(iof_fls_key_create(&many.key2, record_dtor), 0);
  static int main_marker;
  assert_int_equal(iof_fls_set(many.key, &main_marker), 0);
  for (int i = 0; i < NFIBERS; i++) {
    many.vals[i].id = i;
    many.fs[i] = iof_fiber_create(NULL, IOF_FIBER_STACK_MIN, many_fiber,
                                  (void *)(intptr_t)i);
    assert_non_null(many.fs[i]);
    assert_int_equal(iof_fiber_resume(many.fs[i]), 0);
  }
  /* The thread's own value is untouched by the fibers. */
  assert_ptr_equal(iof_fls_get(many.key), &main_marker);
  for (int i = 0; i < NFIBERS; i++) {
    assert_int_equal(iof_fiber_resume(many.fs[i]), 0);
    assert_int_equal(iof_fiber_status(many.fs[i]), i);
    /* The destructor ran when the fiber ended, once, in that fiber. */
    assert_int_equal(atomic_load(&many.vals[i].calls), 1);
    assert_ptr_equal(many.vals[i].current, many.fs[i]);
    assert_int_equal(atomic_load(&many.vals2[i].calls), i % 3 == 0);
    if (i + 1 < NFIBERS)
      assert_int_equal(atomic_load(&many.vals[i + 1].calls), 0);
    assert_int_equal(iof_fiber_destroy(many.fs[i]), 0);
    assert_int_equal(atomic_load(&many.vals[i].calls), 1); /* not again */
  }
  assert_ptr_equal(iof_fls_get(many.key), &main_marker);
  assert_int_equal(iof_fls_set(many.key, NULL), 0);
  assert_int_equal(iof_fls_key_delete(many.key), 0);
  assert_int_equal(iof_fls_key_delete(many.key2), 0);
  assert_no_fiber_failures();
}

/* ---- destructor details ------------------------------------------------ */

struct dt {
  iof_fls_key k_null_dtor, k_dtor, k_reset, k_forever;
  struct val a, b, c;
  int reset_calls, forever_calls;
};

static struct dt dt;

static void reset_once_dtor(void *p) {
  /* Sets a value again once, as pthread key destructors may. */
  dt.reset_calls++;
  if (dt.reset_calls == 1) FCHECK(iof_fls_set(dt.k_reset, p) == 0);
}

static void forever_dtor(void *p) {
  dt.forever_calls++;
  if (dt.forever_calls < 1000) (void)iof_fls_set(dt.k_forever, p);
}

static int dt_fiber(void *arg) {
  (void)arg;
  FCHECK(iof_fls_set(dt.k_null_dtor, &dt.a) == 0); /* no destructor */
  FCHECK(iof_fls_set(dt.k_dtor, &dt.b) == 0);
  FCHECK(iof_fls_set(dt.k_dtor, NULL) == 0); /* cleared: not called */
  FCHECK(iof_fls_set(dt.k_dtor, &dt.c) == 0);
  FCHECK(iof_fls_set(dt.k_dtor, &dt.c) == 0); /* set twice, called once */
  FCHECK(iof_fls_set(dt.k_reset, &dt) == 0);
  FCHECK(iof_fls_set(dt.k_forever, &dt) == 0);
  FCHECK(iof_fiber_suspend() == 0);
  /* Suspending ran nothing. */
  FCHECK(atomic_load(&dt.c.calls) == 0);
  FCHECK(dt.reset_calls == 0);
  return 0;
}

static int empty_fiber(void *arg) {
  (void)arg;
  return 0;
}

static void test_destructors(void **state) {
  (void)state;
  memset(&dt, 0, sizeof dt);
  assert_int_equal(iof_fls_key_create(&dt.k_null_dtor, NULL), 0);
  assert_int_equal(iof_fls_key_create(&dt.k_dtor, record_dtor), 0);
  assert_int_equal(iof_fls_key_create(&dt.k_reset, reset_once_dtor), 0);
  assert_int_equal(iof_fls_key_create(&dt.k_forever, forever_dtor), 0);
  iof_fiber *f = iof_fiber_create(NULL, IOF_FIBER_STACK_DEFAULT, dt_fiber, 0);
  assert_non_null(f);
  assert_int_equal(iof_fiber_resume(f), 0);
  assert_int_equal(atomic_load(&dt.c.calls), 0);
  assert_int_equal(iof_fiber_resume(f), 0);
  assert_true(iof_fiber_done(f));
  assert_int_equal(atomic_load(&dt.a.calls), 0);
  assert_int_equal(atomic_load(&dt.b.calls), 0);
  assert_int_equal(atomic_load(&dt.c.calls), 1);
  assert_int_equal(dt.reset_calls, 2); /* the value set again was seen */
  /* A destructor that always sets again is cut off after a few rounds. */
  assert_true(dt.forever_calls >= 2);
  assert_true(dt.forever_calls <= 16);
  int forever = dt.forever_calls;
  assert_int_equal(iof_fiber_destroy(f), 0);
  assert_int_equal(atomic_load(&dt.c.calls), 1);
  assert_int_equal(dt.reset_calls, 2);
  assert_int_equal(dt.forever_calls, forever);

  /* A fiber that never set anything, and one never started. */
  f = iof_fiber_create(NULL, IOF_FIBER_STACK_DEFAULT, empty_fiber, NULL);
  assert_non_null(f);
  assert_int_equal(iof_fiber_resume(f), 0);
  assert_int_equal(iof_fiber_destroy(f), 0);
  f = iof_fiber_create(NULL, IOF_FIBER_STACK_DEFAULT, dt_fiber, NULL);
  assert_non_null(f);
  assert_int_equal(iof_fiber_destroy(f), 0);
  assert_int_equal(atomic_load(&dt.c.calls), 1);
  assert_int_equal(dt.reset_calls, 2);

  assert_int_equal(iof_fls_key_delete(dt.k_null_dtor), 0);
  assert_int_equal(iof_fls_key_delete(dt.k_dtor), 0);
  assert_int_equal(iof_fls_key_delete(dt.k_reset), 0);
  assert_int_equal(iof_fls_key_delete(dt.k_forever), 0);
  assert_no_fiber_failures();
}

/* ---- a deleted key ------------------------------------------------------ */

struct del {
  iof_fls_key k, k2;
  struct val v, v2;
  int stage;
};

static int del_fiber(void *arg) {
  struct del *d = arg;
  FCHECK(iof_fls_set(d->k, &d->v) == 0);
  FCHECK(iof_fiber_suspend() == 0);
  /* The key was deleted (and a new one created) meanwhile. */
  FCHECK(iof_fls_get(d->k) == NULL);
  FCHECK(iof_fls_set(d->k, &d->v) == -EINVAL);
  FCHECK(iof_fls_get(d->k2) == NULL); /* the old value is not the new key's */
  FCHECK(iof_fls_set(d->k2, &d->v2) == 0);
  FCHECK(iof_fls_get(d->k2) == &d->v2);
  d->stage = 1;
  return 0;
}

static void test_deleted_key(void **state) {
  (void)state;
  struct del d;
  memset(&d, 0, sizeof d);
  assert_int_equal(iof_fls_key_create(&d.k, record_dtor), 0);
  iof_fiber *f = iof_fiber_create(NULL, IOF_FIBER_STACK_DEFAULT, del_fiber, &d);
  assert_non_null(f);
  assert_int_equal(iof_fiber_resume(f), 0);
  assert_int_equal(iof_fls_key_delete(d.k), 0);
  /* Most likely the same slot, with a new generation. */
  assert_int_equal(iof_fls_key_create(&d.k2, record_dtor), 0);
  assert_int_equal(iof_fiber_resume(f), 0);
  assert_int_equal(d.stage, 1);
  /* The deleted key's value is dropped without its destructor. */
  assert_int_equal(atomic_load(&d.v.calls), 0);
  assert_int_equal(atomic_load(&d.v2.calls), 1);
  assert_int_equal(iof_fiber_destroy(f), 0);
  assert_int_equal(iof_fls_key_delete(d.k2), 0);
  assert_no_fiber_failures();
}

/* ---- a fiber moving between threads ------------------------------------ */

struct mig {
  iof_fls_key k;
  struct val fiber_val, thread_b_val;
  iof_fiber *f;
  long tid_a, tid_b;
};

static struct mig mig;

static int mig_fiber(void *arg) {
  (void)arg;
  FCHECK(self_tid() == mig.tid_a);
  FCHECK(iof_fls_set(mig.k, &mig.fiber_val) == 0);
  FCHECK(iof_fiber_suspend() == 0);
  FCHECK(self_tid() == mig.tid_b);
  /* Still this fiber's value, not thread B's. */
  FCHECK(iof_fls_get(mig.k) == &mig.fiber_val);
  return 0;
}

static void *mig_a(void *arg) {
  (void)arg;
  mig.tid_a = self_tid();
  mig.f = iof_fiber_create(NULL, IOF_FIBER_STACK_DEFAULT, mig_fiber, NULL);
  FCHECK(mig.f != NULL);
  if (mig.f) FCHECK(iof_fiber_resume(mig.f) == 0);
  FCHECK(iof_fls_get(mig.k) == NULL); /* thread A has none of its own */
  return NULL;
}

static void *mig_b(void *arg) {
  (void)arg;
  mig.tid_b = self_tid();
  FCHECK(iof_fls_set(mig.k, &mig.thread_b_val) == 0);
  if (mig.f) {
    FCHECK(iof_fiber_resume(mig.f) == 0);
    FCHECK(iof_fiber_done(mig.f));
    /* The destructor ran here, at the fiber's end. */
    FCHECK(atomic_load(&mig.fiber_val.calls) == 1);
    FCHECK(mig.fiber_val.tid == mig.tid_b);
    FCHECK(iof_fiber_destroy(mig.f) == 0);
  }
  FCHECK(iof_fls_get(mig.k) == &mig.thread_b_val);
  FCHECK(atomic_load(&mig.thread_b_val.calls) == 0);
  return NULL; /* thread exit: thread_b_val's destructor */
}

static void test_migration(void **state) {
  (void)state;
  memset(&mig, 0, sizeof mig);
  assert_int_equal(iof_fls_key_create(&mig.k, record_dtor), 0);
  pthread_t t;
  assert_int_equal(pthread_create(&t, NULL, mig_a, NULL), 0);
  assert_int_equal(pthread_join(t, NULL), 0);
  assert_int_equal(atomic_load(&mig.fiber_val.calls), 0);
  assert_int_equal(pthread_create(&t, NULL, mig_b, NULL), 0);
  assert_int_equal(pthread_join(t, NULL), 0);
  assert_no_fiber_failures();
  assert_int_not_equal(mig.tid_a, mig.tid_b);
  assert_int_equal(atomic_load(&mig.fiber_val.calls), 1);
  assert_int_equal(atomic_load(&mig.thread_b_val.calls), 1);
  assert_int_equal(mig.thread_b_val.tid, mig.tid_b);
  assert_null(mig.thread_b_val.current); /* run outside any fiber */
  assert_int_equal(iof_fls_key_delete(mig.k), 0);
}

/* ---- outside fibers: the thread's values -------------------------------- */

struct thr {
  iof_fls_key k, k2;
  struct val v, v2, fv;
  long tid;
};

static struct thr thr;

static int thr_fiber(void *arg) {
  (void)arg;
  FCHECK(iof_fls_get(thr.k) == NULL);
  FCHECK(iof_fls_set(thr.k, &thr.fv) == 0);
  return 0;
}

static void *thr_main(void *arg) {
  (void)arg;
  thr.tid = self_tid();
  FCHECK(iof_fls_get(thr.k) == NULL);
  FCHECK(iof_fls_set(thr.k, &thr.v) == 0);
  FCHECK(iof_fls_get(thr.k) == &thr.v);
  FCHECK(iof_fls_set(thr.k2, &thr.v2) == 0);
  FCHECK(iof_fls_set(thr.k2, NULL) == 0); /* cleared: no destructor */
  /* A fiber on this thread has its own values. */
  iof_fiber *f =
      iof_fiber_create(NULL, IOF_FIBER_STACK_DEFAULT, thr_fiber, NULL);
  FCHECK(f != NULL);
  if (f) {
    FCHECK(iof_fiber_resume(f) == 0);
    FCHECK(atomic_load(&thr.fv.calls) == 1);
    FCHECK(iof_fiber_destroy(f) == 0);
  }
  FCHECK(iof_fls_get(thr.k) == &thr.v);
  FCHECK(atomic_load(&thr.v.calls) == 0);
  return NULL;
}

static void *thr_untouched(void *arg) {
  (void)arg;
  return iof_fls_get(thr.k);
}

static void test_thread_values(void **state) {
  (void)state;
  memset(&thr, 0, sizeof thr);
  assert_int_equal(iof_fls_key_create(&thr.k, record_dtor), 0);
  assert_int_equal(iof_fls_key_create(&thr.k2, record_dtor), 0);
  /* The main thread's value. */
  static struct val mainv;
  assert_int_equal(iof_fls_set(thr.k, &mainv), 0);
  assert_ptr_equal(iof_fls_get(thr.k), &mainv);
  pthread_t t;
  assert_int_equal(pthread_create(&t, NULL, thr_main, NULL), 0);
  assert_int_equal(pthread_join(t, NULL), 0);
  assert_no_fiber_failures();
  /* Its destructor ran once, at that thread's exit, on that thread. */
  assert_int_equal(atomic_load(&thr.v.calls), 1);
  assert_int_equal(thr.v.tid, thr.tid);
  assert_int_equal(atomic_load(&thr.v2.calls), 0);
  assert_int_equal(atomic_load(&thr.fv.calls), 1);
  /* A new thread starts with nothing; ours is unchanged. */
  void *seen = (void *)1;
  assert_int_equal(pthread_create(&t, NULL, thr_untouched, NULL), 0);
  assert_int_equal(pthread_join(t, &seen), 0);
  assert_null(seen);
  assert_ptr_equal(iof_fls_get(thr.k), &mainv);
  assert_int_equal(atomic_load(&mainv.calls), 0);
  assert_int_equal(iof_fls_set(thr.k, NULL), 0);
  assert_int_equal(iof_fls_key_delete(thr.k), 0);
  assert_int_equal(iof_fls_key_delete(thr.k2), 0);
}

int main(int argc, char **argv) {
  /* An optional argument selects tests by name pattern. */
  if (argc > 1) cmocka_set_test_filter(argv[1]);
  const struct CMUnitTest tests[] = {
      /* First: it counts every key of the process. */
      cmocka_unit_test_setup(test_keys, reset_failures),
      cmocka_unit_test_setup(test_many_fibers, reset_failures),
      cmocka_unit_test_setup(test_destructors, reset_failures),
      cmocka_unit_test_setup(test_deleted_key, reset_failures),
      cmocka_unit_test_setup(test_migration, reset_failures),
      cmocka_unit_test_setup(test_thread_values, reset_failures),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
