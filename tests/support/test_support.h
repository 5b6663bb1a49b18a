/* Shared helpers for the cmocka tests. */
#ifndef IOF_TEST_SUPPORT_H
#define IOF_TEST_SUPPORT_H

#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <unistd.h>
#include <cmocka.h>

/* Makes the compiler believe the memory at p is read and written here:
 * a large local array then keeps its whole size and every store to it
 * (clang otherwise shrinks a volatile array to the bytes it sees used). */
#define IOF_TEST_ESCAPE(p) __asm__ volatile("" : : "r"(p) : "memory")

/* Monotonic time in nanoseconds. */
uint64_t iof_test_now_ns(void);

/* Resident set size of this process in bytes (from /proc/self/statm). */
size_t iof_test_rss_bytes(void);

/* n bytes of `fill` with no terminator, ending where readable memory
 * does (the next page is PROT_NONE): a string a callee must not read to
 * its end. NULL if the pages cannot be had; free with
 * iof_test_unterminated_free(p, n). */
char *iof_test_unterminated(size_t n, char fill);
void iof_test_unterminated_free(char *p, size_t n);

/* Open descriptors of this process (of the first 4096 numbers). */
int iof_test_open_fds(void);

/* Milliseconds elapsed since t0 (an iof_test_now_ns() reading). */
int64_t ms_since(uint64_t t0);

/* Sleeps for ms milliseconds, resuming after EINTR. */
void sleep_ms(long ms);

/* The protection of the mapping holding addr, from /proc/self/maps:
 * "rw-p", "---p"; "" if unmapped. */
void prot_of(const void *addr, char out[8]);

/* Asserts [base, base+size) is read-write with a guard page just below. */
void assert_guarded(const void *base, size_t size);

/* Arms a SIGALRM watchdog: after seconds, "<program>: watchdog: a test
 * hung" goes to stderr and the program exits with 124. */
void iof_test_watchdog_arm(unsigned seconds);

/* Defines static cmocka fixtures setup/teardown arming/cancelling the
 * watchdog for secs seconds around each test. */
#define IOF_TEST_WATCHDOG(setup, teardown, secs)                               \
  static int setup(void **state) {                                             \
    (void)state;                                                               \
    iof_test_watchdog_arm(secs);                                               \
    return 0;                                                                  \
  }                                                                            \
  static int teardown(void **state) {                                          \
    (void)state;                                                               \
    alarm(0);                                                                  \
    return 0;                                                                  \
  }

#endif
