/* libiofiber-hook linked into a program: blocking libc calls made by
 * fibers suspend only the fiber (everything runs on this one thread). */
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "hook_support.h"
#include "test_support.h"

/* ---- poll on a pipe fed by another fiber ------------------------------- */

typedef struct poll_case {
  int p[2];
  int poll_result;
  short revents;
  int64_t waited_ms;
  int order[2], n;
} poll_case;

static int poller(void *arg) {
  poll_case *c = arg;
  struct pollfd f = {.fd = c->p[0], .events = POLLIN};
  uint64_t t0 = iof_test_now_ns();
  c->poll_result = poll(&f, 1, 5000);
  c->waited_ms = ms_since(t0);
  c->revents = f.revents;
  c->order[c->n++] = 1;
  return 0;
}

static int feeder(void *arg) {
  poll_case *c = arg;
  usleep(50 * 1000);
  c->order[c->n++] = 2;
  return write(c->p[1], "x", 1) == 1 ? 0 : -errno;
}

static int poll_pair(void *arg) {
  poll_case *c = arg;
  const iof_env *env = iof_env_current();
  int r = iof_launch(env->executor, poller, c);
  if (r == 0) r = iof_launch(env->executor, feeder, c);
  return r;
}

static void test_poll_fed_by_fiber(void **state) {
  (void)state;
  poll_case c = {0};
  assert_int_equal(pipe(c.p), 0);
  unsigned long before = hook_count("poll", 0);
  assert_int_equal(hook_run_fibers(1, poll_pair, &c), 0);
  /* Had poll blocked the thread, the feeder could not have run: poll would
   * have timed out after 5 s with 0. */
  assert_int_equal(c.poll_result, 1);
  assert_true(c.revents & POLLIN);
  assert_true(c.waited_ms >= 40 && c.waited_ms < 2000);
  assert_int_equal(c.order[0], 2);
  assert_int_equal(c.order[1], 1);
  assert_int_equal(hook_count("poll", 0), before + 1);
  close(c.p[0]), close(c.p[1]);
}

/* ---- errno across suspension ------------------------------------------ */

static int errno_sleeper(void *arg) {
  int *out = arg;
  errno = EILSEQ;
  usleep(30 * 1000);
  out[0] = errno;
  return 0;
}

static int errno_spoiler(void *arg) {
  int *out = arg;
  errno = EXDEV;
  usleep(5 * 1000);
  errno = EXDEV;
  out[1] = 1;
  return 0;
}

static int errno_pair(void *arg) {
  const iof_env *env = iof_env_current();
  int r = iof_launch(env->executor, errno_sleeper, arg);
  return r ? r : iof_launch(env->executor, errno_spoiler, arg);
}

static void test_errno_across_suspension(void **state) {
  (void)state;
  int out[2] = {0, 0};
  assert_int_equal(hook_run_fibers(1, errno_pair, out), 0);
  assert_int_equal(out[1], 1);
  assert_int_equal(out[0], EILSEQ);
}

/* ---- fork in a fiber, then exec --------------------------------------- */

typedef struct fork_case {
  int p[2];
  int status;
  char from_child;
  int ticks;
} fork_case;

static int forker(void *arg) {
  fork_case *c = arg;
  pid_t pid = fork();
  if (pid == 0) {
    /* The hook has stepped aside in this child: plain calls. */
    if (write(c->p[1], "c", 1) != 1) _exit(90);
    execl("/bin/sh", "sh", "-c", "exit 7", (char *)NULL);
    _exit(91);
  }
  if (pid < 0) return -errno;
  /* Suspends this fiber until the child's byte arrives. */
  if (read(c->p[0], &c->from_child, 1) != 1) return -EIO;
  if (waitpid(pid, &c->status, 0) != pid) return -errno;
  usleep(1000); /* the runtime still works in the parent */
  return 0;
}

static int ticker(void *arg) {
  fork_case *c = arg;
  for (int i = 0; i < 5; i++) {
    usleep(2000);
    c->ticks++;
  }
  return 0;
}

static int fork_pair(void *arg) {
  const iof_env *env = iof_env_current();
  int r = iof_launch(env->executor, forker, arg);
  return r ? r : iof_launch(env->executor, ticker, arg);
}

