/* iofiber: type-erased byte streams (the C analogue of Capy's
 * any_read_stream / any_write_stream) and helpers composed on them. */
#ifndef IOFIBER_STREAM_H
#define IOFIBER_STREAM_H

#include <iofiber/socket.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct iof_stream iof_stream;

/* What a stream implements. Byte calls: > 0 bytes, 0 end of stream,
 * < 0 -errno, with the semantics of iof_read_some / iof_write_some. The
 * last two entries are optional (NULL: the calls give -ENOTSUP), so a
 * vtable written as {read, write, close} stays valid. */
typedef struct iof_stream_vtbl {
  ssize_t (*read_some)(iof_stream *s, void *buf, size_t len);
  ssize_t (*write_some)(iof_stream *s, const void *buf, size_t len);
  int (*close)(iof_stream *s);
  /* As iof_socket_set_deadline (relative false, ns absolute) or
   * iof_socket_set_timeout (relative true). */
  int (*set_limit)(iof_stream *s, int which, bool relative, int64_t ns);
  /* Ends the write side (the peer reads end of stream). */
  int (*shutdown_write)(iof_stream *s);
} iof_stream_vtbl;

/* Embed first in a stream object. */
struct iof_stream {
  const iof_stream_vtbl *vtbl;
};

/* Dispatch to the vtable; -EINVAL on a NULL stream. */
IOF_API ssize_t iof_stream_read_some(iof_stream *s, void *buf, size_t len);
IOF_API ssize_t iof_stream_write_some(iof_stream *s, const void *buf,
                                      size_t len);
IOF_API int iof_stream_close(iof_stream *s);

/* Deadlines and idle timeouts on a stream, with the semantics of
 * iof_socket_set_deadline / iof_socket_set_timeout (which: IOF_READ |
 * IOF_WRITE; <= 0 clears; -ETIMEDOUT from the calls that wait too long).
 * -ENOTSUP when the stream's vtable has no set_limit (iof_with_deadline
 * bounds any stream), -EINVAL on NULL. */
IOF_API int iof_stream_set_deadline(iof_stream *s, int which,
                                    int64_t deadline_ns);
IOF_API int iof_stream_set_timeout(iof_stream *s, int which, int64_t ns);

/* Half-close: ends the write side; the peer then reads end of stream.
 * 0; -ENOTSUP (the vtable has no shutdown_write); -EINVAL; -errno. */
IOF_API int iof_stream_shutdown_write(iof_stream *s);

/* Reads exactly len bytes (fewer only at end of stream: the count). */
IOF_API ssize_t iof_stream_read(iof_stream *s, void *buf, size_t len);

/* Writes all len bytes; len or an error. */
IOF_API ssize_t iof_stream_write(iof_stream *s, const void *buf, size_t len);

/* Reads until buf[0..*filled) contains delim. buf may already hold
 * *filled bytes (left over from the previous call). Returns the length of
 * the message including the delimiter (bytes after it stay in buf;
 * *filled counts all); 0 at end of stream before a delimiter (*filled says
 * what is left); -ENOBUFS when cap bytes hold no delimiter; -EINVAL on bad
 * arguments; or the read's error. Allocates nothing. */
IOF_API ssize_t iof_stream_read_until(iof_stream *s, char *buf, size_t cap,
                                      size_t *filled, const char *delim,
                                      size_t delim_len);

/* A stream over a socket (the socket stays the caller's; close closes
 * it). */
typedef struct iof_socket_stream {
  iof_stream base;
  iof_socket *sock;
} iof_socket_stream;

/* Initializes ss over sock and returns &ss->base (NULL if either is NULL). */
IOF_API iof_stream *iof_socket_stream_init(iof_socket_stream *ss,
                                           iof_socket *sock);

/* A connected pair of in-process streams (a socketpair on io): what one
 * end writes the other reads. Free each with iof_stream_pipe_free.
 * 0, -EINVAL, -EMFILE, -ENOMEM. */
IOF_API int iof_stream_pipe(iof_io_context *io, iof_stream **a, iof_stream **b);
IOF_API int iof_stream_pipe_free(iof_stream *end);

#ifdef __cplusplus
}
#endif
#endif
