/* UDP sockets: one datagram per call. */
#include <iofiber/resolver.h>

#include "io/socket_internal.h"

#include <errno.h>
#include <netdb.h>
#include <string.h>
#include <unistd.h>

int iof_udp_open(iof_io_context *io, int family, iof_socket **out) {
  if (!io || !out || (family != AF_INET && family != AF_INET6)) return -EINVAL;
  int fd = socket(family, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return -errno;
  return iof__socket_new(io, fd, family, SOCK_DGRAM, false, out);
}

int iof_udp_bind(iof_io_context *io, const char *host, const char *port,
                 iof_socket **out) {
  if (!io || !port || !out || iof__port_check(port) < 0) return -EINVAL;
  struct addrinfo hints, *res;
  memset(&hints, 0, sizeof hints);
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_DGRAM;
  hints.ai_flags = AI_PASSIVE;
  if (host && !*host) host = NULL;
  iof_fiber *self = iof_fiber_current();
  int r;
  if (self && self->env) {
    r = iof_resolve(io, host, port, &hints, &res);
  } else {
    int gai = getaddrinfo(host, port, &hints, &res);
    r = gai ? iof__gai_errno(gai) : 0;
  }
  if (r < 0) return r;
  r = -EADDRNOTAVAIL;
  for (struct addrinfo *a = res; a && r < 0; a = a->ai_next) {
    int fd = socket(a->ai_family, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) {
      r = -errno;
      continue;
    }
    if (bind(fd, a->ai_addr, a->ai_addrlen) < 0) {
      r = -errno;
      close(fd);
      continue;
    }
    r = iof__socket_new(io, fd, a->ai_family, SOCK_DGRAM, false, out);
  }
  freeaddrinfo(res);
  return r;
}

static int dgram_check(iof_socket *s, const void *buf, size_t len) {
  int r = iof__socket_check(s);
  if (r < 0) return r;
  if (s->type != SOCK_DGRAM) return -EINVAL;
  if (!buf && len) return -EFAULT;
  iof_fiber *self = iof_fiber_current();
  if (!self || !self->env) return -EPERM;
  if (iof_stop_requested(self->env->stop_token)) return -ECANCELED;
  return 0;
}

ssize_t iof_sendto(iof_socket *s, const void *buf, size_t len,
                   const struct sockaddr *to, socklen_t to_len) {
  int r = dgram_check(s, buf, len);
  if (r < 0) return r;
  for (;;) {
    ssize_t n = sendto(s->fd, buf, len, MSG_NOSIGNAL, to, to_len);
    if (n >= 0) return n;
    if (errno == EINTR) continue;
    if (errno != EAGAIN && errno != EWOULDBLOCK) return -errno;
    r = iof__socket_wait(s, EV_WRITE);
    if (r < 0) return r;
    if (s->closed) return -EBADF;
  }
}

ssize_t iof_recvfrom(iof_socket *s, void *buf, size_t len,
                     struct sockaddr *from, socklen_t *from_len) {
  int r = dgram_check(s, buf, len);
  if (r < 0) return r;
  if (from && !from_len) return -EINVAL;
  for (;;) {
    /* Datagrams give no hint of more to come: try first after a wait or
     * a success, wait first after EAGAIN. */
    if (s->read_first) {
      ssize_t n = recvfrom(s->fd, buf, len, 0, from, from ? from_len : NULL);
      if (n >= 0) return n;
      if (errno == EINTR) continue;
      if (errno != EAGAIN && errno != EWOULDBLOCK) return -errno;
    }
    s->read_first = false;
    r = iof__socket_wait(s, EV_READ);
    if (r < 0) return r;
    if (s->closed) return -EBADF;
    s->read_first = true;
  }
}
