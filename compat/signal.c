/* Signals and the blocking calls of fibers (see signal_internal.h): the
 * handlers' trampolines, the interruption of main's waits, and pause,
 * sigsuspend and the sigwait family in fibers. */
#include <iofiber/compat_io.h>
#include <iofiber/timer.h>

#include "compat/fd_table.h"
#include "compat/signal_internal.h"
#include "compat/sigmask_internal.h"
#include "compat/thread_internal.h"

#include <errno.h>
#include <stdatomic.h>
#include <string.h>
#include <unistd.h>
#include <sys/signalfd.h>

/* Handler runs, counted: any handler, and those without SA_RESTART. */
static atomic_uint gen_any, gen_norestart;

/* main's wait. Written by main's fiber, read by on_wake: both on main's io
 * thread. `waiting` is the one field a handler (any thread) reads. */
static iof_fiber *_Atomic main_fiber;
static struct {
  iof_io_op *op;
  bool restartable;
  unsigned snap_any, snap_norestart;
} mw;
static atomic_bool waiting;

/* Handlers deferred to main (see run_deferred), per signal: 0 none, 1
 * being recorded or taken, 2 ready with its siginfo. A second delivery
 * while one waits merges with it, as a pending standard signal does. */
static atomic_int deferred[NSIG];
static siginfo_t deferred_info[NSIG];
/* The handler as the trampoline found it: SA_RESETHAND may have reset the
 * table since. */
static void *deferred_handler[NSIG];
static int deferred_flags[NSIG];
static void run_deferred(void);

/* The wake-up of main's io thread: started on the loop of main's first
 * interruptible wait (unreferenced: it never keeps a loop running). */
static ev_async wake;
static struct ev_loop *_Atomic wake_loop;

/* main's signal mask, in its thread record (heap memory a handler may
 * read without touching main's stack). */
static _Atomic uint64_t *_Atomic main_mask;

void iof__compat_set_main(iof_fiber *f) {
  atomic_store(&main_mask, f ? iof__cthread_sigmask(f) : NULL);
  main_fiber = f;
}

/* Whether main's own mask blocks sig: then a handler for it neither runs
 * in main nor interrupts main's wait; it runs where the signal landed. */
static bool main_blocks(int sig) {
  _Atomic uint64_t *m = atomic_load(&main_mask);
  return m && sig > 0 && sig <= 64 &&
         (atomic_load_explicit(m, memory_order_relaxed) >> (sig - 1) & 1);
}

static unsigned gen_for(bool restartable) {
  return atomic_load(restartable ? &gen_norestart : &gen_any);
}

static void on_wake(struct ev_loop *loop, ev_async *w, int revents) {
  (void)loop;
  (void)w;
  (void)revents;
  /* A stale wake-up finds no wait, or one that began after the handler.
   * Any handler ends the wait: a deferred one must run now, and
   * iof__compat_intr_leave decides between EINTR and a restart. */
  if (mw.op && atomic_load(&gen_any) != mw.snap_any)
    (void)iof__io_complete(mw.op, -EINTR);
}

static void watch(iof_io_context *io) {
  if (atomic_load(&wake_loop) == io->loop) return;
  /* A new iof_main: the last loop is gone or no longer main's. */
  ev_async_init(&wake, on_wake);
  iof__rt_fd_enter();
  ev_async_start(io->loop, &wake);
  iof__rt_fd_leave();
  ev_unref(io->loop);
  atomic_store(&wake_loop, io->loop);
}

bool iof__compat_intr_enter(iof_fiber *f, iof_io_op *op, bool restartable) {
  if (!f) return false;
  /* A fiber thread, main too: pthread_kill interrupts it (see thread.c).
   * Signals sent while it ran are handled now, before the call, as the
   * kernel runs a handler before the thread's next system call. */
  uint64_t pending;
  bool reg = iof__cthread_intr_enter(f, op, restartable, &pending);
  if (pending) (void)iof__compat_run_pending(pending);
  if (f != main_fiber) return reg;
  watch(iof__compat_io(f));
  /* waiting before the snapshot: a handler either ran before it (and
   * does not interrupt this call, as with the kernel) or sees waiting. */
  atomic_store(&waiting, true);
  mw.op = op;
  mw.restartable = restartable;
  mw.snap_any = atomic_load(&gen_any);
  mw.snap_norestart = atomic_load(&gen_norestart);
  return true;
}

