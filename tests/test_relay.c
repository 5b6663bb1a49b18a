/* iof_stream_copy and iof_stream_relay: a 1 MiB copy with its count, the
 * half-close forwarded and no allocation per chunk, a relay between two
 * TCP connections where the client half-closes and still reads the reply, the
 * idle timeout of a quiet relay, a relay with one-way traffic only that the
 * idle timeout leaves alone until the traffic stops, a stop request, a caller's
 * buffer, and the argument checks. */
#include "test_support.h"
#include "io_test.h"

#include <iofiber/iofiber.h>

#include <errno.h>
#include <stdio.h>
#include <string.h>

#define MS 1000000LL

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define IOF_SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define IOF_SANITIZED 1
#endif
#endif

/* A counting malloc (plain builds only: sanitizers own malloc), to show
 * that copying allocates nothing per chunk. */
#ifndef IOF_SANITIZED
#include <stdatomic.h>
extern void *__libc_malloc(size_t n);
extern void *__libc_calloc(size_t n, size_t m);
extern void *__libc_realloc(void *p, size_t n);

static atomic_long malloc_calls;

void *malloc(size_t n) {
  atomic_fetch_add_explicit(&malloc_calls, 1, memory_order_relaxed);
  return __libc_malloc(n);
}

void *calloc(size_t n, size_t m) {
  atomic_fetch_add_explicit(&malloc_calls, 1, memory_order_relaxed);
  return __libc_calloc(n, m);
}

void *realloc(void *p, size_t n) {
  atomic_fetch_add_explicit(&malloc_calls, 1, memory_order_relaxed);
  return __libc_realloc(p, n);
}
#endif

IOF_TEST_WATCHDOG(setup, teardown, 20)

static unsigned char pat(size_t i) {
  return (unsigned char)(i * 7 + i / 251);
}

typedef struct cp {
  iof_io_context *io;
  iof_stream *in_w, *in_r, *out_w, *out_r;
  int r;
  uint64_t copied;
  size_t got;
  bool ok, eof;
  long mallocs; /* during the copy, by anyone */
} cp;

#define COPY_N ((size_t)1 << 20)

static int cp_writer(void *arg) {
  cp *c = arg;
  static unsigned char chunk[8192];
  for (size_t off = 0; off < COPY_N; off += sizeof chunk) {
    for (size_t i = 0; i < sizeof chunk; i++) chunk[i] = pat(off + i);
    if (iof_stream_write(c->in_w, chunk, sizeof chunk) < 0) return -1;
  }
  return iof_stream_shutdown_write(c->in_w);
}

static int cp_copier(void *arg) {
  cp *c = arg;
  static char buf[4096]; /* 256 chunks at least */
  iof_copy_opts o = {0};
  o.buf = buf;
  o.buf_len = sizeof buf;
  o.idle_ns = 5000 * MS; /* the idle machinery allocates nothing either */
#ifndef IOF_SANITIZED
  long before = atomic_load(&malloc_calls);
#endif
  c->r = iof_stream_copy(c->out_w, c->in_r, &o, &c->copied);
#ifndef IOF_SANITIZED
  c->mallocs = atomic_load(&malloc_calls) - before;
#endif
  return 0;
}

static int cp_reader(void *arg) {
  cp *c = arg;
  static unsigned char buf[3000];
  c->ok = true;
  ssize_t n;
  while ((n = iof_stream_read_some(c->out_r, buf, sizeof buf)) > 0) {
    for (ssize_t i = 0; i < n; i++)
      if (buf[i] != pat(c->got + (size_t)i)) c->ok = false;
    c->got += (size_t)n;
  }
  c->eof = n == 0;
  return 0;
}

static void copy_one_mib_and_half_close(void **state) {
  (void)state;
  cp c;
  memset(&c, 0, sizeof c);
  c.io = iof_io_context_create();
  assert_int_equal(iof_stream_pipe(c.io, &c.in_w, &c.in_r), 0);
  assert_int_equal(iof_stream_pipe(c.io, &c.out_w, &c.out_r), 0);
  launch(c.io, cp_writer, &c);
  launch(c.io, cp_copier, &c);
  launch(c.io, cp_reader, &c);
  run_all(c.io);
  assert_int_equal(c.r, 0);
  assert_int_equal(c.copied, COPY_N);
  assert_int_equal(c.got, COPY_N);
  assert_true(c.ok);
  assert_true(c.eof); /* the half-close reached the reader */
  /* Caller's buffer: nothing per chunk (>= 256 chunks moved); what is
   * counted is libev growing its arrays on first use (about 6). */
  assert_true(c.mallocs <= 16);
  iof_stream_pipe_free(c.in_w);
  iof_stream_pipe_free(c.in_r);
  iof_stream_pipe_free(c.out_w);
  iof_stream_pipe_free(c.out_r);
  assert_int_equal(iof_io_context_destroy(c.io), 0);
}

