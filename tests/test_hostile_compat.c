/* Hostile calls into the compat shims (compat_io.h, compat_thread.h):
 * bad fds, NULL and short buffers, invalid timeouts and flags, misuse of
 * the pthread objects, from a plain thread (the libc path) and from a
 * launched fiber (the shim path). Every call must fail as POSIX says
 * (-1 and errno, or the error number for the pthread calls), never crash
 * nor hang.
 *
 * IOF_TEST_THREADED: fds shared by fibers of two io_contexts. */
#include "test_support.h"
#include "io_test.h"

#include <iofiber/iofiber.h>

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <arpa/inet.h>
#include <netdb.h>
#include <poll.h>
#include <pthread.h>
#include <semaphore.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <mqueue.h>
#include <sys/epoll.h>
#include <sys/ipc.h>
#include <sys/msg.h>
#include <sys/sem.h>
#include <sys/file.h>
#include <sys/syscall.h>
#include <linux/futex.h>
#include <sched.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/select.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <sys/time.h>
#include <sys/uio.h>
#include <time.h>
#include <ucontext.h>

#define MS 1000000LL

static atomic_int failures;
static int trace;
#define CHECK_EQ(a, b)                                                         \
  do {                                                                         \
    if (trace) fprintf(stderr, "line %d\n", __LINE__);                         \
    long long va_ = (long long)(a), vb_ = (long long)(b);                      \
    if (va_ != vb_) {                                                          \
      atomic_fetch_add(&failures, 1);                                          \
      fprintf(stderr, "%s:%d: %s = %lld, expected %lld (errno %d)\n",          \
              __FILE__, __LINE__, #a, va_, vb_, errno);                        \
    }                                                                          \
  } while (0)
/* A POSIX call failing with -1 and errno e. */
#define CHECK_ERR(call, e)                                                     \
  do {                                                                         \
    errno = 0;                                                                 \
    CHECK_EQ((call), -1);                                                      \
    CHECK_EQ(errno, (e));                                                      \
  } while (0)

static int reset(void **state) {
  (void)state;
  atomic_store(&failures, 0);
  iof_test_watchdog_arm(20);
  return 0;
}

static int disarm(void **state) {
  (void)state;
  alarm(0);
  return 0;
}

static int in_a_fiber;
static int in_fiber_thread; /* under iof_main: the mask shims' own paths */

/* Runs fn on a plain thread (libc paths) and then in a launched fiber
 * (the shims' own paths). */
static void both_ways(iof_fn fn) {
  in_a_fiber = 0;
  assert_int_equal(fn(NULL), 0);
  assert_int_equal(atomic_load(&failures), 0);
  iof_io_context *io = iof_io_context_create();
  assert_non_null(io);
  in_a_fiber = 1;
  launch(io, fn, NULL);
  run_all(io);
  assert_int_equal(iof_io_context_destroy(io), 0);
  assert_int_equal(atomic_load(&failures), 0);
}

/* ---- fds, bytes, sockets ---------------------------------------------- */

static int fd_calls(void *arg) {
  (void)arg;
  char buf[16] = "x";
  int fds[2];
  CHECK_EQ(iof_compat_socketpair(AF_UNIX, SOCK_STREAM, 0, fds), 0);
  int bad[] = {-1, INT_MIN, INT_MAX, 1 << 20};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    int fd = bad[i];
    CHECK_ERR(iof_compat_read(fd, buf, 1), EBADF);
    CHECK_ERR(iof_compat_write(fd, buf, 1), EBADF);
    CHECK_ERR(iof_compat_recv(fd, buf, 1, 0), EBADF);
    CHECK_ERR(iof_compat_send(fd, buf, 1, 0), EBADF);
    CHECK_ERR(iof_compat_close(fd), EBADF);
    CHECK_ERR(iof_compat_dup(fd), EBADF);
    CHECK_ERR(iof_compat_fcntl(fd, F_GETFL), EBADF);
    int on = 1;
    CHECK_ERR(iof_compat_ioctl(fd, FIONBIO, &on), EBADF);
    CHECK_ERR(iof_compat_accept(fd, NULL, NULL), EBADF);
    CHECK_ERR(iof_compat_shutdown(fd, SHUT_RD), EBADF);
    struct timeval tv = {1, 0};
    CHECK_ERR(
        iof_compat_setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv),
        EBADF);
  }
  CHECK_ERR(iof_compat_dup2(fds[0], -1), EBADF);
  CHECK_ERR(iof_compat_dup2(fds[0], INT_MAX), EBADF);
  CHECK_ERR(iof_compat_dup3(fds[0], fds[0], 0), EINVAL);
  CHECK_ERR(iof_compat_dup3(fds[0], 100, 0x7fff0000), EINVAL);
  CHECK_ERR(iof_compat_fcntl(fds[0], 99999), EINVAL);
  CHECK_ERR(iof_compat_fcntl(fds[0], F_DUPFD, -1), EINVAL);

  /* NULL and short buffers: the kernel's answer, the shim reads nothing. */
  CHECK_ERR(iof_compat_write(fds[0], NULL, 5), EFAULT);
  CHECK_ERR(iof_compat_send(fds[0], NULL, 5, 0), EFAULT);
  CHECK_ERR(iof_compat_ioctl(fds[0], FIONBIO, NULL), EFAULT);
  CHECK_ERR(iof_compat_ioctl(fds[0], FIONBIO, (int *)16), EFAULT);
  CHECK_ERR(iof_compat_setsockopt(fds[0], SOL_SOCKET, SO_RCVTIMEO, NULL,
                                  sizeof(struct timeval)),
            EFAULT);
  struct timeval tv = {0, 1};
  CHECK_ERR(iof_compat_setsockopt(fds[0], SOL_SOCKET, SO_RCVTIMEO, &tv, 3),
            EINVAL);
  struct timeval bad_tv = {0, 2000000};
  CHECK_ERR(iof_compat_setsockopt(fds[0], SOL_SOCKET, SO_SNDTIMEO, &bad_tv,
                                  sizeof bad_tv),
            EDOM);
  /* A huge timeout is accepted and means "a long time". */
  struct timeval huge_tv = {LONG_MAX, 999999};
  CHECK_EQ(iof_compat_setsockopt(fds[0], SOL_SOCKET, SO_RCVTIMEO, &huge_tv,
                                 sizeof huge_tv),
           0);
  CHECK_ERR(iof_compat_getsockopt(fds[0], SOL_SOCKET, SO_RCVTIMEO, NULL, NULL),
            EFAULT);
  CHECK_ERR(iof_compat_shutdown(fds[0], 99), EINVAL);
  struct iovec iov = {buf, 1};
  CHECK_ERR(iof_compat_readv(fds[0], &iov, -1), EINVAL);
  CHECK_ERR(iof_compat_writev(fds[0], &iov, IOV_MAX + 1), EINVAL);
  CHECK_ERR(iof_compat_writev(fds[0], NULL, 1), EFAULT);
  CHECK_ERR(iof_compat_sendmsg(fds[0], NULL, 0), EFAULT);
  struct msghdr mh = {0};
  mh.msg_iov = NULL;
  mh.msg_iovlen = 5;
  CHECK_ERR(iof_compat_sendmsg(fds[0], &mh, 0), EFAULT);
  CHECK_ERR(iof_compat_socket(12345, SOCK_STREAM, 0), EAFNOSUPPORT);
  CHECK_ERR(iof_compat_socket(AF_INET, 12345, 0), EINVAL);
  CHECK_ERR(iof_compat_socketpair(AF_UNIX, SOCK_STREAM, 0, NULL), EFAULT);
  CHECK_ERR(iof_compat_pipe(NULL), EFAULT);
  int p[2];
  CHECK_ERR(iof_compat_pipe2(p, 0x7fff0000), EINVAL);

  /* Data still flows after all that; a read with the data ready. */
  CHECK_EQ(iof_compat_write(fds[1], "ok", 2), 2);
  CHECK_EQ(iof_compat_read(fds[0], buf, sizeof buf), 2);
  /* recvmsg of a NULL message once data is there: EFAULT, data kept. */
  CHECK_EQ(iof_compat_write(fds[1], "zz", 2), 2);
  CHECK_ERR(iof_compat_recvmsg(fds[0], NULL, 0), EFAULT);
  CHECK_ERR(iof_compat_read(fds[0], NULL, 2), EFAULT);
  CHECK_EQ(iof_compat_read(fds[0], buf, sizeof buf), 2);
  /* A refused fdopen leaves the fd as it was: a fiber's fd stays in the
   * runtime's non-blocking mode (a blocking one would hold its thread). */
  CHECK_EQ(iof_compat_fdopen(fds[0], "zz") == NULL, 1);
  CHECK_EQ(errno, EINVAL);
  if (in_a_fiber) CHECK_EQ(fcntl(fds[0], F_GETFL) & O_NONBLOCK, O_NONBLOCK);
  /* A NULL mode, which glibc's fdopen and popen read: EINVAL. */
  errno = 0;
  CHECK_EQ(iof_compat_fdopen(fds[0], NULL) == NULL, 1);
  CHECK_EQ(errno, EINVAL);
  errno = 0;
  CHECK_EQ(iof_compat_popen("true", NULL) == NULL, 1);
  CHECK_EQ(errno, EINVAL);

  /* accept on a socket that does not listen: EINVAL, not a wait. */
  int s = iof_compat_socket(AF_INET, SOCK_STREAM, 0);
  CHECK_EQ(s >= 0, 1);
  CHECK_ERR(iof_compat_accept(s, NULL, NULL), EINVAL);
  CHECK_ERR(iof_compat_accept4(s, NULL, NULL, 0x7fff0000), EINVAL);
  CHECK_ERR(iof_compat_connect(s, NULL, sizeof(struct sockaddr_in)), EFAULT);
  struct sockaddr_in sin = {0};
  sin.sin_family = AF_INET;
  CHECK_ERR(iof_compat_connect(s, (struct sockaddr *)&sin, 0), EINVAL);
  CHECK_EQ(iof_compat_close(s), 0);
  CHECK_ERR(iof_compat_close(s), EBADF);
  CHECK_EQ(iof_compat_close(fds[0]), 0);
  CHECK_EQ(iof_compat_close(fds[1]), 0);
  return 0;
}

static void compat_fd_calls(void **state) {
  (void)state;
  both_ways(fd_calls);
}

/* A failed dup2/dup3 must leave the target fd's record alone: its
 * non-blocking view and timeouts stay, its waiters keep waiting. */
static int dup_fail_fn(void *arg) {
  (void)arg;
  int fds[2];
  CHECK_EQ(iof_compat_socketpair(AF_UNIX, SOCK_STREAM, 0, fds), 0);
  CHECK_EQ(iof_compat_fcntl(fds[0], F_SETFL, O_NONBLOCK), 0);
  int closed = iof_compat_dup(fds[1]);
  CHECK_EQ(iof_compat_close(closed), 0);
  CHECK_ERR(iof_compat_dup2(closed, fds[0]), EBADF);
  CHECK_ERR(iof_compat_dup2(-1, fds[0]), EBADF);
  CHECK_ERR(iof_compat_dup3(closed, fds[0], 0), EBADF);
  CHECK_ERR(iof_compat_dup3(fds[1], fds[0], 0x7fff0000), EINVAL);
  CHECK_EQ(iof_compat_fcntl(fds[0], F_GETFL) & O_NONBLOCK, O_NONBLOCK);
  char c;
  CHECK_ERR(iof_compat_read(fds[0], &c, 1), EAGAIN); /* still the user's */
  CHECK_EQ(iof_compat_close(fds[0]), 0);
  CHECK_EQ(iof_compat_close(fds[1]), 0);
  return 0;
}

typedef struct dup_wait {
  int fds[2];
  ssize_t got;
  int err;
} dup_wait;

static int dup_waiter(void *arg) {
  dup_wait *d = arg;
  char buf[8];
  errno = 0;
  d->got = iof_compat_read(d->fds[0], buf, sizeof buf);
  d->err = errno;
  return 0;
}

static int dup_spoiler(void *arg) {
  dup_wait *d = arg;
  iof_sleep_for(10 * MS); /* the waiter waits */
  int closed = iof_compat_dup(d->fds[1]);
  CHECK_EQ(iof_compat_close(closed), 0);
  CHECK_ERR(iof_compat_dup2(closed, d->fds[0]), EBADF);
  CHECK_ERR(iof_compat_dup3(closed, d->fds[0], 0), EBADF);
  iof_sleep_for(10 * MS);
  CHECK_EQ(iof_compat_write(d->fds[1], "hey", 3), 3);
  return 0;
}

static void compat_failed_dup_keeps_target(void **state) {
  (void)state;
  both_ways(dup_fail_fn);
  dup_wait d = {{-1, -1}, 0, 0};
  assert_int_equal(iof_compat_socketpair(AF_UNIX, SOCK_STREAM, 0, d.fds), 0);
  iof_io_context *io = iof_io_context_create();
  launch(io, dup_waiter, &d);
  launch(io, dup_spoiler, &d);
  run_all(io);
  assert_int_equal(d.got, 3); /* not EBADF: fds[0] never closed */
  assert_int_equal(atomic_load(&failures), 0);
  assert_int_equal(iof_io_context_destroy(io), 0);
  iof_compat_close(d.fds[0]);
  iof_compat_close(d.fds[1]);
}

/* ---- random fd operations from several fibers -------------------------- */

#define FZ_FDS 8
typedef struct fdfuzz {
  atomic_int fds[FZ_FDS];
  atomic_uint seed;
  atomic_long ops;
  bool mutate; /* close/replace/dup2 too (one thread only: closing an fd
                  another thread uses is a race TSan reports) */
} fdfuzz;

static unsigned frnd(unsigned *s) {
  *s = *s * 1103515245u + 12345u;
  return (*s >> 8) & 0xffffff;
}

static void fz_timeouts(int fd) {
  struct timeval tv = {0, 2000};
  iof_compat_setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  iof_compat_setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
}

