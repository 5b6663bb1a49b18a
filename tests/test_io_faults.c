/* Bad input and faults on sockets:
 * closed sockets and foreign descriptors (-EBADF), double close, a read on
 * a listener (-EINVAL), a NULL buffer (-EFAULT), peer reset
 * (-ECONNRESET), half close, EMFILE on accept (returned, and accept works
 * again once descriptors are free), connection refused, a fast writer
 * against a slow reader (the writer blocks, memory stays bounded), no
 * SIGPIPE ever (-EPIPE instead, sockets and adopted pipes), calls outside
 * a fiber (-EPERM), zero-length reads and writes, close from a foreign
 * thread while the context runs (-EPERM).
 *
 * IOF_TEST_THREADED */
#include "test_support.h"
#include "io_test.h"

#include <iofiber/iofiber.h>

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define MS 1000000LL

/* cmocka setup: the shared watchdog, with SIGPIPE at its default. */
static int arm_watchdog(void **state) {
  (void)state;
  signal(SIGPIPE, SIG_DFL); /* a SIGPIPE would kill the program */
  iof_test_watchdog_arm(60);
  return 0;
}

/* cmocka teardown: cancels the watchdog. */
static int disarm_watchdog(void **state) {
  (void)state;
  alarm(0);
  return 0;
}

/* ---- closed and foreign descriptors ------------------------------------ */

typedef struct closed {
  iof_io_context *io;
  iof_socket *s, *lst, *udp;
  long r[16];
} closed;

static int closed_fn(void *arg) {
  closed *c = arg;
  char buf[8] = {0};
  struct iovec iov = {buf, sizeof buf};
  iof_socket *out = NULL;
  struct sockaddr_in to = {0};
  to.sin_family = AF_INET;
  to.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  to.sin_port = htons(9);
  int i = 0;
  c->r[i++] = iof_read_some(c->s, buf, sizeof buf);
  c->r[i++] = iof_write_some(c->s, buf, sizeof buf);
  c->r[i++] = iof_read(c->s, buf, sizeof buf);
  c->r[i++] = iof_write(c->s, buf, sizeof buf);
  c->r[i++] = iof_readv(c->s, &iov, 1);
  c->r[i++] = iof_writev(c->s, &iov, 1);
  c->r[i++] = iof_read_some(c->s, buf, 0); /* even for zero bytes */
  c->r[i++] = iof_accept(c->lst, &out, NULL, NULL);
  c->r[i++] = iof_recvfrom(c->udp, buf, sizeof buf, NULL, NULL);
  c->r[i++] = iof_sendto(c->udp, buf, 1, (struct sockaddr *)&to, sizeof to);
  return 0;
}

static void calls_on_a_closed_socket_are_ebadf(void **state) {
  (void)state;
  closed c = {0};
  c.io = iof_io_context_create();
  assert_non_null(c.io);
  int sv[2];
  assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
  assert_int_equal(iof_socket_adopt(c.io, sv[0], &c.s), 0);
  assert_int_equal(iof_tcp_listen(c.io, "127.0.0.1", "0", 0, 0, &c.lst), 0);
  assert_int_equal(iof_udp_bind(c.io, "127.0.0.1", "0", &c.udp), 0);
  assert_int_equal(iof_socket_close(c.s), 0);
  assert_int_equal(iof_socket_close(c.lst), 0);
  assert_int_equal(iof_socket_close(c.udp), 0);
  launch(c.io, closed_fn, &c);
  run_all(c.io);
  for (int i = 0; i < 10; i++)
    if (c.r[i] != -EBADF)
      fail_msg("call %d on a closed socket: %ld", i, c.r[i]);
  assert_int_equal(iof_socket_fd(c.s), -EBADF);
  assert_int_equal(iof_socket_shutdown(c.s, SHUT_WR), -EBADF);
  assert_int_equal(iof_socket_set_nodelay(c.s, true), -EBADF);
  assert_int_equal(iof_socket_set_keepalive(c.s, true), -EBADF);
  assert_int_equal(iof_socket_local_port(c.lst), -EBADF);
  struct sockaddr_storage ss;
  socklen_t sl = sizeof ss;
  assert_int_equal(iof_socket_local_addr(c.s, (struct sockaddr *)&ss, &sl),
                   -EBADF);
  close(sv[1]);
  assert_int_equal(iof_io_context_destroy(c.io), 0);
}

