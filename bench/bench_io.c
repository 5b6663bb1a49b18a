/* io: echo round trips over K loopback TCP connections; ns per round trip.
 *
 *   libev_echo  a hand-written libev echo server (ev_io callbacks: read,
 *               then write back) on its own thread (baseline)
 *   fiber_echo  an iofiber echo server on its own thread: one fiber per
 *               connection looping iof_read_some / iof_write
 *
 * The client is the same for both: a raw libev client on the bench thread
 * that keeps one 64-byte message in flight on each of K connections
 * (K = 64; 16 with --quick) and checks every echo. So only the server
 * differs, and a round trip costs the client the same in both cases.
 *
 * Each case also prints on stderr what the server thread alone spent per
 * round trip during the measured runs: CPU time (its thread CPU clock)
 * and, where the kernel lets us (perf tracepoints: root, or
 * perf_event_paranoid <= -1), system calls. The target for the fiber
 * server is 2.0 syscalls per round trip (a read and a write), as for raw
 * libev. Without perf, count them with `strace -c -f` (docs/bench.md). */
#include "bench.h"
#include "bench_net.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/perf_event.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <ev.h>
#include <iofiber/iofiber.h>

#define MSG_SIZE 64
#define SERVER_BUF 4096
#define K_FULL 64
#define K_QUICK 16
#define WATCHDOG_S 10.0 /* a body that stalls this long fails */

/* ---- syscall counting (perf tracepoints, optional) --------------------- */

enum { SC_ALL, SC_EPOLL_WAIT, SC_EPOLL_CTL, SC_N };
static const char *const sc_events[SC_N] = {"raw_syscalls/sys_enter",
                                            "syscalls/sys_enter_epoll_wait",
                                            "syscalls/sys_enter_epoll_ctl"};

/* A counter of `event` on thread tid; -1 if the kernel says no. */
static int counter_open(const char *event, pid_t tid) {
  long id = bench_tracepoint_id(event);
  if (id < 0) return -1;
  struct perf_event_attr a;
  memset(&a, 0, sizeof a);
  a.type = PERF_TYPE_TRACEPOINT;
  a.size = sizeof a;
  a.config = (uint64_t)id;
  return (int)syscall(SYS_perf_event_open, &a, tid, -1, -1,
                      PERF_FLAG_FD_CLOEXEC);
}

static uint64_t counter_read(int fd) {
  uint64_t v = 0;
  if (fd < 0 || read(fd, &v, sizeof v) != sizeof v) return 0;
  return v;
}

