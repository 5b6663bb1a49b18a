/* Shared helpers for the cmocka tests. */
#ifndef IOF_TEST_SUPPORT_H
#define IOF_TEST_SUPPORT_H

#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

/* Monotonic time in nanoseconds. */
uint64_t iof_test_now_ns(void);

/* Resident set size of this process in bytes (from /proc/self/statm). */
size_t iof_test_rss_bytes(void);

#endif
