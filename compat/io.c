/* The fd-making, byte, connect/accept and bookkeeping calls of compat
 * (see compat_io.h). Each blocking call is "begin; loop { try the plain
 * non-blocking call; on failure iof__fd_again }" (fd_table.c does the
 * waiting); begin says when the plain call is already exact. */
#include <iofiber/compat_io.h>
#include <iofiber/fiber.h>

#include "compat/backoff.h"
#include "compat/fd_table.h"
#include "compat/thread_internal.h"
#include "io/resolver_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdlib.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <string.h>
#include <unistd.h>

/* The record of a new fd: what the user asked for (non-blocking or not)
 * and whether the runtime made it non-blocking for a fiber. */
static void fresh(int fd, bool user_nb, bool rt_nb) {
  iof__fd_reset(fd, user_nb ? IOF__FD_KNOWN | IOF__FD_USER_NB
                    : rt_nb ? IOF__FD_KNOWN | IOF__FD_RT_NB
                            : 0);
}

/* The socket timeouts and linger of s's record, now also to's. */
static void copy_socket_opts(const iof__fd_slot *s, int to) {
  iof__fd_slot *t = iof__fd_slot_peek(to);
  if (!t) return;
  atomic_store(&t->rcv_ns, atomic_load(&s->rcv_ns));
  atomic_store(&t->snd_ns, atomic_load(&s->snd_ns));
  atomic_store(&t->linger, atomic_load(&s->linger));
}

/* `to` now names the file `from` names (dup): same blocking view, same
 * socket timeouts. */
static void inherit(int from, int to) {
  iof__fd_slot *s = iof__fd_slot_peek(from);
  unsigned st = s ? atomic_load(&s->flags) : 0;
  iof__fd_reset(to, st);
  if (st) copy_socket_opts(s, to);
}

/* ---- making fds -------------------------------------------------------- */

int iof_compat_socket(int domain, int type, int protocol) {
  bool user_nb = type & SOCK_NONBLOCK;
  bool in_fiber = iof__compat_fiber() != NULL;
  int fd =
      iof__libc.socket(domain, type | (in_fiber ? SOCK_NONBLOCK : 0), protocol);
  if (fd >= 0) fresh(fd, user_nb, in_fiber);
  return fd;
}

int iof_compat_socketpair(int domain, int type, int protocol, int sv[2]) {
  bool user_nb = type & SOCK_NONBLOCK;
  bool in_fiber = iof__compat_fiber() != NULL;
  int r = iof__libc.socketpair(domain, type | (in_fiber ? SOCK_NONBLOCK : 0),
                               protocol, sv);
  if (r == 0) {
    fresh(sv[0], user_nb, in_fiber);
    fresh(sv[1], user_nb, in_fiber);
  }
  return r;
}

int iof_compat_pipe2(int fds[2], int flags) {
  bool user_nb = flags & O_NONBLOCK;
  bool in_fiber = iof__compat_fiber() != NULL;
  int r = iof__libc.pipe2(fds, flags | (in_fiber ? O_NONBLOCK : 0));
  if (r == 0) {
    fresh(fds[0], user_nb, in_fiber);
    fresh(fds[1], user_nb, in_fiber);
  }
  return r;
}

int iof_compat_pipe(int fds[2]) {
  if (!iof__compat_fiber()) {
    int r = iof__libc.pipe(fds);
    if (r == 0) {
      fresh(fds[0], false, false);
      fresh(fds[1], false, false);
    }
    return r;
  }
  return iof_compat_pipe2(fds, 0);
}

/* ---- accept / connect -------------------------------------------------- */

int iof_compat_accept4(int fd, struct sockaddr *addr, socklen_t *len,
                       int flags) {
  bool user_nb = flags & SOCK_NONBLOCK;
  iof__fd_op op;
  if (!iof__fd_begin(&op, fd, EV_READ)) {
    int c = iof__libc.accept4(fd, addr, len, flags);
    if (c >= 0) {
      fresh(c, user_nb, false);
      /* A socket the user made non-blocking is never learned: its close
       * must know the linger it got from the listener (see below). */
      iof__fd_slot *l = iof__fd_slot_peek(fd);
      iof__fd_slot *t = user_nb && l ? iof__fd_slot_peek(c) : NULL;
      if (t) atomic_store(&t->linger, atomic_load(&l->linger));
    }
    return c;
  }
  bool rt_nb = op.fiber != NULL;
  for (;;) {
    int c =
        iof__libc.accept4(fd, addr, len, flags | (rt_nb ? SOCK_NONBLOCK : 0));
    if (c >= 0) {
      fresh(c, user_nb, rt_nb);
      /* Linux gives the new socket the listener's options, SO_RCVTIMEO,
       * SO_SNDTIMEO and SO_LINGER among them: its record must have them
       * too (the listener's record holds them, learned or set through
       * compat). A record made outside this path is unknown, and learns
       * them from the kernel at its first blocking call from a fiber. */
      if (rt_nb) copy_socket_opts(op.slot, c);
      return c;
    }
    if (!iof__fd_again(&op)) return -1;
  }
}

int iof_compat_accept(int fd, struct sockaddr *addr, socklen_t *len) {
  iof__fd_op op;
  if (!iof__fd_begin(&op, fd, EV_READ)) {
    int c = iof__libc.accept(fd, addr, len);
    if (c >= 0) fresh(c, false, false);
    return c;
  }
  return iof_compat_accept4(fd, addr, len, 0);
}

int iof_compat_connect(int fd, const struct sockaddr *addr, socklen_t len) {
  iof__fd_op op;
  if (!iof__fd_begin(&op, fd, EV_WRITE))
    return iof__libc.connect(fd, addr, len);
  for (;;) {
    int r = iof__libc.connect(fd, addr, len);
    if (r == 0) return 0;
    if (errno == EAGAIN) { /* a full AF_UNIX backlog: wait, then retry */
      if (iof__fd_again(&op)) continue;
      return -1;
    }
    if (errno != EINPROGRESS) return -1;
    int64_t t = atomic_load(&op.slot->snd_ns);
    int w = iof__fd_wait_for(&op, t > 0 ? iof__now_ns() + t : -1);
    if (w == -ETIMEDOUT) {
      errno = EINPROGRESS; /* Linux's answer when SO_SNDTIMEO expires */
      return -1;
    }
    if (w < 0) {
      errno = -w;
      return -1;
    }
    int err = 0;
    socklen_t el = sizeof err;
    if (iof__libc.getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &el) != 0)
      return -1;
    /* The kernel leaves a TCP socket whose connect was waited out in the
     * "connecting" state until connect is called on it again: a second
     * connect would then answer 0 after a success (not EISCONN) and
     * ECONNABORTED after a failure (not a fresh try), unlike the blocking
     * call the caller made. That call settles it, as the blocking call's
     * own wait does; its answer is the one SO_ERROR already gave. */
    int proto = 0;
    el = sizeof proto;
    if (iof__libc.getsockopt(fd, SOL_SOCKET, SO_PROTOCOL, &proto, &el) == 0 &&
        proto == IPPROTO_TCP)
      (void)iof__libc.connect(fd, addr, len);
    if (err) {
      errno = err;
      return -1;
    }
    errno = op.saved_errno;
    return 0;
  }
}

