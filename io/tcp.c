/* TCP and Unix stream sockets: listen, accept, connect. */
#include <iofiber/resolver.h>

#include <iofiber/error.h>

#include "io/socket_internal.h"

#include <errno.h>
#include <netdb.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

static int listen_fd(iof_io_context *io, int family, const struct sockaddr *sa,
                     socklen_t len, int backlog, int flags, iof_socket **out) {
  int fd = socket(family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return -errno;
  int one = 1;
  if (family != AF_UNIX) {
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if ((flags & IOF_LISTEN_REUSEPORT) &&
        setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof one) < 0) {
      int e = errno;
      close(fd);
      return -e;
    }
    if (family == AF_INET6) {
      int v6 = (flags & IOF_LISTEN_V6ONLY) != 0;
      setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &v6, sizeof v6);
    }
  }
  if (bind(fd, sa, len) < 0 ||
      listen(fd, backlog > 0 ? backlog : SOMAXCONN) < 0) {
    int e = errno;
    close(fd);
    return -e;
  }
  return iof__socket_new(io, fd, family, SOCK_STREAM, true, out);
}

/* Unknown flag bits are refused: they may mean something in a later
 * version. */
#define IOF__LISTEN_FLAGS (IOF_LISTEN_REUSEPORT | IOF_LISTEN_V6ONLY)

int iof_tcp_listen_addr(iof_io_context *io, const struct sockaddr *sa,
                        socklen_t len, int backlog, int flags,
                        iof_socket **out) {
  if (!io || !sa || !out || (flags & ~IOF__LISTEN_FLAGS) ||
      len < (socklen_t)sizeof(sa_family_t) ||
      (sa->sa_family != AF_INET && sa->sa_family != AF_INET6))
    return -EINVAL;
  return listen_fd(io, sa->sa_family, sa, len, backlog, flags, out);
}

/* getaddrinfo on the resolver thread inside a fiber; directly elsewhere
 * (setting up listeners before the loop runs is the common case). */
static int lookup(iof_io_context *io, const char *host, const char *port,
                  int socktype, int passive, struct addrinfo **res,
                  int64_t deadline_ns) {
  struct addrinfo hints;
  memset(&hints, 0, sizeof hints);
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = socktype;
  hints.ai_flags = passive ? AI_PASSIVE : AI_ADDRCONFIG;
  if (host && !*host) host = NULL;
  if (iof__port_check(port) < 0) return -EINVAL;
  iof_fiber *self = iof_fiber_current();
  if (self && self->env)
    return iof__resolve_until(io, host, port, &hints, res, deadline_ns);
  int gai = getaddrinfo(host, port, &hints, res);
  return gai == 0 ? 0 : iof_gai_error(gai, errno);
}

int iof_tcp_listen(iof_io_context *io, const char *host, const char *port,
                   int backlog, int flags, iof_socket **out) {
  if (!io || !port || !out || (flags & ~IOF__LISTEN_FLAGS)) return -EINVAL;
  struct addrinfo *res;
  int r = lookup(io, host, port, SOCK_STREAM, 1, &res, 0);
  if (r < 0) return r;
  r = -EADDRNOTAVAIL;
  /* Prefer IPv4 for a wildcard listen without V6ONLY: it is what clients
   * of "localhost"/127.0.0.1 reach. */
  for (int pass = 0; pass < 2 && r < 0; pass++)
    for (struct addrinfo *a = res; a && r < 0; a = a->ai_next) {
      if ((pass == 0) != (a->ai_family == AF_INET)) continue;
      r = listen_fd(io, a->ai_family, a->ai_addr, a->ai_addrlen, backlog, flags,
                    out);
    }
  freeaddrinfo(res);
  return r;
}

int iof_accept(iof_socket *l, iof_socket **out, struct sockaddr *peer,
               socklen_t *peer_len) {
  int r = iof__socket_check(l);
  if (r < 0) return r;
  if (!l->listener || !out || (peer && !peer_len)) return -EINVAL;
  iof_fiber *self = iof_fiber_current();
  if (!self || !self->env) return -EPERM;
  if (iof_stop_requested(self->env->stop_token)) return -ECANCELED;
  for (;;) {
    if (l->read_first) {
      int fd = accept4(l->fd, peer, peer ? peer_len : NULL,
                       SOCK_NONBLOCK | SOCK_CLOEXEC);
      if (fd >= 0)
        return iof__socket_new(l->io, fd, l->family, SOCK_STREAM, false, out);
      if (errno == EINTR || errno == ECONNABORTED) continue;
      if (errno != EAGAIN && errno != EWOULDBLOCK) return -errno;
    }
    l->read_first = false;
    r = iof__socket_wait(l, EV_READ);
    if (r < 0) return r;
    if (l->closed) return -EBADF;
    l->read_first = true;
  }
}