/* ---- relay between two TCP connections --------------------------------- */

typedef struct rl {
  iof_io_context *io;
  iof_socket *client, *proxy_c; /* client <-> proxy_c */
  iof_socket *proxy_s, *server; /* proxy_s <-> server */
  iof_copy_opts opts;
  iof_stop_source *src;
  int r;
  uint64_t up, down;
  int64_t ms;
  char reply[64];
  ssize_t reply_len;
  char request[64];
  ssize_t request_len;
  int oneway_ms; /* one-way traffic client->server for this long */
} rl;

static void rl_make(rl *x) {
  memset(x, 0, sizeof *x);
  x->io = iof_io_context_create();
  int a[2], b[2];
  raw_tcp_pair(a);
  raw_tcp_pair(b);
  assert_int_equal(iof_socket_adopt(x->io, a[0], &x->client), 0);
  assert_int_equal(iof_socket_adopt(x->io, a[1], &x->proxy_c), 0);
  assert_int_equal(iof_socket_adopt(x->io, b[0], &x->proxy_s), 0);
  assert_int_equal(iof_socket_adopt(x->io, b[1], &x->server), 0);
}

static int rl_proxy(void *arg) {
  rl *x = arg;
  iof_socket_stream sa, sb;
  uint64_t t0 = iof_test_now_ns();
  x->r = iof_stream_relay(iof_socket_stream_init(&sa, x->proxy_c),
                          iof_socket_stream_init(&sb, x->proxy_s), &x->opts,
                          &x->up, &x->down);
  x->ms = ms_since(t0);
  /* The proxy closes both sides when the relay is over. */
  iof_socket_close(x->proxy_c);
  iof_socket_close(x->proxy_s);
  return 0;
}

static int hc_client(void *arg) {
  rl *x = arg;
  assert_int_equal(iof_write(x->client, "request", 7), 7);
  assert_int_equal(iof_socket_shutdown(x->client, SHUT_WR), 0);
  x->reply_len = iof_read(x->client, x->reply, sizeof x->reply);
  return 0;
}

static int hc_server(void *arg) {
  rl *x = arg;
  /* Reads until the forwarded half-close, then answers. */
  x->request_len = iof_read(x->server, x->request, sizeof x->request);
  assert_int_equal(iof_write(x->server, "response", 8), 8);
  iof_socket_close(x->server);
  return 0;
}

static void relay_forwards_half_close(void **state) {
  (void)state;
  rl x;
  rl_make(&x);
  x.opts.idle_ns = 2000 * MS;
  launch(x.io, rl_proxy, &x);
  launch(x.io, hc_client, &x);
  launch(x.io, hc_server, &x);
  run_all(x.io);
  assert_int_equal(x.r, 0);
  assert_int_equal(x.request_len, 7);
  assert_memory_equal(x.request, "request", 7);
  assert_int_equal(x.reply_len, 8);
  assert_memory_equal(x.reply, "response", 8);
  assert_int_equal(x.up, 7);
  assert_int_equal(x.down, 8);
  assert_true(x.ms < 1500); /* ended by the closes, not the idle timeout */
  assert_int_equal(iof_io_context_destroy(x.io), 0);
}

static int quiet_peer(void *arg) {
  iof_socket *s = arg;
  char b[16];
  iof_read_some(s, b, sizeof b); /* ends when the proxy closes */
  return 0;
}

static void relay_idle_timeout(void **state) {
  (void)state;
  rl x;
  rl_make(&x);
  static char buf[4096];
  x.opts.buf = buf; /* the caller's buffer: no allocation at all */
  x.opts.buf_len = sizeof buf;
  x.opts.idle_ns = 60 * MS;
  launch(x.io, rl_proxy, &x);
  launch(x.io, quiet_peer, x.client);
  launch(x.io, quiet_peer, x.server);
  run_all(x.io);
  assert_int_equal(x.r, -ETIMEDOUT);
  assert_true(x.ms >= 55 && x.ms < 2000);
  assert_int_equal(x.up + x.down, 0);
  assert_int_equal(iof_io_context_destroy(x.io), 0);
}

/* One-way traffic keeps the relay alive though the other direction is
 * quiet for many idle periods. */
static int oneway_client(void *arg) {
  rl *x = arg;
  uint64_t t0 = iof_test_now_ns();
  while (ms_since(t0) < x->oneway_ms) {
    if (iof_write(x->client, "tick", 4) != 4) return -1;
    iof_sleep_for(10 * MS);
  }
  char b[16];
  iof_read_some(x->client, b, sizeof b); /* then quiet until closed */
  return 0;
}

