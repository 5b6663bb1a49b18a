/* compat fd calls (compat_io.h): each scenario runs outside any fiber and
 * inside one and must see the same results (success, EOF, EAGAIN on
 * user-non-blocking fds, ECONNRESET, EBADF, SO_RCVTIMEO timeouts); then
 * what only fibers show: a fiber blocked in read while others run, errno
 * kept across suspension, close (and dup2) over a waited fd waking the
 * waiter with EBADF, fds made before the runtime, blocking connect/accept
 * between fibers, F_GETFL's user view; a close from another thread waking
 * a fiber whose io_context runs on its own thread, and a fiber on a thread
 * pool (served by compat's background io_context).
 *
 * IOF_TEST_THREADED */
#include "compat_io_test.h"

#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <netinet/tcp.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <stddef.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>

IOF_TEST_CHECK_FIXTURES(setup, teardown, 60)

/* ---- same results in and out of fibers ---------------------------------- */

static int sc_pipe_basics(void *arg) {
  (void)arg;
  int p[2];
  CHECK(iof_compat_pipe(p) == 0);
  CHECK(iof_compat_write(p[1], "hello", 5) == 5);
  char b[16] = {0};
  CHECK(iof_compat_read(p[0], b, sizeof b) == 5 && !memcmp(b, "hello", 5));
  struct iovec v[2] = {{"ab", 2}, {"cde", 3}};
  CHECK(iof_compat_writev(p[1], v, 2) == 5);
  char x[2], y[8];
  struct iovec r[2] = {{x, 2}, {y, 8}};
  CHECK(iof_compat_readv(p[0], r, 2) == 5 && !memcmp(x, "ab", 2) &&
        !memcmp(y, "cde", 3));
  /* F_GETFL shows a blocking fd even once a fiber made it non-blocking. */
  CHECK((iof_compat_fcntl(p[0], F_GETFL) & O_NONBLOCK) == 0);
  CHECK(iof_compat_close(p[1]) == 0);
  CHECK(iof_compat_read(p[0], b, sizeof b) == 0); /* EOF */
  CHECK(iof_compat_close(p[0]) == 0);
  errno = 0;
  CHECK(iof_compat_read(p[0], b, 1) == -1 && errno == EBADF);
  errno = 0;
  CHECK(iof_compat_write(-1, b, 1) == -1 && errno == EBADF);
  errno = 0;
  CHECK(iof_compat_close(p[0]) == -1 && errno == EBADF);
  return 0;
}

static void test_pipe_basics(void **s) {
  (void)s;
  both_ways(sc_pipe_basics, NULL);
}

static int sc_user_nonblocking(void *arg) {
  (void)arg;
  int p[2];
  CHECK(iof_compat_pipe2(p, O_NONBLOCK) == 0);
  char b[4];
  errno = 0;
  CHECK(iof_compat_read(p[0], b, sizeof b) == -1 && errno == EAGAIN);
  CHECK(iof_compat_fcntl(p[0], F_GETFL) & O_NONBLOCK);
  /* Back to blocking through fcntl, then non-blocking again by FIONBIO. */
  int fl = iof_compat_fcntl(p[0], F_GETFL);
  CHECK(iof_compat_fcntl(p[0], F_SETFL, fl & ~O_NONBLOCK) == 0);
  CHECK((iof_compat_fcntl(p[0], F_GETFL) & O_NONBLOCK) == 0);
  int on = 1;
  CHECK(iof_compat_ioctl(p[0], FIONBIO, &on) == 0);
  errno = 0;
  CHECK(iof_compat_read(p[0], b, sizeof b) == -1 && errno == EWOULDBLOCK);
  CHECK(iof_compat_fcntl(p[0], F_GETFL) & O_NONBLOCK);
  /* A socket made SOCK_NONBLOCK, and MSG_DONTWAIT on a blocking one. */
  int sv[2];
  CHECK(iof_compat_socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, sv) ==
        0);
  errno = 0;
  CHECK(iof_compat_recv(sv[0], b, sizeof b, 0) == -1 && errno == EAGAIN);
  int sb[2];
  CHECK(iof_compat_socketpair(AF_UNIX, SOCK_STREAM, 0, sb) == 0);
  errno = 0;
  CHECK(iof_compat_recv(sb[0], b, sizeof b, MSG_DONTWAIT) == -1 &&
        errno == EAGAIN);
  /* A non-blocking writer fills the pipe and gets EAGAIN, not a wait. */
  CHECK(iof_compat_fcntl(p[1], F_SETFL, O_NONBLOCK) == 0);
  static char big[1 << 16];
  ssize_t n;
  size_t total = 0;
  while ((n = iof_compat_write(p[1], big, sizeof big)) > 0) total += (size_t)n;
  CHECK(n == -1 && errno == EAGAIN && total > 0);
  for (int i = 0; i < 2; i++) {
    iof_compat_close(p[i]);
    iof_compat_close(sv[i]);
    iof_compat_close(sb[i]);
  }
  return 0;
}

static void test_user_nonblocking(void **s) {
  (void)s;
  both_ways(sc_user_nonblocking, NULL);
}

/* An fd already O_NONBLOCK when first seen (made by plain libc) stays the
 * user's non-blocking fd. */
static int sc_foreign_nonblocking(void *arg) {
  int *p = arg;
  char b[4];
  errno = 0;
  CHECK(iof_compat_read(p[0], b, sizeof b) == -1 && errno == EAGAIN);
  CHECK(iof_compat_fcntl(p[0], F_GETFL) & O_NONBLOCK);
  return 0;
}

static void test_foreign_nonblocking(void **s) {
  (void)s;
  int p[2];
  assert_int_equal(pipe2(p, O_NONBLOCK), 0);
  both_ways(sc_foreign_nonblocking, p);
  close(p[0]);
  close(p[1]);
}

/* TCP over loopback: connect, accept, send/recv, sendto/recvfrom,
 * sendmsg/recvmsg, shutdown (EOF), then a reset (ECONNRESET). */
