/* Sockets: the read/write paths and the one ev_io each socket keeps.
 *
 * A socket's ev_io is started once and its mask only changes when a wait
 * needs a direction it lacks, or an event arrives that nobody waits for (a
 * level-triggered event must not spin). In request/response traffic the
 * mask never changes, so a round trip costs a read and a write, as in a
 * hand-written libev server. A read first tries the syscall only when the
 * last one filled its buffer: after a short read the socket was drained,
 * and a blind read would cost a wasted EAGAIN per round trip. */
#include "io/socket_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

static void set_interest(iof_socket *s, int ev) {
  if (ev == s->interest) return;
  struct ev_loop *loop = s->io->loop;
  ev_io_stop(loop, &s->w);
  s->interest = ev;
  if (ev) {
    ev_io_modify(&s->w, ev);
    ev_io_start(loop, &s->w);
  }
}

/* Wakes the first waiter of q (claiming it unlinks it), from on_io. */
static inline __attribute__((always_inline)) bool wake_first(iof_socket *s,
                                                             iof__waitq *q) {
  iof__wnode *n = iof__wq_claim_first(q, 0);
  if (!n) return false;
  iof__io_wake_from_loop(s->io, n->w);
  return true;
}

/* Wakes every waiter of q with err (claiming unlinks them). */
static void fail_all(iof__waitq *q, int err) {
  for (iof__wnode *n = iof__wq_claim_all(q, err), *next; n; n = next) {
    next = n->next; /* n may be gone after the wake */
    iof__wait_wake(n->w);
  }
}

static void on_io(struct ev_loop *loop, ev_io *ew, int revents) {
  iof_socket *s = ew->data;
  if (__builtin_expect(revents == EV_READ, 1)) { /* the usual event */
    if (!wake_first(s, &s->rd)) set_interest(s, s->interest & ~EV_READ);
    return;
  }
  if (revents & EV_ERROR) {
    /* The kernel refused to watch the descriptor (epoll_ctl: ENOMEM,
     * ENOSPC): libev stopped the watcher. Waking the waiters as if ready
     * would make them wait again on a watcher that no longer exists. */
    ev_io_stop(loop, ew);
    s->interest = 0;
    fail_all(&s->rd, -ENOMEM);
    fail_all(&s->wr, -ENOMEM);
    return;
  }
  int drop = 0;
  /* An event nobody waits for is dropped from the mask: level-triggered,
   * it would fire again at every poll. */
  if ((revents & EV_READ) && !wake_first(s, &s->rd)) drop |= EV_READ;
  if ((revents & EV_WRITE) && !wake_first(s, &s->wr)) drop |= EV_WRITE;
  if (drop) set_interest(s, s->interest & ~drop);
}

static iof__waitq *queue_of(iof_socket *s, iof_io_op *op) {
  return op->dir == EV_WRITE ? &s->wr : &s->rd;
}

/* A socket wait remembers the limits it was built with. */
typedef struct sock_wait {
  iof_io_op op;
  unsigned gen;
} sock_wait;

/* Returned by a wait whose limits changed before or while it waited: the
 * waiter builds a new one. Never seen by callers. */
#define RETRY_LIMITS (-0x7ff0)

/* Queues op on its socket and makes sure the watcher has its direction.
 * The home path arms with this alone: no hop since the caller read the
 * limits and checked the socket, so neither can have changed. */
static inline int arm_home(iof_io_op *op) {
  iof_socket *s = op->obj;
  if (__builtin_expect(!(s->interest & op->dir), 0)) {
    int r = iof__ev_mem_ok(); /* libev may grow its arrays */
    if (r < 0) return r;
    set_interest(s, s->interest | op->dir);
  }
  iof__wq_push(queue_of(s, op), &op->node);
  return 0;
}

