/* Cancellation of I/O operations: every operation started with an
 * already-stopped token completes at once with -ECANCELED without suspending; a
 * stop request from another thread completes a pending operation with
 * -ECANCELED, promptly (read, accept, connect, sleep, timer, signal, recvfrom,
 * write, wait_readable); 10,000 start-then-cancel cycles from another thread
 * neither leak nor hang; a completion racing a cancellation is settled
 * once; destroying a context with 100 pending reads cancels them all and
 * lets their fibers run to their end.
 *
 * IOF_TEST_THREADED */
#include "test_support.h"

#include <iofiber/iofiber.h>

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#if defined(__SANITIZE_THREAD__)
#define IOF_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define IOF_TSAN 1
#endif
#endif

/* Per-test watchdog (support/test_support.h). */
IOF_TEST_WATCHDOG(arm_watchdog, disarm_watchdog, 60)

/* Bounded wait for *flag != 0 (about 10 s). */
static bool wait_flag(atomic_int *flag) {
  for (int i = 0; i < 2000; i++) {
    if (atomic_load(flag)) return true;
    sched_yield();
  }
  for (int i = 0; i < 10000; i++) {
    if (atomic_load(flag)) return true;
    sleep_ms(1);
  }
  return atomic_load(flag) != 0;
}

/* ---- fixtures: one of every kind of pending operation ------------------ */

/* A TCP listener (raw fd) with backlog 0 whose queue is full, so that a
 * further connect to it stays pending: the only way to make a loopback
 * connect block. */
typedef struct full_listener {
  int lfd;
  int fill[16];
  int nfill;
  struct sockaddr_in addr;
  bool pending; /* a connect to it was seen to stay pending */
} full_listener;

static void full_listener_open(full_listener *fl) {
  memset(fl, 0, sizeof *fl);
  fl->lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  assert_true(fl->lfd >= 0);
  fl->addr.sin_family = AF_INET;
  fl->addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  assert_int_equal(bind(fl->lfd, (struct sockaddr *)&fl->addr, sizeof fl->addr),
                   0);
  socklen_t al = sizeof fl->addr;
  assert_int_equal(getsockname(fl->lfd, (struct sockaddr *)&fl->addr, &al), 0);
  assert_int_equal(listen(fl->lfd, 0), 0);
  while (fl->nfill < 16) {
    int c = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    assert_true(c >= 0);
    fl->fill[fl->nfill++] = c;
    int r = connect(c, (struct sockaddr *)&fl->addr, sizeof fl->addr);
    if (r == 0) continue;
    assert_int_equal(errno, EINPROGRESS);
    struct pollfd p = {c, POLLOUT, 0};
    if (poll(&p, 1, 200) == 0) {
      fl->pending = true;
      break;
    }
  }
}

static void full_listener_close(full_listener *fl) {
  for (int i = 0; i < fl->nfill; i++) close(fl->fill[i]);
  close(fl->lfd);
}

typedef enum op_kind {
  OP_READ_SOME,
  OP_READ,
  OP_READV,
  OP_WRITE_SOME_FULL,
  OP_WRITE_FULL,
  OP_WRITEV_FULL,
  OP_ACCEPT,
  OP_CONNECT_ADDR,
  OP_CONNECT_HOST,
  OP_UNIX_CONNECT,
  OP_SLEEP_FOR,
  OP_SLEEP_UNTIL,
  OP_TIMER_WAIT,
  OP_RESOLVE,
  OP_SIGNAL_WAIT,
  OP_RECVFROM,
  OP_SENDTO,
  OP_WAIT_READABLE,
  OP_WAIT_WRITABLE_FULL,
  OP_WITH_DEADLINE,
  OP_COUNT
} op_kind;

static const char *const op_names[OP_COUNT] = {"read_some",
                                               "read",
                                               "readv",
                                               "write_some(full)",
                                               "write(full)",
                                               "writev(full)",
                                               "accept",
                                               "tcp_connect_addr",
                                               "tcp_connect",
                                               "unix_connect",
                                               "sleep_for",
                                               "sleep_until",
                                               "timer_wait",
                                               "resolve",
                                               "signal_wait",
                                               "recvfrom",
                                               "sendto",
                                               "wait_readable",
                                               "wait_writable(full)",
                                               "with_deadline"};