static int sc_tcp(void *arg) {
  (void)arg;
  int l = iof_compat_socket(AF_INET, SOCK_STREAM, 0);
  CHECK(l >= 0);
  struct sockaddr_in a = loopback(0);
  CHECK(bind(l, (struct sockaddr *)&a, sizeof a) == 0);
  CHECK(listen(l, 4) == 0);
  socklen_t al = sizeof a;
  CHECK(getsockname(l, (struct sockaddr *)&a, &al) == 0);
  int c = iof_compat_socket(AF_INET, SOCK_STREAM, 0);
  CHECK(iof_compat_connect(c, (struct sockaddr *)&a, sizeof a) == 0);
  struct sockaddr_in peer;
  socklen_t pl = sizeof peer;
  int s = iof_compat_accept(l, (struct sockaddr *)&peer, &pl);
  CHECK(s >= 0 && pl == sizeof peer && peer.sin_family == AF_INET);
  CHECK(iof_compat_send(c, "ping", 4, 0) == 4);
  char b[16] = {0};
  CHECK(iof_compat_recv(s, b, 4, MSG_WAITALL) == 4 && !memcmp(b, "ping", 4));
  CHECK(iof_compat_sendto(s, "pong", 4, 0, NULL, 0) == 4);
  CHECK(iof_compat_recvfrom(c, b, sizeof b, 0, NULL, NULL) == 4 &&
        !memcmp(b, "pong", 4));
  struct iovec v = {"msg", 3};
  struct msghdr m = {0};
  m.msg_iov = &v;
  m.msg_iovlen = 1;
  CHECK(iof_compat_sendmsg(c, &m, 0) == 3);
  struct iovec rv = {b, sizeof b};
  struct msghdr rm = {0};
  rm.msg_iov = &rv;
  rm.msg_iovlen = 1;
  CHECK(iof_compat_recvmsg(s, &rm, 0) == 3 && !memcmp(b, "msg", 3));
  int one = 1, got = 0;
  socklen_t gl = sizeof got;
  CHECK(iof_compat_setsockopt(c, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one) ==
        0);
  CHECK(iof_compat_getsockopt(c, IPPROTO_TCP, TCP_NODELAY, &got, &gl) == 0 &&
        got);
  CHECK(iof_compat_shutdown(c, SHUT_WR) == 0);
  CHECK(iof_compat_read(s, b, sizeof b) == 0);
  /* A reset: linger 0 on close, then the peer's read sees ECONNRESET. */
  struct linger lg = {1, 0};
  CHECK(iof_compat_setsockopt(s, SOL_SOCKET, SO_LINGER, &lg, sizeof lg) == 0);
  CHECK(iof_compat_close(s) == 0);
  errno = 0;
  CHECK(iof_compat_read(c, b, sizeof b) == -1 && errno == ECONNRESET);
  iof_compat_close(c);
  /* Refused: nobody listens on the port any more. */
  iof_compat_close(l);
  c = iof_compat_socket(AF_INET, SOCK_STREAM, 0);
  errno = 0;
  CHECK(iof_compat_connect(c, (struct sockaddr *)&a, sizeof a) == -1 &&
        errno == ECONNREFUSED);
  iof_compat_close(c);
  return 0;
}

static void test_tcp(void **s) {
  (void)s;
  both_ways(sc_tcp, NULL);
}

/* SO_RCVTIMEO: a read with nothing to read gives EAGAIN after about the
 * timeout, in both worlds; set by plain setsockopt before the fiber first
 * sees the socket, or through compat. */
static int sc_rcvtimeo(void *arg) {
  int *sv = arg;
  char b[4];
  uint64_t t0 = iof_test_now_ns();
  errno = 0;
  CHECK(iof_compat_read(sv[0], b, sizeof b) == -1 && errno == EAGAIN);
  int64_t ms = ms_since(t0);
  CHECK(ms >= 90 && ms < 5000);
  struct timeval tv = {0, 50 * 1000};
  CHECK(iof_compat_setsockopt(sv[1], SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv) ==
        0);
  t0 = iof_test_now_ns();
  errno = 0;
  CHECK(iof_compat_recv(sv[1], b, sizeof b, 0) == -1 && errno == EAGAIN);
  ms = ms_since(t0);
  CHECK(ms >= 40 && ms < 5000);
  tv.tv_usec = 0; /* cleared again */
  CHECK(iof_compat_setsockopt(sv[1], SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv) ==
        0);
  return 0;
}

static void test_rcvtimeo(void **s) {
  (void)s;
  int sv[2];
  assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
  struct timeval tv = {0, 100 * 1000};
  assert_int_equal(setsockopt(sv[0], SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv),
                   0);
  both_ways(sc_rcvtimeo, sv);
  close(sv[0]);
  close(sv[1]);
}

/* After a short read the next one waits for readiness before it tries:
 * data that came meanwhile is still read at once, SO_RCVTIMEO still
 * times out with EAGAIN, and end of stream still reads 0. */
static int sc_read_after_short_read(void *arg) {
  int *sv = arg;
  char b[16];
  CHECK(iof_compat_write(sv[1], "abc", 3) == 3);
  CHECK(iof_compat_read(sv[0], b, sizeof b) == 3 && !memcmp(b, "abc", 3));
  CHECK(iof_compat_write(sv[1], "de", 2) == 2);
  uint64_t t0 = iof_test_now_ns();
  CHECK(iof_compat_read(sv[0], b, sizeof b) == 2 && !memcmp(b, "de", 2));
  CHECK(ms_since(t0) < 1000);
  struct timeval tv = {0, 50 * 1000};
  CHECK(iof_compat_setsockopt(sv[0], SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv) ==
        0);
  t0 = iof_test_now_ns();
  errno = 0;
  CHECK(iof_compat_read(sv[0], b, sizeof b) == -1 && errno == EAGAIN);
  int64_t ms = ms_since(t0);
  CHECK(ms >= 40 && ms < 5000);
  tv.tv_usec = 0;
  CHECK(iof_compat_setsockopt(sv[0], SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv) ==
        0);
  /* A full read leaves the next one trying first: both get their bytes. */
  CHECK(iof_compat_write(sv[1], "0123456789abcdefXY", 18) == 18);
  CHECK(iof_compat_read(sv[0], b, sizeof b) == 16);
  CHECK(iof_compat_read(sv[0], b, sizeof b) == 2 && !memcmp(b, "XY", 2));
  /* End of stream after a short read. */
  CHECK(iof_compat_close(sv[1]) == 0);
  CHECK(iof_compat_read(sv[0], b, sizeof b) == 0);
  return 0;
}

static void test_read_after_short_read(void **s) {
  (void)s;
  for (int way = 0; way < 2; way++) {
    int sv[2];
    assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
    if (way == 0)
      assert_int_equal(sc_read_after_short_read(sv), 0);
    else
      assert_int_equal(in_fiber(sc_read_after_short_read, sv), 0);
    close(sv[0]);
  }
}

/* Regular files pass through (and dup keeps working on them). */
static int sc_file(void *arg) {
  (void)arg;
  char path[] = "/tmp/iof_compat_XXXXXX";
  int fd = mkstemp(path);
  CHECK(fd >= 0);
  unlink(path);
  CHECK(iof_compat_write(fd, "data", 4) == 4);
  CHECK(lseek(fd, 0, SEEK_SET) == 0);
  int d = iof_compat_dup(fd);
  char b[8] = {0};
  CHECK(iof_compat_read(d, b, sizeof b) == 4 && !memcmp(b, "data", 4));
  CHECK(iof_compat_read(fd, b, sizeof b) == 0);
  CHECK((iof_compat_fcntl(fd, F_GETFL) & O_NONBLOCK) == 0);
  iof_compat_close(d);
  iof_compat_close(fd);
  return 0;
}

static void test_file(void **s) {
  (void)s;
  both_ways(sc_file, NULL);
}

/* accept on a user-non-blocking listener, the dup family, SO_SNDTIMEO on
 * a full socket. */