typedef struct foreign {
  iof_io_context *io;
  int r_read, r_write;
} foreign;

static int foreign_fn(void *arg) {
  foreign *f = arg;
  f->r_read = iof_wait_readable(f->io, 1000000, -1);
  f->r_write = iof_wait_writable(f->io, -1, 10 * MS);
  return 0;
}

static void foreign_descriptors_that_are_not_open_are_ebadf(void **state) {
  (void)state;
  iof_io_context *io = iof_io_context_create();
  assert_non_null(io);
  iof_socket *s = NULL;
  assert_int_equal(iof_socket_adopt(io, -1, &s), -EBADF);
  int p[2];
  assert_int_equal(pipe(p), 0);
  close(p[0]);
  close(p[1]);
  assert_int_equal(iof_socket_adopt(io, p[0], &s), -EBADF);
  assert_int_equal(iof_socket_adopt(NULL, 0, &s), -EINVAL);
  assert_int_equal(iof_socket_adopt(io, 0, NULL), -EINVAL);
  foreign f = {io, 0, 0};
  launch(io, foreign_fn, &f);
  run_all(io);
  assert_int_equal(f.r_read, -EBADF);
  assert_int_equal(f.r_write, -EBADF);
  assert_int_equal(iof_io_context_destroy(io), 0);
}

static void
double_close_is_harmless_and_never_closes_a_reused_fd(void **state) {
  (void)state;
  iof_io_context *io = iof_io_context_create();
  assert_non_null(io);
  int sv[2];
  assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
  iof_socket *s;
  assert_int_equal(iof_socket_adopt(io, sv[0], &s), 0);
  assert_int_equal(iof_socket_close(s), 0);
  /* The descriptor number is taken again by someone else... */
  int other = dup(sv[1]);
  assert_int_equal(other, sv[0]);
  /* ...and a second close leaves it alone. */
  assert_int_equal(iof_socket_close(s), 0);
  assert_true(fcntl(other, F_GETFD) >= 0);
  assert_int_equal(iof_socket_free(s), 0);
  assert_true(fcntl(other, F_GETFD) >= 0);
  assert_int_equal(iof_socket_close(NULL), -EINVAL);
  assert_int_equal(iof_socket_free(NULL), -EINVAL);
  close(other);
  close(sv[1]);
  assert_int_equal(iof_io_context_destroy(io), 0);
}

/* ---- wrong socket kind, bad buffers ------------------------------------- */

typedef struct misuse {
  iof_socket *lst, *s;
  long r[24];
} misuse;

static int misuse_fn(void *arg) {
  misuse *m = arg;
  char buf[8] = {0};
  struct iovec iov = {buf, sizeof buf};
  struct iovec null_iov = {NULL, 4};
  iof_socket *out = NULL;
  struct sockaddr_storage peer;
  int i = 0;
  /* A listener carries no bytes. */
  m->r[i++] = iof_read_some(m->lst, buf, sizeof buf);  /* 0 */
  m->r[i++] = iof_write_some(m->lst, buf, sizeof buf); /* 1 */
  m->r[i++] = iof_read(m->lst, buf, sizeof buf);       /* 2 */
  m->r[i++] = iof_readv(m->lst, &iov, 1);              /* 3 */
  /* Accept needs a listener and a length with the peer. */
  m->r[i++] = iof_accept(m->s, &out, NULL, NULL);                       /* 4 */
  m->r[i++] = iof_accept(m->lst, NULL, NULL, NULL);                     /* 5 */
  m->r[i++] = iof_accept(m->lst, &out, (struct sockaddr *)&peer, NULL); /* 6 */
  /* NULL buffers with a size. */
  m->r[i++] = iof_read_some(m->s, NULL, 4);   /* 7 */
  m->r[i++] = iof_write_some(m->s, NULL, 4);  /* 8 */
  m->r[i++] = iof_read(m->s, NULL, 4);        /* 9 */
  m->r[i++] = iof_write(m->s, NULL, 4);       /* 10 */
  m->r[i++] = iof_readv(m->s, &null_iov, 1);  /* 11 */
  m->r[i++] = iof_writev(m->s, &null_iov, 1); /* 12 */
  /* NULL sockets and bad vectors. */
  m->r[i++] = iof_read_some(NULL, buf, sizeof buf);  /* 13 */
  m->r[i++] = iof_write_some(NULL, buf, sizeof buf); /* 14 */
  m->r[i++] = iof_readv(m->s, NULL, 1);              /* 15 */
  m->r[i++] = iof_readv(m->s, &iov, 0);              /* 16 */
  m->r[i++] = iof_writev(m->s, &iov, IOV_MAX + 1);   /* 17 */
  m->r[i++] = iof_accept(NULL, &out, NULL, NULL);    /* 18 */
  return 0;
}

