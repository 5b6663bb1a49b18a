/* compat's record of every fd it has seen, indexed by fd number. Not
 * installed.
 *
 * The table is two levels: a fixed array of chunk pointers and chunks of
 * slots allocated on first use of their range (one allocation per 1024 fd
 * numbers, ever; chunks are never freed). Lookups read one atomic pointer
 * and never lock. A slot keeps:
 * - flags: whether compat knows the fd (KNOWN), whether the user wants it
 *   non-blocking (USER_NB), whether the runtime set O_NONBLOCK for its own
 *   waits (RT_NB), or whether it cannot be polled and passes through (PASS);
 * - the SO_RCVTIMEO / SO_SNDTIMEO the user set, in ns (0: none), and
 *   whether SO_LINGER makes its close wait;
 * - a generation, bumped whenever the number stops naming the same file
 *   (close, dup2 over it, a new fd made through compat), so a waiter that
 *   started on the old file can tell;
 * - the fibers waiting on it, so close can wake them with EBADF. */
#ifndef IOF_COMPAT_FD_TABLE_H
#define IOF_COMPAT_FD_TABLE_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <spawn.h>
#include <stdio.h>

#include "fiber/libc.h"
#include "io/fd_wait.h"

enum {
  IOF__FD_KNOWN = 1,
  IOF__FD_USER_NB = 2,
  IOF__FD_RT_NB = 4,
  IOF__FD_PASS = 8,
  /* What kind of socket the fd is was asked (IOF__FD_DOMAIN) and the
   * answers: a Unix-domain socket (IOF__FD_UNIX, for sendmsg's fd
   * passing), a byte stream (IOF__FD_STREAM, for MSG_WAITALL). Cached,
   * cleared with the rest when the slot's flags are set anew. */
  IOF__FD_DOMAIN = 16,
  IOF__FD_UNIX = 32,
  IOF__FD_STREAM = 64,
  /* With IOF__FD_PASS: pollable, but shared with other processes (a
   * terminal, a pipe on 0-2), so it keeps its blocking mode. A fiber
   * reads and writes it with RWF_NOWAIT and waits after EAGAIN (io.c);
   * where the kernel refuses that, it waits for readiness before a plain
   * read (iof__fd_wait_first), and writes plainly. */
  IOF__FD_SHARED = 128,
  /* With IOF__FD_SHARED: the kernel refused RWF_NOWAIT on the fd (a
   * terminal, or a pipe on a kernel without it): a read waits first, a
   * write is the plain call, from then on. */
  IOF__FD_NO_NOWAIT = 256,
};

typedef struct iof__fd_waiter iof__fd_waiter;

typedef struct iof__fd_slot {
  atomic_uint flags;
  atomic_uint gen;
  atomic_llong rcv_ns, snd_ns;
  atomic_int lock; /* guards waiters and the gen check of an arming wait */
  /* The last read from a fiber came back short: the fd was drained, so the
   * next one waits for readiness before it tries (a hint: a wrong guess
   * costs one loop round or one EAGAIN, never a wrong result). */
  atomic_bool drained;
  /* The socket lingers (SO_LINGER on, with a time): its last close waits
   * in the kernel until the peer acknowledged everything, whatever
   * O_NONBLOCK says. Set by compat's setsockopt, learned with the
   * timeouts, copied by dup and accept. */
  atomic_bool linger;
  iof__fd_waiter *waiters;
  /* Under the lock: the loop that last watched the fd and the generation
   * it watched (+ 1, so that a fresh slot matches nothing): a wait from
   * the same loop on the same file keeps libev's registration. */
  void *ev_loop;
  unsigned ev_gen;
} iof__fd_slot;

/* A fiber's wait on a slot (on the fiber's stack). */
struct iof__fd_waiter {
  iof__fd_wait fw;
  iof__fd_slot *slot;
  unsigned gen;
  bool linked;
  iof__fd_waiter *next, *prev;
};

/* The slot of fd, allocating its chunk on first use; NULL for a negative
 * or too large fd (or when the chunk cannot be allocated: such fds pass
 * through as plain calls). */
