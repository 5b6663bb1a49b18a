/* Cancellable waits on arbitrary fds (see fd_wait.h). */
#include "io/fd_wait.h"

#include <errno.h>
#include <stddef.h>

static void on_ready(struct ev_loop *loop, ev_io *ew, int revents) {
  (void)loop;
  iof__fd_wait *fw = (iof__fd_wait *)((char *)ew - offsetof(iof__fd_wait, ev));
  if (revents & EV_ERROR) fw->failed = true;
  iof__io_complete(ew->data, 0);
}

static int arm_one(iof__fd_wait *fw, iof_io_op *op) {
  /* The loop's own descriptors (its epoll fd, its wake-up fd) are as if
   * not open: epoll refuses to watch an epoll fd in itself, and libev
   * asserts when it does. */
  if (iof__rt_fd_owned(fw->fd)) return -EBADF;
  if (fw->on_arm) {
    int r = fw->on_arm(fw);
    if (r < 0) return r;
  }
  ev_io_init(&fw->ev, on_ready, fw->fd, fw->events);
  if (fw->same_file) fw->ev.events &= ~EV__IOFDSET;
  fw->ev.data = op;
  ev_io_start(op->io->loop, &fw->ev);
  return 0;
}

static void disarm_one(iof__fd_wait *fw, iof_io_op *op) {
  ev_io_stop(op->io->loop, &fw->ev);
  if (fw->on_disarm) fw->on_disarm(fw);
}

static int fw_arm(iof_io_op *op) {
  return arm_one((iof__fd_wait *)op, op);
}

static void fw_disarm(iof_io_op *op) {
  disarm_one((iof__fd_wait *)op, op);
}

int iof__fd_wait_run(iof__fd_wait *fw, iof_io_context *io,
                     int64_t deadline_ns) {
  if (!io) return -EINVAL;
  iof__io_op_init(&fw->op, io, fw_arm, fw_disarm, NULL);
  fw->op.dir = fw->events & EV_READ ? EV_READ : fw->events & EV_WRITE;
  return iof__io_wait(&fw->op, deadline_ns);
}

/* The record of a wait on several fds is the lead's op; its obj (what the
 * wait is on) is the set. */
typedef struct any_set {
  iof__fd_wait **fws;
  int n;
} any_set;

static int any_arm(iof_io_op *op) {
  any_set *set = op->obj;
  for (int i = 0; i < set->n; i++) {
    int r = arm_one(set->fws[i], op);
    if (r < 0) {
      while (i-- > 0) disarm_one(set->fws[i], op);
      return r;
    }
  }
  return 0;
}

static void any_disarm(iof_io_op *op) {
  any_set *set = op->obj;
  for (int i = 0; i < set->n; i++) disarm_one(set->fws[i], op);
}

int iof__fd_wait_any(iof__fd_wait **fws, int n, iof_io_context *io,
                     int64_t deadline_ns) {
  if (!io || n < 1) return -EINVAL;
  if (n == 1) return iof__fd_wait_run(fws[0], io, deadline_ns);
  any_set set = {fws, n};
  /* The others' ops are no records, but hooks read which loop they are
   * armed on from them. */
  for (int i = 0; i < n; i++) {
    fws[i]->lead = fws[0];
    fws[i]->op.io = io;
  }
  iof__io_op_init(&fws[0]->op, io, any_arm, any_disarm, &set);
  fws[0]->op.dir = EV_READ;
  return iof__io_wait(&fws[0]->op, deadline_ns);
}

bool iof__fd_wait_cancel(iof__fd_wait *fw, int result) {
  return iof__io_complete(&(fw->lead ? fw->lead : fw)->op, result);
}