static void read_on_a_listener_is_einval_and_null_buffers_efault(void **state) {
  (void)state;
  iof_io_context *io = iof_io_context_create();
  assert_non_null(io);
  misuse m = {0};
  int sv[2];
  assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
  assert_int_equal(iof_socket_adopt(io, sv[0], &m.s), 0);
  assert_int_equal(iof_tcp_listen(io, "127.0.0.1", "0", 0, 0, &m.lst), 0);
  launch(io, misuse_fn, &m);
  run_all(io);
  static const long want[19] = {-EINVAL, -EINVAL, -EINVAL, -EINVAL, -EINVAL,
                                -EINVAL, -EINVAL, -EFAULT, -EFAULT, -EFAULT,
                                -EFAULT, -EFAULT, -EFAULT, -EINVAL, -EINVAL,
                                -EINVAL, -EINVAL, -EINVAL, -EINVAL};
  for (int i = 0; i < 19; i++)
    if (m.r[i] != want[i])
      fail_msg("misuse %d returned %ld, want %ld", i, m.r[i], want[i]);
  /* An adopted listener is a listener too. */
  int lfd = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in a = {0};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  assert_int_equal(bind(lfd, (struct sockaddr *)&a, sizeof a), 0);
  assert_int_equal(listen(lfd, 4), 0);
  iof_socket *al;
  assert_int_equal(iof_socket_adopt(io, lfd, &al), 0);
  misuse m2 = {0};
  m2.lst = al;
  m2.s = m.s;
  launch(io, misuse_fn, &m2);
  run_all(io);
  assert_int_equal(m2.r[0], -EINVAL);
  close(sv[1]);
  assert_int_equal(iof_io_context_destroy(io), 0);
}

typedef struct zero {
  iof_socket *s;
  long r[8];
  int other, other_at_return;
} zero;

static int zero_fn(void *arg) {
  zero *z = arg;
  char buf[4];
  struct iovec iov = {buf, 0};
  z->r[0] = iof_read_some(z->s, buf, 0);
  z->r[1] = iof_read_some(z->s, NULL, 0);
  z->r[2] = iof_read(z->s, buf, 0);
  z->r[3] = iof_write_some(z->s, buf, 0);
  z->r[4] = iof_write(z->s, NULL, 0);
  z->r[5] = iof_readv(z->s, &iov, 1);
  z->r[6] = iof_writev(z->s, &iov, 1);
  z->other_at_return = z->other; /* nothing waited */
  return 0;
}

static int set_other_fn(void *arg) {
  ((zero *)arg)->other = 1;
  return 0;
}

static void zero_length_reads_and_writes_return_0_at_once(void **state) {
  (void)state;
  iof_io_context *io = iof_io_context_create();
  assert_non_null(io);
  int sv[2];
  assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
  zero z = {0};
  assert_int_equal(iof_socket_adopt(io, sv[0], &z.s), 0);
  for (int i = 0; i < 8; i++) z.r[i] = 99;
  launch(io, zero_fn, &z);
  launch(io, set_other_fn, &z);
  run_all(io);
  for (int i = 0; i < 7; i++)
    if (z.r[i] != 0) fail_msg("zero-length call %d returned %ld", i, z.r[i]);
  assert_int_equal(z.other_at_return, 0);
  /* Nothing was sent. */
  char x;
  assert_int_equal(recv(sv[1], &x, 1, MSG_DONTWAIT), -1);
  assert_int_equal(errno, EAGAIN);
  close(sv[1]);
  assert_int_equal(iof_io_context_destroy(io), 0);
}

/* ---- peer reset, half close, refused ------------------------------------ */