/* ---- byte calls -------------------------------------------------------- */

/* get_shared's and put_shared's answer when the call is not theirs to
 * make: the caller makes the plain call. */
#define IOF__SHARED_PLAIN (-2)

/* Marks fd's slot: the kernel refused RWF_NOWAIT on it. */
static void no_nowait(int fd) {
  iof__fd_slot *s = iof__fd_slot_peek(fd);
  if (s)
    atomic_fetch_or_explicit(&s->flags, IOF__FD_NO_NOWAIT,
                             memory_order_relaxed);
}

/* Whether a fiber's call on fd is for get_shared/put_shared: the fd is
 * shared with other processes (IOF__FD_SHARED: a pipeline's pipe on 0-2,
 * a terminal) and keeps its blocking mode, which O_NONBLOCK would change
 * for them too; RWF_NOWAIT asks the same of one call. *nowait: the kernel
 * has not refused the flag on it. */
static bool shared_fd(int fd, bool *nowait) {
  iof__fd_slot *s = iof__fd_slot_peek(fd);
  unsigned st = s ? atomic_load_explicit(&s->flags, memory_order_relaxed) : 0;
  if (!(st & IOF__FD_SHARED)) return false;
  *nowait = !(st & IOF__FD_NO_NOWAIT);
  return true;
}

/* After RWF_NOWAIT's EAGAIN on a shared fd: whether the file is
 * non-blocking after all (another process, or a raw system call, set
 * O_NONBLOCK on it), when the plain call would say EAGAIN too. errno is
 * kept. */
static bool shared_nonblocking(int fd) {
  int saved = errno;
  int fl = iof__libc.fcntl(fd, F_GETFL);
  errno = saved;
  return fl >= 0 && (fl & O_NONBLOCK);
}

/* A read of a shared fd (shared_fd): with RWF_NOWAIT, EAGAIN becomes a
 * fiber wait for data, and a reader in another process taking the bytes
 * first only means another wait. A fd the kernel refuses the flag for (a
 * terminal, a pipe on a kernel without it) is marked, and waited for
 * before the caller's plain call (iof__fd_wait_first), as the kernel
 * gives no other way: IOF__SHARED_PLAIN, as for any other fd. */
static ssize_t get_shared(int fd, const struct iovec *iov, int cnt) {
  bool nowait;
  if (!shared_fd(fd, &nowait)) return IOF__SHARED_PLAIN;
  if (nowait && iof__compat_fiber()) {
    int saved = errno;
    for (;;) {
      ssize_t r = preadv2(fd, iov, cnt, -1, RWF_NOWAIT);
      if (r >= 0) {
        errno = saved;
        return r;
      }
      if (errno == EOPNOTSUPP) {
        no_nowait(fd);
        break;
      }
      if (errno != EAGAIN || shared_nonblocking(fd)) return -1;
      int w = iof__fd_wait_plain(fd, EV_READ, -1, true);
      if (w < 0 && w != -EBADF) { /* closed: the next try says EBADF */
        errno = -w;
        return -1;
      }
    }
    errno = saved;
  }
  return iof__fd_wait_first(fd, EV_READ) < 0 ? -1 : IOF__SHARED_PLAIN;
}

/* One try-wait loop around `call` (an expression using the arguments),
 * for calls on sockets, which are never shared_fd. */
#define IOF__BLOCKING(fd, ev, call)                                            \
  do {                                                                         \
    iof__fd_op op_;                                                            \
    if (!iof__fd_begin(&op_, fd, ev)) return (call);                           \
    for (;;) {                                                                 \
      ssize_t r_ = call;                                                       \
      if (r_ >= 0 || !iof__fd_again(&op_)) return r_;                          \
    }                                                                          \
  } while (0)

/* IOF__BLOCKING for a read of n bytes: after a short read (the fd was
 * drained) the next read waits for readiness first, as a blocking read's
 * request/response traffic nearly always finds nothing: one system call
 * fewer per round trip than a try that fails with EAGAIN. */
#define IOF__BLOCKING_READ(fd, n, call, iov, cnt)                              \
  do {                                                                         \
    iof__fd_op op_;                                                            \
    if (!iof__fd_begin(&op_, fd, EV_READ)) {                                   \
      ssize_t r_ = get_shared(fd, iov, cnt);                                   \
      return r_ != IOF__SHARED_PLAIN ? r_ : (call);                            \
    }                                                                          \
    if (atomic_load_explicit(&op_.slot->drained, memory_order_relaxed)) {      \
      errno = EAGAIN;                                                          \
      if (!iof__fd_again(&op_)) return -1;                                     \
    }                                                                          \
    for (;;) {                                                                 \
      ssize_t r_ = call;                                                       \
      if (r_ >= 0) {                                                           \
        atomic_store_explicit(&op_.slot->drained, r_ > 0 && (size_t)r_ < (n),  \
                              memory_order_relaxed);                           \
        return r_;                                                             \
      }                                                                        \
      if (!iof__fd_again(&op_)) return r_;                                     \
    }                                                                          \
  } while (0)

ssize_t iof_compat_read(int fd, void *buf, size_t n) {
  struct iovec v = {buf, n};
  IOF__BLOCKING_READ(fd, n, iof__libc.read(fd, buf, n), &v, 1);
}

ssize_t iof_compat_readv(int fd, const struct iovec *iov, int cnt) {
  iof__fd_op op;
  if (!iof__fd_begin(&op, fd, EV_READ)) {
    ssize_t r = get_shared(fd, iov, cnt);
    return r != IOF__SHARED_PLAIN ? r : iof__libc.readv(fd, iov, cnt);
  }
  for (;;) {
    ssize_t r = iof__libc.readv(fd, iov, cnt);
    if (r >= 0 || !iof__fd_again(&op)) return r;
  }
}

/* Receives that never block in the kernel, whatever the socket's mode: an
 * error-queue read answers EAGAIN when the queue is empty (waiting for
 * readability would spin: the data queue may be readable, or a HUP). */
