/* Streams: the helpers on iof_stream_pipe (read
 * exact, write all, read_until with a caller's buffer and limit: a
 * delimiter spanning two reads, -ENOBUFS when the buffer fills without
 * one, end of stream with bytes left over, several messages in one read),
 * the socket adapter, a user-written stream type, cancellation, and bad
 * arguments. */
#include "test_support.h"
#include "io_test.h"

#include <iofiber/iofiber.h>

#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define MS 1000000LL

/* Per-test watchdog (support/test_support.h). */
IOF_TEST_WATCHDOG(arm_watchdog, disarm_watchdog, 30)

static unsigned char pattern(unsigned id, size_t i) {
  return (unsigned char)((i * 17u + id * 5u + (i >> 9)) & 0xff);
}

typedef struct piped {
  iof_io_context *io;
  iof_stream *a, *b;
} piped;

static void pipe_open(piped *p) {
  p->io = iof_io_context_create();
  assert_non_null(p->io);
  assert_int_equal(iof_stream_pipe(p->io, &p->a, &p->b), 0);
  assert_non_null(p->a);
  assert_non_null(p->b);
}

static void pipe_close(piped *p) {
  if (p->a) assert_int_equal(iof_stream_pipe_free(p->a), 0);
  if (p->b) assert_int_equal(iof_stream_pipe_free(p->b), 0);
  assert_int_equal(iof_io_context_destroy(p->io), 0);
}

/* ---- read exact / write all ------------------------------------------- */

#define SBYTES (2u << 20)

typedef struct bulk {
  iof_stream *from, *to;
  unsigned id;
  unsigned char *out, *in;
  ssize_t wrote, got;
  bool same;
} bulk;

static int bulk_write_fn(void *arg) {
  bulk *k = arg;
  k->wrote = iof_stream_write(k->from, k->out, SBYTES);
  return 0;
}

static int bulk_read_fn(void *arg) {
  bulk *k = arg;
  /* Exact reads of odd sizes. */
  size_t got = 0, piece = 1;
  while (got < SBYTES) {
    size_t n = SBYTES - got < piece ? SBYTES - got : piece;
    ssize_t r = iof_stream_read(k->to, k->in + got, n);
    if (r != (ssize_t)n) break;
    got += n;
    piece = piece * 3 + 1;
    if (piece > 200000) piece = 7;
  }
  k->got = (ssize_t)got;
  k->same = memcmp(k->in, k->out, SBYTES) == 0;
  return 0;
}

static void write_all_and_read_exact_move_checked_data_both_ways(void **state) {
  (void)state;
  piped p;
  pipe_open(&p);
  bulk ab = {p.a, p.b, 1, NULL, NULL, 0, 0, false};
  bulk ba = {p.b, p.a, 2, NULL, NULL, 0, 0, false};
  bulk *ks[2] = {&ab, &ba};
  for (int j = 0; j < 2; j++) {
    ks[j]->out = malloc(SBYTES);
    ks[j]->in = malloc(SBYTES);
    assert_non_null(ks[j]->out);
    assert_non_null(ks[j]->in);
    for (size_t i = 0; i < SBYTES; i++) ks[j]->out[i] = pattern(ks[j]->id, i);
    launch(p.io, bulk_write_fn, ks[j]);
    launch(p.io, bulk_read_fn, ks[j]);
  }
  run_all(p.io);
  for (int j = 0; j < 2; j++) {
    assert_int_equal(ks[j]->wrote, SBYTES);
    assert_int_equal(ks[j]->got, SBYTES);
    assert_true(ks[j]->same);
    free(ks[j]->out);
    free(ks[j]->in);
  }
  pipe_close(&p);
}

/* ---- read_until -----------------------------------------------------------
 */

typedef struct until {
  iof_stream *r, *w;
  char buf[64];
  size_t filled;
  ssize_t m1, m2, m3;
  size_t filled1, filled2;
  char msg1[64], msg2[64];
} until;

static int until_writer_fn(void *arg) {
  until *u = arg;
  iof_stream_write(u->w, "GET /\r", 6);
  iof_sleep_for(10 * MS); /* the reader has taken the first part alone */
  iof_stream_write(u->w, "\nrest", 5);
  iof_sleep_for(10 * MS);
  iof_stream_write(u->w, "\r\n", 2);
  return 0;
}