/* Whether handlers run after a wait (what iof__compat_run_pending says)
 * end it with EINTR rather than restart it. */
static bool interrupts(int ran, bool restartable) {
  return ran & (restartable ? IOF__RAN_NORESTART : IOF__RAN_ANY);
}

int iof__compat_intr_leave(bool registered, int r) {
  if (!registered) return r;
  iof_fiber *f = iof_fiber_current();
  bool restartable = false;
  uint64_t pending = iof__cthread_intr_leave(f, &restartable);
  if (f != main_fiber) {
    int ran = iof__compat_run_pending(pending);
    if (r == -EINTR && !interrupts(ran, restartable))
      return 0; /* only SA_RESTART handlers, or none: the call goes on */
    return r;
  }
  unsigned snap = restartable ? mw.snap_norestart : mw.snap_any;
  mw.op = NULL;
  /* Cleared before the deferred handlers are taken: a handler now either
   * finds main not waiting and runs where it is, or is taken here. */
  atomic_store(&waiting, false);
  run_deferred();
  int ran = iof__compat_run_pending(pending); /* pthread_kill's */
  if (r == -EINTR && gen_for(restartable) == snap &&
      !interrupts(ran, restartable))
    return 0; /* only SA_RESTART handlers: the call goes on */
  return r;
}

void iof__compat_signal_ran(int sig, int flags) {
  if (main_blocks(sig)) return; /* main would not have been interrupted */
  int saved = errno;
  atomic_fetch_add(&gen_any, 1);
  if (!(flags & SA_RESTART)) atomic_fetch_add(&gen_norestart, 1);
  struct ev_loop *l = atomic_load(&wake_loop);
  if (l && atomic_load(&waiting)) ev_async_send(l, &wake);
  errno = saved;
}

unsigned iof__compat_intr_snap(iof_fiber *f, bool restartable) {
  return f && f == main_fiber ? gen_for(restartable) : 0;
}

bool iof__compat_intr_since(iof_fiber *f, unsigned snap, bool restartable) {
  return f && f == main_fiber && gen_for(restartable) != snap;
}

int iof__compat_intr_sleep(iof_fiber *f, int64_t deadline_ns,
                           bool restartable) {
  if (f != main_fiber && deadline_ns >= 0)
    return iof__cthread_sleep(f, deadline_ns); /* a cancellation point */
  for (;;) {
    iof_io_op op;
    iof__io_op_init(&op, iof__compat_io(f), NULL, NULL, NULL);
    bool reg = iof__compat_intr_enter(f, &op, restartable);
    int r = iof__compat_intr_leave(reg, iof__io_wait(&op, deadline_ns));
    if (r != 0) return r; /* 0: no handler, or SA_RESTART ones: go on */
  }
}

int iof__compat_admit_fd(const sigset_t *mask) {
  if (!mask) return -1;
  sigset_t now, in;
  if (iof__libc.pthread_sigmask(SIG_BLOCK, NULL, &now) != 0) return -1;
  sigemptyset(&in);
  bool any = false;
  for (int s = 1; s < NSIG; s++)
    if (sigismember(&now, s) == 1 && sigismember(mask, s) == 0 &&
        s != SIGKILL && s != SIGSTOP) {
      sigaddset(&in, s);
      any = true;
    }
  return any ? signalfd(-1, &in, SFD_NONBLOCK | SFD_CLOEXEC) : -1;
}