#define IOF__RECV_NOWAIT (MSG_DONTWAIT | MSG_ERRQUEUE)

/* The socket's kind as slot flags (IOF__FD_UNIX, IOF__FD_STREAM), asked
 * of the kernel once per open file and kept in its slot: a server that
 * reads every header with MSG_WAITALL pays no extra system call. A
 * domain that cannot be asked counts as Unix (fds may be passed). */
static unsigned sock_kind(int fd) {
  iof__fd_slot *s = iof__fd_slot_peek(fd);
  unsigned st = s ? atomic_load_explicit(&s->flags, memory_order_acquire) : 0;
  if (st & IOF__FD_DOMAIN) return st & (IOF__FD_UNIX | IOF__FD_STREAM);
  int dom = 0, type = 0, saved = errno;
  socklen_t len = sizeof dom;
  unsigned kind = 0;
  if (iof__libc.getsockopt(fd, SOL_SOCKET, SO_DOMAIN, &dom, &len) != 0 ||
      dom == AF_UNIX)
    kind |= IOF__FD_UNIX;
  len = sizeof type;
  if (iof__libc.getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &len) == 0 &&
      type == SOCK_STREAM)
    kind |= IOF__FD_STREAM;
  errno = saved;
  if (st & IOF__FD_KNOWN)
    atomic_compare_exchange_strong(&s->flags, &st, st | IOF__FD_DOMAIN | kind);
  return kind;
}

/* MSG_WAITALL waits for the whole buffer only on a byte stream: a
 * datagram or seqpacket socket's call returns its one message however
 * short (udp(7), unix(7)), so looping there would wait for a second. */
static bool is_byte_stream(int fd) {
  return sock_kind(fd) & IOF__FD_STREAM;
}

/* What is left of iov[0..n) past its first `done` bytes (fewer than the
 * vector holds), as a vector in v (room for n entries): its count. */
static size_t iov_rest(const struct iovec *iov, size_t n, size_t done,
                       struct iovec *v) {
  size_t skip = done, k = 0, cnt = 0;
  while (skip >= iov[k].iov_len) skip -= iov[k++].iov_len;
  for (; k < n; k++, cnt++) {
    v[cnt] = iov[k];
    v[cnt].iov_base = (char *)v[cnt].iov_base + skip;
    v[cnt].iov_len -= skip;
    skip = 0;
  }
  return cnt;
}

#define IOF__IOV_READ 64

static bool read_header(const struct msghdr *msg, struct msghdr *out);

/* Whether a read's control data holds fds (or some were cut for want of
 * room): a Unix stream's recvmsg stops after the piece that carried them,
 * MSG_WAITALL or not (unix(7)). */
static bool got_fds(struct msghdr *m) {
  if (m->msg_flags & MSG_CTRUNC) return true;
  for (struct cmsghdr *c = CMSG_FIRSTHDR(m); c; c = CMSG_NXTHDR(m, c))
    if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS) return true;
  return false;
}

/* recvmsg(MSG_WAITALL) on a byte stream after a first read of `got`
 * bytes: the rest of the caller's vector (copied to advance it; beyond
 * IOF__IOV_READ entries the first read is returned as is), as the
 * blocking call fills it. The name came with the first read; so did the
 * control data if any came, else a later piece may bring it into the
 * caller's buffer (ctl_cap bytes, its size at entry), and the read ends
 * there as the blocking one does with fds. The kernel has read the vector
 * by now: it is the caller's. */
static ssize_t recvmsg_rest(iof__fd_op *op, int fd, struct msghdr *msg,
                            int flags, size_t got, size_t ctl_cap) {
  size_t total = 0;
  for (size_t i = 0; i < msg->msg_iovlen; i++) total += msg->msg_iov[i].iov_len;
  if (got >= total || msg->msg_iovlen > IOF__IOV_READ || got_fds(msg))
    return (ssize_t)got;
  bool ctl = msg->msg_controllen == 0 && msg->msg_control && ctl_cap;
  struct iovec v[IOF__IOV_READ];
  for (;;) {
    size_t cnt = iov_rest(msg->msg_iov, msg->msg_iovlen, got, v);
    struct msghdr m = {0};
    m.msg_iov = v;
    m.msg_iovlen = cnt;
    if (ctl) {
      m.msg_control = msg->msg_control;
      m.msg_controllen = ctl_cap;
    }
    ssize_t r = iof__libc.recvmsg(fd, &m, flags);
    if (r > 0) {
      msg->msg_flags |= m.msg_flags;
      got += (size_t)r;
      if (ctl && (m.msg_controllen || (m.msg_flags & MSG_CTRUNC))) {
        msg->msg_controllen = m.msg_controllen;
        return (ssize_t)got;
      }
      if (got >= total) return (ssize_t)got;
      continue;
    }
    if (r == 0) return (ssize_t)got; /* the end of the stream */
    if (!iof__fd_again(op)) {
      errno = op->saved_errno;
      return (ssize_t)got;
    }
  }
}

ssize_t iof_compat_recvmsg(int fd, struct msghdr *msg, int flags) {
  if (flags & IOF__RECV_NOWAIT) return iof__libc.recvmsg(fd, msg, flags);
  iof__fd_op op;
  if (!iof__fd_begin(&op, fd, EV_READ))
    return iof__libc.recvmsg(fd, msg, flags);
  /* MSG_WAITALL: as recvfrom's, the rest of the buffer on a byte stream
   * (a peek returns what the first try saw). */
  bool waitall =
      (flags & (MSG_WAITALL | MSG_PEEK)) == MSG_WAITALL && is_byte_stream(fd);
  /* The control buffer's size, which the first read overwrites (read
   * without a fault: a wild header gets the kernel's EFAULT below). */
  struct msghdr h;
  size_t ctl_cap = waitall && read_header(msg, &h) ? h.msg_controllen : 0;
  for (;;) {
    ssize_t r = iof__libc.recvmsg(fd, msg, flags);
    if (r > 0 && waitall)
      return recvmsg_rest(&op, fd, msg, flags, (size_t)r, ctl_cap);
    if (r >= 0 || !iof__fd_again(&op)) return r;
  }
}

/* The peer has sent its last byte (or the connection failed): a short
 * peek is all the stream will ever hold. */
static bool stream_ended(int fd) {
  struct pollfd p = {fd, POLLRDHUP, 0};
  return iof__libc.poll(&p, 1, 0) == 1 &&
         (p.revents & (POLLRDHUP | POLLHUP | POLLERR));
}