static int fz_fiber(void *arg) {
  fdfuzz *z = arg;
  unsigned s = atomic_fetch_add(&z->seed, 77);
  char buf[512];
  memset(buf, 'z', sizeof buf);
  for (int i = 0; i < 1500; i++) {
    int k = (int)(frnd(&s) % FZ_FDS);
    int fd = atomic_load(&z->fds[k]);
    int r;
    unsigned op = frnd(&s) % 10;
    if (!z->mutate && (op == 5 || op == 6)) op = 8;
    switch (op) {
    case 0:
    case 1:
      r = (int)iof_compat_write(fd, buf, 1 + frnd(&s) % sizeof buf);
      CHECK_EQ(r > 0 || errno == EAGAIN || errno == EBADF || errno == EPIPE ||
                   errno == ECONNRESET,
               1);
      break;
    case 2:
    case 3:
      r = (int)iof_compat_read(fd, buf, 1 + frnd(&s) % sizeof buf);
      CHECK_EQ(r >= 0 || errno == EAGAIN || errno == EBADF ||
                   errno == ECONNRESET,
               1);
      break;
    case 4: {
      struct pollfd pf[2] = {
          {fd, POLLIN, 0},
          {atomic_load(&z->fds[(k + 1) % FZ_FDS]), POLLOUT, 0}};
      r = iof_compat_poll(pf, 2, 1);
      CHECK_EQ(r >= 0, 1);
      break;
    }
    case 5: { /* close and replace by a fresh pair end */
      int sv[2];
      if (iof_compat_socketpair(AF_UNIX, SOCK_STREAM, 0, sv) == 0) {
        fz_timeouts(sv[0]);
        atomic_store(&z->fds[k], sv[0]);
        iof_compat_close(fd);
        iof_compat_close(sv[1]); /* its peer reads end of stream */
      }
      break;
    }
    case 6: { /* dup2 another fd over this one */
      int other = atomic_load(&z->fds[(k + 3) % FZ_FDS]);
      r = iof_compat_dup2(other, fd);
      CHECK_EQ(r == fd || errno == EBADF, 1);
      break;
    }
    case 7:
      r = iof_compat_fcntl(fd, F_SETFL, (frnd(&s) & 1) ? O_NONBLOCK : 0);
      CHECK_EQ(r == 0 || errno == EBADF, 1);
      break;
    case 8:
      iof_compat_sched_yield();
      break;
    default: {
      int one = (int)(frnd(&s) & 1);
      iof_compat_ioctl(fd, FIONBIO, &one);
      break;
    }
    }
    atomic_fetch_add(&z->ops, 1);
  }
  return 0;
}

static void *fz_runner(void *arg) {
  iof_io_context *io = arg;
  iof_io_context_run(io);
  return NULL;
}

static void compat_random_fd_operations(void **state) {
  (void)state;
  /* write(2) to a closed peer raises SIGPIPE, as POSIX says. */
  void (*old_pipe)(int) = signal(SIGPIPE, SIG_IGN);
  for (int round = 0; round < 2; round++) {
    fdfuzz z;
    memset(&z, 0, sizeof z);
    atomic_store(&z.seed, 42u + (unsigned)round);
    z.mutate = round == 0;
    for (int i = 0; i < FZ_FDS; i += 2) {
      int sv[2];
      assert_int_equal(iof_compat_socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
      fz_timeouts(sv[0]);
      fz_timeouts(sv[1]);
      atomic_store(&z.fds[i], sv[0]);
      atomic_store(&z.fds[i + 1], sv[1]);
    }
    /* Round 0: four fibers on one io_context, fds closed, replaced and
     * dup2'ed under each other. Round 1: two io_contexts on two threads
     * share the fds. */
    iof_io_context *io = iof_io_context_create();
    iof_io_context *io2 = iof_io_context_create();
    for (int i = 0; i < 4; i++)
      launch(round == 0 || i % 2 ? io : io2, fz_fiber, &z);
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, fz_runner, io2), 0);
    run_all(io);
    pthread_join(th, NULL);
    assert_int_equal(atomic_load(&z.ops), 4 * 1500);
    assert_int_equal(atomic_load(&failures), 0);
    assert_int_equal(iof_io_context_destroy(io), 0);
    assert_int_equal(iof_io_context_destroy(io2), 0);
    for (int i = 0; i < FZ_FDS; i++) iof_compat_close(atomic_load(&z.fds[i]));
  }
  signal(SIGPIPE, old_pipe);
}

/* ---- poll/select/epoll and sleeps ------------------------------------- */

static int poll_calls(void *arg) {
  (void)arg;
  CHECK_ERR(iof_compat_poll(NULL, 1, 0), EFAULT);
  CHECK_ERR(iof_compat_poll(NULL, 1, 10), EFAULT);
  struct timespec ten_ms = {0, 10000000};
  CHECK_ERR(iof_compat_ppoll(NULL, 2, &ten_ms, NULL), EFAULT);
  if (in_a_fiber) { /* the plain call truncates the count and blocks */
    struct pollfd one = {-1, POLLIN, 0};
    CHECK_ERR(iof_compat_poll(&one, ((nfds_t)1 << 32) | 1, 10), EINVAL);
  }
  struct pollfd pf = {-1, POLLIN, 0};
  CHECK_EQ(iof_compat_poll(&pf, 1, 0), 0); /* negative fds are ignored */
  pf.fd = INT_MAX;
  CHECK_EQ(iof_compat_poll(&pf, 1, 0), 1);
  CHECK_EQ(pf.revents, POLLNVAL);
  struct timespec bad_ts = {0, 1000000000L};
  pf.fd = -1;
  CHECK_ERR(iof_compat_ppoll(&pf, 1, &bad_ts, NULL), EINVAL);
  struct timespec neg_ts = {-1, 0};
  CHECK_ERR(iof_compat_ppoll(&pf, 1, &neg_ts, NULL), EINVAL);
  CHECK_ERR(iof_compat_select(-1, NULL, NULL, NULL, NULL), EINVAL);
  struct timeval tv = {-1, 0};
  CHECK_ERR(iof_compat_select(0, NULL, NULL, NULL, &tv), EINVAL);
  struct timeval tv2 = {0, -1};
  CHECK_ERR(iof_compat_select(0, NULL, NULL, NULL, &tv2), EINVAL);
  CHECK_ERR(iof_compat_pselect(0, NULL, NULL, NULL, &bad_ts, NULL), EINVAL);
  struct epoll_event ev;
  CHECK_ERR(iof_compat_epoll_wait(-1, &ev, 1, 0), EBADF);
  int ep = epoll_create1(0);
  CHECK_ERR(iof_compat_epoll_wait(ep, &ev, 0, 0), EINVAL);
  CHECK_ERR(iof_compat_epoll_wait(ep, &ev, -1, 0), EINVAL);
  CHECK_ERR(iof_compat_epoll_pwait(ep, &ev, INT_MAX, 0, NULL), EINVAL);
  CHECK_EQ(iof_compat_epoll_wait(ep, &ev, 1, 0), 0);
  /* Timeouts at wild addresses: the kernel's EFAULT, as the plain calls
   * (glibc's ppoll, pselect and select read theirs and fault). */
  const struct timespec *wild = (const struct timespec *)8;
  CHECK_ERR(iof_compat_epoll_pwait2(ep, &ev, 1, wild, NULL), EFAULT);
  CHECK_ERR(iof_compat_epoll_pwait2(ep, &ev, 1, &bad_ts, NULL), EINVAL);
  close(ep);
  CHECK_ERR(iof_compat_nanosleep(wild, NULL), EFAULT);
  CHECK_EQ(iof_compat_clock_nanosleep(CLOCK_MONOTONIC, 0, wild, NULL), EFAULT);

  CHECK_ERR(iof_compat_nanosleep(NULL, NULL), EFAULT);
  CHECK_ERR(iof_compat_nanosleep(&bad_ts, NULL), EINVAL);
  CHECK_ERR(iof_compat_nanosleep(&neg_ts, NULL), EINVAL);
  struct timespec ns_neg = {0, -1};
  CHECK_ERR(iof_compat_nanosleep(&ns_neg, NULL), EINVAL);
  CHECK_EQ(iof_compat_clock_nanosleep(CLOCK_MONOTONIC, 0, &bad_ts, NULL),
           EINVAL);
  CHECK_EQ(iof_compat_clock_nanosleep(CLOCK_MONOTONIC, 0, NULL, NULL), EFAULT);
  CHECK_EQ(iof_compat_clock_nanosleep((clockid_t)12345, 0, &neg_ts, NULL),
           EINVAL);
  /* An absolute deadline in the far past returns at once. */
  struct timespec past = {0, 0};
  CHECK_EQ(
      iof_compat_clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &past, NULL),
      0);
  CHECK_EQ(
      iof_compat_clock_nanosleep(CLOCK_REALTIME, TIMER_ABSTIME, &past, NULL),
      0);
  CHECK_EQ(iof_compat_usleep(0), 0);
  CHECK_EQ(iof_compat_sleep(0), 0);
  CHECK_EQ(iof_compat_sched_yield(), 0);
  return 0;
}

static void compat_poll_and_sleep_calls(void **state) {
  (void)state;
  both_ways(poll_calls);
}

/* Wild fd arrays, fd_sets, signal sets and masks: the kernel's EFAULT,
 * as the plain calls (the compat paths read them first and faulted: in
 * any fiber for the arrays and sets, in a fiber thread for the masks,
 * which it wears for the wait). */
static int wild_sets(void *arg) {
  (void)arg;
  void *wild = (void *)8;
  struct timespec ten = {0, 10 * MS};
  struct timeval tv = {0, 10000};
  CHECK_ERR(iof_compat_poll(wild, 1, 10), EFAULT);
  CHECK_ERR(iof_compat_ppoll(wild, 1, &ten, NULL), EFAULT);
  CHECK_ERR(iof_compat_select(1, wild, NULL, NULL, &tv), EFAULT);
  tv.tv_usec = 10000;
  CHECK_ERR(iof_compat_select(1, NULL, NULL, wild, &tv), EFAULT);
  CHECK_ERR(iof_compat_pselect(1, NULL, wild, NULL, &ten, NULL), EFAULT);
  struct pollfd pf = {-1, POLLIN, 0};
  CHECK_ERR(iof_compat_ppoll(&pf, 1, &ten, wild), EFAULT);
  CHECK_ERR(iof_compat_pselect(0, NULL, NULL, NULL, &ten, wild), EFAULT);
  int ep = epoll_create1(EPOLL_CLOEXEC);
  struct epoll_event ev;
  CHECK_ERR(iof_compat_epoll_pwait(ep, &ev, 1, 10, wild), EFAULT);
  CHECK_ERR(iof_compat_epoll_pwait2(ep, &ev, 1, &ten, wild), EFAULT);
  close(ep);
  CHECK_ERR(iof_compat_sigtimedwait(wild, NULL, &ten), EFAULT);
  struct timespec zero = {0, 0};
  CHECK_ERR(iof_compat_sigtimedwait(wild, NULL, &zero), EFAULT);
  CHECK_ERR(iof_compat_sigwaitinfo(wild, NULL), EFAULT);
  int sig = 0;
  CHECK_EQ(iof_compat_sigwait(wild, &sig), EFAULT);
  CHECK_ERR(iof_compat_sigsuspend(wild), EFAULT);
  /* Masks: an old the kernel cannot write is EFAULT, and the mask stays
   * as it was (a fiber thread's used to crash on it); so is a set it
   * cannot read, in a fiber thread (glibc's own call reads the set itself
   * and crashes, so the plain pass leaves that out). */
  sigset_t before, after, usr;
  sigemptyset(&usr);
  sigaddset(&usr, SIGUSR1);
  CHECK_EQ(iof_compat_pthread_sigmask(SIG_BLOCK, NULL, &before), 0);
  if (in_fiber_thread) {
    CHECK_ERR(iof_compat_sigprocmask(SIG_BLOCK, wild, NULL), EFAULT);
    CHECK_ERR(iof_compat_sigprocmask(SIG_SETMASK, wild, &after), EFAULT);
    CHECK_EQ(iof_compat_pthread_sigmask(SIG_BLOCK, wild, NULL), EFAULT);
    CHECK_ERR(iof_compat_sigprocmask(12345, &usr, wild), EINVAL);
  }
  CHECK_ERR(iof_compat_sigprocmask(SIG_BLOCK, NULL, wild), EFAULT);
  CHECK_EQ(iof_compat_pthread_sigmask(SIG_UNBLOCK, NULL, wild), EFAULT);
  CHECK_EQ(iof_compat_pthread_sigmask(SIG_BLOCK, NULL, &after), 0);
  for (int s = 1; s < 32; s++)
    CHECK_EQ(sigismember(&after, s), sigismember(&before, s));
  /* set may be old: read before it is written. */
  after = usr;
  CHECK_EQ(iof_compat_pthread_sigmask(SIG_BLOCK, &after, &after), 0);
  CHECK_EQ(sigismember(&after, SIGUSR1), sigismember(&before, SIGUSR1));
  CHECK_EQ(iof_compat_pthread_sigmask(SIG_SETMASK, &before, &after), 0);
  CHECK_EQ(sigismember(&after, SIGUSR1), 1);
  /* A set as long as nfds needs, against an unreadable page: the kernel
   * reads 8 bytes of it, and so must compat. */
  long pg = sysconf(_SC_PAGESIZE);
  char *two = mmap(NULL, (size_t)pg * 2, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  CHECK_EQ(two != MAP_FAILED, 1);
  if (two == MAP_FAILED) return 0;
  CHECK_EQ(mprotect(two + pg, (size_t)pg, PROT_NONE), 0);
  fd_set *tail = (fd_set *)(two + pg - 8);
  memset(tail, 0, 8);
  int sv[2];
  CHECK_EQ(iof_compat_socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
  if (sv[0] < 64) {
    FD_SET(sv[0], tail);
    tv.tv_sec = 0;
    tv.tv_usec = 10000;
    CHECK_EQ(iof_compat_select(sv[0] + 1, tail, NULL, NULL, &tv), 0);
    FD_SET(sv[0], tail);
    CHECK_EQ(iof_compat_write(sv[1], "x", 1), 1);
    CHECK_EQ(iof_compat_pselect(sv[0] + 1, tail, NULL, NULL, &ten, NULL), 1);
    CHECK_EQ(FD_ISSET(sv[0], tail) != 0, 1);
  }
  iof_compat_close(sv[0]);
  iof_compat_close(sv[1]);
  /* A read-only set: the kernel cannot write the answer back (EFAULT);
   * compat must not write to it either. */
  memset(two, 0, 8);
  CHECK_EQ(mprotect(two, (size_t)pg, PROT_READ), 0);
  tv.tv_sec = 0;
  tv.tv_usec = 10000;
  CHECK_ERR(iof_compat_select(1, (fd_set *)two, NULL, NULL, &tv), EFAULT);
  munmap(two, (size_t)pg * 2);
  return 0;
}

static void compat_wild_sets(void **state) {
  (void)state;
  both_ways(wild_sets);
  in_a_fiber = in_fiber_thread = 1;
  assert_int_equal(iof_main(wild_sets, NULL), 0); /* a fiber thread */
  in_fiber_thread = 0;
  assert_int_equal(atomic_load(&failures), 0);
}

static void never_runs(int sig) {
  (void)sig;
}

static int signal_calls(void *arg) {
  (void)arg;
  struct sigaction sa, old;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = never_runs;
  int bad[] = {0, -1, NSIG, INT_MAX, INT_MIN};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    CHECK_ERR(iof_compat_sigaction(bad[i], &sa, NULL), EINVAL);
    CHECK_ERR(iof_compat_sigaction(bad[i], NULL, &old), EINVAL);
    errno = 0;
    CHECK_EQ(iof_compat_signal(bad[i], never_runs) == SIG_ERR, 1);
    CHECK_EQ(errno, EINVAL);
  }
  CHECK_ERR(iof_compat_sigaction(SIGKILL, &sa, NULL), EINVAL);
  CHECK_ERR(iof_compat_sigaction(SIGSTOP, &sa, NULL), EINVAL);
  /* A refused install leaves the old handler (none) in place. */
  CHECK_EQ(iof_compat_sigaction(SIGKILL, NULL, &old), 0);
  CHECK_EQ(old.sa_handler == SIG_DFL, 1);
  /* Installed and queried: the handler as given, never the trampoline. */
  CHECK_EQ(iof_compat_sigaction(SIGUSR2, &sa, NULL), 0);
  CHECK_EQ(iof_compat_sigaction(SIGUSR2, NULL, &old), 0);
  CHECK_EQ(old.sa_handler == never_runs, 1);
  CHECK_EQ(iof_compat_signal(SIGUSR2, SIG_DFL) == never_runs, 1);
  CHECK_EQ(iof_compat_signal(SIGUSR2, SIG_DFL) == SIG_DFL, 1);
  /* The waits: bad sets, timeouts and outputs. */
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGUSR2);
  struct timespec bad_ts[] = {{0, -1}, {0, 1000000000}, {-1, 0}};
  for (size_t i = 0; i < sizeof bad_ts / sizeof bad_ts[0]; i++)
    CHECK_ERR(iof_compat_sigtimedwait(&set, NULL, &bad_ts[i]), EINVAL);
  CHECK_ERR(iof_compat_sigtimedwait(NULL, NULL, &bad_ts[0]), EFAULT);
  CHECK_ERR(iof_compat_sigtimedwait(&set, NULL, (struct timespec *)8), EFAULT);
  CHECK_ERR(iof_compat_sigwaitinfo(NULL, NULL), EFAULT);
  int sig = 0;
  CHECK_EQ(iof_compat_sigwait(NULL, &sig), EINVAL);
  CHECK_EQ(iof_compat_sigwait(&set, NULL), EINVAL);
  CHECK_ERR(iof_compat_sigsuspend(NULL), EFAULT);
  struct timespec zero = {0, 0};
  CHECK_ERR(iof_compat_sigtimedwait(&set, NULL, &zero), EAGAIN);
  return 0;
}

