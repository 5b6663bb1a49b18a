/* The fds a program started from this process gets back in blocking mode
 * (see fd_table.h, iof__compat_child_fds): the runtime made them
 * non-blocking for its fibers' waits, but the program we start knows
 * nothing of that and reads its stdin plainly. */
#include "compat/fd_table.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <sys/stat.h>

typedef struct child_filter {
  bool inheritable_only, pipes_only;
  const posix_spawn_file_actions_t *fa; /* posix_spawn's, or NULL */
} child_filter;

/* glibc's record of one file action (its spawn_int.h; the layout has not
 * changed since glibc 2.1, new kinds were added at the end). Read only to
 * learn which of our fds a posix_spawn child ends up with. */
enum { GLIBC_SPAWN_CLOSE, GLIBC_SPAWN_DUP2, GLIBC_SPAWN_OPEN };
struct glibc_spawn_action {
  int tag;
  union {
    struct {
      int fd;
    } close;
    struct {
      int fd, newfd;
    } dup2;
    struct {
      int fd;
      char *path;
      int oflag;
      unsigned mode;
    } open;
  } u;
};

enum { CHILD_INHERITS, CHILD_COPY, CHILD_LOSES };

/* What fa does to our fd in the child: copies it onto another number
 * (dup2's source), takes it away (closed, or replaced by a dup2 or an
 * open), or nothing (it is inherited unless close-on-exec). */
static int child_view(const posix_spawn_file_actions_t *fa, int fd) {
  if (!fa || fa->__used < 0 || fa->__used > fa->__allocated) return 0;
  const struct glibc_spawn_action *a =
      (const struct glibc_spawn_action *)fa->__actions;
  int v = CHILD_INHERITS;
  for (int i = 0; a && i < fa->__used; i++) {
    if (a[i].tag == GLIBC_SPAWN_DUP2 && a[i].u.dup2.fd == fd) return CHILD_COPY;
    if ((a[i].tag == GLIBC_SPAWN_CLOSE && a[i].u.close.fd == fd) ||
        (a[i].tag == GLIBC_SPAWN_DUP2 && a[i].u.dup2.newfd == fd) ||
        (a[i].tag == GLIBC_SPAWN_OPEN && a[i].u.open.fd == fd))
      v = CHILD_LOSES;
  }
  return v;
}

/* Sockets above the standard streams stay non-blocking unless the child
 * gets them as a copy (posix_spawn's dup2): a child inherits a server's
 * accepted sockets without close-on-exec but does not use them, and the
 * server's fibers must keep waiting on them without blocking their thread
 * (after a system() a keep-alive connection's read held the whole thread
 * until the client spoke). posix_spawn's closes spare the fds the child
 * never holds (a pipe's other end). */
static void consider(int fd, const child_filter *f) {
  int view = child_view(f->fa, fd);
  if (view == CHILD_LOSES) return;
  if (f->inheritable_only && view != CHILD_COPY) {
    int fdfl = iof__libc.fcntl(fd, F_GETFD);
    if (fdfl < 0 || (fdfl & FD_CLOEXEC)) return;
  }
  struct stat sb;
  if (fstat(fd, &sb) != 0) return;
  if (f->pipes_only && !S_ISFIFO(sb.st_mode)) return;
  if (S_ISSOCK(sb.st_mode) && fd > 2 && view != CHILD_COPY) return;
  iof__fd_user_blocking(fd);
}

void iof__compat_child_fds(bool inheritable_only, bool pipes_only,
                           const posix_spawn_file_actions_t *fa) {
  child_filter f = {inheritable_only, pipes_only, fa};
  int e = errno;
  DIR *d = opendir("/proc/self/fd");
  if (!d) {
    errno = e;
    return;
  }
  int self = dirfd(d);
  struct dirent *de;
  while ((de = readdir(d))) {
    if (de->d_name[0] < '0' || de->d_name[0] > '9') continue;
    int fd = atoi(de->d_name);
    if (fd != self) consider(fd, &f);
  }
  closedir(d);
  errno = e;
}