/* recv(MSG_PEEK | MSG_WAITALL) on a byte stream: each peek starts at the
 * head of the queue again, so the bytes are not added up; the peek is
 * repeated until it sees all n bytes or the stream's end. While some
 * bytes are queued the fd stays readable and nothing announces more:
 * pauses (50 us doubling to 5 ms) between the tries. A pause ended by a
 * handler or a cancellation returns the short peek, as the kernel returns
 * what it copied when a signal ends its wait. */
static ssize_t peek_all(iof__fd_op *op, int fd, void *buf, size_t n, int flags,
                        struct sockaddr *addr, socklen_t *len, ssize_t r) {
  iof__backoff b;
  if (op->fiber)
    iof__backoff_init(&b, op->fiber, 50000, 5000000, true);
  else
    iof__backoff_init_quiet(&b, 50000, 5000000);
  int saved = errno;
  while ((size_t)r < n && !stream_ended(fd) &&
         iof__backoff_pause(&b, INT64_MAX) == 0) {
    ssize_t again = iof__libc.recvfrom(fd, buf, n, flags, addr, len);
    if (again < (ssize_t)r) break; /* another reader took bytes, or failed */
    r = again;
  }
  errno = saved;
  return r;
}

ssize_t iof_compat_recvfrom(int fd, void *buf, size_t n, int flags,
                            struct sockaddr *addr, socklen_t *len) {
  if (flags & IOF__RECV_NOWAIT)
    return iof__libc.recvfrom(fd, buf, n, flags, addr, len);
  iof__fd_op op;
  if (!iof__fd_begin(&op, fd, EV_READ))
    return iof__libc.recvfrom(fd, buf, n, flags, addr, len);
  /* MSG_WAITALL on a non-blocking socket stops at what is there: keep
   * going until the blocking call would have returned. */
  bool waitall = (flags & MSG_WAITALL) && is_byte_stream(fd);
  size_t got = 0;
  for (;;) {
    ssize_t r =
        iof__libc.recvfrom(fd, (char *)buf + got, n - got, flags, addr, len);
    if (r > 0 && waitall && (flags & MSG_PEEK))
      return peek_all(&op, fd, buf, n, flags, addr, len, r);
    if (r > 0 && waitall) {
      got += (size_t)r;
      if (got < n) continue;
      return (ssize_t)got;
    }
    if (r >= 0) return (ssize_t)(got + (size_t)r);
    if (!iof__fd_again(&op)) {
      if (!got) return -1;
      errno = op.saved_errno;
      return (ssize_t)got;
    }
  }
}

ssize_t iof_compat_recv(int fd, void *buf, size_t n, int flags) {
  return iof_compat_recvfrom(fd, buf, n, flags, NULL, NULL);
}

enum { PUT_WRITE, PUT_SEND, PUT_SENDTO };

static ssize_t put(int kind, int fd, const void *buf, size_t n, int flags,
                   const struct sockaddr *a, socklen_t al) {
  switch (kind) {
  case PUT_WRITE:
    return iof__libc.write(fd, buf, n);
  case PUT_SEND:
    return iof__libc.send(fd, buf, n, flags);
  default:
    return iof__libc.sendto(fd, buf, n, flags, a, al);
  }
}

/* The most iovec entries a partial vectored write is advanced over. */
#define IOF__IOV_COPY 64

/* A write to a shared fd (shared_fd) with RWF_NOWAIT: EAGAIN waits as a
 * fiber for room, and the write goes on until all is written, as the
 * blocking call would. A fd the kernel refuses the flag for (a terminal,
 * a pipe on a kernel without it) is marked and written plainly
 * (IOF__SHARED_PLAIN), as is any other fd. Past IOF__IOV_COPY entries a
 * partial write is returned as is. */
static ssize_t put_shared(int fd, const struct iovec *iov, int cnt) {
  bool nowait;
  if (!shared_fd(fd, &nowait) || !nowait || !iof__compat_fiber())
    return IOF__SHARED_PLAIN;
  int saved = errno;
  const struct iovec *cur = iov;
  int cur_cnt = cnt;
  struct iovec v[IOF__IOV_COPY];
  size_t total = 0, done = 0;
  bool walked = false; /* the kernel read the caller's vector: it is valid */
  for (;;) {
    ssize_t r = pwritev2(fd, cur, cur_cnt, -1, RWF_NOWAIT);
    if (r >= 0) {
      if (!walked)
        for (int i = 0; i < cnt; i++) total += iov[i].iov_len;
      walked = true;
      done += (size_t)r;
      if (done >= total || cnt > IOF__IOV_COPY) break;
      cur_cnt = (int)iov_rest(iov, (size_t)cnt, done, v);
      cur = v;
      continue;
    }
    if (errno == EOPNOTSUPP) {
      no_nowait(fd);
      if (!done) {
        errno = saved;
        return IOF__SHARED_PLAIN;
      }
      r = iof__libc.writev(fd, cur, cur_cnt);
      if (r > 0) done += (size_t)r;
      break;
    }
    if (errno != EAGAIN || shared_nonblocking(fd)) {
      if (!done) return -1;
      break;
    }
    int w = iof__fd_wait_plain(fd, EV_WRITE, -1, true);
    if (w < 0 && w != -EBADF) { /* closed: the next try says EBADF */
      if (!done) {
        errno = -w;
        return -1;
      }
      break;
    }
  }
  errno = saved;
  return (ssize_t)done;
}

/* A blocking write hands over everything (pipes, stream sockets) unless
 * an error or a timeout stops it: then it reports what it wrote. */
static ssize_t put_all(int kind, int fd, const void *buf, size_t n, int flags,
                       const struct sockaddr *a, socklen_t al) {
  iof__fd_op op;
  if ((flags & MSG_DONTWAIT) || !iof__fd_begin(&op, fd, EV_WRITE)) {
    if (kind == PUT_WRITE) {
      struct iovec v = {(void *)buf, n};
      ssize_t r = put_shared(fd, &v, 1);
      if (r != IOF__SHARED_PLAIN) return r;
    }
    return put(kind, fd, buf, n, flags, a, al);
  }
  size_t done = 0;
  for (;;) {
    ssize_t r = put(kind, fd, (const char *)buf + done, n - done, flags, a, al);
    if (r >= 0) {
      done += (size_t)r;
      if (done >= n) return (ssize_t)done;
      continue;
    }
    if (!iof__fd_again(&op)) {
      if (!done) return -1;
      errno = op.saved_errno;
      return (ssize_t)done;
    }
  }
}

ssize_t iof_compat_write(int fd, const void *buf, size_t n) {
  return put_all(PUT_WRITE, fd, buf, n, 0, NULL, 0);
}