/* Any other wait may have hopped threads since it was built: re-check. */
static inline int arm(iof_io_op *op) {
  iof_socket *s = op->obj;
  if (s->closed) return -ECANCELED; /* closed while on its way: pending */
  if (((sock_wait *)op)->gen !=
      atomic_load_explicit(&s->limit_gen, memory_order_relaxed))
    return RETRY_LIMITS;
  return arm_home(op);
}

static inline void disarm(iof_io_op *op) {
  iof_socket *s = op->obj;
  if (!s) return; /* detached by close */
  iof__wq_unlink(queue_of(s, op), &op->node);
}

/* disarm for the home path: only a node nobody claimed is still queued. */
static inline void disarm_home(iof_io_op *op) {
  if (__builtin_expect(op->node.linked, 0)) disarm(op);
}

#define AWAY_FREED 1u
#define AWAY_ONE 2u

/* Frees s now, or when its last wait away from home leaves. */
static void release(iof_socket *s) {
  if (atomic_fetch_or(&s->away, AWAY_FREED) == 0) free(s);
}

/* Any socket wait: with limits, away from home, or retried. */
static __attribute__((noinline)) int wait_any(iof_socket *s, int dir) {
  int d = dir == EV_WRITE;
  for (;;) {
    sock_wait sw;
    sw.gen = atomic_load_explicit(&s->limit_gen, memory_order_relaxed);
    int64_t dl = atomic_load_explicit(&s->deadline[d], memory_order_relaxed);
    int64_t to = atomic_load_explicit(&s->timeout[d], memory_order_relaxed);
    iof__io_op_init(&sw.op, s->io, arm, disarm, s);
    sw.op.dir = dir;
    int64_t deadline = -1;
    if (dl | to) { /* a clock read only for sockets with limits */
      int64_t now = iof__now_ns();
      int64_t lim = dl ? dl : INT64_MAX;
      if (to && to < iof__sat_sub(lim, now)) lim = iof__sat_add(now, to);
      if (lim <= now) return -ETIMEDOUT;
      deadline = lim;
    }
    atomic_fetch_add(&s->away, AWAY_ONE);
    int r = iof__io_wait(&sw.op, deadline);
    unsigned left = atomic_fetch_sub(&s->away, AWAY_ONE) - AWAY_ONE;
    if (left & AWAY_FREED) { /* freed meanwhile: never touch s again */
      if (left == AWAY_FREED) free(s);
      return r == RETRY_LIMITS ? -ECANCELED : r;
    }
    if (r != RETRY_LIMITS) return r;
  }
}

/* The usual wait, inlined into the byte paths: no limits, at home; only
 * what the home path and on_io read is set. Anything else, or a retry
 * (the limits changed while waiting), goes to wait_any. */
static inline __attribute__((always_inline)) int
socket_wait_on(iof_socket *s, int dir, iof_thread_state *th, bool launched) {
  int d = dir == EV_WRITE;
  if (atomic_load_explicit(&s->deadline[d], memory_order_relaxed) |
          atomic_load_explicit(&s->timeout[d], memory_order_relaxed) ||
      !(launched ? iof__io_launched_at_home(th, th->current, s->io)
                 : iof__io_at_home(th, th->current, s->io)))
    return wait_any(s, dir);
  if (s->closed) return -EBADF;
  sock_wait sw;
  sw.op.io = s->io;
  sw.op.obj = s;
  sw.op.dir = dir;
  sw.op.node.w = &sw.op.w;
  sw.op.node.index = 0;
  int r = iof__io_wait_home(th, th->current, &sw.op, arm_home, disarm_home);
  return r != RETRY_LIMITS ? r : wait_any(s, dir);
}

int iof__socket_wait(iof_socket *s, int dir) {
  return socket_wait_on(s, dir, iof__thread_fast(), false);
}

/* The read's wait, for a caller that read th and checked that its fiber
 * is launched just before (byte_check): out of line, so that the read's
 * own frame stays small. */
static __attribute__((noinline)) int read_wait(iof_socket *s,
                                               iof_thread_state *th) {
  return socket_wait_on(s, EV_READ, th, true);
}