static int sc_accept_dup_sndtimeo(void *arg) {
  (void)arg;
  int l = iof_compat_socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
  struct sockaddr_in a = loopback(0);
  CHECK(bind(l, (struct sockaddr *)&a, sizeof a) == 0);
  CHECK(listen(l, 4) == 0);
  errno = 0;
  CHECK(iof_compat_accept(l, NULL, NULL) == -1 && errno == EAGAIN);
  errno = 0;
  CHECK(iof_compat_accept4(l, NULL, NULL, SOCK_CLOEXEC) == -1 &&
        errno == EAGAIN);
  iof_compat_close(l);
  int sv[2];
  CHECK(iof_compat_socketpair(AF_UNIX, SOCK_STREAM, 0, sv) == 0);
  int d = iof_compat_dup(sv[0]);
  CHECK(d >= 0 && (iof_compat_fcntl(d, F_GETFL) & O_NONBLOCK) == 0);
  int d2 = iof_compat_fcntl(sv[0], F_DUPFD_CLOEXEC, 100);
  CHECK(d2 >= 100 && (iof_compat_fcntl(d2, F_GETFD) & FD_CLOEXEC));
  CHECK(iof_compat_dup2(sv[1], d2) == d2);
  CHECK(iof_compat_dup3(sv[1], d, O_CLOEXEC) == d);
  errno = 0;
  CHECK(iof_compat_dup3(d, d, 0) == -1 && errno == EINVAL);
  CHECK(iof_compat_write(d, "dup", 3) == 3); /* d is sv[1] now */
  char b[8];
  CHECK(iof_compat_read(sv[0], b, sizeof b) == 3 && !memcmp(b, "dup", 3));
  CHECK(iof_compat_close(d) == 0 && iof_compat_close(d2) == 0);
  /* Fill sv[0]'s send side, then a blocking send times out. */
  struct timeval tv = {0, 50 * 1000};
  CHECK(iof_compat_setsockopt(sv[0], SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv) ==
        0);
  static char big[4096];
  while (iof_compat_send(sv[0], big, sizeof big, MSG_DONTWAIT) > 0) {
  }
  uint64_t t0 = iof_test_now_ns();
  errno = 0;
  CHECK(iof_compat_send(sv[0], big, sizeof big, 0) == -1 && errno == EAGAIN);
  int64_t ms = ms_since(t0);
  CHECK(ms >= 40 && ms < 5000);
  iof_compat_close(sv[0]);
  iof_compat_close(sv[1]);
  return 0;
}

static void test_accept_dup_sndtimeo(void **s) {
  (void)s;
  both_ways(sc_accept_dup_sndtimeo, NULL);
}

/* A socket accept makes has the listener's SO_RCVTIMEO and SO_SNDTIMEO
 * (Linux copies the socket's options): a read with nothing to read gives
 * EAGAIN after about the timeout, as a thread's does (a fiber's used to
 * wait forever: the new record had no timeouts). Set through compat on
 * one listener, by plain setsockopt before any fiber saw the other. */
/* Shuts fd down after 2 s unless the step ended: a read or send that does
 * not time out ends then (end of stream, EPIPE) instead of never. */
typedef struct bound_step {
  int fd;
  atomic_bool done;
  pthread_t t;
} bound_step;

static void *bound_step_main(void *arg) {
  bound_step *b = arg;
  for (int i = 0; i < 40 && !atomic_load(&b->done); i++) usleep(50 * 1000);
  if (!atomic_load(&b->done)) shutdown(b->fd, SHUT_RDWR);
  return NULL;
}

static bool bound_step_start(bound_step *b, int fd) {
  b->fd = fd;
  atomic_init(&b->done, false);
  return pthread_create(&b->t, NULL, bound_step_main, b) == 0;
}

static void bound_step_end(bound_step *b) {
  atomic_store(&b->done, true);
  pthread_join(b->t, NULL);
}

static int accepted_times_out(int l, int port) {
  struct sockaddr_in a = loopback(port);
  int c = iof_compat_socket(AF_INET, SOCK_STREAM, 0);
  CHECK(c >= 0 && iof_compat_connect(c, (struct sockaddr *)&a, sizeof a) == 0);
  int s = iof_compat_accept(l, NULL, NULL);
  CHECK(s >= 0);
  bound_step step;
  CHECK(bound_step_start(&step, s));
  char b[4];
  uint64_t t0 = iof_test_now_ns();
  errno = 0;
  CHECK(iof_compat_read(s, b, sizeof b) == -1 && errno == EAGAIN);
  int64_t ms = ms_since(t0);
  CHECK(ms >= 40 && ms < 1500);
  bound_step_end(&step);
  /* And a full send side times out after SO_SNDTIMEO. */
  static char big[65536];
  while (iof_compat_send(s, big, sizeof big, MSG_DONTWAIT | MSG_NOSIGNAL) > 0) {
  }
  CHECK(bound_step_start(&step, s));
  t0 = iof_test_now_ns();
  errno = 0;
  CHECK(iof_compat_send(s, big, sizeof big, MSG_NOSIGNAL) == -1 &&
        errno == EAGAIN);
  ms = ms_since(t0);
  CHECK(ms >= 40 && ms < 1500);
  bound_step_end(&step);
  iof_compat_close(s);
  iof_compat_close(c);
  return 0;
}

static int sc_accept_inherits_timeouts(void *arg) {
  (void)arg;
  struct timeval tv = {0, 50 * 1000};
  int port;
  int l = listen_tcp(&port, 4);
  CHECK(iof_compat_setsockopt(l, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv) == 0);
  CHECK(iof_compat_setsockopt(l, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv) == 0);
  CHECK(accepted_times_out(l, port) == 0);
  iof_compat_close(l);
  return 0;
}

static int plain_listener_case(void *arg) {
  int *a = arg;
  return accepted_times_out(a[0], a[1]);
}

static void test_accept_inherits_timeouts(void **s) {
  (void)s;
  both_ways(sc_accept_inherits_timeouts, NULL);
  /* Options set plainly, before the runtime knew the listener. */
  int port;
  int l = listen_tcp(&port, 4);
  struct timeval tv = {0, 50 * 1000};
  assert_int_equal(setsockopt(l, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv), 0);
  assert_int_equal(setsockopt(l, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv), 0);
  int args[2] = {l, port};
  assert_int_equal(in_fiber(plain_listener_case, args), 0);
  assert_no_failures();
  /* Through compat: the fiber's use left a record of the number. */
  iof_compat_close(l);
}

/* ---- only fibers ----------------------------------------------------------
 */

typedef struct fibers_ctx {
  int rfd, wfd;
  atomic_int ticks;
  atomic_int done;
  int ticks_before_data;
  ssize_t got;
  int err;
  char buf[16];
} fibers_ctx;

static int reader(void *arg) {
  fibers_ctx *r = arg;
  errno = 4242; /* must survive the suspension */
  r->got = iof_compat_read(r->rfd, r->buf, sizeof r->buf);
  r->err = errno;
  atomic_store(&r->done, 1);
  return 0;
}

static int ticker(void *arg) {
  fibers_ctx *r = arg;
  while (!atomic_load(&r->done)) {
    atomic_fetch_add(&r->ticks, 1);
    iof_compat_usleep(1000);
  }
  return 0;
}

static int writer(void *arg) {
  fibers_ctx *r = arg;
  CHECK(iof_compat_usleep(100 * 1000) == 0);
  r->ticks_before_data = atomic_load(&r->ticks);
  CHECK(iof_compat_write(r->wfd, "x", 1) == 1);
  return 0;
}

static void *late_writer(void *arg) {
  sleep_ms(30);
  if (write(*(int *)arg, "yz", 2) != 2) abort();
  return NULL;
}

/* A fiber in read() on a pipe made before the runtime, while other fibers
 * of the same thread keep running: only the fiber waits; errno survives
 * the suspension. */
static void test_read_blocks_only_fiber(void **s) {
  (void)s;
  int p[2];
  assert_int_equal(pipe(p), 0);
  fibers_ctx r = {0};
  r.rfd = p[0];
  r.wfd = p[1];
  iof_io_context *io = new_io();
  launch(io, reader, &r);
  launch(io, ticker, &r);
  launch(io, writer, &r);
  run_all(io);
  assert_int_equal(iof_io_context_destroy(io), 0);
  assert_no_failures();
  assert_int_equal(r.got, 1);
  assert_int_equal(r.err, 4242);
  assert_true(r.ticks_before_data >= 10);
  /* The plain thread view is unchanged: a blocking fd, whose read waits
   * for data from another thread instead of failing with EAGAIN. */
  assert_int_equal(iof_compat_fcntl(p[0], F_GETFL) & O_NONBLOCK, 0);
  assert_true(fcntl(p[0], F_GETFL) & O_NONBLOCK); /* the runtime's */
  pthread_t t;
  assert_int_equal(pthread_create(&t, NULL, late_writer, &p[1]), 0);
  char b[4];
  uint64_t t0 = iof_test_now_ns();
  assert_int_equal(iof_compat_read(p[0], b, sizeof b), 2);
  assert_true(ms_since(t0) >= 20);
  assert_int_equal(pthread_join(t, NULL), 0);
  iof_compat_close(p[0]);
  iof_compat_close(p[1]);
}