typedef struct fixture {
  iof_io_context *io;
  iof_socket *rd;      /* idle: nothing ever arrives */
  int rd_peer;         /* its raw peer */
  iof_socket *wr_full; /* its send buffer is full */
  int wr_peer;
  iof_socket *lst;  /* idle TCP listener */
  iof_socket *udp;  /* idle UDP socket */
  iof_socket *ulst; /* Unix listener */
  char udir[64];
  char upath[96];
  struct sockaddr_in lst_addr;
  struct sockaddr_in udp_addr;
  iof_timer *timer; /* expires in an hour */
  int pipe_r, pipe_w;
  int full_fd; /* raw fd whose send buffer is full, for wait_writable */
  int full_peer;
  full_listener fl;
} fixture;

static void fill_send_buffer(int fd) {
  static char junk[65536];
  for (int i = 0; i < 100000; i++) {
    ssize_t n = send(fd, junk, sizeof junk, MSG_DONTWAIT | MSG_NOSIGNAL);
    if (n < 0) {
      assert_true(errno == EAGAIN || errno == EWOULDBLOCK);
      /* Unix sockets may take more once the small skbs are merged. */
      n = send(fd, junk, 1, MSG_DONTWAIT | MSG_NOSIGNAL);
      if (n < 0) return;
    }
  }
  fail_msg("send buffer never filled");
}

static void fixture_open(fixture *fx) {
  memset(fx, 0, sizeof *fx);
  fx->io = iof_io_context_create();
  assert_non_null(fx->io);
  int sv[2];
  assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
  assert_int_equal(iof_socket_adopt(fx->io, sv[0], &fx->rd), 0);
  fx->rd_peer = sv[1];
  assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
  assert_int_equal(iof_socket_adopt(fx->io, sv[0], &fx->wr_full), 0);
  fx->wr_peer = sv[1];
  fill_send_buffer(iof_socket_fd(fx->wr_full));
  assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
  fx->full_fd = sv[0];
  fx->full_peer = sv[1];
  fill_send_buffer(fx->full_fd);
  assert_int_equal(iof_tcp_listen(fx->io, "127.0.0.1", "0", 0, 0, &fx->lst), 0);
  socklen_t al = sizeof fx->lst_addr;
  assert_int_equal(
      iof_socket_local_addr(fx->lst, (struct sockaddr *)&fx->lst_addr, &al), 0);
  assert_int_equal(iof_udp_bind(fx->io, "127.0.0.1", "0", &fx->udp), 0);
  al = sizeof fx->udp_addr;
  assert_int_equal(
      iof_socket_local_addr(fx->udp, (struct sockaddr *)&fx->udp_addr, &al), 0);
  strcpy(fx->udir, "/tmp/iof_cancel_XXXXXX");
  assert_non_null(mkdtemp(fx->udir));
  snprintf(fx->upath, sizeof fx->upath, "%s/sock", fx->udir);
  assert_int_equal(iof_unix_listen(fx->io, fx->upath, 0, &fx->ulst), 0);
  fx->timer = iof_timer_create(fx->io);
  assert_non_null(fx->timer);
  assert_int_equal(iof_timer_expires_after(fx->timer, 3600 * 1000000000LL), 0);
  int p[2];
  assert_int_equal(pipe2(p, O_CLOEXEC), 0);
  fx->pipe_r = p[0];
  fx->pipe_w = p[1];
  full_listener_open(&fx->fl);
}

static void fixture_close(fixture *fx) {
  assert_int_equal(iof_timer_destroy(fx->timer), 0);
  assert_int_equal(iof_io_context_destroy(fx->io), 0); /* frees sockets */
  close(fx->rd_peer);
  close(fx->wr_peer);
  close(fx->full_fd);
  close(fx->full_peer);
  close(fx->pipe_r);
  close(fx->pipe_w);
  full_listener_close(&fx->fl);
  unlink(fx->upath);
  rmdir(fx->udir);
}

static int deadline_body(void *arg) {
  (void)arg;
  return iof_sleep_for(3600 * 1000000000LL);
}