static void test_fork_then_exec(void **state) {
  (void)state;
  fork_case c = {.status = -1};
  assert_int_equal(pipe(c.p), 0);
  assert_int_equal(hook_run_fibers(1, fork_pair, &c), 0);
  assert_int_equal(c.from_child, 'c');
  assert_true(WIFEXITED(c.status));
  assert_int_equal(WEXITSTATUS(c.status), 7);
  assert_int_equal(c.ticks, 5);
  close(c.p[0]), close(c.p[1]);
}

/* ---- wait3 suspends the fiber ------------------------------------------ */

typedef struct wait3_case {
  int status;
  atomic_int ticks;
  atomic_bool done;
} wait3_case;

static int wait3_waiter(void *arg) {
  wait3_case *c = arg;
  pid_t pid = fork();
  if (pid == 0) {
    usleep(100000);
    _exit(5);
  }
  struct rusage ru;
  pid_t got = wait3(&c->status, 0, &ru); /* glibc's calls wait4 inside */
  atomic_store(&c->done, true);
  return got == pid ? 0 : -ECHILD;
}

static int wait3_ticker(void *arg) {
  wait3_case *c = arg;
  while (!atomic_load(&c->done)) {
    atomic_fetch_add(&c->ticks, 1);
    usleep(2000);
  }
  return 0;
}

static int wait3_pair(void *arg) {
  const iof_env *env = iof_env_current();
  int r = iof_launch(env->executor, wait3_waiter, arg);
  return r ? r : iof_launch(env->executor, wait3_ticker, arg);
}

static void test_wait3(void **state) {
  (void)state;
  unsigned long before = hook_count("wait3", 0);
  wait3_case c = {.status = -1};
  assert_int_equal(hook_run_fibers(1, wait3_pair, &c), 0);
  assert_true(WIFEXITED(c.status));
  assert_int_equal(WEXITSTATUS(c.status), 5);
  assert_int_equal(hook_count("wait3", 0), before + 1);
  assert_true(atomic_load(&c.ticks) >= 20); /* 100 ms, 2 ms ticks */
}

/* ---- getaddrinfo from 100 fibers -------------------------------------- */

static int resolved;

static int resolver_fiber(void *arg) {
  (void)arg;
  struct addrinfo hints = {.ai_family = AF_INET, .ai_socktype = SOCK_STREAM};
  struct addrinfo *res = NULL;
  int r = getaddrinfo("localhost", "80", &hints, &res);
  if (r != 0 || !res) return -EIO;
  struct sockaddr_in *sin = (struct sockaddr_in *)res->ai_addr;
  bool ok = res->ai_family == AF_INET && ntohs(sin->sin_port) == 80 &&
            ntohl(sin->sin_addr.s_addr) == 0x7f000001;
  freeaddrinfo(res);
  if (ok) resolved++;
  return 0;
}

static void test_getaddrinfo_100(void **state) {
  (void)state;
  unsigned long in_fiber = hook_count("getaddrinfo", 0);
  resolved = 0;
  uint64_t t0 = iof_test_now_ns();
  assert_int_equal(hook_run_fibers(100, resolver_fiber, NULL), 0);
  assert_int_equal(resolved, 100);
  /* All 100 went to the fiber layer (the resolver threads), none blocked
   * the io thread. */
  assert_int_equal(hook_count("getaddrinfo", 0), in_fiber + 100);
  assert_int_equal(hook_count("getaddrinfo", 1), 0);
  assert_true(ms_since(t0) < 5000);
}

/* ---- reverse lookups from 100 fibers ----------------------------------- */