typedef struct close_ctx {
  int fd, other;
  int use_dup2;
  ssize_t got;
  int err;
  atomic_int waiting;
} close_ctx;

static int blocked_reader(void *arg) {
  close_ctx *c = arg;
  char b[4];
  atomic_store(&c->waiting, 1);
  errno = 0;
  c->got = iof_compat_read(c->fd, b, sizeof b);
  c->err = errno;
  return 0;
}

static int closer(void *arg) {
  close_ctx *c = arg;
  iof_compat_usleep(50 * 1000); /* the reader is waiting by now */
  CHECK(atomic_load(&c->waiting));
  if (c->use_dup2) {
    /* The number now names another pipe that has data: the old waiter
     * must not read it. */
    CHECK(iof_compat_dup2(c->other, c->fd) == c->fd);
  } else {
    CHECK(iof_compat_close(c->fd) == 0);
    /* Reuse the number at once. */
    int p[2];
    CHECK(iof_compat_pipe(p) == 0);
    CHECK(iof_compat_write(p[1], "new", 3) == 3);
    if (p[0] != c->fd) {
      iof_compat_dup2(p[0], c->fd);
      iof_compat_close(p[0]);
    }
    c->other = p[1];
  }
  return 0;
}

/* close or dup2 over an fd a fiber waits on wakes it with EBADF, and the
 * reused number's data never reaches it. */
static void close_while_waiting(int use_dup2) {
  int p[2], q[2];
  assert_int_equal(pipe(p), 0);
  assert_int_equal(pipe(q), 0);
  assert_int_equal(write(q[1], "other", 5), 5);
  close_ctx c = {0};
  c.fd = p[0];
  c.other = q[0];
  c.use_dup2 = use_dup2;
  iof_io_context *io = new_io();
  launch(io, blocked_reader, &c);
  launch(io, closer, &c);
  uint64_t t0 = iof_test_now_ns();
  run_all(io);
  assert_int_equal(iof_io_context_destroy(io), 0);
  assert_no_failures();
  assert_true(ms_since(t0) < 5000);
  assert_int_equal(c.got, -1);
  assert_int_equal(c.err, EBADF);
  iof_compat_close(p[0]);
  iof_compat_close(p[1]);
  iof_compat_close(q[0]);
  iof_compat_close(q[1]);
  if (!use_dup2) iof_compat_close(c.other);
}

static void test_close_while_waiting(void **s) {
  (void)s;
  close_while_waiting(0);
}

static void test_dup2_while_waiting(void **s) {
  (void)s;
  close_while_waiting(1);
}

/* Blocking accept and connect between fibers, with a server echoing
 * through a listener made before the runtime. */
typedef struct echo_ctx {
  int l, port, clients;
  atomic_int served;
} echo_ctx;

static int echo_one(void *arg) {
  int fd = (int)(intptr_t)arg;
  char b[64];
  ssize_t n;
  while ((n = iof_compat_read(fd, b, sizeof b)) > 0)
    CHECK(iof_compat_write(fd, b, (size_t)n) == n);
  CHECK(n == 0);
  iof_compat_close(fd);
  return 0;
}

static int acceptor(void *arg) {
  echo_ctx *e = arg;
  for (int i = 0; i < e->clients; i++) {
    int fd = iof_compat_accept(e->l, NULL, NULL);
    CHECK(fd >= 0);
    if (fd < 0) return -1;
    CHECK(iof_launch(iof_env_current()->executor, echo_one,
                     (void *)(intptr_t)fd) == 0);
  }
  return 0;
}

static int client(void *arg) {
  echo_ctx *e = arg;
  int c = iof_compat_socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in a = loopback(e->port);
  CHECK(iof_compat_connect(c, (struct sockaddr *)&a, sizeof a) == 0);
  char msg[32], b[32];
  int len = snprintf(msg, sizeof msg, "hello %d", c);
  for (int i = 0; i < 10; i++) {
    CHECK(iof_compat_write(c, msg, (size_t)len) == len);
    CHECK(iof_compat_recv(c, b, (size_t)len, MSG_WAITALL) == len);
    CHECK(!memcmp(b, msg, (size_t)len));
  }
  iof_compat_close(c);
  atomic_fetch_add(&e->served, 1);
  return 0;
}

static void test_echo_between_fibers(void **s) {
  (void)s;
  echo_ctx e = {0};
  e.clients = 50;
  e.l = listen_tcp(&e.port, 64);
  iof_io_context *io = new_io();
  launch(io, acceptor, &e);
  for (int i = 0; i < e.clients; i++) launch(io, client, &e);
  run_all(io);
  assert_int_equal(iof_io_context_destroy(io), 0);
  assert_no_failures();
  assert_int_equal(atomic_load(&e.served), e.clients);
  iof_compat_close(e.l);
}

/* A big write to a blocking-view socket hands over everything while the
 * peer fiber drains it slowly. */
typedef struct bulk_ctx {
  int sv[2];
  size_t total;
  size_t received;
} bulk_ctx;

static int bulk_writer(void *arg) {
  bulk_ctx *b = arg;
  static char big[1 << 20];
  memset(big, 'q', sizeof big);
  CHECK(iof_compat_write(b->sv[0], big, sizeof big) == (ssize_t)sizeof big);
  iof_compat_close(b->sv[0]);
  b->total = sizeof big;
  return 0;
}

static int bulk_reader(void *arg) {
  bulk_ctx *b = arg;
  char buf[4096];
  ssize_t n;
  while ((n = iof_compat_read(b->sv[1], buf, sizeof buf)) > 0)
    b->received += (size_t)n;
  CHECK(n == 0);
  return 0;
}

static void test_write_all(void **s) {
  (void)s;
  bulk_ctx b = {0};
  assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, b.sv), 0);
  iof_io_context *io = new_io();
  launch(io, bulk_writer, &b);
  launch(io, bulk_reader, &b);
  run_all(io);
  assert_int_equal(iof_io_context_destroy(io), 0);
  assert_no_failures();
  assert_int_equal(b.received, 1u << 20);
  iof_compat_close(b.sv[1]);
}

/* sendfile of 4 MiB into a socket whose reader starts late: the fiber
 * waits for room until every byte went (as a blocking sendfile), while
 * other fibers run. recvmmsg waits for the first datagram, which a
 * sendmmsg of 3 sends later. */
typedef struct sendfile_ctx {
  int sv[2];
  int file;
  off_t off;
  ssize_t sent;
  size_t received;
  int dg[2];
  int got_msgs, sent_msgs;
  char first[8];
} sendfile_ctx;

#define SENDFILE_BYTES (4u << 20)

static int sf_sender(void *arg) {
  sendfile_ctx *c = arg;
  c->sent = iof_compat_sendfile(c->sv[0], c->file, &c->off, SENDFILE_BYTES);
  iof_compat_close(c->sv[0]);
  return 0;
}