/* Runs one operation of the given kind on the fixture; what it returns. */
static long run_op(fixture *fx, op_kind k) {
  char buf[64] = {0};
  struct iovec iov = {buf, sizeof buf};
  iof_socket *s = NULL;
  long r;
  switch (k) {
  case OP_READ_SOME:
    return iof_read_some(fx->rd, buf, sizeof buf);
  case OP_READ:
    return iof_read(fx->rd, buf, sizeof buf);
  case OP_READV:
    return iof_readv(fx->rd, &iov, 1);
  case OP_WRITE_SOME_FULL:
    return iof_write_some(fx->wr_full, buf, sizeof buf);
  case OP_WRITE_FULL:
    return iof_write(fx->wr_full, buf, sizeof buf);
  case OP_WRITEV_FULL:
    return iof_writev(fx->wr_full, &iov, 1);
  case OP_ACCEPT:
    r = iof_accept(fx->lst, &s, NULL, NULL);
    if (r == 0) iof_socket_free(s);
    return r;
  case OP_CONNECT_ADDR:
    /* To the full listener: blocks when it can (see full_listener). */
    r = iof_tcp_connect_addr(fx->io, (struct sockaddr *)&fx->fl.addr,
                             sizeof fx->fl.addr, &s);
    if (r == 0) iof_socket_free(s);
    return r;
  case OP_CONNECT_HOST: {
    char port[16];
    snprintf(port, sizeof port, "%d", ntohs(fx->lst_addr.sin_port));
    r = iof_tcp_connect(fx->io, "127.0.0.1", port, &s);
    if (r == 0) iof_socket_free(s);
    return r;
  }
  case OP_UNIX_CONNECT:
    r = iof_unix_connect(fx->io, fx->upath, &s);
    if (r == 0) iof_socket_free(s);
    return r;
  case OP_SLEEP_FOR:
    return iof_sleep_for(3600 * 1000000000LL);
  case OP_SLEEP_UNTIL:
    return iof_sleep_until(iof_now_ns() + 3600 * 1000000000LL);
  case OP_TIMER_WAIT:
    return iof_timer_wait(fx->timer);
  case OP_RESOLVE: {
    struct addrinfo *res = NULL;
    r = iof_resolve(fx->io, "localhost", "80", NULL, &res);
    if (res) freeaddrinfo(res);
    return r;
  }
  case OP_SIGNAL_WAIT:
    return iof_signal_wait(fx->io, SIGUSR2);
  case OP_RECVFROM:
    return iof_recvfrom(fx->udp, buf, sizeof buf, NULL, NULL);
  case OP_SENDTO:
    return iof_sendto(fx->udp, "x", 1, (struct sockaddr *)&fx->udp_addr,
                      sizeof fx->udp_addr);
  case OP_WAIT_READABLE:
    return iof_wait_readable(fx->io, fx->pipe_r, -1);
  case OP_WAIT_WRITABLE_FULL:
    return iof_wait_writable(fx->io, fx->full_fd, -1);
  case OP_WITH_DEADLINE:
    return iof_with_deadline(3600 * 1000000000LL, deadline_body, NULL);
  default:
    return -9999;
  }
}

/* ---- already-stopped token --------------------------------------------- */

typedef struct stopped_run {
  fixture *fx;
  op_kind kind;
  long result;
  int other_ran;           /* set by a fiber queued after the op's fiber */
  int other_ran_at_return; /* its value when the op returned */
  bool returned;
} stopped_run;

static int stopped_op_fn(void *arg) {
  stopped_run *sr = arg;
  sr->result = run_op(sr->fx, sr->kind);
  sr->other_ran_at_return = sr->other_ran;
  sr->returned = true;
  return 0;
}

static int other_fn(void *arg) {
  ((stopped_run *)arg)->other_ran = 1;
  return 0;
}

static int nothing_fn(void *arg) {
  (void)arg;
  return 0;
}

