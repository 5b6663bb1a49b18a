/* iofiber: sockets bound to an io_context. Blocking-style calls for fibers:
 * a call that would block suspends the calling fiber (any executor: an op
 * from a thread pool registers with the socket's io_context and resumes on
 * the pool). Byte calls return > 0 bytes, 0 at end of stream, < 0 -errno.
 * No call raises SIGPIPE. Every wait checks the chain's stop token and
 * completes with -ECANCELED on a stop request or when the socket is
 * closed. Calls that may wait return -EPERM outside a launched fiber.
 *
 * Lifetime: iof_socket_close closes the descriptor (idempotent; the object
 * stays valid and later calls get -EBADF); iof_socket_free closes and
 * frees. Sockets still allocated when their io_context is destroyed are
 * freed with it. */
#ifndef IOFIBER_SOCKET_H
#define IOFIBER_SOCKET_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/uio.h>

#include <iofiber/io_context.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct iof_socket iof_socket;

/* Listen flags. */
#define IOF_LISTEN_REUSEPORT 1 /* SO_REUSEPORT: one listener per io_context */
#define IOF_LISTEN_V6ONLY 2

/* TCP listener on host:port (host NULL or "": all addresses; port "0":
 * any; a numeric port must be 0-65535, else -EINVAL; a service name such
 * as "http" is looked up). SO_REUSEADDR always. backlog <= 0: SOMAXCONN.
 * 0 and *out; -EINVAL (also for unknown flags), -EADDRINUSE, -EACCES, -EMFILE,
 * -ENOMEM, or a resolution error (IOF_EAI_*, as iof_resolve). */
IOF_API int iof_tcp_listen(iof_io_context *io, const char *host,
                           const char *port, int backlog, int flags,
                           iof_socket **out);
IOF_API int iof_tcp_listen_addr(iof_io_context *io, const struct sockaddr *sa,
                                socklen_t len, int backlog, int flags,
                                iof_socket **out);

/* The bound local address (e.g. the port chosen for "0"). 0 or -errno. */
IOF_API int iof_socket_local_addr(iof_socket *s, struct sockaddr *sa,
                                  socklen_t *len);
/* The bound port, host order; -errno on error. */
IOF_API int iof_socket_local_port(iof_socket *s);

/* Accepts one connection (on the listener's io_context); peer may be
 * NULL. 0 and *out; -EMFILE/-ENFILE (the caller decides how to back off),
 * -ECANCELED, -EBADF, -EINVAL (not a listener). */
IOF_API int iof_accept(iof_socket *listener, iof_socket **out,
                       struct sockaddr *peer, socklen_t *peer_len);

/* Connects, resolving host:port on the resolver thread and trying each
 * address. 0 and *out; -ECONNREFUSED, -ETIMEDOUT, -ECANCELED, IOF_EAI_*
 * and -EAGAIN (resolution failed, as iof_resolve), -EINVAL (numeric port
 * outside 0-65535)... */
IOF_API int iof_tcp_connect(iof_io_context *io, const char *host,
                            const char *port, iof_socket **out);
IOF_API int iof_tcp_connect_addr(iof_io_context *io, const struct sockaddr *sa,
                                 socklen_t len, iof_socket **out);

/* As iof_tcp_connect(_addr), bounded by an absolute CLOCK_MONOTONIC
 * deadline (resolution included; <= 0: none): -ETIMEDOUT once it passes.
 * The socket returned has no deadline set. */
IOF_API int iof_tcp_connect_deadline(iof_io_context *io, const char *host,
                                     const char *port, int64_t deadline_ns,
                                     iof_socket **out);
IOF_API int iof_tcp_connect_addr_deadline(iof_io_context *io,
                                          const struct sockaddr *sa,
                                          socklen_t len, int64_t deadline_ns,
                                          iof_socket **out);

/* Unix domain stream sockets by path (an existing socket file is replaced
 * by listen). Same results as the TCP calls. */
IOF_API int iof_unix_listen(iof_io_context *io, const char *path, int backlog,
                            iof_socket **out);
IOF_API int iof_unix_connect(iof_io_context *io, const char *path,
                             iof_socket **out);

/* Wraps an fd created elsewhere (made non-blocking; the socket owns it from
 * now on). 0 and *out; -EBADF (not open, or one of the runtime's own
 * descriptors: a loop's epoll or wake-up fd), -EINVAL, -ENOMEM. On failure
 * the fd stays the caller's: open, its flags unchanged. */
IOF_API int iof_socket_adopt(iof_io_context *io, int fd, iof_socket **out);

/* Reads what is available, at most len (waits if nothing is). len 0
 * returns 0 at once. -EBADF (closed), -EINVAL (listener or NULL socket),
 * -EFAULT (NULL buf with len > 0), -ECONNRESET, -ECANCELED. Every call
 * that may wait can also return -ENOMEM: libev's bookkeeping could not
 * grow, or the kernel refused to watch the descriptor. */
IOF_API ssize_t iof_read_some(iof_socket *s, void *buf, size_t len);

/* Writes what fits, at least one byte (waits for room). Errors as read,
 * plus -EPIPE. */
IOF_API ssize_t iof_write_some(iof_socket *s, const void *buf, size_t len);

/* Reads exactly len bytes, fewer only at end of stream (the count read);
 * an error after some bytes returns the error. */
IOF_API ssize_t iof_read(iof_socket *s, void *buf, size_t len);