ssize_t iof_compat_send(int fd, const void *buf, size_t n, int flags) {
  return put_all(PUT_SEND, fd, buf, n, flags, NULL, 0);
}

ssize_t iof_compat_sendto(int fd, const void *buf, size_t n, int flags,
                          const struct sockaddr *addr, socklen_t len) {
  return put_all(PUT_SENDTO, fd, buf, n, flags, addr, len);
}

static ssize_t putv_once(int fd, const struct msghdr *msg, int flags,
                         bool is_sendmsg) {
  return is_sendmsg ? iof__libc.sendmsg(fd, msg, flags)
                    : iof__libc.writev(fd, msg->msg_iov, (int)msg->msg_iovlen);
}

/* writev/sendmsg: as put_all over an iovec (copied to advance it; beyond
 * IOF__IOV_COPY entries a partial write is returned as is). Control data
 * goes with the first piece only. For writev, msg is the shim's own
 * header around the caller's vector; for sendmsg it is the caller's. */
static ssize_t putv_all(int fd, const struct msghdr *msg, int flags,
                        bool is_sendmsg) {
  iof__fd_op op;
  if ((flags & MSG_DONTWAIT) || !iof__fd_begin(&op, fd, EV_WRITE)) {
    if (!is_sendmsg) {
      ssize_t r = put_shared(fd, msg->msg_iov, (int)msg->msg_iovlen);
      if (r != IOF__SHARED_PLAIN) return r;
    }
    return putv_once(fd, msg, flags, is_sendmsg);
  }
  /* The first try hands the caller's header and vector to the kernel
   * untouched: one it cannot read (a wild pointer) or refuses fails with
   * the plain call's EFAULT/EINVAL/EMSGSIZE, never a fault here. Once it
   * has taken bytes it has copied both in: they are readable, and the
   * walk below may read them. */
  const struct msghdr *cur = msg;
  struct iovec v[IOF__IOV_COPY];
  struct msghdr m;
  size_t total = 0, done = 0;
  bool walked = false; /* total summed from the caller's vector */
  for (;;) {
    ssize_t r = putv_once(fd, cur, flags, is_sendmsg);
    if (r >= 0 && !walked) {
      for (size_t i = 0; i < msg->msg_iovlen; i++)
        total += msg->msg_iov[i].iov_len;
      walked = true;
    }
    if (r >= 0) {
      done += (size_t)r;
      if (done >= total || msg->msg_iovlen > IOF__IOV_COPY)
        return (ssize_t)done;
      /* Rebuild the rest from the original vector. */
      size_t cnt = iov_rest(msg->msg_iov, msg->msg_iovlen, done, v);
      m = *msg;
      m.msg_iov = v;
      m.msg_iovlen = cnt;
      m.msg_control = NULL;
      m.msg_controllen = 0;
      cur = &m;
      continue;
    }
    if (!iof__fd_again(&op)) {
      if (!done) return -1;
      errno = op.saved_errno;
      return (ssize_t)done;
    }
  }
}

ssize_t iof_compat_writev(int fd, const struct iovec *iov, int cnt) {
  if (cnt < 0 || cnt > IOV_MAX) return iof__libc.writev(fd, iov, cnt);
  struct msghdr m = {0};
  m.msg_iov = (struct iovec *)iov;
  m.msg_iovlen = (size_t)cnt;
  return putv_all(fd, &m, 0, false);
}

/* fds handed over in SCM_RIGHTS messages share their open file with the
 * receiver: another process, or this one under a new number. The receiver
 * must find them in the mode the sending program sees, not with the
 * O_NONBLOCK the runtime set for its fibers' waits (a program there would
 * get EAGAIN from a blocking read; compat, learning the new number, would
 * take the flag for the program's wish), so they go back to blocking mode
 * before the message leaves, as the fds of a program we start do. A fiber
 * of ours that keeps such an fd then blocks its thread on it (documented).
 * The caller's buffers are read through copies the kernel makes: one it
 * cannot read gets its EFAULT from sendmsg, never a fault here. */
/* Room for the most fds one message may carry (the kernel's SCM_MAX_FD)
 * and the sender's credentials. */
#define IOF__CMSG_COPY                                                         \
  (CMSG_SPACE(253 * sizeof(int)) + CMSG_SPACE(sizeof(struct ucred)))

static bool copy_in(void *to, const void *from, size_t len) {
  struct iovec local = {to, len};
  struct iovec remote = {(void *)from, len};
  int saved = errno;
  ssize_t r = process_vm_readv(getpid(), &local, 1, &remote, 1, 0);
  if (r < 0 && (errno == EPERM || errno == ENOSYS)) {
    /* A sandbox that refuses the call: ask the kernel page by page
     * whether the bytes are readable, then copy them. */
    r = iof__mem_check(from, len) == 0 ? (ssize_t)len : -1;
    if (r >= 0) memcpy(to, from, len);
  }
  errno = saved;
  return r == (ssize_t)len;
}

/* Out of line: its buffer stays off the stack of sends without control
 * data (fiber stacks are small). */
__attribute__((noinline)) static void
control_fds_blocking(const struct msghdr *msg) {
  union {
    char b[IOF__CMSG_COPY];
    struct cmsghdr align;
  } copy;
  /* Beyond the copy's size (other kinds of control data) the rest is left
   * as is. */
  size_t len =
      msg->msg_controllen < sizeof copy.b ? msg->msg_controllen : sizeof copy.b;
  if (!copy_in(copy.b, msg->msg_control, len)) return;
  struct msghdr m = {0};
  m.msg_control = copy.b;
  m.msg_controllen = len;
  for (struct cmsghdr *c = CMSG_FIRSTHDR(&m); c; c = CMSG_NXTHDR(&m, c)) {
    if (c->cmsg_len < CMSG_LEN(0) ||
        c->cmsg_len > len - (size_t)((char *)c - copy.b))
      break; /* malformed or cut by the copy: the kernel judges it */
    if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
    size_t n = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
    for (size_t i = 0; i < n; i++) {
      int pfd;
      memcpy(&pfd, CMSG_DATA(c) + i * sizeof pfd, sizeof pfd);
      iof__fd_user_blocking(pfd);
    }
  }
}

/* The caller's header without a fault: read in place when it lies in the
 * live part of the running fiber's stack (between this frame and the
 * fiber's record at the stack's top: where nearly every call keeps it),
 * else through a copy the kernel makes. False: unreadable (the send says
 * EFAULT). */