static int until_reader_fn(void *arg) {
  until *u = arg;
  u->filled = 0;
  u->m1 =
      iof_stream_read_until(u->r, u->buf, sizeof u->buf, &u->filled, "\r\n", 2);
  u->filled1 = u->filled;
  if (u->m1 > 0) {
    memcpy(u->msg1, u->buf, (size_t)u->m1);
    /* Keep what follows the message, as a caller does. */
    memmove(u->buf, u->buf + u->m1, u->filled - (size_t)u->m1);
    u->filled -= (size_t)u->m1;
  }
  u->m2 =
      iof_stream_read_until(u->r, u->buf, sizeof u->buf, &u->filled, "\r\n", 2);
  u->filled2 = u->filled;
  if (u->m2 > 0) memcpy(u->msg2, u->buf, (size_t)u->m2);
  return 0;
}

static void read_until_finds_a_delimiter_spanning_two_reads(void **state) {
  (void)state;
  piped p;
  pipe_open(&p);
  until u = {0};
  u.r = p.b;
  u.w = p.a;
  launch(p.io, until_reader_fn, &u);
  launch(p.io, until_writer_fn, &u);
  run_all(p.io);
  assert_int_equal(u.m1, 7);
  assert_memory_equal(u.msg1, "GET /\r\n", 7);
  assert_int_equal(u.filled1, 11); /* "rest" came along and stays */
  assert_int_equal(u.m2, 6);
  assert_memory_equal(u.msg2, "rest\r\n", 6);
  assert_int_equal(u.filled2, 6);
  pipe_close(&p);
}

typedef struct limits {
  iof_stream *r, *w;
  char small[16];
  size_t filled;
  ssize_t r_nobufs;
  size_t filled_nobufs;
  ssize_t r_eof, r_long_delim;
  size_t filled_eof;
  char tail[16];
  ssize_t r_read_after_eof, r_exact_short;
} limits;

static int limits_writer_fn(void *arg) {
  limits *l = arg;
  iof_stream_write(l->w, "0123456789abcdefXYZ", 19); /* no delimiter */
  return 0;
}

static int limits_reader_fn(void *arg) {
  limits *l = arg;
  l->filled = 0;
  /* A delimiter longer than the buffer: refused before any read (the
   * writer's bytes are still all there for the call below). */
  char d[sizeof l->small + 1];
  memset(d, '\n', sizeof d);
  l->r_long_delim = iof_stream_read_until(l->r, l->small, sizeof l->small,
                                          &l->filled, d, sizeof d);
  l->r_nobufs = iof_stream_read_until(l->r, l->small, sizeof l->small,
                                      &l->filled, "\n", 1);
  l->filled_nobufs = l->filled;
  return 0;
}

static void
read_until_with_a_full_buffer_and_no_delimiter_is_enobufs(void **state) {
  (void)state;
  piped p;
  pipe_open(&p);
  limits l = {0};
  l.r = p.b;
  l.w = p.a;
  launch(p.io, limits_writer_fn, &l);
  launch(p.io, limits_reader_fn, &l);
  run_all(p.io);
  assert_int_equal(l.r_long_delim, -EINVAL);
  assert_int_equal(l.r_nobufs, -ENOBUFS);
  assert_int_equal(l.filled_nobufs, sizeof l.small);
  assert_memory_equal(l.small, "0123456789abcdef", 16);
  pipe_close(&p);
}

static int eof_writer_fn(void *arg) {
  limits *l = arg;
  iof_stream_write(l->w, "partial", 7);
  iof_sleep_for(5 * MS);
  iof_stream_close(l->w); /* end of stream for the reader */
  return 0;
}

static int eof_reader_fn(void *arg) {
  limits *l = arg;
  l->filled = 0;
  l->r_eof = iof_stream_read_until(l->r, l->small, sizeof l->small, &l->filled,
                                   "\n", 1);
  l->filled_eof = l->filled;
  memcpy(l->tail, l->small, l->filled);
  l->r_read_after_eof = iof_stream_read_some(l->r, l->small, 4);
  l->r_exact_short = iof_stream_read(l->r, l->small, 4);
  return 0;
}

