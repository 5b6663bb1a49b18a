/* The checks of the plain POSIX test programs under tests/hook (run under
 * iofiber-run, plain, and with the header swap): a failed step is printed
 * with the program's name and errno, and the program goes on, so that one
 * run lists every step that failed. Define STEPS_NAME before including. */
#ifndef IOF_TESTS_HOOK_STEPS_H
#define IOF_TESTS_HOOK_STEPS_H

#include <errno.h>
#include <stdio.h>
#include <string.h>

static int failed;

#define CHECK(cond, what)                                                      \
  do {                                                                         \
    if (!(cond)) {                                                             \
      fprintf(stderr, "%s: %s: %s (errno %s)\n", STEPS_NAME, what, #cond,      \
              strerror(errno));                                                \
      failed = 1;                                                              \
    }                                                                          \
  } while (0)

#endif