static uint64_t thread_cpu_ns(clockid_t c) {
  struct timespec ts;
  if (clock_gettime(c, &ts) != 0) return 0;
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* ---- shared state ------------------------------------------------------ */

typedef struct io_bench io_bench;

typedef struct client_conn {
  ev_io w;
  io_bench *b;
  size_t got;
  unsigned char buf[MSG_SIZE];
} client_conn;

typedef struct server_conn { /* libev server */
  ev_io w;
  struct server_conn *next;
  size_t pending_off, pending_len; /* unsent part of the echo */
  unsigned char buf[SERVER_BUF];
} server_conn;

struct io_bench {
  const char *name;
  int k;
  bool fiber; /* which server */
  unsigned char msg[MSG_SIZE];
  /* client */
  struct ev_loop *cloop;
  ev_timer watchdog;
  client_conn *conns;
  uint64_t target, issued, done;
  int error;
  /* server side, both kinds */
  int port;
  pthread_t thread;
  atomic_int tid;
  /* libev server */
  int lfd;
  struct ev_loop *sloop;
  ev_io accept_w;
  ev_async stop_w;
  server_conn *sconns;
  /* fiber server */
  iof_io_context *io;
  iof_socket *listener;
  iof_stop_source stop;
  /* syscall counters on the server thread */
  int sc_fd[SC_N];
  clockid_t cpu_clock; /* the server thread's CPU time */
  uint64_t cpu_ns;
  uint64_t sc_count[SC_N], sc_round_trips;
  bool measured; /* setup succeeded */
};

/* ---- the client: raw libev, K connections, one message in flight each -- */

static void client_fail(io_bench *b, int err) {
  if (!b->error) b->error = err;
  ev_break(b->cloop, EVBREAK_ALL);
}

static void client_send(client_conn *c) {
  io_bench *b = c->b;
  b->issued++;
  ssize_t n = write(c->w.fd, b->msg, MSG_SIZE);
  if (n != MSG_SIZE) client_fail(b, n < 0 ? -errno : -EIO);
}

static void client_on_read(struct ev_loop *loop, ev_io *w, int revents) {
  (void)loop;
  (void)revents;
  client_conn *c = (client_conn *)w;
  io_bench *b = c->b;
  ssize_t n = read(w->fd, c->buf + c->got, MSG_SIZE - c->got);
  if (n <= 0) {
    if (n < 0 && (errno == EAGAIN || errno == EINTR)) return;
    client_fail(b, n == 0 ? -ECONNRESET : -errno);
    return;
  }
  c->got += (size_t)n;
  if (c->got < MSG_SIZE) return;
  c->got = 0;
  if (memcmp(c->buf, b->msg, MSG_SIZE) != 0) {
    client_fail(b, -EPROTO);
    return;
  }
  if (++b->done == b->target) {
    ev_break(b->cloop, EVBREAK_ALL);
    return;
  }
  if (b->issued < b->target) client_send(c);
}

static void client_on_watchdog(struct ev_loop *loop, ev_timer *w, int rev) {
  (void)loop;
  (void)rev;
  client_fail(w->data, -ETIMEDOUT);
}

static int set_nodelay(int fd) {
  int one = 1;
  return setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

static int client_connect(io_bench *b) {
  b->cloop = ev_loop_new(EVFLAG_AUTO);
  b->conns = calloc((size_t)b->k, sizeof *b->conns);
  if (!b->cloop || !b->conns) return -ENOMEM;
  ev_timer_init(&b->watchdog, client_on_watchdog, WATCHDOG_S, 0.);
  b->watchdog.data = b;
  struct sockaddr_in sa = {.sin_family = AF_INET,
                           .sin_port = htons((uint16_t)b->port),
                           .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  for (int i = 0; i < b->k; i++) {
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return -errno;
    if (connect(fd, (struct sockaddr *)&sa, sizeof sa) < 0) {
      int e = errno;
      close(fd);
      return -e;
    }
    set_nodelay(fd);
    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
    client_conn *c = &b->conns[i];
    c->b = b;
    ev_io_init(&c->w, client_on_read, fd, EV_READ);
    ev_io_start(b->cloop, &c->w);
  }
  return 0;
}

static void client_close(io_bench *b) {
  for (int i = 0; b->conns && i < b->k; i++) {
    if (!b->conns[i].b) continue;
    ev_io_stop(b->cloop, &b->conns[i].w);
    close(b->conns[i].w.fd);
  }
  free(b->conns);
  b->conns = NULL;
  if (b->cloop) ev_loop_destroy(b->cloop);
  b->cloop = NULL;
}

static int echo_body(void *arg, uint64_t iters) {
  io_bench *b = arg;
  uint64_t before[SC_N], cpu_before = thread_cpu_ns(b->cpu_clock);
  for (int i = 0; i < SC_N; i++) before[i] = counter_read(b->sc_fd[i]);
  b->target = iters;
  b->issued = b->done = 0;
  b->error = 0;
  for (int i = 0; i < b->k && b->issued < b->target; i++)
    client_send(&b->conns[i]);
  ev_timer_again(b->cloop, &b->watchdog); /* restarted on each body */
  if (!b->error) ev_run(b->cloop, 0);
  ev_timer_stop(b->cloop, &b->watchdog);
  if (b->error) return b->error;
  if (iters >= 8 * (uint64_t)b->k) { /* skip tiny calibration runs */
    for (int i = 0; i < SC_N; i++)
      b->sc_count[i] += counter_read(b->sc_fd[i]) - before[i];
    b->cpu_ns += thread_cpu_ns(b->cpu_clock) - cpu_before;
    b->sc_round_trips += iters;
  }
  return 0;
}

/* ---- the libev server: what a hand-written one does ------------------- */

static void sconn_close(io_bench *b, server_conn *c) {
  ev_io_stop(b->sloop, &c->w);
  close(c->w.fd);
  for (server_conn **p = &b->sconns; *p; p = &(*p)->next)
    if (*p == c) {
      *p = c->next;
      break;
    }
  free(c);
}

static void sconn_cb(struct ev_loop *loop, ev_io *w, int revents) {
  server_conn *c = (server_conn *)w;
  io_bench *b = w->data;
  if (revents & EV_WRITE) { /* finishing a partial write */
    ssize_t n = write(w->fd, c->buf + c->pending_off, c->pending_len);
    if (n < 0) {
      if (errno != EAGAIN && errno != EINTR) sconn_close(b, c);
      return;
    }
    c->pending_off += (size_t)n;
    c->pending_len -= (size_t)n;
    if (c->pending_len == 0) {
      ev_io_stop(loop, w);
      ev_io_set(w, w->fd, EV_READ);
      ev_io_start(loop, w);
    }
    return;
  }
  ssize_t n = read(w->fd, c->buf, sizeof c->buf);
  if (n <= 0) {
    if (n < 0 && (errno == EAGAIN || errno == EINTR)) return;
    sconn_close(b, c);
    return;
  }
  ssize_t m = write(w->fd, c->buf, (size_t)n);
  if (m == n) return;
  if (m < 0 && errno != EAGAIN && errno != EINTR) {
    sconn_close(b, c);
    return;
  }
  c->pending_off = m > 0 ? (size_t)m : 0;
  c->pending_len = (size_t)n - c->pending_off;
  ev_io_stop(loop, w);
  ev_io_set(w, w->fd, EV_WRITE);
  ev_io_start(loop, w);
}

static void accept_cb(struct ev_loop *loop, ev_io *w, int revents) {
  (void)revents;
  io_bench *b = w->data;
  for (;;) {
    int fd = accept4(w->fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) return;
    server_conn *c = malloc(sizeof *c);
    if (!c) {
      close(fd);
      continue;
    }
    set_nodelay(fd);
    ev_io_init(&c->w, sconn_cb, fd, EV_READ);
    c->w.data = b;
    c->next = b->sconns;
    b->sconns = c;
    ev_io_start(loop, &c->w);
  }
}

static void stop_cb(struct ev_loop *loop, ev_async *w, int revents) {
  (void)w;
  (void)revents;
  ev_break(loop, EVBREAK_ALL);
}

static void *libev_thread(void *arg) {
  io_bench *b = arg;
  atomic_store(&b->tid, (int)syscall(SYS_gettid));
  ev_run(b->sloop, 0);
  return NULL;
}

static int listen_loopback(int *port) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return -errno;
  int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  struct sockaddr_in sa = {.sin_family = AF_INET,
                           .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  socklen_t len = sizeof sa;
  if (bind(fd, (struct sockaddr *)&sa, sizeof sa) < 0 ||
      listen(fd, SOMAXCONN) < 0 ||
      getsockname(fd, (struct sockaddr *)&sa, &len) < 0) {
    int e = errno;
    close(fd);
    return -e;
  }
  *port = ntohs(sa.sin_port);
  return fd;
}

/* ---- the fiber server: what a user of iofiber writes ------------------- */

static int fiber_conn(void *arg) {
  iof_socket *sock = arg;
  char buf[SERVER_BUF];
  for (;;) {
    ssize_t n = iof_read_some(sock, buf, sizeof buf);
    if (n <= 0 || iof_write(sock, buf, (size_t)n) < 0) break;
  }
  iof_socket_free(sock);
  return 0;
}

static int fiber_acceptor(void *arg) {
  io_bench *b = arg;
  iof_launch_opts opts = {.stop_token = iof_stop_source_token(&b->stop)};
  for (;;) {
    iof_socket *s;
    int r = iof_accept(b->listener, &s, NULL, NULL);
    if (r == -ECANCELED || r == -EBADF) break;
    if (r < 0) continue;
    iof_socket_set_nodelay(s, true);
    if (iof_run_async(iof_io_context_executor(b->io), &opts, fiber_conn, s) < 0)
      iof_socket_free(s);
  }
  return 0;
}

static void *fiber_thread(void *arg) {
  io_bench *b = arg;
  atomic_store(&b->tid, (int)syscall(SYS_gettid));
  iof_io_context_run(b->io);
  return NULL;
}

/* ---- setup and teardown ------------------------------------------------ */

static int server_start(io_bench *b) {
  if (!b->fiber) {
    int fd = listen_loopback(&b->port);
    if (fd < 0) return fd;
    b->lfd = fd;
    b->sloop = ev_loop_new(EVFLAG_AUTO);
    if (!b->sloop) return -ENOMEM;
    ev_io_init(&b->accept_w, accept_cb, fd, EV_READ);
    b->accept_w.data = b;
    ev_io_start(b->sloop, &b->accept_w);
    ev_async_init(&b->stop_w, stop_cb);
    ev_async_start(b->sloop, &b->stop_w);
  } else {
    b->io = iof_io_context_create();
    if (!b->io) return -errno;
    int r = iof_stop_source_init(&b->stop);
    if (r == 0) r = iof_tcp_listen(b->io, "127.0.0.1", "0", 0, 0, &b->listener);
    if (r < 0) return r;
    b->port = iof_socket_local_port(b->listener);
    iof_launch_opts opts = {.stop_token = iof_stop_source_token(&b->stop)};
    r = iof_run_async(iof_io_context_executor(b->io), &opts, fiber_acceptor, b);
    if (r < 0) return r;
  }
  atomic_store(&b->tid, 0);
  int r = pthread_create(&b->thread, NULL,
                         b->fiber ? fiber_thread : libev_thread, b);
  if (r != 0) return -r;
  while (atomic_load(&b->tid) == 0) sched_yield();
  return 0;
}

static void server_stop(io_bench *b) {
  if (!b->fiber) {
    if (b->sloop) {
      if (atomic_load(&b->tid)) {
        ev_async_send(b->sloop, &b->stop_w);
        pthread_join(b->thread, NULL);
      }
      while (b->sconns) sconn_close(b, b->sconns);
      ev_io_stop(b->sloop, &b->accept_w);
      ev_async_stop(b->sloop, &b->stop_w);
      ev_loop_destroy(b->sloop);
      b->sloop = NULL;
    }
    if (b->lfd >= 0) close(b->lfd);
    b->lfd = -1;
  } else if (b->io) {
    if (atomic_load(&b->tid)) {
      /* Every fiber carries the token: accept and reads end, run returns. */
      iof_stop_source_request(&b->stop);
      pthread_join(b->thread, NULL);
    }
    iof_io_context_destroy(b->io);
    iof_stop_source_destroy(&b->stop);
    b->io = NULL;
  }
}

static void echo_teardown(void *arg);

static int echo_setup(void *arg) {
  io_bench *b = arg;
  for (int i = 0; i < MSG_SIZE; i++) b->msg[i] = (unsigned char)(i * 7 + 1);
  b->lfd = -1;
  for (int i = 0; i < SC_N; i++) {
    b->sc_fd[i] = -1;
    b->sc_count[i] = 0;
  }
  b->sc_round_trips = 0;
  int r = server_start(b);
  if (r == 0) r = -pthread_getcpuclockid(b->thread, &b->cpu_clock);
  if (r == 0) r = client_connect(b);
  if (r < 0) {
    echo_teardown(b);
    return r;
  }
  /* Warm up (accepts, TCP windows, the server's first allocations) so
   * that calibration does not start on a stalled first round trip. */
  r = echo_body(b, 32 * (uint64_t)b->k);
  if (r < 0) {
    echo_teardown(b);
    return r;
  }
  b->sc_round_trips = 0; /* count from here on */
  b->cpu_ns = 0;
  b->measured = true;
  for (int i = 0; i < SC_N; i++)
    b->sc_fd[i] = counter_open(sc_events[i], (pid_t)atomic_load(&b->tid));
  return 0;
}

static void echo_teardown(void *arg) {
  io_bench *b = arg;
  double rt = (double)b->sc_round_trips;
  if (!b->measured) {
    /* setup failed: nothing to say */
  } else if (!b->sc_round_trips) {
    fprintf(stderr,
            "iof-bench: io/%s: server thread not measured: every "
            "run was too short (stalled calibration on a busy "
            "machine?)\n",
            b->name);
  } else if (b->sc_fd[SC_ALL] < 0) {
    fprintf(stderr,
            "iof-bench: io/%s: server thread per round trip: %.0f ns CPU; "
            "syscalls not counted (no perf tracepoint access; use strace "
            "-c -f, see docs/bench.md)\n",
            b->name, (double)b->cpu_ns / rt);
  } else {
    fprintf(stderr,
            "iof-bench: io/%s: server thread per round trip: %.0f ns CPU, "
            "%.3f syscalls (epoll_wait %.3f, epoll_ctl %.4f), %d "
            "connections\n",
            b->name, (double)b->cpu_ns / rt, (double)b->sc_count[SC_ALL] / rt,
            (double)b->sc_count[SC_EPOLL_WAIT] / rt,
            (double)b->sc_count[SC_EPOLL_CTL] / rt, b->k);
  }
  b->measured = false;
  for (int i = 0; i < SC_N; i++)
    if (b->sc_fd[i] >= 0) close(b->sc_fd[i]);
  client_close(b);
  server_stop(b);
}

int bench_suite_io(bench_ctx *ctx) {
  int k = bench_quick(ctx) ? K_QUICK : K_FULL;
  io_bench libev = {.name = "libev_echo", .k = k, .fiber = false};
  io_bench fiber = {.name = "fiber_echo", .k = k, .fiber = true};
  const bench_case cases[] = {
      {.name = "libev_echo",
       .unit = "ns/roundtrip",
       .arg = &libev,
       .setup = echo_setup,
       .body = echo_body,
       .teardown = echo_teardown},
      {.name = "fiber_echo",
       .unit = "ns/roundtrip",
       .baseline = "libev_echo",
       .target = 1.25,
       .arg = &fiber,
       .setup = echo_setup,
       .body = echo_body,
       .teardown = echo_teardown},
  };
  int status = 0;
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
    if (bench_run_case(ctx, &cases[i]) < 0) status = -1;
  return status;
}
