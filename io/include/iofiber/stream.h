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

/* Dispatch to the vtable; -EINVAL on a NULL stream (or NULL vtbl),
 * -ENOTSUP when the vtable leaves that entry NULL, -EPROTO when it
 * claims more bytes than len. */
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
 * arguments (also a delimiter longer than cap), without reading; or the
 * read's error. Allocates nothing. */
IOF_API ssize_t iof_stream_read_until(iof_stream *s, char *buf, size_t cap,
                                      size_t *filled, const char *delim,
                                      size_t delim_len);

/* Options of iof_stream_copy / iof_stream_relay; a zeroed struct (or
 * NULL) means the defaults. */
typedef struct iof_copy_opts {
  void *buf;          /* the chunk buffer (relay: split in two halves); NULL:
                         one allocation at start, freed at return */
  size_t buf_len;     /* its size (with buf: 0 is -EINVAL, relay needs 2);
                         no buf: 0 means IOF_COPY_DEFAULT_BUF (per
                         direction), an absurd size -ENOMEM */
  int64_t idle_ns;    /* > 0: -ETIMEDOUT once no byte moved (in any
                         direction) for that long; a write stalled that long
                         fails too */
  bool no_half_close; /* copy: do not shut down dst's write side at src's
                         end (relay always forwards half-closes) */
} iof_copy_opts;

#define IOF_COPY_DEFAULT_BUF ((size_t)64 * 1024)

/* Copies src to dst until src's end of stream, then half-closes dst
 * (iof_stream_shutdown_write, unless opts->no_half_close; -ENOTSUP from
 * it is ignored). *copied (may be NULL) gets the bytes written, also on
 * failure. 0; the first read or write error; -ETIMEDOUT (idle); -ENOTSUP
 * (idle_ns without set_limit support in a stream); -EINVAL; -ENOMEM. With
 * idle_ns, the src read deadline and the dst write timeout are the
 * copy's while it runs and cleared at its end. No allocation per chunk. */
IOF_API int iof_stream_copy(iof_stream *dst, iof_stream *src,
                            const iof_copy_opts *opts, uint64_t *copied);

/* The proxy pump: copies a to b and b to a concurrently (two child
 * fibers, as iof_when_all) until both have ended. An end of stream on one
 * side is forwarded as a half-close to the other, whose opposite
 * direction keeps flowing. An error in one direction (or idle_ns without
 * traffic either way) stops the other. *a_to_b / *b_to_a (may be NULL)
 * get the byte counts, also on failure. 0 when both ended cleanly; else
 * the first error (-ETIMEDOUT for idle; -ECANCELED on a stop request);
 * -EINVAL; -ENOMEM; -EPERM outside a launched fiber. */
IOF_API int iof_stream_relay(iof_stream *a, iof_stream *b,
                             const iof_copy_opts *opts, uint64_t *a_to_b,
                             uint64_t *b_to_a);

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
/* Closes and frees one end. 0; -EINVAL (NULL, not a pipe end); -EPERM as
 * iof_socket_free (a plain thread while io runs: nothing freed). */
IOF_API int iof_stream_pipe_free(iof_stream *end);

#ifdef __cplusplus
}
#endif
#endif