static int sf_receiver(void *arg) {
  sendfile_ctx *c = arg;
  iof_sleep_for(30 * MS); /* the sender fills the socket and waits */
  char buf[8192];
  ssize_t n;
  while ((n = iof_compat_read(c->sv[1], buf, sizeof buf)) > 0)
    c->received += (size_t)n;
  CHECK(n == 0);
  return 0;
}

static int mm_receiver(void *arg) {
  sendfile_ctx *c = arg;
  char b[3][8];
  struct iovec v[3];
  struct mmsghdr m[3];
  memset(m, 0, sizeof m);
  for (int i = 0; i < 3; i++) {
    v[i] = (struct iovec){b[i], sizeof b[i]};
    m[i].msg_hdr.msg_iov = &v[i];
    m[i].msg_hdr.msg_iovlen = 1;
  }
  c->got_msgs = iof_compat_recvmmsg(c->dg[1], m, 3, 0, NULL);
  if (c->got_msgs > 0) memcpy(c->first, b[0], m[0].msg_len);
  return 0;
}

static int mm_sender(void *arg) {
  sendfile_ctx *c = arg;
  iof_sleep_for(20 * MS); /* the receiver waits first */
  char *words[3] = {"one", "two", "three"};
  struct iovec v[3];
  struct mmsghdr m[3];
  memset(m, 0, sizeof m);
  for (int i = 0; i < 3; i++) {
    v[i] = (struct iovec){words[i], strlen(words[i]) + 1};
    m[i].msg_hdr.msg_iov = &v[i];
    m[i].msg_hdr.msg_iovlen = 1;
  }
  c->sent_msgs = iof_compat_sendmmsg(c->dg[0], m, 3, 0);
  return 0;
}

static void test_sendfile_and_mmsg(void **s) {
  (void)s;
  sendfile_ctx c = {0};
  char path[] = "/tmp/iof_sendfile_XXXXXX";
  c.file = mkstemp(path);
  assert_true(c.file >= 0);
  unlink(path);
  assert_int_equal(ftruncate(c.file, SENDFILE_BYTES), 0);
  assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, c.sv), 0);
  assert_int_equal(socketpair(AF_UNIX, SOCK_DGRAM, 0, c.dg), 0);
  iof_io_context *io = new_io();
  launch(io, sf_sender, &c);
  launch(io, sf_receiver, &c);
  launch(io, mm_receiver, &c);
  launch(io, mm_sender, &c);
  run_all(io);
  assert_int_equal(iof_io_context_destroy(io), 0);
  assert_no_failures();
  assert_int_equal(c.sent, SENDFILE_BYTES);
  assert_int_equal(c.off, SENDFILE_BYTES);
  assert_int_equal(c.received, SENDFILE_BYTES);
  assert_int_equal(c.sent_msgs, 3);
  assert_true(c.got_msgs >= 1);
  assert_string_equal(c.first, "one");
  iof_compat_close(c.sv[1]);
  iof_compat_close(c.dg[0]);
  iof_compat_close(c.dg[1]);
  close(c.file);
}

/* splice waits for its input (a socket written late), then tee copies the
 * pipe without consuming it; vmsplice and splice into a full pipe wait for
 * room while a drainer fiber runs; SPLICE_F_NONBLOCK still says EAGAIN. */
typedef struct splice_ctx {
  int sv[2], b[2], t[2], w[2];
  ssize_t spliced, teed, vms, full_splice, nb;
  int nb_err;
  char from_t[8], from_b[8];
  size_t drained;
} splice_ctx;

#define PIPE_ROOM 4096

static int sp_writer(void *arg) {
  splice_ctx *c = arg;
  iof_sleep_for(20 * MS); /* the splicer waits for input first */
  CHECK(iof_compat_write(c->sv[0], "hello", 5) == 5);
  iof_sleep_for(60 * MS); /* the full-pipe splice below finds input */
  CHECK(iof_compat_write(c->sv[0], "again", 5) == 5);
  return 0;
}

static int sp_splicer(void *arg) {
  splice_ctx *c = arg;
  c->nb =
      iof_compat_splice(c->sv[1], NULL, c->b[1], NULL, 64, SPLICE_F_NONBLOCK);
  c->nb_err = errno;
  c->spliced = iof_compat_splice(c->sv[1], NULL, c->b[1], NULL, 64, 0);
  c->teed = iof_compat_tee(c->b[0], c->t[1], 64, 0);
  CHECK(iof_compat_read(c->t[0], c->from_t, 5) == 5);
  CHECK(iof_compat_read(c->b[0], c->from_b, 5) == 5);
  /* Into a full pipe: vmsplice, then splice, each wait for the drainer. */
  char fill[PIPE_ROOM];
  memset(fill, 'f', sizeof fill);
  CHECK(iof_compat_write(c->w[1], fill, sizeof fill) == PIPE_ROOM);
  struct iovec v = {fill, 100};
  c->vms = iof_compat_vmsplice(c->w[1], &v, 1, 0);
  CHECK(iof_compat_write(c->w[1], fill, PIPE_ROOM - 100) == PIPE_ROOM - 100);
  c->full_splice = iof_compat_splice(c->sv[1], NULL, c->w[1], NULL, 64, 0);
  iof_compat_close(c->w[1]);
  return 0;
}

static int sp_drainer(void *arg) {
  splice_ctx *c = arg;
  char buf[PIPE_ROOM];
  ssize_t n;
  iof_sleep_for(40 * MS); /* the vmsplice waits for room first */
  while ((n = iof_compat_read(c->w[0], buf, sizeof buf)) > 0) {
    c->drained += (size_t)n;
    iof_sleep_for(30 * MS); /* and again for the splice */
  }
  return 0;
}

static void test_splice_tee_vmsplice(void **s) {
  (void)s;
  splice_ctx c;
  memset(&c, 0, sizeof c);
  assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, c.sv), 0);
  assert_int_equal(iof_compat_pipe(c.b), 0);
  assert_int_equal(iof_compat_pipe(c.t), 0);
  assert_int_equal(iof_compat_pipe(c.w), 0);
  assert_int_equal(fcntl(c.w[1], F_SETPIPE_SZ, PIPE_ROOM), PIPE_ROOM);
  iof_io_context *io = new_io();
  launch(io, sp_writer, &c);
  launch(io, sp_splicer, &c);
  launch(io, sp_drainer, &c);
  run_all(io);
  assert_int_equal(iof_io_context_destroy(io), 0);
  assert_no_failures();
  assert_int_equal(c.nb, -1);
  assert_int_equal(c.nb_err, EAGAIN);
  assert_int_equal(c.spliced, 5);
  assert_int_equal(c.teed, 5);
  assert_memory_equal(c.from_t, "hello", 5);
  assert_memory_equal(c.from_b, "hello", 5);
  assert_int_equal(c.vms, 100);
  assert_int_equal(c.full_splice, 5);
  assert_int_equal(c.drained, 2 * PIPE_ROOM + 5);
  int fds[] = {c.sv[0], c.sv[1], c.b[0], c.b[1], c.t[0], c.t[1], c.w[0]};
  for (size_t i = 0; i < sizeof fds / sizeof fds[0]; i++)
    iof_compat_close(fds[i]);
}

