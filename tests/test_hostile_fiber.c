/* Hostile calls into fiber/: every public call of fiber.h, fls.h and
 * frame_allocator.h fed NULLs, absurd sizes, dead objects and the wrong
 * context, checking the documented error and that nothing leaks or
 * breaks (the objects stay usable afterwards). */
#include "test_support.h"

#include <iofiber/fiber.h>
#include <iofiber/fls.h>
#include <iofiber/frame_allocator.h>

#include <errno.h>
#include <limits.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

IOF_TEST_WATCHDOG(arm, disarm, 20)

static int ret7(void *arg) {
  (void)arg;
  return 7;
}

static void fiber_create_rejects_bad_arguments(void **state) {
  (void)state;
  errno = 0;
  assert_null(iof_fiber_create(NULL, 0, NULL, NULL));
  assert_int_equal(errno, EINVAL);
  size_t bad[] = {1,        IOF_FIBER_STACK_MIN - 1, IOF_FIBER_STACK_MAX + 1,
                  SIZE_MAX, SIZE_MAX - 4095,         (size_t)INT64_MAX};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    errno = 0;
    assert_null(iof_fiber_create(NULL, bad[i], ret7, NULL));
    assert_int_equal(errno, EINVAL);
  }
  /* Every allocator refuses the same way. */
  iof_frame_allocator *allocs[] = {iof_mmap_allocator(), iof_malloc_allocator(),
                                   iof_default_frame_allocator()};
  for (size_t i = 0; i < 3; i++) {
    errno = 0;
    assert_null(iof_fiber_create(allocs[i], SIZE_MAX, ret7, NULL));
    assert_int_equal(errno, EINVAL);
  }
}

static void fiber_calls_on_null(void **state) {
  (void)state;
  assert_int_equal(iof_fiber_resume(NULL), -EINVAL);
  assert_false(iof_fiber_done(NULL));
  assert_false(iof_fiber_started(NULL));
  assert_int_equal(iof_fiber_status(NULL), -EINVAL);
  assert_int_equal(iof_fiber_destroy(NULL), -EINVAL);
  assert_int_equal(iof_fiber_set_name(NULL, "x"), -EINVAL);
  assert_string_equal(iof_fiber_name(NULL), "");
  assert_int_equal(iof_fiber_stack_size(NULL), 0);
  assert_null(iof_fiber_current());
}

static iof_fiber *hook_null(iof_fiber *self, void *arg) {
  (void)self;
  (void)arg;
  return NULL;
}

static void fiber_calls_outside_a_fiber(void **state) {
  (void)state;
  assert_int_equal(iof_fiber_suspend(), -EPERM);
  assert_int_equal(iof_fiber_suspend_with(hook_null, NULL), -EPERM);
  assert_int_equal(iof_fiber_transfer(NULL), -EPERM);
  iof_fiber *f = iof_fiber_create(NULL, 0, ret7, NULL);
  assert_non_null(f);
  assert_int_equal(iof_fiber_transfer(f), -EPERM);
  assert_false(iof_fiber_started(f));
  assert_int_equal(iof_fiber_destroy(f), 0);
}

static void fiber_set_name_null_and_long(void **state) {
  (void)state;
  iof_fiber *f = iof_fiber_create(NULL, 0, ret7, NULL);
  assert_non_null(f);
  assert_int_equal(iof_fiber_set_name(f, "x"), 0);
  assert_int_equal(iof_fiber_set_name(f, NULL), 0); /* clears */
  assert_string_equal(iof_fiber_name(f), "");
  char longname[4096];
  memset(longname, 'a', sizeof longname - 1);
  longname[sizeof longname - 1] = '\0';
  assert_int_equal(iof_fiber_set_name(f, longname), 0);
  assert_int_equal(strlen(iof_fiber_name(f)), 31);
  /* A name without a terminator, ending where the memory does: only the
   * 31 bytes kept are read (strlen ran into the unmapped page). */
  char *raw = iof_test_unterminated(40, 'n');
  assert_non_null(raw);
  assert_int_equal(iof_fiber_set_name(f, raw), 0);
  assert_int_equal(strlen(iof_fiber_name(f)), 31);
  assert_int_equal(memcmp(iof_fiber_name(f), raw, 31), 0);
  iof_test_unterminated_free(raw, 40);
  assert_int_equal(iof_fiber_destroy(f), 0);
}