/* Stores one limit and sends the waiters of that direction back to
 * rebuild their waits with it (on io's thread). */
static void apply_limit(iof_socket *s, int which, bool relative, int64_t v) {
  for (int d = 0; d < 2; d++) {
    if (!(which & (d ? IOF_WRITE : IOF_READ))) continue;
    atomic_store_explicit(relative ? &s->timeout[d] : &s->deadline[d], v,
                          memory_order_relaxed);
  }
  atomic_fetch_add_explicit(&s->limit_gen, 1, memory_order_relaxed);
  for (int d = 0; d < 2; d++)
    if (which & (d ? IOF_WRITE : IOF_READ))
      fail_all(d ? &s->wr : &s->rd, RETRY_LIMITS);
}

static int set_limit(iof_socket *s, int which, bool relative, int64_t v) {
  int r = iof__socket_check(s);
  if (r < 0) return r;
  if (!which || (which & ~(IOF_READ | IOF_WRITE))) return -EINVAL;
  if (v < 0) v = 0;
  bool hopped;
  r = iof__io_enter(s->io, &hopped);
  if (r < 0) return r;
  if (s->closed)
    r = -EBADF;
  else
    apply_limit(s, which, relative, v);
  iof__io_leave(s->io, hopped);
  return r;
}

int iof_socket_set_deadline(iof_socket *s, int which, int64_t deadline_ns) {
  return set_limit(s, which, false, deadline_ns);
}

int iof_socket_set_timeout(iof_socket *s, int which, int64_t ns) {
  return set_limit(s, which, true, ns);
}

int64_t iof_socket_deadline(const iof_socket *s, int which) {
  if (!s || (which != IOF_READ && which != IOF_WRITE)) return 0;
  return atomic_load_explicit(&s->deadline[which == IOF_WRITE],
                              memory_order_relaxed);
}

int64_t iof_socket_timeout(const iof_socket *s, int which) {
  if (!s || (which != IOF_READ && which != IOF_WRITE)) return 0;
  return atomic_load_explicit(&s->timeout[which == IOF_WRITE],
                              memory_order_relaxed);
}

int iof__socket_check(const iof_socket *s) {
  if (!s) return -EINVAL;
  return s->closed ? -EBADF : 0;
}

static void link_socket(iof_io_context *io, iof_socket *s) {
  pthread_mutex_lock(&io->rlock);
  s->prev = NULL;
  s->next = io->sockets;
  if (io->sockets) io->sockets->prev = s;
  io->sockets = s;
  pthread_mutex_unlock(&io->rlock);
}

static void unlink_socket(iof_socket *s) {
  iof_io_context *io = s->io;
  pthread_mutex_lock(&io->rlock);
  if (s->prev)
    s->prev->next = s->next;
  else
    io->sockets = s->next;
  if (s->next) s->next->prev = s->prev;
  pthread_mutex_unlock(&io->rlock);
}

/* Fills a zeroed s for fd and links it to io. */
static void socket_init(iof_socket *s, iof_io_context *io, int fd, int family,
                        int type, bool listener, iof_socket **out) {
  s->io = io;
  s->fd = fd;
  s->family = family;
  s->type = type;
  s->listener = listener;
  s->no_bytes = listener;
  s->is_socket = true;
  s->read_first = true;
  ev_io_init(&s->w, on_io, fd, 0);
  s->w.data = s;
  link_socket(io, s);
  *out = s;
}

int iof__socket_new(iof_io_context *io, int fd, int family, int type,
                    bool listener, iof_socket **out) {
  iof_socket *s = calloc(1, sizeof *s);
  if (!s) {
    close(fd);
    return -ENOMEM;
  }
  socket_init(s, io, fd, family, type, listener, out);
  return 0;
}