static void compat_signal_calls(void **state) {
  (void)state;
  both_ways(signal_calls);
}

/* Reads of glibc's streams: NULL streams and buffers are EINVAL (glibc
 * crashes), a write-only stream fails as glibc's does, and a file's
 * stream reads as usual. */
static int stdio_calls(void *arg) {
  (void)arg;
  char buf[32];
  char *line = NULL;
  size_t cap = 0;
  CHECK_EQ(iof_compat_fwait(NULL), 0);
  errno = 0;
  CHECK_EQ(iof_compat_fgets(buf, sizeof buf, NULL) == NULL && errno == EINVAL,
           1);
  errno = 0;
  CHECK_EQ(iof_compat_fgets(NULL, 8, stdin) == NULL && errno == EINVAL, 1);
  CHECK_ERR(iof_compat_getline(&line, &cap, NULL), EINVAL);
  CHECK_ERR(iof_compat_getline(NULL, &cap, stdin), EINVAL);
  CHECK_ERR(iof_compat_getdelim(&line, NULL, ',', stdin), EINVAL);
  errno = 0;
  CHECK_EQ(iof_compat_fgetc(NULL) == EOF && errno == EINVAL, 1);
  errno = 0;
  CHECK_EQ(iof_compat_getc(NULL) == EOF && errno == EINVAL, 1);
  errno = 0;
  CHECK_EQ(iof_compat_fread(NULL, 1, 4, stdin) == 0 && errno == EINVAL, 1);
  CHECK_EQ(iof_compat_fread(buf, 1, 4, NULL) == 0 && errno == EINVAL, 1);
  char path[] = "/tmp/iof-hostile-stdio-XXXXXX";
  int fd = mkstemp(path);
  CHECK_EQ(fd >= 0, 1);
  if (fd < 0) return 0;
  CHECK_EQ(write(fd, "one\ntwo\n", 8), 8);
  FILE *w = fopen(path, "a");
  CHECK_EQ(w != NULL, 1);
  if (w) { /* a stream that cannot read: at once, as glibc's */
    CHECK_EQ(iof_compat_fwait(w), 0);
    CHECK_EQ(iof_compat_fgets(buf, sizeof buf, w) == NULL, 1);
    fclose(w);
  }
  FILE *r = fopen(path, "r");
  CHECK_EQ(r != NULL, 1);
  if (r) {
    CHECK_EQ(iof_compat_fgets(buf, sizeof buf, r) != NULL, 1);
    CHECK_EQ(strcmp(buf, "one\n"), 0);
    CHECK_EQ(iof_compat_getline(&line, &cap, r), 4);
    CHECK_EQ(iof_compat_getc(r), EOF);
    fclose(r);
  }
  free(line);
  close(fd);
  unlink(path);
  return 0;
}

static void compat_stdio_calls(void **state) {
  (void)state;
  both_ways(stdio_calls);
}

/* Child waits with no child, a stranger's pid, bad options and types. */
static int process_calls(void *arg) {
  (void)arg;
  siginfo_t si;
  CHECK_ERR(iof_compat_waitpid(-1, NULL, 0), ECHILD);
  CHECK_ERR(iof_compat_waitpid(1, NULL, 0), ECHILD);
  CHECK_ERR(iof_compat_waitpid(INT_MIN, NULL, 0), ESRCH);
  CHECK_ERR(iof_compat_waitpid(-1, NULL, 0x100), EINVAL);
  CHECK_ERR(iof_compat_wait(NULL), ECHILD);
  CHECK_ERR(iof_compat_wait4(-1, NULL, 0x100, NULL), EINVAL);
  CHECK_ERR(iof_compat_waitid((idtype_t)99, 0, &si, WEXITED), EINVAL);
  CHECK_ERR(iof_compat_waitid(P_ALL, 0, &si, 0), EINVAL);
  CHECK_ERR(iof_compat_waitid(P_PID, 1, &si, WEXITED), ECHILD);
  /* A wild info: the kernel's EFAULT, never a fault in compat. */
  pid_t kid = fork();
  if (kid == 0) _exit(0);
  CHECK_EQ(kid > 0, 1);
  CHECK_ERR(iof_compat_waitid(P_PID, (id_t)kid, (siginfo_t *)8, WEXITED),
            EFAULT);
  iof_compat_waitpid(kid, NULL, 0); /* reaped unless the kernel did */
  return 0;
}

static void compat_process_calls(void **state) {
  (void)state;
  both_ways(process_calls);
}

/* A nanosleep of LONG_MAX seconds in a fiber is a long sleep (cancelled by
 * a stop), not a wrapped, instant one. */
static int long_nanosleep(void *arg) {
  int *r = arg;
  struct timespec ts = {LONG_MAX, 999999999L};
  errno = 0;
  r[0] = iof_compat_nanosleep(&ts, NULL);
  r[1] = errno;
  return 0;
}

static int long_abs_sleep(void *arg) {
  int *r = arg;
  struct timespec ts = {LONG_MAX, 999999999L};
  r[2] = iof_compat_clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL);
  return 0;
}

static int long_poll(void *arg) {
  int *r = arg;
  struct pollfd pf = {-1, POLLIN, 0};
  struct timespec ts = {LONG_MAX, 999999999L};
  errno = 0;
  r[3] = iof_compat_ppoll(&pf, 1, &ts, NULL);
  r[4] = errno;
  return 0;
}

static void huge_compat_sleeps_are_long(void **state) {
  (void)state;
  iof_io_context *io = iof_io_context_create();
  iof_stop_source src;
  assert_int_equal(iof_stop_source_init(&src), 0);
  iof_launch_opts o = {0};
  o.stop_token = iof_stop_source_token(&src);
  int r[5] = {7, 7, 7, 7, 7};
  iof_executor_ref ex = iof_io_context_executor(io);
  assert_int_equal(iof_run_async(ex, &o, long_nanosleep, r), 0);
  assert_int_equal(iof_run_async(ex, &o, long_abs_sleep, r), 0);
  assert_int_equal(iof_run_async(ex, &o, long_poll, r), 0);
  iof_io_context_run_for(io, 30 * MS);
  assert_int_equal(r[0], 7);
  assert_int_equal(r[2], 7);
  assert_int_equal(r[3], 7);
  iof_stop_source_request(&src);
  run_all(io);
  assert_int_equal(r[0], -1);
  assert_int_equal(r[1], ECANCELED);
  assert_int_equal(r[2], ECANCELED);
  assert_int_equal(r[3], -1);
  assert_int_equal(r[4], ECANCELED);
  iof_stop_source_destroy(&src);
  assert_int_equal(iof_io_context_destroy(io), 0);
}

/* A read waiting under a huge SO_RCVTIMEO gets the data that comes
 * later, not an EAGAIN from a wrapped deadline. */
typedef struct huge_rcv {
  int fds[2];
  ssize_t got;
  int err;
} huge_rcv;

static int huge_rcv_reader(void *arg) {
  huge_rcv *h = arg;
  struct timeval tv = {LONG_MAX, 0};
  CHECK_EQ(
      iof_compat_setsockopt(h->fds[0], SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv),
      0);
  char buf[8];
  errno = 0;
  h->got = iof_compat_read(h->fds[0], buf, sizeof buf);
  h->err = errno;
  return 0;
}

static int huge_rcv_writer(void *arg) {
  huge_rcv *h = arg;
  iof_sleep_for(20 * MS);
  CHECK_EQ(iof_compat_write(h->fds[1], "late", 4), 4);
  return 0;
}

static void huge_rcvtimeo_waits(void **state) {
  (void)state;
  huge_rcv h = {{-1, -1}, 0, 0};
  assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, h.fds), 0);
  iof_io_context *io = iof_io_context_create();
  launch(io, huge_rcv_reader, &h);
  launch(io, huge_rcv_writer, &h);
  run_all(io);
  assert_int_equal(h.got, 4);
  assert_int_equal(atomic_load(&failures), 0);
  assert_int_equal(iof_io_context_destroy(io), 0);
  iof_compat_close(h.fds[0]);
  iof_compat_close(h.fds[1]);
}

/* ---- message queues --------------------------------------------------- */

static int ipc_calls(void *arg) {
  (void)arg;
  char name[64];
  snprintf(name, sizeof name, "/iof-hostile-%d-%d", (int)getpid(), in_a_fiber);
  struct mq_attr at = {0};
  at.mq_maxmsg = 2;
  at.mq_msgsize = 16;
  mqd_t q = mq_open(name, O_RDWR | O_CREAT | O_EXCL, 0600, &at);
  if (q == (mqd_t)-1) return 0; /* no POSIX queues here */
  mq_unlink(name);
  char buf[16];
  const struct timespec bad = {0, 1000000000L}, neg = {-1, 0};
  const struct timespec *wild = (const struct timespec *)8;
  /* Linux checks the timeout before the queue: even a call that would
   * not wait fails, and the message stays. */
  CHECK_EQ(iof_compat_mq_send(q, "ab", 2, 1), 0);
  CHECK_ERR(iof_compat_mq_timedreceive(q, buf, sizeof buf, NULL, &bad), EINVAL);
  CHECK_ERR(iof_compat_mq_timedreceive(q, buf, sizeof buf, NULL, &neg), EINVAL);
  CHECK_ERR(iof_compat_mq_timedreceive(q, buf, sizeof buf, NULL, wild), EFAULT);
  CHECK_ERR(iof_compat_mq_timedsend(q, "cd", 2, 1, &bad), EINVAL);
  CHECK_ERR(iof_compat_mq_timedsend(q, "cd", 2, 1, wild), EFAULT);
  CHECK_EQ(iof_compat_mq_receive(q, buf, sizeof buf, NULL), 2);
  CHECK_ERR(iof_compat_mq_receive(q, buf, 15, NULL), EMSGSIZE);
  CHECK_ERR(iof_compat_mq_send(q, buf, 17, 0), EMSGSIZE);
  CHECK_EQ(mq_close(q), 0);
  CHECK_ERR(iof_compat_mq_send(q, "ab", 2, 0), EBADF);

  /* MSG_COPY without IPC_NOWAIT is EINVAL, empty queue or not (a fiber
   * waited for a message at that index, or copied one). */
  int id = msgget(IPC_PRIVATE, 0600);
  if (id < 0) return 0; /* no System V IPC here */
  struct {
    long type;
    char text[8];
  } m = {1, "x"};
  CHECK_ERR(iof_compat_msgrcv(id, &m, sizeof m.text, 0, MSG_COPY), EINVAL);
  CHECK_EQ(iof_compat_msgsnd(id, &m, 2, 0), 0);
  CHECK_ERR(iof_compat_msgrcv(id, &m, sizeof m.text, 0, MSG_COPY), EINVAL);
  CHECK_ERR(iof_compat_msgrcv(id, &m, 1, 0, 0), E2BIG);
  CHECK_EQ(iof_compat_msgrcv(id, &m, sizeof m.text, 0, 0), 2);
  CHECK_ERR(iof_compat_msgrcv(id, &m, sizeof m.text, 0, IPC_NOWAIT), ENOMSG);
  CHECK_EQ(msgctl(id, IPC_RMID, NULL), 0);
  CHECK_ERR(iof_compat_msgrcv(id, &m, sizeof m.text, 0, 0), EINVAL);
  return 0;
}

static void compat_ipc_calls(void **state) {
  (void)state;
  both_ways(ipc_calls);
}

/* ---- resolver --------------------------------------------------------- */

