/* Streams: the vtable dispatch, helpers written once for every stream, the
 * socket adapter and the pipe pair. */
#include <iofiber/stream.h>

#include "io/socket_internal.h"

#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* A vtable entry left NULL (a read-only stream, say) is refused, never
 * called. */
ssize_t iof_stream_read_some(iof_stream *s, void *buf, size_t len) {
  if (!s || !s->vtbl) return -EINVAL;
  if (!s->vtbl->read_some) return -ENOTSUP;
  ssize_t n = s->vtbl->read_some(s, buf, len);
  /* A count past len would make every caller's bookkeeping overrun. */
  return n > (ssize_t)len && len <= SSIZE_MAX ? -EPROTO : n;
}

ssize_t iof_stream_write_some(iof_stream *s, const void *buf, size_t len) {
  if (!s || !s->vtbl) return -EINVAL;
  if (!s->vtbl->write_some) return -ENOTSUP;
  ssize_t n = s->vtbl->write_some(s, buf, len);
  return n > (ssize_t)len && len <= SSIZE_MAX ? -EPROTO : n;
}

int iof_stream_close(iof_stream *s) {
  if (!s || !s->vtbl) return -EINVAL;
  if (!(s->vtbl->close)) return -ENOTSUP;
  return (s->vtbl->close)(s); /* parenthesized: close may be a macro */
}

int iof_stream_set_deadline(iof_stream *s, int which, int64_t deadline_ns) {
  if (!s || !s->vtbl) return -EINVAL;
  if (!s->vtbl->set_limit) return -ENOTSUP;
  return s->vtbl->set_limit(s, which, false, deadline_ns);
}

int iof_stream_set_timeout(iof_stream *s, int which, int64_t ns) {
  if (!s || !s->vtbl) return -EINVAL;
  if (!s->vtbl->set_limit) return -ENOTSUP;
  return s->vtbl->set_limit(s, which, true, ns);
}

int iof_stream_shutdown_write(iof_stream *s) {
  if (!s || !s->vtbl) return -EINVAL;
  if (!s->vtbl->shutdown_write) return -ENOTSUP;
  return s->vtbl->shutdown_write(s);
}

ssize_t iof_stream_read(iof_stream *s, void *buf, size_t len) {
  if (!s || (!buf && len)) return -EINVAL;
  size_t got = 0;
  while (got < len) {
    ssize_t n = iof_stream_read_some(s, (char *)buf + got, len - got);
    if (n < 0) return n;
    if (n == 0) break;
    got += (size_t)n;
  }
  return (ssize_t)got;
}

ssize_t iof_stream_write(iof_stream *s, const void *buf, size_t len) {
  if (!s || (!buf && len)) return -EINVAL;
  size_t put = 0;
  while (put < len) {
    ssize_t n = iof_stream_write_some(s, (const char *)buf + put, len - put);
    if (n < 0) return n;
    if (n == 0) return -EPIPE;
    put += (size_t)n;
  }
  return (ssize_t)put;
}

static ssize_t find(const char *buf, size_t n, const char *d, size_t dl,
                    size_t from) {
  if (n < dl) return -1;
  for (size_t i = from; i + dl <= n; i++)
    if (buf[i] == d[0] && memcmp(buf + i, d, dl) == 0) return (ssize_t)i;
  return -1;
}

ssize_t iof_stream_read_until(iof_stream *s, char *buf, size_t cap,
                              size_t *filled, const char *delim,
                              size_t delim_len) {
  /* A delimiter longer than the buffer could never be found. */
  if (!s || !buf || !filled || !delim || !delim_len || *filled > cap ||
      delim_len > cap)
    return -EINVAL;
  size_t scanned = 0; /* where a delimiter cannot start before */
  for (;;) {
    ssize_t at = find(buf, *filled, delim, delim_len, scanned);
    if (at >= 0) return at + (ssize_t)delim_len;
    if (*filled >= delim_len) scanned = *filled - delim_len + 1;
    if (*filled == cap) return -ENOBUFS;
    ssize_t n = iof_stream_read_some(s, buf + *filled, cap - *filled);
    if (n <= 0) return n;
    *filled += (size_t)n;
  }
}

static ssize_t sock_read(iof_stream *s, void *buf, size_t len) {
  return iof_read_some(((iof_socket_stream *)s)->sock, buf, len);
}

static ssize_t sock_write(iof_stream *s, const void *buf, size_t len) {
  return iof_write_some(((iof_socket_stream *)s)->sock, buf, len);
}

static int sock_close(iof_stream *s) {
  return iof_socket_close(((iof_socket_stream *)s)->sock);
}

static int sock_limit(iof_stream *s, int which, bool relative, int64_t ns) {
  iof_socket *sock = ((iof_socket_stream *)s)->sock;
  return relative ? iof_socket_set_timeout(sock, which, ns)
                  : iof_socket_set_deadline(sock, which, ns);
}

static int sock_shutdown_write(iof_stream *s) {
  return iof_socket_shutdown(((iof_socket_stream *)s)->sock, SHUT_WR);
}

static const iof_stream_vtbl socket_stream_vtbl = {
    sock_read, sock_write, sock_close, sock_limit, sock_shutdown_write};

iof_stream *iof_socket_stream_init(iof_socket_stream *ss, iof_socket *sock) {
  if (!ss || !sock) return NULL;
  ss->base.vtbl = &socket_stream_vtbl;
  ss->sock = sock;
  return &ss->base;
}

typedef struct pipe_end {
  iof_socket_stream ss;
} pipe_end;

/* The socket stream's functions under a vtable of their own, so that
 * iof_stream_pipe_free can tell a pipe end (heap) from a caller's socket
 * stream (which it must not free). */
static const iof_stream_vtbl pipe_stream_vtbl = {
    sock_read, sock_write, sock_close, sock_limit, sock_shutdown_write};

int iof_stream_pipe(iof_io_context *io, iof_stream **a, iof_stream **b) {
  if (!io || !a || !b) return -EINVAL;
  int fds[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, fds) <
      0)
    return -errno;
  pipe_end *ea = calloc(1, sizeof *ea), *eb = calloc(1, sizeof *eb);
  iof_socket *sa = NULL, *sb = NULL;
  int r = (!ea || !eb) ? -ENOMEM : 0;
  if (r == 0) {
    r = iof__socket_new(io, fds[0], AF_UNIX, SOCK_STREAM, false, &sa);
    fds[0] = -1;
  }
  if (r == 0) {
    r = iof__socket_new(io, fds[1], AF_UNIX, SOCK_STREAM, false, &sb);
    fds[1] = -1;
  }
  if (r < 0) {
    for (int i = 0; i < 2; i++)
      if (fds[i] >= 0) close(fds[i]);
    if (sa) iof__socket_discard(sa); /* a free could be refused: -EPERM */
    free(ea);
    free(eb);
    return r;
  }
  *a = iof_socket_stream_init(&ea->ss, sa);
  *b = iof_socket_stream_init(&eb->ss, sb);
  ea->ss.base.vtbl = &pipe_stream_vtbl;
  eb->ss.base.vtbl = &pipe_stream_vtbl;
  return 0;
}

int iof_stream_pipe_free(iof_stream *end) {
  if (!end || end->vtbl != &pipe_stream_vtbl) return -EINVAL;
  pipe_end *e = (pipe_end *)end;
  int r = iof_socket_free(e->ss.sock);
  if (r == 0) free(e); /* refused (-EPERM): the end stays whole */
  return r;
}
