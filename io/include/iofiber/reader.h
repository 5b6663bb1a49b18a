/* iofiber: a buffered reader over a stream or a socket: lines, messages
 * up to a delimiter, exact counts, length-prefixed frames.
 *
 * The reader owns one buffer (the caller's, or one allocation at init;
 * nothing is allocated afterwards). Messages that fit in it are returned
 * as views (iof_bytes) into the buffer, without copying: a view stays
 * valid until the next call on the reader. Bytes left over after a
 * message stay buffered for the next call; they are moved to the front of
 * the buffer only when more room is needed.
 *
 * Calls that return a message give 1 (a message in *out), 0 (clean end of
 * stream: nothing buffered) or < 0: -EMSGSIZE (the message cannot fit:
 * longer than the maximum or the buffer; nothing is consumed), -EPROTO
 * (the stream ended inside a fixed-size message or frame), or the
 * stream's error (-ETIMEDOUT, -ECANCELED, -ECONNRESET...). They wait like
 * the stream's reads and need a launched fiber when they do. */
#ifndef IOFIBER_READER_H
#define IOFIBER_READER_H

#include <iofiber/stream.h>

#ifdef __cplusplus
extern "C" {
#endif

/* A view of bytes inside a reader's buffer. */
typedef struct iof_bytes {
  const char *data;
  size_t len;
} iof_bytes;

#define IOF_READER_DEFAULT_CAP ((size_t)16 * 1024)

/* Fields are private. */
typedef struct iof_reader {
  iof_stream *src;
  iof_socket_stream ss; /* the adapter when made over a socket */
  char *buf;
  size_t cap, start, end;
  size_t max; /* longest delimited message */
  bool owned;
  bool eof;
} iof_reader;

/* Initializes r over src with buf[0..cap) as its buffer; buf NULL: one
 * allocation of cap bytes (cap 0: IOF_READER_DEFAULT_CAP), freed by
 * iof_reader_destroy. The maximum message length starts at cap. 0;
 * -EINVAL (NULL r or src, caller's buf with cap 0); -ENOMEM. */
IOF_API int iof_reader_init(iof_reader *r, iof_stream *src, void *buf,
                            size_t cap);

/* As iof_reader_init, reading a socket directly (the socket stays the
 * caller's). */
IOF_API int iof_reader_init_socket(iof_reader *r, iof_socket *s, void *buf,
                                   size_t cap);

/* Frees an allocated buffer (not the stream). Safe on a zeroed reader. */
IOF_API void iof_reader_destroy(iof_reader *r);

/* Sets the longest message read_until/read_line accept, delimiter
 * included (0: the buffer's size). 0; -EINVAL (NULL, more than the
 * buffer). */
IOF_API int iof_reader_set_max(iof_reader *r, size_t max);

/* The stream the reader reads (for writing replies, deadlines). */
IOF_API iof_stream *iof_reader_stream(iof_reader *r);

/* The next message ending with delim[0..delim_len), delimiter included.
 * A stream that ends with bytes and no delimiter gives them as a last
 * message (without the delimiter). -EMSGSIZE when max bytes hold no
 * delimiter, and at once, without reading, for a delimiter longer than
 * max; -EINVAL on bad arguments. */
IOF_API int iof_reader_read_until(iof_reader *r, const char *delim,
                                  size_t delim_len, iof_bytes *out);

/* The next line, without its "\n" or "\r\n" (a last line without "\n"
 * counts too). As read_until otherwise. */
IOF_API int iof_reader_read_line(iof_reader *r, iof_bytes *line);

/* Exactly n bytes (n <= the buffer's size, else -EMSGSIZE; n 0 gives an
 * empty view). -EPROTO when the stream ends after some of them. */
IOF_API int iof_reader_read_exact(iof_reader *r, size_t n, iof_bytes *out);

/* A frame: a big-endian length of prefix bytes (1, 2 or 4), then that
 * many bytes, returned as a view (a frame that does not fit in the buffer
 * gives -EMSGSIZE, nothing consumed: iof_reader_read_frame_into reads
 * it). -EPROTO when the stream ends inside the frame; -EINVAL (prefix). */
IOF_API int iof_reader_read_frame(iof_reader *r, int prefix, iof_bytes *out);

/* As read_frame, copying the payload into dst[0..cap) (any size, past the
 * buffer's), its length in *len. -EMSGSIZE when it exceeds cap (nothing
 * consumed). */
IOF_API int iof_reader_read_frame_into(iof_reader *r, int prefix, void *dst,
                                       size_t cap, size_t *len);

/* Copies exactly n bytes into dst (buffered ones first, then straight
 * from the stream), fewer only at end of stream: the count. Or the
 * stream's error. */
IOF_API ssize_t iof_reader_read(iof_reader *r, void *dst, size_t n);

/* Copies what is buffered (at most n), or reads once from the stream if
 * nothing is: as iof_stream_read_some. */
IOF_API ssize_t iof_reader_read_some(iof_reader *r, void *dst, size_t n);

/* The bytes buffered and not yet consumed (a view; may be empty), and
 * consuming n of them (at most what is buffered). */
IOF_API size_t iof_reader_buffered(const iof_reader *r, iof_bytes *out);
IOF_API void iof_reader_consume(iof_reader *r, size_t n);

#ifdef __cplusplus
}
#endif
#endif
