/* Hardening: each test names the rule it guards and fails fast when a
 * regression breaks it. Out-of-range ports, strands and contexts destroyed
 * under live chains, fibers launched onto an idle-stopped io_context,
 * iof_executor_dispatch's report, and direct checks of the socket paths
 * (interest dropped for unwaited events, readv, EINTR, stop before a
 * ready read), strands over a thread pool, posts from pool threads,
 * channel close and when_any losers.
 *
 * IOF_TEST_THREADED */
#include "test_support.h"
#include "io_test.h"

#include "io/socket_internal.h" /* the socket's watcher, for one test */

#include <iofiber/iofiber.h>

#include <errno.h>
#include <ev.h>
#include <fcntl.h>
#include <sys/uio.h>
#include <netdb.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#define MS 1000000LL

IOF_TEST_WATCHDOG(arm, disarm, 20)

/* ---- rule: a numeric port outside 0-65535 is -EINVAL, never truncated -- */

typedef struct ports {
  iof_io_context *io;
  int connect_big, connect_neg, resolve_big, resolve_ok, udp_big, listen_big;
} ports;

static int ports_fn(void *arg) {
  ports *p = arg;
  iof_socket *s = NULL;
  p->connect_big = iof_tcp_connect(p->io, "127.0.0.1", "98304", &s);
  p->connect_neg = iof_tcp_connect(p->io, "127.0.0.1", "-1", &s);
  struct addrinfo *res = NULL;
  p->resolve_big = iof_resolve(p->io, "127.0.0.1", "65536", NULL, &res);
  p->resolve_ok = iof_resolve(p->io, "127.0.0.1", "65535", NULL, &res);
  if (res) freeaddrinfo(res);
  p->udp_big = iof_udp_bind(p->io, "127.0.0.1", "70000", &s);
  p->listen_big = iof_tcp_listen(p->io, "127.0.0.1", "98304", 0, 0, &s);
  return 0;
}

static void ports_out_of_range_are_einval(void **state) {
  (void)state;
  iof_io_context *io = iof_io_context_create();
  assert_non_null(io);
  iof_socket *s = NULL;
  /* Outside a fiber (direct getaddrinfo). */
  assert_int_equal(iof_tcp_listen(io, "127.0.0.1", "98304", 0, 0, &s), -EINVAL);
  assert_int_equal(iof_tcp_listen(io, NULL, "65536", 0, 0, &s), -EINVAL);
  assert_int_equal(iof_tcp_listen(io, NULL, "12ab", 0, 0, &s), -EINVAL);
  assert_int_equal(iof_udp_bind(io, "127.0.0.1", "98304", &s), -EINVAL);
  /* In range still works, and port 0 picks one. */
  assert_int_equal(iof_tcp_listen(io, "127.0.0.1", "0", 0, 0, &s), 0);
  assert_true(iof_socket_local_port(s) > 0);
  assert_int_equal(iof_socket_free(s), 0);
  /* Inside a fiber (resolver thread). */
  ports p = {.io = io};
  launch(io, ports_fn, &p);
  run_all(io);
  assert_int_equal(p.connect_big, -EINVAL);
  assert_int_equal(p.connect_neg, -EINVAL);
  assert_int_equal(p.resolve_big, -EINVAL);
  assert_int_equal(p.resolve_ok, 0);
  assert_int_equal(p.udp_big, -EINVAL);
  assert_int_equal(p.listen_big, -EINVAL);
  assert_int_equal(iof_io_context_destroy(io), 0);
}

/* ---- rule: a strand is never freed under a chain counted on it --------- */

typedef struct sleeper {
  atomic_int started, woke;
  int slept;
} sleeper;

static int sleeper_fn(void *arg) {
  sleeper *z = arg;
  atomic_store(&z->started, 1);
  z->slept = iof_sleep_for(50 * MS); /* holds no strand while asleep */
  atomic_store(&z->woke, 1);
  return 0;
}

