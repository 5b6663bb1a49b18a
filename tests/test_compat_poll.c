/* compat poll, ppoll, select, pselect, epoll_wait(2) (compat_io.h): the
 * kernel's exact answers inside fibers; a fiber blocked in poll on a pipe
 * fed by another fiber; timeouts (in and out of fibers); 500 fds mixing
 * pipes, sockets and a regular file, compared entry by entry with what
 * plain poll says at the same moment; select within FD_SETSIZE; HUP; an
 * epoll fd waited on as a whole; output-only flags in a single fd's
 * events. */
#include "compat_io_test.h"

#include "io/io_internal.h"

#include <dirent.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>

IOF_TEST_CHECK_FIXTURES(setup, teardown, 60)

/* ---- timeouts, the same in and out of fibers ------------------------------
 */

static int sc_timeouts(void *arg) {
  (void)arg;
  int p[2];
  CHECK(iof_compat_pipe(p) == 0);
  struct pollfd f = {p[0], POLLIN, 0};
  errno = 77;
  uint64_t t0 = iof_test_now_ns();
  CHECK(iof_compat_poll(&f, 1, 60) == 0 && f.revents == 0);
  CHECK(errno == 77);
  int64_t ms = ms_since(t0);
  CHECK(ms >= 50 && ms < 5000);
  struct timespec ts = {0, 40 * MS};
  t0 = iof_test_now_ns();
  CHECK(iof_compat_ppoll(&f, 1, &ts, NULL) == 0);
  ms = ms_since(t0);
  CHECK(ms >= 30 && ms < 5000);
  fd_set rd;
  FD_ZERO(&rd);
  FD_SET(p[0], &rd);
  struct timeval tv = {0, 40 * 1000};
  t0 = iof_test_now_ns();
  CHECK(iof_compat_select(p[0] + 1, &rd, NULL, NULL, &tv) == 0);
  CHECK(!FD_ISSET(p[0], &rd));
  ms = ms_since(t0);
  CHECK(ms >= 30 && ms < 5000);
  FD_SET(p[0], &rd);
  t0 = iof_test_now_ns();
  CHECK(iof_compat_pselect(p[0] + 1, &rd, NULL, NULL, &ts, NULL) == 0);
  ms = ms_since(t0);
  CHECK(ms >= 30 && ms < 5000);
  int ep = epoll_create1(EPOLL_CLOEXEC);
  struct epoll_event e = {EPOLLIN, {.fd = p[0]}};
  CHECK(epoll_ctl(ep, EPOLL_CTL_ADD, p[0], &e) == 0);
  t0 = iof_test_now_ns();
  CHECK(iof_compat_epoll_wait(ep, &e, 1, 40) == 0);
  ms = ms_since(t0);
  CHECK(ms >= 30 && ms < 5000);
  t0 = iof_test_now_ns();
  CHECK(iof_compat_epoll_pwait2(ep, &e, 1, &ts, NULL) == 0);
  ms = ms_since(t0);
  CHECK(ms >= 30 && ms < 5000);
  /* Ready at once, with exact results. */
  CHECK(iof_compat_write(p[1], "x", 1) == 1);
  CHECK(iof_compat_poll(&f, 1, 1000) == 1 && f.revents == POLLIN);
  CHECK(iof_compat_epoll_wait(ep, &e, 1, 1000) == 1 && e.data.fd == p[0] &&
        e.events == EPOLLIN);
  CHECK(iof_compat_epoll_pwait2(ep, &e, 1, NULL, NULL) == 1 &&
        e.data.fd == p[0]);
  FD_SET(p[0], &rd);
  FD_SET(p[1], &rd);
  fd_set wr;
  FD_ZERO(&wr);
  FD_SET(p[1], &wr);
  int hi = (p[0] > p[1] ? p[0] : p[1]) + 1;
  CHECK(iof_compat_select(hi, &rd, &wr, NULL, NULL) == 2);
  CHECK(FD_ISSET(p[0], &rd) && !FD_ISSET(p[1], &rd) && FD_ISSET(p[1], &wr));
  /* Errors as the kernel gives them. */
  struct timespec bad = {0, 2000000000};
  errno = 0;
  CHECK(iof_compat_ppoll(&f, 1, &bad, NULL) == -1 && errno == EINVAL);
  errno = 0;
  CHECK(iof_compat_epoll_pwait2(ep, &e, 1, &bad, NULL) == -1 &&
        errno == EINVAL);
  errno = 0;
  CHECK(iof_compat_select(-1, NULL, NULL, NULL, &tv) == -1 && errno == EINVAL);
  errno = 0;
  CHECK(iof_compat_epoll_wait(p[0], &e, 1, 10) == -1 && errno == EINVAL);
  /* The sleep idioms. */
  t0 = iof_test_now_ns();
  CHECK(iof_compat_poll(NULL, 0, 30) == 0);
  CHECK(ms_since(t0) >= 25);
  tv.tv_sec = 0;
  tv.tv_usec = 30 * 1000;
  t0 = iof_test_now_ns();
  CHECK(iof_compat_select(0, NULL, NULL, NULL, &tv) == 0);
  CHECK(ms_since(t0) >= 25);
  iof_compat_close(ep);
  iof_compat_close(p[0]);
  iof_compat_close(p[1]);
  return 0;
}

