/* stdio streams on the fds fibers wait on (fdopen).
 *
 * glibc's own streams read and write through its internal calls, which no
 * interposer reaches: a fiber in fgets on a socket would hold its thread.
 * fdopen of an fd the runtime waits on (a socket, a pipe) therefore makes
 * a cookie stream whose reads and writes are compat's: a fiber waiting in
 * fgets, fread or an fflush suspends, and a plain thread blocks as usual.
 * The cookie holds the fd and the FILE; glibc's FILE keeps the fd number
 * for fileno. Other fds (files,
 * terminals, an fd with the program's own O_NONBLOCK) get glibc's stream. */
#include <iofiber/compat_io.h>

#include "compat/fd_table.h"
#include "compat/thread_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdio_ext.h>
#include <stdlib.h>
#include <unistd.h>

typedef struct stream {
  int fd;
  FILE *fp;
  cookie_close_function_t *on_close; /* given the fd as its cookie */
} stream;

static int close_fd(void *c) {
  return iof_compat_close((int)(intptr_t)c);
}

#ifdef __GLIBC__
/* glibc's FILE lock (libio's _IO_lock_t; FILE's _lock points to it). */
typedef struct libio_lock {
  int lock, cnt;
  void *owner;
} libio_lock;

/* A fiber thread cancelled in a read or write of the stream leaves by a
 * longjmp past glibc's own cleanup, which would release the stream's
 * lock (fgets, fread and fflush hold it around the cookie call): release
 * it here then, if this OS thread holds it (fibers share its descriptor),
 * or the next thread's fgets on the stream waits forever. */
static void unlock_held(void *p) {
  FILE *fp = p;
  libio_lock *l = (libio_lock *)fp->_lock;
  if (l && l->cnt > 0 && l->owner == (void *)iof__libc.pthread_self())
    funlockfile(fp);
}
#define GUARD_PUSH(g, s)                                                       \
  bool pushed = iof__cthread_guard_push(g, unlock_held, (s)->fp)
#define GUARD_POP(g)                                                           \
  if (pushed) iof__cthread_guard_pop(g)
#else
#define GUARD_PUSH(g, s) (void)(g)
#define GUARD_POP(g) (void)(g)
#endif

static ssize_t s_read(void *c, char *buf, size_t n) {
  stream *s = c;
  iof__unwind g;
  GUARD_PUSH(&g, s);
  ssize_t r = iof_compat_read(s->fd, buf, n);
  GUARD_POP(&g);
  return r;
}

/* glibc takes a short count for an error: write it all, or up to the
 * error (errno set). */
static ssize_t s_write(void *c, const char *buf, size_t n) {
  stream *s = c;
  iof__unwind g;
  GUARD_PUSH(&g, s);
  size_t done = 0;
  while (done < n) {
    ssize_t r = iof_compat_write(s->fd, buf + done, n - done);
    if (r <= 0) break;
    done += (size_t)r;
  }
  GUARD_POP(&g);
  return (ssize_t)done;
}

/* As glibc's stream does it: the fd's lseek (ESPIPE on sockets, pipes). */
static int s_seek(void *c, off64_t *off, int whence) {
  off64_t r = lseek64(((stream *)c)->fd, *off, whence);
  if (r < 0) return -1;
  *off = r;
  return 0;
}

static int s_close(void *c) {
  stream *s = c;
  int r = s->on_close((void *)(intptr_t)s->fd);
  int e = errno;
  free(s);
  errno = e;
  return r;
}

FILE *iof__compat_fd_stream(int fd, const char *m,
                            cookie_close_function_t *on_close) {
  stream *s = malloc(sizeof *s);
  if (!s) {
    errno = ENOMEM;
    return NULL;
  }
  s->fd = fd;
  s->on_close = on_close ? on_close : close_fd;
  cookie_io_functions_t funcs = {s_read, s_write, s_seek, s_close};
  FILE *f = fopencookie(s, m, funcs);
  if (!f) {
    free(s);
    return NULL;
  }
  s->fp = f;
#ifdef __GLIBC__
  f->_fileno = fd; /* fileno(); glibc's cookie I/O never uses it */
#endif
  return f;
}

