/* The buffered reader over a scripted stream (each read returns the next
 * chunk, so splits are exact) and over a real socket: lines split across
 * reads, CRLF, a last line without newline, multi-byte delimiters split
 * at the delimiter, the maximum length (-EMSGSIZE, nothing consumed),
 * end of stream inside fixed-size messages (-EPROTO), frames with 1, 2
 * and 4-byte prefixes fed byte by byte, frames larger than the buffer,
 * views pointing into the buffer (no copy), compaction of a small
 * buffer, errors and timeouts passed through, argument checks. */
#include "test_support.h"
#include "io_test.h"

#include <iofiber/iofiber.h>

#include <errno.h>
#include <stdio.h>
#include <string.h>

IOF_TEST_WATCHDOG(setup, teardown, 20)

typedef struct script {
  iof_stream base;
  const char *const *chunks;
  size_t i, off;
  int err; /* returned after the chunks when nonzero, instead of EOF */
  int reads;
} script;

static ssize_t script_read(iof_stream *s, void *buf, size_t len) {
  script *sc = (script *)s;
  sc->reads++;
  const char *c = sc->chunks[sc->i];
  if (!c) return sc->err;
  size_t left = strlen(c) - sc->off;
  size_t n = left < len ? left : len;
  memcpy(buf, c + sc->off, n);
  sc->off += n;
  if (sc->off == strlen(c)) sc->i++, sc->off = 0;
  return (ssize_t)n;
}

static ssize_t script_write(iof_stream *s, const void *b, size_t n) {
  (void)s, (void)b;
  return (ssize_t)n;
}

static int script_close(iof_stream *s) {
  (void)s;
  return 0;
}

static const iof_stream_vtbl script_vtbl = {script_read, script_write,
                                            script_close, NULL, NULL};

static void script_init(script *sc, const char *const *chunks) {
  memset(sc, 0, sizeof *sc);
  sc->base.vtbl = &script_vtbl;
  sc->chunks = chunks;
}

static void assert_view(iof_bytes b, const char *want) {
  assert_int_equal(b.len, strlen(want));
  assert_memory_equal(b.data, want, b.len);
}

static void lines_split_across_reads(void **state) {
  (void)state;
  const char *const chunks[] = {"hel", "lo\r\nwor", "ld\n\nla", "st", NULL};
  script sc;
  script_init(&sc, chunks);
  char buf[64];
  iof_reader r;
  assert_int_equal(iof_reader_init(&r, &sc.base, buf, sizeof buf), 0);
  iof_bytes l;
  assert_int_equal(iof_reader_read_line(&r, &l), 1);
  assert_view(l, "hello");
  assert_true(l.data >= buf && l.data + l.len <= buf + sizeof buf); /* a view */
  assert_int_equal(iof_reader_read_line(&r, &l), 1);
  assert_view(l, "world");
  assert_int_equal(iof_reader_read_line(&r, &l), 1);
  assert_view(l, "");
  assert_int_equal(iof_reader_read_line(&r, &l), 1); /* EOF mid-line */
  assert_view(l, "last");
  assert_int_equal(iof_reader_read_line(&r, &l), 0);
  assert_int_equal(iof_reader_read_line(&r, &l), 0);
  iof_reader_destroy(&r);
}

static void delimiter_split_at_the_delimiter(void **state) {
  (void)state;
  const char *const chunks[] = {"GET / HTTP/1.1\r\nHost: x\r", "\n\r", "\nBODY",
                                "\r\n\r\n", NULL};
  script sc;
  script_init(&sc, chunks);
  iof_reader r;
  assert_int_equal(iof_reader_init(&r, &sc.base, NULL, 0), 0); /* allocated */
  iof_bytes m;
  assert_int_equal(iof_reader_read_until(&r, "\r\n\r\n", 4, &m), 1);
  assert_view(m, "GET / HTTP/1.1\r\nHost: x\r\n\r\n");
  assert_int_equal(iof_reader_read_until(&r, "\r\n\r\n", 4, &m), 1);
  assert_view(m, "BODY\r\n\r\n");
  assert_int_equal(iof_reader_read_until(&r, "\r\n\r\n", 4, &m), 0);
  iof_reader_destroy(&r);
}