static int sink_server(void *arg) {
  rl *x = arg;
  char b[256];
  ssize_t n;
  while ((n = iof_read_some(x->server, b, sizeof b)) > 0) x->request_len += n;
  return 0;
}

static void relay_one_way_traffic_is_not_idle(void **state) {
  (void)state;
  rl x;
  rl_make(&x);
  x.opts.idle_ns = 300 * MS; /* 30 ticks: a loaded machine stays under it */
  x.oneway_ms = 600;
  launch(x.io, rl_proxy, &x);
  launch(x.io, oneway_client, &x);
  launch(x.io, sink_server, &x);
  run_all(x.io);
  assert_int_equal(x.r, -ETIMEDOUT);
  /* The last tick leaves at 590-600 ms; the idle period counts from it. */
  if (x.ms < 590 + 295 || x.ms > 5000)
    fprintf(stderr, "relay lasted %lld ms, %llu bytes up\n", (long long)x.ms,
            (unsigned long long)x.up);
  assert_true(x.ms >= 590 + 295 && x.ms < 5000);
  assert_true(x.up >= 100); /* ~60 ticks of 4 bytes */
  assert_int_equal(x.up % 4, 0);
  assert_int_equal((uint64_t)x.request_len, x.up);
  assert_int_equal(x.down, 0);
  assert_int_equal(iof_io_context_destroy(x.io), 0);
}

static int stopper(void *arg) {
  rl *x = arg;
  iof_sleep_for(30 * MS);
  iof_stop_source_request(x->src);
  return 0;
}

static void relay_stop_request(void **state) {
  (void)state;
  rl x;
  rl_make(&x);
  iof_stop_source src;
  assert_int_equal(iof_stop_source_init(&src), 0);
  x.src = &src;
  iof_launch_opts o = {0};
  o.stop_token = iof_stop_source_token(&src);
  assert_int_equal(
      iof_run_async(iof_io_context_executor(x.io), &o, rl_proxy, &x), 0);
  launch(x.io, quiet_peer, x.client);
  launch(x.io, quiet_peer, x.server);
  launch(x.io, stopper, &x);
  run_all(x.io);
  assert_int_equal(x.r, -ECANCELED);
  iof_stop_source_destroy(&src);
  assert_int_equal(iof_io_context_destroy(x.io), 0);
}

static ssize_t bare_read(iof_stream *s, void *b, size_t n) {
  (void)s, (void)b, (void)n;
  return 0;
}
static ssize_t bare_write(iof_stream *s, const void *b, size_t n) {
  (void)s, (void)b;
  return (ssize_t)n;
}
static int bare_close(iof_stream *s) {
  (void)s;
  return 0;
}
static const iof_stream_vtbl bare_vtbl = {bare_read, bare_write, bare_close,
                                          NULL, NULL};

static int checks_fn(void *arg) {
  int *r = arg;
  iof_stream x = {&bare_vtbl}, y = {&bare_vtbl};
  iof_copy_opts o = {0};
  o.idle_ns = MS;
  uint64_t n = 99;
  r[0] = iof_stream_copy(NULL, &x, NULL, &n);
  r[1] = iof_stream_copy(&y, &x, &o, NULL);
  r[2] = iof_stream_relay(&x, &x, NULL, NULL, NULL);
  r[3] = iof_stream_relay(&x, &y, &o, NULL, NULL);
  r[4] = iof_stream_copy(&y, &x, NULL, &n); /* empty source: 0 bytes */
  r[5] = (int)n;
  r[6] = iof_stream_relay(&x, &y, NULL, NULL, NULL); /* both end at once */
  return 0;
}

static void argument_checks(void **state) {
  (void)state;
  iof_io_context *io = iof_io_context_create();
  int r[7];
  memset(r, 1, sizeof r);
  launch(io, checks_fn, r);
  run_all(io);
  assert_int_equal(r[0], -EINVAL);
  assert_int_equal(r[1], -ENOTSUP);
  assert_int_equal(r[2], -EINVAL);
  assert_int_equal(r[3], -ENOTSUP);
  assert_int_equal(r[4], 0);
  assert_int_equal(r[5], 0);
  assert_int_equal(r[6], 0);
  assert_int_equal(iof_io_context_destroy(io), 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(copy_one_mib_and_half_close, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(relay_forwards_half_close, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(relay_idle_timeout, setup, teardown),
      cmocka_unit_test_setup_teardown(relay_one_way_traffic_is_not_idle, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(relay_stop_request, setup, teardown),
      cmocka_unit_test_setup_teardown(argument_checks, setup, teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