/* ---- handlers --------------------------------------------------------------
 * Every handler installed through sigaction/signal runs inside a
 * trampoline that marks the thread as in a handler (its calls are then the
 * plain, async-signal-safe ones, iof__compat_fiber) and after the handler
 * reports the run. A handler left with siglongjmp leaves the mark set:
 * that thread's later calls stay plain (documented). */

_Thread_local int iof__compat_in_handler
    __attribute__((tls_model("initial-exec")));
static void *_Atomic user_handler[NSIG];
static atomic_int user_flags[NSIG]; /* sa_flags, or -1: the runtime's */
static sigset_t user_mask[NSIG];    /* sa_mask, for a deferred run */
static void (*_Atomic marker)(int);

void iof__compat_handler_marker(void (*mark)(int)) {
  atomic_store(&marker, mark);
}

static void enter(void) {
  iof__compat_in_handler++;
  void (*m)(int) = atomic_load_explicit(&marker, memory_order_relaxed);
  if (m) m(1);
}

_Thread_local unsigned iof__compat_norestart_runs
    __attribute__((tls_model("initial-exec")));

static void leave(int sig, int fl) {
  if (fl != -1) iof__compat_signal_ran(sig, fl);
  if (fl != -1 && !(fl & SA_RESTART)) iof__compat_norestart_runs++;
  void (*m)(int) = atomic_load_explicit(&marker, memory_order_relaxed);
  if (m) m(-1);
  iof__compat_in_handler--;
}

/* A handler for main, while main waits in a compat call, runs in main
 * once its wait has ended (iof__compat_intr_leave), as the kernel runs a
 * handler in the thread whose system call it interrupts: not on whatever
 * stack the signal found (the event loop's, another fiber's), so that a
 * siglongjmp out of it lands in main's own frames. Faults and abort()
 * run at once. True when deferred. */
static bool defer(int sig, const siginfo_t *si, void *h, int fl) {
  if (sig == SIGSEGV || sig == SIGBUS || sig == SIGFPE || sig == SIGILL ||
      sig == SIGTRAP || sig == SIGSYS || sig == SIGABRT)
    return false;
  if (!h || fl == -1 || !atomic_load(&waiting) || main_blocks(sig))
    return false;
  int none = 0;
  if (!atomic_compare_exchange_strong(&deferred[sig], &none, 1))
    /* One is recorded for main: merged with it, as with a pending signal;
     * unless main is taking it right now, then this one runs here. */
    return atomic_load(&waiting);
  if (si) {
    deferred_info[sig] = *si;
  } else {
    memset(&deferred_info[sig], 0, sizeof deferred_info[sig]);
    deferred_info[sig].si_signo = sig;
  }
  deferred_handler[sig] = h;
  deferred_flags[sig] = fl;
  atomic_store(&deferred[sig], 2);
  iof__compat_signal_ran(sig, fl);
  if (atomic_load(&waiting)) return true;
  /* main left its wait meanwhile: whoever takes the record runs it. */
  int ready = 2;
  return !atomic_compare_exchange_strong(&deferred[sig], &ready, 0);
}

/* The handler for sig and its flags, as a delivery takes them: under
 * SA_RESETHAND the kernel has reset the disposition, the table follows
 * (unless a new handler came meanwhile). */
static void *take_handler(int sig, int *fl) {
  void *h = atomic_load_explicit(&user_handler[sig], memory_order_acquire);
  *fl = atomic_load_explicit(&user_flags[sig], memory_order_relaxed);
  if (h && *fl != -1 && (*fl & SA_RESETHAND)) {
    void *expect = h;
    (void)atomic_compare_exchange_strong(&user_handler[sig], &expect, NULL);
  }
  return h;
}

static void tramp_plain(int sig) {
  int fl;
  void *h = take_handler(sig, &fl);
  if (defer(sig, NULL, h, fl)) return;
  enter();
  if (h) ((void (*)(int))h)(sig);
  leave(sig, fl);
}