static int resolve_calls(void *arg) {
  (void)arg;
  struct addrinfo *res = NULL;
  CHECK_EQ(iof_compat_getaddrinfo(NULL, NULL, NULL, &res), EAI_NONAME);
  struct addrinfo h = {0};
  h.ai_family = 12345;
  CHECK_EQ(iof_compat_getaddrinfo("127.0.0.1", "80", &h, &res), EAI_FAMILY);
  h.ai_family = 0;
  h.ai_flags = 0x7fff0000;
  CHECK_EQ(iof_compat_getaddrinfo("127.0.0.1", "80", &h, &res), EAI_BADFLAGS);
  iof_compat_freeaddrinfo(NULL);
  struct hostent he, *out = NULL;
  char small[4];
  int herr = 0;
  CHECK_EQ(iof_compat_gethostbyname_r("localhost", &he, small, sizeof small,
                                      &out, &herr),
           ERANGE);
  CHECK_EQ(out == NULL, 1);
  /* A buflen larger than the buffer (glibc writes only what the answer
   * needs): nothing past it is written. */
  char room[512];
  CHECK_EQ(
      iof_compat_gethostbyname_r("localhost", &he, room, SIZE_MAX, &out, &herr),
      0);
  /* glibc's own call answers no entry here; compat's has it. */
  CHECK_EQ(out == NULL || !strcmp(he.h_name, "localhost"), 1);
  /* Reverse lookups with bad input: libc's answers, nothing queued. */
  struct in_addr lo = {htonl(INADDR_LOOPBACK)};
  /* glibc's own calls crash on these NULLs. */
  errno = 0;
  CHECK_EQ(iof_compat_gethostbyname(NULL) == NULL, 1);
  CHECK_EQ(errno, EINVAL);
  CHECK_EQ(
      iof_compat_gethostbyname_r(NULL, &he, small, sizeof small, &out, &herr),
      EINVAL);
  CHECK_EQ(out == NULL && herr == NETDB_INTERNAL, 1);
  CHECK_EQ(iof_compat_gethostbyname_r("localhost", NULL, small, sizeof small,
                                      &out, &herr),
           EINVAL);
  CHECK_EQ(iof_compat_gethostbyname_r("localhost", &he, small, sizeof small,
                                      NULL, NULL),
           EINVAL);
  errno = 0;
  CHECK_EQ(iof_compat_gethostbyaddr(NULL, 4, AF_INET) == NULL, 1);
  CHECK_EQ(errno, EINVAL);
  CHECK_EQ(iof_compat_gethostbyaddr_r(NULL, 4, AF_INET, &he, small,
                                      sizeof small, &out, &herr),
           EINVAL);
  CHECK_EQ(
      iof_compat_gethostbyaddr_r(&lo, 4, AF_INET, &he, NULL, 10, &out, &herr),
      EINVAL);
  CHECK_EQ(iof_compat_gethostbyaddr(&lo, 3, AF_INET) == NULL, 1);
  CHECK_EQ(iof_compat_gethostbyaddr(&lo, sizeof lo, 12345) == NULL, 1);
  CHECK_EQ(iof_compat_gethostbyaddr_r(&lo, sizeof lo, AF_INET, &he, small,
                                      sizeof small, &out, &herr),
           ERANGE);
  char host[64];
  CHECK_EQ(iof_compat_getnameinfo(NULL, 16, host, sizeof host, NULL, 0, 0),
           EAI_FAMILY);
  struct sockaddr_in sin = {0};
  sin.sin_family = AF_INET;
  CHECK_EQ(iof_compat_getnameinfo((struct sockaddr *)&sin, 1, host, sizeof host,
                                  NULL, 0, 0),
           EAI_FAMILY);
  CHECK_EQ(iof_compat_getnameinfo((struct sockaddr *)&sin, 100000, host,
                                  sizeof host, NULL, 0, NI_NUMERICHOST),
           0); /* glibc only checks that the length covers the address */
  CHECK_EQ(strcmp(host, "0.0.0.0"), 0);
  sin.sin_family = 12345;
  CHECK_EQ(iof_compat_getnameinfo((struct sockaddr *)&sin, sizeof sin, host,
                                  sizeof host, NULL, 0, 0),
           EAI_FAMILY);
  sin.sin_family = AF_INET;
  CHECK_EQ(iof_compat_getnameinfo((struct sockaddr *)&sin, sizeof sin, NULL, 0,
                                  NULL, 0, 0),
           0); /* nothing asked: glibc's answer */
  CHECK_EQ(iof_compat_getnameinfo((struct sockaddr *)&sin, sizeof sin, host,
                                  sizeof host, NULL, 0, 0x7fff0000),
           EAI_BADFLAGS);
  /* Lengths larger than the buffers (glibc writes only the answer):
   * nothing past the answer is written, even for the largest ones. */
  struct {
    char host[32], serv[16];
    char canary[64];
  } nb;
  memset(&nb, 'C', sizeof nb);
  sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  sin.sin_port = htons(80);
  int rc = iof_compat_getnameinfo((struct sockaddr *)&sin, sizeof sin, nb.host,
                                  sizeof nb, nb.serv, sizeof nb.canary,
                                  NI_NUMERICSERV);
  CHECK_EQ(rc, 0);
  if (rc == 0) CHECK_EQ(strcmp(nb.serv, "80"), 0);
  size_t spoiled = 0;
  for (size_t i = 0; i < sizeof nb.canary; i++) spoiled += nb.canary[i] != 'C';
  CHECK_EQ(spoiled, 0);
  CHECK_EQ(iof_compat_getnameinfo((struct sockaddr *)&sin, sizeof sin, nb.host,
                                  (socklen_t)-1, nb.serv, (socklen_t)-1,
                                  NI_NUMERICSERV),
           0);
  return 0;
}

static void compat_resolver_calls(void **state) {
  (void)state;
  both_ways(resolve_calls);
}

/* ---- pthread objects -------------------------------------------------- */

static void *ret_arg(void *a) {
  return a;
}

static int thread_calls(void *arg) {
  (void)arg;
  /* Threads. */
  pthread_t t;
  CHECK_EQ(iof_compat_pthread_create(&t, NULL, NULL, NULL), EINVAL);
  CHECK_EQ(iof_compat_pthread_create(NULL, NULL, ret_arg, NULL), EINVAL);
  CHECK_EQ(iof_compat_pthread_create(&t, NULL, ret_arg, &t), 0);
  void *rv = NULL;
  CHECK_EQ(iof_compat_pthread_join(t, &rv), 0);
  CHECK_EQ(rv == &t, 1);
  CHECK_EQ(iof_compat_pthread_join(iof_compat_pthread_self(), NULL), EDEADLK);
  if (in_a_fiber) { /* fiber threads: misuse detected (glibc: undefined) */
    pthread_t d;
    CHECK_EQ(iof_compat_pthread_create(&d, NULL, ret_arg, NULL), 0);
    CHECK_EQ(iof_compat_pthread_detach(d), 0);
    CHECK_EQ(iof_compat_pthread_detach(d), EINVAL);
    CHECK_EQ(iof_compat_pthread_join(d, NULL), EINVAL);
    pthread_attr_t at;
    pthread_attr_init(&at);
    pthread_attr_setstacksize(&at, (size_t)1 << 40); /* glibc: no mmap */
    CHECK_EQ(iof_compat_pthread_create(&d, &at, ret_arg, NULL), EAGAIN);
    pthread_attr_destroy(&at);
    iof_compat_sched_yield(); /* let the detached one end */
  }
  CHECK_EQ(iof_compat_pthread_once(NULL, NULL), EINVAL);
  pthread_once_t once = PTHREAD_ONCE_INIT;
  CHECK_EQ(iof_compat_pthread_once(&once, NULL), EINVAL);
  char name[32];
  pthread_t self = iof_compat_pthread_self();
  CHECK_EQ(iof_compat_pthread_setname_np(self, "a-much-too-long-name"), ERANGE);
  CHECK_EQ(iof_compat_pthread_getname_np(self, name, 1), ERANGE);
  CHECK_EQ(iof_compat_pthread_setname_np(self, NULL), EINVAL);
  CHECK_EQ(iof_compat_pthread_getname_np(self, NULL, 16), EINVAL);
  CHECK_EQ(iof_compat_pthread_getattr_np(self, NULL), EINVAL);
  pthread_attr_t at;
  CHECK_EQ(iof_compat_pthread_getattr_np(self, &at), 0);
  pthread_attr_destroy(&at);
  CHECK_EQ(iof_compat_pthread_kill(self, 0), 0);
  CHECK_EQ(iof_compat_pthread_kill(self, -1), EINVAL);
  CHECK_EQ(iof_compat_pthread_kill(self, 1000), EINVAL);

  /* Mutexes. */
  CHECK_EQ(iof_compat_pthread_mutex_init(NULL, NULL), EINVAL);
  CHECK_EQ(iof_compat_pthread_mutex_lock(NULL), EINVAL);
  CHECK_EQ(iof_compat_pthread_mutex_trylock(NULL), EINVAL);
  CHECK_EQ(iof_compat_pthread_mutex_unlock(NULL), EINVAL);
  CHECK_EQ(iof_compat_pthread_mutex_destroy(NULL), EINVAL);
  pthread_mutex_t m = PTHREAD_MUTEX_INITIALIZER;
  CHECK_EQ(iof_compat_pthread_mutex_unlock(&m), EPERM);
  CHECK_EQ(iof_compat_pthread_mutex_lock(&m), 0);
  CHECK_EQ(iof_compat_pthread_mutex_destroy(&m), EBUSY);
  struct timespec bad = {0, -5};
  struct timespec bad2 = {0, 1000000000L};
  struct timespec past = {0, 0};
  /* Held by the caller: the relock is reported before the abstime. */
  CHECK_EQ(iof_compat_pthread_mutex_timedlock(&m, NULL), EDEADLK);
  CHECK_EQ(iof_compat_pthread_mutex_timedlock(&m, &bad), EDEADLK);
  CHECK_EQ(iof_compat_pthread_mutex_timedlock(&m, &bad2), EDEADLK);
  pthread_cond_t c = PTHREAD_COND_INITIALIZER;
  CHECK_EQ(iof_compat_pthread_cond_timedwait(&c, &m, NULL), EINVAL);
  CHECK_EQ(iof_compat_pthread_cond_timedwait(&c, &m, &bad), EINVAL);
  CHECK_EQ(iof_compat_pthread_cond_timedwait(&c, &m, &past), ETIMEDOUT);
  CHECK_EQ(iof_compat_pthread_cond_clockwait(&c, &m, (clockid_t)12345, &past),
           EINVAL);
  CHECK_EQ(iof_compat_pthread_mutex_unlock(&m), 0);
  CHECK_EQ(iof_compat_pthread_cond_wait(&c, &m), EPERM);
  CHECK_EQ(iof_compat_pthread_cond_wait(&c, NULL), EINVAL);
  CHECK_EQ(iof_compat_pthread_cond_wait(NULL, &m), EINVAL);
  CHECK_EQ(iof_compat_pthread_cond_init(NULL, NULL), EINVAL);
  CHECK_EQ(iof_compat_pthread_cond_destroy(NULL), EINVAL);
  CHECK_EQ(iof_compat_pthread_cond_signal(NULL), EINVAL);
  CHECK_EQ(iof_compat_pthread_cond_broadcast(NULL), EINVAL);
  CHECK_EQ(iof_compat_pthread_cond_destroy(&c), 0);
  CHECK_EQ(iof_compat_pthread_mutex_destroy(&m), 0);

  /* Read-write locks and barriers. */
  pthread_rwlock_t rw = PTHREAD_RWLOCK_INITIALIZER;
  CHECK_EQ(iof_compat_pthread_rwlock_unlock(&rw), EPERM);
  CHECK_EQ(iof_compat_pthread_rwlock_wrlock(&rw), 0);
  CHECK_EQ(iof_compat_pthread_rwlock_wrlock(&rw), EDEADLK);
  CHECK_EQ(iof_compat_pthread_rwlock_timedrdlock(&rw, &bad), EDEADLK);
  CHECK_EQ(iof_compat_pthread_rwlock_timedwrlock(&rw, NULL), EDEADLK);
  CHECK_EQ(iof_compat_pthread_rwlock_unlock(&rw), 0);
  CHECK_EQ(iof_compat_pthread_rwlock_init(NULL, NULL), EINVAL);
  CHECK_EQ(iof_compat_pthread_rwlock_rdlock(NULL), EINVAL);
  CHECK_EQ(iof_compat_pthread_rwlock_destroy(&rw), 0);
  pthread_barrier_t b;
  CHECK_EQ(iof_compat_pthread_barrier_init(&b, NULL, 0), EINVAL);
  CHECK_EQ(iof_compat_pthread_barrier_init(NULL, NULL, 1), EINVAL);
  CHECK_EQ(iof_compat_pthread_barrier_init(&b, NULL, 1), 0);
  CHECK_EQ(iof_compat_pthread_barrier_wait(&b), PTHREAD_BARRIER_SERIAL_THREAD);
  CHECK_EQ(iof_compat_pthread_barrier_destroy(&b), 0);

  /* Keys. */
  CHECK_EQ(iof_compat_pthread_key_create(NULL, NULL), EINVAL);
  pthread_key_t badk[] = {(pthread_key_t)-1, 99999, PTHREAD_KEYS_MAX};
  for (size_t i = 0; i < 3; i++) {
    CHECK_EQ(iof_compat_pthread_key_delete(badk[i]), EINVAL);
    CHECK_EQ(iof_compat_pthread_getspecific(badk[i]) == NULL, 1);
    CHECK_EQ(iof_compat_pthread_setspecific(badk[i], &t), EINVAL);
  }
  pthread_key_t k;
  CHECK_EQ(iof_compat_pthread_key_create(&k, NULL), 0);
  CHECK_EQ(iof_compat_pthread_key_delete(k), 0);
  CHECK_EQ(iof_compat_pthread_key_delete(k), EINVAL);
  CHECK_EQ(iof_compat_pthread_setspecific(k, &t), EINVAL);

  /* Semaphores. */
  sem_t s;
  CHECK_ERR(iof_compat_sem_init(NULL, 0, 0), EINVAL);
  CHECK_ERR(iof_compat_sem_init(&s, 0, (unsigned)SEM_VALUE_MAX + 1u), EINVAL);
  /* A process-shared semaphore is libc's own (compat keeps only its own
   * tagged ones): it initializes and destroys like one. */
  CHECK_EQ(iof_compat_sem_init(&s, 1, 0), 0);
  CHECK_EQ(iof_compat_sem_destroy(&s), 0);
  CHECK_EQ(iof_compat_sem_init(&s, 0, SEM_VALUE_MAX), 0);
  CHECK_ERR(iof_compat_sem_post(&s), EOVERFLOW);
  int v = 0;
  CHECK_EQ(iof_compat_sem_getvalue(&s, &v), 0);
  CHECK_EQ(v, SEM_VALUE_MAX);
  CHECK_ERR(iof_compat_sem_getvalue(&s, NULL), EINVAL);
  CHECK_EQ(iof_compat_sem_destroy(&s), 0);
  CHECK_EQ(iof_compat_sem_init(&s, 0, 0), 0);
  CHECK_ERR(iof_compat_sem_trywait(&s), EAGAIN);
  CHECK_ERR(iof_compat_sem_timedwait(&s, NULL), EINVAL);
  CHECK_ERR(iof_compat_sem_timedwait(&s, &bad2), EINVAL);
  CHECK_ERR(iof_compat_sem_timedwait(&s, &past), ETIMEDOUT);
  CHECK_ERR(iof_compat_sem_clockwait(&s, (clockid_t)12345, &past), EINVAL);
  CHECK_ERR(iof_compat_sem_wait(NULL), EINVAL);
  CHECK_ERR(iof_compat_sem_post(NULL), EINVAL);
  CHECK_ERR(iof_compat_sem_destroy(NULL), EINVAL);
  CHECK_EQ(iof_compat_sem_destroy(&s), 0);
  return 0;
}