/* Misuse from inside a running fiber. */
typedef struct inside {
  iof_fiber *self, *done, *other;
  int resume_self, transfer_self, transfer_null, transfer_done, hook_null,
      destroy_self, destroy_other_running;
} inside;

static int inside_fn(void *arg) {
  inside *in = arg;
  in->resume_self = iof_fiber_resume(in->self);
  in->transfer_self = iof_fiber_transfer(in->self);
  in->transfer_null = iof_fiber_transfer(NULL);
  in->transfer_done = iof_fiber_transfer(in->done);
  in->hook_null = iof_fiber_suspend_with(NULL, NULL);
  in->destroy_self = iof_fiber_destroy(in->self);
  return 0;
}

static void fiber_misuse_from_inside(void **state) {
  (void)state;
  inside in = {0};
  in.done = iof_fiber_create(NULL, 0, ret7, NULL);
  assert_non_null(in.done);
  assert_int_equal(iof_fiber_resume(in.done), 0);
  assert_true(iof_fiber_done(in.done));
  assert_int_equal(iof_fiber_status(in.done), 7);
  in.self = iof_fiber_create(NULL, 0, inside_fn, &in);
  assert_non_null(in.self);
  assert_int_equal(iof_fiber_status(in.self), -EAGAIN);
  assert_int_equal(iof_fiber_resume(in.self), 0);
  assert_true(iof_fiber_done(in.self));
  assert_int_equal(in.resume_self, -EBUSY);
  assert_int_equal(in.transfer_self, -EBUSY);
  assert_int_equal(in.transfer_null, -EINVAL);
  assert_int_equal(in.transfer_done, -EINVAL);
  assert_int_equal(in.hook_null, -EINVAL);
  assert_int_equal(in.destroy_self, -EBUSY);
  /* Finished: resume is refused, twice. */
  assert_int_equal(iof_fiber_resume(in.done), -EINVAL);
  assert_int_equal(iof_fiber_resume(in.done), -EINVAL);
  assert_int_equal(iof_fiber_destroy(in.done), 0);
  assert_int_equal(iof_fiber_destroy(in.self), 0);
}

static int suspend_once(void *arg) {
  (void)arg;
  iof_fiber_suspend();
  return 1;
}

static void fiber_destroy_suspended_is_ebusy(void **state) {
  (void)state;
  iof_fiber *f = iof_fiber_create(NULL, 0, suspend_once, NULL);
  assert_non_null(f);
  assert_int_equal(iof_fiber_resume(f), 0);
  assert_int_equal(iof_fiber_destroy(f), -EBUSY);
  assert_int_equal(iof_fiber_status(f), -EAGAIN);
  assert_int_equal(iof_fiber_resume(f), 0);
  assert_int_equal(iof_fiber_status(f), 1);
  assert_int_equal(iof_fiber_destroy(f), 0);
}

/* ---- fls -------------------------------------------------------------- */

static void fls_bad_keys(void **state) {
  (void)state;
  assert_int_equal(iof_fls_key_create(NULL, NULL), -EINVAL);
  iof_fls_key zero = {0, 0};
  iof_fls_key wild = {UINT32_MAX, UINT32_MAX};
  iof_fls_key wild2 = {IOF_FLS_KEYS_MAX, 1};
  iof_fls_key keys[] = {zero, wild, wild2};
  for (size_t i = 0; i < 3; i++) {
    assert_int_equal(iof_fls_key_delete(keys[i]), -EINVAL);
    assert_null(iof_fls_get(keys[i]));
    assert_int_equal(iof_fls_set(keys[i], (void *)1), -EINVAL);
  }
  iof_fls_key k;
  assert_int_equal(iof_fls_key_create(&k, NULL), 0);
  assert_int_equal(iof_fls_set(k, &k), 0);
  assert_ptr_equal(iof_fls_get(k), &k);
  assert_int_equal(iof_fls_key_delete(k), 0);
  assert_int_equal(iof_fls_key_delete(k), -EINVAL); /* twice */
  assert_null(iof_fls_get(k));
  assert_int_equal(iof_fls_set(k, &k), -EINVAL);
  /* A key with the right index but a stale generation. */
  iof_fls_key k2;
  assert_int_equal(iof_fls_key_create(&k2, NULL), 0);
  iof_fls_key stale = k2;
  stale.gen += 7;
  assert_int_equal(iof_fls_set(stale, &k), -EINVAL);
  assert_int_equal(iof_fls_key_delete(stale), -EINVAL);
  assert_int_equal(iof_fls_key_delete(k2), 0);
}