static bool read_header(const struct msghdr *msg, struct msghdr *out) {
  char here;
  const char *p = (const char *)msg;
  iof_fiber *f = iof_fiber_current();
  const char *top = (const char *)f;
  /* Only while this frame is on the fiber's own stack: not on a signal
   * stack, nor on a stack the program switched to itself. */
  if (top && &here > (const char *)f->base && p > &here && p < top &&
      (size_t)(top - p) >= sizeof *msg) {
    *out = *msg;
    return true;
  }
  return copy_in(out, msg, sizeof *out);
}

static void passed_fds_blocking(const struct msghdr *msg) {
  struct msghdr h;
  if (!msg || !read_header(msg, &h)) return;
  if (!h.msg_control || h.msg_controllen < sizeof(struct cmsghdr)) return;
  control_fds_blocking(&h);
}

/* Whether a send on fd may carry SCM_RIGHTS: only a Unix-domain socket's
 * can. Asked of the kernel once per fd compat knows and kept in its slot,
 * so that sends on TCP and UDP sockets never read the caller's header
 * (which may cost a copy by the kernel). When unsure: yes. */
static bool may_pass_fds(int fd) {
  return sock_kind(fd) & IOF__FD_UNIX;
}

ssize_t iof_compat_sendmsg(int fd, const struct msghdr *msg, int flags) {
  if (may_pass_fds(fd)) passed_fds_blocking(msg);
  return putv_all(fd, msg, flags, true);
}

int iof_compat_recvmmsg(int fd, struct mmsghdr *vec, unsigned int n, int flags,
                        struct timespec *timeout) {
  if (flags & IOF__RECV_NOWAIT)
    return iof__libc.recvmmsg(fd, vec, n, flags, timeout);
  IOF__BLOCKING(fd, EV_READ, iof__libc.recvmmsg(fd, vec, n, flags, timeout));
}

/* A stream socket may take part of a message: the caller sees msg_len
 * short and goes on from there, as after a blocking call a signal cut. */
static bool sent_short(const struct mmsghdr *m) {
  size_t total = 0;
  for (size_t i = 0; i < m->msg_hdr.msg_iovlen; i++)
    total += m->msg_hdr.msg_iov[i].iov_len;
  return m->msg_len < total;
}

int iof_compat_sendmmsg(int fd, struct mmsghdr *vec, unsigned int n,
                        int flags) {
  /* As sendmsg: the headers are read through copies, a batch at a time. */
  struct mmsghdr batch[16];
  bool pass = vec && may_pass_fds(fd);
  for (unsigned int i = 0; pass && i < n && i < UIO_MAXIOV;) {
    unsigned int k = n - i < 16 ? n - i : 16;
    if (!copy_in(batch, vec + i, k * sizeof *batch)) break;
    for (unsigned int j = 0; j < k; j++)
      if (batch[j].msg_hdr.msg_control && batch[j].msg_hdr.msg_controllen)
        passed_fds_blocking(&batch[j].msg_hdr);
    i += k;
  }
  iof__fd_op op;
  if ((flags & MSG_DONTWAIT) || !iof__fd_begin(&op, fd, EV_WRITE))
    return iof__libc.sendmmsg(fd, vec, n, flags);
  unsigned int done = 0;
  for (;;) {
    int r = iof__libc.sendmmsg(fd, vec + done, n - done, flags);
    if (r >= 0) {
      done += (unsigned)r;
      if (done >= n || r == 0 || sent_short(&vec[done - 1])) return (int)done;
      continue;
    }
    if (!iof__fd_again(&op)) {
      if (!done) return -1;
      errno = op.saved_errno;
      return (int)done;
    }
  }
}

ssize_t iof_compat_sendfile(int out_fd, int in_fd, off_t *offset,
                            size_t count) {
  iof__fd_op op;
  if (!iof__fd_begin(&op, out_fd, EV_WRITE))
    return iof__libc.sendfile(out_fd, in_fd, offset, count);
  size_t done = 0;
  for (;;) {
    ssize_t r = iof__libc.sendfile(out_fd, in_fd, offset, count - done);
    if (r > 0) {
      done += (size_t)r;
      if (done >= count) return (ssize_t)done;
      continue;
    }
    if (r == 0) return (ssize_t)done; /* the end of in_fd */
    if (!iof__fd_again(&op)) {
      if (!done) return -1;
      errno = op.saved_errno;
      return (ssize_t)done;
    }
  }
}

/* splice, tee and vmsplice block on a pipe whatever its O_NONBLOCK (only
 * SPLICE_F_NONBLOCK stops them), so a fiber passes that flag and waits
 * itself. splice and tee have two fds, either of which may be the one
 * that stops the call: a zero-timeout poll tells which, and the fiber
 * waits on it if the runtime made it non-blocking; on a side the user
 * keeps blocking (or made non-blocking) the plain call decides. */
typedef struct pair_call {
  bool tee;
  int in, out;
  loff_t *in_off, *out_off;
  size_t len;
} pair_call;

static ssize_t pair_do(const pair_call *c, unsigned int flags) {
  return c->tee ? iof__libc.tee(c->in, c->out, c->len, flags)
                : iof__libc.splice(c->in, c->in_off, c->out, c->out_off, c->len,
                                   flags);
}

static ssize_t pair_blocking(const pair_call *c, unsigned int flags) {
  iof__fd_op rop, wop;
  if (flags & SPLICE_F_NONBLOCK) return pair_do(c, flags);
  bool r_ok = iof__fd_begin(&rop, c->in, EV_READ);
  bool w_ok = iof__fd_begin(&wop, c->out, EV_WRITE);
  if (!r_ok && !w_ok) return pair_do(c, flags);
  for (;;) {
    ssize_t r = pair_do(c, flags | SPLICE_F_NONBLOCK);
    if (r >= 0 || errno != EAGAIN) return r;
    struct pollfd p[2] = {{c->in, POLLIN, 0}, {c->out, POLLOUT, 0}};
    (void)iof__libc.poll(p, 2, 0);
    bool in_ready = p[0].revents & (POLLIN | POLLHUP | POLLERR);
    iof__fd_op *op = !in_ready ? (r_ok ? &rop : NULL) : (w_ok ? &wop : NULL);
    if (!op) return pair_do(c, flags);
    errno = EAGAIN;
    if (!iof__fd_again(op)) return -1;
  }
}

ssize_t iof_compat_splice(int in_fd, loff_t *in_off, int out_fd,
                          loff_t *out_off, size_t len, unsigned int flags) {
  pair_call c = {false, in_fd, out_fd, in_off, out_off, len};
  return pair_blocking(&c, flags);
}

ssize_t iof_compat_tee(int in_fd, int out_fd, size_t len, unsigned int flags) {
  pair_call c = {true, in_fd, out_fd, NULL, NULL, len};
  return pair_blocking(&c, flags);
}