static void compat_thread_calls(void **state) {
  (void)state;
  both_ways(thread_calls);
}

static int main_ok(void *arg) {
  (void)arg;
  return 3;
}

/* Vectors at wild addresses: the kernel's EFAULT, as the plain calls
 * give it, never a fault in the shim that walks the vector; a good vector
 * is still sent whole afterwards. */
static int wild_vector_calls(void *arg) {
  (void)arg;
  int fds[2];
  CHECK_EQ(iof_compat_socketpair(AF_UNIX, SOCK_STREAM, 0, fds), 0);
  CHECK_ERR(iof_compat_writev(fds[0], (const struct iovec *)8, 1), EFAULT);
  CHECK_ERR(iof_compat_writev(fds[0], (const struct iovec *)8, 64), EFAULT);
  struct msghdr mh = {0};
  mh.msg_iov = (struct iovec *)8;
  mh.msg_iovlen = 2;
  CHECK_ERR(iof_compat_sendmsg(fds[0], &mh, 0), EFAULT);
  CHECK_ERR(iof_compat_sendmsg(fds[0], (const struct msghdr *)8, 0), EFAULT);
  mh.msg_iovlen = IOV_MAX + 1;
  CHECK_ERR(iof_compat_sendmsg(fds[0], &mh, 0), EMSGSIZE);
  char a[] = "ab", b[] = "cde", got[8] = {0};
  struct iovec v[2] = {{a, 2}, {b, 3}};
  CHECK_EQ(iof_compat_writev(fds[0], v, 2), 5);
  mh.msg_iov = v;
  mh.msg_iovlen = 2;
  CHECK_EQ(iof_compat_sendmsg(fds[0], &mh, 0), 5);
  CHECK_EQ(iof_compat_read(fds[1], got, 5), 5);
  CHECK_EQ(memcmp(got, "abcde", 5), 0);
  CHECK_EQ(iof_compat_read(fds[1], got, 5), 5);
  CHECK_EQ(memcmp(got, "abcde", 5), 0);
  CHECK_EQ(iof_compat_close(fds[0]), 0);
  CHECK_EQ(iof_compat_close(fds[1]), 0);
  return 0;
}

static void compat_wild_vectors(void **state) {
  (void)state;
  both_ways(wild_vector_calls);
}

/* A fiber that switched to a stack of its own (makecontext, as coroutine
 * libraries do) placed below the fiber's stack, with an unreadable page
 * above it: a header there lies between the running frame and the fiber's
 * record, yet is not on the fiber's stack. sendmsg must answer EFAULT, as
 * the plain call does, not read it in place. */
static ucontext_t co_back, co_ctx;
static int co_fd;
static char *co_wild;
static ssize_t co_res;
static int co_err;

static void co_send(void) {
  errno = 0;
  co_res = iof_compat_sendmsg(co_fd, (const struct msghdr *)co_wild, 0);
  co_err = errno;
}

