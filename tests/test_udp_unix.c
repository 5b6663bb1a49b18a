/* UDP and Unix domain stream sockets: a UDP round trip keeping
 * datagram boundaries and the sender's address, truncation, a recvfrom
 * that waits for its datagram, IPv6 loopback; a Unix socket round trip,
 * listen replacing a stale socket file, and bad paths and socket kinds. */
#include "test_support.h"
#include "io_test.h"

#include <iofiber/iofiber.h>

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#define MS 1000000LL

/* Per-test watchdog (support/test_support.h). */
IOF_TEST_WATCHDOG(arm_watchdog, disarm_watchdog, 60)

static unsigned char pattern(unsigned id, size_t i) {
  return (unsigned char)((i * 29u + id * 11u) & 0xff);
}

/* ---- UDP ------------------------------------------------------------------
 */

#define NDGRAMS 100

typedef struct udp_trip {
  iof_io_context *io;
  iof_socket *srv, *cli;
  struct sockaddr_storage srv_addr;
  socklen_t srv_len;
  int echoed, checked, bad;
  bool from_ok;
} udp_trip;

static bool sender_is_client(udp_trip *u, const struct sockaddr_storage *from,
                             socklen_t fl) {
  int port = iof_socket_local_port(u->cli);
  if (from->ss_family == AF_INET && fl == sizeof(struct sockaddr_in)) {
    const struct sockaddr_in *a = (const struct sockaddr_in *)from;
    return ntohl(a->sin_addr.s_addr) == INADDR_LOOPBACK &&
           ntohs(a->sin_port) == port;
  }
  if (from->ss_family == AF_INET6 && fl == sizeof(struct sockaddr_in6)) {
    const struct sockaddr_in6 *a = (const struct sockaddr_in6 *)from;
    return IN6_IS_ADDR_LOOPBACK(&a->sin6_addr) && ntohs(a->sin6_port) == port;
  }
  return false;
}

static int udp_server_fn(void *arg) {
  udp_trip *u = arg;
  unsigned char buf[2048];
  for (int i = 0; i < NDGRAMS; i++) {
    struct sockaddr_storage from;
    socklen_t fl = sizeof from;
    ssize_t n =
        iof_recvfrom(u->srv, buf, sizeof buf, (struct sockaddr *)&from, &fl);
    if (n < 0) {
      u->bad++;
      break;
    }
    /* The sender's address: loopback, the client's (auto-bound) port. */
    if (i == 0) u->from_ok = sender_is_client(u, &from, fl);
    if (iof_sendto(u->srv, buf, (size_t)n, (struct sockaddr *)&from, fl) != n)
      u->bad++;
    u->echoed++;
  }
  return 0;
}

static int udp_client_fn(void *arg) {
  udp_trip *u = arg;
  unsigned char out[2048], in[2048];
  for (int i = 0; i < NDGRAMS; i++) {
    size_t len = (size_t)(i * 37) % 1500; /* includes an empty datagram */
    for (size_t k = 0; k < len; k++) out[k] = pattern((unsigned)i, k);
    if (iof_sendto(u->cli, out, len, (struct sockaddr *)&u->srv_addr,
                   u->srv_len) != (ssize_t)len) {
      u->bad++;
      break;
    }
    /* One datagram per call: exactly len bytes back, boundaries kept. */
    ssize_t n = iof_recvfrom(u->cli, in, sizeof in, NULL, NULL);
    if (n != (ssize_t)len || memcmp(in, out, len) != 0) {
      u->bad++;
      break;
    }
    u->checked++;
  }
  return 0;
}

static void udp_trip_on(const char *host, int family) {
  udp_trip u = {0};
  u.io = iof_io_context_create();
  assert_non_null(u.io);
  assert_int_equal(iof_udp_bind(u.io, host, "0", &u.srv), 0);
  u.srv_len = sizeof u.srv_addr;
  assert_int_equal(
      iof_socket_local_addr(u.srv, (struct sockaddr *)&u.srv_addr, &u.srv_len),
      0);
  assert_int_equal(u.srv_addr.ss_family, family);
  assert_true(iof_socket_local_port(u.srv) > 0);
  assert_int_equal(iof_udp_open(u.io, family, &u.cli), 0);
  launch(u.io, udp_server_fn, &u);
  launch(u.io, udp_client_fn, &u);
  run_all(u.io);
  assert_int_equal(u.bad, 0);
  assert_int_equal(u.checked, NDGRAMS);
  assert_int_equal(u.echoed, NDGRAMS);
  assert_true(u.from_ok);
  assert_int_equal(iof_io_context_destroy(u.io), 0);
}