/* A non-blocking user's connect keeps EINPROGRESS + SO_ERROR. */
static int sc_nonblocking_connect(void *arg) {
  int port = *(int *)arg;
  int c = iof_compat_socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
  struct sockaddr_in a = loopback(port);
  int r = iof_compat_connect(c, (struct sockaddr *)&a, sizeof a);
  CHECK(r == 0 || errno == EINPROGRESS);
  struct pollfd p = {c, POLLOUT, 0};
  CHECK(iof_compat_poll(&p, 1, 5000) == 1);
  int err = -1;
  socklen_t el = sizeof err;
  CHECK(iof_compat_getsockopt(c, SOL_SOCKET, SO_ERROR, &err, &el) == 0 &&
        err == 0);
  iof_compat_close(c);
  return 0;
}

static void test_nonblocking_connect(void **s) {
  (void)s;
  int port;
  int l = listen_tcp(&port, 8);
  both_ways(sc_nonblocking_connect, &port);
  close(l);
}

/* The waiter's io_context runs on its own thread; the close comes from
 * the main thread. */
typedef struct xclose_ctx {
  iof_io_context *io;
  close_ctx c;
} xclose_ctx;

static void *run_io_thread(void *arg) {
  xclose_ctx *x = arg;
  iof_io_context_run(x->io);
  return NULL;
}

static void test_close_from_thread(void **s) {
  (void)s;
  int p[2];
  assert_int_equal(pipe(p), 0);
  xclose_ctx x = {0};
  x.c.fd = p[0];
  x.io = new_io();
  launch(x.io, blocked_reader, &x.c);
  pthread_t t;
  assert_int_equal(pthread_create(&t, NULL, run_io_thread, &x), 0);
  assert_true(wait_flag(&x.c.waiting));
  sleep_ms(50); /* into the wait, most likely; either way EBADF */
  assert_int_equal(iof_compat_close(p[0]), 0);
  assert_int_equal(pthread_join(t, NULL), 0);
  assert_int_equal(iof_io_context_destroy(x.io), 0);
  assert_int_equal(x.c.got, -1);
  assert_int_equal(x.c.err, EBADF);
  close(p[1]);
}

/* A fiber on a thread pool (no io_context of its own) blocks in read on
 * the background io_context compat keeps for it: data from another thread
 * wakes it, and a close from a plain thread wakes it with EBADF. */
typedef struct pool_read {
  close_ctx c;
  ssize_t first;
  char buf[4];
  atomic_int done;
} pool_read;

static int pool_reader(void *arg) {
  pool_read *pr = arg;
  pr->first = iof_compat_read(pr->c.fd, pr->buf, sizeof pr->buf);
  blocked_reader(&pr->c);
  atomic_store(&pr->done, 1);
  return 0;
}

static void test_pool_fiber_read_and_close(void **s) {
  (void)s;
  int p[2];
  assert_int_equal(pipe(p), 0);
  pool_read pr = {0};
  pr.c.fd = p[0];
  pr.c.got = -2;
  iof_thread_pool *pool = iof_thread_pool_create(1);
  assert_non_null(pool);
  assert_int_equal(iof_launch(iof_thread_pool_executor(pool), pool_reader, &pr),
                   0);
  sleep_ms(30); /* the first read is waiting by now, most likely */
  assert_int_equal(write(p[1], "ab", 2), 2);
  assert_true(wait_flag(&pr.c.waiting)); /* the first read returned */
  sleep_ms(50);                          /* into the second wait */
  assert_int_equal(iof_compat_close(p[0]), 0);
  assert_true(wait_flag_ms(&pr.done, 5000));
  assert_int_equal(iof_thread_pool_destroy(pool), 0);
  assert_no_failures();
  assert_int_equal(pr.first, 2);
  assert_memory_equal(pr.buf, "ab", 2);
  assert_int_equal(pr.c.got, -1);
  assert_int_equal(pr.c.err, EBADF);
  close(p[1]);
}

/* An error-queue read never blocks in the kernel: compat must not wait
 * for readability either (socat's poll loop spun on it, a HUP or queued
 * data making the fd readable while the error queue stayed empty). */
static int sc_errqueue(void *arg) {
  (void)arg;
  int u = iof_compat_socket(AF_INET, SOCK_DGRAM, 0);
  CHECK(u >= 0);
  struct sockaddr_in a = loopback(0);
  CHECK(bind(u, (struct sockaddr *)&a, sizeof a) == 0);
  socklen_t al = sizeof a;
  CHECK(getsockname(u, (struct sockaddr *)&a, &al) == 0);
  char buf[16];
  struct iovec iov = {buf, sizeof buf};
  struct msghdr m;
  memset(&m, 0, sizeof m);
  m.msg_iov = &iov;
  m.msg_iovlen = 1;
  for (int ready = 0; ready < 2; ready++) { /* nothing queued, then data */
    if (ready)
      CHECK(iof_compat_sendto(u, "q", 1, 0, (struct sockaddr *)&a, al) == 1);
    uint64_t t0 = iof_test_now_ns();
    errno = 0;
    CHECK(iof_compat_recvmsg(u, &m, MSG_ERRQUEUE) == -1 && errno == EAGAIN);
    errno = 0;
    CHECK(iof_compat_recv(u, buf, sizeof buf, MSG_ERRQUEUE) == -1 &&
          errno == EAGAIN);
    CHECK(ms_since(t0) < 1000);
  }
  CHECK(iof_compat_recv(u, buf, sizeof buf, 0) == 1 && buf[0] == 'q');
  CHECK(iof_compat_close(u) == 0);
  return 0;
}

static void test_errqueue_never_waits(void **s) {
  (void)s;
  both_ways(sc_errqueue, NULL);
}

/* A plain thread's recv on a socket a fiber used (the runtime made it
 * non-blocking, compat emulates the blocking call): a handler ends it with
 * EINTR where the kernel would, i.e. one without SA_RESTART; after an
 * SA_RESTART one it goes on and gets the data. */
static int sv_eintr[2];
static void on_usr1(int sig) {
  (void)sig;
}

static int fiber_takes_socket(void *arg) {
  (void)arg;
  char c;
  CHECK(iof_compat_send(sv_eintr[1], "p", 1, 0) == 1);
  CHECK(iof_compat_recv(sv_eintr[0], &c, 1, 0) == 1);
  return 0;
}

typedef struct eintr_run {
  ssize_t r;
  int err;
  int64_t took_ns;
} eintr_run;

static void *plain_reader(void *arg) {
  eintr_run *e = arg;
  char c;
  int64_t t0 = iof_test_now_ns();
  errno = 0;
  e->r = iof_compat_recv(sv_eintr[0], &c, 1, 0);
  e->err = errno;
  e->took_ns = iof_test_now_ns() - t0;
  return NULL;
}

static eintr_run read_with_signal(int sa_flags) {
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_usr1;
  sa.sa_flags = sa_flags;
  assert_int_equal(iof_compat_sigaction(SIGUSR1, &sa, NULL), 0);
  eintr_run e = {0, 0, 0};
  pthread_t t;
  assert_int_equal(pthread_create(&t, NULL, plain_reader, &e), 0);
  usleep(100 * 1000);
  assert_int_equal(pthread_kill(t, SIGUSR1), 0);
  usleep(200 * 1000);
  if (sa_flags & SA_RESTART) assert_int_equal(write(sv_eintr[1], "d", 1), 1);
  assert_int_equal(pthread_join(t, NULL), 0);
  signal(SIGUSR1, SIG_DFL);
  return e;
}

static void test_plain_thread_eintr(void **s) {
  (void)s;
  assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, sv_eintr), 0);
  assert_int_equal(in_fiber(fiber_takes_socket, NULL), 0);
  assert_no_failures();
  eintr_run e = read_with_signal(0);
  assert_int_equal(e.r, -1);
  assert_int_equal(e.err, EINTR);
  assert_true(e.took_ns < 250 * MS);
  e = read_with_signal(SA_RESTART);
  assert_int_equal(e.r, 1);
  assert_true(e.took_ns >= 250 * MS);
  iof_compat_close(sv_eintr[0]);
  iof_compat_close(sv_eintr[1]);
}

