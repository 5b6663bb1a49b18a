/* popen(3) and pclose(3) from a fiber.
 *
 * glibc's popen stream reads and writes its pipe through glibc's internal
 * calls, and its pclose waits for the child inside libc: a fiber reading a
 * command's output held its thread for as long as the command ran. Here
 * the child is started with compat's posix_spawn, the parent's end of the
 * pipe becomes a compat stream (stdio.c) and the wait is compat's waitpid,
 * so only the fiber waits. As glibc's: "/bin/sh -c cmd", the other popen
 * streams' fds closed in the child, 'e' for close-on-exec, and fclose of
 * the stream also waits for the child. Outside fibers: libc's popen. */
#include <iofiber/compat_io.h>

#include "compat/fd_table.h"
#include "compat/thread_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <spawn.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

typedef struct pstream {
  struct pstream *next;
  FILE *fp;
  int fd;
  pid_t pid;
  int status;   /* the child's, once the stream closed */
  bool closing; /* pclose holds the record and reads status */
} pstream;

static atomic_int lk;
static pstream *streams; /* under lk */

static pstream *unlink_by(FILE *fp, int fd) {
  pstream **pp = &streams, *p;
  while ((p = *pp) && !(fp ? p->fp == fp : p->fd == fd)) pp = &p->next;
  if (p) *pp = p->next;
  return p;
}

/* Waits for the child of a closed stream, as glibc's pclose: not a
 * cancellation point for it (a cancelled thread would leave the child
 * unreaped), not ended by handlers, and reaped even when the chain was
 * stopped (then plainly: its input or output is closed, so it ends). */
static pid_t reap(pid_t pid, int *st) {
  int old;
  (void)iof_compat_pthread_setcancelstate(PTHREAD_CANCEL_DISABLE, &old);
  pid_t w;
  do w = iof_compat_waitpid(pid, st, 0);
  while (w < 0 && errno == EINTR);
  if (w < 0 && errno == ECANCELED) {
    int e = errno;
    while (iof__libc.waitpid(pid, st, 0) < 0 && errno == EINTR)
      ;
    errno = e; /* pclose still says the chain was stopped */
  }
  (void)iof_compat_pthread_setcancelstate(old, NULL);
  return w;
}

/* fclose of a popen stream: close the pipe, then wait for the child (as
 * glibc's does). Keeps the record for pclose, which reads the status;
 * fclose itself returns the status, as glibc's. */
static int p_close(void *c) {
  int fd = (int)(intptr_t)c;
  iof__lk_lock(&lk);
  pstream *p = unlink_by(NULL, fd);
  iof__lk_unlock(&lk);
  int r = iof_compat_close(fd);
  if (!p) return r;
  int e = errno, st = -1;
  pid_t w = reap(p->pid, &st);
  p->status = w == p->pid ? st : -1;
  if (p->closing) {
    if (w < 0) e = errno;
    errno = e;
    return r;
  }
  r = p->status;
  free(p);
  if (w < 0) e = errno;
  errno = e;
  return r;
}

static FILE *fail(int e) {
  errno = e;
  return NULL;
}

FILE *iof_compat_popen(const char *cmd, const char *mode) {
  if (!mode) { /* glibc's reads it: a crash */
    errno = EINVAL;
    return NULL;
  }
  if (!iof__compat_fiber() || !cmd) return iof__libc.popen(cmd, mode);
  bool rd = false, wr = false, cloexec = false;
  for (const char *m = mode; *m; m++) {
    if (*m == 'r')
      rd = true;
    else if (*m == 'w')
      wr = true;
    else if (*m == 'e')
      cloexec = true;
    else
      return fail(EINVAL);
  }
  if (rd == wr) return fail(EINVAL); /* one direction, as glibc */
  pstream *p = calloc(1, sizeof *p);
  if (!p) return fail(ENOMEM);
  int fds[2];
  if (iof_compat_pipe2(fds, O_CLOEXEC) != 0) { /* new records */
    free(p);
    return NULL;
  }
  int mine = rd ? fds[0] : fds[1], theirs = rd ? fds[1] : fds[0];
  int target = rd ? STDOUT_FILENO : STDIN_FILENO;
  if (theirs == target) { /* 0 or 1 was closed: keep dup2 meaningful */
    int moved = iof_compat_fcntl(theirs, F_DUPFD_CLOEXEC, 3);
    if (moved >= 0) {
      iof_compat_close(theirs);
      theirs = moved;
    }
  }
  posix_spawn_file_actions_t fa;
  int e = posix_spawn_file_actions_init(&fa);
  if (!e) e = posix_spawn_file_actions_adddup2(&fa, theirs, target);
  /* From the list walk to the new stream's link, as glibc's list lock: a
   * popen on another thread in between would not close this stream's fd
   * in its child (nothing here suspends). */
  iof__lk_lock(&lk);
  for (pstream *q = streams; q && !e; q = q->next)
    e = posix_spawn_file_actions_addclose(&fa, q->fd);
  char *argv[] = {"sh", "-c", (char *)cmd, NULL};
  if (!e)
    e = iof_compat_posix_spawn(&p->pid, "/bin/sh", &fa, NULL, argv, environ);
  posix_spawn_file_actions_destroy(&fa);
  iof_compat_close(theirs);
  FILE *fp = NULL;
  if (!e) {
    if (!cloexec) iof__libc.fcntl(mine, F_SETFD, 0);
    fp = iof__compat_fd_stream(mine, rd ? "r" : "w", p_close);
    if (!fp) e = errno;
  }
  if (fp) {
    p->fp = fp;
    p->fd = mine;
    p->next = streams;
    streams = p;
  }
  iof__lk_unlock(&lk);
  if (!fp) {
    iof_compat_close(mine);
    if (p->pid > 0) /* the stream could not be made: reap the child */
      (void)reap(p->pid, NULL);
    free(p);
    return fail(e);
  }
  return fp;
}

int iof_compat_pclose(FILE *fp) {
  if (!fp) { /* glibc's pclose dereferences it */
    errno = EINVAL;
    return -1;
  }
  iof__lk_lock(&lk);
  pstream *p = streams;
  while (p && p->fp != fp) p = p->next;
  if (p) p->closing = true;
  iof__lk_unlock(&lk);
  if (!p) return iof__libc.pclose(fp); /* libc's own stream */
  (void)fclose(fp);                    /* p_close waits for the child */
  int st = p->status;
  free(p);
  return st;
}