static void test_timeouts(void **s) {
  (void)s;
  both_ways(sc_timeouts, NULL);
}

/* ---- a fiber blocked in poll, fed by another fiber ----------------------- */

typedef struct feed_ctx {
  int p[2];
  int r;
  short revents;
  int err;
  int64_t waited_ms;
  atomic_int ticks;
} feed_ctx;

static int poller(void *arg) {
  feed_ctx *c = arg;
  struct pollfd f[2] = {{c->p[0], POLLIN, 0}, {-1, POLLIN, 0}};
  errno = 55;
  uint64_t t0 = iof_test_now_ns();
  c->r = iof_compat_poll(f, 2, 10000);
  c->err = errno;
  c->waited_ms = ms_since(t0);
  c->revents = f[0].revents;
  CHECK(f[1].revents == 0);
  return 0;
}

static int feeder(void *arg) {
  feed_ctx *c = arg;
  for (int i = 0; i < 50; i++) {
    atomic_fetch_add(&c->ticks, 1);
    iof_compat_usleep(1000);
  }
  CHECK(iof_compat_write(c->p[1], "data", 4) == 4);
  return 0;
}

static void test_poll_fed_by_fiber(void **s) {
  (void)s;
  feed_ctx c = {0};
  assert_int_equal(pipe(c.p), 0);
  iof_io_context *io = new_io();
  launch(io, poller, &c);
  launch(io, feeder, &c);
  run_all(io);
  assert_int_equal(iof_io_context_destroy(io), 0);
  assert_no_failures();
  assert_int_equal(c.r, 1);
  assert_int_equal(c.revents, POLLIN);
  assert_int_equal(c.err, 55);
  assert_int_equal(atomic_load(&c.ticks), 50);
  assert_true(c.waited_ms >= 40);
  close(c.p[0]);
  close(c.p[1]);
}

/* ---- many fds -------------------------------------------------------------
 */

#define NPIPES 400
#define NPAIRS 50

typedef struct many_ctx {
  int pipes[NPIPES][2];
  int pairs[NPAIRS][2];
  int file;
  int nfds;
  struct pollfd fds[2 * NPIPES + 2 * NPAIRS + 1];
  int which; /* the pipe the feeder writes to */
  int hup;   /* the pipe whose writer the feeder closes */
  int r, r2;
  bool select_mode;
} many_ctx;

static void raise_nofile(rlim_t want) {
  struct rlimit rl;
  assert_int_equal(getrlimit(RLIMIT_NOFILE, &rl), 0);
  if (rl.rlim_cur < want && rl.rlim_max > rl.rlim_cur) {
    rl.rlim_cur = rl.rlim_max;
    setrlimit(RLIMIT_NOFILE, &rl);
  }
  assert_int_equal(getrlimit(RLIMIT_NOFILE, &rl), 0);
  if (rl.rlim_cur < want) skip();
}

static void make_fds(many_ctx *m) {
  for (int i = 0; i < NPIPES; i++) assert_int_equal(pipe(m->pipes[i]), 0);
  for (int i = 0; i < NPAIRS; i++)
    assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, m->pairs[i]), 0);
  char path[] = "/tmp/iof_compat_poll_XXXXXX";
  m->file = mkstemp(path);
  assert_true(m->file >= 0);
  unlink(path);
}

static void free_fds(many_ctx *m) {
  for (int i = 0; i < NPIPES; i++) {
    iof_compat_close(m->pipes[i][0]);
    iof_compat_close(m->pipes[i][1]);
  }
  for (int i = 0; i < NPAIRS; i++) {
    iof_compat_close(m->pairs[i][0]);
    iof_compat_close(m->pairs[i][1]);
  }
  iof_compat_close(m->file);
}

/* Everything that cannot be ready yet: the pipes' read ends, both ends of
 * the socket pairs for reading. */
static void fill_quiet(many_ctx *m) {
  int n = 0;
  for (int i = 0; i < NPIPES; i++)
    m->fds[n++] = (struct pollfd){m->pipes[i][0], POLLIN | POLLPRI, 0};
  for (int i = 0; i < NPAIRS; i++) {
    m->fds[n++] = (struct pollfd){m->pairs[i][0], POLLIN, 0};
    m->fds[n++] = (struct pollfd){m->pairs[i][1], POLLIN | POLLRDHUP, 0};
  }
  m->nfds = n;
}

static int many_poller(void *arg) {
  many_ctx *m = arg;
  m->r = iof_compat_poll(m->fds, (nfds_t)m->nfds, 10000);
  /* The kernel's answer at the same moment must be identical. */
  struct pollfd copy[sizeof m->fds / sizeof m->fds[0]];
  memcpy(copy, m->fds, sizeof copy);
  m->r2 = poll(copy, (nfds_t)m->nfds, 0);
  for (int i = 0; i < m->nfds; i++) CHECK(copy[i].revents == m->fds[i].revents);
  return 0;
}

