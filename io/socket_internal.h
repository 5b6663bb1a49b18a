/* The socket object, shared by the socket files of io/. Not installed. */
#ifndef IOF_SOCKET_INTERNAL_H
#define IOF_SOCKET_INTERNAL_H

#include <iofiber/socket.h>

#include "io/io_internal.h"

struct iof_socket {
  iof_io_context *io;
  int fd;
  int family;
  int type;
  bool listener;
  bool is_socket; /* an adopted pipe or tty uses read/write, not send */
  bool closed;
  /* What the socket last showed: true while a read may find data without
   * waiting (fresh socket, or the last read filled its buffer). */
  bool read_first;
  bool speculative; /* read_first came from a full read, not readiness */
  bool spec_missed; /* the last speculative read found nothing */
  ev_io w;          /* one watcher for the socket's life; only its mask moves */
  int interest;     /* EV_READ/EV_WRITE currently in w (0: stopped) */
  iof__waitq rd;    /* waiting readers, FIFO (io's thread only) */
  iof__waitq wr;    /* waiting writers, FIFO */
  iof_socket *next, *prev; /* io's list */
};

/* Makes a socket object for fd (made non-blocking and close-on-exec). On
 * failure fd is closed. 0 or -errno. */
IOF_HIDDEN int iof__socket_new(iof_io_context *io, int fd, int family, int type,
                               bool listener, iof_socket **out);

/* Waits until s is readable (EV_READ) or writable (EV_WRITE). */
IOF_HIDDEN int iof__socket_wait(iof_socket *s, int dir);

/* The usual checks of a call on s: -EINVAL (NULL), -EBADF (closed). */
IOF_HIDDEN int iof__socket_check(const iof_socket *s);

/* The -errno of a failed getaddrinfo, for callers that only need one. */
IOF_HIDDEN int iof__gai_errno(int gai);

#endif
