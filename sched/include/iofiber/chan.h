/* iofiber: channels. A channel carries fixed-size elements (copied in and
 * out) between fibers and threads, in FIFO order.
 *
 * Bounded (capacity > 0): send waits while the buffer is full, recv while
 * it is empty. Unbuffered (capacity 0): a rendezvous, send waits until a
 * receiver takes the element. Close: senders get -EPIPE at once (waiting
 * ones too, their element is not delivered); receivers drain what is left,
 * then get -EPIPE. The blocking rules of <iofiber/sync.h> apply: fibers
 * are suspended (waiters on their stack, woken through their executor),
 * plain threads are blocked; the chain's stop token (or the context's
 * shutdown) completes a wait with -ECANCELED (nothing sent or received). */
#ifndef IOFIBER_CHAN_H
#define IOFIBER_CHAN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <iofiber/frame_allocator.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct iof_chan iof_chan;

/* A channel of elements of elem_size bytes (0 allowed: pure signals)
 * holding up to `capacity` of them (0: unbuffered). One allocation, at
 * creation. NULL with errno EINVAL (size overflow) or ENOMEM. */
IOF_API iof_chan *iof_chan_create(size_t elem_size, size_t capacity);

/* Frees the channel (buffered elements are dropped). 0; -EINVAL on NULL;
 * -EBUSY while a fiber or thread waits on it (nothing freed). */
IOF_API int iof_chan_destroy(iof_chan *ch);

/* Copies *elem into the channel, waiting for room (bounded) or a receiver
 * (unbuffered). 0; -EPIPE (closed, before or while waiting); -ECANCELED;
 * -EINVAL (NULL ch, or NULL elem with a non-zero element size). */
IOF_API int iof_chan_send(iof_chan *ch, const void *elem);

/* Takes the oldest element into *out (may be NULL to drop it), waiting for
 * one. 0; -EPIPE (closed and drained); -ECANCELED; -EINVAL. */
IOF_API int iof_chan_recv(iof_chan *ch, void *out);

/* As send/recv, without waiting: -EAGAIN when they would wait. */
IOF_API int iof_chan_try_send(iof_chan *ch, const void *elem);
IOF_API int iof_chan_try_recv(iof_chan *ch, void *out);

/* As send/recv, giving up at deadline_ns (CLOCK_MONOTONIC ns):
 * -ETIMEDOUT. */
IOF_API int iof_chan_send_until(iof_chan *ch, const void *elem,
                                int64_t deadline_ns);
IOF_API int iof_chan_recv_until(iof_chan *ch, void *out, int64_t deadline_ns);

/* Closes: wakes every waiter (-EPIPE), later sends fail with -EPIPE,
 * receivers drain the buffer first. 0; -EINVAL; -EPIPE if already closed. */
IOF_API int iof_chan_close(iof_chan *ch);

/* Snapshots: elements buffered now, the capacity, the element size, and
 * whether it is closed (0/false on NULL). */
IOF_API size_t iof_chan_len(iof_chan *ch);
IOF_API size_t iof_chan_cap(const iof_chan *ch);
IOF_API size_t iof_chan_elem_size(const iof_chan *ch);
IOF_API bool iof_chan_closed(iof_chan *ch);

/* ---- select ----------------------------------------------------------- */

enum { IOF_CHAN_SEND = 1, IOF_CHAN_RECV = 2 };

/* One case of a select. chan NULL disables the case (as a nil channel in
 * Go). elem: the element to send, or where to store the received one (may
 * be NULL for recv). status is written for the chosen case only: 0, or
 * -EPIPE when it was chosen because its channel is closed (recv: closed
 * and drained). */
typedef struct iof_chan_case {
  iof_chan *chan;
  int op; /* IOF_CHAN_SEND or IOF_CHAN_RECV */
  void *elem;
  int status;
} iof_chan_case;

#define IOF_CHAN_SELECT_MAX 64

/* Waits until one case can proceed, performs exactly that one and returns
 * its index. When several are ready at once, the choice is uniformly
 * random (fair). A closed channel makes its case ready (status -EPIPE).
 * -EINVAL (NULL cases, n == 0 or > IOF_CHAN_SELECT_MAX, a bad op, every
 * case disabled); -ECANCELED (nothing done). */
IOF_API int iof_chan_select(iof_chan_case *cases, size_t n);

/* As select without waiting: -EAGAIN when no case is ready. */
IOF_API int iof_chan_try_select(iof_chan_case *cases, size_t n);

/* As select until deadline_ns: -ETIMEDOUT. */
IOF_API int iof_chan_select_until(iof_chan_case *cases, size_t n,
                                  int64_t deadline_ns);

#ifdef __cplusplus
}
#endif
#endif