/* vmsplice moves user memory into a pipe's write end or out of its read
 * end: the fd's access mode says which way it waits. */
ssize_t iof_compat_vmsplice(int fd, const struct iovec *iov, size_t cnt,
                            unsigned int flags) {
  iof__fd_op op;
  int fl = flags & SPLICE_F_NONBLOCK ? -1 : iof__libc.fcntl(fd, F_GETFL);
  int ev = fl >= 0 && (fl & O_ACCMODE) == O_RDONLY ? EV_READ : EV_WRITE;
  if (fl < 0 || !iof__fd_begin(&op, fd, ev))
    return iof__libc.vmsplice(fd, iov, cnt, flags);
  for (;;) {
    ssize_t r = iof__libc.vmsplice(fd, iov, cnt, flags | SPLICE_F_NONBLOCK);
    if (r >= 0 || !iof__fd_again(&op)) return r;
  }
}

/* ---- fd bookkeeping ---------------------------------------------------- */

/* The runtime's own descriptors (libev's, io/runtime_fds.c) are not the
 * program's to close or replace (a daemon's loop closing every fd above
 * 2): as if not open. */
static bool runtime_fd(int fd) {
  if (!iof__rt_fd_owned(fd)) return false;
  errno = EBADF;
  return true;
}

/* A lingering socket's close, run on a resolver thread while the fiber
 * waits: the kernel's close waits there until the peer acknowledged
 * everything or the linger time ran out (O_NONBLOCK changes nothing),
 * which on the fiber's own thread held every fiber of it that long. */
typedef struct close_job {
  int fd, r, err;
  bool ran;
} close_job;

static void close_run(void *p) {
  close_job *j = p;
  j->r = iof__libc.close(j->fd);
  j->err = errno;
  j->ran = true;
}

/* The fiber left (stopped) or no thread took the job: the close must still
 * happen, here, without the wait: linger off, the kernel finishes the
 * close in the background, as when the linger time runs out. */
static void close_release(void *p) {
  close_job *j = p;
  if (!j->ran) {
    struct linger off = {0, 0};
    (void)iof__libc.setsockopt(j->fd, SOL_SOCKET, SO_LINGER, &off, sizeof off);
    (void)iof__libc.close(j->fd);
  }
  free(j);
}

static int close_lingering(iof_fiber *f, int fd) {
  close_job *j = calloc(1, sizeof *j);
  if (!j) return iof__libc.close(fd);
  j->fd = fd;
  int saved = errno;
  int r = iof__resolver_run(iof__compat_io(f), close_run, j, close_release);
  /* On failure the release closed it (or will): the number is gone
   * either way, so the close succeeded as far as the caller can tell. */
  if (r < 0) {
    errno = saved;
    return 0;
  }
  r = j->r;
  errno = r < 0 ? j->err : saved;
  free(j);
  return r;
}

int iof_compat_close(int fd) {
  if (runtime_fd(fd)) return -1;
  iof__fd_slot *s = iof__fd_slot_peek(fd);
  bool lingers = s && atomic_load_explicit(&s->linger, memory_order_relaxed);
  iof__fd_reset(fd, 0);
  iof_fiber *f = lingers ? iof__compat_fiber() : NULL;
  if (f) return close_lingering(f, fd);
  return iof__libc.close(fd);
}

/* A new copy of from: its record, and in a child forked by a fiber, a
 * standard stream's blocking mode (dup2, or close + dup as GNU tar does). */
static void copied(int from, int to) {
  if (to < 0) return;
  inherit(from, to);
  iof__compat_child_std_blocking(to);
}

int iof_compat_dup(int fd) {
  int r = iof__libc.dup(fd);
  copied(fd, r);
  return r;
}

/* Whether dup2/dup3 onto fd2 can succeed: only then may fd2's record be
 * reset (a failed call leaves fd2 open, its waiters must keep waiting). */
static bool dup_ok(int fd, int fd2) {
  if (fd2 < 0 || iof__libc.fcntl(fd, F_GETFD) < 0) {
    errno = EBADF;
    return false;
  }
  /* ev_guard's reserved pair gives way (the runtime takes another). */
  if (iof__rt_fd_owned(fd2) && !iof__rt_fd_release(fd2)) {
    errno = EBADF;
    return false;
  }
  return true;
}

/* In a child forked by a fiber, a standard stream goes back to blocking
 * mode when only the runtime made it non-blocking: the child usually execs
 * a program that reads its stdin plainly (a CGI's pipe dup'ed onto 0). */
void iof__compat_child_std_blocking(int fd) {
  if (iof__compat_forked && fd >= 0 && fd <= 2) iof__fd_user_blocking(fd);
}

void iof__fd_user_blocking(int fd) {
  iof__fd_slot *s = iof__fd_slot_peek(fd);
  unsigned st = s ? atomic_load(&s->flags) : 0;
  if (!(st & IOF__FD_RT_NB) || (st & IOF__FD_USER_NB)) return;
  int k = iof__libc.fcntl(fd, F_GETFL);
  if (k >= 0 && (k & O_NONBLOCK))
    (void)iof__libc.fcntl(fd, F_SETFL, k & ~O_NONBLOCK);
}

/* dup2/dup3 over a lingering socket close it: the kernel then waits as in
 * its close, on the caller's thread. A fiber first takes another number
 * for that socket (the spare), so the dup's own close is not the last
 * one, then closes the spare as close does, waiting as a fiber. -1: no
 * spare needed (or none to be had: the dup waits in the kernel). */
static int linger_spare(int fd2) {
  iof__fd_slot *s = iof__fd_slot_peek(fd2);
  if (!s || !atomic_load_explicit(&s->linger, memory_order_relaxed) ||
      !iof__compat_fiber())
    return -1;
  int saved = errno;
  int spare = iof__libc.fcntl(fd2, F_DUPFD_CLOEXEC, 0);
  errno = saved;
  return spare;
}

/* After the dup: the spare's close, lingering when the dup took fd2's
 * number (its file is the old socket), plain when it failed (fd2 still
 * holds the socket). errno is the dup's. */
static void linger_spare_close(int spare, int r) {
  if (spare < 0) return;
  int saved = errno;
  iof_fiber *f = iof__compat_fiber();
  if (r >= 0 && f)
    (void)close_lingering(f, spare);
  else
    (void)iof__libc.close(spare);
  errno = saved;
}

int iof_compat_dup2(int fd, int fd2) {
  if (fd == fd2) return iof__libc.dup2(fd, fd2);
  if (!dup_ok(fd, fd2)) return -1;
  int spare = linger_spare(fd2);
  iof__fd_reset(fd2, 0); /* its waiters see EBADF, never the new file */
  int r = iof__libc.dup2(fd, fd2);
  copied(fd, r);
  linger_spare_close(spare, r);
  return r;
}