typedef struct reset {
  iof_socket *s;
  int peer;
  long r_read, r_write;
} reset;

static int reset_reader_fn(void *arg) {
  reset *rs = arg;
  char buf[16];
  rs->r_read = iof_read_some(rs->s, buf, sizeof buf);
  return 0;
}

static int reset_peer_fn(void *arg) {
  reset *rs = arg;
  iof_sleep_for(10 * MS); /* the reader is blocked */
  struct linger lg = {1, 0};
  setsockopt(rs->peer, SOL_SOCKET, SO_LINGER, &lg, sizeof lg);
  close(rs->peer); /* RST */
  return 0;
}

static void peer_reset_gives_econnreset(void **state) {
  (void)state;
  iof_io_context *io = iof_io_context_create();
  assert_non_null(io);
  int fds[2];
  raw_tcp_pair(fds);
  reset rs = {0};
  assert_int_equal(iof_socket_adopt(io, fds[0], &rs.s), 0);
  rs.peer = fds[1];
  launch(io, reset_reader_fn, &rs);
  launch(io, reset_peer_fn, &rs);
  run_all(io);
  assert_int_equal(rs.r_read, -ECONNRESET);
  assert_int_equal(iof_io_context_destroy(io), 0);
}

typedef struct half {
  iof_socket *a, *b;
  long a_wrote, b_got, b_eof, b_wrote, a_got, a_eof;
  char abuf[16], bbuf[16];
} half;

static int half_a_fn(void *arg) {
  half *h = arg;
  h->a_wrote = iof_write(h->a, "req", 3);
  iof_socket_shutdown(h->a, SHUT_WR); /* done sending, still reading */
  h->a_got = iof_read(h->a, h->abuf, 5);
  h->a_eof = iof_read_some(h->a, h->abuf + 5, 1);
  return 0;
}

static int half_b_fn(void *arg) {
  half *h = arg;
  h->b_got = iof_read(h->b, h->bbuf, 3);
  h->b_eof = iof_read_some(h->b, h->bbuf + 3, 1); /* the half close */
  h->b_wrote = iof_write(h->b, "reply", 5);       /* can still write */
  iof_socket_close(h->b);
  return 0;
}

static void
half_close_gives_end_of_stream_and_the_reply_still_flows(void **state) {
  (void)state;
  iof_io_context *io = iof_io_context_create();
  assert_non_null(io);
  int fds[2];
  raw_tcp_pair(fds);
  half h = {0};
  assert_int_equal(iof_socket_adopt(io, fds[0], &h.a), 0);
  assert_int_equal(iof_socket_adopt(io, fds[1], &h.b), 0);
  launch(io, half_b_fn, &h);
  launch(io, half_a_fn, &h);
  run_all(io);
  assert_int_equal(h.a_wrote, 3);
  assert_int_equal(h.b_got, 3);
  assert_memory_equal(h.bbuf, "req", 3);
  assert_int_equal(h.b_eof, 0);
  assert_int_equal(h.b_wrote, 5);
  assert_int_equal(h.a_got, 5);
  assert_memory_equal(h.abuf, "reply", 5);
  assert_int_equal(h.a_eof, 0);
  assert_int_equal(iof_io_context_destroy(io), 0);
}

typedef struct refused {
  iof_io_context *io;
  struct sockaddr_in addr;
  int r_addr, r_host;
} refused;

static int refused_fn(void *arg) {
  refused *rf = arg;
  iof_socket *s = NULL;
  rf->r_addr = iof_tcp_connect_addr(rf->io, (struct sockaddr *)&rf->addr,
                                    sizeof rf->addr, &s);
  char port[16];
  snprintf(port, sizeof port, "%d", ntohs(rf->addr.sin_port));
  rf->r_host = iof_tcp_connect(rf->io, "127.0.0.1", port, &s);
  return 0;
}

static void connect_to_a_closed_port_is_refused(void **state) {
  (void)state;
  refused rf = {0};
  rf.io = iof_io_context_create();
  assert_non_null(rf.io);
  /* A port bound but not listening: nobody else can take it meanwhile. */
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  rf.addr.sin_family = AF_INET;
  rf.addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  assert_int_equal(bind(fd, (struct sockaddr *)&rf.addr, sizeof rf.addr), 0);
  socklen_t al = sizeof rf.addr;
  assert_int_equal(getsockname(fd, (struct sockaddr *)&rf.addr, &al), 0);
  launch(rf.io, refused_fn, &rf);
  run_all(rf.io);
  assert_int_equal(rf.r_addr, -ECONNREFUSED);
  assert_int_equal(rf.r_host, -ECONNREFUSED);
  close(fd);
  assert_int_equal(iof_io_context_destroy(rf.io), 0);
}

