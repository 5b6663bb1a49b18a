/* waitpid, wait, wait4 and waitid in fibers: the fiber, not its thread,
 * waits for a child. The answer always comes from the kernel (the call
 * with WNOHANG); between two checks the fiber waits on a pidfd of the
 * child when there is one child to wait for and only its exit matters (a
 * pidfd turns readable when the process exits), else it checks again
 * after a pause that grows from 1 to 20 ms. A blocking wait for a child is
 * restarted under SA_RESTART, so main's wait is restartable
 * (signal_internal.h). */
#include <iofiber/compat_io.h>

#include "compat/fd_table.h"
#include "compat/signal_internal.h"
#include "compat/sigmask_internal.h"

#include <errno.h>
#include <spawn.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#define PAUSE_MIN_NS 1000000LL
#define PAUSE_MAX_NS 20000000LL
/* A pidfd turns readable when the child exits, but a traced child's stop,
 * which waitpid reports without WUNTRACED, never shows on it: the wait on
 * it checks again after a pause growing to this (a tracer's first stop
 * was missed for good). */
#define PIDFD_PAUSE_MAX_NS 1000000000LL

/* A pidfd for pid, or -1 (none: an old kernel, not a child, any child). */
static int child_fd(idtype_t type, id_t id, int options) {
#ifdef SYS_pidfd_open
  if (type == P_PID && id > 0 && !(options & (WUNTRACED | WCONTINUED)) &&
      !(options & WSTOPPED))
    return (int)iof__syscall()(SYS_pidfd_open, (pid_t)id, 0);
#endif
  (void)type;
  (void)id;
  (void)options;
  return -1;
}

/* The check: the call with WNOHANG, > 0 (or < 0 with errno) when it has
 * an answer, 0 when the child is still running. */
typedef struct wait_check {
  long (*fn)(void *);
  void *arg;
  long answer;
  int err;
} wait_check;

/* The kernel reaps for a blocked waitpid before a handler runs on the way
 * out, so a SIGCHLD handler that reaps with waitpid(-1, WNOHANG) finds
 * nothing: the check comes before the handlers a wait defers (main's).
 * Returns true with c->answer set when it answered. */
static bool check_before_handlers(bool reg, int r, wait_check *c) {
  if (r != 0 && r != -ETIMEDOUT && r != -EINTR) return false;
  long a = c->fn(c->arg);
  if (a == 0) return false;
  c->answer = a;
  c->err = errno;
  (void)iof__compat_intr_leave(reg, 0);
  return true;
}

/* One wait between two checks: 0 (check again), 1 (c answered) or
 * -errno. On the child's pidfd when there is one, else a pause. */
static int wait_between(iof_fiber *f, int pfd, int64_t *pause_ns,
                        wait_check *c) {
  iof_io_context *io = iof__compat_io(f);
  int64_t deadline = iof__now_ns() + *pause_ns;
  iof__fd_wait fw = {0};
  iof_io_op op;
  bool reg;
  int r;
  if (pfd >= 0) {
    fw.fd = pfd;
    fw.events = EV_READ;
    reg = iof__compat_intr_enter(f, &fw.op, true);
    r = iof__fd_wait_run(&fw, io, deadline);
  } else {
    iof__io_op_init(&op, io, NULL, NULL, NULL);
    reg = iof__compat_intr_enter(f, &op, true);
    r = iof__io_wait(&op, deadline);
  }
  if (check_before_handlers(reg, r, c)) return 1;
  r = iof__compat_intr_leave(reg, r);
  if (*pause_ns < (pfd >= 0 ? PIDFD_PAUSE_MAX_NS : PAUSE_MAX_NS))
    *pause_ns *= 2;
  return r == -ETIMEDOUT ? 0 : r;
}

static void close_pidfd(void *fd) {
  if (*(int *)fd >= 0) iof__libc.close(*(int *)fd);
}