static void
read_until_at_end_of_stream_returns_0_and_keeps_the_rest(void **state) {
  (void)state;
  piped p;
  pipe_open(&p);
  limits l = {0};
  l.r = p.b;
  l.w = p.a;
  launch(p.io, eof_reader_fn, &l);
  launch(p.io, eof_writer_fn, &l);
  run_all(p.io);
  assert_int_equal(l.r_eof, 0);
  assert_int_equal(l.filled_eof, 7);
  assert_memory_equal(l.tail, "partial", 7);
  assert_int_equal(l.r_read_after_eof, 0);
  assert_int_equal(l.r_exact_short, 0);
  pipe_close(&p);
}

typedef struct short_exact {
  iof_stream *r, *w;
  ssize_t got;
  ssize_t write_after_close;
  char buf[16];
} short_exact;

static int short_writer_fn(void *arg) {
  short_exact *s = arg;
  iof_stream_write(s->w, "abc", 3);
  iof_stream_close(s->w);
  return 0;
}

static int short_reader_fn(void *arg) {
  short_exact *s = arg;
  s->got = iof_stream_read(s->r, s->buf, 10);
  return 0;
}

static void read_exact_returns_the_short_count_at_end_of_stream(void **state) {
  (void)state;
  piped p;
  pipe_open(&p);
  short_exact s = {0};
  s.r = p.b;
  s.w = p.a;
  launch(p.io, short_reader_fn, &s);
  launch(p.io, short_writer_fn, &s);
  run_all(p.io);
  assert_int_equal(s.got, 3);
  assert_memory_equal(s.buf, "abc", 3);
  pipe_close(&p);
}

static int write_to_gone_fn(void *arg) {
  short_exact *s = arg;
  s->write_after_close = iof_stream_write(s->w, "x", 1);
  return 0;
}

static void write_after_the_peer_end_is_gone_is_epipe(void **state) {
  (void)state;
  piped p;
  pipe_open(&p);
  assert_int_equal(iof_stream_pipe_free(p.b), 0);
  p.b = NULL;
  short_exact s = {0};
  s.w = p.a;
  launch(p.io, write_to_gone_fn, &s);
  run_all(p.io);
  assert_int_equal(s.write_after_close, -EPIPE);
  pipe_close(&p);
}

/* ---- a user-written stream -------------------------------------------------
 */

/* Reads hand out at most `chunk` bytes of `src`; writes take at most 3
 * bytes into `sink`. Counts the calls. */
typedef struct mem_stream {
  iof_stream base;
  const char *src;
  size_t src_len, pos, chunk;
  char sink[256];
  size_t sunk;
  int reads, writes, closes;
} mem_stream;

static ssize_t mem_read(iof_stream *s, void *buf, size_t len) {
  mem_stream *m = (mem_stream *)s;
  m->reads++;
  size_t n = m->src_len - m->pos;
  if (n > m->chunk) n = m->chunk;
  if (n > len) n = len;
  memcpy(buf, m->src + m->pos, n);
  m->pos += n;
  return (ssize_t)n;
}

static ssize_t mem_write(iof_stream *s, const void *buf, size_t len) {
  mem_stream *m = (mem_stream *)s;
  m->writes++;
  size_t n = len < 3 ? len : 3;
  if (m->sunk + n > sizeof m->sink) return -ENOSPC;
  memcpy(m->sink + m->sunk, buf, n);
  m->sunk += n;
  return (ssize_t)n;
}

static int mem_close(iof_stream *s) {
  ((mem_stream *)s)->closes++;
  return 0;
}

static const iof_stream_vtbl mem_vtbl = {mem_read, mem_write, mem_close, NULL,
                                         NULL};

static void helpers_work_on_a_user_written_stream(void **state) {
  (void)state;
  /* No fiber needed: the helpers only call the vtable. */
  static const char text[] = "alpha END beta ENDgamma";
  mem_stream m;
  memset(&m, 0, sizeof m);
  m.base.vtbl = &mem_vtbl;
  m.src = text;
  m.src_len = sizeof text - 1;
  m.chunk = 1; /* the delimiter always spans reads */
  char buf[64];
  size_t filled = 0;
  ssize_t n =
      iof_stream_read_until(&m.base, buf, sizeof buf, &filled, "END", 3);
  assert_int_equal(n, 9);
  assert_memory_equal(buf, "alpha END", 9);
  assert_int_equal(filled, 9);
  assert_int_equal(m.reads, 9);
  memmove(buf, buf + n, filled - (size_t)n);
  filled -= (size_t)n;
  n = iof_stream_read_until(&m.base, buf, sizeof buf, &filled, "END", 3);
  assert_int_equal(n, 9);
  assert_memory_equal(buf, " beta END", 9);
  memmove(buf, buf + n, filled - (size_t)n);
  filled -= (size_t)n;
  n = iof_stream_read(&m.base, buf, 100); /* "gamma", then end of stream */
  assert_int_equal(n, 5);
  assert_memory_equal(buf, "gamma", 5);
  /* Write all through a stream taking 3 bytes per call. */
  assert_int_equal(iof_stream_write(&m.base, "0123456789", 10), 10);
  assert_int_equal(m.writes, 4);
  assert_memory_equal(m.sink, "0123456789", 10);
  assert_int_equal(iof_stream_close(&m.base), 0);
  assert_int_equal(m.closes, 1);
}