static int other_stack_send(void *arg) {
  (void)arg;
  int fds[2];
  CHECK_EQ(iof_compat_socketpair(AF_UNIX, SOCK_STREAM, 0, fds), 0);
  size_t pg = 4096;
  char local;
  char *m = MAP_FAILED;
  for (size_t off = 16u << 20; m == MAP_FAILED && off < (1u << 30);
       off += 1u << 20)
    m = mmap((char *)(((uintptr_t)&local & ~(pg - 1)) - off), 66 * pg,
             PROT_READ | PROT_WRITE,
             MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
  CHECK_EQ(m != MAP_FAILED, 1);
  if (m == MAP_FAILED) return 0;
  co_wild = m + 64 * pg;
  CHECK_EQ(mprotect(co_wild, 2 * pg, PROT_NONE), 0);
  co_fd = fds[0];
  co_res = 0;
  CHECK_EQ(getcontext(&co_ctx), 0);
  co_ctx.uc_stack.ss_sp = m;
  co_ctx.uc_stack.ss_size = 64 * pg;
  co_ctx.uc_link = &co_back;
  makecontext(&co_ctx, co_send, 0);
  CHECK_EQ(swapcontext(&co_back, &co_ctx), 0);
  CHECK_EQ(co_res, -1);
  CHECK_EQ(co_err, EFAULT);
  munmap(m, 66 * pg);
  CHECK_EQ(iof_compat_close(fds[0]), 0);
  CHECK_EQ(iof_compat_close(fds[1]), 0);
  return 0;
}

static void compat_sendmsg_from_another_stack(void **state) {
  (void)state;
  both_ways(other_stack_send);
}

/* MSG_WAITALL on message sockets: one datagram (or seqpacket record) is
 * the whole answer, however short; the call must not wait for another. */
static int waitall_message_calls(void *arg) {
  (void)arg;
  int u = iof_compat_socket(AF_INET, SOCK_DGRAM, 0);
  int c = iof_compat_socket(AF_INET, SOCK_DGRAM, 0);
  CHECK_EQ(u >= 0 && c >= 0, 1);
  struct sockaddr_in sin = {0};
  sin.sin_family = AF_INET;
  sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  CHECK_EQ(bind(u, (struct sockaddr *)&sin, sizeof sin), 0);
  socklen_t sl = sizeof sin;
  CHECK_EQ(getsockname(u, (struct sockaddr *)&sin, &sl), 0);
  char buf[64];
  CHECK_EQ(
      iof_compat_sendto(c, "hello", 5, 0, (struct sockaddr *)&sin, sizeof sin),
      5);
  CHECK_EQ(iof_compat_recv(u, buf, sizeof buf, MSG_WAITALL), 5);
  int sp[2];
  CHECK_EQ(iof_compat_socketpair(AF_UNIX, SOCK_SEQPACKET, 0, sp), 0);
  CHECK_EQ(iof_compat_write(sp[1], "abc", 3), 3);
  CHECK_EQ(iof_compat_recv(sp[0], buf, sizeof buf, MSG_WAITALL), 3);
  CHECK_EQ(iof_compat_close(u), 0);
  CHECK_EQ(iof_compat_close(c), 0);
  CHECK_EQ(iof_compat_close(sp[0]), 0);
  CHECK_EQ(iof_compat_close(sp[1]), 0);
  return 0;
}

static void compat_waitall_on_messages(void **state) {
  (void)state;
  both_ways(waitall_message_calls);
}

/* Compat keeps what kind of socket an fd is (for MSG_WAITALL and fd
 * passing) with the fd's slot: the answer must follow the file when
 * another one takes the number. N holds a datagram socket, then a stream
 * (dup2 onto it): MSG_WAITALL waits for the whole buffer; then the
 * datagram again: the one short datagram comes back at once. */
static int kind_writer;

static void *late_write(void *arg) {
  (void)arg;
  usleep(20000);
  ssize_t w = write(kind_writer, "cd", 2);
  (void)w;
  return NULL;
}

static int sock_kind_calls(void *arg) {
  (void)arg;
  int u = iof_compat_socket(AF_INET, SOCK_DGRAM, 0);
  int c = iof_compat_socket(AF_INET, SOCK_DGRAM, 0);
  CHECK_EQ(u >= 0 && c >= 0, 1);
  struct sockaddr_in sin = {0};
  sin.sin_family = AF_INET;
  sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  CHECK_EQ(bind(u, (struct sockaddr *)&sin, sizeof sin), 0);
  socklen_t sl = sizeof sin;
  CHECK_EQ(getsockname(u, (struct sockaddr *)&sin, &sl), 0);
  struct timeval tv = {2, 0}; /* bounds a wrong wait */
  CHECK_EQ(setsockopt(u, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv), 0);
  int n = iof_compat_dup(u);
  CHECK_EQ(n >= 0, 1);
  char buf[64];
  CHECK_EQ(iof_compat_sendto(c, "hello", 5, 0, (struct sockaddr *)&sin, sl), 5);
  CHECK_EQ(iof_compat_recv(n, buf, sizeof buf, MSG_WAITALL), 5);
  int sp[2];
  CHECK_EQ(iof_compat_socketpair(AF_UNIX, SOCK_STREAM, 0, sp), 0);
  CHECK_EQ(iof_compat_dup2(sp[0], n), n);
  CHECK_EQ(iof_compat_write(sp[1], "ab", 2), 2);
  kind_writer = sp[1];
  pthread_t t;
  CHECK_EQ(pthread_create(&t, NULL, late_write, NULL), 0);
  CHECK_EQ(iof_compat_recv(n, buf, 4, MSG_WAITALL), 4);
  CHECK_EQ(memcmp(buf, "abcd", 4), 0);
  pthread_join(t, NULL);
  CHECK_EQ(iof_compat_dup2(u, n), n);
  CHECK_EQ(iof_compat_sendto(c, "hi", 2, 0, (struct sockaddr *)&sin, sl), 2);
  int64_t t0 = iof_now_ns();
  CHECK_EQ(iof_compat_recv(n, buf, sizeof buf, MSG_WAITALL), 2);
  CHECK_EQ(iof_now_ns() - t0 < 500000000, 1);
  int all[] = {u, c, n, sp[0], sp[1]};
  for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
    CHECK_EQ(iof_compat_close(all[i]), 0);
  return 0;
}

static void compat_sock_kind_follows_the_file(void **state) {
  (void)state;
  both_ways(sock_kind_calls);
}

/* A reader and a writer fiber over a Unix stream pair (fds), run to
 * their end on a fresh io_context; the pair is closed after. */
static void run_stream_pair(int fds[2], iof_fn reader, iof_fn writer) {
  iof_io_context *io = iof_io_context_create();
  assert_non_null(io);
  assert_int_equal(iof_compat_socketpair(AF_UNIX, SOCK_STREAM, 0, fds), 0);
  launch(io, reader, NULL);
  launch(io, writer, NULL);
  run_all(io);
  assert_int_equal(iof_compat_close(fds[0]), 0);
  assert_int_equal(iof_compat_close(fds[1]), 0);
  assert_int_equal(iof_io_context_destroy(io), 0);
  assert_int_equal(atomic_load(&failures), 0);
}

/* MSG_PEEK | MSG_WAITALL on a stream: the first n bytes of the stream,
 * waited for as the blocking call does, not the head peeked again and
 * again into the rest of the buffer; the stream's end ends it short. */
static int peek_fds[2];

static int peek_writer(void *arg) {
  (void)arg;
  iof_sleep_for(30 * MS);
  CHECK_EQ(iof_compat_write(peek_fds[1], "def", 3), 3);
  iof_sleep_for(30 * MS);
  CHECK_EQ(iof_compat_write(peek_fds[1], "ghij", 4), 4);
  iof_sleep_for(30 * MS);
  CHECK_EQ(iof_compat_shutdown(peek_fds[1], SHUT_WR), 0);
  return 0;
}

static int peek_reader(void *arg) {
  (void)arg;
  char buf[16] = {0};
  CHECK_EQ(iof_compat_write(peek_fds[1], "abc", 3), 3);
  CHECK_EQ(iof_compat_recv(peek_fds[0], buf, 8, MSG_PEEK | MSG_WAITALL), 8);
  CHECK_EQ(memcmp(buf, "abcdefgh", 8), 0);
  memset(buf, 0, sizeof buf);
  CHECK_EQ(iof_compat_recv(peek_fds[0], buf, 16, MSG_PEEK | MSG_WAITALL), 10);
  CHECK_EQ(memcmp(buf, "abcdefghij", 10), 0);
  CHECK_EQ(iof_compat_recv(peek_fds[0], buf, 16, MSG_WAITALL), 10);
  CHECK_EQ(memcmp(buf, "abcdefghij", 10), 0);
  return 0;
}

static void compat_peek_waitall(void **state) {
  (void)state;
  run_stream_pair(peek_fds, peek_reader, peek_writer);
}

/* recvmsg(MSG_WAITALL) on a stream: the whole vector, filled across the
 * writer's pieces as the blocking call fills it; the stream's end ends it
 * short. */
static int rmsg_fds[2];

static int rmsg_writer(void *arg) {
  (void)arg;
  static const char *const pieces[] = {"de", "fgh", "ij", "klm"};
  for (int i = 0; i < 4; i++) {
    iof_sleep_for(20 * MS);
    CHECK_EQ(iof_compat_write(rmsg_fds[1], pieces[i], strlen(pieces[i])),
             (long long)strlen(pieces[i]));
  }
  iof_sleep_for(20 * MS);
  CHECK_EQ(iof_compat_shutdown(rmsg_fds[1], SHUT_WR), 0);
  return 0;
}

static int rmsg_reader(void *arg) {
  (void)arg;
  char a[4] = {0}, b[6] = {0};
  CHECK_EQ(iof_compat_write(rmsg_fds[1], "abc", 3), 3);
  struct iovec v[2] = {{a, 4}, {b, 4}};
  struct msghdr m = {0};
  m.msg_iov = v;
  m.msg_iovlen = 2;
  CHECK_EQ(iof_compat_recvmsg(rmsg_fds[0], &m, MSG_WAITALL), 8);
  CHECK_EQ(memcmp(a, "abcd", 4), 0);
  CHECK_EQ(memcmp(b, "efgh", 4), 0);
  v[1].iov_len = 6;
  CHECK_EQ(iof_compat_recvmsg(rmsg_fds[0], &m, MSG_WAITALL), 5);
  CHECK_EQ(memcmp(a, "ijkl", 4), 0);
  CHECK_EQ(b[0], 'm');
  return 0;
}

static void compat_recvmsg_waitall(void **state) {
  (void)state;
  run_stream_pair(rmsg_fds, rmsg_reader, rmsg_writer);
}

/* recvmsg(MSG_WAITALL) on a Unix stream whose later piece carries fds:
 * the blocking call takes that piece with its fds into the caller's
 * control buffer and returns there, short of the whole vector (the kernel
 * stops after a piece with fds); none is lost to a read without room. */
static int rfds_fds[2];

static int rfds_writer(void *arg) {
  (void)arg;
  iof_sleep_for(20 * MS);
  union {
    char b[CMSG_SPACE(sizeof(int))];
    struct cmsghdr align;
  } cb;
  memset(&cb, 0, sizeof cb);
  struct iovec v = {"defgh", 5};
  struct msghdr m = {0};
  m.msg_iov = &v;
  m.msg_iovlen = 1;
  m.msg_control = cb.b;
  m.msg_controllen = sizeof cb.b;
  struct cmsghdr *h = CMSG_FIRSTHDR(&m);
  h->cmsg_level = SOL_SOCKET;
  h->cmsg_type = SCM_RIGHTS;
  h->cmsg_len = CMSG_LEN(sizeof(int));
  int fd = 0;
  memcpy(CMSG_DATA(h), &fd, sizeof fd);
  CHECK_EQ(iof_compat_sendmsg(rfds_fds[1], &m, 0), 5);
  iof_sleep_for(20 * MS);
  CHECK_EQ(iof_compat_write(rfds_fds[1], "ijk", 3), 3);
  iof_sleep_for(40 * MS);
  CHECK_EQ(iof_compat_write(rfds_fds[1], "zw", 2), 2);
  return 0;
}

static int rfds_reader(void *arg) {
  (void)arg;
  char b[16] = {0};
  union {
    char b[64];
    struct cmsghdr align;
  } cb;
  memset(&cb, 0, sizeof cb);
  CHECK_EQ(iof_compat_write(rfds_fds[1], "abc", 3), 3);
  struct iovec v = {b, 10};
  struct msghdr m = {0};
  m.msg_iov = &v;
  m.msg_iovlen = 1;
  m.msg_control = cb.b;
  m.msg_controllen = sizeof cb.b;
  CHECK_EQ(iof_compat_recvmsg(rfds_fds[0], &m, MSG_WAITALL), 8);
  CHECK_EQ(memcmp(b, "abcdefgh", 8), 0);
  CHECK_EQ(m.msg_flags & MSG_CTRUNC, 0);
  struct cmsghdr *h = CMSG_FIRSTHDR(&m);
  CHECK_EQ(h != NULL, 1);
  if (h) {
    CHECK_EQ(h->cmsg_type, SCM_RIGHTS);
    int fd = -1;
    memcpy(&fd, CMSG_DATA(h), sizeof fd);
    CHECK_EQ(fd > 2, 1);
    if (fd > 2) iof_compat_close(fd);
  }
  CHECK_EQ(iof_compat_recv(rfds_fds[0], b, 3, MSG_WAITALL), 3);
  CHECK_EQ(memcmp(b, "ijk", 3), 0);
  /* The first piece carries an fd: the call ends with it, not waiting for
   * the writer's "zw". */
  struct iovec sv = {"xy", 2};
  struct msghdr sm = {0};
  sm.msg_iov = &sv;
  sm.msg_iovlen = 1;
  sm.msg_control = cb.b;
  sm.msg_controllen = CMSG_SPACE(sizeof(int));
  memset(&cb, 0, sizeof cb);
  h = CMSG_FIRSTHDR(&sm);
  h->cmsg_level = SOL_SOCKET;
  h->cmsg_type = SCM_RIGHTS;
  h->cmsg_len = CMSG_LEN(sizeof(int));
  int zero = 0;
  memcpy(CMSG_DATA(h), &zero, sizeof zero);
  CHECK_EQ(iof_compat_sendmsg(rfds_fds[1], &sm, 0), 2);
  memset(&cb, 0, sizeof cb);
  v.iov_len = 4;
  m.msg_control = cb.b;
  m.msg_controllen = sizeof cb.b;
  m.msg_flags = 0;
  CHECK_EQ(iof_compat_recvmsg(rfds_fds[0], &m, MSG_WAITALL), 2);
  CHECK_EQ(memcmp(b, "xy", 2), 0);
  h = CMSG_FIRSTHDR(&m);
  CHECK_EQ(h != NULL && h->cmsg_type == SCM_RIGHTS, 1);
  if (h && h->cmsg_type == SCM_RIGHTS) {
    int fd = -1;
    memcpy(&fd, CMSG_DATA(h), sizeof fd);
    if (fd > 2) iof_compat_close(fd);
  }
  CHECK_EQ(iof_compat_recv(rfds_fds[0], b, 2, MSG_WAITALL), 2);
  CHECK_EQ(memcmp(b, "zw", 2), 0);
  return 0;
}

static void compat_recvmsg_waitall_fds(void **state) {
  (void)state;
  run_stream_pair(rfds_fds, rfds_reader, rfds_writer);
}

/* Ids of fiber threads that were joined, or that ended detached: every
 * call taking the id answers ESRCH (as glibc mostly does for its cached
 * descriptors), none reads a freed record; a second join frees nothing
 * twice. A later thread may take the id again, as a reused tid. */
static int stale_id_calls(void *arg) {
  (void)arg;
  pthread_t t;
  void *rv = NULL;
  CHECK_EQ(iof_compat_pthread_create(&t, NULL, ret_arg, &t), 0);
  CHECK_EQ(iof_compat_pthread_join(t, &rv), 0);
  CHECK_EQ(rv == &t, 1);
  CHECK_EQ(iof_compat_pthread_join(t, NULL), ESRCH);
  CHECK_EQ(iof_compat_pthread_tryjoin_np(t, NULL), ESRCH);
  struct timespec past = {0, 0};
  CHECK_EQ(iof_compat_pthread_timedjoin_np(t, NULL, &past), ESRCH);
  CHECK_EQ(iof_compat_pthread_detach(t), ESRCH);
  CHECK_EQ(iof_compat_pthread_kill(t, 0), ESRCH);
  CHECK_EQ(iof_compat_pthread_kill(t, SIGUSR1), ESRCH);
  CHECK_EQ(iof_compat_pthread_cancel(t), ESRCH);
  char name[16];
  CHECK_EQ(iof_compat_pthread_setname_np(t, "stale"), ESRCH);
  CHECK_EQ(iof_compat_pthread_getname_np(t, name, sizeof name), ESRCH);
  pthread_attr_t at;
  CHECK_EQ(iof_compat_pthread_getattr_np(t, &at), ESRCH);
  int policy;
  struct sched_param sp;
  CHECK_EQ(iof_compat_pthread_getschedparam(t, &policy, &sp), ESRCH);
  /* Detached, then ended: its record went at its end. */
  pthread_attr_init(&at);
  pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
  pthread_t d;
  CHECK_EQ(iof_compat_pthread_create(&d, &at, ret_arg, NULL), 0);
  pthread_attr_destroy(&at);
  for (int i = 0; i < 1000 && iof_compat_pthread_kill(d, 0) == 0; i++)
    iof_sleep_for(MS);
  CHECK_EQ(iof_compat_pthread_kill(d, 0), ESRCH);
  CHECK_EQ(iof_compat_pthread_join(d, NULL), ESRCH);
  /* New threads after all that run and join as usual. */
  for (int i = 0; i < 3; i++) {
    CHECK_EQ(iof_compat_pthread_create(&t, NULL, ret_arg, &d), 0);
    CHECK_EQ(iof_compat_pthread_join(t, &rv), 0);
    CHECK_EQ(rv == &d, 1);
  }
  return 0;
}

static void compat_stale_thread_ids(void **state) {
  (void)state;
  iof_io_context *io = iof_io_context_create();
  assert_non_null(io);
  launch(io, stale_id_calls, NULL);
  run_all(io);
  assert_int_equal(iof_io_context_destroy(io), 0);
  assert_int_equal(atomic_load(&failures), 0);
}

/* A stale id while pthread_create sets its record up again: a plain
 * thread joins (with a timeout) the id of a detached thread that ended,
 * over and over, while a fiber creates detached threads that take the
 * record back. The join must answer at once (ESRCH: retired; EINVAL:
 * detached), never queue as the joiner of a record half set up, which the
 * new thread, detached, claims at its end and never wakes: the join then
 * hung past its timeout. */
typedef struct reuse_case {
  _Atomic(pthread_t) stale;
  atomic_bool stop;
  atomic_int joins, odd;
} reuse_case;

static void *stale_joiner(void *arg) {
  reuse_case *c = arg;
  while (!atomic_load(&c->stop)) {
    pthread_t t = atomic_load(&c->stale);
    if (!t) continue;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_nsec += 20 * MS;
    if (ts.tv_nsec >= 1000000000) {
      ts.tv_sec++;
      ts.tv_nsec -= 1000000000;
    }
    int r = iof_compat_pthread_timedjoin_np(t, NULL, &ts);
    if (r != ESRCH && r != EINVAL) atomic_fetch_add(&c->odd, 1);
    atomic_fetch_add(&c->joins, 1);
  }
  return NULL;
}

static int reuse_creator(void *arg) {
  reuse_case *c = arg;
  pthread_attr_t at;
  pthread_attr_init(&at);
  pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
  /* At most 2 s (slow under TSan): the window is hit within a few
   * hundred rounds. */
  int64_t end = iof_now_ns() + 2000 * MS;
  for (int i = 0; i < 3000 && iof_now_ns() < end; i++) {
    pthread_t d;
    CHECK_EQ(iof_compat_pthread_create(&d, &at, ret_arg, NULL), 0);
    while (iof_compat_pthread_kill(d, 0) == 0) iof_yield(); /* ended */
    atomic_store(&c->stale, d);
    /* The joiner gets its turn at the retired record (a hung one never
     * comes back: the test reports it). */
    int64_t until = iof_now_ns() + 1000 * MS;
    int k = atomic_load(&c->joins) + 2;
    while (atomic_load(&c->joins) < k && iof_now_ns() < until) iof_yield();
    if (atomic_load(&c->joins) < k) break;
  }
  pthread_attr_destroy(&at);
  return 0;
}

static void compat_stale_id_meets_reuse(void **state) {
  (void)state;
  reuse_case c = {0};
  pthread_t j;
  assert_int_equal(pthread_create(&j, NULL, stale_joiner, &c), 0);
  iof_io_context *io = iof_io_context_create();
  assert_non_null(io);
  launch(io, reuse_creator, &c);
  run_all(io);
  assert_int_equal(iof_io_context_destroy(io), 0);
  atomic_store(&c.stop, true);
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  ts.tv_sec += 5;
  int r = pthread_timedjoin_np(j, NULL, &ts); /* a hung join: ETIMEDOUT */
  assert_int_equal(r, 0);
  assert_int_equal(atomic_load(&c.odd), 0);
  assert_int_equal(atomic_load(&failures), 0);
}

/* A thread that has returned but whose end is not yet complete (its key
 * destructors run): its result is no name. getname gives "" and setname
 * changes nothing, neither taking the result for a name (a read of the
 * string at address 7) nor replacing it (join would return the name and
 * free the result). */
static pthread_key_t ending_key;
static pthread_t ending_id;
static int ending_get, ending_set;
static char ending_name[16];

static void ending_dtor(void *v) {
  (void)v;
  ending_get =
      iof_compat_pthread_getname_np(ending_id, ending_name, sizeof ending_name);
  ending_set = iof_compat_pthread_setname_np(ending_id, "renamed");
}

static void *ending_fn(void *arg) {
  iof_compat_pthread_setspecific(ending_key, arg);
  return (void *)7;
}

static int ending_calls(void *arg) {
  (void)arg;
  CHECK_EQ(iof_compat_pthread_key_create(&ending_key, ending_dtor), 0);
  strcpy(ending_name, "unset");
  /* Named before it runs: the name is its fiber's once it does. */
  CHECK_EQ(iof_compat_pthread_create(&ending_id, NULL, ending_fn, &ending_id),
           0);
  CHECK_EQ(iof_compat_pthread_setname_np(ending_id, "early"), 0);
  void *rv = NULL;
  CHECK_EQ(iof_compat_pthread_join(ending_id, &rv), 0);
  CHECK_EQ((intptr_t)rv, 7);
  CHECK_EQ(ending_get, 0);
  CHECK_EQ(strcmp(ending_name, ""), 0);
  CHECK_EQ(ending_set, 0);
  CHECK_EQ(iof_compat_pthread_key_delete(ending_key), 0);
  return 0;
}

static void compat_ending_thread_names(void **state) {
  (void)state;
  iof_io_context *io = iof_io_context_create();
  assert_non_null(io);
  launch(io, ending_calls, NULL);
  run_all(io);
  assert_int_equal(iof_io_context_destroy(io), 0);
  assert_int_equal(atomic_load(&failures), 0);
}

static void compat_main_bad_arguments(void **state) {
  (void)state;
  assert_int_equal(iof_main(NULL, NULL), -EINVAL);
  assert_int_equal(iof_main_ex(NULL, NULL, NULL), -EINVAL);
  iof_main_opts o = {0};
  o.main_stack_size = SIZE_MAX;
  assert_int_equal(iof_main_ex(main_ok, NULL, &o), -EINVAL);
  o.main_stack_size = 0;
  o.threads = UINT_MAX; /* clamped */
  assert_int_equal(iof_main_ex(main_ok, NULL, &o), 3);
}

/* The try calls on a read-write lock the caller holds for writing: EBUSY,
 * as POSIX lists and glibc answers (EDEADLK is the blocking calls'). */
static int rwlock_try_calls(void *arg) {
  (void)arg;
  pthread_rwlock_t rw = PTHREAD_RWLOCK_INITIALIZER;
  CHECK_EQ(iof_compat_pthread_rwlock_wrlock(&rw), 0);
  CHECK_EQ(iof_compat_pthread_rwlock_tryrdlock(&rw), EBUSY);
  CHECK_EQ(iof_compat_pthread_rwlock_trywrlock(&rw), EBUSY);
  CHECK_EQ(iof_compat_pthread_rwlock_rdlock(&rw), EDEADLK);
  CHECK_EQ(iof_compat_pthread_rwlock_unlock(&rw), 0);
  CHECK_EQ(iof_compat_pthread_rwlock_rdlock(&rw), 0);
  CHECK_EQ(iof_compat_pthread_rwlock_trywrlock(&rw), EBUSY);
  CHECK_EQ(iof_compat_pthread_rwlock_unlock(&rw), 0);
  CHECK_EQ(iof_compat_pthread_rwlock_destroy(&rw), 0);
  return 0;
}

static void compat_rwlock_try_busy(void **state) {
  (void)state;
  both_ways(rwlock_try_calls);
}

/* A second connect on a blocking TCP socket answers as after the kernel's
 * own blocking connect: EISCONN once connected, and a fresh try (refused
 * again) after a refusal, not 0 and ECONNABORTED (what a socket left
 * "connecting" by a waited-out non-blocking connect answers). */
static int connect_again_calls(void *arg) {
  (void)arg;
  struct sockaddr_in a = {0};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t al = sizeof a;
  int l = iof_compat_socket(AF_INET, SOCK_STREAM, 0);
  CHECK_EQ(bind(l, (struct sockaddr *)&a, sizeof a), 0);
  CHECK_EQ(getsockname(l, (struct sockaddr *)&a, &al), 0);
  CHECK_EQ(iof_compat_listen(l, 4), 0);
  int c = iof_compat_socket(AF_INET, SOCK_STREAM, 0);
  CHECK_EQ(iof_compat_connect(c, (struct sockaddr *)&a, sizeof a), 0);
  CHECK_ERR(iof_compat_connect(c, (struct sockaddr *)&a, sizeof a), EISCONN);
  CHECK_EQ(iof_compat_close(c), 0);
  CHECK_EQ(iof_compat_close(l), 0); /* its port now refuses */
  c = iof_compat_socket(AF_INET, SOCK_STREAM, 0);
  CHECK_ERR(iof_compat_connect(c, (struct sockaddr *)&a, sizeof a),
            ECONNREFUSED);
  CHECK_ERR(iof_compat_connect(c, (struct sockaddr *)&a, sizeof a),
            ECONNREFUSED);
  CHECK_EQ(iof_compat_close(c), 0);
  return 0;
}

static void compat_connect_again(void **state) {
  (void)state;
  both_ways(connect_again_calls);
}

/* An init routine that leaves with pthread_exit on a plain thread: the
 * control goes back to "not run" (glibc's pthread_once does so through
 * its cleanup buffer), and the next call runs the routine, rather than
 * waiting forever for the one that left. */
static pthread_once_t exit_once = PTHREAD_ONCE_INIT;
static atomic_int exit_once_runs;

static void once_then_exit(void) {
  if (atomic_fetch_add(&exit_once_runs, 1) == 0) iof_compat_pthread_exit(NULL);
}

static void *call_exit_once(void *arg) {
  (void)arg;
  CHECK_EQ(iof_compat_pthread_once(&exit_once, once_then_exit), 0);
  return arg;
}

static void compat_once_left_by_exit(void **state) {
  (void)state;
  for (int i = 0; i < 2; i++) {
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, call_exit_once, NULL), 0);
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += 5;
    assert_int_equal(pthread_timedjoin_np(t, NULL, &until), 0);
  }
  assert_int_equal(atomic_load(&exit_once_runs), 2);
  assert_int_equal(atomic_load(&failures), 0);
}