static int many_feeder(void *arg) {
  many_ctx *m = arg;
  iof_compat_usleep(50 * 1000);
  if (m->hup >= 0)
    iof_compat_close(m->pipes[m->hup][1]);
  else
    CHECK(iof_compat_write(m->pipes[m->which][1], "z", 1) == 1);
  return 0;
}

static void test_poll_500(void **s) {
  (void)s;
  raise_nofile(2 * NPIPES + 2 * NPAIRS + 64);
  many_ctx *m = calloc(1, sizeof *m);
  make_fds(m);
  fill_quiet(m);
  assert_true(m->nfds == 500);
  /* One pipe gets data later: exactly its entry shows POLLIN. */
  m->which = 137;
  m->hup = -1;
  iof_io_context *io = new_io();
  launch(io, many_poller, m);
  launch(io, many_feeder, m);
  run_all(io);
  assert_no_failures();
  assert_int_equal(m->r, 1);
  assert_int_equal(m->r2, 1);
  for (int i = 0; i < m->nfds; i++)
    assert_int_equal(m->fds[i].revents, i == 137 ? POLLIN : 0);
  char b;
  assert_int_equal(read(m->pipes[137][0], &b, 1), 1);
  /* A writer closing: POLLHUP on that entry only. */
  fill_quiet(m);
  m->hup = 42;
  launch(io, many_poller, m);
  launch(io, many_feeder, m);
  run_all(io);
  assert_no_failures();
  assert_int_equal(m->r, 1);
  assert_int_equal(m->fds[42].revents, POLLHUP);
  m->pipes[42][1] = -1;
  /* Ready at once: the file, writable sockets, a peer's data. */
  fill_quiet(m);
  m->fds[m->nfds++] = (struct pollfd){m->file, POLLIN | POLLOUT, 0};
  m->fds[NPIPES].events |= POLLOUT;
  assert_int_equal(write(m->pairs[3][1], "q", 1), 1);
  launch(io, many_poller, m);
  run_all(io);
  assert_no_failures();
  assert_int_equal(m->r, m->r2);
  assert_int_equal(m->r, 4); /* 42 HUP, pair0 OUT, pair3 IN, file */
  assert_int_equal(m->fds[NPIPES].revents, POLLOUT);
  assert_int_equal(m->fds[NPIPES + 6].revents, POLLIN);
  assert_int_equal(m->fds[m->nfds - 1].revents, POLLIN | POLLOUT);
  assert_int_equal(iof_io_context_destroy(io), 0);
  free_fds(m);
  free(m);
}

/* select over about 200 fds (all below FD_SETSIZE), with one read end fed
 * later, and pselect; the sets match the kernel's. */
typedef struct sel_ctx {
  int pipes[100][2];
  int hi;
  fd_set rd, wr;
  int r;
  bool use_pselect;
} sel_ctx;

static int selector(void *arg) {
  sel_ctx *c = arg;
  FD_ZERO(&c->rd);
  FD_ZERO(&c->wr);
  for (int i = 0; i < 100; i++) FD_SET(c->pipes[i][0], &c->rd);
  struct timeval tv = {10, 0};
  struct timespec ts = {10, 0};
  c->r = c->use_pselect
             ? iof_compat_pselect(c->hi, &c->rd, &c->wr, NULL, &ts, NULL)
             : iof_compat_select(c->hi, &c->rd, &c->wr, NULL, &tv);
  if (!c->use_pselect) CHECK(tv.tv_sec < 10 && tv.tv_sec >= 5);
  return 0;
}

static int sel_feeder(void *arg) {
  sel_ctx *c = arg;
  iof_compat_usleep(30 * 1000);
  CHECK(iof_compat_write(c->pipes[77][1], "k", 1) == 1);
  return 0;
}

static void test_select_many(void **s) {
  (void)s;
  sel_ctx c = {0};
  for (int i = 0; i < 100; i++) {
    assert_int_equal(pipe(c.pipes[i]), 0);
    if (c.pipes[i][0] >= c.hi) c.hi = c.pipes[i][0] + 1;
    if (c.pipes[i][1] >= c.hi) c.hi = c.pipes[i][1] + 1;
  }
  assert_true(c.hi <= FD_SETSIZE);
  for (int mode = 0; mode < 2; mode++) {
    c.use_pselect = mode;
    iof_io_context *io = new_io();
    launch(io, selector, &c);
    launch(io, sel_feeder, &c);
    run_all(io);
    assert_int_equal(iof_io_context_destroy(io), 0);
    assert_no_failures();
    assert_int_equal(c.r, 1);
    for (int i = 0; i < 100; i++)
      assert_int_equal(!!FD_ISSET(c.pipes[i][0], &c.rd), i == 77);
    char b;
    assert_int_equal(read(c.pipes[77][0], &b, 1), 1);
  }
  for (int i = 0; i < 100; i++) {
    close(c.pipes[i][0]);
    close(c.pipes[i][1]);
  }
}

