/* The runtime's own descriptors: libev's epoll fd, its eventfd or pipe, its
 * signalfd, and ev_guard's reserved pair.
 *
 * A program run under the hook may close every fd above 2 at start
 * (closefrom(3), close_range, a close loop: daemons and ssh do) or dup2
 * onto a number it picked; if that hit libev's descriptors, libev would
 * assert on its next epoll_ctl. So libev's descriptors go high (at or
 * above half the open-file limit, at most 1024), where programs do not
 * pick numbers, and are listed here: the hook's close, dup2, dup3,
 * closefrom and close_range leave listed ones alone. The reserved pair
 * stays low (it must be under the limit to be of use) and is listed too,
 * but a dup2 onto it frees it for the program (iof__rt_fd_release). libev
 * makes its descriptors inside calls the runtime brackets with
 * iof__rt_fd_enter/leave; the hook, which interposes epoll_create1,
 * eventfd, signalfd and timerfd_create, moves and lists what they return
 * while the bracket is open on the calling thread, and lets libev's own
 * close of a listed fd through (and unlists it) only then. Without the
 * hook nothing interposes: libev's descriptors stay where the kernel put
 * them, and the runtime lists the ones it can name (an owned loop's epoll
 * fd and its wake-up eventfd), so that compat's close and dup2 (the header
 * swap) leave them alone too. */
#include "io/io_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

/* One bit per fd number below RT_FD_LIMIT (8 KiB): close asks on every
 * call, so the answer is one load. A runtime fd beyond the limit stays
 * unprotected, as every fd was before. */
#define RT_FD_LIMIT (1 << 16)
#define WORD_BITS ((int)(sizeof(unsigned long) * 8))

static atomic_ulong listed[RT_FD_LIMIT / WORD_BITS];
static _Thread_local int scope;

static bool in_range(int fd) {
  return fd >= 0 && fd < RT_FD_LIMIT;
}

static unsigned long bit(int fd) {
  return 1ul << (fd % WORD_BITS);
}

void iof__rt_fd_enter(void) {
  scope++;
}

void iof__rt_fd_leave(void) {
  scope--;
}

bool iof__rt_fd_scope(void) {
  return scope > 0;
}

/* Where the runtime's descriptors go: half the soft open-file limit,
 * capped at 1024, so that the numbers stay under the limit. */
static int high_floor(void) {
  struct rlimit rl;
  if (getrlimit(RLIMIT_NOFILE, &rl) != 0 || rl.rlim_cur == RLIM_INFINITY)
    return 1024;
  rlim_t f = rl.rlim_cur / 2;
  return f > 1024 ? 1024 : (int)f;
}

void iof__rt_fd_list(int fd) {
  if (in_range(fd)) atomic_fetch_or(&listed[fd / WORD_BITS], bit(fd));
}

int iof__rt_fd_adopt(int fd) {
  if (fd < 0) return fd;
  int floor = high_floor();
  if (fd < floor) {
    int e = errno;
    int moved = fcntl(fd, F_DUPFD_CLOEXEC, floor);
    if (moved >= 0) {
      close(fd);
      fd = moved;
    }
    errno = e; /* a refusal leaves the fd where it is */
  }
  iof__rt_fd_list(fd);
  return fd;
}

bool iof__rt_fd_owned(int fd) {
  return in_range(fd) &&
         (atomic_load_explicit(&listed[fd / WORD_BITS], memory_order_relaxed) &
          bit(fd));
}

void iof__rt_fd_forget(int fd) {
  if (in_range(fd)) atomic_fetch_and(&listed[fd / WORD_BITS], ~bit(fd));
}

int iof__rt_fd_next(int from) {
  if (from < 0) from = 0;
  for (int w = from / WORD_BITS; w < RT_FD_LIMIT / WORD_BITS; w++) {
    unsigned long m = atomic_load(&listed[w]);
    if (w == from / WORD_BITS) m &= ~0ul << (from % WORD_BITS);
    if (m) return w * WORD_BITS + __builtin_ctzl(m);
  }
  return -1;
}

int iof__rt_fd_lowest_free(void) {
  int fd = fcntl(2, F_DUPFD_CLOEXEC, 0);
  if (fd < 0) fd = fcntl(0, F_DUPFD_CLOEXEC, 0);
  if (fd < 0) return -1;
  int e = errno;
  close(fd);
  errno = e;
  return fd;
}

int iof__rt_fd_claim(int fd, int kind) {
  if (fd < 0 || iof__rt_fd_owned(fd)) return -1;
  int e = errno;
  char path[40], link[64];
  snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
  ssize_t n = readlink(path, link, sizeof link - 1);
  errno = e;
  if (n <= 0) return -1;
  link[n] = 0;
  bool ok = kind == IOF__RT_EPOLL ? !strcmp(link, "anon_inode:[eventpoll]")
                                  : !strcmp(link, "anon_inode:[eventfd]") ||
                                        !strncmp(link, "pipe:", 5);
  if (!ok) return -1;
  iof__rt_fd_list(fd);
  return fd;
}