static void
read_until_does_not_read_when_a_message_is_already_buffered(void **state) {
  (void)state;
  static const char text[] = "a\nbb\nccc\n";
  mem_stream m;
  memset(&m, 0, sizeof m);
  m.base.vtbl = &mem_vtbl;
  m.src = text;
  m.src_len = sizeof text - 1;
  m.chunk = 64; /* all of it in one read */
  char buf[64];
  size_t filled = 0;
  ssize_t lens[3];
  for (int i = 0; i < 3; i++) {
    lens[i] = iof_stream_read_until(&m.base, buf, sizeof buf, &filled, "\n", 1);
    assert_true(lens[i] > 0);
    memmove(buf, buf + lens[i], filled - (size_t)lens[i]);
    filled -= (size_t)lens[i];
  }
  assert_int_equal(lens[0], 2);
  assert_int_equal(lens[1], 3);
  assert_int_equal(lens[2], 4);
  assert_int_equal(m.reads, 1);
  assert_int_equal(filled, 0);
  /* Then end of stream with nothing left. */
  assert_int_equal(
      iof_stream_read_until(&m.base, buf, sizeof buf, &filled, "\n", 1), 0);
  assert_int_equal(filled, 0);
}

/* ---- the socket adapter, cancellation ---------------------------------------
 */

typedef struct adapter {
  iof_socket_stream ss;
  iof_stream *s;
  int peer;
  ssize_t r_read, r_after_close;
  int r_close;
  char buf[8];
} adapter;

static int adapter_fn(void *arg) {
  adapter *a = arg;
  a->r_read = iof_stream_read(a->s, a->buf, 4);
  a->r_close = iof_stream_close(a->s);
  a->r_after_close = iof_stream_read_some(a->s, a->buf, 4);
  return 0;
}

static void socket_adapter_reads_and_closes_the_socket(void **state) {
  (void)state;
  iof_io_context *io = iof_io_context_create();
  assert_non_null(io);
  int sv[2];
  assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
  iof_socket *sock;
  assert_int_equal(iof_socket_adopt(io, sv[0], &sock), 0);
  adapter a = {0};
  a.s = iof_socket_stream_init(&a.ss, sock);
  assert_ptr_equal(a.s, &a.ss.base);
  assert_null(iof_socket_stream_init(NULL, sock));
  assert_null(iof_socket_stream_init(&a.ss, NULL));
  assert_int_equal(send(sv[1], "ab", 2, 0), 2);
  assert_int_equal(send(sv[1], "cd", 2, 0), 2);
  launch(io, adapter_fn, &a);
  run_all(io);
  assert_int_equal(a.r_read, 4);
  assert_memory_equal(a.buf, "abcd", 4);
  assert_int_equal(a.r_close, 0);
  assert_int_equal(a.r_after_close, -EBADF);
  char x;
  assert_int_equal(recv(sv[1], &x, 1, 0), 0); /* closed */
  close(sv[1]);
  /* Not a pipe end. */
  assert_int_equal(iof_stream_pipe_free(a.s), -EINVAL);
  assert_int_equal(iof_socket_free(sock), 0);
  assert_int_equal(iof_io_context_destroy(io), 0);
}

typedef struct stopped {
  iof_stream *r, *w;
  ssize_t r_read, r_write, r_until;
  char buf[8];
} stopped;

static int stopped_fn(void *arg) {
  stopped *s = arg;
  size_t filled = 0;
  s->r_read = iof_stream_read(s->r, s->buf, 4);
  s->r_write = iof_stream_write(s->w, "x", 1);
  s->r_until =
      iof_stream_read_until(s->r, s->buf, sizeof s->buf, &filled, "\n", 1);
  return 0;
}