/* An fd handed over in an SCM_RIGHTS message (to another process, or to
 * this one under a new number) shares its open file with ours: the
 * receiver must find it blocking, as the sender's program sees it, not
 * with the O_NONBLOCK the runtime set for its fibers (a receiver under
 * the hook took that for its own wish: its blocking read said EAGAIN at
 * once). A control buffer the kernel cannot read still gets EFAULT. */
typedef struct scm_ctx {
  int p[2], sv[2];
  ssize_t got;
  int got_err, passed_nb, received_nb, fault_err, mfault_err;
  char buf[8];
} scm_ctx;

static int scm_reader(void *arg) {
  scm_ctx *c = arg;
  /* scm_prime's read made the pipe's open file non-blocking. */
  int fl = fcntl(c->p[0], F_GETFL);
  c->passed_nb = fl >= 0 && (fl & O_NONBLOCK) != 0;
  char one = 'x';
  struct iovec io = {&one, 1};
  union {
    char buf[CMSG_SPACE(sizeof(int))];
    struct cmsghdr align;
  } cb;
  memset(&cb, 0, sizeof cb);
  struct msghdr m = {0};
  m.msg_iov = &io;
  m.msg_iovlen = 1;
  m.msg_control = cb.buf;
  m.msg_controllen = sizeof cb.buf;
  struct cmsghdr *h = CMSG_FIRSTHDR(&m);
  h->cmsg_level = SOL_SOCKET;
  h->cmsg_type = SCM_RIGHTS;
  h->cmsg_len = CMSG_LEN(sizeof(int));
  memcpy(CMSG_DATA(h), &c->p[0], sizeof(int));
  CHECK(iof_compat_sendmsg(c->sv[0], &m, 0) == 1);
  CHECK(iof_compat_close(c->p[0]) == 0);
  memset(&cb, 0, sizeof cb);
  m.msg_controllen = sizeof cb.buf;
  CHECK(iof_compat_recvmsg(c->sv[1], &m, MSG_CMSG_CLOEXEC) == 1);
  h = CMSG_FIRSTHDR(&m);
  CHECK(h && h->cmsg_type == SCM_RIGHTS);
  int fd = -1;
  if (h) memcpy(&fd, CMSG_DATA(h), sizeof fd);
  fl = fcntl(fd, F_GETFL);
  c->received_nb = fl >= 0 && (fl & O_NONBLOCK) != 0;
  /* The writer sends later: the read waits for it. */
  errno = 0;
  c->got = iof_compat_read(fd, c->buf, sizeof c->buf);
  c->got_err = errno;
  CHECK(iof_compat_close(fd) == 0);
  /* A wild control pointer: the kernel's EFAULT, no crash of ours. */
  m.msg_control = (void *)8;
  m.msg_controllen = sizeof cb.buf;
  errno = 0;
  CHECK(iof_compat_sendmsg(c->sv[0], &m, 0) == -1);
  c->fault_err = errno;
  /* sendmmsg too: the pipe's write end, which scm_writer's write made
   * non-blocking; then a wild vector gets the kernel's EFAULT. */
  fl = fcntl(c->p[1], F_GETFL);
  c->passed_nb &= fl >= 0 && (fl & O_NONBLOCK) != 0;
  memset(&cb, 0, sizeof cb);
  m.msg_control = cb.buf;
  m.msg_controllen = sizeof cb.buf;
  h = CMSG_FIRSTHDR(&m);
  h->cmsg_level = SOL_SOCKET;
  h->cmsg_type = SCM_RIGHTS;
  h->cmsg_len = CMSG_LEN(sizeof(int));
  memcpy(CMSG_DATA(h), &c->p[1], sizeof(int));
  struct mmsghdr mm = {.msg_hdr = m};
  CHECK(iof_compat_sendmmsg(c->sv[0], &mm, 1, 0) == 1);
  memset(&cb, 0, sizeof cb);
  m.msg_controllen = sizeof cb.buf;
  CHECK(iof_compat_recvmsg(c->sv[1], &m, MSG_CMSG_CLOEXEC) == 1);
  h = CMSG_FIRSTHDR(&m);
  CHECK(h && h->cmsg_type == SCM_RIGHTS);
  fd = -1;
  if (h) memcpy(&fd, CMSG_DATA(h), sizeof fd);
  fl = fcntl(fd, F_GETFL);
  c->received_nb |= fl >= 0 && (fl & O_NONBLOCK) != 0;
  CHECK(iof_compat_close(fd) == 0);
  errno = 0;
  CHECK(iof_compat_sendmmsg(c->sv[0], (struct mmsghdr *)8, 1, 0) == -1);
  c->mfault_err = errno;
  return 0;
}

/* A fiber's first read of the pipe: the runtime learns the fd and makes
 * its open file non-blocking for the waits. */
static int scm_prime(void *arg) {
  scm_ctx *c = arg;
  char b[2];
  CHECK(iof_compat_write(c->p[1], "p", 1) == 1);
  CHECK(iof_compat_read(c->p[0], b, 1) == 1);
  return 0;
}

static int scm_writer(void *arg) {
  scm_ctx *c = arg;
  iof_sleep_for(30 * MS);
  CHECK(iof_compat_write(c->p[1], "hi", 2) == 2);
  return 0;
}

/* The scenario of test_scm_rights_pass_blocking; the checks are the
 * caller's. */
static void scm_run(scm_ctx *c) {
  memset(c, 0, sizeof *c);
  /* Without the fix the reader gives up and closes: the writer's write
   * must fail the test, not kill it. */
  void (*old_pipe)(int) = signal(SIGPIPE, SIG_IGN);
  iof_io_context *io = new_io();
  assert_int_equal(iof_compat_socketpair(AF_UNIX, SOCK_STREAM, 0, c->sv), 0);
  assert_int_equal(iof_compat_pipe(c->p), 0);
  /* A fiber's wait on the read end first (nothing there yet). */
  launch(io, scm_prime, c);
  run_all(io);
  launch(io, scm_reader, c);
  launch(io, scm_writer, c);
  run_all(io);
  assert_int_equal(iof_io_context_destroy(io), 0);
  signal(SIGPIPE, old_pipe);
}

static bool scm_right(const scm_ctx *c) {
  return c->passed_nb && !c->received_nb && c->got == 2 &&
         memcmp(c->buf, "hi", 2) == 0 && c->fault_err == EFAULT &&
         c->mfault_err == EFAULT;
}

static void scm_close(scm_ctx *c) {
  iof_compat_close(c->p[1]);
  iof_compat_close(c->sv[0]);
  iof_compat_close(c->sv[1]);
}

static void test_scm_rights_pass_blocking(void **s) {
  (void)s;
  scm_ctx c;
  scm_run(&c);
  assert_no_failures();
  assert_true(c.passed_nb); /* the runtime's mode before the hand-over */
  assert_false(c.received_nb);
  assert_int_equal(c.got, 2);
  assert_memory_equal(c.buf, "hi", 2);
  assert_int_equal(c.fault_err, EFAULT);
  assert_int_equal(c.mfault_err, EFAULT);
  assert_true(scm_right(&c));
  scm_close(&c);
}

/* The same in a sandbox that refuses process_vm_readv (seccomp, as some
 * container profiles do): compat reads the control data another way, and
 * the passed fds still arrive blocking. In a child: a filter stays. */