/* pthread_kill of a fiber thread that ended and is not joined yet: 0 and
 * nothing sent, as glibc does, never the signal's disposition applied to
 * the process (a default SIGUSR1 ended it). In a child: the old answer
 * kills it. */
static void *return_at_once(void *arg) {
  return arg;
}

static int kill_ended_thread(void *arg) {
  (void)arg;
  pthread_t t;
  CHECK_EQ(iof_compat_pthread_create(&t, NULL, return_at_once, NULL), 0);
  struct timespec d = {0, 20 * MS};
  CHECK_EQ(iof_compat_nanosleep(&d, NULL), 0); /* t ends meanwhile */
  CHECK_EQ(iof_compat_pthread_kill(t, 0), 0);
  CHECK_EQ(iof_compat_pthread_kill(t, SIGUSR1), 0);
  CHECK_EQ(iof_compat_pthread_kill(t, SIGTERM), 0);
  CHECK_EQ(iof_compat_pthread_join(t, NULL), 0);
  return 0;
}

static void compat_kill_ended_thread(void **state) {
  (void)state;
  pid_t kid = fork();
  assert_true(kid >= 0);
  if (kid == 0) {
    signal(SIGUSR1, SIG_DFL);
    iof_io_context *io = iof_io_context_create();
    if (!io) _exit(2);
    launch(io, kill_ended_thread, NULL);
    run_all(io);
    iof_io_context_destroy(io);
    _exit(atomic_load(&failures) ? 1 : 0);
  }
  int st = 0;
  assert_int_equal(waitpid(kid, &st, 0), kid);
  assert_true(WIFEXITED(st));
  assert_int_equal(WEXITSTATUS(st), 0);
}

/* A read-write lock made with PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP
 * (attribute or static initializer) keeps new readers out while a writer
 * waits, as glibc's does, and hands the lock to that writer before the
 * readers queued behind it; a default one lets readers in. */
static pthread_rwlock_t pw_rw;
static atomic_int pw_order;
static atomic_int pw_writer_at, pw_reader_at;

static void *pw_writer(void *arg) {
  (void)arg;
  CHECK_EQ(iof_compat_pthread_rwlock_wrlock(&pw_rw), 0);
  atomic_store(&pw_writer_at, atomic_fetch_add(&pw_order, 1) + 1);
  CHECK_EQ(iof_compat_pthread_rwlock_unlock(&pw_rw), 0);
  return NULL;
}

static void *pw_reader(void *arg) {
  (void)arg;
  CHECK_EQ(iof_compat_pthread_rwlock_rdlock(&pw_rw), 0);
  atomic_store(&pw_reader_at, atomic_fetch_add(&pw_order, 1) + 1);
  CHECK_EQ(iof_compat_pthread_rwlock_unlock(&pw_rw), 0);
  return NULL;
}

static void *pw_try_read(void *arg) {
  int r = iof_compat_pthread_rwlock_tryrdlock(&pw_rw);
  if (r == 0) iof_compat_pthread_rwlock_unlock(&pw_rw);
  *(int *)arg = r;
  return NULL;
}

static void pw_nap(void) {
  struct timespec d = {0, 30 * MS};
  iof_compat_nanosleep(&d, NULL);
}

/* kind 0: attribute, 1: static initializer, 2: default lock. */
static int prefer_writer_round(int kind) {
  pthread_rwlockattr_t at;
  pthread_rwlockattr_init(&at);
  pthread_rwlockattr_setkind_np(&at,
                                PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP);
  if (kind == 0) {
    CHECK_EQ(iof_compat_pthread_rwlock_init(&pw_rw, &at), 0);
  } else if (kind == 1) {
    pthread_rwlock_t init = PTHREAD_RWLOCK_WRITER_NONRECURSIVE_INITIALIZER_NP;
    pw_rw = init;
  } else {
    CHECK_EQ(iof_compat_pthread_rwlock_init(&pw_rw, NULL), 0);
  }
  pthread_rwlockattr_destroy(&at);
  atomic_store(&pw_order, 0);
  atomic_store(&pw_writer_at, 0);
  atomic_store(&pw_reader_at, 0);
  CHECK_EQ(iof_compat_pthread_rwlock_rdlock(&pw_rw), 0);
  pthread_t w, r, tr;
  CHECK_EQ(iof_compat_pthread_create(&w, NULL, pw_writer, NULL), 0);
  /* Until the writer waits (a preferring lock then says EBUSY), within
   * about 2 s: a plain thread may take a while to start. */
  int tried = -1;
  for (int i = 0; i < 60; i++) {
    pw_nap();
    CHECK_EQ(iof_compat_pthread_create(&tr, NULL, pw_try_read, &tried), 0);
    CHECK_EQ(iof_compat_pthread_join(tr, NULL), 0);
    if (tried != 0 || (kind == 2 && i == 2)) break;
  }
  CHECK_EQ(tried, kind == 2 ? 0 : EBUSY);
  CHECK_EQ(iof_compat_pthread_create(&r, NULL, pw_reader, NULL), 0);
  /* A default lock lets the reader in at once: until it did. A preferring
   * one keeps it waiting, whenever it comes. */
  for (int i = 0; i < 60 && kind == 2 && !atomic_load(&pw_reader_at); i++)
    pw_nap();
  pw_nap();
  CHECK_EQ(iof_compat_pthread_rwlock_unlock(&pw_rw), 0);
  CHECK_EQ(iof_compat_pthread_join(w, NULL), 0);
  CHECK_EQ(iof_compat_pthread_join(r, NULL), 0);
  CHECK_EQ(atomic_load(&pw_writer_at), kind == 2 ? 2 : 1);
  CHECK_EQ(atomic_load(&pw_reader_at), kind == 2 ? 1 : 2);
  CHECK_EQ(iof_compat_pthread_rwlock_destroy(&pw_rw), 0);
  return 0;
}

static int prefer_writer_calls(void *arg) {
  (void)arg;
  for (int kind = 0; kind < 3; kind++) prefer_writer_round(kind);
  return 0;
}

static void compat_rwlock_prefer_writer(void **state) {
  (void)state;
  both_ways(prefer_writer_calls);
}

/* ---- the calls no other test here feeds bad input ------------------- */

extern char **environ;

/* File locks, queues, waits, spawns, pipes and vectors: bad fds, NULL
 * and wild pointers, unknown ops and flags give the plain calls' errors,
 * never a crash or a wait. */
static int more_io_calls(void *arg) {
  (void)arg;
  int fds[2], p[2];
  CHECK_EQ(iof_compat_socketpair(AF_UNIX, SOCK_STREAM, 0, fds), 0);
  CHECK_EQ(iof_compat_pipe(p), 0);
  char buf[8] = "abc";
  CHECK_ERR(iof_compat_flock(-1, LOCK_EX), EBADF);
  CHECK_ERR(iof_compat_flock(INT_MAX, LOCK_SH), EBADF);
  CHECK_ERR(iof_compat_flock(p[0], 0), EINVAL);
  CHECK_ERR(iof_compat_flock(p[0], LOCK_SH | LOCK_EX), EINVAL);
  CHECK_ERR(iof_compat_lockf(-1, F_LOCK, 0), EBADF);
  CHECK_ERR(iof_compat_lockf(p[0], 99, 0), EINVAL);
  CHECK_ERR(iof_compat_mq_close(-1), EBADF);
  CHECK_ERR(iof_compat_mq_close(INT_MAX), EBADF);
  CHECK_ERR(iof_compat_wait3(NULL, 0, NULL), ECHILD);
  CHECK_ERR(iof_compat_wait3(NULL, 0x100, NULL), EINVAL);
  CHECK_ERR(iof_compat_recvfrom(-1, buf, 1, 0, NULL, NULL), EBADF);
  CHECK_ERR(iof_compat_recvmmsg(-1, NULL, 1, 0, NULL), EBADF);
  CHECK_ERR(iof_compat_sendmmsg(-1, NULL, 1, 0), EBADF);
  CHECK_ERR(iof_compat_sendmmsg(fds[0], NULL, 1, 0), EFAULT);
  CHECK_ERR(iof_compat_sendmmsg(fds[0], (struct mmsghdr *)8, 3, 0), EFAULT);
  CHECK_ERR(iof_compat_sendmmsg(fds[0], (struct mmsghdr *)8, UINT_MAX, 0),
            EFAULT);
  CHECK_EQ(iof_compat_write(fds[0], buf, 3), 3);
  CHECK_ERR(iof_compat_recvfrom(fds[1], (void *)8, 1, 0, NULL, NULL), EFAULT);
  CHECK_ERR(iof_compat_recvmmsg(fds[1], NULL, 1, 0, NULL), EFAULT);
  CHECK_ERR(iof_compat_recvmmsg(fds[1], (struct mmsghdr *)8, 1, 0, NULL),
            EFAULT);
  struct timespec badts = {0, -1};
  struct mmsghdr mm = {0};
  struct iovec iv = {buf, sizeof buf};
  mm.msg_hdr.msg_iov = &iv;
  mm.msg_hdr.msg_iovlen = 1;
  CHECK_ERR(iof_compat_recvmmsg(fds[1], &mm, 1, 0, &badts), EINVAL);
  CHECK_EQ(iof_compat_recvmmsg(fds[1], &mm, 1, 0, NULL), 1);
  CHECK_EQ(mm.msg_len, 3);
  CHECK_ERR(iof_compat_sendfile(-1, -1, NULL, 1), EBADF);
  CHECK_ERR(iof_compat_sendfile(fds[0], p[0], (off_t *)8, 1), EFAULT);
  CHECK_ERR(iof_compat_splice(-1, NULL, p[1], NULL, 1, 0), EBADF);
  CHECK_ERR(iof_compat_splice(fds[0], NULL, fds[1], NULL, 1, 0), EINVAL);
  CHECK_ERR(iof_compat_splice(p[0], (loff_t *)8, p[1], NULL, 1, 0), ESPIPE);
  CHECK_ERR(iof_compat_tee(-1, p[1], 1, 0), EBADF);
  CHECK_ERR(iof_compat_tee(fds[0], p[1], 1, 0), EINVAL);
  CHECK_ERR(iof_compat_tee(p[0], p[1], 1, 0), EINVAL); /* same pipe */
  CHECK_ERR(iof_compat_vmsplice(-1, &iv, 1, 0), EBADF);
  CHECK_ERR(iof_compat_vmsplice(p[1], NULL, 1, 0), EFAULT);
  CHECK_ERR(iof_compat_vmsplice(p[1], (const struct iovec *)8, 1, 0), EFAULT);
  CHECK_ERR(iof_compat_vmsplice(p[1], &iv, SIZE_MAX, 0), EINVAL);
  CHECK_ERR(iof_compat_vmsplice(fds[0], &iv, 1, 0), EBADF);
  struct sembuf op = {0, -1, 0};
  CHECK_ERR(iof_compat_semop(-1, &op, 1), EINVAL);
  CHECK_ERR(iof_compat_semop(-1, NULL, 1), EFAULT);
  CHECK_ERR(iof_compat_semtimedop(-1, &op, 1, &badts), EINVAL);
  CHECK_ERR(iof_compat_semtimedop(-1, &op, 1, (struct timespec *)8), EFAULT);
  int sem = semget(IPC_PRIVATE, 1, 0600);
  CHECK_EQ(sem >= 0, 1);
  CHECK_ERR(iof_compat_semop(sem, NULL, 1), EFAULT);
  CHECK_ERR(iof_compat_semop(sem, (struct sembuf *)8, 1), EFAULT);
  CHECK_ERR(iof_compat_semop(sem, &op, 0), EINVAL);
  CHECK_ERR(iof_compat_semop(sem, &op, SIZE_MAX), E2BIG);
  CHECK_ERR(iof_compat_semtimedop(sem, &op, 1, (struct timespec *)8), EFAULT);
  struct timespec tiny = {0, 1000};
  CHECK_ERR(iof_compat_semtimedop(sem, &op, 1, &tiny), EAGAIN);
  op.sem_op = 1;
  CHECK_EQ(iof_compat_semop(sem, &op, 1), 0); /* still works */
  CHECK_EQ(semctl(sem, 0, IPC_RMID), 0);
  CHECK_ERR(iof_compat_futex(NULL, FUTEX_WAKE, 1, NULL, NULL, 0), EFAULT);
  CHECK_EQ(iof_compat_syscall(SYS_getpid), getpid());
  CHECK_ERR(iof_compat_syscall(-1), ENOSYS);
  CHECK_ERR(iof_compat_syscall(100000), ENOSYS);
  CHECK_EQ(iof_compat_system(NULL) != 0, 1);
  CHECK_EQ(iof_compat_system("exit 3"), 3 << 8);
  pid_t pid;
  char *argv[] = {"true", NULL};
  CHECK_EQ(
      iof_compat_posix_spawn(&pid, "/nonexistent/x", NULL, NULL, argv, environ),
      ENOENT);
  CHECK_EQ(iof_compat_posix_spawnp(&pid, "no-such-program-xyz", NULL, NULL,
                                   argv, environ),
           ENOENT);
  CHECK_EQ(iof_compat_posix_spawnp(NULL, "true", NULL, NULL, argv, environ), 0);
  CHECK_EQ(iof_compat_wait3(NULL, 0, NULL) > 0, 1);
  CHECK_ERR(iof_compat_pclose(NULL), EINVAL); /* glibc's crashes */
  CHECK_EQ(iof_compat_close(fds[0]), 0);
  CHECK_EQ(iof_compat_close(fds[1]), 0);
  CHECK_EQ(iof_compat_close(p[0]), 0);
  CHECK_EQ(iof_compat_close(p[1]), 0);
  return 0;
}