static void tramp_info(int sig, siginfo_t *si, void *uc) {
  int fl;
  void *h = take_handler(sig, &fl);
  if (defer(sig, si, h, fl)) return;
  enter();
  if (h) ((void (*)(int, siginfo_t *, void *))h)(sig, si, uc);
  leave(sig, fl);
}

/* Runs the program's handler for s in plain fiber context, with its
 * sa_mask (and s itself, unless SA_NODEFER) blocked as the kernel would;
 * its flags, or -1 when it has none. Its calls may even suspend; one that
 * leaves with siglongjmp restores the mask its sigsetjmp saved. ucontext
 * is NULL: there is no interrupted machine context to show. */
static int run_user(int s, siginfo_t *si, void *h, int fl) {
  if (!h || fl == -1) return -1;
  sigset_t m = user_mask[s], old;
  if (!(fl & SA_NODEFER)) sigaddset(&m, s);
  iof__libc.pthread_sigmask(SIG_BLOCK, &m, &old);
  uint64_t vold;
  bool own = iof__sigmask_save(&vold);
  int e = errno;
  if (fl & SA_SIGINFO)
    ((void (*)(int, siginfo_t *, void *))h)(s, si, NULL);
  else
    ((void (*)(int))h)(s);
  errno = e;
  if (own) iof__sigmask_restore(vold); /* what the handler changed */
  iof__libc.pthread_sigmask(SIG_SETMASK, &old, NULL);
  return fl;
}

/* In main, after its wait: the handlers deferred to it. */
static void run_deferred(void) {
  for (int s = 1; s < NSIG; s++) {
    if (atomic_load_explicit(&deferred[s], memory_order_relaxed) != 2) continue;
    int ready = 2;
    if (!atomic_compare_exchange_strong(&deferred[s], &ready, 1)) continue;
    siginfo_t si = deferred_info[s];
    void *h = deferred_handler[s];
    int fl = deferred_flags[s];
    atomic_store(&deferred[s], 0);
    (void)run_user(s, &si, h, fl);
  }
}

int iof__compat_disposition(int sig) {
  if (sig <= 0 || sig >= NSIG) return IOF__SIG_IGNORE;
  if (atomic_load_explicit(&user_handler[sig], memory_order_acquire) &&
      atomic_load_explicit(&user_flags[sig], memory_order_relaxed) != -1)
    return IOF__SIG_HANDLER;
  struct sigaction cur;
  iof__libc_init();
  if (iof__libc.sigaction(sig, NULL, &cur) != 0) return IOF__SIG_IGNORE;
  if (!(cur.sa_flags & SA_SIGINFO) && cur.sa_handler == SIG_IGN)
    return IOF__SIG_IGNORE;
  if (!(cur.sa_flags & SA_SIGINFO) && cur.sa_handler == SIG_DFL &&
      (sig == SIGCHLD || sig == SIGURG || sig == SIGWINCH))
    return IOF__SIG_IGNORE; /* their default action is to ignore them */
  return IOF__SIG_PROCESS;
}

int iof__compat_run_handler(int sig) {
  switch (iof__compat_disposition(sig)) {
  case IOF__SIG_IGNORE:
    return -1;
  case IOF__SIG_PROCESS:
    /* The default action (or a handler behind compat's back) is the
     * process's: the kernel's own delivery applies it. */
    (void)kill(getpid(), sig);
    return -1;
  }
  int fl;
  void *h = take_handler(sig, &fl);
  if (h && fl != -1 && (fl & SA_RESETHAND)) {
    /* The kernel resets the disposition before the handler runs. */
    struct sigaction dfl;
    memset(&dfl, 0, sizeof dfl);
    dfl.sa_handler = SIG_DFL;
    (void)iof__libc.sigaction(sig, &dfl, NULL);
  }
  siginfo_t si;
  memset(&si, 0, sizeof si);
  si.si_signo = sig;
  si.si_code = SI_TKILL;
  si.si_pid = getpid();
  si.si_uid = getuid();
  return run_user(sig, &si, h, fl);
}