static void max_length_gives_emsgsize(void **state) {
  (void)state;
  const char *const chunks[] = {"0123", "456789", "\nok\n", NULL};
  script sc;
  script_init(&sc, chunks);
  char buf[32];
  iof_reader r;
  assert_int_equal(iof_reader_init(&r, &sc.base, buf, sizeof buf), 0);
  assert_int_equal(iof_reader_set_max(&r, 33), -EINVAL);
  assert_int_equal(iof_reader_set_max(&r, 8), 0);
  iof_bytes l;
  assert_int_equal(iof_reader_read_line(&r, &l), -EMSGSIZE);
  /* Nothing consumed: the caller decides (here: skip the long line). */
  assert_true(iof_reader_buffered(&r, &l) >= 8);
  assert_memory_equal(l.data, "01234567", 8);
  iof_reader_set_max(&r, 0); /* the whole buffer again */
  assert_int_equal(iof_reader_read_line(&r, &l), 1);
  assert_view(l, "0123456789");
  assert_int_equal(iof_reader_read_line(&r, &l), 1);
  assert_view(l, "ok");
  /* A line longer than the buffer itself. */
  const char *const big[] = {"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\n", NULL};
  script_init(&sc, big);
  iof_reader_destroy(&r);
  assert_int_equal(iof_reader_init(&r, &sc.base, buf, sizeof buf), 0);
  assert_int_equal(iof_reader_read_line(&r, &l), -EMSGSIZE);
  iof_reader_destroy(&r);
}

static void small_buffer_compacts(void **state) {
  (void)state;
  /* 50 lines of 9 bytes through a 16-byte buffer, in odd chunks. */
  static char text[50 * 9 + 1];
  for (int i = 0; i < 50; i++) snprintf(text + i * 9, 10, "line %03d\n", i);
  static char chunk_mem[200][8];
  const char *chunks[201];
  size_t n = strlen(text), k = 0;
  for (size_t off = 0; off < n; k++) {
    size_t len = 1 + (k * 5) % 7;
    if (len > n - off) len = n - off;
    memcpy(chunk_mem[k], text + off, len);
    chunk_mem[k][len] = 0;
    chunks[k] = chunk_mem[k];
    off += len;
  }
  chunks[k] = NULL;
  script sc;
  script_init(&sc, chunks);
  char buf[16];
  iof_reader r;
  assert_int_equal(iof_reader_init(&r, &sc.base, buf, sizeof buf), 0);
  iof_bytes l;
  for (int i = 0; i < 50; i++) {
    char want[16];
    snprintf(want, sizeof want, "line %03d", i);
    assert_int_equal(iof_reader_read_line(&r, &l), 1);
    assert_view(l, want);
  }
  assert_int_equal(iof_reader_read_line(&r, &l), 0);
}

static void exact_and_eof_inside(void **state) {
  (void)state;
  const char *const chunks[] = {"ab", "cdef", "gh", NULL};
  script sc;
  script_init(&sc, chunks);
  char buf[8];
  iof_reader r;
  assert_int_equal(iof_reader_init(&r, &sc.base, buf, sizeof buf), 0);
  iof_bytes b;
  assert_int_equal(iof_reader_read_exact(&r, 9, &b), -EMSGSIZE);
  assert_int_equal(iof_reader_read_exact(&r, 3, &b), 1);
  assert_view(b, "abc");
  assert_int_equal(iof_reader_read_exact(&r, 0, &b), 1);
  assert_int_equal(b.len, 0);
  assert_int_equal(iof_reader_read_exact(&r, 4, &b), 1);
  assert_view(b, "defg");
  assert_int_equal(iof_reader_read_exact(&r, 2, &b), -EPROTO); /* "h" */
  /* read(): copies, fewer only at the end. */
  const char *const more[] = {"12", "345", "6", NULL};
  script_init(&sc, more);
  assert_int_equal(iof_reader_init(&r, &sc.base, buf, sizeof buf), 0);
  assert_int_equal(iof_reader_read_exact(&r, 1, &b), 1);
  char out[16] = {0};
  assert_int_equal(iof_reader_read(&r, out, 4), 4);
  assert_memory_equal(out, "2345", 4);
  assert_int_equal(iof_reader_read(&r, out, 10), 1);
  assert_int_equal(out[0], '6');
  assert_int_equal(iof_reader_read(&r, out, 10), 0);
}