int iof_socket_adopt(iof_io_context *io, int fd, iof_socket **out) {
  if (!io || !out) return -EINVAL;
  /* The runtime's own descriptors (a loop's epoll fd, its wake-up fd) are
   * as if not open, as for compat's close: a socket on one made libev
   * assert once it was watched or closed. */
  int fl = fd < 0 || iof__rt_fd_owned(fd) ? -1 : fcntl(fd, F_GETFL);
  if (fl < 0) return -EBADF;
  /* Allocated before the fd is touched: whatever fails, the fd stays the
   * caller's, open and as it was (it was closed when memory ran out, and
   * the caller's own close then hit a stranger's descriptor). */
  iof_socket *s = calloc(1, sizeof *s);
  if (!s) return -ENOMEM;
  /* Only a foreign fd pays for these: the runtime's own sockets are made
   * with SOCK_NONBLOCK | SOCK_CLOEXEC. */
  if (fcntl(fd, F_SETFL, fl | O_NONBLOCK) < 0 ||
      fcntl(fd, F_SETFD, FD_CLOEXEC) < 0) {
    int e = errno;
    fcntl(fd, F_SETFL, fl);
    free(s);
    return -e;
  }
  int type = 0, acc = 0;
  socklen_t sl = sizeof type;
  bool is_socket = getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &sl) == 0;
  sl = sizeof acc;
  if (is_socket) getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &acc, &sl);
  struct sockaddr_storage ss;
  socklen_t al = sizeof ss;
  int family = is_socket && getsockname(fd, (struct sockaddr *)&ss, &al) == 0
                   ? ss.ss_family
                   : 0;
  socket_init(s, io, fd, family, type, acc != 0, out);
  s->is_socket = is_socket;
  return 0;
}

void iof__socket_discard(iof_socket *s) {
  unlink_socket(s);
  close(s->fd);
  release(s);
}

/* Detaches and cancels the waiters, stops the watcher, closes the fd. On
 * io's thread (or while nobody runs io). */
static void close_now(iof_socket *s) {
  s->closed = true;
  s->no_bytes = true;
  iof__waitq *qs[2] = {&s->rd, &s->wr};
  for (int i = 0; i < 2; i++) fail_all(qs[i], -ECANCELED);
  set_interest(s, 0);
  close(s->fd);
  s->fd = -1;
}

int iof_socket_close(iof_socket *s) {
  if (!s) return -EINVAL;
  if (s->closed) return 0;
  bool hopped;
  int r = iof__io_enter(s->io, &hopped);
  if (r < 0) return r;
  if (!hopped && !iof__thread_runs(&s->io->ctx)) {
    /* A plain thread while io is not running: another thread's fiber that
     * used the socket reached io's queue under rlock; taking it orders
     * that use before the close. */
    pthread_mutex_lock(&s->io->rlock);
    pthread_mutex_unlock(&s->io->rlock);
  }
  if (!s->closed) close_now(s);
  iof__io_leave(s->io, hopped);
  return 0;
}

int iof_socket_close_graceful(iof_socket *s, int64_t linger_ns) {
  int r = iof__socket_check(s);
  if (r < 0) return r;
  if (linger_ns < 0) return -EINVAL;
  iof_fiber *self = iof_fiber_current();
  if (!self || !self->env) return -EPERM;
  /* A listener or datagram socket has no stream to finish. */
  if (!s->no_bytes && shutdown(s->fd, SHUT_WR) == 0 && linger_ns > 0 &&
      iof_socket_set_deadline(s, IOF_READ, iof_deadline_after(linger_ns)) ==
          0) {
    char buf[512]; /* small: the caller's stack may be too */
    while (iof_read_some(s, buf, sizeof buf) > 0) {
    }
  }
  return iof_socket_close(s);
}

int iof_socket_free(iof_socket *s) {
  if (!s) return -EINVAL;
  int r = iof_socket_close(s);
  if (r < 0) return r;
  unlink_socket(s);
  release(s);
  return 0;
}