int iof__compat_run_pending(uint64_t pending) {
  int ran = 0;
  for (int s = 1; pending && s <= 64; s++) {
    if (!(pending & ((uint64_t)1 << (s - 1)))) continue;
    pending &= ~((uint64_t)1 << (s - 1));
    int fl = iof__compat_run_handler(s);
    if (fl != -1) ran |= IOF__RAN_ANY;
    if (fl != -1 && !(fl & SA_RESTART)) ran |= IOF__RAN_NORESTART;
  }
  return ran;
}

static bool is_tramp(const struct sigaction *sa) {
  return (sa->sa_flags & SA_SIGINFO) ? sa->sa_sigaction == tramp_info
                                     : sa->sa_handler == tramp_plain;
}

int iof_compat_sigaction(int sig, const struct sigaction *act,
                         struct sigaction *old) {
  bool ours = sig > 0 && sig < NSIG;
  void *prev =
      ours ? atomic_load_explicit(&user_handler[sig], memory_order_acquire)
           : NULL;
  int prev_flags = ours ? atomic_load(&user_flags[sig]) : 0;
  struct sigaction mine;
  bool wrapped = false;
  if (act && ours) {
    void *h = (act->sa_flags & SA_SIGINFO) ? (void *)act->sa_sigaction
                                           : (void *)act->sa_handler;
    if (h != (void *)SIG_DFL && h != (void *)SIG_IGN && h != (void *)SIG_ERR) {
      mine = *act;
      if (mine.sa_flags & SA_SIGINFO)
        mine.sa_sigaction = tramp_info;
      else
        mine.sa_handler = tramp_plain;
      /* libev's handlers (ev_signal) are the runtime's, not the program's:
       * they interrupt nothing. */
      user_mask[sig] = act->sa_mask;
      atomic_store(&user_flags[sig],
                   iof__rt_fd_scope() ? -1 : (int)act->sa_flags);
      atomic_store_explicit(&user_handler[sig], h, memory_order_release);
      act = &mine;
      wrapped = true;
    }
  }
  iof__libc_init(); /* a constructor may come first */
  int r = iof__libc.sigaction(sig, act, old);
  if (r != 0 && wrapped) {
    atomic_store(&user_flags[sig], prev_flags);
    atomic_store_explicit(&user_handler[sig], prev, memory_order_release);
  }
  if (r == 0 && act && ours && !wrapped) /* SIG_DFL, SIG_IGN */
    atomic_store_explicit(&user_handler[sig], NULL, memory_order_release);
  if (r == 0 && old && ours && prev && is_tramp(old)) {
    if (old->sa_flags & SA_SIGINFO)
      old->sa_sigaction = (void (*)(int, siginfo_t *, void *))prev;
    else
      old->sa_handler = (void (*)(int))prev;
  }
  return r;
}

/* glibc's signal(): BSD semantics (restart, the signal blocked while its
 * handler runs). */
iof_compat_sighandler_t iof_compat_signal(int sig, iof_compat_sighandler_t h) {
  struct sigaction sa, old;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = h;
  sigemptyset(&sa.sa_mask);
  if (sig > 0 && sig < NSIG) sigaddset(&sa.sa_mask, sig);
  sa.sa_flags = SA_RESTART;
  if (iof_compat_sigaction(sig, &sa, &old) != 0) return SIG_ERR;
  return old.sa_handler;
}

/* ---- pause, sigsuspend --------------------------------------------------- */

static const struct timespec zero_ts = {0, 0};

/* Both return only when a handler ran: only main's waits learn of that,
 * so another fiber makes the plain call and blocks its thread. */
int iof_compat_pause(void) {
  iof_fiber *f = iof__compat_fiber();
  if (!f || f != main_fiber) return iof__libc.pause();
  int r = iof__compat_intr_sleep(f, -1, false);
  errno = r == -EINTR ? EINTR : -r;
  return -1;
}

static int sigsuspend_main(iof_fiber *f, const sigset_t *mask);