static void test_scm_rights_pass_blocking_sandboxed(void **s) {
  (void)s;
  pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) {
    struct sock_filter f[] = {
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_process_vm_readv, 0, 1),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | EPERM),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW)};
    struct sock_fprog prog = {4, f};
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 ||
        prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog) != 0)
      _exit(77);
    struct iovec a = {&prog, 1}, b = {&prog, 1};
    if (process_vm_readv(getpid(), &a, 1, &b, 1, 0) >= 0 || errno != EPERM)
      _exit(3); /* the filter is not in force */
    scm_ctx c;
    scm_run(&c);
    _exit(scm_right(&c) ? 0 : 1);
  }
  int st = 0;
  assert_int_equal(waitpid(pid, &st, 0), pid);
  assert_true(WIFEXITED(st));
  if (WEXITSTATUS(st) == 77) skip();
  assert_int_equal(WEXITSTATUS(st), 0);
}

/* close() of a socket with SO_LINGER on and a time waits in the kernel
 * until the peer acknowledged everything or the time ran out, O_NONBLOCK
 * or not: with a peer that reads nothing, a fiber's close used to hold
 * its whole thread for the linger time. Now only the fiber waits (the
 * close runs on a resolver thread): the kernel's wait is kept, the other
 * fibers tick meanwhile. The linger is set through compat on one socket,
 * and on the listening socket for the other (accept copies it, as Linux
 * does); a socket with linger 0 (a reset) closes at once. */
typedef struct linger_ctx {
  int port, listener;
  atomic_int closing; /* 1 + the close in progress, 0 none */
  atomic_bool done;
  atomic_int ticks[4]; /* while close k was in progress */
  int64_t close_ms[4];
  int close_r[4];
} linger_ctx;

/* A connection to ctx's listener whose accepted side s is full: 0 or -1. */
static int stuck_pair(linger_ctx *x, int *c, int *s) {
  struct sockaddr_in a = loopback(x->port);
  *c = iof_compat_socket(AF_INET, SOCK_STREAM, 0);
  CHECK(*c >= 0 &&
        iof_compat_connect(*c, (struct sockaddr *)&a, sizeof a) == 0);
  *s = iof_compat_accept(x->listener, NULL, NULL);
  CHECK(*s >= 0);
  static char big[65536];
  while (iof_compat_send(*s, big, sizeof big, MSG_DONTWAIT | MSG_NOSIGNAL) >
         0) {
  }
  return *s >= 0 ? 0 : -1;
}

static int linger_closer(void *arg) {
  linger_ctx *x = arg;
  struct linger lg = {1, 1};
  int c0, s0, c1, s1;
  CHECK(stuck_pair(x, &c0, &s0) == 0);
  CHECK(iof_compat_setsockopt(s0, SOL_SOCKET, SO_LINGER, &lg, sizeof lg) == 0);
  CHECK(iof_compat_setsockopt(x->listener, SOL_SOCKET, SO_LINGER, &lg,
                              sizeof lg) == 0);
  CHECK(stuck_pair(x, &c1, &s1) == 0);
  /* Two more, closed by dup2 and dup3 onto their numbers. */
  int c3, s3, c4, s4;
  CHECK(stuck_pair(x, &c3, &s3) == 0);
  CHECK(stuck_pair(x, &c4, &s4) == 0);
  int null = open("/dev/null", O_RDWR | O_CLOEXEC);
  CHECK(null >= 0);
  int sv[4] = {s0, s1, s3, s4};
  for (int k = 0; k < 4; k++) {
    atomic_store(&x->closing, 1 + k);
    uint64_t t0 = iof_test_now_ns();
    errno = 4242;
    if (k < 2)
      x->close_r[k] = iof_compat_close(sv[k]);
    else if (k == 2)
      x->close_r[k] = iof_compat_dup2(null, sv[k]) == sv[k] ? 0 : -1;
    else
      x->close_r[k] = iof_compat_dup3(null, sv[k], O_CLOEXEC) == sv[k] ? 0 : -1;
    x->close_ms[k] = ms_since(t0);
    CHECK(errno == 4242);
    atomic_store(&x->closing, 0);
  }
  /* The dups left /dev/null on those numbers, and no spare behind. */
  struct stat nst, st;
  CHECK(fstat(null, &nst) == 0);
  for (int k = 2; k < 4; k++) {
    CHECK(fstat(sv[k], &st) == 0 && st.st_rdev == nst.st_rdev &&
          S_ISCHR(st.st_mode));
    iof_compat_close(sv[k]);
  }
  iof_compat_close(null);
  iof_compat_close(c3);
  iof_compat_close(c4);
  /* linger {1, 0}: a reset, no wait. */
  int c2, s2;
  lg.l_linger = 0;
  CHECK(iof_compat_setsockopt(x->listener, SOL_SOCKET, SO_LINGER, &lg,
                              sizeof lg) == 0);
  CHECK(stuck_pair(x, &c2, &s2) == 0);
  uint64_t t0 = iof_test_now_ns();
  CHECK(iof_compat_close(s2) == 0 && ms_since(t0) < 500);
  iof_compat_close(c0);
  iof_compat_close(c1);
  iof_compat_close(c2);
  atomic_store(&x->done, true);
  return 0;
}

static int linger_ticker(void *arg) {
  linger_ctx *x = arg;
  while (!atomic_load(&x->done)) {
    iof_compat_usleep(5000);
    int k = atomic_load(&x->closing);
    if (k) atomic_fetch_add(&x->ticks[k - 1], 1);
  }
  return 0;
}

static void test_close_lingering(void **s) {
  (void)s;
  int fds_before = iof_test_open_fds();
  linger_ctx x = {0};
  x.listener = listen_tcp(&x.port, 8);
  iof_io_context *io = new_io();
  launch(io, linger_closer, &x);
  launch(io, linger_ticker, &x);
  run_all(io);
  assert_int_equal(iof_io_context_destroy(io), 0);
  assert_no_failures();
  /* Each close took its second; a tick per 5 ms meanwhile, far more
   * than none. */
  for (int k = 0; k < 4; k++) {
    assert_int_equal(x.close_r[k], 0);
    assert_true(x.close_ms[k] >= 800 && x.close_ms[k] < 5000);
    assert_true(atomic_load(&x.ticks[k]) >= 50);
  }
  iof_compat_close(x.listener);
  assert_int_equal(iof_test_open_fds(), fds_before); /* no spare left open */
}

#define T(f) cmocka_unit_test_setup_teardown(f, setup, teardown)

int main(void) {
  const struct CMUnitTest tests[] = {
      T(test_pipe_basics),
      T(test_user_nonblocking),
      T(test_foreign_nonblocking),
      T(test_tcp),
      T(test_rcvtimeo),
      T(test_read_after_short_read),
      T(test_file),
      T(test_accept_dup_sndtimeo),
      T(test_accept_inherits_timeouts),
      T(test_close_lingering),
      T(test_read_blocks_only_fiber),
      T(test_close_while_waiting),
      T(test_dup2_while_waiting),
      T(test_echo_between_fibers),
      T(test_write_all),
      T(test_sendfile_and_mmsg),
      T(test_splice_tee_vmsplice),
      T(test_nonblocking_connect),
      T(test_close_from_thread),
      T(test_pool_fiber_read_and_close),
      T(test_errqueue_never_waits),
      T(test_plain_thread_eintr),
      T(test_scm_rights_pass_blocking),
      T(test_scm_rights_pass_blocking_sandboxed),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