/* ---- EMFILE on accept -------------------------------------------------- */

typedef struct emfile {
  iof_socket *lst;
  int r;
  iof_socket *got;
} emfile;

static int emfile_accept_fn(void *arg) {
  emfile *e = arg;
  e->got = NULL;
  e->r = iof_accept(e->lst, &e->got, NULL, NULL);
  return 0;
}

static void emfile_on_accept_is_returned_and_accept_recovers(void **state) {
  (void)state;
  iof_io_context *io = iof_io_context_create();
  assert_non_null(io);
  emfile e = {0};
  assert_int_equal(iof_tcp_listen(io, "127.0.0.1", "0", 0, 0, &e.lst), 0);
  struct sockaddr_in a;
  socklen_t al = sizeof a;
  assert_int_equal(iof_socket_local_addr(e.lst, (struct sockaddr *)&a, &al), 0);
  /* A connection waits in the backlog. */
  int c = socket(AF_INET, SOCK_STREAM, 0);
  assert_int_equal(connect(c, (struct sockaddr *)&a, sizeof a), 0);
  /* No descriptor left: lower the soft limit, fill what remains. */
  struct rlimit old, low;
  assert_int_equal(getrlimit(RLIMIT_NOFILE, &old), 0);
  int top = dup(c);
  assert_true(top >= 0);
  close(top);
  low = old;
  low.rlim_cur = (rlim_t)top + 16;
  assert_int_equal(setrlimit(RLIMIT_NOFILE, &low), 0);
  int fill[64], nfill = 0;
  while (nfill < 64) {
    int d = dup(c);
    if (d < 0) {
      assert_int_equal(errno, EMFILE);
      break;
    }
    fill[nfill++] = d;
  }
  assert_true(nfill < 64);
  launch(io, emfile_accept_fn, &e);
  run_all(io);
  int r_full = e.r;
  /* Free the descriptors again and restore the limit. */
  for (int i = 0; i < nfill; i++) close(fill[i]);
  assert_int_equal(setrlimit(RLIMIT_NOFILE, &old), 0);
  assert_int_equal(r_full, -EMFILE);
  assert_null(e.got);
  /* The connection is still there to accept. */
  launch(io, emfile_accept_fn, &e);
  run_all(io);
  assert_int_equal(e.r, 0);
  assert_non_null(e.got);
  assert_int_equal(iof_socket_free(e.got), 0);
  close(c);
  assert_int_equal(iof_io_context_destroy(io), 0);
}

/* ---- a fast writer against a slow reader -------------------------------- */

#define TOTAL (100ull << 20)
#define CHUNK (256u << 10)

typedef struct slow {
  iof_socket *w, *r;
  unsigned char *out; /* CHUNK bytes, pattern by offset modulo CHUNK */
  unsigned char *in;
  unsigned long long written, read;
  size_t rss0, rss_max;
  unsigned long long max_in_flight;
  long write_r;
  bool data_ok;
  int writer_waits; /* write_some calls that took less than asked */
} slow;

static int slow_writer_fn(void *arg) {
  slow *s = arg;
  while (s->written < TOTAL) {
    size_t off = (size_t)(s->written % CHUNK);
    size_t len = CHUNK - off;
    if (len > TOTAL - s->written) len = (size_t)(TOTAL - s->written);
    ssize_t n = iof_write_some(s->w, s->out + off, len);
    if (n <= 0) {
      s->write_r = n;
      return 0;
    }
    if ((size_t)n < len) s->writer_waits++;
    s->written += (unsigned long long)n;
  }
  iof_socket_shutdown(s->w, SHUT_WR);
  return 0;
}