/* epoll_wait in a fiber waits for the epoll fd itself. */
typedef struct ep_ctx {
  int ep, p[2];
  int r;
  struct epoll_event ev[4];
} ep_ctx;

static int ep_waiter(void *arg) {
  ep_ctx *c = arg;
  c->r = iof_compat_epoll_wait(c->ep, c->ev, 4, 10000);
  return 0;
}

static int ep_feeder(void *arg) {
  ep_ctx *c = arg;
  iof_compat_usleep(30 * 1000);
  CHECK(iof_compat_write(c->p[1], "e", 1) == 1);
  return 0;
}

static void test_epoll_wait(void **s) {
  (void)s;
  ep_ctx c = {0};
  c.ep = epoll_create1(0);
  assert_int_equal(pipe(c.p), 0);
  struct epoll_event e = {EPOLLIN, {.u64 = 99}};
  assert_int_equal(epoll_ctl(c.ep, EPOLL_CTL_ADD, c.p[0], &e), 0);
  iof_io_context *io = new_io();
  launch(io, ep_waiter, &c);
  launch(io, ep_feeder, &c);
  run_all(io);
  assert_int_equal(iof_io_context_destroy(io), 0);
  assert_no_failures();
  assert_int_equal(c.r, 1);
  assert_int_equal(c.ev[0].data.u64, 99);
  assert_int_equal(c.ev[0].events, EPOLLIN);
  close(c.ep);
  close(c.p[0]);
  close(c.p[1]);
}

/* ---- a close from another fiber ends a poll -------------------------------
 */

typedef struct close_ctx {
  int sv[2], nsv[2];
  int r[2], revents[2], err[2];
  int64_t ms[2];
} close_ctx;

static close_ctx *cc;

/* Two pollers on the same socket, without and with a timeout. */
static int close_poller(void *arg) {
  int i = (int)(intptr_t)arg;
  struct pollfd f = {cc->sv[0], POLLIN, 0};
  uint64_t t0 = iof_test_now_ns();
  errno = 0;
  cc->r[i] = iof_compat_poll(&f, 1, i ? 5000 : -1);
  cc->err[i] = errno;
  cc->revents[i] = f.revents;
  cc->ms[i] = ms_since(t0);
  return 0;
}

/* Closes the number both wait on, then makes it name a readable socket:
 * neither poller may report the new file. */
static int closer(void *arg) {
  (void)arg;
  iof_compat_usleep(30 * 1000);
  CHECK(iof_compat_close(cc->sv[0]) == 0);
  CHECK(iof_compat_socketpair(AF_UNIX, SOCK_STREAM, 0, cc->nsv) == 0);
  CHECK(iof_compat_write(cc->nsv[1], "n", 1) == 1);
  return 0;
}

static int close_setup(void *arg) {
  (void)arg;
  CHECK(iof_compat_socketpair(AF_UNIX, SOCK_STREAM, 0, cc->sv) == 0);
  return 0;
}

static void test_poll_ends_on_close(void **s) {
  (void)s;
  close_ctx c = {0};
  cc = &c;
  iof_io_context *io = new_io();
  launch(io, close_setup, NULL);
  run_all(io);
  launch(io, close_poller, (void *)(intptr_t)0);
  launch(io, close_poller, (void *)(intptr_t)1);
  launch(io, closer, NULL);
  run_all(io);
  assert_int_equal(iof_io_context_destroy(io), 0);
  assert_no_failures();
  for (int i = 0; i < 2; i++) {
    assert_int_equal(c.r[i], 1);
    assert_int_equal(c.revents[i], POLLNVAL);
    assert_int_equal(c.err[i], 0);
    assert_true(c.ms[i] < 2000); /* ended by the close, not a timeout */
  }
  close(c.sv[1]);
  close(c.nsv[0]);
  close(c.nsv[1]);
}

/* ---- a close that meets the timeout ----------------------------------------
 */

/* The timeouts of a poll and a select end their waits on this io thread,
 * and before either fiber runs again other fibers close the numbers they
 * waited on. The close came before the calls returned: they answer as for
 * any close during the wait (POLLNVAL, EBADF), not with the kernel's view
 * of the number (the old file: the close waits for the waiters to leave
 * before the number goes; or a file that took it since). The timeouts and
 * the closers' wake-ups (10 ms earlier) fire in one pass of the loop, held
 * up by a fiber that blocks the thread: libev runs the earlier timers
 * first, so the closers are ahead of the waiters in the queue. */
typedef struct race_ctx {
  int p[2], s[2];
  int r_poll, revents, err_poll;
  int r_sel, err_sel;
  bool sel_set;
} race_ctx;

/* Numbers compat knows (the waits link to their slots). */
static int race_setup(void *arg) {
  race_ctx *c = arg;
  CHECK(iof_compat_pipe(c->p) == 0);
  CHECK(iof_compat_socketpair(AF_UNIX, SOCK_STREAM, 0, c->s) == 0);
  return 0;
}