/* A stream over a fixed byte array, n bytes per read (binary safe). */
typedef struct bin {
  iof_stream base;
  const unsigned char *p;
  size_t len, off, step;
} bin;

static ssize_t bin_read(iof_stream *s, void *buf, size_t len) {
  bin *b = (bin *)s;
  size_t n = b->len - b->off;
  if (n > b->step) n = b->step;
  if (n > len) n = len;
  memcpy(buf, b->p + b->off, n);
  b->off += n;
  return (ssize_t)n;
}

static const iof_stream_vtbl bin_vtbl = {bin_read, script_write, script_close,
                                         NULL, NULL};

static void frames(void **state) {
  (void)state;
  static const unsigned char data[] = {
      3,  'a', 'b', 'c', 0,   0, 0,   0,
      0,  3,   'x', 'y', 'z', 0, 100, /* 2-byte: 100 bytes */
      'Q'};
  unsigned char all[sizeof data + 99 + 4 + 2];
  memcpy(all, data, sizeof data);
  memset(all + sizeof data, 'Q', 99); /* the 100-byte frame */
  size_t n = sizeof data + 99;
  all[n++] = 1; /* then a 1-byte frame "Z", and a truncated one */
  all[n++] = 'Z';
  all[n++] = 5;
  all[n++] = 'T';
  for (size_t step = 1; step <= 7; step += 6) {
    bin b = {{&bin_vtbl}, all, n, 0, step};
    char buf[32];
    iof_reader r;
    assert_int_equal(iof_reader_init(&r, &b.base, buf, sizeof buf), 0);
    iof_bytes f;
    assert_int_equal(iof_reader_read_frame(&r, 3, &f), -EINVAL);
    assert_int_equal(iof_reader_read_frame(&r, 1, &f), 1);
    assert_view(f, "abc");
    assert_int_equal(iof_reader_read_frame(&r, 2, &f), 1);
    assert_int_equal(f.len, 0);
    assert_int_equal(iof_reader_read_frame(&r, 4, &f), 1);
    assert_view(f, "xyz");
    /* Larger than the buffer: refused as a view, nothing consumed... */
    assert_int_equal(iof_reader_read_frame(&r, 2, &f), -EMSGSIZE);
    char big[200];
    size_t len = 0;
    assert_int_equal(iof_reader_read_frame_into(&r, 2, big, 50, &len),
                     -EMSGSIZE);
    /* ...and read into a caller's buffer. */
    assert_int_equal(iof_reader_read_frame_into(&r, 2, big, sizeof big, &len),
                     1);
    assert_int_equal(len, 100);
    for (int i = 0; i < 100; i++) assert_int_equal(big[i], 'Q');
    assert_int_equal(iof_reader_read_frame(&r, 1, &f), 1);
    assert_view(f, "Z");
    assert_int_equal(iof_reader_read_frame(&r, 1, &f), -EPROTO);
    iof_reader_destroy(&r);
  }
}

static void errors_pass_through(void **state) {
  (void)state;
  const char *const chunks[] = {"partial", NULL};
  script sc;
  script_init(&sc, chunks);
  sc.err = -ECONNRESET;
  char buf[32];
  iof_reader r;
  assert_int_equal(iof_reader_init(&r, &sc.base, buf, sizeof buf), 0);
  iof_bytes l;
  assert_int_equal(iof_reader_read_line(&r, &l), -ECONNRESET);
  /* The buffered bytes stay. */
  assert_int_equal(iof_reader_buffered(&r, &l), 7);
  char out[4];
  assert_int_equal(iof_reader_read_some(&r, out, sizeof out), 4);
  assert_memory_equal(out, "part", 4);
  iof_reader_consume(&r, 100);
  assert_int_equal(iof_reader_buffered(&r, NULL), 0);
  assert_int_equal(iof_reader_read_some(&r, out, sizeof out), -ECONNRESET);
}