/* The loop shared by the four calls. */
static long wait_loop(iof_fiber *f, idtype_t type, id_t id, int options,
                      long (*check)(void *), void *arg) {
  int saved = errno;
  int pfd = -1;
  bool opened = false;
  int64_t pause_ns = PAUSE_MIN_NS;
  iof__unwind g; /* pfd closed if the thread exits (cancelled) meanwhile */
  (void)iof__cthread_guard_push(&g, close_pidfd, &pfd);
  wait_check c = {check, arg, 0, 0};
  long r = check(arg);
  for (;;) {
    if (r != 0) {
      int e = errno;
      iof__cthread_guard_pop(&g);
      if (pfd >= 0) iof__libc.close(pfd);
      errno = r < 0 ? e : saved;
      return r;
    }
    if (!opened) {
      opened = true;
      pfd = child_fd(type, id, options);
    }
    int w = wait_between(f, pfd, &pause_ns, &c);
    if (w == 1) {
      r = c.answer;
      errno = c.err;
      continue;
    }
    if (w < 0) {
      iof__cthread_guard_pop(&g);
      if (pfd >= 0) iof__libc.close(pfd);
      errno = -w;
      return -1;
    }
    r = check(arg);
  }
}

typedef struct wait4_args {
  pid_t pid;
  int *status;
  int options;
  struct rusage *ru;
} wait4_args;

static long check_wait4(void *p) {
  wait4_args *a = p;
  return iof__libc.wait4(a->pid, a->status, a->options | WNOHANG, a->ru);
}

static idtype_t type_of(pid_t pid) {
  return pid > 0 ? P_PID : pid == -1 ? P_ALL : P_PGID;
}

pid_t iof_compat_wait4(pid_t pid, int *status, int options, struct rusage *ru) {
  iof_fiber *f = iof__compat_fiber();
  if (!f || (options & WNOHANG))
    return iof__libc.wait4(pid, status, options, ru);
  wait4_args a = {pid, status, options, ru};
  return (pid_t)wait_loop(f, type_of(pid), (id_t)(pid > 0 ? pid : 0), options,
                          check_wait4, &a);
}

pid_t iof_compat_waitpid(pid_t pid, int *status, int options) {
  if (!iof__compat_fiber() || (options & WNOHANG))
    return iof__libc.waitpid(pid, status, options);
  return iof_compat_wait4(pid, status, options, NULL);
}

/* glibc's wait3 calls its internal wait4, past any interposer. */
pid_t iof_compat_wait3(int *status, int options, struct rusage *ru) {
  if (!iof__compat_fiber() || (options & WNOHANG))
    return iof__libc.wait3(status, options, ru);
  return iof_compat_wait4(-1, status, options, ru);
}

pid_t iof_compat_wait(int *status) {
  if (!iof__compat_fiber()) return iof__libc.wait(status);
  return iof_compat_wait4(-1, status, 0, NULL);
}

typedef struct waitid_args {
  idtype_t type;
  id_t id;
  siginfo_t *info;
  int options;
} waitid_args;

/* waitid with WNOHANG says "nothing yet" with si_pid 0, which Linux
 * writes itself (the kernel, not compat, writes the caller's info: a wild
 * pointer is its EFAULT, as for the plain call). */
static long check_waitid(void *p) {
  waitid_args *a = p;
  int r = iof__libc.waitid(a->type, a->id, a->info, a->options | WNOHANG);
  if (r < 0) return -1;
  return a->info->si_pid != 0;
}

int iof_compat_waitid(idtype_t type, id_t id, siginfo_t *info, int options) {
  iof_fiber *f = iof__compat_fiber();
  if (!f || (options & WNOHANG))
    return iof__libc.waitid(type, id, info, options);
  siginfo_t local; /* Linux takes a NULL info */
  waitid_args a = {type, id, info ? info : &local, options};
  long r = wait_loop(f, type, id, options, check_waitid, &a);
  return r < 0 ? -1 : 0;
}

/* system(3) in a fiber: /bin/sh -c cmd started with posix_spawn and waited
 * for by the fiber. As glibc's, the caller ignores SIGINT and SIGQUIT
 * while any system() runs (counted: the first call sets, the last restores),
 * blocks SIGCHLD in its own mask while it waits (a program's SIGCHLD
 * handler must not reap the shell), and the child gets their defaults and
 * the caller's mask. */
static atomic_int sys_running;
static struct sigaction sys_saved_int, sys_saved_quit;
static atomic_flag sys_lock = ATOMIC_FLAG_INIT;