void iof__io_cancel_socket_waits(iof_io_context *io) {
  /* The lock keeps the list still; the wakes post to io's local queue (the
   * caller runs io), which does not take it. */
  pthread_mutex_lock(&io->rlock);
  for (iof_socket *s = io->sockets; s; s = s->next) {
    fail_all(&s->rd, -ECANCELED);
    fail_all(&s->wr, -ECANCELED);
  }
  pthread_mutex_unlock(&io->rlock);
}

void iof__io_close_all(iof_io_context *io) {
  while (io->sockets) {
    iof_socket *s = io->sockets;
    io->sockets = s->next;
    if (!s->closed) close_now(s);
    release(s);
  }
}

int iof_socket_fd(const iof_socket *s) {
  if (!s) return -EINVAL;
  return s->closed ? -EBADF : s->fd;
}

iof_io_context *iof_socket_io_context(const iof_socket *s) {
  return s ? s->io : NULL;
}

int iof_socket_shutdown(iof_socket *s, int how) {
  int r = iof__socket_check(s);
  if (r < 0) return r;
  return shutdown(s->fd, how) == 0 ? 0 : -errno;
}

static int set_opt(iof_socket *s, int level, int name, bool on) {
  int r = iof__socket_check(s);
  if (r < 0) return r;
  int v = on;
  return setsockopt(s->fd, level, name, &v, sizeof v) == 0 ? 0 : -errno;
}

int iof_socket_set_nodelay(iof_socket *s, bool on) {
  return set_opt(s, IPPROTO_TCP, TCP_NODELAY, on);
}

int iof_socket_set_keepalive(iof_socket *s, bool on) {
  return set_opt(s, SOL_SOCKET, SO_KEEPALIVE, on);
}

int iof_socket_local_addr(iof_socket *s, struct sockaddr *sa, socklen_t *len) {
  int r = iof__socket_check(s);
  if (r < 0) return r;
  if (!sa || !len) return -EINVAL;
  return getsockname(s->fd, sa, len) == 0 ? 0 : -errno;
}

int iof_socket_local_port(iof_socket *s) {
  struct sockaddr_storage ss;
  socklen_t len = sizeof ss;
  int r = iof_socket_local_addr(s, (struct sockaddr *)&ss, &len);
  if (r < 0) return r;
  if (ss.ss_family == AF_INET)
    return ntohs(((struct sockaddr_in *)&ss)->sin_port);
  if (ss.ss_family == AF_INET6)
    return ntohs(((struct sockaddr_in6 *)&ss)->sin6_port);
  return -EAFNOSUPPORT;
}

/* ---- byte paths -------------------------------------------------------- */

/* Checks shared by every byte call; 1 means "return 0 now" (len 0). */
static inline int byte_check_th(iof_socket *s, const void *buf, size_t len,
                                iof_thread_state **thp) {
  if (!s) return -EINVAL;
  if (__builtin_expect(s->no_bytes, 0)) return s->closed ? -EBADF : -EINVAL;
  if (!len) return 1;
  if (!buf) return -EFAULT;
  iof_thread_state *th = iof__thread_fast();
  *thp = th;
  iof_fiber *self = th->current;
  if (self == &th->root || !self->env) return -EPERM;
  if (iof__stop_requested(self->env->stop_token)) return -ECANCELED;
  return 0;
}

static inline int byte_check(iof_socket *s, const void *buf, size_t len) {
  iof_thread_state *th;
  return byte_check_th(s, buf, len, &th);
}

/* After a read: a full buffer suggests more is waiting, so the next read
 * tries first (speculatively), unless the last speculation missed: a
 * message reader whose reads end exactly at message boundaries would
 * otherwise pay a blind EAGAIN per message. */
static void read_done(iof_socket *s, bool full) {
  if (s->speculative) s->spec_missed = false;
  s->read_first = full && !s->spec_missed;
  s->speculative = s->read_first;
}

/* The read path of readv and of read_some's rarer cases (arguments
 * already checked). */