IOF_HIDDEN iof__fd_slot *iof__fd_slot_get(int fd);

/* The slot of fd if its chunk exists, else NULL (never allocates). */
IOF_HIDDEN iof__fd_slot *iof__fd_slot_peek(int fd);

/* Whether fd is a socket whose close lingers (SO_LINGER on, time > 0). */
IOF_HIDDEN bool iof__fd_lingers(int fd);

/* Learns how to treat fd (first blocking use from a fiber): records the
 * user's O_NONBLOCK, sets the runtime's when the fd is pollable, reads the
 * socket timeouts and linger. Returns the slot's flags (0: the fd is not open).
 */
IOF_HIDDEN unsigned iof__fd_learn(int fd, iof__fd_slot *s);

/* The number now names something else (or nothing): bumps the generation,
 * wakes the waiters with EBADF, forgets flags and timeouts, then sets
 * `flags`. Returns once the woken waiters have left the fd (a fiber
 * caller yields meanwhile), so that the fd can be closed under no one. */
IOF_HIDDEN void iof__fd_reset(int fd, unsigned flags);

/* iof__fd_reset(fd, 0) for every number in [first, last] compat has a
 * record for: close_range and closefrom in the hook, which close numbers
 * without naming them one by one. */
IOF_API void iof__fd_range_reset(unsigned first, unsigned last);

/* One blocking call's view of its fd. */
typedef struct iof__fd_op {
  iof__fd_slot *slot;
  iof_fiber *fiber; /* NULL: a thread emulating a blocking call */
  unsigned gen;
  int fd;
  int events;          /* EV_READ or EV_WRITE */
  int saved_errno;     /* errno at entry, restored after each wait */
  int64_t deadline_ns; /* -1 none; 0 not computed yet */
} iof__fd_op;

/* Starts a call that may block on fd for `events`. False: make the plain
 * call (the fd is unknown outside fibers, user-non-blocking, not pollable,
 * or beyond the table). True: loop "try the non-blocking call; on failure
 * iof__fd_again". */
IOF_HIDDEN bool iof__fd_begin(iof__fd_op *op, int fd, int events);

/* After a failed try (errno set by it): true when the fd became ready and
 * the call should be tried again (errno restored to its value at entry);
 * false when the call must fail now with errno set: the try's own error,
 * EAGAIN after SO_RCVTIMEO/SO_SNDTIMEO, EBADF (closed while waiting),
 * ECANCELED (the chain's stop token or the context's shutdown). */
IOF_HIDDEN bool iof__fd_again(iof__fd_op *op);

/* Before a plain call on fd (one that would block the thread): in a
 * fiber, unless fd is ready already (a zero-timeout poll) or in the
 * program's own non-blocking mode, waits until it is, so that the call
 * finds its bytes (or room) instead of holding the thread. 0: make the
 * call; -1 and errno: fail it (ECANCELED, EINTR). A race with another
 * reader of the file can still leave the call waiting in the kernel. */
IOF_HIDDEN int iof__fd_wait_first(int fd, int events);

/* Waits for op's fd until the deadline without trying a call first.
 * 0 ready, else -errno as iof__fd_again (-ETIMEDOUT at the deadline). */
IOF_HIDDEN int iof__fd_wait_for(iof__fd_op *op, int64_t deadline_ns);

/* A fiber's wait through op's slot (op->fiber set) with the caller's
 * restart rule: 0 ready (or the deadline), -EBADF once compat closed the
 * number after op->gen was read (the wait never starts on it then), else
 * -errno. */
IOF_HIDDEN int iof__fd_wait_op(iof__fd_op *op, int64_t deadline_ns,
                               bool restart);

/* A wait on a single fd for poll/select/epoll and message queues. 0 ready
 * (or the deadline: the caller checks again), -EBADF when compat closed the
 * number meanwhile (a number it knows is linked to its slot), else -errno.
 * restart: whether SA_RESTART handlers let the wait go on (poll and select:
 * never; signal(7)). */