static void
every_operation_with_an_already_stopped_token_fails_at_once_without_suspending(
    void **state) {
  (void)state;
  fixture fx;
  fixture_open(&fx);
  iof_executor_ref ex = iof_io_context_executor(fx.io);

  /* How many fiber runs two fibers that never suspend cost. */
  assert_int_equal(iof_launch(ex, nothing_fn, NULL), 0);
  assert_int_equal(iof_launch(ex, nothing_fn, NULL), 0);
  int base = iof_io_context_run(fx.io);
  assert_true(base >= 2);

  iof_stop_source src;
  assert_int_equal(iof_stop_source_init(&src), 0);
  assert_true(iof_stop_source_request(&src));
  for (int k = 0; k < OP_COUNT; k++) {
    stopped_run sr = {0};
    sr.fx = &fx;
    sr.kind = (op_kind)k;
    iof_launch_opts o = {0};
    o.stop_token = iof_stop_source_token(&src);
    assert_int_equal(iof_run_async(ex, &o, stopped_op_fn, &sr), 0);
    assert_int_equal(iof_launch(ex, other_fn, &sr), 0);
    iof_io_context_restart(fx.io);
    int ran = iof_io_context_run(fx.io);
    if (!sr.returned || sr.result != -ECANCELED || sr.other_ran_at_return ||
        ran != base)
      fail_msg("%s with a stopped token: returned %d result %ld, another "
               "fiber ran before it returned: %d, fiber runs %d (expected %d)",
               op_names[k], sr.returned, sr.result, sr.other_ran_at_return, ran,
               base);
    assert_int_equal(sr.other_ran, 1);
  }
  iof_stop_source_destroy(&src);
  /* Nothing was left armed: the timer has no waiter. */
  fixture_close(&fx);
}

/* ---- a stop request from another thread while blocked ------------------ */

typedef struct blocked_run {
  fixture *fx;
  op_kind kind;
  atomic_int started;
  atomic_int done;
  long result;
  int64_t t_done;
  bool home; /* back on the executor it started on */
} blocked_run;

static int blocked_fn(void *arg) {
  blocked_run *br = arg;
  iof_executor_ref ex = iof_env_current()->executor;
  atomic_store(&br->started, 1);
  br->result = run_op(br->fx, br->kind);
  br->t_done = iof_now_ns();
  br->home = iof_executor_equal(iof_env_current()->executor, ex);
  return 0;
}

static void blocked_done(void *user, int status) {
  (void)status;
  atomic_store(&((blocked_run *)user)->done, 1);
}

typedef struct requester {
  atomic_int *started;
  iof_stop_source *src;
  long delay_ms;
  int64_t t_request;
  bool ok;
} requester;

static void *request_later(void *arg) {
  requester *rq = arg;
  rq->ok = wait_flag(rq->started);
  sleep_ms(rq->delay_ms);
  rq->t_request = iof_now_ns();
  iof_stop_source_request(rq->src);
  return NULL;
}

static void cancel_blocked(fixture *fx, op_kind k) {
  blocked_run br = {0};
  br.fx = fx;
  br.kind = k;
  iof_stop_source src;
  assert_int_equal(iof_stop_source_init(&src), 0);
  iof_launch_opts o = {0};
  o.stop_token = iof_stop_source_token(&src);
  o.on_done = blocked_done;
  o.user = &br;
  assert_int_equal(
      iof_run_async(iof_io_context_executor(fx->io), &o, blocked_fn, &br), 0);
  requester rq = {&br.started, &src, 30, 0, false};
  pthread_t t;
  assert_int_equal(pthread_create(&t, NULL, request_later, &rq), 0);
  iof_io_context_restart(fx->io);
  assert_true(iof_io_context_run(fx->io) >= 2);
  pthread_join(t, NULL);
  assert_true(rq.ok);
  assert_int_equal(atomic_load(&br.done), 1);
  if (br.result != -ECANCELED)
    fail_msg("%s cancelled from another thread returned %ld", op_names[k],
             br.result);
  /* Blocked until the request, then back promptly. */
  assert_true(br.t_done >= rq.t_request);
  if (br.t_done - rq.t_request > 1000000000LL)
    fail_msg("%s took %lld ms to come back after the request", op_names[k],
             (long long)((br.t_done - rq.t_request) / 1000000));
  iof_stop_source_destroy(&src);
}

static void stop_from_another_thread_cancels_blocked_read(void **state) {
  (void)state;
  fixture fx;
  fixture_open(&fx);
  cancel_blocked(&fx, OP_READ_SOME);
  cancel_blocked(&fx, OP_READ);
  cancel_blocked(&fx, OP_READV);
  cancel_blocked(&fx, OP_RECVFROM);
  cancel_blocked(&fx, OP_WAIT_READABLE);
  /* The socket still works after a cancelled read. */
  fixture_close(&fx);
}

static void stop_from_another_thread_cancels_blocked_write(void **state) {
  (void)state;
  fixture fx;
  fixture_open(&fx);
  cancel_blocked(&fx, OP_WRITE_SOME_FULL);
  cancel_blocked(&fx, OP_WRITE_FULL);
  cancel_blocked(&fx, OP_WRITEV_FULL);
  cancel_blocked(&fx, OP_WAIT_WRITABLE_FULL);
  fixture_close(&fx);
}