static __attribute__((noinline)) ssize_t
read_loop(iof_socket *s, const struct iovec *iov, int iovcnt, size_t total) {
  for (;;) {
    if (s->read_first) {
      ssize_t n = iovcnt == 1 ? read(s->fd, iov[0].iov_base, iov[0].iov_len)
                              : readv(s->fd, iov, iovcnt);
      if (n >= 0) {
        read_done(s, (size_t)n == total);
        return n;
      }
      if (errno == EINTR) continue;
      if (errno != EAGAIN && errno != EWOULDBLOCK) return -errno;
      if (s->speculative) s->spec_missed = true;
    }
    s->read_first = false;
    int r = iof__socket_wait(s, EV_READ);
    if (r < 0) return r;
    if (s->closed) return -EBADF;
    s->read_first = true;
    s->speculative = false;
  }
}

ssize_t iof_read_some(iof_socket *s, void *buf, size_t len) {
  iof_thread_state *th;
  int r = byte_check_th(s, buf, len, &th);
  if (r != 0) return r > 0 ? 0 : r;
  if (!s->read_first) {
    /* The usual case after a short read: wait, then one read. Anything
     * else (an interrupted or spurious read) goes on in read_loop. */
    r = read_wait(s, th);
    if (r < 0) return r;
    if (s->closed) return -EBADF;
    ssize_t n = read(s->fd, buf, len);
    if (n >= 0) {
      s->speculative = false; /* it waited first */
      read_done(s, (size_t)n == len);
      return n;
    }
    int e = errno;
    s->speculative = false;
    if (e != EINTR && e != EAGAIN && e != EWOULDBLOCK) return -e;
    s->read_first = e == EINTR; /* retry at once, or wait again */
  }
  struct iovec v = {buf, len};
  return read_loop(s, &v, 1, len);
}

ssize_t iof_readv(iof_socket *s, const struct iovec *iov, int iovcnt) {
  if (!iov || iovcnt <= 0 || iovcnt > IOV_MAX) return -EINVAL;
  size_t total = 0;
  for (int i = 0; i < iovcnt; i++) {
    if (!iov[i].iov_base && iov[i].iov_len) return -EFAULT;
    /* As readv(2)/writev(2): a total past SSIZE_MAX is EINVAL (and must
     * not wrap into a small one). */
    if (iov[i].iov_len > (size_t)SSIZE_MAX - total) return -EINVAL;
    total += iov[i].iov_len;
  }
  int r = byte_check(s, iov, total);
  if (r != 0) return r > 0 ? 0 : r;
  return read_loop(s, iov, iovcnt, total);
}

/* writev(2) on an adopted pipe or tty, which have no MSG_NOSIGNAL: a pipe
 * whose reader is gone raises SIGPIPE. Block it around the call and take
 * back a SIGPIPE the call raised (it is pending on this thread), so that
 * the caller sees -EPIPE and nothing else. */
static ssize_t writev_nosigpipe(int fd, const struct iovec *iov, int cnt) {
  sigset_t pipe_set, old, pending;
  sigemptyset(&pipe_set);
  sigaddset(&pipe_set, SIGPIPE);
  pthread_sigmask(SIG_BLOCK, &pipe_set, &old);
  bool was_pending =
      sigpending(&pending) == 0 && sigismember(&pending, SIGPIPE);
  ssize_t n = writev(fd, iov, cnt);
  int e = errno;
  if (n < 0 && e == EPIPE && !was_pending) {
    struct timespec zero = {0, 0};
    while (sigtimedwait(&pipe_set, NULL, &zero) < 0 && errno == EINTR) {
    }
  }
  pthread_sigmask(SIG_SETMASK, &old, NULL);
  errno = e;
  return n;
}

static ssize_t send_once(iof_socket *s, const void *buf, size_t len) {
  if (s->is_socket) return send(s->fd, buf, len, MSG_NOSIGNAL);
  struct iovec v = {(void *)buf, len};
  return writev_nosigpipe(s->fd, &v, 1);
}

/* The rest of write_some (all: false) and write after their first send
 * returned n (arguments checked, len > 0): partial writes, EINTR, and the
 * wait for room when the socket is full. Out of line: the usual write is
 * one send that takes everything. */