static void strand_destroy_is_ebusy_under_a_sleeping_chain(void **state) {
  (void)state;
  iof_io_context *io = iof_io_context_create();
  assert_non_null(io);
  iof_strand *st = iof_strand_create(iof_io_context_executor(io));
  assert_non_null(st);
  sleeper z = {0};
  assert_int_equal(iof_launch(iof_strand_executor(st), sleeper_fn, &z), 0);
  assert_true(iof_io_context_poll(io) >= 1);
  assert_int_equal(atomic_load(&z.started), 1);
  assert_int_equal(atomic_load(&z.woke), 0);
  assert_int_equal(iof_strand_destroy(st), -EBUSY);
  /* A work guard on the strand counts too. */
  run_all(io);
  assert_int_equal(atomic_load(&z.woke), 1);
  assert_int_equal(z.slept, 0);
  iof_work_guard g;
  assert_int_equal(iof_work_guard_init(&g, iof_strand_executor(st)), 0);
  assert_int_equal(iof_strand_destroy(st), -EBUSY);
  iof_work_guard_reset(&g);
  assert_int_equal(iof_strand_destroy(st), 0);
  assert_int_equal(iof_io_context_destroy(io), 0);
}

/* ---- rule: a second destroy is -EINVAL and never hands one stack to two
 * fibers -------------------------------------------------------------- */

static int nop_fn(void *arg) {
  (void)arg;
  return 7;
}

static void double_destroy_is_einval_and_stacks_stay_distinct(void **state) {
  (void)state;
  iof_stack_pool *pool = iof_stack_pool_create(NULL);
  assert_non_null(pool);
  iof_frame_allocator *a = iof_stack_pool_allocator(pool);
  iof_fiber *f = iof_fiber_create(a, IOF_FIBER_STACK_DEFAULT, nop_fn, NULL);
  assert_non_null(f);
  assert_int_equal(iof_fiber_resume(f), 0);
  assert_int_equal(iof_fiber_status(f), 7);
  assert_int_equal(iof_fiber_destroy(f), 0);
  assert_int_equal(iof_fiber_destroy(f), -EINVAL);
  /* A never-started fiber too. */
  iof_fiber *n = iof_fiber_create(a, IOF_FIBER_STACK_DEFAULT, nop_fn, NULL);
  assert_non_null(n);
  assert_int_equal(iof_fiber_destroy(n), 0);
  assert_int_equal(iof_fiber_destroy(n), -EINVAL);
  struct iof_stack_pool_stats st;
  assert_int_equal(iof_stack_pool_stats(pool, &st), 0);
  assert_int_equal(st.live, 0);
  assert_int_equal(st.cached, 1); /* one stack, cached once */
  iof_fiber *x = iof_fiber_create(a, IOF_FIBER_STACK_DEFAULT, nop_fn, NULL);
  iof_fiber *y = iof_fiber_create(a, IOF_FIBER_STACK_DEFAULT, nop_fn, NULL);
  assert_non_null(x);
  assert_non_null(y);
  assert_ptr_not_equal(x, y);
  assert_int_equal(iof_fiber_resume(x), 0);
  assert_int_equal(iof_fiber_resume(y), 0);
  assert_int_equal(iof_fiber_destroy(x), 0);
  assert_int_equal(iof_fiber_destroy(y), 0);
  assert_int_equal(iof_stack_pool_destroy(pool), 0);
}

#if defined(__SANITIZE_ADDRESS__)
#define HARD_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define HARD_ASAN 1
#endif
#endif

/* Under ASan a cached frame is poisoned: resuming a destroyed fiber is
 * reported, not silently run on a recycled stack. */