static void stop_from_another_thread_cancels_blocked_accept(void **state) {
  (void)state;
  fixture fx;
  fixture_open(&fx);
  cancel_blocked(&fx, OP_ACCEPT);
  fixture_close(&fx);
}

static void stop_from_another_thread_cancels_blocked_connect(void **state) {
  (void)state;
  fixture fx;
  fixture_open(&fx);
  if (!fx.fl.pending) {
    /* Documented fallback: connect's cancellation is then covered only by
     * the already-stopped token test. */
    fixture_close(&fx);
    print_message("loopback connect could not be made to block: skipped\n");
    skip();
  }
  cancel_blocked(&fx, OP_CONNECT_ADDR);
  fixture_close(&fx);
}

static void
stop_from_another_thread_cancels_blocked_sleep_and_timer(void **state) {
  (void)state;
  fixture fx;
  fixture_open(&fx);
  cancel_blocked(&fx, OP_SLEEP_FOR);
  cancel_blocked(&fx, OP_SLEEP_UNTIL);
  cancel_blocked(&fx, OP_TIMER_WAIT);
  cancel_blocked(&fx, OP_WITH_DEADLINE);
  fixture_close(&fx);
}

static void stop_from_another_thread_cancels_blocked_signal_wait(void **state) {
  (void)state;
  fixture fx;
  fixture_open(&fx);
  cancel_blocked(&fx, OP_SIGNAL_WAIT);
  fixture_close(&fx);
}

/* ---- 10,000 start-then-cancel cycles from another thread --------------- */

#ifdef IOF_TSAN
#define CYCLES 2000
#else
#define CYCLES 10000
#endif

static const op_kind cycle_kinds[] = {
    OP_READ_SOME,   OP_ACCEPT,        OP_SLEEP_FOR,       OP_TIMER_WAIT,
    OP_RECVFROM,    OP_WAIT_READABLE, OP_WRITE_SOME_FULL, OP_SIGNAL_WAIT,
    OP_SLEEP_UNTIL, OP_WITH_DEADLINE, OP_CONNECT_ADDR};

typedef struct cycler {
  fixture *fx;
  iof_executor_ref ex; /* where the fibers run */
  int cycles;
  const op_kind *kind_list;
  iof_work_guard guard;
  int kinds;
  int not_home;
  int failures;
  int hangs;
  long bad_result;
  op_kind bad_kind;
  int by_mode[3];
} cycler;

static void *cycle_thread(void *arg) {
  cycler *c = arg;
  unsigned seed = 12345;
  for (int i = 0; i < c->cycles; i++) {
    blocked_run br = {0};
    br.fx = c->fx;
    br.kind = c->kind_list[i % c->kinds];
    iof_stop_source src;
    if (iof_stop_source_init(&src) != 0) {
      c->failures++;
      break;
    }
    iof_launch_opts o = {0};
    o.stop_token = iof_stop_source_token(&src);
    o.on_done = blocked_done;
    o.user = &br;
    if (iof_run_async(c->ex, &o, blocked_fn, &br) != 0) {
      c->failures++;
      iof_stop_source_destroy(&src);
      break;
    }
    int mode = (i / c->kinds) % 3;
    if (mode >= 1 && !wait_flag(&br.started)) {
      c->hangs++;
      break;
    }
    if (mode == 2) {
      seed = seed * 1103515245u + 12345u;
      /* Busy for 0 to ~30 us: lands before, during or after arming. */
      for (volatile unsigned n = (seed >> 16) % 30000; n; n--) {
      }
    }
    iof_stop_source_request(&src);
    if (!wait_flag(&br.done)) {
      c->hangs++;
      break;
    }
    if (br.result != -ECANCELED) {
      c->failures++;
      c->bad_result = br.result;
      c->bad_kind = br.kind;
    }
    if (!br.home) c->not_home++;
    c->by_mode[mode]++;
    iof_stop_source_destroy(&src);
  }
  iof_work_guard_reset(&c->guard);
  return NULL;
}