/* Whether fibers wait on fd (the runtime made it non-blocking; a fiber
 * asking first teaches the table, as its first read would): the test
 * compat's reads and writes begin with. */
static bool fibers_wait_on(int fd) {
  iof__fd_op op;
  return iof__fd_begin(&op, fd, EV_READ);
}

static FILE *fail(int e) {
  errno = e;
  return NULL;
}

FILE *iof_compat_fdopen(int fd, const char *mode) {
  if (!mode) { /* glibc's reads it: a crash */
    errno = EINVAL;
    return NULL;
  }
  if (!fibers_wait_on(fd)) return iof__libc.fdopen(fd, mode);
  /* fdopen's checks, as glibc's: the mode, then the fd's access mode. */
  int want_rd, want_wr, append = 0;
  switch (mode[0]) {
  case 'r':
    want_rd = 1, want_wr = 0;
    break;
  case 'w':
    want_rd = 0, want_wr = 1;
    break;
  case 'a':
    want_rd = 0, want_wr = 1, append = 1;
    break;
  default:
    return fail(EINVAL);
  }
  for (int i = 1; i < 5 && mode[i]; i++)
    if (mode[i] == '+') {
      want_rd = want_wr = 1;
      break;
    }
  int fl = iof__libc.fcntl(fd, F_GETFL);
  if (fl < 0) return NULL;
  int acc = fl & O_ACCMODE;
  if ((acc == O_RDONLY && want_wr) || (acc == O_WRONLY && want_rd))
    return fail(EINVAL);
  if (append && !(fl & O_APPEND) &&
      iof__libc.fcntl(fd, F_SETFL, fl | O_APPEND) != 0)
    return NULL;
  const char *m = want_rd && want_wr ? (append ? "a+" : "r+")
                  : want_rd          ? "r"
                  : append           ? "a"
                                     : "w";
  return iof__compat_fd_stream(fd, m, NULL);
}

/* ---- reads from glibc's own streams ------------------------------------ */

int iof_compat_fwait(FILE *fp) {
  if (!fp || !iof__compat_fiber()) return 0;
#ifdef __GLIBC__
  if (fp->_IO_read_ptr < fp->_IO_read_end) return 0; /* bytes buffered */
#endif
  if (!__freadable(fp)) return 0; /* the call fails by itself */
  int fd = fileno(fp);
  return fd < 0 ? 0 : iof__fd_wait_first(fd, EV_READ);
}

/* glibc crashes on a NULL stream or buffer; these say EINVAL instead. */
static bool bad(bool cond) {
  if (cond) errno = EINVAL;
  return cond;
}

char *iof_compat_fgets(char *s, int n, FILE *fp) {
  if (bad(!s || !fp) || iof_compat_fwait(fp) < 0) return NULL;
  return iof__libc.fgets(s, n, fp);
}

ssize_t iof_compat_getline(char **line, size_t *cap, FILE *fp) {
  if (bad(!line || !cap || !fp) || iof_compat_fwait(fp) < 0) return -1;
  return iof__libc.getline(line, cap, fp);
}

ssize_t iof_compat_getdelim(char **line, size_t *cap, int delim, FILE *fp) {
  if (bad(!line || !cap || !fp) || iof_compat_fwait(fp) < 0) return -1;
  return iof__libc.getdelim(line, cap, delim, fp);
}

int iof_compat_fgetc(FILE *fp) {
  if (bad(!fp) || iof_compat_fwait(fp) < 0) return EOF;
  return iof__libc.fgetc(fp);
}

int iof_compat_getc(FILE *fp) {
  if (bad(!fp) || iof_compat_fwait(fp) < 0) return EOF;
  return iof__libc.getc(fp);
}

int iof_compat_getchar(void) {
  return iof_compat_getc(stdin);
}

size_t iof_compat_fread(void *p, size_t size, size_t n, FILE *fp) {
  if (bad(!fp || (!p && size && n)) || iof_compat_fwait(fp) < 0) return 0;
  return iof__libc.fread(p, size, n, fp);
}