static int race_poller(void *arg) {
  race_ctx *c = arg;
  struct pollfd f = {c->p[0], POLLIN, 0};
  errno = 0;
  c->r_poll = iof_compat_poll(&f, 1, 50);
  c->err_poll = errno;
  c->revents = f.revents;
  return 0;
}

static int race_selecter(void *arg) {
  race_ctx *c = arg;
  fd_set rd;
  FD_ZERO(&rd);
  FD_SET(c->s[0], &rd);
  struct timeval tv = {0, 50 * 1000};
  errno = 0;
  c->r_sel = iof_compat_select(c->s[0] + 1, &rd, NULL, NULL, &tv);
  c->err_sel = errno;
  c->sel_set = FD_ISSET(c->s[0], &rd);
  return 0;
}

/* One closer per number: a close lets the waiters it ends run before it
 * returns. */
static int race_closer(void *arg) {
  int *fd = arg;
  iof_compat_usleep(40 * 1000);
  CHECK(iof_compat_close(*fd) == 0);
  return 0;
}

/* Blocks the thread (a plain sleep) past every deadline above. */
static int race_staller(void *arg) {
  (void)arg;
  struct timespec ts = {0, 150 * MS};
  while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
  }
  return 0;
}

static void test_close_meets_timeout(void **s) {
  (void)s;
  race_ctx c = {0};
  iof_io_context *io = new_io();
  launch(io, race_setup, &c);
  run_all(io);
  launch(io, race_poller, &c);
  launch(io, race_selecter, &c);
  launch(io, race_closer, &c.p[0]);
  launch(io, race_closer, &c.s[0]);
  launch(io, race_staller, NULL);
  run_all(io);
  assert_int_equal(iof_io_context_destroy(io), 0);
  assert_no_failures();
  assert_int_equal(c.r_poll, 1);
  assert_int_equal(c.revents, POLLNVAL);
  assert_int_equal(c.err_poll, 0);
  assert_int_equal(c.r_sel, -1);
  assert_int_equal(c.err_sel, EBADF);
  assert_true(c.sel_set); /* the set as given */
  close(c.p[1]);
  close(c.s[1]);
}

/* ---- output-only flags in events keep the single fd wait -----------------
 */

/* libpq polls one socket for POLLIN | POLLERR. POLLERR, POLLHUP and
 * POLLNVAL are output only, so such a wait is the single fd's: it must not
 * build a throwaway epoll set, which cost three system calls per wait. */

typedef struct outflags_ctx {
  int sv[2];
  int r;
  short revents;
  int epolls_before, epolls_during;
} outflags_ctx;

/* The epoll instances open in this process, from /proc/self/fd. */
static int count_epoll_fds(void) {
  DIR *d = opendir("/proc/self/fd");
  if (!d) return -1;
  int n = 0;
  struct dirent *e;
  while ((e = readdir(d)) != NULL) {
    char path[300], target[64];
    snprintf(path, sizeof path, "/proc/self/fd/%s", e->d_name);
    ssize_t l = readlink(path, target, sizeof target - 1);
    if (l <= 0) continue;
    target[l] = '\0';
    n += strcmp(target, "anon_inode:[eventpoll]") == 0;
  }
  closedir(d);
  return n;
}

static int outflags_poller(void *arg) {
  outflags_ctx *c = arg;
  struct pollfd f = {c->sv[0], POLLIN | POLLERR | POLLHUP | POLLNVAL, 0};
  c->r = iof_compat_poll(&f, 1, 5000);
  c->revents = f.revents;
  return 0;
}

static int outflags_checker(void *arg) {
  outflags_ctx *c = arg;
  c->epolls_before = count_epoll_fds();
  iof_compat_usleep(30 * 1000); /* the poller is waiting by now */
  c->epolls_during = count_epoll_fds();
  CHECK(iof_compat_write(c->sv[1], "x", 1) == 1);
  return 0;
}

static void test_poll_output_flags_single_fd(void **s) {
  (void)s;
  outflags_ctx c = {0};
  assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, c.sv), 0);
  iof_io_context *io = new_io();
  launch(io, outflags_checker, &c);
  launch(io, outflags_poller, &c);
  run_all(io);
  assert_int_equal(iof_io_context_destroy(io), 0);
  assert_no_failures();
  assert_int_equal(c.r, 1);
  assert_int_equal(c.revents, POLLIN);
  assert_true(c.epolls_before > 0);
  assert_int_equal(c.epolls_during, c.epolls_before);
  close(c.sv[0]);
  close(c.sv[1]);
}

/* ---- a few fds: a watcher each, no epoll set -----------------------------
 */

/* poll and select on up to 8 fds wait with a watcher per fd on the loop;
 * a throwaway epoll set (create, an add per fd, close: 4+ system calls per
 * wait) is only for more fds or conditions a watcher cannot express. */

typedef struct few_ctx {
  int a[2], b[2];
  int r_poll, r_select, r_many, r_closed;
  short rev_a, rev_b, rev_closed, rev_a_closed;
  bool sel_a, sel_b;
  int epolls_before, during_poll, during_select, during_many;
} few_ctx;