static int slow_reader_fn(void *arg) {
  slow *s = arg;
  s->data_ok = true;
  long reads = 0;
  for (;;) {
    ssize_t n = iof_read_some(s->r, s->in, 64u << 10);
    if (n <= 0) break;
    size_t off = (size_t)(s->read % CHUNK);
    for (ssize_t i = 0; i < n; i++)
      if (s->in[i] != s->out[(off + (size_t)i) % CHUNK]) {
        s->data_ok = false;
        break;
      }
    s->read += (unsigned long long)n;
    if (s->written - s->read > s->max_in_flight)
      s->max_in_flight = s->written - s->read;
    if (++reads % 64 == 0) {
      size_t rss = iof_test_rss_bytes();
      if (rss > s->rss_max) s->rss_max = rss;
    }
    if (reads % 8 == 0) iof_sleep_for(MS); /* slow */
  }
  return 0;
}

static void
fast_writer_blocks_on_a_slow_reader_with_bounded_memory(void **state) {
  (void)state;
  iof_io_context *io = iof_io_context_create();
  assert_non_null(io);
  int fds[2];
  raw_tcp_pair(fds);
  slow s = {0};
  assert_int_equal(iof_socket_adopt(io, fds[0], &s.w), 0);
  assert_int_equal(iof_socket_adopt(io, fds[1], &s.r), 0);
  s.out = malloc(CHUNK);
  s.in = malloc(64u << 10);
  assert_non_null(s.out);
  assert_non_null(s.in);
  for (size_t i = 0; i < CHUNK; i++)
    s.out[i] = (unsigned char)((i * 7 + (i >> 11)) & 0xff);
  memset(s.in, 0, 64u << 10);
  s.rss0 = iof_test_rss_bytes();
  s.rss_max = s.rss0;
  int64_t t0 = iof_now_ns();
  launch(io, slow_writer_fn, &s);
  launch(io, slow_reader_fn, &s);
  run_all(io);
  int64_t took = iof_now_ns() - t0;
  assert_int_equal(s.write_r, 0);
  assert_true(s.written == TOTAL);
  assert_true(s.read == TOTAL);
  assert_true(s.data_ok);
  /* The writer was held back by the reader: the bytes in flight stay
   * within the kernel's socket buffers, not 100 MB. */
  assert_true(s.writer_waits > 0);
  assert_true(s.max_in_flight < (32ull << 20));
  size_t growth = s.rss_max > s.rss0 ? s.rss_max - s.rss0 : 0;
  print_message("100 MB in %lld ms; RSS grew %zu KB; at most %llu KB in "
                "flight\n",
                (long long)(took / MS), growth / 1024, s.max_in_flight / 1024);
  assert_true(growth < (8u << 20));
  free(s.out);
  free(s.in);
  assert_int_equal(iof_io_context_destroy(io), 0);
}

/* ---- no SIGPIPE -----------------------------------------------------------
 */

typedef struct pipes {
  iof_socket *tcp, *unix_s, *adopted_pipe;
  iof_stream *stream;
  long r_tcp, r_tcp_first_err, r_unix, r_unixv, r_pipe, r_pipev, r_stream;
} pipes;

static int pipes_fn(void *arg) {
  pipes *p = arg;
  char buf[1024] = {0};
  struct iovec iov = {buf, sizeof buf};
  /* TCP: the first writes may still succeed or see the RST; then EPIPE. */
  p->r_tcp_first_err = 0;
  for (int i = 0; i < 1000; i++) {
    long r = iof_write_some(p->tcp, buf, sizeof buf);
    if (r < 0 && !p->r_tcp_first_err) p->r_tcp_first_err = r;
    if (r == -EPIPE) {
      p->r_tcp = r;
      break;
    }
    if (r < 0 && r != -ECONNRESET) {
      p->r_tcp = r;
      break;
    }
    iof_sleep_for(MS / 10);
  }
  p->r_unix = iof_write_some(p->unix_s, buf, sizeof buf);
  p->r_unixv = iof_writev(p->unix_s, &iov, 1);
  p->r_pipe = iof_write_some(p->adopted_pipe, buf, sizeof buf);
  p->r_pipev = iof_writev(p->adopted_pipe, &iov, 1);
  p->r_stream = iof_stream_write(p->stream, buf, sizeof buf);
  return 0;
}

