#include "test_support.h"

#include <iofiber/fiber.h>

static int body(void *arg) {
  int *x = arg;
  (*x)++;
  iof_fiber_suspend();
  (*x)++;
  return 7;
}

static void smoke(void **state) {
  (void)state;
  int x = 0;
  iof_fiber *f = iof_fiber_create(NULL, IOF_FIBER_STACK_DEFAULT, body, &x);
  assert_non_null(f);
  assert_int_equal(iof_fiber_resume(f), 0);
  assert_int_equal(x, 1);
  assert_false(iof_fiber_done(f));
  assert_int_equal(iof_fiber_resume(f), 0);
  assert_int_equal(x, 2);
  assert_true(iof_fiber_done(f));
  assert_int_equal(iof_fiber_status(f), 7);
  assert_int_equal(iof_fiber_destroy(f), 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {cmocka_unit_test(smoke)};
  return cmocka_run_group_tests(tests, NULL, NULL);
}
