#include "test_support.h"

#include <stdio.h>
#include <time.h>
#include <unistd.h>

/* Pooled fiber stacks and ASan's fake stacks do not mix (DESIGN 5). */
const char *__asan_default_options(void);
const char *__asan_default_options(void) {
  return "detect_stack_use_after_return=0";
}

uint64_t iof_test_now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

size_t iof_test_rss_bytes(void) {
  FILE *f = fopen("/proc/self/statm", "r");
  unsigned long size = 0, rss = 0;
  if (f) {
    if (fscanf(f, "%lu %lu", &size, &rss) != 2) rss = 0;
    fclose(f);
  }
  return (size_t)rss * (size_t)sysconf(_SC_PAGESIZE);
}