static int reverse_fiber(void *arg) {
  (void)arg;
  struct sockaddr_in sin = {.sin_family = AF_INET,
                            .sin_port = htons(80),
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  char host[NI_MAXHOST], serv[NI_MAXSERV];
  if (getnameinfo((struct sockaddr *)&sin, sizeof sin, host, sizeof host, serv,
                  sizeof serv, NI_NUMERICSERV) != 0)
    return -EIO;
  struct hostent he, *out = NULL;
  char buf[1024];
  int herr;
  if (gethostbyaddr_r(&sin.sin_addr, sizeof sin.sin_addr, AF_INET, &he, buf,
                      sizeof buf, &out, &herr) != 0 ||
      !out)
    return -EIO;
  if (!strcmp(host, "localhost") && !strcmp(serv, "80") &&
      !strcmp(he.h_name, "localhost"))
    resolved++;
  return 0;
}

static void test_reverse_lookups_100(void **state) {
  (void)state;
  unsigned long ni = hook_count("getnameinfo", 0);
  unsigned long ha = hook_count("gethostbyaddr_r", 0);
  resolved = 0;
  assert_int_equal(hook_run_fibers(100, reverse_fiber, NULL), 0);
  assert_int_equal(resolved, 100);
  /* Both went to the fiber layer (the resolver threads). */
  assert_int_equal(hook_count("getnameinfo", 0), ni + 100);
  assert_int_equal(hook_count("gethostbyaddr_r", 0), ha + 100);
  assert_int_equal(hook_count("getnameinfo", 1), 0);
}

/* ---- close from a plain thread wakes a fiber's read -------------------- */

typedef struct close_case {
  int sv[2];
  ssize_t got;
  int err;
} close_case;

static int blocked_reader(void *arg) {
  close_case *c = arg;
  char b;
  c->got = read(c->sv[0], &b, 1);
  c->err = errno;
  return 0;
}

static void *closer(void *arg) {
  close_case *c = arg;
  usleep(50 * 1000); /* a plain thread: really sleeps */
  close(c->sv[0]);
  return NULL;
}

static void test_close_from_thread_wakes_fiber(void **state) {
  (void)state;
  close_case c = {.got = -2};
  assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, c.sv), 0);
  pthread_t t;
  assert_int_equal(pthread_create(&t, NULL, closer, &c), 0);
  assert_int_equal(hook_run_fibers(1, blocked_reader, &c), 0);
  assert_int_equal(pthread_join(t, NULL), 0);
  /* The close went to the fiber layer although no fiber made it. */
  assert_int_equal(c.got, -1);
  assert_int_equal(c.err, EBADF);
  close(c.sv[1]);
}

/* ---- a plain thread on an fd a fiber used ----------------------------- */

/* A fiber's blocking read leaves the socket non-blocking in the kernel (the
 * runtime's flag). A plain thread that reads it later must still block
 * until data comes, as it would without the hook, not get EAGAIN. */
typedef struct shared_fd {
  int sv[2];
  ssize_t fiber_got;
} shared_fd;

static int fiber_reads_then_feeds(void *arg) {
  shared_fd *c = arg;
  char b;
  c->fiber_got = read(c->sv[0], &b, 1); /* waits: data comes from below */
  return 0;
}

static int fiber_feeds(void *arg) {
  shared_fd *c = arg;
  usleep(20 * 1000);
  return write(c->sv[1], "a", 1) == 1 ? 0 : -errno;
}

static int two_fibers(void *arg) {
  const iof_env *env = iof_env_current();
  int r = iof_launch(env->executor, fiber_reads_then_feeds, arg);
  if (r == 0) r = iof_launch(env->executor, fiber_feeds, arg);
  return r;
}

static void *late_writer(void *arg) {
  shared_fd *c = arg;
  usleep(100 * 1000);
  (void)!write(c->sv[1], "b", 1);
  return NULL;
}

static void test_plain_thread_blocks_on_fiber_fd(void **state) {
  (void)state;
  shared_fd c = {.fiber_got = -2};
  assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, c.sv), 0);
  assert_int_equal(hook_run_fibers(1, two_fibers, &c), 0);
  assert_int_equal(c.fiber_got, 1);
  assert_true(fcntl(c.sv[0], F_GETFL) >= 0);
  pthread_t t;
  assert_int_equal(pthread_create(&t, NULL, late_writer, &c), 0);
  uint64_t t0 = iof_test_now_ns();
  char b = 0;
  ssize_t n = read(c.sv[0], &b, 1); /* this thread runs no fiber */
  int64_t waited = ms_since(t0);
  assert_int_equal(pthread_join(t, NULL), 0);
  assert_int_equal(n, 1);
  assert_int_equal(b, 'b');
  assert_true(waited >= 50);
  close(c.sv[0]);
  close(c.sv[1]);
}

