/* Hostile calls into io/: io_context, timers, resolver, signals, sockets,
 * streams, readers, deadlines and error texts fed NULLs, out-of-range
 * values, closed objects, absurd sizes and the wrong context. Each call
 * must give its documented error and leave the objects usable.
 *
 * IOF_TEST_THREADED: calls from a thread that does not run the context,
 * resolutions in flight at destroy. */
#include "test_support.h"
#include "io_test.h"

#include <iofiber/iofiber.h>

#include <errno.h>
#include <ev.h>
#include <fcntl.h>
#include <limits.h>
#include <arpa/inet.h>
#include <netdb.h>
#include <poll.h>
#include <sys/epoll.h>
#include <sys/mman.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/un.h>
#include <unistd.h>

#define MS 1000000LL

static atomic_int failures;
static int trace; /* HOSTILE_TRACE=1: print each check's line first */
#define CHECK_EQ(a, b)                                                         \
  do {                                                                         \
    if (trace) fprintf(stderr, "line %d\n", __LINE__);                         \
    long long va_ = (long long)(a), vb_ = (long long)(b);                      \
    if (va_ != vb_) {                                                          \
      atomic_fetch_add(&failures, 1);                                          \
      fprintf(stderr, "%s:%d: %s = %lld, expected %lld\n", __FILE__, __LINE__, \
              #a, va_, vb_);                                                   \
    }                                                                          \
  } while (0)
#define CHECK(c) CHECK_EQ(!!(c), 1)

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

typedef struct ctx {
  iof_io_context *io;
  iof_socket *a, *b; /* a connected TCP pair */
  int step;
} ctx;

static void in_fiber(iof_fn fn, void *arg) {
  iof_io_context *io = iof_io_context_create();
  assert_non_null(io);
  ctx *c = arg;
  c->io = io;
  launch(io, fn, arg);
  run_all(io);
  assert_int_equal(iof_io_context_destroy(io), 0);
  assert_int_equal(atomic_load(&failures), 0);
}

/* A connected pair inside a fiber. */
static void make_pair(ctx *c) {
  iof_socket *l = NULL;
  CHECK_EQ(iof_tcp_listen(c->io, "127.0.0.1", "0", 0, 0, &l), 0);
  char port[16];
  snprintf(port, sizeof port, "%d", iof_socket_local_port(l));
  CHECK_EQ(iof_tcp_connect(c->io, "127.0.0.1", port, &c->a), 0);
  CHECK_EQ(iof_accept(l, &c->b, NULL, NULL), 0);
  CHECK_EQ(iof_socket_free(l), 0);
}

/* ---- errors ----------------------------------------------------------- */

static void strerror_any_int(void **state) {
  (void)state;
  int codes[] = {0,       INT_MIN, INT_MIN + 1,    INT_MAX,
                 -4096,   -4095,   4096,           -3000,
                 -3099,   -3050,   -3100,          -2999,
                 -EINVAL, EINVAL,  IOF_EAI_NONAME, IOF_EAI_OVERFLOW};
  for (size_t i = 0; i < sizeof codes / sizeof codes[0]; i++) {
    const char *s = iof_strerror(codes[i]);
    assert_non_null(s);
    assert_true(strlen(s) > 0);
  }
  assert_string_equal(iof_strerror(INT_MIN), "unknown error");
  assert_string_equal(iof_strerror(-3050), "unknown error");
  assert_int_equal(iof_gai_error(0, 0), 0);
  assert_int_equal(iof_gai_error(EAI_SYSTEM, 0), -EIO);
  assert_int_equal(iof_gai_error(EAI_SYSTEM, -5), -EIO);
  assert_int_equal(iof_gai_error(EAI_SYSTEM, INT_MIN), -EIO);
  assert_int_equal(iof_gai_error(EAI_SYSTEM, ENOENT), -ENOENT);
  assert_true(iof_gai_error(123456, 0) < 0);
  assert_true(iof_gai_error(INT_MIN, INT_MIN) < 0);
}

/* ---- io_context ------------------------------------------------------- */

static void io_context_null_and_limits(void **state) {
  (void)state;
  assert_int_equal(iof_io_context_destroy(NULL), -EINVAL);
  assert_true(iof_executor_empty(iof_io_context_executor(NULL)));
  assert_null(iof_io_context_context(NULL));
  assert_null(iof_io_context_loop(NULL));
  assert_int_equal(iof_io_context_run(NULL), -EINVAL);
  assert_int_equal(iof_io_context_run_one(NULL), -EINVAL);
  assert_int_equal(iof_io_context_poll(NULL), -EINVAL);
  assert_int_equal(iof_io_context_run_for(NULL, 1), -EINVAL);
  iof_io_context_stop(NULL);
  iof_io_context_restart(NULL);
  assert_false(iof_io_context_stopped(NULL));
  errno = 0;
  assert_null(iof_io_context_attach(NULL));
  assert_int_equal(errno, EINVAL);

  iof_io_context *io = iof_io_context_create();
  assert_non_null(io);
  assert_int_equal(iof_io_context_run_for(io, INT64_MIN), 0);
  assert_int_equal(iof_io_context_run_for(io, INT64_MAX), 0); /* no work */
  assert_int_equal(iof_io_context_run_for(io, 0), 0);
  iof_io_context_stop(io);
  iof_io_context_stop(io);
  assert_true(iof_io_context_stopped(io));
  iof_io_context_restart(io);
  assert_int_equal(iof_io_context_destroy(io), 0);
}

static int nested_run(void *arg) {
  ctx *c = arg;
  CHECK_EQ(iof_io_context_run(c->io), -EBUSY);
  CHECK_EQ(iof_io_context_run_one(c->io), -EBUSY);
  CHECK_EQ(iof_io_context_poll(c->io), -EBUSY);
  CHECK_EQ(iof_io_context_run_for(c->io, MS), -EBUSY);
  CHECK_EQ(iof_io_context_destroy(c->io), -EBUSY);
  return 0;
}

static int nested_run_then_sleep(void *arg) {
  ctx *c = arg;
  (void)nested_run(arg);
  CHECK_EQ(iof_sleep_for(MS), 0); /* the host's loop still runs it */
  c->step++;
  return 0;
}

static void io_context_reentry_is_ebusy(void **state) {
  (void)state;
  ctx c = {0};
  in_fiber(nested_run, &c);
  /* On a host's loop (attach), whose batches run in its callbacks: the
   * nested run waited for the caller's own chain (a hang). */
  struct ev_loop *host = ev_loop_new(0);
  assert_non_null(host);
  c.io = iof_io_context_attach(host);
  assert_non_null(c.io);
  launch(c.io, nested_run_then_sleep, &c);
  ev_run(host, 0);
  assert_int_equal(c.step, 1);
  assert_int_equal(iof_io_context_destroy(c.io), 0);
  ev_loop_destroy(host);
  assert_int_equal(atomic_load(&failures), 0);
}

/* The same calls from inside destroy's drain: from a fiber cancelled by
 * the shutdown and from its on_done. A nested run there waited for the
 * caller's own chain to end (a hang); a nested destroy found it still
 * counted. */
static int sleep_then_nested_run(void *arg) {
  ctx *c = arg;
  CHECK_EQ(iof_sleep_for(INT64_MAX), -ECANCELED);
  c->step++;
  return nested_run(arg);
}

static void nested_run_on_done(void *user, int status) {
  CHECK_EQ(status, 0);
  (void)nested_run(user);
  ((ctx *)user)->step++;
}

static void destroy_reentry_is_ebusy(void **state) {
  (void)state;
  ctx c = {0};
  c.io = iof_io_context_create();
  assert_non_null(c.io);
  iof_launch_opts o = {0};
  o.on_done = nested_run_on_done;
  o.user = &c;
  assert_int_equal(iof_run_async(iof_io_context_executor(c.io), &o,
                                 sleep_then_nested_run, &c),
                   0);
  assert_int_equal(iof_io_context_run_for(c.io, 10 * MS), 1);
  assert_int_equal(iof_io_context_destroy(c.io), 0);
  assert_int_equal(c.step, 2);
  assert_int_equal(atomic_load(&failures), 0);
}

/* A service's destroy runs after destroy's drain, on the destroying
 * thread with no fiber running: it may still use the context's sockets
 * (here: a limit change, which enters the context), as outside a run. */
typedef struct sock_svc {
  iof_service base;
  iof_socket *sock;
} sock_svc;
static iof_socket *svc_sock;
static int svc_destroy_rc = 1;

static iof_service *sock_svc_create(iof_execution_context *ctx) {
  (void)ctx;
  sock_svc *s = calloc(1, sizeof *s);
  if (s) s->sock = svc_sock;
  return s ? &s->base : NULL;
}

static void sock_svc_destroy(iof_service *svc) {
  sock_svc *s = (sock_svc *)svc;
  svc_destroy_rc = iof_socket_set_deadline(s->sock, IOF_READ, 1);
  iof_socket_free(s->sock);
  free(s);
}

static const iof_service_key sock_svc_key = {"sock_svc", sock_svc_create, NULL,
                                             sock_svc_destroy};

static void service_destroy_uses_sockets(void **state) {
  (void)state;
  iof_io_context *io = iof_io_context_create();
  assert_non_null(io);
  assert_int_equal(iof_tcp_listen(io, "127.0.0.1", "0", 0, 0, &svc_sock), 0);
  assert_non_null(iof_use_service(iof_io_context_context(io), &sock_svc_key));
  svc_destroy_rc = 1;
  assert_int_equal(iof_io_context_destroy(io), 0);
  assert_int_equal(svc_destroy_rc, 0);
}

/* ---- timers ----------------------------------------------------------- */

static int timer_fn(void *arg) {
  ctx *c = arg;
  CHECK_EQ(iof_sleep_for(INT64_MIN), 0);
  CHECK_EQ(iof_sleep_for(-1), 0);
  CHECK_EQ(iof_sleep_until(INT64_MIN), 0);
  CHECK_EQ(iof_sleep_until(0), 0);
  CHECK_EQ(iof_timer_wait(NULL), -EINVAL);
  iof_timer *t = iof_timer_create(c->io);
  CHECK(t != NULL);
  CHECK_EQ(iof_timer_expires_after(t, INT64_MIN), 0);
  CHECK_EQ(iof_timer_wait(t), 0);
  CHECK_EQ(iof_timer_expires_at(t, INT64_MIN), 0);
  CHECK_EQ(iof_timer_wait(t), 0);
  /* Far away: must not wrap into the past. */
  CHECK_EQ(iof_timer_expires_after(t, INT64_MAX), 0);
  CHECK(iof_timer_expiry(t) > iof_now_ns());
  CHECK_EQ(iof_timer_expires_at(t, INT64_MAX), 0);
  CHECK(iof_timer_expiry(t) > iof_now_ns());
  CHECK_EQ(iof_timer_destroy(t), 0);
  return 0;
}

static void timer_bad_arguments(void **state) {
  (void)state;
  assert_true(iof_now_ns() > 0);
  assert_int_equal(iof_sleep_for(1), -EPERM);
  assert_int_equal(iof_sleep_until(INT64_MAX), -EPERM);
  errno = 0;
  assert_null(iof_timer_create(NULL));
  assert_int_equal(errno, EINVAL);
  assert_int_equal(iof_timer_destroy(NULL), -EINVAL);
  assert_int_equal(iof_timer_expires_after(NULL, 1), -EINVAL);
  assert_int_equal(iof_timer_expires_at(NULL, 1), -EINVAL);
  assert_int_equal(iof_timer_cancel(NULL), -EINVAL);
  assert_int_equal(iof_timer_expiry(NULL), 0);
  iof_io_context *io = iof_io_context_create();
  iof_timer *t = iof_timer_create(io);
  assert_non_null(t);
  assert_int_equal(iof_timer_wait(t), -EPERM);
  assert_int_equal(iof_timer_cancel(t), 0);
  assert_int_equal(iof_timer_destroy(t), 0);
  assert_int_equal(iof_io_context_destroy(io), 0);
  ctx c = {0};
  in_fiber(timer_fn, &c);
}

/* A wait woken by a cancel or a new expiry has left the timer's queue but
 * still disarms on the timer once its fiber runs: destroy in between is
 * -EBUSY (it used to free the timer, and the waiter then locked freed
 * memory and stopped a libev watcher inside it). */
typedef struct tleave {
  iof_timer *t;
  int how, waited, busy_rc, later_rc;
} tleave;

static int tleave_waiter(void *arg) {
  tleave *l = arg;
  l->waited = iof_timer_wait(l->t);
  return 0;
}

static int tleave_main(void *arg) {
  tleave *l = arg;
  CHECK_EQ(iof_timer_expires_after(l->t, 60000 * MS), 0);
  CHECK_EQ(iof_launch(iof_env_current()->executor, tleave_waiter, l), 0);
  for (int i = 0; i < 3; i++) iof_yield(); /* it waits */
  CHECK_EQ(l->waited, 1);
  if (l->how == 0)
    CHECK_EQ(iof_timer_cancel(l->t), 1);
  else
    CHECK_EQ(iof_timer_expires_at(l->t, INT64_MAX), 1);
  l->busy_rc = iof_timer_destroy(l->t);
  if (l->busy_rc == 0) return 0; /* freed: the waiter now touches it */
  for (int i = 0; i < 3 && l->waited == 1; i++) iof_yield();
  CHECK_EQ(l->waited, -ECANCELED);
  l->later_rc = iof_timer_destroy(l->t);
  return 0;
}

static void timer_destroy_while_a_woken_waiter_leaves_is_ebusy(void **state) {
  (void)state;
  for (int how = 0; how < 2; how++) {
    iof_io_context *io = iof_io_context_create();
    assert_non_null(io);
    tleave l = {iof_timer_create(io), how, 1, 1, 1};
    assert_non_null(l.t);
    launch(io, tleave_main, &l);
    run_all(io);
    assert_int_equal(l.busy_rc, -EBUSY);
    assert_int_equal(l.later_rc, 0);
    assert_int_equal(iof_io_context_destroy(io), 0);
    assert_int_equal(atomic_load(&failures), 0);
  }
}

/* A sleep of INT64_MAX is cancelled by a stop, not turned into 0. */
static int long_sleep(void *arg) {
  int *r = arg;
  *r = iof_sleep_for(INT64_MAX);
  return 0;
}

static void huge_sleep_is_a_long_sleep(void **state) {
  (void)state;
  iof_io_context *io = iof_io_context_create();
  iof_stop_source src;
  assert_int_equal(iof_stop_source_init(&src), 0);
  iof_launch_opts o = {0};
  o.stop_token = iof_stop_source_token(&src);
  int r = 1;
  assert_int_equal(
      iof_run_async(iof_io_context_executor(io), &o, long_sleep, &r), 0);
  assert_int_equal(iof_io_context_run_for(io, 30 * MS), 0 + 1);
  assert_int_equal(r, 1); /* still asleep */
  iof_stop_source_request(&src);
  run_all(io);
  assert_int_equal(r, -ECANCELED);
  iof_stop_source_destroy(&src);
  assert_int_equal(iof_io_context_destroy(io), 0);
}

/* ---- resolver and signals --------------------------------------------- */

static int resolve_fn(void *arg) {
  ctx *c = arg;
  struct addrinfo *res = NULL;
  CHECK_EQ(iof_resolve(NULL, "127.0.0.1", "80", NULL, &res), -EINVAL);
  CHECK_EQ(iof_resolve(c->io, "127.0.0.1", "80", NULL, NULL), -EINVAL);
  CHECK(iof_resolve(c->io, NULL, NULL, NULL, &res) < 0);
  CHECK_EQ(iof_resolve(c->io, "127.0.0.1", "99999999999999999999", NULL, &res),
           -EINVAL);
  CHECK_EQ(iof_resolve(c->io, "127.0.0.1", "-1", NULL, &res), -EINVAL);
  char *big = malloc(100000);
  memset(big, 'a', 99999);
  big[99999] = '\0';
  CHECK(iof_resolve(c->io, big, "80", NULL, &res) < 0);
  CHECK(iof_resolve(c->io, "127.0.0.1", big, NULL, &res) < 0);
  free(big);
  struct addrinfo h = {0};
  h.ai_family = 12345;
  CHECK(IOF_IS_EAI(iof_resolve(c->io, "127.0.0.1", "80", &h, &res)));
  h.ai_family = 0;
  h.ai_flags = 0x7fffffff;
  CHECK(iof_resolve(c->io, "127.0.0.1", "80", &h, &res) < 0);

  /* 32 and 33 (below SIGRTMIN) are the C library's own: no handler can
   * be installed, a wait on them would never end. */
  int bad[] = {0,       -1,      65,     1000,   INT_MAX, INT_MIN, SIGKILL,
               SIGSTOP, SIGSEGV, SIGBUS, SIGILL, SIGFPE,  32,      33};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
    CHECK_EQ(iof_signal_wait(c->io, bad[i]), -EINVAL);
  CHECK_EQ(iof_signal_wait(NULL, SIGUSR1), -EINVAL);
  return 0;
}

static void resolver_and_signal_bad_arguments(void **state) {
  (void)state;
  iof_io_context *io = iof_io_context_create();
  struct addrinfo *res = NULL;
  assert_int_equal(iof_resolve(io, "127.0.0.1", "80", NULL, &res), -EPERM);
  assert_int_equal(iof_signal_wait(io, SIGUSR1), -EPERM);
  assert_int_equal(iof_io_context_destroy(io), 0);
  ctx c = {0};
  in_fiber(resolve_fn, &c);
}

/* ---- sockets ---------------------------------------------------------- */

static void socket_calls_outside_fibers(void **state) {
  (void)state;
  iof_io_context *io = iof_io_context_create();
  iof_socket *s = NULL;
  assert_int_equal(iof_tcp_listen(NULL, NULL, "0", 0, 0, &s), -EINVAL);
  assert_int_equal(iof_tcp_listen(io, NULL, "0", 0, 0, NULL), -EINVAL);
  assert_int_equal(iof_tcp_listen(io, NULL, NULL, 0, 0, &s), -EINVAL);
  assert_int_equal(iof_tcp_listen(io, NULL, "65536", 0, 0, &s), -EINVAL);
  assert_int_equal(iof_tcp_listen(io, NULL, "0", 0, 0x7ff0, &s), -EINVAL);
  assert_int_equal(iof_tcp_listen(io, NULL, "0", 0, -1, &s), -EINVAL);
  assert_true(iof_tcp_listen(io, "999.999.999.999", "0", 0, 0, &s) < 0);
  assert_int_equal(iof_tcp_listen_addr(io, NULL, 16, 0, 0, &s), -EINVAL);
  struct sockaddr_in sin = {0};
  sin.sin_family = AF_INET;
  sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  assert_int_equal(
      iof_tcp_listen_addr(io, (struct sockaddr *)&sin, 0, 0, 0, &s), -EINVAL);
  assert_int_equal(
      iof_tcp_listen_addr(io, (struct sockaddr *)&sin, sizeof sin, 0, 0, NULL),
      -EINVAL);
  /* Extreme backlogs are clamped. */
  assert_int_equal(iof_tcp_listen(io, "127.0.0.1", "0", INT_MAX, 0, &s), 0);
  assert_int_equal(iof_socket_free(s), 0);
  assert_int_equal(iof_tcp_listen(io, "127.0.0.1", "0", INT_MIN, 0, &s), 0);

  /* Listener misuse and calls that need a fiber. */
  char buf[8];
  assert_int_equal(iof_read_some(s, buf, 8), -EINVAL);
  assert_int_equal(iof_write_some(s, buf, 8), -EINVAL);
  iof_socket *got = NULL;
  assert_int_equal(iof_accept(s, &got, NULL, NULL), -EPERM);
  assert_int_equal(iof_accept(NULL, &got, NULL, NULL), -EINVAL);
  assert_int_equal(iof_accept(s, NULL, NULL, NULL), -EINVAL);
  assert_int_equal(iof_socket_shutdown(s, 99), -EINVAL);
  assert_int_equal(iof_socket_shutdown(s, -1), -EINVAL);
  assert_int_equal(iof_socket_set_deadline(s, 0, 1), -EINVAL);
  assert_int_equal(iof_socket_set_deadline(s, 4, 1), -EINVAL);
  assert_int_equal(iof_socket_set_deadline(s, -1, 1), -EINVAL);
  assert_int_equal(iof_socket_set_timeout(s, INT_MAX, 1), -EINVAL);
  assert_int_equal(iof_socket_deadline(s, 0), 0);
  assert_int_equal(iof_socket_timeout(s, 3), 0);
  assert_int_equal(iof_socket_set_deadline(s, IOF_READ, INT64_MIN), 0);
  assert_int_equal(iof_socket_deadline(s, IOF_READ), 0);
  assert_int_equal(iof_socket_set_timeout(s, IOF_WRITE, INT64_MAX), 0);
  assert_int_equal(iof_socket_timeout(s, IOF_WRITE), INT64_MAX);
  struct sockaddr_storage ss;
  socklen_t sl = sizeof ss;
  assert_int_equal(iof_socket_local_addr(s, NULL, &sl), -EINVAL);
  assert_int_equal(iof_socket_local_addr(s, (struct sockaddr *)&ss, NULL),
                   -EINVAL);
  assert_int_equal(iof_socket_local_addr(NULL, (struct sockaddr *)&ss, &sl),
                   -EINVAL);

  /* Closed: every call -EBADF, close again harmless. */
  assert_int_equal(iof_socket_close(s), 0);
  assert_int_equal(iof_socket_close(s), 0);
  assert_int_equal(iof_socket_fd(s), -EBADF);
  assert_int_equal(iof_read_some(s, buf, 8), -EBADF);
  assert_int_equal(iof_write(s, buf, 8), -EBADF);
  assert_int_equal(iof_accept(s, &got, NULL, NULL), -EBADF);
  assert_int_equal(iof_socket_shutdown(s, SHUT_RDWR), -EBADF);
  assert_int_equal(iof_socket_set_nodelay(s, true), -EBADF);
  assert_int_equal(iof_socket_set_keepalive(s, true), -EBADF);
  assert_int_equal(iof_socket_set_deadline(s, IOF_READ, 1), -EBADF);
  assert_int_equal(iof_socket_local_port(s), -EBADF);
  assert_ptr_equal(iof_socket_io_context(s), io);
  assert_int_equal(iof_socket_free(s), 0);

  /* NULL everywhere. */
  assert_int_equal(iof_socket_close(NULL), -EINVAL);
  assert_int_equal(iof_socket_free(NULL), -EINVAL);
  assert_int_equal(iof_socket_fd(NULL), -EINVAL);
  assert_null(iof_socket_io_context(NULL));
  assert_int_equal(iof_socket_local_port(NULL), -EINVAL);
  assert_int_equal(iof_socket_set_nodelay(NULL, true), -EINVAL);
  assert_int_equal(iof_socket_set_keepalive(NULL, true), -EINVAL);
  assert_int_equal(iof_socket_set_deadline(NULL, IOF_READ, 1), -EINVAL);
  assert_int_equal(iof_socket_set_timeout(NULL, IOF_READ, 1), -EINVAL);
  assert_int_equal(iof_socket_deadline(NULL, IOF_READ), 0);
  assert_int_equal(iof_socket_timeout(NULL, IOF_READ), 0);
  assert_int_equal(iof_socket_shutdown(NULL, SHUT_RD), -EINVAL);
  assert_int_equal(iof_read_some(NULL, buf, 1), -EINVAL);
  assert_int_equal(iof_write_some(NULL, buf, 1), -EINVAL);
  assert_int_equal(iof_read(NULL, buf, 1), -EINVAL);
  assert_int_equal(iof_write(NULL, buf, 1), -EINVAL);
  struct iovec iov = {buf, 1};
  assert_int_equal(iof_readv(NULL, &iov, 1), -EINVAL);
  assert_int_equal(iof_writev(NULL, &iov, 1), -EINVAL);
  assert_int_equal(iof_sendto(NULL, buf, 1, NULL, 0), -EINVAL);
  assert_int_equal(iof_recvfrom(NULL, buf, 1, NULL, NULL), -EINVAL);

  /* Adopt and creation arguments. */
  assert_int_equal(iof_socket_adopt(io, -1, &s), -EBADF);
  assert_int_equal(iof_socket_adopt(io, INT_MAX, &s), -EBADF);
  assert_int_equal(iof_socket_adopt(io, INT_MIN, &s), -EBADF);
  assert_int_equal(iof_socket_adopt(NULL, 0, &s), -EINVAL);
  int p[2];
  assert_int_equal(pipe(p), 0);
  assert_int_equal(iof_socket_adopt(io, p[0], NULL), -EINVAL);
  close(p[0]);
  close(p[1]);
  assert_int_equal(iof_udp_open(io, AF_UNIX, &s), -EINVAL);
  assert_int_equal(iof_udp_open(io, 12345, &s), -EINVAL);
  assert_int_equal(iof_udp_open(io, -1, &s), -EINVAL);
  assert_int_equal(iof_udp_open(NULL, AF_INET, &s), -EINVAL);
  assert_int_equal(iof_udp_open(io, AF_INET, NULL), -EINVAL);
  assert_int_equal(iof_udp_bind(NULL, NULL, "0", &s), -EINVAL);
  assert_int_equal(iof_udp_bind(io, NULL, "0", NULL), -EINVAL);
  assert_int_equal(iof_udp_bind(io, NULL, "65536", &s), -EINVAL);
  assert_int_equal(iof_unix_listen(io, NULL, 0, &s), -EINVAL);
  assert_int_equal(iof_unix_listen(io, "", 0, &s), -EINVAL);
  assert_int_equal(iof_unix_listen(NULL, "/tmp/x", 0, &s), -EINVAL);
  char longpath[300];
  memset(longpath, 'p', sizeof longpath - 1);
  longpath[0] = '/';
  longpath[sizeof longpath - 1] = '\0';
  assert_int_equal(iof_unix_listen(io, longpath, 0, &s), -ENAMETOOLONG);
  /* A path without a terminator, ending where the memory does: refused as
   * too long after sizeof sun_path bytes (strlen ran into the unmapped
   * page). */
  char *raw = iof_test_unterminated(200, 'p');
  assert_non_null(raw);
  raw[0] = '/';
  assert_int_equal(iof_unix_listen(io, raw, 0, &s), -ENAMETOOLONG);
  assert_int_equal(iof_unix_connect(io, raw, &s), -ENAMETOOLONG);
  iof_test_unterminated_free(raw, 200);
  assert_int_equal(iof_unix_connect(io, NULL, &s), -EINVAL);
  assert_int_equal(iof_wait_readable(NULL, 0, 0), -EINVAL);
  assert_int_equal(iof_wait_writable(NULL, 0, 0), -EINVAL);
  assert_int_equal(iof_io_context_destroy(io), 0);
}

static int socket_fiber_fn(void *arg) {
  ctx *c = arg;
  iof_socket *s = NULL;
  make_pair(c);
  char buf[64] = "hello";
  /* Creation arguments from a fiber. */
  CHECK_EQ(iof_tcp_connect(NULL, "127.0.0.1", "1", &s), -EINVAL);
  CHECK_EQ(iof_tcp_connect(c->io, "127.0.0.1", "1", NULL), -EINVAL);
  CHECK_EQ(iof_tcp_connect(c->io, "127.0.0.1", NULL, &s), -EINVAL);
  CHECK_EQ(iof_tcp_connect(c->io, "127.0.0.1", "65536", &s), -EINVAL);
  CHECK_EQ(iof_tcp_connect_addr(c->io, NULL, 16, &s), -EINVAL);
  struct sockaddr_in sin = {0};
  sin.sin_family = AF_INET;
  CHECK_EQ(iof_tcp_connect_addr(c->io, (struct sockaddr *)&sin, 0, &s),
           -EINVAL);
  CHECK_EQ(iof_tcp_connect_addr(c->io, (struct sockaddr *)&sin, 3, &s),
           -EINVAL);
  CHECK_EQ(iof_tcp_connect_deadline(c->io, "127.0.0.1", "1", 1, &s),
           -ETIMEDOUT);
  CHECK_EQ(iof_unix_connect(c->io, "", &s), -EINVAL);
  CHECK(iof_unix_connect(c->io, "/nonexistent/hostile.sock", &s) < 0);
  CHECK_EQ(iof_wait_readable(c->io, -1, 0), -EBADF);
  CHECK_EQ(iof_wait_readable(c->io, INT_MAX, 0), -EBADF);
  CHECK_EQ(iof_wait_writable(c->io, INT_MIN, 0), -EBADF);
  /* A foreign fd that never becomes readable, huge and negative timeouts
   * (negative: no limit, so use a tiny one to end). */
  int p[2];
  CHECK_EQ(pipe(p), 0);
  CHECK_EQ(iof_wait_readable(c->io, p[0], 0), -ETIMEDOUT);
  CHECK_EQ(iof_wait_writable(c->io, p[1], INT64_MAX), 0);
  close(p[0]);
  close(p[1]);

  /* Byte calls. */
  CHECK_EQ(iof_read_some(c->a, NULL, 1), -EFAULT);
  CHECK_EQ(iof_write_some(c->a, NULL, 1), -EFAULT);
  CHECK_EQ(iof_read(c->a, NULL, 1), -EFAULT);
  CHECK_EQ(iof_write(c->a, NULL, 1), -EFAULT);
  CHECK_EQ(iof_read_some(c->a, NULL, 0), 0);
  CHECK_EQ(iof_write_some(c->a, NULL, 0), 0);
  struct iovec iov[3] = {{buf, 5}, {NULL, 3}, {buf, SIZE_MAX}};
  CHECK_EQ(iof_readv(c->a, NULL, 1), -EINVAL);
  CHECK_EQ(iof_readv(c->a, iov, 0), -EINVAL);
  CHECK_EQ(iof_readv(c->a, iov, -1), -EINVAL);
  CHECK_EQ(iof_readv(c->a, iov, IOV_MAX + 1), -EINVAL);
  CHECK_EQ(iof_writev(c->a, iov, INT_MIN), -EINVAL);
  CHECK_EQ(iof_writev(c->a, iov, 2), -EFAULT);
  /* Lengths summing past SSIZE_MAX (or wrapping): refused, nothing sent. */
  struct iovec over[2] = {{buf, SIZE_MAX}, {buf, 2}};
  CHECK_EQ(iof_writev(c->a, over, 2), -EINVAL);
  CHECK_EQ(iof_readv(c->a, over, 2), -EINVAL);
  struct iovec over2[2] = {{buf, (size_t)SSIZE_MAX}, {buf, 10}};
  CHECK_EQ(iof_writev(c->a, over2, 2), -EINVAL);
  CHECK_EQ(iof_write(c->a, "ping", 4), 4);
  CHECK_EQ(iof_read(c->b, buf, 4), 4);
  CHECK_EQ(memcmp(buf, "ping", 4), 0);
  /* A socket's own fd is not a foreign fd. */
  CHECK_EQ(iof_socket_set_nodelay(c->a, true), 0);
  CHECK_EQ(iof_socket_shutdown(c->a, SHUT_WR), 0);
  CHECK_EQ(iof_read(c->b, buf, sizeof buf), 0);
  CHECK_EQ(iof_write(c->a, "x", 1), -EPIPE);

  /* UDP misuse. */
  iof_socket *u = NULL;
  CHECK_EQ(iof_udp_bind(c->io, "127.0.0.1", "0", &u), 0);
  CHECK_EQ(iof_sendto(u, buf, 1, NULL, 0), -EDESTADDRREQ);
  CHECK_EQ(iof_sendto(u, buf, 1, (struct sockaddr *)&sin, 0), -EINVAL);
  CHECK_EQ(iof_sendto(u, NULL, 1, NULL, 0), -EFAULT);
  socklen_t fl = 0;
  struct sockaddr_storage from;
  CHECK_EQ(iof_recvfrom(u, buf, sizeof buf, (struct sockaddr *)&from, NULL),
           -EINVAL);
  CHECK_EQ(iof_socket_set_deadline(u, IOF_READ, 1), 0);
  CHECK_EQ(iof_recvfrom(u, buf, sizeof buf, (struct sockaddr *)&from, &fl),
           -ETIMEDOUT);
  char *huge = calloc(1, 70000);
  struct sockaddr_storage self;
  socklen_t sl = sizeof self;
  CHECK_EQ(iof_socket_local_addr(u, (struct sockaddr *)&self, &sl), 0);
  CHECK_EQ(iof_sendto(u, huge, 70000, (struct sockaddr *)&self, sl), -EMSGSIZE);
  free(huge);
  CHECK_EQ(iof_socket_free(u), 0);

  /* A read with an INT64_MAX idle timeout waits normally. */
  CHECK_EQ(iof_socket_set_timeout(c->a, IOF_READ, INT64_MAX), 0);
  CHECK_EQ(iof_socket_set_deadline(c->a, IOF_READ, INT64_MAX), 0);
  c->step = 1;
  CHECK_EQ(iof_read(c->a, buf, 3), 3);
  CHECK_EQ(memcmp(buf, "abc", 3), 0);
  CHECK_EQ(iof_socket_free(c->a), 0);
  CHECK_EQ(iof_socket_free(c->b), 0);
  return 0;
}

static int late_writer(void *arg) {
  ctx *c = arg;
  while (c->step != 1) iof_sleep_for(MS);
  iof_sleep_for(20 * MS);
  CHECK_EQ(iof_write(c->b, "abc", 3), 3);
  return 0;
}

static int socket_fiber_main(void *arg) {
  ctx *c = arg;
  CHECK_EQ(iof_launch(iof_io_context_executor(c->io), late_writer, c), 0);
  return socket_fiber_fn(arg);
}

static void socket_calls_in_fibers(void **state) {
  (void)state;
  ctx c = {0};
  in_fiber(socket_fiber_main, &c);
}

/* ---- streams and readers ---------------------------------------------- */

static ssize_t only_read(iof_stream *s, void *buf, size_t len) {
  (void)s;
  (void)buf;
  (void)len;
  return 0;
}

static const iof_stream_vtbl partial_vt = {only_read, NULL, NULL, NULL, NULL};

/* A lying stream: claims more bytes than asked for. */
static ssize_t liar_read(iof_stream *s, void *buf, size_t len) {
  (void)s;
  memset(buf, 'a', len);
  return (ssize_t)len + 100;
}

static ssize_t liar_write(iof_stream *s, const void *buf, size_t len) {
  (void)s;
  (void)buf;
  return (ssize_t)len + 1;
}

static int liar_close(iof_stream *s) {
  (void)s;
  return 0;
}

static const iof_stream_vtbl liar_vt = {liar_read, liar_write, liar_close, NULL,
                                        NULL};

static int stream_fn(void *arg) {
  ctx *c = arg;
  iof_stream *a = NULL, *b = NULL;
  CHECK_EQ(iof_stream_pipe(NULL, &a, &b), -EINVAL);
  CHECK_EQ(iof_stream_pipe(c->io, NULL, &b), -EINVAL);
  CHECK_EQ(iof_stream_pipe(c->io, &a, NULL), -EINVAL);
  CHECK_EQ(iof_stream_pipe(c->io, &a, &b), 0);
  char buf[64];
  /* NULL streams and a stream without a vtable. */
  iof_stream novt = {NULL};
  iof_stream *bad[] = {NULL, &novt};
  for (size_t i = 0; i < 2; i++) {
    CHECK_EQ(iof_stream_read_some(bad[i], buf, 1), -EINVAL);
    CHECK_EQ(iof_stream_write_some(bad[i], buf, 1), -EINVAL);
    CHECK_EQ(iof_stream_read(bad[i], buf, 1), -EINVAL);
    CHECK_EQ(iof_stream_write(bad[i], buf, 1), -EINVAL);
    CHECK_EQ(iof_stream_close(bad[i]), -EINVAL);
    CHECK_EQ(iof_stream_set_deadline(bad[i], IOF_READ, 1), -EINVAL);
    CHECK_EQ(iof_stream_set_timeout(bad[i], IOF_READ, 1), -EINVAL);
    CHECK_EQ(iof_stream_shutdown_write(bad[i]), -EINVAL);
    CHECK_EQ(iof_stream_copy(a, bad[i], NULL, NULL), -EINVAL);
    CHECK_EQ(iof_stream_relay(bad[i], a, NULL, NULL, NULL), -EINVAL);
  }
  /* A partial vtable: the missing entries are refused, not called. */
  iof_stream part = {&partial_vt};
  CHECK_EQ(iof_stream_write_some(&part, buf, 1), -ENOTSUP);
  CHECK_EQ(iof_stream_close(&part), -ENOTSUP);
  CHECK_EQ(iof_stream_set_deadline(&part, IOF_READ, 1), -ENOTSUP);
  CHECK_EQ(iof_stream_shutdown_write(&part), -ENOTSUP);
  CHECK_EQ(iof_stream_set_deadline(a, 0, 1), -EINVAL);
  CHECK_EQ(iof_stream_set_deadline(a, 99, 1), -EINVAL);

  size_t filled = 10;
  CHECK_EQ(iof_stream_read_until(a, buf, 5, &filled, "\n", 1), -EINVAL);
  filled = 0;
  CHECK_EQ(iof_stream_read_until(a, NULL, 5, &filled, "\n", 1), -EINVAL);
  CHECK_EQ(iof_stream_read_until(a, buf, 5, NULL, "\n", 1), -EINVAL);
  CHECK_EQ(iof_stream_read_until(a, buf, 5, &filled, NULL, 1), -EINVAL);
  CHECK_EQ(iof_stream_read_until(a, buf, 5, &filled, "\n", 0), -EINVAL);

  /* copy/relay buffers: a caller's buffer needs a size; halves >= 1. */
  iof_copy_opts o = {0};
  o.buf = buf;
  o.buf_len = 0;
  CHECK_EQ(iof_stream_copy(a, b, &o, NULL), -EINVAL);
  CHECK_EQ(iof_stream_relay(a, b, &o, NULL, NULL), -EINVAL);
  o.buf_len = 1;
  CHECK_EQ(iof_stream_relay(a, b, &o, NULL, NULL), -EINVAL);
  iof_copy_opts huge = {0};
  huge.buf_len = SIZE_MAX;
  CHECK_EQ(iof_stream_copy(a, b, &huge, NULL), -ENOMEM);
  CHECK_EQ(iof_stream_relay(a, b, &huge, NULL, NULL), -ENOMEM);
  huge.buf_len = SIZE_MAX / 2 + 1;
  CHECK_EQ(iof_stream_relay(a, b, &huge, NULL, NULL), -ENOMEM);
  CHECK_EQ(iof_stream_relay(a, a, NULL, NULL, NULL), -EINVAL);

  iof_stream liar = {&liar_vt};
  CHECK_EQ(iof_stream_read_some(&liar, buf, 8), -EPROTO);
  CHECK_EQ(iof_stream_write(&liar, buf, 8), -EPROTO);
  size_t lf = 0;
  CHECK_EQ(iof_stream_read_until(&liar, buf, 8, &lf, "\n", 1), -EPROTO);
  CHECK_EQ(lf, 0);
  CHECK_EQ(iof_stream_copy(a, &liar, NULL, NULL), -EPROTO);
  iof_reader lr;
  char lbuf[8];
  CHECK_EQ(iof_reader_init(&lr, &liar, lbuf, sizeof lbuf), 0);
  iof_bytes lo;
  CHECK_EQ(iof_reader_read_line(&lr, &lo), -EPROTO);
  CHECK_EQ(iof_reader_read_exact(&lr, 4, &lo), -EPROTO);
  iof_reader_destroy(&lr);

  /* An idle limit of INT64_MAX: a normal copy. */
  iof_copy_opts far = {0};
  far.idle_ns = INT64_MAX;
  CHECK_EQ(iof_stream_write(b, "abc", 3), 3);
  CHECK_EQ(iof_stream_shutdown_write(b), 0);
  iof_stream *c2 = NULL, *d2 = NULL;
  CHECK_EQ(iof_stream_pipe(c->io, &c2, &d2), 0);
  uint64_t copied = 0;
  CHECK_EQ(iof_stream_copy(c2, a, &far, &copied), 0);
  CHECK_EQ(copied, 3);
  CHECK_EQ(iof_stream_read(d2, buf, sizeof buf), 3);
  CHECK_EQ(iof_stream_pipe_free(c2), 0);
  CHECK_EQ(iof_stream_pipe_free(d2), 0);
  CHECK_EQ(iof_stream_pipe_free(a), 0);
  CHECK_EQ(iof_stream_pipe_free(b), 0);
  CHECK_EQ(iof_stream_pipe(c->io, &a, &b), 0);

  CHECK_EQ(iof_stream_pipe_free(NULL), -EINVAL);
  CHECK_EQ(iof_stream_pipe_free(&part), -EINVAL);
  CHECK(iof_socket_stream_init(NULL, NULL) == NULL);
  iof_socket_stream ss;
  CHECK(iof_socket_stream_init(&ss, NULL) == NULL);

  /* Readers. */
  iof_reader r;
  memset(&r, 0, sizeof r);
  iof_reader_destroy(&r); /* zeroed */
  iof_reader_destroy(NULL);
  CHECK_EQ(iof_reader_init(NULL, a, NULL, 0), -EINVAL);
  CHECK_EQ(iof_reader_init(&r, NULL, NULL, 0), -EINVAL);
  CHECK_EQ(iof_reader_init(&r, a, buf, 0), -EINVAL);
  CHECK_EQ(iof_reader_init(&r, a, NULL, SIZE_MAX), -ENOMEM);
  CHECK_EQ(iof_reader_init_socket(&r, NULL, NULL, 0), -EINVAL);
  CHECK_EQ(iof_reader_init_socket(NULL, NULL, NULL, 0), -EINVAL);
  CHECK_EQ(iof_reader_set_max(NULL, 1), -EINVAL);
  CHECK(iof_reader_stream(NULL) == NULL);
  iof_bytes out;
  CHECK_EQ(iof_reader_buffered(NULL, &out), 0);
  iof_reader_consume(NULL, 5);
  CHECK_EQ(iof_reader_read_line(NULL, &out), -EINVAL);
  CHECK_EQ(iof_reader_read_until(NULL, "\n", 1, &out), -EINVAL);
  CHECK_EQ(iof_reader_read_exact(NULL, 1, &out), -EINVAL);
  CHECK_EQ(iof_reader_read_frame(NULL, 1, &out), -EINVAL);
  size_t len = 0;
  CHECK_EQ(iof_reader_read_frame_into(NULL, 1, buf, 1, &len), -EINVAL);
  CHECK_EQ(iof_reader_read(NULL, buf, 1), -EINVAL);
  CHECK_EQ(iof_reader_read_some(NULL, buf, 1), -EINVAL);

  char rbuf[16];
  CHECK_EQ(iof_reader_init(&r, a, rbuf, sizeof rbuf), 0);
  CHECK_EQ(iof_reader_set_max(&r, sizeof rbuf + 1), -EINVAL);
  CHECK_EQ(iof_reader_set_max(&r, SIZE_MAX), -EINVAL);
  CHECK_EQ(iof_reader_read_until(&r, NULL, 1, &out), -EINVAL);
  CHECK_EQ(iof_reader_read_until(&r, "\n", 0, &out), -EINVAL);
  CHECK_EQ(iof_reader_read_until(&r, "\n", 1, NULL), -EINVAL);
  CHECK_EQ(iof_reader_read_line(&r, NULL), -EINVAL);
  CHECK_EQ(iof_reader_read_exact(&r, sizeof rbuf + 1, &out), -EMSGSIZE);
  CHECK_EQ(iof_reader_read_exact(&r, SIZE_MAX, &out), -EMSGSIZE);
  CHECK_EQ(iof_reader_read_exact(&r, 1, NULL), -EINVAL);
  int prefixes[] = {0, 3, 5, 8, -1, INT_MAX, INT_MIN};
  for (size_t i = 0; i < sizeof prefixes / sizeof prefixes[0]; i++) {
    CHECK_EQ(iof_reader_read_frame(&r, prefixes[i], &out), -EINVAL);
    CHECK_EQ(iof_reader_read_frame_into(&r, prefixes[i], buf, 1, &len),
             -EINVAL);
  }
  CHECK_EQ(iof_reader_read_frame(&r, 1, NULL), -EINVAL);
  CHECK_EQ(iof_reader_read_frame_into(&r, 1, NULL, 5, &len), -EINVAL);
  CHECK_EQ(iof_reader_read_frame_into(&r, 1, buf, 5, NULL), -EINVAL);
  CHECK_EQ(iof_reader_read(&r, NULL, 5), -EINVAL);
  CHECK_EQ(iof_reader_read_some(&r, NULL, 5), -EINVAL);
  CHECK_EQ(iof_reader_read(&r, buf, 0), 0);
  iof_reader_consume(&r, SIZE_MAX); /* nothing buffered: no effect */
  CHECK_EQ(iof_reader_buffered(&r, &out), 0);

  /* Hostile peer: a 4 GiB frame header, a line longer than the buffer,
   * delimiter longer than the buffer. */
  const unsigned char hdr[] = {0xff, 0xff, 0xff, 0xff, 'x', 'y'};
  CHECK_EQ(iof_stream_write(b, hdr, sizeof hdr), (ssize_t)sizeof hdr);
  CHECK_EQ(iof_reader_read_frame(&r, 4, &out), -EMSGSIZE);
  CHECK_EQ(iof_reader_read_frame_into(&r, 4, buf, sizeof buf, &len), -EMSGSIZE);
  CHECK_EQ(iof_reader_read_exact(&r, 4, &out), 1);
  CHECK_EQ(iof_reader_read_exact(&r, 2, &out), 1);
  CHECK_EQ(memcmp(out.data, "xy", 2), 0);
  char line[40];
  memset(line, 'L', sizeof line);
  CHECK_EQ(iof_stream_write(b, line, sizeof line), (ssize_t)sizeof line);
  CHECK_EQ(iof_reader_read_line(&r, &out), -EMSGSIZE);
  CHECK_EQ(iof_reader_read_until(&r, "0123456789abcdefXYZ", 19, &out),
           -EMSGSIZE);
  CHECK_EQ(iof_reader_read(&r, line, sizeof line), (ssize_t)sizeof line);
  CHECK_EQ(iof_stream_shutdown_write(b), 0);
  const unsigned char partial[] = {0};
  (void)partial;
  CHECK_EQ(iof_reader_read_line(&r, &out), 0);
  iof_reader_destroy(&r);
  iof_reader_destroy(&r); /* twice */

  CHECK_EQ(iof_stream_pipe_free(a), 0);
  CHECK_EQ(iof_stream_pipe_free(b), 0);
  return 0;
}

/* A delimiter longer than the reader's maximum can never end a message:
 * -EMSGSIZE at once, without waiting for bytes from a peer that sends
 * none (it used to read until max bytes had come: here until the read
 * deadline). */
static int long_delim_fn(void *arg) {
  ctx *c = arg;
  iof_stream *a = NULL, *b = NULL;
  CHECK_EQ(iof_stream_pipe(c->io, &a, &b), 0);
  CHECK_EQ(iof_stream_set_deadline(a, IOF_READ, iof_now_ns() + 200 * MS), 0);
  char rbuf[8];
  iof_reader r;
  CHECK_EQ(iof_reader_init(&r, a, rbuf, sizeof rbuf), 0);
  iof_bytes out;
  CHECK_EQ(iof_reader_read_until(&r, "0123456789", 10, &out), -EMSGSIZE);
  CHECK_EQ(iof_reader_set_max(&r, 3), 0);
  CHECK_EQ(iof_reader_read_until(&r, "\r\n\r\n", 4, &out), -EMSGSIZE);
  CHECK_EQ(iof_reader_buffered(&r, &out), 0);
  /* Nothing was read or consumed: a fitting delimiter still works. */
  CHECK_EQ(iof_stream_write(b, "ab\n", 3), 3);
  CHECK_EQ(iof_reader_read_line(&r, &out), 1);
  CHECK_EQ(out.len, 2);
  iof_reader_destroy(&r);
  CHECK_EQ(iof_stream_pipe_free(a), 0);
  CHECK_EQ(iof_stream_pipe_free(b), 0);
  return 0;
}

static void reader_delimiter_longer_than_max_fails_at_once(void **state) {
  (void)state;
  ctx c = {0};
  uint64_t t0 = iof_test_now_ns();
  in_fiber(long_delim_fn, &c);
  assert_true(ms_since(t0) < 150);
}

static void stream_and_reader_bad_arguments(void **state) {
  (void)state;
  ctx c = {0};
  in_fiber(stream_fn, &c);
}

/* ---- calls from a thread that does not run the io_context ------------ */

typedef struct busy {
  iof_io_context *io;
  atomic_int started, release;
  int run_rc;
} busy;

static int busy_fiber(void *arg) {
  busy *b = arg;
  atomic_store(&b->started, 1);
  while (!atomic_load(&b->release)) iof_sleep_for(MS);
  return 0;
}

static void *runner(void *arg) {
  busy *b = arg;
  b->run_rc = iof_io_context_run(b->io);
  return NULL;
}

static int timer_waiter(void *arg) {
  iof_timer *t = arg;
  CHECK_EQ(iof_timer_wait(t), -ECANCELED);
  return 0;
}

static void wrong_thread_calls(void **state) {
  (void)state;
  busy b = {0};
  b.io = iof_io_context_create();
  assert_non_null(b.io);
  iof_socket *u = NULL;
  assert_int_equal(iof_udp_open(b.io, AF_INET, &u), 0);
  iof_timer *t = iof_timer_create(b.io);
  assert_non_null(t);
  assert_int_equal(iof_timer_expires_after(t, INT64_MAX), 0);
  launch(b.io, busy_fiber, &b);
  launch(b.io, timer_waiter, t);
  pthread_t th;
  assert_int_equal(pthread_create(&th, NULL, runner, &b), 0);
  assert_true(wait_flag(&b.started));
  sleep_ms(20); /* the waiter is waiting too */
  /* io runs on the other thread now. */
  assert_int_equal(iof_io_context_run(b.io), -EBUSY);
  assert_int_equal(iof_io_context_run_one(b.io), -EBUSY);
  assert_int_equal(iof_io_context_poll(b.io), -EBUSY);
  assert_int_equal(iof_io_context_run_for(b.io, MS), -EBUSY);
  assert_int_equal(iof_io_context_destroy(b.io), -EBUSY);
  assert_int_equal(iof_socket_set_deadline(u, IOF_READ, 1), -EPERM);
  assert_int_equal(iof_socket_set_timeout(u, IOF_READ, 1), -EPERM);
  assert_int_equal(iof_socket_close(u), -EPERM);
  assert_int_equal(iof_socket_free(u), -EPERM);
  assert_true(iof_socket_fd(u) >= 0);             /* still open, still owned */
  assert_int_equal(iof_timer_destroy(t), -EBUSY); /* a fiber waits */
  assert_int_equal(iof_timer_cancel(t), 1);       /* any thread */
  atomic_store(&b.release, 1);
  pthread_join(th, NULL);
  assert_true(b.run_rc >= 2);
  assert_int_equal(iof_timer_destroy(t), 0);
  assert_int_equal(iof_socket_free(u), 0);
  assert_int_equal(iof_io_context_destroy(b.io), 0);
  assert_int_equal(atomic_load(&failures), 0);
}

/* ---- out of descriptors ------------------------------------------------ */

typedef struct nofd {
  iof_io_context *io;
  iof_socket *l;
  int port;
} nofd;

static int nofd_fn(void *arg) {
  nofd *n = arg;
  iof_socket *s = NULL;
  iof_stream *a = NULL, *b = NULL;
  CHECK_EQ(iof_stream_pipe(n->io, &a, &b), -EMFILE);
  CHECK_EQ(a == NULL && b == NULL, 1);
  CHECK_EQ(iof_udp_open(n->io, AF_INET, &s), -EMFILE);
  CHECK_EQ(iof_tcp_listen(n->io, "127.0.0.1", "0", 0, 0, &s), -EMFILE);
  char port[16];
  snprintf(port, sizeof port, "%d", n->port);
  int r = iof_tcp_connect(n->io, "127.0.0.1", port, &s);
  CHECK_EQ(r, -EMFILE);
  errno = 0;
  CHECK(iof_io_context_create() == NULL);
  CHECK(errno == EMFILE || errno == ENFILE);
  return 0;
}

static void out_of_descriptors(void **state) {
  (void)state;
  nofd n = {0};
  n.io = iof_io_context_create();
  assert_non_null(n.io);
  assert_int_equal(iof_tcp_listen(n.io, "127.0.0.1", "0", 0, 0, &n.l), 0);
  n.port = iof_socket_local_port(n.l);
  struct rlimit old, low;
  assert_int_equal(getrlimit(RLIMIT_NOFILE, &old), 0);
  /* Fill the table up to a low limit. */
  int fds[256], nf = 0;
  low = old;
  int top = dup(0);
  assert_true(top >= 0);
  close(top);
  low.rlim_cur = (rlim_t)top + 64;
  assert_int_equal(setrlimit(RLIMIT_NOFILE, &low), 0);
  int fd;
  while (nf < 256 && (fd = dup(0)) >= 0) fds[nf++] = fd;
  assert_int_equal(errno, EMFILE);
  launch(n.io, nofd_fn, &n);
  run_all(n.io);
  for (int i = 0; i < nf; i++) close(fds[i]);
  assert_int_equal(setrlimit(RLIMIT_NOFILE, &old), 0);
  /* Everything works again. */
  iof_stream *a = NULL, *b = NULL;
  assert_int_equal(iof_stream_pipe(n.io, &a, &b), 0);
  assert_int_equal(iof_stream_pipe_free(a), 0);
  assert_int_equal(iof_stream_pipe_free(b), 0);
  assert_int_equal(iof_socket_free(n.l), 0);
  assert_int_equal(iof_io_context_destroy(n.io), 0);
  assert_int_equal(atomic_load(&failures), 0);
}

/* iof_tcp_connect_addr_deadline: NULLs, short lengths, foreign families,
 * a passed deadline (-ETIMEDOUT, nothing left behind) and the "no
 * deadline" values; the listener still accepts afterwards. */
static int connect_addr_deadline_fn(void *arg) {
  ctx *c = arg;
  iof_socket *l = NULL, *s = NULL;
  CHECK_EQ(iof_tcp_listen(c->io, "127.0.0.1", "0", 0, 0, &l), 0);
  struct sockaddr_in sin;
  memset(&sin, 0, sizeof sin);
  sin.sin_family = AF_INET;
  sin.sin_port = htons((uint16_t)iof_socket_local_port(l));
  sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  const struct sockaddr *sa = (const struct sockaddr *)&sin;
  CHECK_EQ(iof_tcp_connect_addr_deadline(NULL, sa, sizeof sin, 0, &s), -EINVAL);
  CHECK_EQ(iof_tcp_connect_addr_deadline(c->io, NULL, sizeof sin, 0, &s),
           -EINVAL);
  CHECK_EQ(iof_tcp_connect_addr_deadline(c->io, sa, 0, 0, &s), -EINVAL);
  CHECK_EQ(iof_tcp_connect_addr_deadline(c->io, sa, sizeof sin, 0, NULL),
           -EINVAL);
  struct sockaddr_in odd = sin;
  odd.sin_family = AF_UNIX;
  CHECK_EQ(iof_tcp_connect_addr_deadline(c->io, (struct sockaddr *)&odd,
                                         sizeof odd, 0, &s),
           -EINVAL);
  odd.sin_family = 12345;
  CHECK_EQ(iof_tcp_connect_addr_deadline(c->io, (struct sockaddr *)&odd,
                                         sizeof odd, 0, &s),
           -EINVAL);
  CHECK_EQ(iof_tcp_connect_addr_deadline(c->io, sa, sizeof sin, 1, &s),
           -ETIMEDOUT);
  CHECK_EQ(iof_tcp_connect_deadline(c->io, "127.0.0.1", "1", 1, &s),
           -ETIMEDOUT);
  int64_t none[] = {INT64_MIN, -1, 0, INT64_MAX};
  for (size_t i = 0; i < sizeof none / sizeof none[0]; i++) {
    s = NULL;
    CHECK_EQ(iof_tcp_connect_addr_deadline(c->io, sa, sizeof sin, none[i], &s),
             0);
    iof_socket *in = NULL;
    CHECK_EQ(iof_accept(l, &in, NULL, NULL), 0);
    if (s) CHECK_EQ(iof_socket_free(s), 0);
    if (in) CHECK_EQ(iof_socket_free(in), 0);
  }
  CHECK_EQ(iof_socket_free(l), 0);
  return 0;
}

static void connect_addr_deadline_bad_arguments(void **state) {
  (void)state;
  ctx c = {0};
  in_fiber(connect_addr_deadline_fn, &c);
}

/* ---- freeing a pipe end from a thread while its loop runs ------------- */

typedef struct pipe_foreign {
  iof_io_context *io;
  iof_stream *a, *b;
  atomic_int reading;
  ssize_t got;
} pipe_foreign;

static int pf_reader(void *arg) {
  pipe_foreign *pf = arg;
  char c;
  atomic_store(&pf->reading, 1);
  pf->got = iof_stream_read_some(pf->b, &c, 1);
  return 0;
}

static void *pf_run(void *arg) {
  pipe_foreign *pf = arg;
  iof_io_context_run(pf->io);
  return NULL;
}

/* -EPERM as for the socket under it: nothing freed, the end is still
 * there and a later free succeeds (the end was freed anyway, its socket
 * leaked, and the next call on it read freed memory). */
static void pipe_free_refused_keeps_the_end(void **state) {
  (void)state;
  pipe_foreign pf = {0};
  pf.io = iof_io_context_create();
  assert_non_null(pf.io);
  assert_int_equal(iof_stream_pipe(pf.io, &pf.a, &pf.b), 0);
  launch(pf.io, pf_reader, &pf);
  pthread_t t;
  assert_int_equal(pthread_create(&t, NULL, pf_run, &pf), 0);
  assert_true(wait_flag(&pf.reading));
  sleep_ms(20); /* the loop waits in epoll */
  assert_int_equal(iof_stream_pipe_free(pf.a), -EPERM);
  assert_int_equal(iof_stream_write(pf.a, "x", 1), -EPERM); /* not freed */
  iof_io_context_stop(pf.io);
  pthread_join(t, NULL);
  /* Not running now: a plain thread may free; the reader sees the end. */
  assert_int_equal(iof_stream_pipe_free(pf.a), 0);
  iof_io_context_restart(pf.io);
  run_all(pf.io);
  assert_int_equal(pf.got, 0);
  assert_int_equal(iof_stream_pipe_free(pf.b), 0);
  assert_int_equal(iof_io_context_destroy(pf.io), 0);
}

/* ---- the runtime's own descriptors ------------------------------------ */

/* The fds that are an epoll instance or an eventfd, as a bitmap. */
static void loop_fds(unsigned char *map, int n) {
  memset(map, 0, (size_t)n);
  for (int fd = 0; fd < n; fd++) {
    char path[64], to[64] = {0};
    snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
    if (readlink(path, to, sizeof to - 1) < 0) continue;
    map[fd] = strstr(to, "[eventpoll]") || strstr(to, "[eventfd]");
  }
}

enum { NFDS = 4096 };
static unsigned char fds_before[NFDS], fds_after[NFDS];

/* Waits on them, from a fiber of their loop: -EBADF (poll: POLLNVAL), as
 * if not open; watching the loop's epoll fd in itself made libev assert. */
static int rt_waits(void *arg) {
  iof_io_context *io = arg;
  for (int fd = 0; fd < NFDS; fd++) {
    if (!fds_after[fd] || fds_before[fd]) continue;
    CHECK_EQ(iof_wait_readable(io, fd, MS), -EBADF);
    CHECK_EQ(iof_wait_writable(io, fd, MS), -EBADF);
    struct pollfd p = {fd, POLLIN, 0};
    CHECK_EQ(iof_compat_poll(&p, 1, 10), 1);
    CHECK_EQ(p.revents, POLLNVAL);
    struct epoll_event ev;
    errno = 0;
    CHECK_EQ(iof_compat_epoll_wait(fd, &ev, 1, 10), -1);
    CHECK(errno == EBADF || errno == EINVAL); /* EINVAL: not an epoll fd */
  }
  CHECK_EQ(iof_sleep_for(MS), 0);
  return 0;
}

/* A foreign fd closed by another fiber after a wait on it began, before
 * the loop polled: libev registered it then and asserted (abort in
 * epoll_ctl's EBADF); the wait now fails with -EBADF and the loop goes
 * on. Both directions, and a wait that stays valid beside them. */
typedef struct fd_gone {
  iof_io_context *io;
  int rd, wr, keep;
  int r_read, r_write, r_keep;
} fd_gone;

static int fd_gone_reader(void *arg) {
  fd_gone *g = arg;
  g->r_read = iof_wait_readable(g->io, g->rd, 5000 * MS);
  return 0;
}

static int fd_gone_writer(void *arg) {
  fd_gone *g = arg;
  g->r_write = iof_wait_writable(g->io, g->wr, 5000 * MS);
  return 0;
}

static int fd_gone_keeper(void *arg) {
  fd_gone *g = arg;
  g->r_keep = iof_wait_readable(g->io, g->keep, 50 * MS);
  return 0;
}

static int fd_gone_closer(void *arg) {
  fd_gone *g = arg;
  close(g->rd);
  close(g->wr);
  return 0;
}

static void foreign_fd_closed_before_the_poll(void **state) {
  (void)state;
  fd_gone g = {0};
  g.io = iof_io_context_create();
  assert_non_null(g.io);
  int p[2], q[2];
  assert_int_equal(pipe(p), 0);
  assert_int_equal(pipe(q), 0);
  g.rd = p[0];
  g.wr = dup(p[1]); /* a write end the closer may close */
  assert_true(g.wr >= 0);
  /* A full pipe: its write end is not writable. */
  assert_int_equal(fcntl(p[1], F_SETFL, O_NONBLOCK), 0);
  char buf[4096] = {0};
  while (write(p[1], buf, sizeof buf) > 0) {
  }
  g.keep = q[0];
  g.r_read = g.r_write = g.r_keep = 1;
  launch(g.io, fd_gone_reader, &g);
  launch(g.io, fd_gone_writer, &g);
  launch(g.io, fd_gone_keeper, &g);
  launch(g.io, fd_gone_closer, &g); /* same batch: before the poll */
  run_all(g.io);
  assert_int_equal(g.r_read, -EBADF);
  assert_int_equal(g.r_write, -EBADF);
  assert_int_equal(g.r_keep, -ETIMEDOUT);
  /* The loop still watches fds. */
  g.r_keep = 1;
  assert_int_equal(write(q[1], "x", 1), 1);
  launch(g.io, fd_gone_keeper, &g);
  run_all(g.io);
  assert_int_equal(g.r_keep, 0);
  close(p[1]);
  close(q[0]);
  close(q[1]);
  assert_int_equal(iof_io_context_destroy(g.io), 0);

  /* On a host's loop, whose batches run inside a prepare watcher. */
  struct ev_loop *host = ev_loop_new(0);
  assert_non_null(host);
  g.io = iof_io_context_attach(host);
  assert_non_null(g.io);
  assert_int_equal(pipe(p), 0);
  assert_int_equal(pipe(q), 0);
  g.rd = p[0];
  g.keep = q[0];
  g.r_read = g.r_keep = 1;
  launch(g.io, fd_gone_reader, &g);
  launch(g.io, fd_gone_keeper, &g);
  g.wr = dup(p[1]); /* closed by the closer too */
  assert_true(g.wr >= 0);
  launch(g.io, fd_gone_closer, &g);
  ev_run(host, 0);
  assert_int_equal(g.r_read, -EBADF);
  assert_int_equal(g.r_keep, -ETIMEDOUT);
  close(p[1]);
  close(q[0]);
  close(q[1]);
  assert_int_equal(iof_io_context_destroy(g.io), 0);
  ev_loop_destroy(host);
}

/* A signal that a libev loop of the program's own watches (not one of
 * the runtime's): the wait is refused with -EBUSY. libev lets one loop
 * watch a signal and asserted (abort) when the io_context's loop started
 * on it too. Once the program's loop lets go, the wait works. */
typedef struct sig_held {
  iof_io_context *io;
  int rc, rc_after;
} sig_held;

static int sig_held_waiter(void *arg) {
  sig_held *h = arg;
  h->rc = iof_signal_wait(h->io, SIGUSR2);
  return 0;
}

static int sig_held_after(void *arg) {
  sig_held *h = arg;
  h->rc_after = iof_signal_wait(h->io, SIGUSR2);
  return 0;
}

static int sig_held_raiser(void *arg) {
  (void)arg;
  iof_sleep_for(20 * MS);
  kill(getpid(), SIGUSR2);
  return 0;
}

static void on_host_signal(struct ev_loop *loop, ev_signal *w, int revents) {
  (void)loop;
  (void)w;
  (void)revents;
}

static void signal_held_by_a_foreign_loop_is_ebusy(void **state) {
  (void)state;
  sig_held h = {0};
  h.io = iof_io_context_create();
  assert_non_null(h.io);
  struct ev_loop *own = ev_loop_new(0);
  assert_non_null(own);
  ev_signal hs;
  ev_signal_init(&hs, on_host_signal, SIGUSR2);
  ev_signal_start(own, &hs);
  h.rc = 1;
  launch(h.io, sig_held_waiter, &h);
  run_all(h.io);
  assert_int_equal(h.rc, -EBUSY);
  ev_signal_stop(own, &hs);
  ev_loop_destroy(own);
  launch(h.io, sig_held_after, &h);
  launch(h.io, sig_held_raiser, &h);
  run_all(h.io);
  assert_int_equal(h.rc_after, SIGUSR2);
  assert_int_equal(iof_io_context_destroy(h.io), 0);
}

/* A loop's epoll fd and wake-up eventfd are the runtime's: adopting one
 * is -EBADF (as if not open), never a socket that makes libev assert
 * once it is watched or closed; nor may a wait watch them. The loop
 * still works. */
static void runtime_fds_are_not_adopted(void **state) {
  (void)state;
  loop_fds(fds_before, NFDS);
  iof_io_context *io = iof_io_context_create();
  assert_non_null(io);
  loop_fds(fds_after, NFDS);
  int seen = 0;
  for (int fd = 0; fd < NFDS; fd++) {
    if (!fds_after[fd] || fds_before[fd]) continue;
    iof_socket *s = NULL;
    assert_int_equal(iof_socket_adopt(io, fd, &s), -EBADF);
    assert_null(s);
    seen++;
  }
  assert_true(seen >= 2); /* the epoll fd and the eventfd */
  launch(io, rt_waits, io);
  run_all(io);
  assert_int_equal(iof_io_context_destroy(io), 0);
  assert_int_equal(atomic_load(&failures), 0);
}

/* ---- freeing a socket another fiber waits on -------------------------- */

typedef struct freeing {
  ctx c;
  ssize_t got;
  int free_rc;
} freeing;

static int free_reader(void *arg) {
  freeing *f = arg;
  char buf[8];
  f->got = iof_read_some(f->c.a, buf, sizeof buf);
  return 0;
}

static int free_main(void *arg) {
  freeing *f = arg;
  make_pair(&f->c);
  CHECK_EQ(iof_launch(iof_io_context_executor(f->c.io), free_reader, f), 0);
  iof_sleep_for(5 * MS); /* the reader waits */
  f->free_rc = iof_socket_free(f->c.a);
  iof_sleep_for(5 * MS);
  if (f->free_rc != 0) CHECK_EQ(iof_socket_free(f->c.a), 0);
  CHECK_EQ(iof_socket_free(f->c.b), 0);
  return 0;
}

static void free_while_another_fiber_waits(void **state) {
  (void)state;
  freeing f;
  memset(&f, 0, sizeof f);
  in_fiber(free_main, &f.c);
  assert_int_equal(f.got, -ECANCELED);
  assert_true(f.free_rc == 0 || f.free_rc == -EBUSY);
}

/* A thread-pool fiber's read goes to the socket's io_context before it
 * waits there: freed while the context is not running (allowed from a
 * plain thread), the socket must outlive that wait, which ends with
 * -ECANCELED when it reaches the context (ASan: no use after free). */
typedef struct far_reader {
  iof_socket *s;
  atomic_int got; /* 1: not returned yet */
} far_reader;

static int far_read_fn(void *arg) {
  far_reader *fr = arg;
  char b[4];
  atomic_store(&fr->got, (int)iof_read_some(fr->s, b, sizeof b));
  return 0;
}

static void free_while_a_pool_fiber_waits(void **state) {
  (void)state;
  for (int round = 0; round < 2; round++) {
    iof_io_context *io = iof_io_context_create();
    iof_thread_pool *pool = iof_thread_pool_create(1);
    assert_non_null(io);
    assert_non_null(pool);
    int sv[2];
    assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
    far_reader fr = {NULL, 1};
    assert_int_equal(iof_socket_adopt(io, sv[0], &fr.s), 0);
    assert_int_equal(
        iof_launch(iof_thread_pool_executor(pool), far_read_fn, &fr), 0);
    assert_true(wait_one_pool_fiber_suspended());
    if (round == 0) { /* freed, then the context runs */
      assert_int_equal(iof_socket_free(fr.s), 0);
      for (int i = 0; i < 5000 && atomic_load(&fr.got) == 1; i++) {
        assert_true(iof_io_context_run_for(io, MS) >= 0);
        usleep(1000);
      }
      assert_int_equal(atomic_load(&fr.got), -ECANCELED);
      assert_int_equal(iof_io_context_destroy(io), 0);
    } else { /* the context is destroyed with the socket and the wait */
      assert_int_equal(iof_io_context_destroy(io), 0);
      for (int i = 0; i < 5000 && atomic_load(&fr.got) == 1; i++) usleep(1000);
      assert_int_equal(atomic_load(&fr.got), -ECANCELED);
    }
    assert_int_equal(iof_thread_pool_destroy(pool), 0);
    close(sv[1]);
  }
}

/* ---- destroying an io_context with resolutions in flight --------------- */

static atomic_int resolved, cancelled;

static int resolve_one(void *arg) {
  iof_io_context *io = arg;
  struct addrinfo *res = NULL;
  int r = iof_resolve(io, "localhost", "80", NULL, &res);
  if (r == 0) {
    freeaddrinfo(res);
    atomic_fetch_add(&resolved, 1);
  } else {
    CHECK(r == -ECANCELED || IOF_IS_EAI(r));
    atomic_fetch_add(&cancelled, 1);
  }
  return 0;
}

static void destroy_with_resolves_in_flight(void **state) {
  (void)state;
  for (int round = 0; round < 3; round++) {
    atomic_store(&resolved, 0);
    atomic_store(&cancelled, 0);
    iof_io_context *io = iof_io_context_create();
    for (int i = 0; i < 100; i++) launch(io, resolve_one, io);
    iof_io_context_run_for(io, round * MS);
    assert_int_equal(iof_io_context_destroy(io), 0);
    assert_int_equal(atomic_load(&resolved) + atomic_load(&cancelled), 100);
    if (trace)
      fprintf(stderr, "round %d: %d resolved, %d cancelled\n", round,
              atomic_load(&resolved), atomic_load(&cancelled));
  }
  sleep_ms(100); /* late worker results must not touch the freed context */
  assert_int_equal(atomic_load(&failures), 0);
}

/* ---- a hostile peer feeding a reader random bytes ---------------------- */

typedef struct fuzz {
  iof_stream *a, *b;
  unsigned seed;
  long ops;
} fuzz;

static unsigned rnd(unsigned *s) {
  *s = *s * 1103515245u + 12345u;
  return (*s >> 8) & 0xffffff;
}

static int fuzz_writer(void *arg) {
  fuzz *f = arg;
  unsigned s = f->seed ^ 0x5555;
  char chunk[300];
  for (int i = 0; i < 400; i++) {
    size_t n = 1 + rnd(&s) % sizeof chunk;
    for (size_t j = 0; j < n; j++) {
      unsigned r = rnd(&s) % 16;
      chunk[j] = r < 3 ? '\n' : r < 5 ? '\r' : r < 6 ? '\0' : (char)rnd(&s);
    }
    if (iof_stream_write(f->b, chunk, n) != (ssize_t)n) break;
  }
  iof_stream_shutdown_write(f->b);
  return 0;
}

static int fuzz_reader(void *arg) {
  fuzz *f = arg;
  unsigned s = f->seed;
  char rbuf[64], dst[200];
  iof_reader r;
  CHECK_EQ(iof_reader_init(&r, f->a, rbuf, sizeof rbuf), 0);
  const char *delims[] = {"\n", "\r\n", "\0", "abc", "\n\n\n"};
  size_t dlens[] = {1, 2, 1, 3, 3};
  for (;;) {
    iof_bytes out = {NULL, 0};
    size_t len = 0;
    long rc;
    unsigned op = rnd(&s) % 9;
    if (op == 0) {
      rc = iof_reader_read_line(&r, &out);
    } else if (op == 1) {
      unsigned d = rnd(&s) % 5;
      rc = iof_reader_read_until(&r, delims[d], dlens[d], &out);
    } else if (op == 2) {
      rc = iof_reader_read_exact(&r, rnd(&s) % 80, &out);
    } else if (op == 3) {
      int pfx[] = {1, 2, 4};
      rc = iof_reader_read_frame(&r, pfx[rnd(&s) % 3], &out);
    } else if (op == 4) {
      int pfx[] = {1, 2, 4};
      rc = iof_reader_read_frame_into(&r, pfx[rnd(&s) % 3], dst,
                                      rnd(&s) % sizeof dst, &len);
      CHECK(rc != 1 || len <= sizeof dst);
    } else if (op == 5) {
      rc = iof_reader_read(&r, dst, rnd(&s) % sizeof dst);
    } else if (op == 6) {
      rc = iof_reader_read_some(&r, dst, 1 + rnd(&s) % sizeof dst);
    } else if (op == 7) {
      iof_reader_consume(&r, rnd(&s) % 100);
      rc = 1;
    } else {
      rc = iof_reader_set_max(&r, rnd(&s) % (sizeof rbuf + 1));
      rc = rc == 0 ? 1 : rc;
    }
    f->ops++;
    /* Views lie inside the buffer. */
    if (out.data) {
      CHECK(out.data >= rbuf && out.data + out.len <= rbuf + sizeof rbuf);
    }
    iof_bytes buffered;
    CHECK(iof_reader_buffered(&r, &buffered) <= sizeof rbuf);
    if (rc == -EMSGSIZE || rc == -EPROTO) {
      iof_reader_consume(&r, 1 + rnd(&s) % 8); /* skip some bytes */
      if (rc == -EPROTO) break;
      continue;
    }
    CHECK(rc >= 0);
    if (rc < 0) break;
    if (rc == 0 && iof_reader_buffered(&r, &buffered) == 0) {
      /* end of stream (or a zero-length read): stop on a true end */
      char one;
      if (iof_reader_read_some(&r, &one, 1) == 0) break;
    }
    if (f->ops > 20000) break;
  }
  iof_reader_destroy(&r);
  return 0;
}

static void reader_against_random_bytes(void **state) {
  (void)state;
  for (unsigned seed = 1; seed <= 6; seed++) {
    iof_io_context *io = iof_io_context_create();
    fuzz f = {0};
    f.seed = seed;
    assert_int_equal(iof_stream_pipe(io, &f.a, &f.b), 0);
    launch(io, fuzz_writer, &f);
    launch(io, fuzz_reader, &f);
    run_all(io);
    assert_true(f.ops > 10);
    if (trace) fprintf(stderr, "seed %u: %ld ops\n", seed, f.ops);
    assert_int_equal(iof_stream_pipe_free(f.a), 0);
    assert_int_equal(iof_stream_pipe_free(f.b), 0);
    assert_int_equal(iof_io_context_destroy(io), 0);
    assert_int_equal(atomic_load(&failures), 0);
  }
}

/* ---- deadlines and shields -------------------------------------------- */

static int ret5(void *arg) {
  (void)arg;
  return 5;
}

static int sleep_50ms(void *arg) {
  (void)arg;
  return iof_sleep_for(50 * MS);
}

static int deadline_fn(void *arg) {
  (void)arg;
  CHECK_EQ(iof_with_deadline(1, NULL, NULL), -EINVAL);
  CHECK_EQ(iof_shield(NULL, NULL), -EINVAL);
  CHECK_EQ(iof_shield_for(1, NULL, NULL), -EINVAL);
  /* Far limits never fire early; past ones at once. */
  CHECK_EQ(iof_with_deadline(INT64_MAX, sleep_50ms, NULL), 0);
  CHECK_EQ(iof_shield_for(INT64_MAX, sleep_50ms, NULL), 0);
  CHECK_EQ(iof_with_deadline(INT64_MIN, sleep_50ms, NULL), -ETIMEDOUT);
  CHECK_EQ(iof_shield_for(INT64_MIN, sleep_50ms, NULL), -ETIMEDOUT);
  CHECK_EQ(iof_with_deadline(INT64_MIN, ret5, NULL), 5);
  return 0;
}

static void deadline_bad_arguments(void **state) {
  (void)state;
  assert_int_equal(iof_with_deadline(1, ret5, NULL), -EPERM);
  assert_int_equal(iof_shield(ret5, NULL), -EPERM);
  assert_int_equal(iof_shield_for(1, ret5, NULL), -EPERM);
  ctx c = {0};
  in_fiber(deadline_fn, &c);
}

int main(void) {
  trace = getenv("HOSTILE_TRACE") != NULL;
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(strerror_any_int, reset, disarm),
      cmocka_unit_test_setup_teardown(io_context_null_and_limits, reset,
                                      disarm),
      cmocka_unit_test_setup_teardown(io_context_reentry_is_ebusy, reset,
                                      disarm),
      cmocka_unit_test_setup_teardown(destroy_reentry_is_ebusy, reset, disarm),
      cmocka_unit_test_setup_teardown(service_destroy_uses_sockets, reset,
                                      disarm),
      cmocka_unit_test_setup_teardown(timer_bad_arguments, reset, disarm),
      cmocka_unit_test_setup_teardown(
          timer_destroy_while_a_woken_waiter_leaves_is_ebusy, reset, disarm),
      cmocka_unit_test_setup_teardown(huge_sleep_is_a_long_sleep, reset,
                                      disarm),
      cmocka_unit_test_setup_teardown(resolver_and_signal_bad_arguments, reset,
                                      disarm),
      cmocka_unit_test_setup_teardown(socket_calls_outside_fibers, reset,
                                      disarm),
      cmocka_unit_test_setup_teardown(socket_calls_in_fibers, reset, disarm),
      cmocka_unit_test_setup_teardown(
          reader_delimiter_longer_than_max_fails_at_once, reset, disarm),
      cmocka_unit_test_setup_teardown(stream_and_reader_bad_arguments, reset,
                                      disarm),
      cmocka_unit_test_setup_teardown(wrong_thread_calls, reset, disarm),
      cmocka_unit_test_setup_teardown(foreign_fd_closed_before_the_poll, reset,
                                      disarm),
      cmocka_unit_test_setup_teardown(signal_held_by_a_foreign_loop_is_ebusy,
                                      reset, disarm),
      cmocka_unit_test_setup_teardown(runtime_fds_are_not_adopted, reset,
                                      disarm),
      cmocka_unit_test_setup_teardown(pipe_free_refused_keeps_the_end, reset,
                                      disarm),
      cmocka_unit_test_setup_teardown(connect_addr_deadline_bad_arguments,
                                      reset, disarm),
      cmocka_unit_test_setup_teardown(out_of_descriptors, reset, disarm),
      cmocka_unit_test_setup_teardown(reader_against_random_bytes, reset,
                                      disarm),
      cmocka_unit_test_setup_teardown(destroy_with_resolves_in_flight, reset,
                                      disarm),
      cmocka_unit_test_setup_teardown(free_while_a_pool_fiber_waits, reset,
                                      disarm),
      cmocka_unit_test_setup_teardown(free_while_another_fiber_waits, reset,
                                      disarm),
      cmocka_unit_test_setup_teardown(deadline_bad_arguments, reset, disarm),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
