/* The socket object, shared by the socket files of io/. Not installed. */
#ifndef IOF_SOCKET_INTERNAL_H
#define IOF_SOCKET_INTERNAL_H

#include <iofiber/socket.h>

#include "io/io_internal.h"

struct addrinfo;

struct iof_socket {
  iof_io_context *io;
  int fd;
  int family;
  int type;
  bool listener;
  bool is_socket; /* an adopted pipe or tty uses read/write, not send */
  bool closed;
  bool no_bytes; /* closed or a listener: byte calls refuse (one test) */
  /* What the socket last showed: true while a read may find data without
   * waiting (fresh socket, or the last read filled its buffer). */
  bool read_first;
  bool speculative; /* read_first came from a full read, not readiness */
  bool spec_missed; /* the last speculative read found nothing */
  ev_io w;          /* one watcher for the socket's life; only its mask moves */
  int interest;     /* EV_READ/EV_WRITE currently in w (0: stopped) */
  iof__waitq rd;    /* waiting readers, FIFO (io's thread only) */
  iof__waitq wr;    /* waiting writers, FIFO */
  /* Limits of a wait, per direction ([0] read/accept, [1] write/connect):
   * an absolute monotonic deadline and a per-wait timeout (0: none). Set
   * on io's thread, read by waiting fibers on any thread; `limit_gen`
   * counts changes, so a wait armed with stale limits retries. */
  _Atomic int64_t deadline[2];
  _Atomic int64_t timeout[2];
  atomic_uint limit_gen;
  /* AWAY_ONE per wait away from home (a fiber of another thread, or one
   * with limits) plus AWAY_FREED once freed: such a wait may still be on
   * its way to io's thread, so the last one out frees (socket.c). */
  atomic_uint away;
  iof_socket *next, *prev; /* io's list */
};

/* Makes a socket object for fd (made non-blocking and close-on-exec). On
 * failure fd is closed. 0 or -errno. */
IOF_HIDDEN int iof__socket_new(iof_io_context *io, int fd, int family, int type,
                               bool listener, iof_socket **out);

/* Closes and frees a socket iof__socket_new just made, which nothing has
 * used or watched yet: from any thread, even while its io_context runs
 * (where iof_socket_free says -EPERM). */
IOF_HIDDEN void iof__socket_discard(iof_socket *s);

/* Waits until s is readable (EV_READ) or writable (EV_WRITE), within the
 * socket's deadline and timeout for that direction (-ETIMEDOUT). */
IOF_HIDDEN int iof__socket_wait(iof_socket *s, int dir);

/* As iof__resolve, bounded by an absolute deadline (0: none). */
IOF_HIDDEN int iof__resolve_until(iof_io_context *io, const char *host,
                                  const char *service,
                                  const struct addrinfo *hints,
                                  struct addrinfo **res, int64_t deadline_ns);

/* The usual checks of a call on s: -EINVAL (NULL), -EBADF (closed). */
IOF_HIDDEN int iof__socket_check(const iof_socket *s);

/* -EINVAL for a numeric service outside 0-65535 (or a malformed number),
 * which getaddrinfo would silently truncate to 16 bits; 0 otherwise. */
IOF_HIDDEN int iof__port_check(const char *service);

#endif
