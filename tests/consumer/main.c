/* Consumer check: builds against an *installed* iofiber (find_package or
 * pkg-config) and drives one fiber through create/resume/suspend/destroy. */
#include <errno.h>
#include <stdio.h>

#include <iofiber/iofiber.h>

static int steps;

static int fn(void *arg) {
  int *x = arg;
  *x += 1;
  steps = 1;
  if (iof_fiber_suspend() != 0) return -1;
  *x += 1;
  steps = 2;
  return 42;
}

#define CHECK(cond)                                                            \
  do {                                                                         \
    if (!(cond)) {                                                             \
      fprintf(stderr, "consumer: check failed: %s (line %d)\n", #cond,         \
              __LINE__);                                                       \
      return 1;                                                                \
    }                                                                          \
  } while (0)

int main(void) {
  int x = 0;
  iof_fiber *f = iof_fiber_create(NULL, IOF_FIBER_STACK_DEFAULT, fn, &x);
  CHECK(f != NULL);
  CHECK(!iof_fiber_done(f));

  CHECK(iof_fiber_resume(f) == 0); /* runs until the suspend */
  CHECK(steps == 1 && x == 1);
  CHECK(!iof_fiber_done(f));
  CHECK(iof_fiber_status(f) == -EAGAIN);
  CHECK(iof_fiber_current() == NULL);

  CHECK(iof_fiber_resume(f) == 0); /* runs to completion */
  CHECK(steps == 2 && x == 2);
  CHECK(iof_fiber_done(f));
  CHECK(iof_fiber_status(f) == 42);

  CHECK(iof_fiber_destroy(f) == 0);
  puts("consumer ok");
  return 0;
}