/* Runs in a child process, so that a SIGPIPE kills only the child. */
static int no_sigpipe_child(void) {
  signal(SIGPIPE, SIG_DFL);
  iof_io_context *io = iof_io_context_create();
  if (!io) return 10;
  pipes p = {0};
  int fds[2], sv[2], pp[2];
  raw_tcp_pair(fds);
  if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv) || pipe(pp)) return 11;
  if (iof_socket_adopt(io, fds[0], &p.tcp) ||
      iof_socket_adopt(io, sv[0], &p.unix_s) ||
      iof_socket_adopt(io, pp[1], &p.adopted_pipe))
    return 12;
  iof_stream *a, *b;
  if (iof_stream_pipe(io, &a, &b)) return 13;
  p.stream = a;
  close(fds[1]);
  close(sv[1]);
  close(pp[0]);
  iof_stream_pipe_free(b);
  launch(io, pipes_fn, &p);
  iof_io_context_run(io);
  int bad = 0;
  if (p.r_tcp != -EPIPE) bad |= 1;
  if (p.r_tcp_first_err != -EPIPE && p.r_tcp_first_err != -ECONNRESET) bad |= 2;
  if (p.r_unix != -EPIPE) bad |= 4;
  if (p.r_unixv != -EPIPE) bad |= 8;
  if (p.r_pipe != -EPIPE) bad |= 16;
  if (p.r_pipev != -EPIPE) bad |= 32;
  if (p.r_stream != -EPIPE) bad |= 64;
  iof_stream_pipe_free(a);
  iof_io_context_destroy(io);
  return bad ? 128 + bad : 0;
}

static void writes_to_a_closed_peer_are_epipe_never_sigpipe(void **state) {
  (void)state;
  fflush(NULL);
  pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) _exit(no_sigpipe_child());
  int st = 0;
  assert_int_equal(waitpid(pid, &st, 0), pid);
  if (WIFSIGNALED(st))
    fail_msg("the writer was killed by signal %d (%s)", WTERMSIG(st),
             WTERMSIG(st) == SIGPIPE ? "SIGPIPE" : "?");
  assert_true(WIFEXITED(st));
  if (WEXITSTATUS(st) != 0)
    fail_msg("child status %d (128 + mask of wrong results: 1 tcp, 2 tcp "
             "first error, 4 unix, 8 unix writev, 16 pipe, 32 pipe writev, "
             "64 stream)",
             WEXITSTATUS(st));
}

/* ---- calls outside a fiber; close from a foreign thread ----------------- */

static void blocking_calls_outside_a_fiber_are_eperm(void **state) {
  (void)state;
  iof_io_context *io = iof_io_context_create();
  assert_non_null(io);
  int sv[2];
  assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
  iof_socket *s, *lst, *udp, *out = NULL;
  assert_int_equal(iof_socket_adopt(io, sv[0], &s), 0);
  assert_int_equal(iof_tcp_listen(io, "127.0.0.1", "0", 0, 0, &lst), 0);
  assert_int_equal(iof_udp_bind(io, "127.0.0.1", "0", &udp), 0);
  struct sockaddr_in a;
  socklen_t al = sizeof a;
  assert_int_equal(iof_socket_local_addr(lst, (struct sockaddr *)&a, &al), 0);
  /* Data is even available: still no call outside a fiber. */
  assert_int_equal(send(sv[1], "data", 4, 0), 4);
  char buf[8];
  struct iovec iov = {buf, sizeof buf};
  struct addrinfo *res;
  iof_timer *t = iof_timer_create(io);
  assert_non_null(t);
  assert_int_equal(iof_timer_expires_after(t, 1000 * MS), 0);
  long r[20];
  int i = 0;
  r[i++] = iof_read_some(s, buf, sizeof buf);
  r[i++] = iof_write_some(s, buf, sizeof buf);
  r[i++] = iof_read(s, buf, sizeof buf);
  r[i++] = iof_write(s, buf, sizeof buf);
  r[i++] = iof_readv(s, &iov, 1);
  r[i++] = iof_writev(s, &iov, 1);
  r[i++] = iof_accept(lst, &out, NULL, NULL);
  r[i++] = iof_tcp_connect_addr(io, (struct sockaddr *)&a, sizeof a, &out);
  r[i++] = iof_tcp_connect(io, "127.0.0.1", "80", &out);
  r[i++] = iof_unix_connect(io, "/nonexistent/x", &out);
  r[i++] = iof_recvfrom(udp, buf, sizeof buf, NULL, NULL);
  r[i++] = iof_sendto(udp, buf, 1, (struct sockaddr *)&a, sizeof a);
  r[i++] = iof_wait_readable(io, sv[0], -1);
  r[i++] = iof_wait_writable(io, sv[0], -1);
  r[i++] = iof_sleep_for(MS);
  r[i++] = iof_timer_wait(t);
  r[i++] = iof_resolve(io, "localhost", NULL, NULL, &res);
  r[i++] = iof_signal_wait(io, SIGUSR1);
  for (int k = 0; k < i; k++)
    if (r[k] != -EPERM) fail_msg("call %d outside a fiber: %ld", k, r[k]);
  assert_null(out);
  /* The data is untouched. */
  assert_int_equal(recv(sv[0], buf, sizeof buf, MSG_DONTWAIT), 4);
  /* Closing from a thread is fine while nobody runs the context. */
  assert_int_equal(iof_socket_close(s), 0);
  assert_int_equal(iof_timer_destroy(t), 0);
  close(sv[1]);
  assert_int_equal(iof_io_context_destroy(io), 0);
}