static void asan_reports_use_of_destroyed_fiber(void **state) {
  (void)state;
#ifndef HARD_ASAN
  skip();
#else
  int errp[2];
  assert_int_equal(pipe(errp), 0);
  fflush(NULL);
  pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) {
    dup2(errp[1], 2);
    close(errp[0]);
    iof_fiber *f = iof_fiber_create(NULL, IOF_FIBER_STACK_DEFAULT, nop_fn, 0);
    if (!f || iof_fiber_resume(f) != 0 || iof_fiber_destroy(f) != 0) _exit(3);
    iof_fiber_resume(f); /* reads the poisoned control block */
    _exit(0);
  }
  close(errp[1]);
  char buf[8192];
  size_t len = 0;
  ssize_t r;
  while (len < sizeof buf - 1 &&
         (r = read(errp[0], buf + len, sizeof buf - 1 - len)) > 0)
    len += (size_t)r;
  buf[len] = 0;
  close(errp[0]);
  int st;
  assert_int_equal(waitpid(pid, &st, 0), pid);
  assert_false(WIFEXITED(st) && WEXITSTATUS(st) == 0);
  if (!strstr(buf, "use-after-poison")) fail_msg("no ASan report in:\n%s", buf);
#endif
}

/* ---- rule: iof_executor_dispatch's NULL is unambiguous (errno 0 queued,
 * ESHUTDOWN refused), whatever errno held before ------------------------ */

static int raw_fn(void *arg) {
  atomic_fetch_add((atomic_int *)arg, 1);
  return 0;
}

static void dispatch_reports_queued_with_errno_zero(void **state) {
  (void)state;
  iof_io_context *io = iof_io_context_create();
  assert_non_null(io);
  atomic_int ran = 0;
  iof_fiber *h = iof_fiber_create(NULL, IOF_FIBER_STACK_DEFAULT, raw_fn, &ran);
  assert_non_null(h);
  errno = ESHUTDOWN; /* stale, from some earlier call */
  /* Not on the loop's thread: queued. */
  assert_null(iof_executor_dispatch(iof_io_context_executor(io), h));
  assert_int_equal(errno, 0);
  assert_int_equal(iof_io_context_poll(io), 1);
  assert_int_equal(atomic_load(&ran), 1);
  assert_int_equal(iof_fiber_destroy(h), 0);
  /* Refused: a never-started fiber once the context shuts down. */
  iof_fiber *g = iof_fiber_create(NULL, IOF_FIBER_STACK_DEFAULT, raw_fn, &ran);
  assert_non_null(g);
  iof_execution_context_shutdown(iof_io_context_context(io));
  errno = 0;
  assert_null(iof_executor_dispatch(iof_io_context_executor(io), g));
  assert_int_equal(errno, ESHUTDOWN);
  assert_int_equal(iof_fiber_destroy(g), 0);
  assert_int_equal(iof_io_context_destroy(io), 0);
}

/* ---- socket paths ------------------------------------------------------- */

/* An adopted TCP pair end on io and the raw peer. */
static iof_socket *adopt_pair(iof_io_context *io, int *peer) {
  int fds[2];
  raw_tcp_pair(fds);
  iof_socket *s = NULL;
  assert_int_equal(iof_socket_adopt(io, fds[0], &s), 0);
  *peer = fds[1];
  return s;
}

/* Rule: an event nobody waits for drops the socket's libev interest, so
 * unread data does not spin the loop (level-triggered epoll would report
 * it on every iteration). Counted with an ev_check watcher. */
typedef struct spin {
  iof_socket *s;
  int peer;
  long checks_at_start, checks_at_end;
  ssize_t first;
} spin;

static long checks;

static void on_check(struct ev_loop *loop, ev_check *w, int revents) {
  (void)loop;
  (void)w;
  (void)revents;
  checks++;
}

static int spin_reader(void *arg) {
  spin *z = arg;
  char c;
  z->first = iof_read_some(z->s, &c, 1); /* waits: interest EV_READ */
  return 0;                              /* and never reads again */
}

static int spin_writer(void *arg) {
  spin *z = arg;
  iof_sleep_for(10 * MS);
  if (write(z->peer, "a", 1) != 1) return -1;
  iof_sleep_for(10 * MS); /* the reader took it and ended */
  if (write(z->peer, "unread", 6) != 6) return -1;
  z->checks_at_start = checks;
  iof_sleep_for(200 * MS); /* the data sits there, nobody waits */
  z->checks_at_end = checks;
  return 0;
}