static void close_fd(void *fd) {
  iof__libc.close(*(int *)fd);
}

int iof_compat_sigsuspend(const sigset_t *mask) {
  iof_fiber *f = iof__compat_fiber();
  if (!f || f != main_fiber || !mask ||
      iof__mem_check(mask, sizeof(uint64_t)) < 0) /* the kernel's EFAULT */
    return iof__libc.sigsuspend(mask);
  iof__sigmask_hold h;
  iof__sigmask_hold_begin(&h, mask);
  int r = sigsuspend_main(f, mask);
  iof__sigmask_hold_release(&h);
  return r;
}

static int sigsuspend_main(iof_fiber *f, const sigset_t *mask) {
  /* pthread_kill's signals the mask lets in: delivered here. */
  if (iof__compat_run_pending(iof__cthread_take_unblocked())) {
    errno = EINTR;
    return -1;
  }
  for (;;) {
    /* A signal mask lets in that is pending now: delivered here. */
    if (iof__libc.pselect(0, NULL, NULL, NULL, &zero_ts, mask) < 0)
      return -1; /* EINTR: a handler ran */
    int sfd = iof__compat_admit_fd(mask);
    int r;
    if (sfd < 0) {
      r = iof__compat_intr_sleep(f, -1, false);
    } else {
      iof__fd_wait fw = {0};
      fw.fd = sfd;
      fw.events = EV_READ;
      iof__unwind g; /* closed if the thread exits (cancelled) meanwhile */
      (void)iof__cthread_guard_push(&g, close_fd, &sfd);
      bool reg = iof__compat_intr_enter(f, &fw.op, false);
      r = iof__compat_intr_leave(reg,
                                 iof__fd_wait_run(&fw, iof__compat_io(f), -1));
      iof__cthread_guard_pop(&g);
      iof__libc.close(sfd);
    }
    if (r < 0) {
      errno = -r;
      return -1;
    }
  }
}

/* ---- the sigwait family ------------------------------------------------- */

/* A signal of set pthread_kill left for the calling fiber thread, taken
 * (0: none): pending for that thread alone, the kernel never saw it. */
static int take_waited(const sigset_t *set, siginfo_t *info) {
  int s = iof__cthread_take_waited(iof__sigset_bits(set));
  if (s > 0 && info) {
    memset(info, 0, sizeof *info);
    info->si_signo = s;
    info->si_code = SI_TKILL;
    info->si_pid = getpid();
    info->si_uid = getuid();
  }
  return s;
}

static int sigtimedwait_fiber(iof_fiber *f, const sigset_t *set,
                              siginfo_t *info, int64_t deadline);

/* Waits on a signalfd of set (which the thread blocks, as sigwait needs)
 * and takes the signal with a zero-timeout sigtimedwait, so the kernel
 * decides which one, exactly as for the blocking call; pthread_kill's
 * signals for this thread come first, as the kernel's thread-directed
 * ones do. */
int iof_compat_sigtimedwait(const sigset_t *set, siginfo_t *info,
                            const struct timespec *timeout) {
  iof_fiber *f = iof__compat_fiber();
  /* A set or timeout the kernel cannot read, or a timeout it rejects: the
   * plain call's error. */
  bool bad = f && ((timeout && iof__ts_check(timeout) < 0) ||
                   (set && iof__mem_check(set, sizeof(uint64_t)) < 0));
  if (f && set && timeout && !bad && !timeout->tv_sec && !timeout->tv_nsec) {
    int saved = errno;
    int s = take_waited(set, info);
    if (s > 0) return s;
    errno = saved;
  }
  if (!f || !set || bad || (timeout && !timeout->tv_sec && !timeout->tv_nsec))
    return iof__libc.sigtimedwait(set, info, timeout);
  int64_t deadline = -1;
  if (timeout) {
    int64_t now = iof__now_ns();
    deadline =
        timeout->tv_sec > (INT64_MAX - now) / 1000000000 - 1
            ? -1
            : now + (int64_t)timeout->tv_sec * 1000000000 + timeout->tv_nsec;
  }
  bool own = iof__cthread_sigwaiting(true);
  int r = sigtimedwait_fiber(f, set, info, deadline);
  if (own) {
    int e = errno;
    iof__cthread_sigwaiting(false);
    errno = e;
  }
  return r;
}