static int few_poller(void *arg) {
  few_ctx *c = arg;
  struct pollfd f[3] = {
      {c->a[0], POLLIN, 0}, {-1, POLLIN, 0}, {c->b[0], POLLIN, 0}};
  c->r_poll = iof_compat_poll(f, 3, 5000);
  c->rev_a = f[0].revents;
  c->rev_b = f[2].revents;
  char x;
  CHECK(iof_compat_read(c->b[0], &x, 1) == 1);
  /* select on the same two: the other one becomes readable. */
  fd_set rd;
  FD_ZERO(&rd);
  FD_SET(c->a[0], &rd);
  FD_SET(c->b[0], &rd);
  int nfds = (c->a[0] > c->b[0] ? c->a[0] : c->b[0]) + 1;
  struct timeval tv = {5, 0};
  c->r_select = iof_compat_select(nfds, &rd, NULL, NULL, &tv);
  c->sel_a = FD_ISSET(c->a[0], &rd);
  c->sel_b = FD_ISSET(c->b[0], &rd);
  CHECK(iof_compat_read(c->a[0], &x, 1) == 1);
  /* nine fds: past the limit, an epoll set (still right). */
  struct pollfd nine[9];
  for (int i = 0; i < 9; i++) nine[i] = (struct pollfd){c->a[0], POLLIN, 0};
  nine[8].fd = c->b[0];
  c->r_many = iof_compat_poll(nine, 9, 5000);
  CHECK(nine[8].revents == POLLIN && nine[0].revents == 0);
  CHECK(iof_compat_read(c->b[0], &x, 1) == 1);
  /* one of them closed by another fiber meanwhile: POLLNVAL for it. */
  struct pollfd g[2] = {{c->a[0], POLLIN, 0}, {c->b[0], POLLIN, 0}};
  c->r_closed = iof_compat_poll(g, 2, 5000);
  c->rev_closed = g[1].revents;
  c->rev_a_closed = g[0].revents;
  CHECK(g[1].fd == c->b[0]); /* the array as given */
  return 0;
}

static int few_checker(void *arg) {
  few_ctx *c = arg;
  c->epolls_before = count_epoll_fds();
  iof_compat_usleep(30 * 1000); /* the poller waits in poll */
  c->during_poll = count_epoll_fds();
  CHECK(iof_compat_write(c->b[1], "x", 1) == 1);
  iof_compat_usleep(30 * 1000); /* in select */
  c->during_select = count_epoll_fds();
  CHECK(iof_compat_write(c->a[1], "y", 1) == 1);
  iof_compat_usleep(30 * 1000); /* in the nine-fd poll */
  c->during_many = count_epoll_fds();
  CHECK(iof_compat_write(c->b[1], "z", 1) == 1);
  iof_compat_usleep(30 * 1000); /* in the last poll */
  /* Ready and closed at once: both reported, the closed one POLLNVAL. */
  CHECK(iof_compat_write(c->a[1], "w", 1) == 1);
  CHECK(iof_compat_close(c->b[0]) == 0);
  return 0;
}

static void test_poll_select_few_fds_no_epoll_set(void **s) {
  (void)s;
  few_ctx c = {0};
  assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, c.a), 0);
  assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, c.b), 0);
  iof_io_context *io = new_io();
  launch(io, few_checker, &c);
  launch(io, few_poller, &c);
  run_all(io);
  assert_int_equal(iof_io_context_destroy(io), 0);
  assert_no_failures();
  assert_int_equal(c.r_poll, 1);
  assert_int_equal(c.rev_a, 0);
  assert_int_equal(c.rev_b, POLLIN);
  assert_int_equal(c.r_select, 1);
  assert_true(c.sel_a && !c.sel_b);
  assert_int_equal(c.r_many, 1);
  assert_int_equal(c.r_closed, 2);
  assert_int_equal(c.rev_closed, POLLNVAL);
  assert_int_equal(c.rev_a_closed, POLLIN);
  assert_true(c.epolls_before > 0);
  assert_int_equal(c.during_poll, c.epolls_before);
  assert_int_equal(c.during_select, c.epolls_before);
  assert_int_equal(c.during_many, c.epolls_before + 1);
  close(c.a[0]);
  close(c.a[1]);
  close(c.b[1]);
}

/* select on two fds, one closed by another fiber meanwhile: EBADF, the
 * sets as given; the number is not waited on again. */
typedef struct sel_close_ctx {
  int a[2], b[2];
  int r, err;
  bool a_set, b_set;
} sel_close_ctx;

static int sel_close_waiter(void *arg) {
  sel_close_ctx *c = arg;
  fd_set rd;
  FD_ZERO(&rd);
  FD_SET(c->a[0], &rd);
  FD_SET(c->b[0], &rd);
  int nfds = (c->a[0] > c->b[0] ? c->a[0] : c->b[0]) + 1;
  struct timeval tv = {5, 0};
  c->r = iof_compat_select(nfds, &rd, NULL, NULL, &tv);
  c->err = errno;
  c->a_set = FD_ISSET(c->a[0], &rd);
  c->b_set = FD_ISSET(c->b[0], &rd);
  return 0;
}