static void
udp_round_trip_keeps_datagrams_and_the_sender_address(void **state) {
  (void)state;
  udp_trip_on("127.0.0.1", AF_INET);
}

static void udp_round_trip_over_ipv6_loopback(void **state) {
  (void)state;
  int fd = socket(AF_INET6, SOCK_DGRAM, 0);
  struct sockaddr_in6 a = {0};
  a.sin6_family = AF_INET6;
  a.sin6_addr = in6addr_loopback;
  bool have = fd >= 0 && bind(fd, (struct sockaddr *)&a, sizeof a) == 0;
  if (fd >= 0) close(fd);
  if (!have) {
    print_message("no IPv6 loopback here: skipped\n");
    skip();
  }
  udp_trip_on("::1", AF_INET6);
}

typedef struct udp_wait {
  iof_socket *a, *b;
  struct sockaddr_storage a_addr;
  socklen_t a_len;
  ssize_t r_trunc, r_waited;
  int64_t waited_ns;
  char buf[16];
} udp_wait;

static int udp_trunc_fn(void *arg) {
  udp_wait *u = arg;
  char big[100];
  memset(big, 'x', sizeof big);
  iof_sendto(u->b, big, sizeof big, (struct sockaddr *)&u->a_addr, u->a_len);
  u->r_trunc = iof_recvfrom(u->a, u->buf, 10, NULL, NULL);
  int64_t t0 = iof_now_ns();
  u->r_waited = iof_recvfrom(u->a, u->buf, sizeof u->buf, NULL, NULL);
  u->waited_ns = iof_now_ns() - t0;
  return 0;
}

static int udp_late_sender_fn(void *arg) {
  udp_wait *u = arg;
  iof_sleep_for(30 * MS);
  iof_sendto(u->b, "late", 4, (struct sockaddr *)&u->a_addr, u->a_len);
  return 0;
}

static void udp_recvfrom_truncates_and_waits_for_a_datagram(void **state) {
  (void)state;
  iof_io_context *io = iof_io_context_create();
  assert_non_null(io);
  udp_wait u = {0};
  assert_int_equal(iof_udp_bind(io, "127.0.0.1", "0", &u.a), 0);
  assert_int_equal(iof_udp_open(io, AF_INET, &u.b), 0);
  u.a_len = sizeof u.a_addr;
  assert_int_equal(
      iof_socket_local_addr(u.a, (struct sockaddr *)&u.a_addr, &u.a_len), 0);
  launch(io, udp_trunc_fn, &u);
  launch(io, udp_late_sender_fn, &u);
  run_all(io);
  assert_int_equal(u.r_trunc, 10);
  assert_int_equal(u.r_waited, 4);
  assert_memory_equal(u.buf, "late", 4);
  assert_true(u.waited_ns >= 25 * MS);
  assert_int_equal(iof_io_context_destroy(io), 0);
}

typedef struct kinds {
  iof_socket *stream, *dgram;
  ssize_t recv_on_stream, send_on_stream, from_no_len;
} kinds;

static int kinds_fn(void *arg) {
  kinds *k = arg;
  char buf[8];
  struct sockaddr_storage from;
  k->recv_on_stream = iof_recvfrom(k->stream, buf, sizeof buf, NULL, NULL);
  k->send_on_stream = iof_sendto(k->stream, "x", 1, NULL, 0);
  k->from_no_len =
      iof_recvfrom(k->dgram, buf, sizeof buf, (struct sockaddr *)&from, NULL);
  return 0;
}