static void compat_more_io_calls(void **state) {
  (void)state;
  both_ways(more_io_calls);
}

/* The scheduling, affinity, cancel-state and timed-lock calls on the
 * caller itself: a fiber thread's own answers, the real ones elsewhere. */
static int more_thread_calls(void *arg) {
  (void)arg;
  /* A buffer under 16 bytes is too short even for a short name, as in
   * glibc (a fiber thread's answer was 0). */
  char nm[16];
  pthread_t me = iof_compat_pthread_self();
  CHECK_EQ(iof_compat_pthread_setname_np(me, "ab"), 0);
  CHECK_EQ(iof_compat_pthread_getname_np(me, nm, 4), ERANGE);
  CHECK_EQ(iof_compat_pthread_getname_np(me, nm, sizeof nm), 0);
  CHECK_EQ(strcmp(nm, "ab"), 0);
  pthread_t self = iof_compat_pthread_self();
  CHECK_EQ(iof_compat_pthread_equal(self, self) != 0, 1);
  cpu_set_t set;
  CPU_ZERO(&set);
  CHECK_EQ(iof_compat_pthread_getaffinity_np(self, sizeof set, &set), 0);
  CHECK_EQ(CPU_COUNT(&set) > 0, 1);
  CHECK_EQ(iof_compat_pthread_getaffinity_np(self, 0, &set), EINVAL);
  CHECK_EQ(iof_compat_pthread_getaffinity_np(self, sizeof set, NULL), EFAULT);
  CHECK_EQ(iof_compat_pthread_setaffinity_np(self, sizeof set, NULL), EFAULT);
  cpu_set_t none;
  CPU_ZERO(&none);
  CHECK_EQ(iof_compat_pthread_setaffinity_np(self, sizeof none, &none), EINVAL);
  CHECK_EQ(iof_compat_pthread_setaffinity_np(self, sizeof set, &set), 0);
  struct sched_param sp = {0};
  CHECK_EQ(iof_compat_pthread_setschedparam(self, -1, &sp), EINVAL);
  CHECK_EQ(iof_compat_pthread_setschedparam(self, SCHED_OTHER, &sp), 0);
  sp.sched_priority = 5;
  CHECK_EQ(iof_compat_pthread_setschedparam(self, SCHED_OTHER, &sp), EINVAL);
  CHECK_EQ(iof_compat_pthread_setschedprio(self, INT_MAX), EINVAL);
  clockid_t cid;
  int r = iof_compat_pthread_getcpuclockid(self, &cid);
  CHECK_EQ(r == 0 || r == ENOTSUP, 1);
  union sigval sv = {0};
  CHECK_EQ(iof_compat_pthread_sigqueue(self, -1, sv), EINVAL);
  CHECK_EQ(iof_compat_pthread_sigqueue(self, 1000, sv), EINVAL);
  CHECK_EQ(iof_compat_pthread_sigqueue(self, 0, sv), 0);
  int old = -1;
  CHECK_EQ(iof_compat_pthread_setcancelstate(99, &old), EINVAL);
  CHECK_EQ(old, -1);
  CHECK_EQ(iof_compat_pthread_setcancelstate(PTHREAD_CANCEL_DISABLE, NULL), 0);
  CHECK_EQ(iof_compat_pthread_setcancelstate(PTHREAD_CANCEL_ENABLE, &old), 0);
  CHECK_EQ(old, PTHREAD_CANCEL_DISABLE);
  CHECK_EQ(iof_compat_pthread_setcanceltype(-1, &old), EINVAL);
  CHECK_EQ(iof_compat_pthread_setcanceltype(PTHREAD_CANCEL_DEFERRED, NULL), 0);
  iof_compat_pthread_testcancel();
  CHECK_EQ(iof_compat_cxa_thread_atexit_impl(NULL, &old, NULL), -ESRCH);
  struct timespec past = {0, 0}, bad = {0, -1};
  pthread_mutex_t m = PTHREAD_MUTEX_INITIALIZER;
  CHECK_EQ(iof_compat_pthread_mutex_clocklock(NULL, CLOCK_MONOTONIC, &past),
           EINVAL);
  CHECK_EQ(iof_compat_pthread_mutex_clocklock(&m, (clockid_t)12345, &past),
           EINVAL);
  CHECK_EQ(iof_compat_pthread_mutex_clocklock(&m, CLOCK_MONOTONIC, &past), 0);
  CHECK_EQ(iof_compat_pthread_mutex_clocklock(&m, CLOCK_MONOTONIC, &past),
           EDEADLK);
  CHECK_EQ(iof_compat_pthread_mutex_unlock(&m), 0);
  pthread_rwlock_t rw = PTHREAD_RWLOCK_INITIALIZER;
  CHECK_EQ(iof_compat_pthread_rwlock_clockrdlock(NULL, CLOCK_MONOTONIC, &past),
           EINVAL);
  CHECK_EQ(iof_compat_pthread_rwlock_clockwrlock(NULL, CLOCK_MONOTONIC, &past),
           EINVAL);
  CHECK_EQ(iof_compat_pthread_rwlock_clockrdlock(&rw, (clockid_t)12345, &past),
           EINVAL);
  CHECK_EQ(iof_compat_pthread_rwlock_clockwrlock(&rw, (clockid_t)12345, &past),
           EINVAL);
  CHECK_EQ(iof_compat_pthread_rwlock_clockwrlock(&rw, CLOCK_REALTIME, &bad),
           0); /* free: abstime not looked at */
  CHECK_EQ(iof_compat_pthread_rwlock_clockrdlock(&rw, CLOCK_MONOTONIC, &past),
           EDEADLK);
  CHECK_EQ(iof_compat_pthread_rwlock_unlock(&rw), 0);
  CHECK_EQ(iof_compat_pthread_rwlock_destroy(&rw), 0);
  pthread_t t;
  CHECK_EQ(iof_compat_pthread_create(&t, NULL, ret_arg, NULL), 0);
  CHECK_EQ(iof_compat_pthread_clockjoin_np(t, NULL, (clockid_t)12345, &past),
           EINVAL);
  if (in_a_fiber) /* glibc looks at abstime only when it has to wait */
    CHECK_EQ(iof_compat_pthread_clockjoin_np(t, NULL, CLOCK_MONOTONIC, &bad),
             EINVAL);
  if (in_a_fiber)
    CHECK_EQ(iof_compat_pthread_clockjoin_np(t, NULL, CLOCK_MONOTONIC, NULL),
             0);
  else /* a join TSan sees (it does not intercept glibc's clockjoin) */
    CHECK_EQ(iof_compat_pthread_join(t, NULL), 0);
  CHECK_EQ(iof_compat_pthread_clockjoin_np(self, NULL, CLOCK_MONOTONIC, NULL),
           EDEADLK);
  return 0;
}

static void *more_thread_calls_thread(void *arg) {
  return (void *)(intptr_t)more_thread_calls(arg);
}

static int more_thread_calls_in_a_fiber_thread(void *arg) {
  (void)arg;
  pthread_t t;
  CHECK_EQ(iof_compat_pthread_create(&t, NULL, more_thread_calls_thread, NULL),
           0);
  CHECK_EQ(iof_compat_pthread_join(t, NULL), 0);
  return 0;
}

static void *fake_tls_get_addr(void *ti) {
  return ti;
}

/* iof_compat_tls_get_addr: what the loader never passes is EINVAL; a
 * module id no module has is the loader's business (real gets it). */
static void compat_tls_get_addr_bad_arguments(void **state) {
  (void)state;
  unsigned long ti[2] = {1u << 20, 0};
  errno = 0;
  assert_null(iof_compat_tls_get_addr(NULL, fake_tls_get_addr));
  assert_int_equal(errno, EINVAL);
  errno = 0;
  assert_null(iof_compat_tls_get_addr(ti, NULL));
  assert_int_equal(errno, EINVAL);
  assert_ptr_equal(iof_compat_tls_get_addr(ti, fake_tls_get_addr), ti);
}

/* A handle that names no loaded module (glibc's dlclose dereferences it)
 * is refused; a real one closes. */
static void compat_dlclose_bad_handle(void **state) {
  (void)state;
  errno = 0;
  assert_int_equal(iof_compat_dlclose(NULL), -1);
  assert_int_equal(errno, EINVAL);
  int junk[8] = {0};
  assert_int_equal(iof_compat_dlclose(junk), -1);
  assert_int_equal(iof_compat_dlclose((void *)(uintptr_t)0x10), -1);
  assert_int_equal(iof_compat_dlclose(RTLD_NEXT), -1);
  assert_int_equal(errno, EINVAL);
  /* A module loaded here, twice: two closes, then it is gone. */
  void *h = dlopen("libutil.so.1", RTLD_NOW);
  assert_non_null(h);
  assert_ptr_equal(dlopen("libutil.so.1", RTLD_NOW), h);
  assert_int_equal(iof_compat_dlclose(h), 0);
  assert_int_equal(iof_compat_dlclose(h), 0);
  assert_null(dlopen("libutil.so.1", RTLD_NOW | RTLD_NOLOAD));
  assert_int_equal(iof_compat_dlclose(h), -1); /* closed already */
#if !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)
  /* A module of another namespace (dlmopen) is found too. */
  void *n = dlmopen(LM_ID_NEWLM, "libutil.so.1", RTLD_NOW);
  assert_non_null(n);
  assert_int_equal(iof_compat_dlclose(n), 0);
#endif
}

static void compat_more_thread_calls(void **state) {
  (void)state;
  both_ways(more_thread_calls);
  both_ways(more_thread_calls_in_a_fiber_thread);
}

/* Two fiber threads joining each other: the second join is EDEADLK, as
 * glibc answers, not a wait that never ends; the first then completes. */
static pthread_t mj_a, mj_b;
static int mj_b_rc = -1;
static atomic_int mj_a_done;

static void *mj_b_fn(void *arg) {
  (void)arg;
  iof_compat_usleep(5000); /* A waits in its join of B by now */
  mj_b_rc = iof_compat_pthread_join(mj_a, NULL);
  return NULL;
}

static void *mj_a_fn(void *arg) {
  (void)arg;
  intptr_t r = iof_compat_pthread_create(&mj_b, NULL, mj_b_fn, NULL);
  if (r == 0) r = iof_compat_pthread_join(mj_b, NULL);
  atomic_store(&mj_a_done, 1);
  return (void *)r;
}

static int mutual_join_calls(void *arg) {
  (void)arg;
  CHECK_EQ(iof_compat_pthread_create(&mj_a, NULL, mj_a_fn, NULL), 0);
  /* Nobody else joins A meanwhile (B's join would be EINVAL then). */
  for (int i = 0; i < 2000 && !atomic_load(&mj_a_done); i++)
    iof_compat_usleep(1000);
  CHECK_EQ(atomic_load(&mj_a_done), 1);
  void *rv = (void *)(intptr_t)-1;
  CHECK_EQ(iof_compat_pthread_join(mj_a, &rv), 0);
  CHECK_EQ((intptr_t)rv, 0);
  CHECK_EQ(mj_b_rc, EDEADLK);
  return 0;
}

static void compat_mutual_join_is_edeadlk(void **state) {
  (void)state;
  iof_io_context *io = iof_io_context_create();
  assert_non_null(io);
  launch(io, mutual_join_calls, NULL);
  run_all(io);
  assert_int_equal(iof_io_context_destroy(io), 0);
  assert_int_equal(atomic_load(&failures), 0);
}

int main(void) {
  trace = getenv("HOSTILE_TRACE") != NULL;
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(compat_fd_calls, reset, disarm),
      cmocka_unit_test_setup_teardown(compat_failed_dup_keeps_target, reset,
                                      disarm),
      cmocka_unit_test_setup_teardown(compat_random_fd_operations, reset,
                                      disarm),
      cmocka_unit_test_setup_teardown(compat_poll_and_sleep_calls, reset,
                                      disarm),
      cmocka_unit_test_setup_teardown(compat_signal_calls, reset, disarm),
      cmocka_unit_test_setup_teardown(compat_stdio_calls, reset, disarm),
      cmocka_unit_test_setup_teardown(compat_wild_sets, reset, disarm),
      cmocka_unit_test_setup_teardown(compat_process_calls, reset, disarm),
      cmocka_unit_test_setup_teardown(huge_compat_sleeps_are_long, reset,
                                      disarm),
      cmocka_unit_test_setup_teardown(huge_rcvtimeo_waits, reset, disarm),
      cmocka_unit_test_setup_teardown(compat_ipc_calls, reset, disarm),
      cmocka_unit_test_setup_teardown(compat_resolver_calls, reset, disarm),
      cmocka_unit_test_setup_teardown(compat_thread_calls, reset, disarm),
      cmocka_unit_test_setup_teardown(compat_main_bad_arguments, reset, disarm),
      cmocka_unit_test_setup_teardown(compat_wild_vectors, reset, disarm),
      cmocka_unit_test_setup_teardown(compat_sendmsg_from_another_stack, reset,
                                      disarm),
      cmocka_unit_test_setup_teardown(compat_waitall_on_messages, reset,
                                      disarm),
      cmocka_unit_test_setup_teardown(compat_sock_kind_follows_the_file, reset,
                                      disarm),
      cmocka_unit_test_setup_teardown(compat_peek_waitall, reset, disarm),
      cmocka_unit_test_setup_teardown(compat_recvmsg_waitall, reset, disarm),
      cmocka_unit_test_setup_teardown(compat_recvmsg_waitall_fds, reset,
                                      disarm),
      cmocka_unit_test_setup_teardown(compat_stale_thread_ids, reset, disarm),
      cmocka_unit_test_setup_teardown(compat_stale_id_meets_reuse, reset,
                                      disarm),
      cmocka_unit_test_setup_teardown(compat_ending_thread_names, reset,
                                      disarm),
      cmocka_unit_test_setup_teardown(compat_more_io_calls, reset, disarm),
      cmocka_unit_test_setup_teardown(compat_more_thread_calls, reset, disarm),
      cmocka_unit_test_setup_teardown(compat_tls_get_addr_bad_arguments, reset,
                                      disarm),
      cmocka_unit_test_setup_teardown(compat_dlclose_bad_handle, reset, disarm),
      cmocka_unit_test_setup_teardown(compat_mutual_join_is_edeadlk, reset,
                                      disarm),
      cmocka_unit_test_setup_teardown(compat_rwlock_try_busy, reset, disarm),
      cmocka_unit_test_setup_teardown(compat_connect_again, reset, disarm),
      cmocka_unit_test_setup_teardown(compat_once_left_by_exit, reset, disarm),
      cmocka_unit_test_setup_teardown(compat_kill_ended_thread, reset, disarm),
      cmocka_unit_test_setup_teardown(compat_rwlock_prefer_writer, reset,
                                      disarm),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