static void unwaited_event_drops_interest(void **state) {
  (void)state;
  iof_io_context *io = iof_io_context_create();
  assert_non_null(io);
  spin z = {0};
  z.s = adopt_pair(io, &z.peer);
  ev_check chk;
  ev_check_init(&chk, on_check);
  ev_check_start(iof_io_context_loop(io), &chk);
  ev_unref(iof_io_context_loop(io));
  launch(io, spin_reader, &z);
  launch(io, spin_writer, &z);
  run_all(io);
  ev_ref(iof_io_context_loop(io));
  ev_check_stop(iof_io_context_loop(io), &chk);
  assert_int_equal(z.first, 1);
  long n = z.checks_at_end - z.checks_at_start;
  if (n > 50)
    fail_msg("loop spun %ld times in 200 ms on an event nobody waits for", n);
  assert_int_equal(iof_socket_free(z.s), 0);
  close(z.peer);
  assert_int_equal(iof_io_context_destroy(io), 0);
}

/* Rule: iof_readv fills several iovecs in one call, and a zero-length first
 * iovec is not end of stream. */
typedef struct rv {
  iof_socket *s;
  int peer;
  ssize_t n1, n2;
  char a[4], b[4], c[4];
} rv;

static int readv_fn(void *arg) {
  rv *r = arg;
  struct iovec v[2] = {{r->a, 4}, {r->b, 4}};
  r->n1 = iof_readv(r->s, v, 2);
  struct iovec w[2] = {{r->a, 0}, {r->c, 4}};
  r->n2 = iof_readv(r->s, w, 2);
  return 0;
}

static void readv_fills_several_iovecs(void **state) {
  (void)state;
  iof_io_context *io = iof_io_context_create();
  assert_non_null(io);
  rv r = {0};
  r.s = adopt_pair(io, &r.peer);
  assert_int_equal(write(r.peer, "abcdefgh", 8), 8);
  sleep_ms(20); /* all 8 bytes are there before the first call */
  launch(io, readv_fn, &r);
  iof_io_context_poll(io);
  assert_int_equal(write(r.peer, "wxyz", 4), 4);
  run_all(io);
  assert_int_equal(r.n1, 8);
  assert_memory_equal(r.a, "abcd", 4);
  assert_memory_equal(r.b, "efgh", 4);
  assert_int_equal(r.n2, 4);
  assert_memory_equal(r.c, "wxyz", 4);
  assert_int_equal(iof_socket_free(r.s), 0);
  close(r.peer);
  assert_int_equal(iof_io_context_destroy(io), 0);
}

/* Rule: a read interrupted by a signal (EINTR) is retried, not returned.
 * A real one: the adopted socket is switched back to blocking, so read(2)
 * sleeps in the kernel, and a SIGUSR1 whose handler has no SA_RESTART
 * interrupts it; the data comes after. */
static atomic_int usr1_count;

static void on_usr1(int sig) {
  (void)sig;
  atomic_fetch_add(&usr1_count, 1);
}

typedef struct intr {
  iof_socket *s;
  int peer;
  pthread_t reader;
  atomic_int in_read;
  ssize_t n;
  char buf[8];
} intr;

static int intr_fn(void *arg) {
  intr *x = arg;
  int fd = iof_socket_fd(x->s);
  fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
  atomic_store(&x->in_read, 1);
  x->n = iof_read_some(x->s, x->buf, sizeof x->buf);
  return 0;
}

static void *interrupter(void *arg) {
  intr *x = arg;
  while (!atomic_load(&x->in_read)) sleep_ms(1);
  sleep_ms(50); /* inside read(2) by now */
  pthread_kill(x->reader, SIGUSR1);
  sleep_ms(50);
  ssize_t w = write(x->peer, "data", 4);
  (void)w;
  return NULL;
}