static void
udp_calls_on_a_stream_socket_and_bad_arguments_are_einval(void **state) {
  (void)state;
  iof_io_context *io = iof_io_context_create();
  assert_non_null(io);
  iof_socket *s;
  assert_int_equal(iof_udp_open(io, AF_UNIX, &s), -EINVAL);
  assert_int_equal(iof_udp_open(NULL, AF_INET, &s), -EINVAL);
  assert_int_equal(iof_udp_open(io, AF_INET, NULL), -EINVAL);
  assert_int_equal(iof_udp_bind(io, "127.0.0.1", NULL, &s), -EINVAL);
  kinds k = {0};
  int sv[2];
  assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
  assert_int_equal(iof_socket_adopt(io, sv[0], &k.stream), 0);
  assert_int_equal(iof_udp_open(io, AF_INET, &k.dgram), 0);
  launch(io, kinds_fn, &k);
  run_all(io);
  assert_int_equal(k.recv_on_stream, -EINVAL);
  assert_int_equal(k.send_on_stream, -EINVAL);
  assert_int_equal(k.from_no_len, -EINVAL);
  close(sv[1]);
  assert_int_equal(iof_io_context_destroy(io), 0);
}

/* ---- Unix domain stream sockets ----------------------------------------- */

#define UBYTES (1u << 20)

typedef struct unix_trip {
  iof_io_context *io;
  char dir[64], path[128];
  iof_socket *lst;
  int accept_r, connect_r;
  ssize_t srv_read, srv_wrote, cli_wrote, cli_read;
  unsigned char *a, *b, *back;
} unix_trip;

static int unix_server_fn(void *arg) {
  unix_trip *u = arg;
  iof_socket *c = NULL;
  u->accept_r = iof_accept(u->lst, &c, NULL, NULL);
  if (u->accept_r) return 0;
  unsigned char *buf = malloc(UBYTES);
  if (buf) {
    u->srv_read = iof_read(c, buf, UBYTES);
    if (u->srv_read == UBYTES && memcmp(buf, u->a, UBYTES) != 0)
      u->srv_read = -1;
    u->srv_wrote = iof_write(c, u->b, UBYTES);
    free(buf);
  }
  iof_socket_free(c);
  return 0;
}

static int unix_client_fn(void *arg) {
  unix_trip *u = arg;
  iof_socket *s = NULL;
  u->connect_r = iof_unix_connect(u->io, u->path, &s);
  if (u->connect_r) return 0;
  u->cli_wrote = iof_write(s, u->a, UBYTES);
  u->cli_read = iof_read(s, u->back, UBYTES);
  iof_socket_free(s);
  return 0;
}

static void unix_socket_round_trip_moves_checked_data_both_ways(void **state) {
  (void)state;
  unix_trip u = {0};
  u.io = iof_io_context_create();
  assert_non_null(u.io);
  strcpy(u.dir, "/tmp/iof_unix_XXXXXX");
  assert_non_null(mkdtemp(u.dir));
  snprintf(u.path, sizeof u.path, "%s/s", u.dir);
  assert_int_equal(iof_unix_listen(u.io, u.path, 0, &u.lst), 0);
  u.a = malloc(UBYTES);
  u.b = malloc(UBYTES);
  u.back = malloc(UBYTES);
  assert_non_null(u.a);
  assert_non_null(u.b);
  assert_non_null(u.back);
  for (size_t i = 0; i < UBYTES; i++) {
    u.a[i] = pattern(1, i);
    u.b[i] = pattern(2, i);
  }
  launch(u.io, unix_server_fn, &u);
  launch(u.io, unix_client_fn, &u);
  run_all(u.io);
  assert_int_equal(u.accept_r, 0);
  assert_int_equal(u.connect_r, 0);
  assert_int_equal(u.cli_wrote, UBYTES);
  assert_int_equal(u.srv_read, UBYTES);
  assert_int_equal(u.srv_wrote, UBYTES);
  assert_int_equal(u.cli_read, UBYTES);
  assert_memory_equal(u.back, u.b, UBYTES);
  free(u.a);
  free(u.b);
  free(u.back);
  assert_int_equal(iof_socket_free(u.lst), 0);
  assert_int_equal(iof_io_context_destroy(u.io), 0);
  unlink(u.path);
  rmdir(u.dir);
}

