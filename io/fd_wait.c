/* Cancellable waits on arbitrary fds (see fd_wait.h). */
#include "io/fd_wait.h"

#include <errno.h>

static void on_ready(struct ev_loop *loop, ev_io *ew, int revents) {
  (void)loop;
  (void)revents;
  iof__wait_complete(ew->data, 0);
}

static int fw_arm(iof_wait *w) {
  iof__fd_wait *fw = (iof__fd_wait *)w;
  if (fw->on_arm) {
    int r = fw->on_arm(fw);
    if (r < 0) return r;
  }
  ev_io_init(&fw->ev, on_ready, fw->fd, fw->events);
  fw->ev.data = w;
  ev_io_start(w->io->loop, &fw->ev);
  return 0;
}

static void fw_disarm(iof_wait *w) {
  iof__fd_wait *fw = (iof__fd_wait *)w;
  ev_io_stop(w->io->loop, &fw->ev);
  if (fw->on_disarm) fw->on_disarm(fw);
}

int iof__fd_wait_run(iof__fd_wait *fw, iof_io_context *io,
                     int64_t deadline_ns) {
  if (!io) return -EINVAL;
  fw->w.io = io;
  fw->w.arm = fw_arm;
  fw->w.disarm = fw_disarm;
  if (deadline_ns < 0) {
    fw->w.timeout_ns = -1;
    fw->w.deadline_ns = 0;
  } else {
    int64_t left = deadline_ns - iof__now_ns();
    fw->w.timeout_ns = left > 0 ? left : 0;
    /* 0 would mean "from initiation": a deadline of 0 is long past. */
    fw->w.deadline_ns = deadline_ns ? deadline_ns : 1;
  }
  return iof__wait(&fw->w);
}

bool iof__fd_wait_cancel(iof__fd_wait *fw, int result) {
  return iof__wait_cancel(&fw->w, result);
}