static void read_retries_after_eintr(void **state) {
  (void)state;
  struct sigaction sa, old;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_usr1; /* no SA_RESTART: read(2) fails with EINTR */
  sigemptyset(&sa.sa_mask);
  assert_int_equal(sigaction(SIGUSR1, &sa, &old), 0);
  atomic_store(&usr1_count, 0);
  iof_io_context *io = iof_io_context_create();
  assert_non_null(io);
  intr x = {0};
  x.s = adopt_pair(io, &x.peer);
  x.reader = pthread_self();
  pthread_t t;
  assert_int_equal(pthread_create(&t, NULL, interrupter, &x), 0);
  launch(io, intr_fn, &x);
  run_all(io);
  pthread_join(t, NULL);
  sigaction(SIGUSR1, &old, NULL);
  assert_int_equal(atomic_load(&usr1_count), 1);
  assert_int_equal(x.n, 4); /* not -EINTR */
  assert_memory_equal(x.buf, "data", 4);
  assert_int_equal(iof_socket_free(x.s), 0);
  close(x.peer);
  assert_int_equal(iof_io_context_destroy(io), 0);
}

/* Rule: a stop already requested wins over ready data: -ECANCELED. */
typedef struct stopped_read {
  iof_socket *s;
  ssize_t n;
} stopped_read;

static int stopped_read_fn(void *arg) {
  stopped_read *r = arg;
  char buf[8];
  r->n = iof_read_some(r->s, buf, sizeof buf);
  return 0;
}

static void read_with_stop_requested_is_ecanceled(void **state) {
  (void)state;
  iof_io_context *io = iof_io_context_create();
  assert_non_null(io);
  int peer;
  stopped_read r = {0};
  r.s = adopt_pair(io, &peer);
  assert_int_equal(write(peer, "ready", 5), 5);
  sleep_ms(20);
  iof_stop_source src;
  assert_int_equal(iof_stop_source_init(&src), 0);
  iof_stop_source_request(&src);
  iof_launch_opts o = {0};
  o.stop_token = iof_stop_source_token(&src);
  assert_int_equal(
      iof_run_async(iof_io_context_executor(io), &o, stopped_read_fn, &r), 0);
  run_all(io);
  assert_int_equal(r.n, -ECANCELED);
  char buf[8];
  assert_int_equal(recv(iof_socket_fd(r.s), buf, sizeof buf, MSG_DONTWAIT),
                   5); /* nothing was consumed */
  iof_stop_source_destroy(&src);
  assert_int_equal(iof_socket_free(r.s), 0);
  close(peer);
  assert_int_equal(iof_io_context_destroy(io), 0);
}

/* Rule: when the kernel refuses to watch a descriptor (libev reports
 * EV_ERROR and stops the watcher, as its epoll backend does on ENOMEM or
 * ENOSPC), the pending read fails with -ENOMEM instead of waiting forever
 * on a watcher that is gone; the socket works again afterwards. The
 * refusal is delivered exactly as libev's fd_kill does it: the watcher
 * stopped, then EV_ERROR | EV_READ | EV_WRITE fed to it. */
typedef struct refused {
  iof_io_context *io;
  iof_socket *s;
  int peer;
  ssize_t first, second;
} refused;

static int refused_reader(void *arg) {
  refused *r = arg;
  char buf[8];
  r->first = iof_read_some(r->s, buf, sizeof buf); /* nothing to read */
  if (write(r->peer, "ok", 2) != 2) return -1;
  r->second = iof_read_some(r->s, buf, sizeof buf);
  return 0;
}

static int refuser(void *arg) {
  refused *r = arg;
  iof_sleep_for(10 * MS); /* both waits are armed */
  struct ev_loop *loop = iof_io_context_loop(r->io);
  ev_io_stop(loop, &r->s->w);
  ev_feed_event(loop, &r->s->w, EV_ERROR | EV_READ | EV_WRITE);
  /* libev runs fed events after its next poll, as it does for its own
   * fd_kill (from fd_reify, before the poll): a timer wakes it. */
  iof_sleep_for(10 * MS);
  return 0;
}