typedef struct unix_bad {
  iof_io_context *io;
  const char *missing, *stale, *toolong;
  int r_missing, r_stale, r_toolong, r_empty, r_null;
} unix_bad;

static int unix_bad_fn(void *arg) {
  unix_bad *b = arg;
  iof_socket *s = NULL;
  b->r_missing = iof_unix_connect(b->io, b->missing, &s);
  b->r_stale = iof_unix_connect(b->io, b->stale, &s);
  b->r_toolong = iof_unix_connect(b->io, b->toolong, &s);
  b->r_empty = iof_unix_connect(b->io, "", &s);
  b->r_null = iof_unix_connect(b->io, NULL, &s);
  return 0;
}

static void unix_listen_replaces_a_stale_file_and_bad_paths_fail(void **state) {
  (void)state;
  iof_io_context *io = iof_io_context_create();
  assert_non_null(io);
  char dir[64], path[128], missing[128], toolong[200];
  strcpy(dir, "/tmp/iof_unix_XXXXXX");
  assert_non_null(mkdtemp(dir));
  snprintf(path, sizeof path, "%s/s", dir);
  snprintf(missing, sizeof missing, "%s/nobody", dir);
  memset(toolong, 'p', sizeof toolong - 1);
  toolong[0] = '/';
  toolong[sizeof toolong - 1] = 0;
  iof_socket *l;
  assert_int_equal(iof_unix_listen(io, path, 0, &l), 0);
  assert_int_equal(iof_socket_free(l), 0);
  struct stat st;
  assert_int_equal(stat(path, &st), 0); /* the file stays behind */
  assert_true(S_ISSOCK(st.st_mode));
  /* A stale socket file: connect is refused, listen replaces it. */
  unix_bad b = {io, missing, path, toolong, 0, 0, 0, 0, 0};
  launch(io, unix_bad_fn, &b);
  run_all(io);
  assert_int_equal(b.r_missing, -ENOENT);
  assert_int_equal(b.r_stale, -ECONNREFUSED);
  assert_int_equal(b.r_toolong, -ENAMETOOLONG);
  assert_int_equal(b.r_empty, -EINVAL);
  assert_int_equal(b.r_null, -EINVAL);
  assert_int_equal(iof_unix_listen(io, path, 0, &l), 0);
  assert_int_equal(iof_unix_listen(io, toolong, 0, &l), -ENAMETOOLONG);
  assert_int_equal(iof_unix_listen(io, "", 0, &l), -EINVAL);
  /* A regular file in the way is not replaced. */
  assert_int_equal(iof_unix_listen(io, missing, 0, &l), 0);
  assert_int_equal(iof_socket_free(l), 0);
  unlink(missing);
  FILE *f = fopen(missing, "w");
  assert_non_null(f);
  fclose(f);
  assert_int_equal(iof_unix_listen(io, missing, 0, &l), -EADDRINUSE);
  assert_int_equal(stat(missing, &st), 0);
  assert_true(S_ISREG(st.st_mode));
  assert_int_equal(iof_io_context_destroy(io), 0); /* frees the listener */
  unlink(missing);
  unlink(path);
  rmdir(dir);
}

#define T(f) cmocka_unit_test_setup_teardown(f, arm_watchdog, disarm_watchdog)

int main(void) {
  const struct CMUnitTest tests[] = {
      T(udp_round_trip_keeps_datagrams_and_the_sender_address),
      T(udp_round_trip_over_ipv6_loopback),
      T(udp_recvfrom_truncates_and_waits_for_a_datagram),
      T(udp_calls_on_a_stream_socket_and_bad_arguments_are_einval),
      T(unix_socket_round_trip_moves_checked_data_both_ways),
      T(unix_listen_replaces_a_stale_file_and_bad_paths_fail),
  };
  if (getenv("IOF_TEST_FILTER"))
    cmocka_set_test_filter(getenv("IOF_TEST_FILTER"));
  return cmocka_run_group_tests(tests, NULL, NULL);
}