static int sel_close_closer(void *arg) {
  sel_close_ctx *c = arg;
  iof_compat_usleep(30 * 1000);
  CHECK(iof_compat_close(c->b[0]) == 0);
  return 0;
}

static void test_select_few_fds_one_closed(void **s) {
  (void)s;
  sel_close_ctx c = {0};
  assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, c.a), 0);
  assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, c.b), 0);
  iof_io_context *io = new_io();
  launch(io, sel_close_waiter, &c);
  launch(io, sel_close_closer, &c);
  run_all(io);
  assert_int_equal(iof_io_context_destroy(io), 0);
  assert_no_failures();
  assert_int_equal(c.r, -1);
  assert_int_equal(c.err, EBADF);
  assert_true(c.a_set && c.b_set);
  close(c.a[0]);
  close(c.a[1]);
  close(c.b[1]);
}

/* Masked waits: the signalfd of the signals the mask lets in (SIGUSR2,
 * blocked on the thread here) is one more watched fd, not a reason for an
 * epoll set. */
typedef struct masked_ctx {
  int p[2];
  int r_ppoll, r_pselect;
  int epolls_before, during_ppoll, during_pselect;
} masked_ctx;

static int masked_waiter(void *arg) {
  masked_ctx *c = arg;
  sigset_t let_in;
  pthread_sigmask(SIG_BLOCK, NULL, &let_in);
  sigdelset(&let_in, SIGUSR2);
  struct timespec ts = {5, 0};
  struct pollfd f = {c->p[0], POLLIN, 0};
  c->r_ppoll = iof_compat_ppoll(&f, 1, &ts, &let_in);
  char x;
  CHECK(iof_compat_read(c->p[0], &x, 1) == 1);
  fd_set rd;
  FD_ZERO(&rd);
  FD_SET(c->p[0], &rd);
  c->r_pselect = iof_compat_pselect(c->p[0] + 1, &rd, NULL, NULL, &ts, &let_in);
  CHECK(iof_compat_read(c->p[0], &x, 1) == 1);
  return 0;
}

static int masked_checker(void *arg) {
  masked_ctx *c = arg;
  c->epolls_before = count_epoll_fds();
  iof_compat_usleep(30 * 1000); /* in ppoll */
  c->during_ppoll = count_epoll_fds();
  CHECK(iof_compat_write(c->p[1], "x", 1) == 1);
  iof_compat_usleep(30 * 1000); /* in pselect */
  c->during_pselect = count_epoll_fds();
  CHECK(iof_compat_write(c->p[1], "y", 1) == 1);
  return 0;
}

static void test_masked_waits_no_epoll_set(void **s) {
  (void)s;
  sigset_t usr2, old;
  sigemptyset(&usr2);
  sigaddset(&usr2, SIGUSR2);
  pthread_sigmask(SIG_BLOCK, &usr2, &old);
  masked_ctx c = {0};
  assert_int_equal(pipe(c.p), 0);
  iof_io_context *io = new_io();
  launch(io, masked_checker, &c);
  launch(io, masked_waiter, &c);
  run_all(io);
  assert_int_equal(iof_io_context_destroy(io), 0);
  pthread_sigmask(SIG_SETMASK, &old, NULL);
  assert_no_failures();
  assert_int_equal(c.r_ppoll, 1);
  assert_int_equal(c.r_pselect, 1);
  assert_true(c.epolls_before > 0);
  assert_int_equal(c.during_ppoll, c.epolls_before);
  assert_int_equal(c.during_pselect, c.epolls_before);
  close(c.p[0]);
  close(c.p[1]);
}

/* ---- a fiber thread keeps its epoll set ------------------------------------
 * A fiber thread (compat's pthread_create) polling more fds than get a
 * watcher each keeps one epoll set from wait to wait: it stays open after
 * the first wait and no other is made later. The set follows what changes:
 * an entry's events, a number that names another file by now (dup2 over
 * it: the old registration is gone, the new file's must be made), and the
 * set's own fd closed by the program. A wait whose set missed the write
 * would end only at its 5 s timeout. */
#define KN 20
typedef struct kept_ctx {
  int sv[KN][2];
  struct pollfd fds[KN];
  int feed;    /* the entry whose peer the feeder writes to */
  int go[2];   /* poller -> feeder: write now (after a pause) */
  int sets[6]; /* epoll instances seen after each round */
} kept_ctx;

static void *kept_feeder(void *arg) {
  kept_ctx *c = arg;
  char b;
  while (iof_compat_read(c->go[0], &b, 1) == 1) {
    iof_compat_usleep(20 * 1000); /* the poller waits by then */
    CHECK(iof_compat_write(c->sv[c->feed][1], "k", 1) == 1);
  }
  return NULL;
}

/* One round: the feeder writes to entry `feed`'s peer; poll must report
 * exactly that entry, which is then drained. */