static int connect_fd(iof_io_context *io, const struct sockaddr *sa,
                      socklen_t len, int64_t deadline_ns, iof_socket **out) {
  iof_fiber *self = iof_fiber_current();
  if (!self || !self->env) return -EPERM;
  if (iof_stop_requested(self->env->stop_token)) return -ECANCELED;
  int fd = socket(sa->sa_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return -errno;
  iof_socket *s;
  int r = iof__socket_new(io, fd, sa->sa_family, SOCK_STREAM, false, &s);
  if (r < 0) return r;
  if (connect(fd, sa, len) < 0) {
    if (errno != EINPROGRESS && errno != EAGAIN && errno != EINTR) {
      r = -errno;
      iof_socket_free(s);
      return r;
    }
    /* Nobody else knows s yet: no hop needed to set its limit. */
    atomic_store_explicit(&s->deadline[1], deadline_ns, memory_order_relaxed);
    r = iof__socket_wait(s, EV_WRITE);
    atomic_store_explicit(&s->deadline[1], 0, memory_order_relaxed);
    int err = 0;
    socklen_t el = sizeof err;
    if (r == 0 && getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &el) < 0)
      err = errno;
    if (r == 0 && err) r = -err;
    if (r < 0) {
      iof_socket_free(s);
      return r;
    }
  }
  *out = s;
  return 0;
}

int iof_tcp_connect_addr(iof_io_context *io, const struct sockaddr *sa,
                         socklen_t len, iof_socket **out) {
  if (!io || !sa || !out || len < (socklen_t)sizeof(sa_family_t) ||
      (sa->sa_family != AF_INET && sa->sa_family != AF_INET6))
    return -EINVAL;
  return connect_fd(io, sa, len, 0, out);
}

int iof_tcp_connect_addr_deadline(iof_io_context *io, const struct sockaddr *sa,
                                  socklen_t len, int64_t deadline_ns,
                                  iof_socket **out) {
  if (!io || !sa || !out || len < (socklen_t)sizeof(sa_family_t) ||
      (sa->sa_family != AF_INET && sa->sa_family != AF_INET6))
    return -EINVAL;
  return connect_fd(io, sa, len, deadline_ns > 0 ? deadline_ns : 0, out);
}

int iof_tcp_connect_deadline(iof_io_context *io, const char *host,
                             const char *port, int64_t deadline_ns,
                             iof_socket **out) {
  if (!io || !host || !port || !out) return -EINVAL;
  iof_fiber *self = iof_fiber_current();
  if (!self || !self->env) return -EPERM;
  if (deadline_ns < 0) deadline_ns = 0;
  struct addrinfo *res;
  int r = lookup(io, host, port, SOCK_STREAM, 0, &res, deadline_ns);
  if (r < 0) return r;
  r = -EHOSTUNREACH;
  for (struct addrinfo *a = res; a; a = a->ai_next) {
    r = connect_fd(io, a->ai_addr, a->ai_addrlen, deadline_ns, out);
    if (r == 0 || r == -ECANCELED || r == -ETIMEDOUT) break;
  }
  freeaddrinfo(res);
  return r;
}

int iof_tcp_connect(iof_io_context *io, const char *host, const char *port,
                    iof_socket **out) {
  return iof_tcp_connect_deadline(io, host, port, 0, out);
}

static int unix_addr(const char *path, struct sockaddr_un *sun) {
  if (!path || !*path) return -EINVAL;
  /* Bounded: a path that does not fit is refused without reading it all. */
  size_t n = strnlen(path, sizeof sun->sun_path);
  if (n >= sizeof sun->sun_path) return -ENAMETOOLONG;
  memset(sun, 0, sizeof *sun);
  sun->sun_family = AF_UNIX;
  memcpy(sun->sun_path, path, n);
  return 0;
}

int iof_unix_listen(iof_io_context *io, const char *path, int backlog,
                    iof_socket **out) {
  struct sockaddr_un sun;
  if (!io || !out) return -EINVAL;
  int r = unix_addr(path, &sun);
  if (r < 0) return r;
  struct stat st;
  if (stat(path, &st) == 0 && S_ISSOCK(st.st_mode)) unlink(path);
  return listen_fd(io, AF_UNIX, (struct sockaddr *)&sun, sizeof sun, backlog, 0,
                   out);
}

int iof_unix_connect(iof_io_context *io, const char *path, iof_socket **out) {
  struct sockaddr_un sun;
  if (!io || !out) return -EINVAL;
  int r = unix_addr(path, &sun);
  if (r < 0) return r;
  return connect_fd(io, (struct sockaddr *)&sun, sizeof sun, 0, out);
}
