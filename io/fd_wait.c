/* Cancellable waits on arbitrary fds (see fd_wait.h). */
#include "io/fd_wait.h"

#include <errno.h>

static void on_ready(struct ev_loop *loop, ev_io *ew, int revents) {
  (void)loop;
  if (revents & EV_ERROR) ((iof__fd_wait *)ew->data)->failed = true;
  iof__io_complete(ew->data, 0);
}

static int fw_arm(iof_io_op *op) {
  iof__fd_wait *fw = (iof__fd_wait *)op;
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

static void fw_disarm(iof_io_op *op) {
  iof__fd_wait *fw = (iof__fd_wait *)op;
  ev_io_stop(op->io->loop, &fw->ev);
  if (fw->on_disarm) fw->on_disarm(fw);
}

int iof__fd_wait_run(iof__fd_wait *fw, iof_io_context *io,
                     int64_t deadline_ns) {
  if (!io) return -EINVAL;
  iof__io_op_init(&fw->op, io, fw_arm, fw_disarm, NULL);
  fw->op.dir = fw->events & EV_READ ? EV_READ : fw->events & EV_WRITE;
  return iof__io_wait(&fw->op, deadline_ns);
}

bool iof__fd_wait_cancel(iof__fd_wait *fw, int result) {
  return iof__io_complete(&fw->op, result);
}