static void sys_ignore(bool on) {
  while (atomic_flag_test_and_set_explicit(&sys_lock, memory_order_acquire))
    iof_compat_sched_yield();
  if (on && atomic_fetch_add(&sys_running, 1) == 0) {
    struct sigaction ign;
    memset(&ign, 0, sizeof ign);
    ign.sa_handler = SIG_IGN;
    sigemptyset(&ign.sa_mask);
    iof__libc.sigaction(SIGINT, &ign, &sys_saved_int);
    iof__libc.sigaction(SIGQUIT, &ign, &sys_saved_quit);
  } else if (!on && atomic_fetch_sub(&sys_running, 1) == 1) {
    iof__libc.sigaction(SIGINT, &sys_saved_int, NULL);
    iof__libc.sigaction(SIGQUIT, &sys_saved_quit, NULL);
  }
  atomic_flag_clear_explicit(&sys_lock, memory_order_release);
}

extern char **environ;

int iof_compat_system(const char *cmd) {
  if (cmd) iof__compat_child_fds(true, false, NULL);
  iof_fiber *f = iof__compat_fiber();
  if (!f || !cmd) return iof__libc.system(cmd);
  int saved = errno;
  posix_spawnattr_t at;
  if (posix_spawnattr_init(&at) != 0) return iof__libc.system(cmd);
  sigset_t def, mask;
  sigemptyset(&def);
  sigaddset(&def, SIGINT);
  sigaddset(&def, SIGQUIT);
  iof__sigset_from_bits(&mask, iof__sigmask_current());
  posix_spawnattr_setsigdefault(&at, &def);
  posix_spawnattr_setsigmask(&at, &mask);
  posix_spawnattr_setflags(&at, POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETSIGMASK);
  char *argv[] = {"sh", "-c", (char *)cmd, NULL};
  sigset_t chld, before;
  sigemptyset(&chld);
  sigaddset(&chld, SIGCHLD);
  (void)iof_compat_pthread_sigmask(SIG_BLOCK, &chld, &before);
  sys_ignore(true);
  pid_t pid;
  int e = iof__libc.posix_spawn(&pid, "/bin/sh", NULL, &at, argv, environ);
  posix_spawnattr_destroy(&at);
  int status = -1;
  if (e == 0) {
    pid_t r;
    do {
      r = iof_compat_waitpid(pid, &status, 0);
    } while (r < 0 && errno == EINTR); /* system() is not interrupted */
    if (r < 0) status = -1;
  } else {
    status = 127 << 8; /* the shell could not run, as glibc reports it */
  }
  sys_ignore(false);
  int e2 = errno;
  (void)iof_compat_pthread_sigmask(SIG_SETMASK, &before, NULL);
  errno = status == -1 ? e2 : saved;
  return status;
}

/* The child starts with the calling fiber thread's signal mask, not the
 * OS thread's, unless attr sets one (glibc's spawn runs none of our code
 * in the child, so the OS thread wears the mask for the call), and with
 * the fds it uses in blocking mode. */
typedef int spawn_call(pid_t *, const char *,
                       const posix_spawn_file_actions_t *,
                       const posix_spawnattr_t *, char *const[], char *const[]);

static int spawn_masked(spawn_call *call, pid_t *pid, const char *what,
                        const posix_spawn_file_actions_t *fa,
                        const posix_spawnattr_t *attr, char *const argv[],
                        char *const envp[]) {
  iof__compat_child_fds(true, false, fa);
  iof__compat_child_mask(1);
  int r = call(pid, what, fa, attr, argv, envp);
  iof__compat_child_mask(0);
  return r;
}

int iof_compat_posix_spawn(pid_t *pid, const char *path,
                           const posix_spawn_file_actions_t *fa,
                           const posix_spawnattr_t *attr, char *const argv[],
                           char *const envp[]) {
  return spawn_masked(iof__libc.posix_spawn, pid, path, fa, attr, argv, envp);
}

int iof_compat_posix_spawnp(pid_t *pid, const char *file,
                            const posix_spawn_file_actions_t *fa,
                            const posix_spawnattr_t *attr, char *const argv[],
                            char *const envp[]) {
  return spawn_masked(iof__libc.posix_spawnp, pid, file, fa, attr, argv, envp);
}