static void stream_helpers_with_a_stopped_token_are_ecanceled(void **state) {
  (void)state;
  piped p;
  pipe_open(&p);
  iof_stop_source src;
  assert_int_equal(iof_stop_source_init(&src), 0);
  iof_stop_source_request(&src);
  stopped s = {0};
  s.r = p.b;
  s.w = p.a;
  iof_launch_opts o = {0};
  o.stop_token = iof_stop_source_token(&src);
  assert_int_equal(
      iof_run_async(iof_io_context_executor(p.io), &o, stopped_fn, &s), 0);
  run_all(p.io);
  assert_int_equal(s.r_read, -ECANCELED);
  assert_int_equal(s.r_write, -ECANCELED);
  assert_int_equal(s.r_until, -ECANCELED);
  iof_stop_source_destroy(&src);
  pipe_close(&p);
}

static void bad_stream_arguments_are_einval(void **state) {
  (void)state;
  char buf[8];
  size_t filled = 0;
  assert_int_equal(iof_stream_read_some(NULL, buf, 1), -EINVAL);
  assert_int_equal(iof_stream_write_some(NULL, buf, 1), -EINVAL);
  assert_int_equal(iof_stream_close(NULL), -EINVAL);
  assert_int_equal(iof_stream_read(NULL, buf, 1), -EINVAL);
  assert_int_equal(iof_stream_write(NULL, buf, 1), -EINVAL);
  assert_int_equal(
      iof_stream_read_until(NULL, buf, sizeof buf, &filled, "\n", 1), -EINVAL);
  mem_stream m;
  memset(&m, 0, sizeof m);
  m.base.vtbl = &mem_vtbl;
  assert_int_equal(
      iof_stream_read_until(&m.base, NULL, sizeof buf, &filled, "\n", 1),
      -EINVAL);
  assert_int_equal(
      iof_stream_read_until(&m.base, buf, sizeof buf, NULL, "\n", 1), -EINVAL);
  assert_int_equal(
      iof_stream_read_until(&m.base, buf, sizeof buf, &filled, NULL, 1),
      -EINVAL);
  assert_int_equal(
      iof_stream_read_until(&m.base, buf, sizeof buf, &filled, "\n", 0),
      -EINVAL);
  filled = sizeof buf + 1;
  assert_int_equal(
      iof_stream_read_until(&m.base, buf, sizeof buf, &filled, "\n", 1),
      -EINVAL);
  assert_int_equal(m.reads, 0);
  iof_stream *a, *b;
  assert_int_equal(iof_stream_pipe(NULL, &a, &b), -EINVAL);
  iof_io_context *io = iof_io_context_create();
  assert_non_null(io);
  assert_int_equal(iof_stream_pipe(io, NULL, &b), -EINVAL);
  assert_int_equal(iof_stream_pipe(io, &a, NULL), -EINVAL);
  assert_int_equal(iof_stream_pipe_free(NULL), -EINVAL);
  assert_int_equal(iof_stream_pipe_free(&m.base), -EINVAL);
  assert_int_equal(iof_io_context_destroy(io), 0);
}

#define T(f) cmocka_unit_test_setup_teardown(f, arm_watchdog, disarm_watchdog)

int main(void) {
  const struct CMUnitTest tests[] = {
      T(write_all_and_read_exact_move_checked_data_both_ways),
      T(read_until_finds_a_delimiter_spanning_two_reads),
      T(read_until_with_a_full_buffer_and_no_delimiter_is_enobufs),
      T(read_until_at_end_of_stream_returns_0_and_keeps_the_rest),
      T(read_exact_returns_the_short_count_at_end_of_stream),
      T(write_after_the_peer_end_is_gone_is_epipe),
      T(helpers_work_on_a_user_written_stream),
      T(read_until_does_not_read_when_a_message_is_already_buffered),
      T(socket_adapter_reads_and_closes_the_socket),
      T(stream_helpers_with_a_stopped_token_are_ecanceled),
      T(bad_stream_arguments_are_einval),
  };
  if (getenv("IOF_TEST_FILTER"))
    cmocka_set_test_filter(getenv("IOF_TEST_FILTER"));
  return cmocka_run_group_tests(tests, NULL, NULL);
}
