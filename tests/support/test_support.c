#include "test_support.h"

#include <errno.h>
#include <signal.h>
#include <stdbool.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

/* Pooled fiber stacks and ASan's fake stacks do not mix. */
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

char *iof_test_unterminated(size_t n, char fill) {
  size_t page = (size_t)sysconf(_SC_PAGESIZE);
  if (n > page) return NULL;
  char *two = mmap(NULL, 2 * page, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (two == MAP_FAILED) return NULL;
  if (mprotect(two + page, page, PROT_NONE) != 0) {
    munmap(two, 2 * page);
    return NULL;
  }
  memset(two + page - n, fill, n);
  return two + page - n;
}

void iof_test_unterminated_free(char *p, size_t n) {
  size_t page = (size_t)sysconf(_SC_PAGESIZE);
  if (p) munmap(p + n - page, 2 * page);
}

int iof_test_open_fds(void) {
  int n = 0;
  for (int fd = 0; fd < 4096; fd++) n += fcntl(fd, F_GETFD) >= 0;
  return n;
}

int64_t ms_since(uint64_t t0) {
  return (int64_t)((iof_test_now_ns() - t0) / 1000000u);
}

void sleep_ms(long ms) {
  struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
  while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
  }
}

/* The watchdog's message, built before the alarm so the handler only
 * calls async-signal-safe functions. */
static char watchdog_msg[256];
static size_t watchdog_len;

static void watchdog_on_alarm(int sig) {
  (void)sig;
  ssize_t w = write(2, watchdog_msg, watchdog_len);
  (void)w;
  _exit(124);
}

void iof_test_watchdog_arm(unsigned seconds) {
  if (watchdog_len == 0) {
    int n =
        snprintf(watchdog_msg, sizeof watchdog_msg,
                 "%s: watchdog: a test hung\n", program_invocation_short_name);
    watchdog_len = n > 0 && (size_t)n < sizeof watchdog_msg
                       ? (size_t)n
                       : strlen(watchdog_msg);
  }
  signal(SIGALRM, watchdog_on_alarm);
  alarm(seconds);
}

void prot_of(const void *addr, char out[8]) {
  out[0] = '\0';
  FILE *f = fopen("/proc/self/maps", "r");
  assert_non_null(f);
  char line[512];
  uintptr_t a = (uintptr_t)addr;
  while (fgets(line, sizeof line, f)) {
    unsigned long lo, hi;
    char perms[8];
    if (sscanf(line, "%lx-%lx %7s", &lo, &hi, perms) != 3) continue;
    if (a >= lo && a < hi) {
      snprintf(out, 8, "%s", perms);
      break;
    }
  }
  fclose(f);
}

/* True if the kernel cannot read the byte at addr: write() from it into a
 * pipe fails with EFAULT (PROT_NONE, unmapped, or a guard marker, which
 * /proc/self/maps does not show). */
static bool unreadable(const void *addr) {
  int fd[2];
  assert_int_equal(pipe(fd), 0);
  ssize_t w = write(fd[1], addr, 1);
  int e = errno;
  close(fd[0]);
  close(fd[1]);
  return w < 0 && e == EFAULT;
}

void assert_guarded(const void *base, size_t size) {
  char p[8];
  prot_of((const char *)base - 1, p);
  /* A PROT_NONE page, or (Linux 6.13+) a guard marker in a writable
   * mapping. */
  if (strcmp(p, "---p") != 0) {
    assert_string_equal(p, "rw-p");
    assert_true(unreadable((const char *)base - 1));
  }
  assert_false(unreadable(base));
  prot_of(base, p);
  assert_string_equal(p, "rw-p");
  prot_of((const char *)base + size - 1, p);
  assert_string_equal(p, "rw-p");
}