static __attribute__((noinline)) ssize_t
write_rest(iof_socket *s, const char *buf, size_t len, ssize_t n, bool all) {
  size_t put = 0;
  for (;;) {
    if (n >= 0) {
      put += (size_t)n;
      if (!all || put == len) return (ssize_t)put;
    } else if (errno != EINTR) {
      if (errno != EAGAIN && errno != EWOULDBLOCK) return -errno;
      int r = iof__socket_wait(s, EV_WRITE);
      if (r < 0) return r;
      if (s->closed) return -EBADF;
    }
    n = send_once(s, buf + put, len - put);
  }
}

ssize_t iof_write_some(iof_socket *s, const void *buf, size_t len) {
  int r = byte_check(s, buf, len);
  if (r != 0) return r > 0 ? 0 : r;
  ssize_t n = send_once(s, buf, len);
  if (n >= 0) return n;
  return write_rest(s, buf, len, n, false);
}

ssize_t iof_read(iof_socket *s, void *buf, size_t len) {
  if (!len) {
    int r = byte_check(s, buf, 0);
    return r < 0 ? r : 0;
  }
  size_t got = 0;
  while (got < len) {
    ssize_t n = iof_read_some(s, (char *)buf + got, len - got);
    if (n < 0) return n;
    if (n == 0) break;
    got += (size_t)n;
  }
  return (ssize_t)got;
}

ssize_t iof_write(iof_socket *s, const void *buf, size_t len) {
  int r = byte_check(s, buf, len);
  if (r != 0) return r > 0 ? 0 : r;
  ssize_t n = send_once(s, buf, len);
  if (n == (ssize_t)len) return n;
  return write_rest(s, buf, len, n, true);
}

ssize_t iof_writev(iof_socket *s, const struct iovec *iov, int iovcnt) {
  if (!iov || iovcnt <= 0 || iovcnt > IOV_MAX) return -EINVAL;
  struct iovec v[64];
  size_t total = 0;
  for (int i = 0; i < iovcnt; i++) {
    if (!iov[i].iov_base && iov[i].iov_len) return -EFAULT;
    /* As readv(2)/writev(2): a total past SSIZE_MAX is EINVAL (and must
     * not wrap into a small one). */
    if (iov[i].iov_len > (size_t)SSIZE_MAX - total) return -EINVAL;
    total += iov[i].iov_len;
  }
  int r = byte_check(s, iov, total);
  if (r != 0) return r > 0 ? 0 : r;
  size_t put = 0;
  int first = 0;
  size_t skip = 0; /* bytes of iov[first] already written */
  while (put < total) {
    int cnt = 0;
    for (int i = first; i < iovcnt && cnt < 64; i++, cnt++) {
      v[cnt] = iov[i];
      if (i == first) {
        v[cnt].iov_base = (char *)v[cnt].iov_base + skip;
        v[cnt].iov_len -= skip;
      }
    }
    ssize_t n;
    if (s->is_socket) {
      struct msghdr m = {0};
      m.msg_iov = v;
      m.msg_iovlen = (size_t)cnt;
      n = sendmsg(s->fd, &m, MSG_NOSIGNAL);
    } else {
      n = writev_nosigpipe(s->fd, v, cnt);
    }
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno != EAGAIN && errno != EWOULDBLOCK) return -errno;
      r = iof__socket_wait(s, EV_WRITE);
      if (r < 0) return r;
      if (s->closed) return -EBADF;
      continue;
    }
    put += (size_t)n;
    size_t adv = (size_t)n + skip;
    while (first < iovcnt && adv >= iov[first].iov_len) {
      adv -= iov[first].iov_len;
      first++;
    }
    skip = adv;
  }
  return (ssize_t)put;
}

/* ---- foreign descriptors ---------------------------------------------- */