static void refused_watch_is_enomem_not_a_hang(void **state) {
  (void)state;
  iof_io_context *io = iof_io_context_create();
  assert_non_null(io);
  refused r = {.io = io, .first = 1, .second = 1};
  r.s = adopt_pair(io, &r.peer);
  launch(io, refused_reader, &r);
  launch(io, refuser, &r);
  iof_io_context_run_for(io, 1000 * MS);
  if (r.first != -ENOMEM)
    fail_msg("read under a refused watch: %zd (want -ENOMEM)", r.first);
  assert_int_equal(r.second, 2);
  assert_int_equal(iof_socket_free(r.s), 0);
  close(r.peer);
  assert_int_equal(iof_io_context_destroy(io), 0);
}

/* ---- strands, pools ----------------------------------------------------- */

/* Rule: an await that completes at once, on a busy strand over a thread
 * pool, resumes inside the strand (it released the strand on suspending;
 * another fiber may hold it now). */
static iof_fiber *at_once(void *self, iof_fiber *h, const iof_env *env) {
  (void)self;
  (void)env;
  return h;
}

static const iof_awaitable_vtbl at_once_vt = {NULL, at_once, NULL};

typedef struct strand_run {
  iof_strand *st;
  atomic_int inside, overlaps, outside, done;
} strand_run;

static int strand_worker(void *arg) {
  strand_run *r = arg;
  for (int i = 0; i < 200; i++) {
    if (atomic_fetch_add(&r->inside, 1) != 0) atomic_fetch_add(&r->overlaps, 1);
    for (volatile int k = 0; k < 200; k++) {
    }
    atomic_fetch_sub(&r->inside, 1);
    if (iof_await(r, &at_once_vt) != 0) atomic_fetch_add(&r->outside, 1000);
    if (!iof_strand_running_in_this_thread(r->st))
      atomic_fetch_add(&r->outside, 1);
  }
  atomic_fetch_add(&r->done, 1);
  return 0;
}

static void await_at_once_stays_in_strand(void **state) {
  (void)state;
  iof_thread_pool *p = iof_thread_pool_create(2);
  assert_non_null(p);
  strand_run r = {0};
  r.st = iof_strand_create(iof_thread_pool_executor(p));
  assert_non_null(r.st);
  for (int i = 0; i < 4; i++)
    assert_int_equal(iof_launch(iof_strand_executor(r.st), strand_worker, &r),
                     0);
  for (int i = 0; i < 10000 && atomic_load(&r.done) < 4; i++) sleep_ms(1);
  assert_int_equal(atomic_load(&r.done), 4);
  assert_int_equal(atomic_load(&r.outside), 0);
  assert_int_equal(atomic_load(&r.overlaps), 0);
  for (int i = 0; i < 1000 && iof_strand_destroy(r.st) == -EBUSY; i++)
    sleep_ms(1); /* the last chains are still being freed */
  assert_int_equal(iof_thread_pool_destroy(p), 0);
}

/* Rule: post never runs the fiber before it returns, even from a thread of
 * the pool it posts to (one thread: nobody else could run it meanwhile). */
typedef struct post_inline {
  iof_thread_pool *p;
  atomic_int ran, ran_before_return, done;
  int post_r;
} post_inline;

static int posted_fn(void *arg) {
  atomic_fetch_add(&((post_inline *)arg)->ran, 1);
  return 0;
}

static iof_fiber *raw_posted;

static int poster_fn(void *arg) {
  post_inline *x = arg;
  raw_posted =
      iof_fiber_create(NULL, IOF_FIBER_STACK_DEFAULT, posted_fn, (void *)x);
  if (!raw_posted) return -1;
  x->post_r = iof_executor_post(iof_thread_pool_executor(x->p), raw_posted);
  atomic_store(&x->ran_before_return, atomic_load(&x->ran));
  iof_launch(iof_thread_pool_executor(x->p), posted_fn, x);
  atomic_store(&x->ran_before_return,
               atomic_load(&x->ran_before_return) + atomic_load(&x->ran));
  atomic_store(&x->done, 1);
  return 0;
}