/* ---- libev's own write from inside a fiber ---------------------------- */

/* A fiber launching onto another thread's io_context wakes that loop with
 * ev_async_send: libev writes its eventfd from the fiber, through the hook.
 * That fd is non-blocking when compat first sees it, so compat passes the
 * write straight through (a suspension there would deadlock the post). */
static atomic_int remote_ran;

static int on_remote(void *arg) {
  (void)arg;
  atomic_store(&remote_ran, 1);
  return 0;
}

static int launch_remote(void *arg) {
  iof_io_context *b = arg;
  int r = iof_launch(iof_io_context_executor(b), on_remote, NULL);
  for (int i = 0; r == 0 && i < 400 && !atomic_load(&remote_ran); i++)
    usleep(5000);
  return r;
}

static void *run_b(void *arg) {
  iof_io_context_run(arg);
  return NULL;
}

static void test_libev_write_from_fiber(void **state) {
  (void)state;
  iof_io_context *b = iof_io_context_create();
  assert_non_null(b);
  iof_work_guard g;
  iof_work_guard_init(&g, iof_io_context_executor(b));
  pthread_t t;
  assert_int_equal(pthread_create(&t, NULL, run_b, b), 0);
  usleep(50 * 1000); /* let b's loop block in epoll_wait */
  unsigned long w = hook_count("write", 0);
  atomic_store(&remote_ran, 0);
  assert_int_equal(hook_run_fibers(1, launch_remote, b), 0);
  assert_int_equal(atomic_load(&remote_ran), 1);
  assert_true(hook_count("write", 0) >= w + 1);
  iof_work_guard_reset(&g);
  assert_int_equal(pthread_join(t, NULL), 0);
  assert_int_equal(iof_io_context_destroy(b), 0);
}

/* ---- system() from a fiber: the child sees blocking fds --------------- */

/* O_NONBLOCK of fd as the kernel has it (fdinfo's octal flags). */
static int kernel_nonblock(int fd) {
  char path[64], line[128];
  snprintf(path, sizeof path, "/proc/self/fdinfo/%d", fd);
  FILE *f = fopen(path, "r");
  if (!f) return -1;
  int r = -1;
  while (fgets(line, sizeof line, f)) {
    unsigned long fl;
    if (sscanf(line, "flags: %lo", &fl) == 1) r = (fl & O_NONBLOCK) != 0;
  }
  fclose(f);
  return r;
}

typedef struct system_case {
  int before, after, status;
} system_case;

static int system_fiber(void *arg) {
  system_case *c = arg;
  int p[2];
  if (pipe(p) != 0) return -errno;
  /* A blocking call on it in this fiber makes it non-blocking underneath. */
  if (dup2(p[0], 50) != 50) return -errno;
  struct pollfd f = {.fd = 50, .events = POLLIN};
  (void)poll(&f, 1, 1);
  char b;
  if (write(p[1], "x", 1) != 1 || read(50, &b, 1) != 1) return -EIO;
  c->before = kernel_nonblock(50);
  /* The shell inherits fd 50 and checks its flags itself. */
  c->status = system("f=$(sed -n 's/^flags:[[:space:]]*//p' "
                     "/proc/$$/fdinfo/50); [ $(( 0$f & 04000 )) -eq 0 ]");
  c->after = kernel_nonblock(50);
  close(50), close(p[0]), close(p[1]);
  return 0;
}

static void test_system_child_sees_blocking_fds(void **state) {
  (void)state;
  system_case c = {-2, -2, -2};
  assert_int_equal(hook_run_fibers(1, system_fiber, &c), 0);
  assert_int_equal(c.before, 1); /* the runtime had made it non-blocking */
  assert_true(WIFEXITED(c.status));
  assert_int_equal(WEXITSTATUS(c.status), 0); /* the child saw it blocking */
  assert_int_equal(c.after, 0);
}

/* ---- a plain thread cancelled in compat's blocking calls --------------- */

/* compat's cleanup guards (the stdio lock, the fds a wait holds) are for
 * fiber threads; a plain thread relies on glibc's unwinding, which must
 * pass through compat's frames and release what glibc's own calls took.
 * A plain thread cancelled in fgets on a stream a fiber made (compat's
 * cookie stream), and in waits that hold fds in fibers (poll of many
 * fds, ppoll with a mask, sigtimedwait, waitpid): the stream's lock is
 * free after the cancel and no fd is left open. */