static void
ten_thousand_start_then_cancel_cycles_from_another_thread(void **state) {
  (void)state;
  alarm(120);
  fixture fx;
  fixture_open(&fx);
  cycler c = {0};
  c.fx = &fx;
  c.ex = iof_io_context_executor(fx.io);
  c.cycles = CYCLES;
  c.kind_list = cycle_kinds;
  c.kinds = (int)(sizeof cycle_kinds / sizeof cycle_kinds[0]);
  if (!fx.fl.pending) c.kinds--; /* connect would succeed: leave it out */
  size_t rss0 = iof_test_rss_bytes();
  assert_int_equal(
      iof_work_guard_init(&c.guard, iof_io_context_executor(fx.io)), 0);
  pthread_t t;
  assert_int_equal(pthread_create(&t, NULL, cycle_thread, &c), 0);
  int ran = iof_io_context_run(fx.io);
  pthread_join(t, NULL);
  assert_int_equal(c.hangs, 0);
  if (c.failures)
    fail_msg("%d cycles failed; last: %s returned %ld", c.failures,
             op_names[c.bad_kind], c.bad_result);
  assert_int_equal(c.by_mode[0] + c.by_mode[1] + c.by_mode[2], CYCLES);
  assert_int_equal(c.not_home, 0);
  assert_true(ran >= CYCLES);
  size_t rss1 = iof_test_rss_bytes();
  /* Cycles reuse pooled stacks: no growth with the number of cycles. */
  assert_true(rss1 < rss0 + 64u * 1024 * 1024);
  fixture_close(&fx);
}

/* The same from a thread-pool fiber blocked on an io_context that a third
 * thread runs: the cancellation comes back through the io_context's
 * thread and the fiber resumes on the pool. */

#ifdef IOF_TSAN
#define POOL_CYCLES 500
#else
#define POOL_CYCLES 2000
#endif

static const op_kind pool_kinds[] = {
    OP_READ_SOME,     OP_ACCEPT,          OP_TIMER_WAIT, OP_RECVFROM,
    OP_WAIT_READABLE, OP_WRITE_SOME_FULL, OP_SLEEP_FOR,  OP_WITH_DEADLINE};

static void *run_io_thread(void *arg) {
  iof_io_context_run(((fixture *)arg)->io);
  return NULL;
}

static void start_then_cancel_cycles_on_thread_pool_fibers(void **state) {
  (void)state;
  alarm(120);
  fixture fx;
  fixture_open(&fx);
  iof_thread_pool *pool = iof_thread_pool_create(2);
  assert_non_null(pool);
  cycler c = {0};
  c.fx = &fx;
  c.ex = iof_thread_pool_executor(pool);
  c.cycles = POOL_CYCLES;
  c.kind_list = pool_kinds;
  c.kinds = (int)(sizeof pool_kinds / sizeof pool_kinds[0]);
  assert_int_equal(
      iof_work_guard_init(&c.guard, iof_io_context_executor(fx.io)), 0);
  pthread_t t;
  assert_int_equal(pthread_create(&t, NULL, run_io_thread, &fx), 0);
  cycle_thread(&c); /* resets the guard: the io thread's run returns */
  pthread_join(t, NULL);
  assert_int_equal(c.hangs, 0);
  if (c.failures)
    fail_msg("%d cycles failed; last: %s returned %ld", c.failures,
             op_names[c.bad_kind], c.bad_result);
  assert_int_equal(c.by_mode[0] + c.by_mode[1] + c.by_mode[2], POOL_CYCLES);
  assert_int_equal(c.not_home, 0);
  assert_int_equal(iof_thread_pool_destroy(pool), 0);
  fixture_close(&fx);
}

/* ---- a completion racing a cancellation -------------------------------- */

#ifdef IOF_TSAN
#define RACES 1000
#else
#define RACES 5000
#endif

typedef struct racer {
  fixture *fx;
  iof_work_guard guard;
  int bad;
  int hangs;
  int got_data;
  int got_cancel;
  long bad_result;
} racer;

typedef struct race_run {
  iof_socket *s;
  atomic_int started;
  atomic_int done;
  long result;
  unsigned char byte;
} race_run;

static int race_read_fn(void *arg) {
  race_run *rr = arg;
  atomic_store(&rr->started, 1);
  rr->result = iof_read_some(rr->s, &rr->byte, 1);
  return 0;
}

static void race_done(void *user, int status) {
  (void)status;
  atomic_store(&((race_run *)user)->done, 1);
}

