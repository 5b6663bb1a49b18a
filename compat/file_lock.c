/* File locks taken from a fiber: flock, lockf and fcntl's F_SETLKW /
 * F_OFD_SETLKW.
 *
 * Nothing tells a process when a file lock frees (no fd turns readable),
 * so a fiber tries the non-blocking form and pauses between tries, from
 * 50 us doubling to 5 ms; the other fibers of its thread run meanwhile.
 * That matters beyond latency: flock and OFD locks belong to an open file,
 * so two fibers of one thread with their own open() of a file exclude each
 * other, and a blocking wait in the kernel would deadlock that thread. The
 * pauses are interruptible as the kernel's lock waits (EINTR from a
 * handler without SA_RESTART: alarm() around F_SETLKW) and each try is a
 * cancellation point. Outside fibers every call is the plain one. */
#include <iofiber/compat_io.h>

#include "compat/backoff.h"
#include "compat/fd_table.h"
#include "compat/thread_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

/* Retries try(arg) (the non-blocking form: 0, or -1 + errno) while it
 * fails with a conflict (EAGAIN, EWOULDBLOCK, EACCES), pausing from 50 us
 * to 5 ms between tries. errno is the try's, or kept on success. */
static int until_taken(iof_fiber *f, int (*try)(void *), void *arg) {
  int saved = errno;
  iof__backoff b;
  iof__backoff_init(&b, f, 50000, 5000000, true);
  for (;;) {
    if (try(arg) == 0) {
      errno = saved;
      return 0;
    }
    if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EACCES) return -1;
    int r = iof__backoff_pause(&b, INT64_MAX);
    if (r < 0) {
      errno = -r;
      return -1;
    }
  }
}

typedef struct flock_try {
  int fd, op;
} flock_try;

static int try_flock(void *p) {
  flock_try *t = p;
  return iof__libc.flock(t->fd, t->op | LOCK_NB);
}

int iof_compat_flock(int fd, int op) {
  iof_fiber *f = iof__compat_fiber();
  if (!f || (op & LOCK_NB) || (op & ~LOCK_NB) == LOCK_UN)
    return iof__libc.flock(fd, op);
  flock_try t = {fd, op};
  return until_taken(f, try_flock, &t);
}

typedef struct lockf_try {
  int fd;
  off_t len;
} lockf_try;

static int try_lockf(void *p) {
  lockf_try *t = p;
  return iof__libc.lockf(t->fd, F_TLOCK, t->len);
}

int iof_compat_lockf(int fd, int cmd, off_t len) {
  iof_fiber *f = iof__compat_fiber();
  if (!f || cmd != F_LOCK) return iof__libc.lockf(fd, cmd, len);
  lockf_try t = {fd, len};
  return until_taken(f, try_lockf, &t);
}

typedef struct setlk_try {
  int fd, cmd;
  void *lock;
} setlk_try;

static int try_setlk(void *p) {
  setlk_try *t = p;
  return iof__libc.fcntl(t->fd, t->cmd, t->lock);
}

int iof__compat_setlkw(int fd, int cmd, void *lock) {
  iof_fiber *f = iof__compat_fiber();
  if (!f) return iof__libc.fcntl(fd, cmd, lock);
  int try_cmd = cmd == F_OFD_SETLKW ? F_OFD_SETLK : F_SETLK;
#if defined(F_SETLKW64) && F_SETLKW64 != F_SETLKW
  if (cmd == F_SETLKW64) try_cmd = F_SETLK64;
#endif
  setlk_try t = {fd, try_cmd, lock};
  return until_taken(f, try_setlk, &t);
}
