/* Signal waits. libev lets one loop own a signal at a time (it asserts
 * otherwise), so a small table records which io_context holds each one.
 * libev installs its handler when a signal's first watcher starts and
 * resets the disposition to SIG_DFL when its last one stops: the table
 * also keeps the disposition the program had before the first wait, put
 * back after the last, so that a handler of the program's own survives a
 * wait (a later signal would otherwise take the default action, e.g.
 * end the process). Starts and stops run under the table's lock, so that
 * another io_context taking the signal next saves the program's
 * disposition, not libev's. */
#include <iofiber/signal.h>

#include "io/io_internal.h"

#include <dlfcn.h>
#include <errno.h>
#include <signal.h>
#include <string.h>

static pthread_mutex_t owners_lock = PTHREAD_MUTEX_INITIALIZER;
static struct {
  iof_io_context *io;
  int waiters;
  struct sigaction saved; /* before the first waiter (waiters > 0) */
} owners[NSIG];

/* libev's signal handler, as seen once one of our loops installed it. */
static void (*libev_handler)(int);

/* Whether a libev loop that is none of ours watches signo now: libev
 * installs its handler while a loop watches a signal, and a second loop
 * starting on it makes libev assert (abort). Known when the handler is
 * the one seen before, or lies in a shared libev (a handler of the
 * program's cannot). A loop using signalfd installs none: not seen. */
static bool foreign_loop_holds(int signo) {
  struct sigaction now;
  if (sigaction(signo, NULL, &now) != 0 || (now.sa_flags & SA_SIGINFO))
    return false;
  void (*h)(int) = now.sa_handler;
  if (h == SIG_DFL || h == SIG_IGN) return false;
  if (h == libev_handler) return true;
  Dl_info in_h, in_ev;
  if (!dladdr((void *)(uintptr_t)h, &in_h) ||
      !dladdr((void *)(uintptr_t)ev_signal_start, &in_ev) ||
      in_h.dli_fbase != in_ev.dli_fbase || !in_ev.dli_fname)
    return false;
  const char *base = strrchr(in_ev.dli_fname, '/');
  base = base ? base + 1 : in_ev.dli_fname;
  return strncmp(base, "libev.", 6) == 0;
}

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
  if ((owners[sw->signo].io && owners[sw->signo].io != io) ||
      /* A host's loop may watch it itself: libev allows that one. */
      (!owners[sw->signo].io && io->own_loop &&
       foreign_loop_holds(sw->signo))) {
    pthread_mutex_unlock(&owners_lock);
    return -EBUSY;
  }
  bool first = owners[sw->signo].waiters++ == 0;
  if (first) sigaction(sw->signo, NULL, &owners[sw->signo].saved);
  owners[sw->signo].io = io;
  ev_signal_init(&sw->sig, on_signal, sw->signo);
  sw->sig.data = sw;
  iof__rt_fd_enter(); /* libev may make its signalfd here */
  ev_signal_start(io->loop, &sw->sig);
  iof__rt_fd_leave();
  struct sigaction now;
  if (first && io->own_loop && sigaction(sw->signo, NULL, &now) == 0 &&
      !(now.sa_flags & SA_SIGINFO) && now.sa_handler != SIG_DFL &&
      now.sa_handler != SIG_IGN)
    libev_handler = now.sa_handler;
  pthread_mutex_unlock(&owners_lock);
  return 0;
}

static void disarm(iof_io_op *op) {
  sig_wait *sw = (sig_wait *)op;
  int signo = sw->signo;
  pthread_mutex_lock(&owners_lock);
  if (owners[signo].waiters > 1) {
    owners[signo].waiters--;
    ev_signal_stop(op->io->loop, &sw->sig);
    pthread_mutex_unlock(&owners_lock);
    return;
  }
  /* The last one: libev's stop sets SIG_DFL, then the program's
   * disposition comes back. The signal is blocked on this thread in
   * between: one sent to the process then waits for the restored
   * disposition (unless another thread leaves it unblocked). */
  sigset_t one, old;
  sigemptyset(&one);
  sigaddset(&one, signo);
  pthread_sigmask(SIG_BLOCK, &one, &old);
  ev_signal_stop(op->io->loop, &sw->sig);
  /* Only after libev's reset: a loop the runtime embeds in may watch the
   * signal itself, and then libev keeps its handler. */
  struct sigaction now;
  if (sigaction(signo, NULL, &now) == 0 && !(now.sa_flags & SA_SIGINFO) &&
      now.sa_handler == SIG_DFL)
    sigaction(signo, &owners[signo].saved, NULL);
  pthread_sigmask(SIG_SETMASK, &old, NULL);
  owners[signo].waiters = 0;
  owners[signo].io = NULL;
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
  /* 32 and 33 below SIGRTMIN are glibc's own (cancellation, setxid): its
   * sigaction refuses them, so libev's handler never goes in and the wait
   * would never end. */
  if (signo >= 32 && signo < SIGRTMIN) return -EINVAL;
  sig_wait sw;
  iof__io_op_init(&sw.op, io, arm, disarm, NULL);
  sw.signo = signo;
  return iof__io_wait(&sw.op, -1);
}
