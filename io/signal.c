/* Signal waits. libev lets one loop own a signal at a time (it asserts
 * otherwise), so a small table records which io_context holds each one. */
#include <iofiber/signal.h>

#include "io/io_internal.h"

#include <errno.h>
#include <signal.h>

static pthread_mutex_t owners_lock = PTHREAD_MUTEX_INITIALIZER;
static struct {
  iof_io_context *io;
  int waiters;
} owners[NSIG];

typedef struct sig_wait {
  iof_io_op op;
  ev_signal sig;
  int signo;
} sig_wait;

static void on_signal(struct ev_loop *loop, ev_signal *s, int revents) {
  (void)loop;
  (void)revents;
  sig_wait *sw = s->data;
  iof__io_complete(&sw->op, sw->signo);
}

static int arm(iof_io_op *op) {
  sig_wait *sw = (sig_wait *)op;
  iof_io_context *io = op->io;
  pthread_mutex_lock(&owners_lock);
  if (owners[sw->signo].io && owners[sw->signo].io != io) {
    pthread_mutex_unlock(&owners_lock);
    return -EBUSY;
  }
  owners[sw->signo].io = io;
  owners[sw->signo].waiters++;
  pthread_mutex_unlock(&owners_lock);
  ev_signal_init(&sw->sig, on_signal, sw->signo);
  sw->sig.data = sw;
  iof__rt_fd_enter(); /* libev may make its signalfd here */
  ev_signal_start(io->loop, &sw->sig);
  iof__rt_fd_leave();
  return 0;
}

static void disarm(iof_io_op *op) {
  sig_wait *sw = (sig_wait *)op;
  ev_signal_stop(op->io->loop, &sw->sig);
  pthread_mutex_lock(&owners_lock);
  if (--owners[sw->signo].waiters == 0) owners[sw->signo].io = NULL;
  pthread_mutex_unlock(&owners_lock);
}

int iof_signal_wait(iof_io_context *io, int signo) {
  /* Fault signals are refused: libev's handler would return into the
   * faulting instruction (a silent spin instead of a crash) and displace
   * the stack overflow detector's SIGSEGV handler. */
  if (!io || signo <= 0 || signo >= NSIG || signo == SIGKILL ||
      signo == SIGSTOP || signo == SIGSEGV || signo == SIGBUS ||
      signo == SIGILL || signo == SIGFPE)
    return -EINVAL;
  sig_wait sw;
  iof__io_op_init(&sw.op, io, arm, disarm, NULL);
  sw.signo = signo;
  return iof__io_wait(&sw.op, -1);
}