static void fls_exhaustion_is_eagain(void **state) {
  (void)state;
  static iof_fls_key keys[IOF_FLS_KEYS_MAX + 1];
  size_t n = 0;
  int rc;
  while ((rc = iof_fls_key_create(&keys[n], NULL)) == 0) {
    n++;
    assert_true(n <= IOF_FLS_KEYS_MAX);
  }
  assert_int_equal(rc, -EAGAIN);
  assert_true(n > 0);
  for (size_t i = 0; i < n; i++)
    assert_int_equal(iof_fls_key_delete(keys[i]), 0);
  assert_int_equal(iof_fls_key_create(&keys[0], NULL), 0);
  assert_int_equal(iof_fls_key_delete(keys[0]), 0);
}

/* ---- allocators ------------------------------------------------------- */

static void allocators_refuse_huge_sizes(void **state) {
  (void)state;
  iof_frame_allocator *allocs[] = {iof_mmap_allocator(), iof_malloc_allocator(),
                                   iof_default_frame_allocator()};
  for (size_t i = 0; i < 3; i++) {
    iof_frame_allocator *a = allocs[i];
    errno = 0;
    assert_null(a->vtbl->allocate(a, SIZE_MAX));
    assert_int_equal(errno, ENOMEM);
    errno = 0;
    assert_null(a->vtbl->allocate(a, SIZE_MAX / 2 + 1));
    assert_int_equal(errno, ENOMEM);
  }
}

static void stack_pool_bad_arguments(void **state) {
  (void)state;
  iof_stack_pool_options o = {0};
  o.stack_size = SIZE_MAX;
  errno = 0;
  assert_null(iof_stack_pool_create(&o));
  assert_int_equal(errno, EINVAL);
  o.stack_size = SIZE_MAX - 4095;
  errno = 0;
  assert_null(iof_stack_pool_create(&o));
  assert_int_equal(errno, EINVAL);
  assert_int_equal(iof_stack_pool_destroy(NULL), -EINVAL);
  struct iof_stack_pool_stats st;
  assert_int_equal(iof_stack_pool_stats(NULL, &st), -EINVAL);
  assert_null(iof_stack_pool_allocator(NULL));

  iof_stack_pool_options absurd[] = {{.thread_cache = SIZE_MAX},
                                     {.depot_max = SIZE_MAX},
                                     {.guard = -1},
                                     {.guard = 99},
                                     {.guard = INT_MIN}};
  for (size_t i = 0; i < 5; i++) {
    errno = 0;
    assert_null(iof_stack_pool_create(&absurd[i]));
    assert_int_equal(errno, EINVAL);
  }
  /* A huge budget is only a limit. */
  iof_stack_pool_options big = {.budget = SIZE_MAX};
  iof_stack_pool *p = iof_stack_pool_create(&big);
  assert_non_null(p);
  assert_int_equal(iof_stack_pool_stats(p, NULL), -EINVAL);
  iof_frame_allocator *a = iof_stack_pool_allocator(p);
  errno = 0;
  assert_null(a->vtbl->allocate(a, SIZE_MAX));
  assert_int_equal(errno, ENOMEM);
  assert_int_equal(iof_stack_pool_stats(p, &st), 0);
  assert_int_equal(st.live, 0);
  assert_int_equal(st.live_bytes, 0);
  /* A fiber through it still works. */
  iof_fiber *f = iof_fiber_create(a, 0, ret7, NULL);
  assert_non_null(f);
  assert_int_equal(iof_stack_pool_destroy(p), -EBUSY);
  assert_int_equal(iof_fiber_resume(f), 0);
  assert_int_equal(iof_fiber_destroy(f), 0);
  assert_int_equal(iof_stack_pool_destroy(p), 0);

  /* A tiny budget: refusals, counted, not crashes. */
  iof_stack_pool_options tiny = {.budget = 1};
  p = iof_stack_pool_create(&tiny);
  assert_non_null(p);
  errno = 0;
  assert_null(iof_fiber_create(iof_stack_pool_allocator(p), 0, ret7, NULL));
  assert_int_equal(errno, ENOMEM);
  assert_int_equal(iof_stack_pool_stats(p, &st), 0);
  assert_int_equal(st.live, 0);
  assert_true(st.failed >= 1);
  assert_int_equal(iof_stack_pool_destroy(p), 0);
}