typedef struct foreign_close {
  iof_io_context *io;
  iof_socket *s;
  atomic_int reading;
  long r_read;
  int r_close_fiber;
} foreign_close;

static int fc_reader_fn(void *arg) {
  foreign_close *fc = arg;
  char buf[8];
  atomic_store(&fc->reading, 1);
  fc->r_read = iof_read_some(fc->s, buf, sizeof buf);
  return 0;
}

static int fc_closer_fn(void *arg) {
  foreign_close *fc = arg;
  fc->r_close_fiber = iof_socket_close(fc->s);
  return 0;
}

static void *fc_run(void *arg) {
  foreign_close *fc = arg;
  iof_io_context_run(fc->io);
  return NULL;
}

static void close_from_a_foreign_thread_while_running_is_eperm(void **state) {
  (void)state;
  foreign_close fc = {0};
  fc.io = iof_io_context_create();
  assert_non_null(fc.io);
  int sv[2];
  assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
  assert_int_equal(iof_socket_adopt(fc.io, sv[0], &fc.s), 0);
  launch(fc.io, fc_reader_fn, &fc);
  pthread_t t;
  assert_int_equal(pthread_create(&t, NULL, fc_run, &fc), 0);
  assert_true(wait_flag(&fc.reading));
  sleep_ms(20);
  assert_int_equal(iof_socket_close(fc.s), -EPERM);
  assert_true(iof_socket_fd(fc.s) >= 0); /* still open */
  /* The way to do it: from a fiber. */
  assert_int_equal(
      iof_launch(iof_io_context_executor(fc.io), fc_closer_fn, &fc), 0);
  pthread_join(t, NULL);
  assert_int_equal(fc.r_close_fiber, 0);
  assert_int_equal(fc.r_read, -ECANCELED);
  close(sv[1]);
  assert_int_equal(iof_io_context_destroy(fc.io), 0);
}

#define T(f) cmocka_unit_test_setup_teardown(f, arm_watchdog, disarm_watchdog)

int main(void) {
  const struct CMUnitTest tests[] = {
      T(calls_on_a_closed_socket_are_ebadf),
      T(foreign_descriptors_that_are_not_open_are_ebadf),
      T(double_close_is_harmless_and_never_closes_a_reused_fd),
      T(read_on_a_listener_is_einval_and_null_buffers_efault),
      T(zero_length_reads_and_writes_return_0_at_once),
      T(peer_reset_gives_econnreset),
      T(half_close_gives_end_of_stream_and_the_reply_still_flows),
      T(connect_to_a_closed_port_is_refused),
      T(emfile_on_accept_is_returned_and_accept_recovers),
      T(fast_writer_blocks_on_a_slow_reader_with_bounded_memory),
      T(writes_to_a_closed_peer_are_epipe_never_sigpipe),
      T(blocking_calls_outside_a_fiber_are_eperm),
      T(close_from_a_foreign_thread_while_running_is_eperm),
  };
  if (getenv("IOF_TEST_FILTER"))
    cmocka_set_test_filter(getenv("IOF_TEST_FILTER"));
  return cmocka_run_group_tests(tests, NULL, NULL);
}
