/* syscall(2) made from a fiber: the two numbers compat knows (futex.c for
 * SYS_futex; a fork-like SYS_clone), every other one plain. */
#include "compat/fd_table.h"
#include "compat/thread_internal.h"

#include <iofiber/compat_io.h>
#include <iofiber/compat_thread.h>

#include <sched.h>
#include <stdarg.h>
#include <stdint.h>
#include <sys/syscall.h>
#include <unistd.h>

/* All six arguments are read, whatever the number takes, as glibc's
 * syscall does: on x86-64 the sixth comes from the caller's stack, which
 * ASan would report when the caller passed fewer (a redzone there). */
__attribute__((no_sanitize_address)) long iof_compat_syscall(long n, ...) {
  va_list ap;
  va_start(ap, n);
  long a[6];
  for (int i = 0; i < 6; i++) a[i] = va_arg(ap, long);
  va_end(ap);
  if (n == SYS_futex)
    return iof_compat_futex((uint32_t *)a[0], (int)a[1], (uint32_t)a[2],
                            (const struct timespec *)a[3], (uint32_t *)a[4],
                            (uint32_t)a[5]);
  /* A clone without CLONE_VM runs no fork handlers: its child is told
   * here, as fork's is (clone3's flags sit behind a pointer the kernel
   * checks; read here they could fault in our code: passed through). */
  bool forklike = n == SYS_clone &&
                  !((unsigned long)a[0] & (CLONE_VM | CLONE_THREAD)) &&
                  iof__compat_fiber();
  long r = iof__syscall()(n, a[0], a[1], a[2], a[3], a[4], a[5]);
  if (forklike && r == 0) iof_compat_fork_child();
  return r;
}