static void tracking_allocator_bad_arguments(void **state) {
  (void)state;
  iof_tracking_stats ts;
  assert_int_equal(iof_tracking_allocator_stats(NULL, &ts), -EINVAL);
  assert_int_equal(iof_tracking_allocator_stats(iof_malloc_allocator(), &ts),
                   -EINVAL);
  assert_int_equal(iof_tracking_allocator_destroy(NULL), -EINVAL);
  assert_int_equal(iof_tracking_allocator_destroy(iof_mmap_allocator()),
                   -EINVAL);
  iof_frame_allocator *t = iof_tracking_allocator_create(NULL);
  assert_non_null(t);
  assert_int_equal(iof_tracking_allocator_stats(t, NULL), -EINVAL);
  errno = 0;
  assert_null(t->vtbl->allocate(t, SIZE_MAX));
  assert_int_equal(errno, ENOMEM);
  assert_int_equal(iof_tracking_allocator_stats(t, &ts), 0);
  assert_int_equal(ts.live, 0);
  assert_int_equal(ts.total, 0);
  /* A wrapper of a wrapper, destroyed inner-last. */
  iof_frame_allocator *t2 = iof_tracking_allocator_create(t);
  assert_non_null(t2);
  iof_fiber *f = iof_fiber_create(t2, 0, ret7, NULL);
  assert_non_null(f);
  assert_int_equal(iof_tracking_allocator_destroy(t2), -EBUSY);
  assert_int_equal(iof_tracking_allocator_destroy(t), -EBUSY);
  assert_int_equal(iof_fiber_destroy(f), 0);
  assert_int_equal(iof_tracking_allocator_destroy(t2), 0);
  assert_int_equal(iof_tracking_allocator_destroy(t), 0);
}

/* An allocator object left zeroed, or with a slot missing, is refused
 * with EINVAL up front (creation called through its NULL vtbl and
 * crashed); a tracking wrapper refuses it as its inner allocator. */
static void *alloc_only(iof_frame_allocator *self, size_t size) {
  (void)self;
  (void)size;
  return NULL;
}

static void zeroed_allocators_are_einval(void **state) {
  (void)state;
  static const iof_frame_allocator_vtbl no_free = {alloc_only, NULL};
  iof_frame_allocator zeroed = {NULL}, half = {&no_free};
  iof_frame_allocator *bad[] = {&zeroed, &half};
  for (size_t i = 0; i < 2; i++) {
    errno = 0;
    assert_null(iof_fiber_create(bad[i], 0, ret7, NULL));
    assert_int_equal(errno, EINVAL);
    errno = 0;
    assert_null(iof_tracking_allocator_create(bad[i]));
    assert_int_equal(errno, EINVAL);
  }
  /* The allocators themselves still work afterwards. */
  iof_fiber *f = iof_fiber_create(NULL, 0, ret7, NULL);
  assert_non_null(f);
  assert_int_equal(iof_fiber_resume(f), 0);
  assert_int_equal(iof_fiber_status(f), 7);
  assert_int_equal(iof_fiber_destroy(f), 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(fiber_create_rejects_bad_arguments, arm,
                                      disarm),
      cmocka_unit_test_setup_teardown(fiber_calls_on_null, arm, disarm),
      cmocka_unit_test_setup_teardown(fiber_calls_outside_a_fiber, arm, disarm),
      cmocka_unit_test_setup_teardown(fiber_set_name_null_and_long, arm,
                                      disarm),
      cmocka_unit_test_setup_teardown(fiber_misuse_from_inside, arm, disarm),
      cmocka_unit_test_setup_teardown(fiber_destroy_suspended_is_ebusy, arm,
                                      disarm),
      cmocka_unit_test_setup_teardown(fls_bad_keys, arm, disarm),
      cmocka_unit_test_setup_teardown(fls_exhaustion_is_eagain, arm, disarm),
      cmocka_unit_test_setup_teardown(allocators_refuse_huge_sizes, arm,
                                      disarm),
      cmocka_unit_test_setup_teardown(stack_pool_bad_arguments, arm, disarm),
      cmocka_unit_test_setup_teardown(tracking_allocator_bad_arguments, arm,
                                      disarm),
      cmocka_unit_test_setup_teardown(zeroed_allocators_are_einval, arm,
                                      disarm),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