static void kept_round(kept_ctx *c, int feed) {
  c->feed = feed;
  CHECK(iof_compat_write(c->go[1], "g", 1) == 1);
  for (int i = 0; i < KN; i++) c->fds[i].revents = 0;
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  int r = iof_compat_poll(c->fds, KN, 5000);
  clock_gettime(CLOCK_MONOTONIC, &t1);
  CHECK(r == 1);
  /* Woken by the write, not by the timeout's last check. */
  CHECK(t1.tv_sec - t0.tv_sec < 3);
  for (int i = 0; i < KN; i++)
    CHECK(c->fds[i].revents == (i == feed ? POLLIN : 0));
  char b;
  CHECK(iof_compat_read(c->fds[feed].fd, &b, 1) == 1);
}

static void *kept_poller(void *arg) {
  kept_ctx *c = arg;
  int before = count_epoll_fds();
  kept_round(c, 7);
  c->sets[0] = count_epoll_fds() - before; /* kept: 1 */
  kept_round(c, 12);
  c->sets[1] = count_epoll_fds() - before; /* the same one: 1 */
  /* Entry 5 asks for nothing now, then for POLLIN again. */
  c->fds[5].events = 0;
  kept_round(c, 9);
  c->fds[5].events = POLLIN;
  kept_round(c, 5);
  c->sets[2] = count_epoll_fds() - before;
  /* Entry 15's number names another socket (dup2 closes the old one). */
  int nv[2];
  CHECK(iof_compat_socketpair(AF_UNIX, SOCK_STREAM, 0, nv) == 0);
  CHECK(iof_compat_dup2(nv[0], c->sv[15][0]) == c->sv[15][0]);
  CHECK(iof_compat_close(nv[0]) == 0);
  int old_peer = c->sv[15][1]; /* open: the old socket makes no event */
  c->sv[15][1] = nv[1];
  kept_round(c, 15);
  CHECK(iof_compat_close(old_peer) == 0);
  c->sets[3] = count_epoll_fds() - before;
  /* The program closes every epoll fd it did not make (a closefrom). */
  for (int fd = 3; fd < 4096; fd++) {
    char path[64], target[64];
    snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
    ssize_t l = readlink(path, target, sizeof target - 1);
    if (l <= 0) continue;
    target[l] = '\0';
    if (strcmp(target, "anon_inode:[eventpoll]") == 0 && !iof__rt_fd_owned(fd))
      (void)iof_compat_close(fd);
  }
  kept_round(c, 3);
  c->sets[4] = count_epoll_fds();
  return NULL;
}

static int kept_main(void *arg) {
  kept_ctx *c = arg;
  for (int i = 0; i < KN; i++) {
    CHECK(iof_compat_socketpair(AF_UNIX, SOCK_STREAM, 0, c->sv[i]) == 0);
    c->fds[i] = (struct pollfd){c->sv[i][0], POLLIN, 0};
  }
  CHECK(iof_compat_pipe(c->go) == 0);
  pthread_t f, p;
  CHECK(iof_compat_pthread_create(&f, NULL, kept_feeder, c) == 0);
  CHECK(iof_compat_pthread_create(&p, NULL, kept_poller, c) == 0);
  CHECK(iof_compat_pthread_join(p, NULL) == 0);
  CHECK(iof_compat_close(c->go[1]) == 0); /* the feeder's read ends */
  CHECK(iof_compat_pthread_join(f, NULL) == 0);
  CHECK(iof_compat_close(c->go[0]) == 0);
  for (int i = 0; i < KN; i++) {
    CHECK(iof_compat_close(c->sv[i][0]) == 0);
    CHECK(iof_compat_close(c->sv[i][1]) == 0);
  }
  return 0;
}

static void test_fiber_thread_keeps_its_set(void **s) {
  (void)s;
  kept_ctx *c = calloc(1, sizeof *c);
  assert_non_null(c);
  int before = count_epoll_fds();
  assert_int_equal(in_fiber(kept_main, c), 0);
  assert_no_failures();
  assert_int_equal(c->sets[0], 1);
  assert_int_equal(c->sets[1], 1);
  assert_int_equal(c->sets[2], 1);
  assert_int_equal(c->sets[3], 1);
  assert_true(c->sets[4] >= 1); /* made anew after the close */
  /* The threads' ends closed their sets. */
  assert_int_equal(count_epoll_fds(), before);
  free(c);
}

#define T(f) cmocka_unit_test_setup_teardown(f, setup, teardown)

int main(void) {
  const struct CMUnitTest tests[] = {
      T(test_timeouts),
      T(test_poll_fed_by_fiber),
      T(test_poll_500),
      T(test_select_many),
      T(test_epoll_wait),
      T(test_poll_ends_on_close),
      T(test_close_meets_timeout),
      T(test_poll_output_flags_single_fd),
      T(test_poll_select_few_fds_no_epoll_set),
      T(test_select_few_fds_one_closed),
      T(test_masked_waits_no_epoll_set),
      T(test_fiber_thread_keeps_its_set),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