static void post_from_pool_thread_never_inline(void **state) {
  (void)state;
  post_inline x = {0};
  x.p = iof_thread_pool_create(1);
  assert_non_null(x.p);
  assert_int_equal(iof_launch(iof_thread_pool_executor(x.p), poster_fn, &x), 0);
  for (int i = 0; i < 10000 && atomic_load(&x.ran) < 2; i++) sleep_ms(1);
  assert_int_equal(atomic_load(&x.done), 1);
  assert_int_equal(x.post_r, 0);
  assert_int_equal(atomic_load(&x.ran_before_return), 0);
  assert_int_equal(atomic_load(&x.ran), 2); /* both ran, later */
  assert_int_equal(iof_thread_pool_destroy(x.p), 0);
  assert_int_equal(iof_fiber_destroy(raw_posted), 0);
}

/* The documented idiom: a pool fiber reading a socket in a loop holds a
 * work guard on the socket's io_context, so that context's run (on
 * another thread) does not return while the fiber is between two reads
 * (then nothing is pending there). Without the guard this test fails:
 * run returns right after the first read. */
typedef struct guarded {
  iof_io_context *io;
  iof_socket *s;
  atomic_int holding, between, reads, run_returned, release;
} guarded;

static void *io_runner(void *arg) {
  guarded *g = arg;
  iof_io_context_run(g->io);
  atomic_store(&g->run_returned, 1);
  return NULL;
}

static int pool_reader(void *arg) {
  guarded *g = arg;
  iof_work_guard wg;
  iof_work_guard_init(&wg,
                      iof_io_context_executor(iof_socket_io_context(g->s)));
  atomic_store(&g->holding, 1);
  char buf[16];
  for (int i = 0; i < 3; i++) {
    if (iof_read_some(g->s, buf, sizeof buf) <= 0) break;
    atomic_fetch_add(&g->reads, 1);
    atomic_store(&g->between, i + 1);
    sleep_ms(40); /* work on the pool: nothing pending on io */
  }
  /* Still between reads until the test has looked (a loaded machine may
   * take longer than the 40 ms above to get there). */
  for (int i = 0; i < 5000 && !atomic_load(&g->release); i++) sleep_ms(1);
  iof_work_guard_reset(&wg);
  return 0;
}

static void pool_reader_with_guard_keeps_io_running(void **state) {
  (void)state;
  guarded g = {0};
  g.io = iof_io_context_create();
  assert_non_null(g.io);
  int peer;
  g.s = adopt_pair(g.io, &peer);
  iof_thread_pool *p = iof_thread_pool_create(1);
  assert_non_null(p);
  iof_work_guard start; /* keeps run alive until the reader holds its own */
  assert_int_equal(iof_work_guard_init(&start, iof_io_context_executor(g.io)),
                   0);
  pthread_t t;
  assert_int_equal(pthread_create(&t, NULL, io_runner, &g), 0);
  assert_int_equal(iof_launch(iof_thread_pool_executor(p), pool_reader, &g), 0);
  for (int i = 0; i < 5000 && !atomic_load(&g.holding); i++) sleep_ms(1);
  iof_work_guard_reset(&start);
  for (int i = 0; i < 3; i++) {
    assert_int_equal(write(peer, "msg", 3), 3);
    for (int k = 0; k < 5000 && atomic_load(&g.between) <= i; k++) sleep_ms(1);
    sleep_ms(20); /* the reader is between two reads */
    if (atomic_load(&g.run_returned))
      fail_msg("io_context run returned between reads %d and %d", i + 1, i + 2);
  }
  atomic_store(&g.release, 1);
  pthread_join(t, NULL); /* returns once the guard is reset */
  assert_int_equal(atomic_load(&g.reads), 3);
  assert_int_equal(iof_thread_pool_destroy(p), 0);
  assert_int_equal(iof_socket_free(g.s), 0);
  close(peer);
  assert_int_equal(iof_io_context_destroy(g.io), 0);
}

/* ---- channels, when_any -------------------------------------------------- */

/* Rule: closing a channel wakes every blocked receiver with -EPIPE. */
typedef struct closer {
  iof_chan *ch;
  int r[3];
  atomic_int woke;
} closer;

static int receiver_fn(void *arg) {
  closer *c = arg;
  int v;
  static atomic_int slot;
  int me = atomic_fetch_add(&slot, 1) % 3;
  c->r[me] = iof_chan_recv(c->ch, &v);
  atomic_fetch_add(&c->woke, 1);
  return 0;
}