/* No fd for a signalfd (EMFILE): checks with a zero timeout, the fiber
 * sleeping between checks (1 ms, growing to 8 ms), as the plain call
 * would block the whole OS thread. */
static int sigtimedwait_poll(iof_fiber *f, const sigset_t *set, siginfo_t *info,
                             int64_t deadline) {
  int saved = errno;
  int64_t step = 1000000;
  for (;;) {
    int s = take_waited(set, info);
    if (s <= 0) s = iof__libc.sigtimedwait(set, info, &zero_ts);
    if (s > 0 || errno != EAGAIN) {
      if (s > 0) errno = saved;
      return s;
    }
    int64_t now = iof__now_ns();
    if (deadline >= 0 && now >= deadline) return -1; /* EAGAIN */
    int64_t until =
        deadline >= 0 && deadline - now < step ? deadline : now + step;
    int r = iof__compat_intr_sleep(f, until, false);
    if (r != -ETIMEDOUT) {
      s = take_waited(set, info);
      errno = s > 0 ? saved : -r;
      return s > 0 ? s : -1;
    }
    if (step < 8000000) step *= 2;
  }
}

static int sigtimedwait_fiber(iof_fiber *f, const sigset_t *set,
                              siginfo_t *info, int64_t deadline) {
  int saved = errno;
  int s = take_waited(set, info);
  if (s > 0) return s;
  int sfd = signalfd(-1, set, SFD_NONBLOCK | SFD_CLOEXEC);
  if (sfd < 0) {
    errno = saved; /* EMFILE is not the caller's */
    return sigtimedwait_poll(f, set, info, deadline);
  }
  iof__unwind g; /* closed if the thread exits (cancelled) meanwhile */
  (void)iof__cthread_guard_push(&g, close_fd, &sfd);
  for (;;) {
    s = iof__libc.sigtimedwait(set, info, &zero_ts);
    if (s > 0 || errno != EAGAIN) {
      int e = errno;
      iof__cthread_guard_pop(&g);
      iof__libc.close(sfd);
      errno = s > 0 ? saved : e;
      return s;
    }
    iof__fd_wait fw = {0};
    fw.fd = sfd;
    fw.events = EV_READ;
    bool reg = iof__compat_intr_enter(f, &fw.op, false);
    int r = iof__compat_intr_leave(
        reg, iof__fd_wait_run(&fw, iof__compat_io(f), deadline));
    s = take_waited(set, info);
    if (s > 0) {
      iof__cthread_guard_pop(&g);
      iof__libc.close(sfd);
      errno = saved;
      return s;
    }
    if (r < 0) {
      iof__cthread_guard_pop(&g);
      iof__libc.close(sfd);
      errno = r == -ETIMEDOUT ? EAGAIN : -r;
      return -1;
    }
  }
}

int iof_compat_sigwaitinfo(const sigset_t *set, siginfo_t *info) {
  return iof_compat_sigtimedwait(set, info, NULL);
}

/* sigwait reports no EINTR: a handler run makes it wait again. */
int iof_compat_sigwait(const sigset_t *set, int *sig) {
  if (!set || !sig) return EINVAL; /* glibc's would write through NULL */
  if (!iof__compat_fiber()) return iof__libc.sigwait(set, sig);
  int saved = errno;
  for (;;) {
    int s = iof_compat_sigtimedwait(set, NULL, NULL);
    if (s > 0) {
      *sig = s;
      errno = saved;
      return 0;
    }
    if (errno != EINTR) {
      int e = errno;
      errno = saved;
      return e;
    }
  }
}