typedef struct cancel_case {
  int sv[2];
  FILE *fp;
  int which;
  pid_t child;
} cancel_case;

static int fiber_fdopen(void *arg) {
  cancel_case *c = arg;
  c->fp = fdopen(c->sv[0], "r"); /* the fd is the runtime's: a cookie */
  return c->fp ? 0 : -errno;
}

static void *cancelled_waiter(void *arg) {
  cancel_case *c = arg;
  char line[64];
  struct pollfd f[10];
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGUSR2);
  switch (c->which) {
  case 0:
    (void)fgets(line, sizeof line, c->fp);
    break;
  case 1:
    for (int i = 0; i < 10; i++)
      f[i] = (struct pollfd){c->sv[i & 1 ? 1 : 0], i & 1 ? 0 : POLLIN, 0};
    (void)poll(f, 10, -1);
    break;
  case 2: {
    sigset_t mask;
    pthread_sigmask(SIG_BLOCK, NULL, &mask);
    f[0] = (struct pollfd){c->sv[0], POLLIN, 0};
    (void)ppoll(f, 1, NULL, &mask);
    break;
  }
  case 3:
    pthread_sigmask(SIG_BLOCK, &set, NULL);
    (void)sigwaitinfo(&set, NULL);
    break;
  case 4:
    (void)waitpid(c->child, NULL, 0);
    break;
  }
  return NULL;
}

static int open_fds(void) {
  int n = 0;
  for (int fd = 0; fd < 1024; fd++) n += fcntl(fd, F_GETFD) >= 0;
  return n;
}

static void test_plain_thread_cancelled_in_waits(void **state) {
  (void)state;
  cancel_case c = {.fp = NULL};
  assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, c.sv), 0);
  assert_int_equal(hook_run_fibers(1, fiber_fdopen, &c), 0);
  assert_non_null(c.fp);
  /* The runtime made it non-blocking: a plain thread's read of the cookie
   * stream waits in compat (a poll), not in the kernel's read. */
  assert_int_equal(kernel_nonblock(c.sv[0]), 1);
  c.child = fork();
  assert_true(c.child >= 0);
  if (c.child == 0) {
    pause();
    _exit(0);
  }
  for (c.which = 0; c.which < 5; c.which++) {
    int before = open_fds();
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, cancelled_waiter, &c), 0);
    usleep(50 * 1000); /* it waits */
    assert_int_equal(pthread_cancel(t), 0);
    void *res = NULL;
    assert_int_equal(pthread_join(t, &res), 0);
    assert_ptr_equal(res, PTHREAD_CANCELED);
    assert_int_equal(open_fds(), before);
    assert_int_equal(ftrylockfile(c.fp), 0); /* the stream's lock is free */
    funlockfile(c.fp);
  }
  kill(c.child, SIGKILL);
  assert_int_equal(waitpid(c.child, NULL, 0), c.child);
  assert_int_equal(write(c.sv[1], "line\n", 5), 5);
  char line[16] = "";
  assert_non_null(fgets(line, sizeof line, c.fp));
  assert_string_equal(line, "line\n");
  fclose(c.fp);
  close(c.sv[1]);
}

IOF_TEST_WATCHDOG(setup, teardown, 20)

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_poll_fed_by_fiber, setup, teardown),
      cmocka_unit_test_setup_teardown(test_errno_across_suspension, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(test_fork_then_exec, setup, teardown),
      cmocka_unit_test_setup_teardown(test_wait3, setup, teardown),
      cmocka_unit_test_setup_teardown(test_getaddrinfo_100, setup, teardown),
      cmocka_unit_test_setup_teardown(test_reverse_lookups_100, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(test_close_from_thread_wakes_fiber, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(test_plain_thread_blocks_on_fiber_fd,
                                      setup, teardown),
      cmocka_unit_test_setup_teardown(test_libev_write_from_fiber, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(test_system_child_sees_blocking_fds,
                                      setup, teardown),
      cmocka_unit_test_setup_teardown(test_plain_thread_cancelled_in_waits,
                                      setup, teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