IOF_HIDDEN int iof__fd_wait_plain(int fd, int events, int64_t deadline_ns,
                                  bool restart);

/* The most fds poll and select wait on one by one (iof__fd_wait_plain_any);
 * more go into a throwaway epoll set. */
#define IOF__FD_WAIT_ANY_MAX 8

/* iof__fd_wait_plain on n fds at once (1 <= n <= IOF__FD_WAIT_ANY_MAX, a
 * launched fiber, never restarted): 0 when one is ready (the caller checks
 * them all again), -EBADF when compat closed some meanwhile (bit i of
 * *closed for fds[i]: the caller must not wait on that number again, which
 * may name another file by now), else -errno. */
IOF_HIDDEN int iof__fd_wait_plain_any(const int *fds, const int *events, int n,
                                      int64_t deadline_ns, unsigned *closed);

/* The launched fiber running here, or NULL. Unlike iof__sync_fiber it
 * never sets up fiber state for a thread that has none: the hook routes
 * every read of every thread through compat. */
/* Set in a child process forked by a fiber. The child's copy of the event
 * loop shares its epoll set with the parent's and nothing drives it: the
 * fiber the child continues on (e.g. a Python multiprocessing worker) must
 * make every call plainly, as a process with no fibers. A child forked
 * outside fibers (a prefork server starting its own fibers) is unaffected. */
IOF_HIDDEN extern bool iof__compat_forked;

/* In such a child: fd (0, 1 or 2) back to blocking mode if only the
 * runtime made it non-blocking (io.c). */
IOF_HIDDEN void iof__compat_child_std_blocking(int fd);

/* fd back to blocking mode when the runtime alone made it non-blocking
 * (the program's own view, compat's F_GETFL, says blocking), for a
 * program that will use it (io.c). */
IOF_HIDDEN void iof__fd_user_blocking(int fd);

/* Before a program is started (posix_spawn, system, popen, an exec in a
 * forked child): the fds it will use go back to blocking mode where only
 * the runtime made them non-blocking: 0-2, inheritable pipes and other
 * non-sockets, and the sources of fa's dup2s (fa may be NULL). The open
 * file is shared with us, so a fiber that later waits on one blocks its
 * thread (documented). inheritable_only: skip close-on-exec fds but fa's
 * dup2 sources; pipes_only: pipes and FIFOs alone (spawn_fds.c). */
IOF_API void iof__compat_child_fds(bool inheritable_only, bool pipes_only,
                                   const posix_spawn_file_actions_t *fa);

/* > 0 while this thread runs a handler installed through compat
 * (signal.c): its calls are the plain ones, whatever fiber it interrupted. */
IOF_HIDDEN extern _Thread_local int iof__compat_in_handler;

/* Runs on this thread of such handlers that lack SA_RESTART: a blocking
 * call a handler interrupts fails with EINTR only after one of those. */
IOF_HIDDEN extern _Thread_local unsigned iof__compat_norestart_runs;

static inline iof_fiber *iof__compat_fiber(void) {
  iof_thread_state *th = iof__thread_peek();
  if (!th || iof__compat_forked || iof__compat_in_handler) return NULL;
  iof_fiber *f = th->current;
  return f != &th->root && f->env ? f : NULL;
}

/* fcntl's blocking lock commands (F_SETLKW, F_OFD_SETLKW, F_SETLKW64):
 * a fiber retries the non-blocking form between pauses (file_lock.c). */
IOF_HIDDEN int iof__compat_setlkw(int fd, int cmd, void *lock);

/* A stdio stream on fd whose reads and writes are compat's (stdio.c). m:
 * "r", "w", "a", "r+", "a+". on_close (NULL: close the fd) runs at fclose,
 * given the fd as its cookie. NULL + errno (ENOMEM). */
IOF_HIDDEN FILE *iof__compat_fd_stream(int fd, const char *m,
                                       cookie_close_function_t *on_close);

/* The io_context a fiber's waits use. */
IOF_HIDDEN iof_io_context *iof__compat_io(iof_fiber *f);

#endif