static void *race_thread(void *arg) {
  racer *c = arg;
  int peer = c->fx->rd_peer;
  int fd = iof_socket_fd(c->fx->rd);
  for (int i = 0; i < RACES; i++) {
    race_run rr = {0};
    rr.s = c->fx->rd;
    iof_stop_source src;
    iof_stop_source_init(&src);
    iof_launch_opts o = {0};
    o.stop_token = iof_stop_source_token(&src);
    o.on_done = race_done;
    o.user = &rr;
    iof_run_async(iof_io_context_executor(c->fx->io), &o, race_read_fn, &rr);
    if (!wait_flag(&rr.started)) {
      c->hangs++;
      break;
    }
    unsigned char b = (unsigned char)i;
    if (i & 1) {
      if (send(peer, &b, 1, MSG_NOSIGNAL) != 1) c->bad++;
      iof_stop_source_request(&src);
    } else {
      iof_stop_source_request(&src);
      if (send(peer, &b, 1, MSG_NOSIGNAL) != 1) c->bad++;
    }
    if (!wait_flag(&rr.done)) {
      c->hangs++;
      break;
    }
    if (rr.result == 1) {
      c->got_data++;
      if (rr.byte != b) c->bad++;
    } else if (rr.result == -ECANCELED) {
      c->got_cancel++;
      /* The byte stays queued: take it out, nobody else reads now. */
      unsigned char x;
      ssize_t n = -1;
      for (int k = 0; k < 1000 && n != 1; k++) {
        n = recv(fd, &x, 1, MSG_DONTWAIT);
        if (n != 1) sched_yield();
      }
      if (n != 1 || x != b) c->bad++;
    } else {
      c->bad++;
      c->bad_result = rr.result;
    }
    iof_stop_source_destroy(&src);
  }
  iof_work_guard_reset(&c->guard);
  return NULL;
}

static void completion_racing_cancellation_is_settled_once(void **state) {
  (void)state;
  alarm(120);
  fixture fx;
  fixture_open(&fx);
  racer c = {0};
  c.fx = &fx;
  assert_int_equal(
      iof_work_guard_init(&c.guard, iof_io_context_executor(fx.io)), 0);
  pthread_t t;
  assert_int_equal(pthread_create(&t, NULL, race_thread, &c), 0);
  iof_io_context_run(fx.io);
  pthread_join(t, NULL);
  assert_int_equal(c.hangs, 0);
  if (c.bad) fail_msg("%d bad outcomes (last %ld)", c.bad, c.bad_result);
  assert_int_equal(c.got_data + c.got_cancel, RACES);
  fixture_close(&fx);
}

/* ---- context destroyed with 100 pending reads --------------------------- */

#define PENDING 100

typedef struct pending_reader {
  iof_socket *s;
  int peer;
  long first;  /* the pending read */
  long second; /* a read started after the cancellation */
  int after;   /* code after the reads ran */
  int done_calls;
  int done_status;
} pending_reader;

static int pending_read_fn(void *arg) {
  pending_reader *p = arg;
  char buf[16];
  p->first = iof_read_some(p->s, buf, sizeof buf);
  p->second = iof_read_some(p->s, buf, sizeof buf);
  p->after = 1;
  return 7;
}

static void pending_done(void *user, int status) {
  pending_reader *p = user;
  p->done_calls++;
  p->done_status = status;
}

static void
destroying_context_with_100_pending_reads_cancels_them_all(void **state) {
  (void)state;
  iof_io_context *io = iof_io_context_create();
  assert_non_null(io);
  static pending_reader pr[PENDING];
  memset(pr, 0, sizeof pr);
  for (int i = 0; i < PENDING; i++) {
    int sv[2];
    assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
    assert_int_equal(iof_socket_adopt(io, sv[0], &pr[i].s), 0);
    pr[i].peer = sv[1];
    iof_launch_opts o = {0};
    o.on_done = pending_done;
    o.user = &pr[i];
    assert_int_equal(
        iof_run_async(iof_io_context_executor(io), &o, pending_read_fn, &pr[i]),
        0);
  }
  /* Every reader runs once and blocks. */
  assert_int_equal(iof_io_context_poll(io), PENDING);
  for (int i = 0; i < PENDING; i++) assert_int_equal(pr[i].done_calls, 0);
  assert_int_equal(iof_io_context_destroy(io), 0);
  for (int i = 0; i < PENDING; i++) {
    assert_int_equal(pr[i].first, -ECANCELED);
    assert_int_equal(pr[i].second, -ECANCELED);
    assert_int_equal(pr[i].after, 1);
    assert_int_equal(pr[i].done_calls, 1);
    assert_int_equal(pr[i].done_status, 7);
    /* The context closed the socket (its peer sees end of stream). */
    char c;
    assert_int_equal(recv(pr[i].peer, &c, 1, MSG_DONTWAIT), 0);
    close(pr[i].peer);
  }
}