static int close_fn(void *arg) {
  closer *c = arg;
  iof_sleep_for(20 * MS); /* the receivers are blocked by now */
  return iof_chan_close(c->ch);
}

static void chan_close_wakes_receivers_with_epipe(void **state) {
  (void)state;
  iof_io_context *io = iof_io_context_create();
  assert_non_null(io);
  closer c = {0};
  c.ch = iof_chan_create(sizeof(int), 4);
  assert_non_null(c.ch);
  for (int i = 0; i < 3; i++) c.r[i] = 1;
  for (int i = 0; i < 3; i++) launch(io, receiver_fn, &c);
  launch(io, close_fn, &c);
  /* Bounded: receivers left blocked fail here, not in the watchdog. */
  iof_io_context_run_for(io, 2000 * MS);
  if (atomic_load(&c.woke) != 3)
    fail_msg("close woke %d of 3 blocked receivers", atomic_load(&c.woke));
  for (int i = 0; i < 3; i++) assert_int_equal(c.r[i], -EPIPE);
  assert_int_equal(iof_chan_destroy(c.ch), 0);
  assert_int_equal(iof_io_context_destroy(io), 0);
}

/* Rule: when_any's losers are stopped: their pending waits end with
 * -ECANCELED, and when_any returns the winner's status at once. */
typedef struct any {
  int loser_r[2];
  int result, winner;
} any;

static any any_state;

static int winner_fn(void *arg) {
  (void)arg;
  return 5;
}

static int loser_fn(void *arg) {
  int *out = arg;
  *out = iof_sleep_for(10000 * MS);
  return *out;
}

static int any_fn(void *arg) {
  any *a = arg;
  iof_fn fns[3] = {loser_fn, winner_fn, loser_fn};
  void *args[3] = {&a->loser_r[0], NULL, &a->loser_r[1]};
  a->result = iof_when_any(3, fns, args, &a->winner);
  return 0;
}

static void when_any_losers_get_ecanceled(void **state) {
  (void)state;
  iof_io_context *io = iof_io_context_create();
  assert_non_null(io);
  any *a = &any_state;
  memset(a, 0, sizeof *a);
  a->loser_r[0] = a->loser_r[1] = 1;
  a->result = 1;
  launch(io, any_fn, a);
  iof_io_context_run_for(io, 2000 * MS); /* losers sleep 10 s unless stopped */
  if (a->loser_r[0] != -ECANCELED || a->loser_r[1] != -ECANCELED)
    fail_msg("when_any losers not stopped: %d %d", a->loser_r[0],
             a->loser_r[1]);
  assert_int_equal(a->result, 5);
  assert_int_equal(a->winner, 1);
  assert_int_equal(a->loser_r[0], -ECANCELED);
  assert_int_equal(a->loser_r[1], -ECANCELED);
  assert_int_equal(iof_io_context_destroy(io), 0);
}

#define T(f) cmocka_unit_test_setup_teardown(f, arm, disarm)

int main(int argc, char **argv) {
  if (argc > 1) cmocka_set_test_filter(argv[1]); /* run tests by name */
  const struct CMUnitTest tests[] = {
      T(ports_out_of_range_are_einval),
      T(strand_destroy_is_ebusy_under_a_sleeping_chain),
      T(double_destroy_is_einval_and_stacks_stay_distinct),
      T(asan_reports_use_of_destroyed_fiber),
      T(dispatch_reports_queued_with_errno_zero),
      T(unwaited_event_drops_interest),
      T(readv_fills_several_iovecs),
      T(read_retries_after_eintr),
      T(read_with_stop_requested_is_ecanceled),
      T(refused_watch_is_enomem_not_a_hang),
      T(await_at_once_stays_in_strand),
      T(post_from_pool_thread_never_inline),
      T(pool_reader_with_guard_keeps_io_running),
      T(chan_close_wakes_receivers_with_epipe),
      T(when_any_losers_get_ecanceled),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
