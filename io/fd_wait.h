/* A wait on any pollable fd that a third party can end (compat's close
 * wakes waiters with -EBADF). Not installed.
 *
 * An iof_io_op on the one wait record like every io/ wait: one ev_io
 * started by arm on the io_context's thread, stopped by disarm. The
 * optional hooks run inside arm and disarm (io's thread, the fiber
 * suspended, the record published), so an owner can keep its own list of
 * waiters and refuse a wait whose fd went away. */
#ifndef IOF_IO_FD_WAIT_H
#define IOF_IO_FD_WAIT_H

#include "io/io_internal.h"

typedef struct iof__fd_wait iof__fd_wait;

struct iof__fd_wait {
  iof_io_op op;
  ev_io ev;
  int fd;
  int events; /* EV_READ and/or EV_WRITE */
  /* Set by on_arm when the loop already watched this fd for the same file
   * (its owner knows the number was not reused since): libev then keeps
   * its kernel registration instead of re-registering the fd, which in the
   * usual stop-then-start within one loop round is a system call saved. */
  bool same_file;
  bool failed; /* libev could not watch the fd (EV_ERROR): it was woken */
  /* In a wait on several fds (iof__fd_wait_any): the first one, whose op
   * is the wait's record; NULL otherwise. */
  iof__fd_wait *lead;
  /* Before the watcher starts; a result < 0 refuses the wait (returned). */
  int (*on_arm)(iof__fd_wait *fw);
  /* After the watcher stopped (only if on_arm accepted). */
  void (*on_disarm)(iof__fd_wait *fw);
};

/* In a launched fiber: suspends until fd is ready for fw->events, the
 * monotonic deadline_ns passes (< 0: none), or a cancellation. The caller
 * sets fd, events and the hooks (others zero). 0 ready; -ETIMEDOUT;
 * -ECANCELED (stop token, shutdown); what on_arm refused with or
 * iof__fd_wait_cancel gave; -EPERM outside a launched fiber. */
IOF_HIDDEN int iof__fd_wait_run(iof__fd_wait *fw, iof_io_context *io,
                                int64_t deadline_ns);

/* iof__fd_wait_run on n fds at once (1 <= n): ends when any of them is
 * ready, set up as for one wait each (fd, events, hooks); fws[0]'s op is
 * the record (cancel any of them to end it). If an on_arm refuses, the
 * fds armed before it are disarmed and its result returned. */
IOF_HIDDEN int iof__fd_wait_any(iof__fd_wait **fws, int n, iof_io_context *io,
                                int64_t deadline_ns);

/* From any thread, for a wait that on_arm accepted (so it is published):
 * ends it with `result`. False if it had already completed. */
IOF_HIDDEN bool iof__fd_wait_cancel(iof__fd_wait *fw, int result);

#endif