/* A thread-pool fiber blocked on a socket of a context being destroyed:
 * its read ends -ECANCELED and it finishes on the pool. */
typedef struct pool_reader {
  iof_socket *s;
  iof_executor_ref pool_ex;
  atomic_int reading;
  atomic_int done;
  long r;
  bool home;
} pool_reader;

static int pool_read_fn(void *arg) {
  pool_reader *p = arg;
  char buf[8];
  atomic_store(&p->reading, 1);
  p->r = iof_read_some(p->s, buf, sizeof buf);
  p->home = iof_executor_equal(iof_env_current()->executor, p->pool_ex);
  return 0;
}

static void pool_reader_done(void *user, int status) {
  (void)status;
  atomic_store(&((pool_reader *)user)->done, 1);
}

static void destroy_with_a_pool_fibers_read(bool armed) {
  iof_io_context *io = iof_io_context_create();
  assert_non_null(io);
  iof_thread_pool *pool = iof_thread_pool_create(1);
  assert_non_null(pool);
  int sv[2];
  assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
  pool_reader p = {0};
  p.pool_ex = iof_thread_pool_executor(pool);
  assert_int_equal(iof_socket_adopt(io, sv[0], &p.s), 0);
  iof_launch_opts o = {0};
  o.on_done = pool_reader_done;
  o.user = &p;
  assert_int_equal(iof_run_async(p.pool_ex, &o, pool_read_fn, &p), 0);
  assert_true(wait_flag(&p.reading));
  if (armed) {
    /* The read hops to the io_context and arms there... */
    int ran = 0;
    for (int i = 0; i < 1000 && ran == 0; i++) {
      iof_io_context_restart(io);
      ran = iof_io_context_poll(io);
      if (ran == 0) sleep_ms(1);
    }
    assert_int_equal(ran, 1);
  } else {
    /* ...or its hop is still queued when the destroy begins. */
    sleep_ms(20);
  }
  assert_int_equal(iof_io_context_destroy(io), 0);
  assert_true(wait_flag(&p.done));
  assert_int_equal(p.r, -ECANCELED);
  assert_true(p.home);
  close(sv[1]);
  assert_int_equal(iof_thread_pool_destroy(pool), 0);
}

static void
destroying_a_context_cancels_a_pool_fibers_pending_read(void **state) {
  (void)state;
  destroy_with_a_pool_fibers_read(true);
}

static void
destroying_a_context_cancels_a_pool_fibers_read_still_on_its_way(void **state) {
  (void)state;
  destroy_with_a_pool_fibers_read(false);
}

#define T(f) cmocka_unit_test_setup_teardown(f, arm_watchdog, disarm_watchdog)

int main(void) {
  const struct CMUnitTest tests[] = {
      T(every_operation_with_an_already_stopped_token_fails_at_once_without_suspending),
      T(stop_from_another_thread_cancels_blocked_read),
      T(stop_from_another_thread_cancels_blocked_write),
      T(stop_from_another_thread_cancels_blocked_accept),
      T(stop_from_another_thread_cancels_blocked_connect),
      T(stop_from_another_thread_cancels_blocked_sleep_and_timer),
      T(stop_from_another_thread_cancels_blocked_signal_wait),
      T(ten_thousand_start_then_cancel_cycles_from_another_thread),
      T(start_then_cancel_cycles_on_thread_pool_fibers),
      T(completion_racing_cancellation_is_settled_once),
      T(destroying_context_with_100_pending_reads_cancels_them_all),
      T(destroying_a_context_cancels_a_pool_fibers_pending_read),
      T(destroying_a_context_cancels_a_pool_fibers_read_still_on_its_way),
  };
  if (getenv("IOF_TEST_FILTER"))
    cmocka_set_test_filter(getenv("IOF_TEST_FILTER"));
  return cmocka_run_group_tests(tests, NULL, NULL);
}