static void argument_checks(void **state) {
  (void)state;
  iof_reader r;
  char buf[8];
  script sc;
  const char *const none[] = {NULL};
  script_init(&sc, none);
  assert_int_equal(iof_reader_init(NULL, &sc.base, buf, 8), -EINVAL);
  assert_int_equal(iof_reader_init(&r, NULL, buf, 8), -EINVAL);
  assert_int_equal(iof_reader_init(&r, &sc.base, buf, 0), -EINVAL);
  assert_int_equal(iof_reader_init_socket(&r, NULL, buf, 8), -EINVAL);
  assert_int_equal(iof_reader_init(&r, &sc.base, buf, 8), 0);
  iof_bytes b;
  assert_int_equal(iof_reader_read_until(&r, "", 0, &b), -EINVAL);
  assert_int_equal(iof_reader_read_until(&r, "\n", 1, NULL), -EINVAL);
  assert_int_equal(iof_reader_read_line(&r, &b), 0);
  iof_reader_destroy(&r);
  iof_reader_destroy(&r); /* twice is harmless */
}

/* ---- over a socket ------------------------------------------------------ */

typedef struct sock_case {
  iof_io_context *io;
  int lines, r_timeout, r_end;
} sock_case;

static int sock_writer(void *arg) {
  iof_socket *w = arg;
  char line[64];
  for (int i = 0; i < 200; i++) {
    int n = snprintf(line, sizeof line, "message number %d\n", i);
    if (iof_write(w, line, (size_t)n) < 0) return -1;
    if (i % 37 == 0) iof_sleep_for(1000000);
  }
  iof_sleep_for(80 * 1000000LL); /* idle: the reader's timeout fires */
  iof_socket_shutdown(w, SHUT_WR);
  return 0;
}

typedef struct rd_arg {
  sock_case *c;
  iof_socket *s;
} rd_arg;

static int sock_reader(void *arg) {
  rd_arg *a = arg;
  iof_reader r;
  assert_int_equal(iof_reader_init_socket(&r, a->s, NULL, 64), 0);
  assert_int_equal(iof_socket_set_timeout(a->s, IOF_READ, 40 * 1000000LL), 0);
  iof_bytes l;
  int e;
  while ((e = iof_reader_read_line(&r, &l)) == 1) {
    char want[64];
    snprintf(want, sizeof want, "message number %d", a->c->lines);
    assert_int_equal(l.len, strlen(want));
    assert_memory_equal(l.data, want, l.len);
    a->c->lines++;
  }
  a->c->r_timeout = e;
  iof_socket_set_timeout(a->s, IOF_READ, 0);
  a->c->r_end = iof_reader_read_line(&r, &l);
  iof_reader_destroy(&r);
  return 0;
}

static void reader_over_socket(void **state) {
  (void)state;
  sock_case c = {0};
  c.io = iof_io_context_create();
  int fds[2];
  raw_tcp_pair(fds);
  iof_socket *a, *b;
  assert_int_equal(iof_socket_adopt(c.io, fds[0], &a), 0);
  assert_int_equal(iof_socket_adopt(c.io, fds[1], &b), 0);
  rd_arg ra = {&c, a};
  launch(c.io, sock_reader, &ra);
  launch(c.io, sock_writer, b);
  run_all(c.io);
  assert_int_equal(c.lines, 200);
  assert_int_equal(c.r_timeout, -ETIMEDOUT);
  assert_int_equal(c.r_end, 0);
  assert_int_equal(iof_io_context_destroy(c.io), 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(lines_split_across_reads, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(delimiter_split_at_the_delimiter, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(max_length_gives_emsgsize, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(small_buffer_compacts, setup, teardown),
      cmocka_unit_test_setup_teardown(exact_and_eof_inside, setup, teardown),
      cmocka_unit_test_setup_teardown(frames, setup, teardown),
      cmocka_unit_test_setup_teardown(errors_pass_through, setup, teardown),
      cmocka_unit_test_setup_teardown(argument_checks, setup, teardown),
      cmocka_unit_test_setup_teardown(reader_over_socket, setup, teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