/* Writes all len bytes; returns len or an error. */
IOF_API ssize_t iof_write(iof_socket *s, const void *buf, size_t len);

/* Scatter read (some, like read_some) and gather write (all, like write).
 * iovcnt 1..IOV_MAX, else -EINVAL. */
IOF_API ssize_t iof_readv(iof_socket *s, const struct iovec *iov, int iovcnt);
IOF_API ssize_t iof_writev(iof_socket *s, const struct iovec *iov, int iovcnt);

/* shutdown(2): SHUT_RD, SHUT_WR or SHUT_RDWR. 0 or -errno. */
IOF_API int iof_socket_shutdown(iof_socket *s, int how);

/* Closes the descriptor; pending operations complete with -ECANCELED.
 * 0; a second close is harmless (0); -EINVAL on NULL. From a fiber on any
 * executor, or from a thread while the io_context is not running (else
 * -EPERM, nothing closed). */
IOF_API int iof_socket_close(iof_socket *s);

/* A graceful ("lingering") close, from a launched fiber: shuts down the
 * sending side, so the peer reads everything written and then the end,
 * reads and drops what the peer still sends until it closes too or
 * linger_ns pass (or the socket's read timeout, or a stop), then closes.
 * A plain close with input unread makes the kernel send a reset, which
 * can destroy data still in flight to the peer. 0 once closed (also when
 * the peer had gone); -EINVAL (NULL, linger_ns < 0), -EBADF (closed),
 * -EPERM outside a launched fiber: nothing done. */
IOF_API int iof_socket_close_graceful(iof_socket *s, int64_t linger_ns);

/* Closes if open, then frees the object. -EINVAL on NULL; -EPERM as
 * iof_socket_close (nothing freed). */
IOF_API int iof_socket_free(iof_socket *s);

/* The descriptor, or -EBADF once closed. */
IOF_API int iof_socket_fd(const iof_socket *s);
IOF_API iof_io_context *iof_socket_io_context(const iof_socket *s);

/* TCP_NODELAY and SO_KEEPALIVE. 0 or -errno. */
IOF_API int iof_socket_set_nodelay(iof_socket *s, bool on);
IOF_API int iof_socket_set_keepalive(iof_socket *s, bool on);

/* Directions of a deadline or timeout. */
#define IOF_READ 1  /* reads, recvfrom, accept */
#define IOF_WRITE 2 /* writes, sendto, connect */

/* Sets an absolute deadline (CLOCK_MONOTONIC ns, as iof_now_ns) for the
 * directions in which (IOF_READ | IOF_WRITE): from now on, until changed,
 * every operation of those directions that has to wait fails with
 * -ETIMEDOUT once the deadline has passed (data already there may still be
 * returned). deadline_ns <= 0 clears it. Waits already pending take the
 * new value at once. The socket stays usable after a timeout. 0; -EINVAL
 * (NULL, bad which), -EBADF; -EPERM from a plain thread while the
 * io_context runs (call it from a fiber on any executor, or before/after
 * the run). Costs nothing on operations that need not wait; no timer is
 * armed unless a fiber waits. */
IOF_API int iof_socket_set_deadline(iof_socket *s, int which,
                                    int64_t deadline_ns);

/* Sets a timeout per wait (an idle timeout) for the directions in which:
 * an operation that waits more than ns nanoseconds at a time for its
 * socket fails with -ETIMEDOUT (an operation that makes progress, e.g. a
 * long write, restarts it at each wait). ns <= 0 (0 or -1) clears it.
 * With a deadline too, the earlier limit wins. Results as set_deadline. */
IOF_API int iof_socket_set_timeout(iof_socket *s, int which, int64_t ns);

/* The current deadline / timeout of one direction (0: none). */
IOF_API int64_t iof_socket_deadline(const iof_socket *s, int which);
IOF_API int64_t iof_socket_timeout(const iof_socket *s, int which);

/* UDP socket bound to host:port (port "0": any; a numeric port outside
 * 0-65535 is -EINVAL). 0 and *out, or -errno. */
IOF_API int iof_udp_bind(iof_io_context *io, const char *host, const char *port,
                         iof_socket **out);
/* An unbound UDP socket of the given family (AF_INET or AF_INET6). */
IOF_API int iof_udp_open(iof_io_context *io, int family, iof_socket **out);

/* One datagram. sendto returns the bytes sent; recvfrom the datagram's
 * size (truncated to len); from may be NULL. Errors as read/write. */
IOF_API ssize_t iof_sendto(iof_socket *s, const void *buf, size_t len,
                           const struct sockaddr *to, socklen_t to_len);
IOF_API ssize_t iof_recvfrom(iof_socket *s, void *buf, size_t len,
                             struct sockaddr *from, socklen_t *from_len);

/* Waits until a foreign fd (not owned by a socket) is readable or
 * writable, at most timeout_ns (< 0: no limit). 0 when ready; -ETIMEDOUT,
 * -ECANCELED, -EBADF (not open, one of the runtime's own descriptors, or
 * closed by another fiber before the loop watched it), -ENOMEM (see
 * iof_read_some), -EPERM outside a launched fiber. An fd closed once
 * watched is no longer watched by the kernel: only the timeout ends it. */
IOF_API int iof_wait_readable(iof_io_context *io, int fd, int64_t timeout_ns);
IOF_API int iof_wait_writable(iof_io_context *io, int fd, int64_t timeout_ns);

#ifdef __cplusplus
}
#endif
#endif