int iof_compat_dup3(int fd, int fd2, int flags) {
  if (fd == fd2 || (flags & ~O_CLOEXEC)) {
    errno = EINVAL;
    return -1;
  }
  if (!dup_ok(fd, fd2)) return -1;
  int spare = linger_spare(fd2);
  iof__fd_reset(fd2, 0);
  int r = iof__libc.dup3(fd, fd2, flags);
  copied(fd, r);
  linger_spare_close(spare, r);
  return r;
}

/* The user's wish for O_NONBLOCK on fd, from F_SETFL or FIONBIO. The
 * real flag stays set while the runtime needs it. Returns the call's. */
static int set_user_nb(int fd, bool on,
                       int (*apply)(int fd, bool real_on, void *arg),
                       void *arg) {
  iof__fd_slot *s = iof__fd_slot_peek(fd);
  unsigned st = s ? atomic_load(&s->flags) : 0;
  bool runtime_needs = (st & IOF__FD_RT_NB) && !(st & IOF__FD_USER_NB);
  if (!on && runtime_needs) return apply(fd, true, arg);
  int r = apply(fd, on, arg);
  if (r < 0 || !s || !st) return r;
  if (on)
    atomic_store(&s->flags, IOF__FD_KNOWN | IOF__FD_USER_NB);
  else if (st & IOF__FD_USER_NB)
    atomic_store(&s->flags, 0u); /* blocking again: learned afresh */
  return r;
}

static int apply_setfl(int fd, bool real_on, void *arg) {
  int fl = *(int *)arg;
  return iof__libc.fcntl(fd, F_SETFL,
                         real_on ? fl | O_NONBLOCK : fl & ~O_NONBLOCK);
}

static int apply_fionbio(int fd, bool real_on, void *arg) {
  (void)arg;
  int v = real_on;
  return iof__libc.ioctl(fd, FIONBIO, &v);
}

int iof_compat_fcntl(int fd, int cmd, ...) {
  va_list ap;
  va_start(ap, cmd);
  int r;
  switch (cmd) {
  case F_GETFL: {
    r = iof__libc.fcntl(fd, F_GETFL);
    iof__fd_slot *s = r >= 0 ? iof__fd_slot_peek(fd) : NULL;
    unsigned st = s ? atomic_load(&s->flags) : 0;
    if ((st & IOF__FD_RT_NB) && !(st & IOF__FD_USER_NB)) r &= ~O_NONBLOCK;
    break;
  }
  case F_SETFL: {
    int fl = va_arg(ap, int);
    r = set_user_nb(fd, fl & O_NONBLOCK, apply_setfl, &fl);
    break;
  }
  case F_DUPFD:
  case F_DUPFD_CLOEXEC:
    r = iof__libc.fcntl(fd, cmd, va_arg(ap, int));
    copied(fd, r);
    break;
  case F_GETFD:
  case F_GETOWN:
  case F_GETSIG:
  case F_GETLEASE:
  case F_GETPIPE_SZ:
#ifdef F_GET_SEALS
  case F_GET_SEALS:
#endif
    r = iof__libc.fcntl(fd, cmd);
    break;
  case F_SETFD:
  case F_SETOWN:
  case F_SETSIG:
  case F_SETLEASE:
  case F_NOTIFY:
  case F_SETPIPE_SZ:
#ifdef F_ADD_SEALS
  case F_ADD_SEALS:
#endif
    r = iof__libc.fcntl(fd, cmd, va_arg(ap, int));
    break;
  case F_SETLKW:
  case F_OFD_SETLKW:
#if defined(F_SETLKW64) && F_SETLKW64 != F_SETLKW
  case F_SETLKW64:
#endif
    r = iof__compat_setlkw(fd, cmd, va_arg(ap, void *));
    break;
  default: /* the rest take a pointer (locks, owners, hints) */
    r = iof__libc.fcntl(fd, cmd, va_arg(ap, void *));
    break;
  }
  va_end(ap);
  return r;
}

int iof_compat_ioctl(int fd, unsigned long req, ...) {
  va_list ap;
  va_start(ap, req);
  void *arg = va_arg(ap, void *);
  va_end(ap);
  int r = iof__libc.ioctl(fd, req, arg);
  /* The kernel read the flag (a bad pointer or fd failed above): now the
   * record, and the real mode the runtime needs. */
  if (r == 0 && req == FIONBIO)
    return set_user_nb(fd, *(int *)arg != 0, apply_fionbio, NULL);
  return r;
}

int iof_compat_setsockopt(int fd, int level, int name, const void *val,
                          socklen_t len) {
  int r = iof__libc.setsockopt(fd, level, name, val, len);
  if (r == 0 && level == SOL_SOCKET && name == SO_LINGER &&
      len >= sizeof(struct linger)) {
    const struct linger *lg = val;
    iof__fd_slot *s = iof__fd_slot_get(fd);
    if (s) atomic_store(&s->linger, lg->l_onoff && lg->l_linger > 0);
  }
  if (r == 0 && level == SOL_SOCKET &&
      (name == SO_RCVTIMEO || name == SO_SNDTIMEO) &&
      len >= sizeof(struct timeval)) {
    iof__fd_slot *s = iof__fd_slot_peek(fd);
    if (s) {
      const struct timeval *tv = val;
      /* The kernel accepted it: tv_usec is in range; tv_sec may be
       * negative (the kernel's "no timeout") or huge: capped at 146 years
       * so that the waits can add it to the clock. */
      int64_t ns = tv->tv_sec < 0 ? 0
                   : tv->tv_sec >= INT64_MAX / 2 / 1000000000
                       ? INT64_MAX / 2
                       : (int64_t)tv->tv_sec * 1000000000 + tv->tv_usec * 1000;
      atomic_store(name == SO_RCVTIMEO ? &s->rcv_ns : &s->snd_ns, ns);
    }
  }
  return r;
}

int iof_compat_getsockopt(int fd, int level, int name, void *val,
                          socklen_t *len) {
  return iof__libc.getsockopt(fd, level, name, val, len);
}

int iof_compat_shutdown(int fd, int how) {
  return iof__libc.shutdown(fd, how);
}

int iof_compat_listen(int fd, int backlog) {
  if (backlog < IOF_COMPAT_LISTEN_MIN && iof__compat_fiber())
    backlog = IOF_COMPAT_LISTEN_MIN;
  return iof__libc.listen(fd, backlog);
}