/* libev registers a started watcher's fd with epoll only when its loop
 * next polls, and asserts (aborting the process) if the fd is no longer
 * open then. A foreign fd is the caller's: another fiber of the loop may
 * close it between the start of a wait and that poll. So each new wait is
 * listed until the poll, and a prepare watcher (which libev runs just
 * before registering) fails those whose fd went away with -EBADF, its
 * watcher stopped unregistered. */
typedef struct iof__fresh_fd {
  struct iof__fresh_fd *next, *prev;
  bool listed;
} fresh_fd;

typedef struct fd_wait {
  iof_io_op op;
  ev_io io;
  int fd;
  fresh_fd fresh;
} fd_wait;

static void fresh_unlink(iof_io_context *io, fresh_fd *n) {
  if (!n->listed) return;
  n->listed = false;
  if (n->prev)
    n->prev->next = n->next;
  else
    io->fd_fresh = n->next;
  if (n->next) n->next->prev = n->prev;
  if (!io->fd_fresh) ev_prepare_stop(io->loop, &io->fd_check);
}

void iof__fd_check_now(iof_io_context *io) {
  struct ev_loop *loop = io->loop;
  fresh_fd *n = io->fd_fresh;
  io->fd_fresh = NULL;
  ev_prepare_stop(loop, &io->fd_check);
  for (fresh_fd *next; n; n = next) {
    next = n->next;
    n->listed = false;
    fd_wait *f = (fd_wait *)((char *)n - offsetof(fd_wait, fresh));
    if (fcntl(f->fd, F_GETFD) < 0) {
      ev_io_stop(loop, &f->io);
      iof__io_complete(&f->op, -EBADF);
    }
  }
}

void iof__fd_check(struct ev_loop *loop, ev_prepare *w, int revents) {
  (void)loop;
  (void)revents;
  iof__fd_check_now(
      (iof_io_context *)((char *)w - offsetof(iof_io_context, fd_check)));
}

static void on_fd(struct ev_loop *loop, ev_io *ew, int revents) {
  (void)loop;
  /* EV_ERROR: the kernel refused to watch it (see on_io). */
  iof__io_complete(ew->data, revents & EV_ERROR ? -ENOMEM : 0);
}

static int fd_arm(iof_io_op *op) {
  fd_wait *f = (fd_wait *)op;
  iof_io_context *io = op->io;
  ev_io_init(&f->io, on_fd, f->fd, op->dir);
  f->io.data = op;
  ev_io_start(io->loop, &f->io);
  f->fresh.prev = NULL;
  f->fresh.next = io->fd_fresh;
  if (io->fd_fresh) io->fd_fresh->prev = &f->fresh;
  io->fd_fresh = &f->fresh;
  f->fresh.listed = true;
  ev_prepare_start(io->loop, &io->fd_check);
  return 0;
}

static void fd_disarm(iof_io_op *op) {
  fd_wait *f = (fd_wait *)op;
  ev_io_stop(op->io->loop, &f->io);
  fresh_unlink(op->io, &f->fresh);
}

static int wait_fd(iof_io_context *io, int fd, int ev, int64_t timeout_ns) {
  if (!io) return -EINVAL;
  /* The runtime's own descriptors are as if not open (see adopt). */
  if (fd < 0 || iof__rt_fd_owned(fd) || fcntl(fd, F_GETFD) < 0) return -EBADF;
  fd_wait f;
  f.fresh.listed = false;
  iof__io_op_init(&f.op, io, fd_arm, fd_disarm, NULL);
  f.op.dir = ev;
  f.fd = fd;
  int64_t deadline =
      timeout_ns < 0 ? -1 : iof__sat_add(iof__now_ns(), timeout_ns);
  return iof__io_wait(&f.op, deadline);
}

int iof_wait_readable(iof_io_context *io, int fd, int64_t timeout_ns) {
  return wait_fd(io, fd, EV_READ, timeout_ns);
}

int iof_wait_writable(iof_io_context *io, int fd, int64_t timeout_ns) {
  return wait_fd(io, fd, EV_WRITE, timeout_ns);
}
