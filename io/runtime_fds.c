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
 * hook nothing interposes and only ev_guard's pair moves. */
#include "io/io_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <sys/resource.h>
#include <unistd.h>

#define RT_FDS 64

/* fd + 1 per slot (0: free). Few: one epoll fd and one eventfd per loop,
 * a signalfd, the reserved pair. */
static atomic_int listed[RT_FDS];
static atomic_int lowest = INT32_MAX; /* no listed fd below (a fast no) */
static _Thread_local int scope;

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
  for (int i = 0; i < RT_FDS; i++) {
    int free_slot = 0;
    if (atomic_compare_exchange_strong(&listed[i], &free_slot, fd + 1)) {
      int low = atomic_load(&lowest);
      while (fd < low && !atomic_compare_exchange_weak(&lowest, &low, fd)) {
      }
      return;
    }
  }
  /* Full: the fd stays unprotected, which is how it was before. */
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
  if (fd < atomic_load_explicit(&lowest, memory_order_relaxed)) return false;
  for (int i = 0; i < RT_FDS; i++)
    if (atomic_load_explicit(&listed[i], memory_order_relaxed) == fd + 1)
      return true;
  return false;
}

void iof__rt_fd_forget(int fd) {
  for (int i = 0; i < RT_FDS; i++) {
    int mine = fd + 1;
    if (atomic_compare_exchange_strong(&listed[i], &mine, 0)) return;
  }
}

int iof__rt_fd_next(int from) {
  int best = -1;
  for (int i = 0; i < RT_FDS; i++) {
    int fd = atomic_load(&listed[i]) - 1;
    if (fd >= from && (best < 0 || fd < best)) best = fd;
  }
  return best;
}
