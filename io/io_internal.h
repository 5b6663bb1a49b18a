/* Internal pieces of io/: the io_context layout and the wait machinery
 * every blocking operation is built on. Not installed. */
#ifndef IOF_IO_INTERNAL_H
#define IOF_IO_INTERNAL_H

#include <iofiber/io_context.h>

#include <ev.h>

#include "sched/sched_internal.h"

typedef struct iof_wait iof_wait;

struct iof_io_context {
  iof_execution_context ctx;
  struct ev_loop *loop;
  bool own_loop;
  ev_async wake;
  ev_idle idle;       /* attached: keeps the host loop spinning while ready */
  ev_prepare prepare; /* attached: runs ready fibers before the loop blocks */
  ev_timer deadline;  /* run_for */
  iof_fiber_queue local;
  pthread_mutex_t rlock;
  iof_fiber_queue remote;
  atomic_bool remote_pending;
  atomic_long work;
  atomic_bool stopped;      /* iof_io_context_stop: holds until restart */
  atomic_bool idle_stopped; /* the last run ran out of work: reported by
                               stopped(), cleared by the next run */
  atomic_int running;
  bool timed_out;
  iof_spin_policy spin_policy; /* the run loop's (its thread only) */
  struct iof_socket *sockets;  /* open sockets, closed at destroy */
  iof_wait *armed;             /* armed waits, cancelled at shutdown */
};

/* The io_context behind an execution context, or NULL. */
IOF_HIDDEN iof_io_context *iof__io_of(iof_execution_context *ctx);

/* The io_context whose loop serves timers for a fiber with this env: its
 * own when its executor runs on one, else a process-wide one that runs on
 * a background thread. NULL with errno on failure. */
IOF_HIDDEN iof_io_context *iof__io_for_env(const iof_env *env);

/* Queues h on io (any thread), even during its shutdown. */
IOF_HIDDEN void iof__io_enqueue(iof_io_context *io, iof_fiber *h);

/* A pending wait of one fiber on something registered with `io`.
 *
 * arm runs on io's thread with the fiber suspended; completion comes from
 * a libev callback on io's thread (iof__wait_complete, which also disarms)
 * or from a stop request on any thread (which claims the wait and posts
 * the fiber to io, where it disarms itself). One atomic claim settles a
 * completion racing a cancellation. */
struct iof_wait {
  iof_fiber *h;
  iof_io_context *io;
  atomic_int claimed;
  int result;
  bool armed;
  int (*arm)(iof_wait *w);     /* register with io's loop; < 0: refuse
                                  (the wait returns that at once) */
  void (*disarm)(iof_wait *w); /* undo arm (only while armed) */
  void *obj;                   /* what the wait is on (socket, timer...) */
  int dir;                     /* EV_READ or EV_WRITE, for socket waits */
  ev_timer timeout;            /* optional limit, see iof__wait */
  int64_t timeout_ns;          /* < 0: none */
  int64_t deadline_ns;         /* the limit as a monotonic time: 0 means
                                  "timeout_ns from initiation" (iof__wait sets it) */
  iof_stop_callback stop;
  bool via_io;    /* resumed on io's thread by a cancellation */
  iof_wait *next; /* in the waited object's list, where it keeps one */
  iof_wait *prev;
  iof_wait *reg_next, *reg_prev; /* io's list of armed waits */
};

/* Runs in a launched fiber, on any thread: checks the chain's token
 * (-ECANCELED without suspending) and io's state, moves to io's thread if
 * needed, arms, suspends, and returns the result: what iof__wait_complete
 * gave, -ECANCELED (stop request or shutdown), -ETIMEDOUT (timeout_ns
 * elapsed). It always returns on the fiber's own executor. -EPERM outside
 * a launched fiber. */
IOF_HIDDEN int iof__wait(iof_wait *w);

/* From io's thread: claims the wait, disarms it and sends the fiber to its
 * own executor with `result`. False if a cancellation won the claim. */
IOF_HIDDEN bool iof__wait_complete(iof_wait *w, int result);

/* From any thread: claims the wait and sends the fiber to io's thread,
 * where it disarms itself and goes home with `result`. */
IOF_HIDDEN bool iof__wait_cancel(iof_wait *w, int result);

/* Runs the calling code on io's thread: hops a fiber there if needed
 * (*hopped set; iof__io_leave goes back). Outside fibers it is allowed only
 * while no thread runs io (0), else -EPERM. */
IOF_HIDDEN int iof__io_enter(iof_io_context *io, bool *hopped);
IOF_HIDDEN void iof__io_leave(iof_io_context *io, bool hopped);

/* libev's failure paths (ev_guard.c). iof__ev_init installs the allocator
 * and syserr callback once, before the first loop. iof__ev_mem_ok: 0, or
 * -ENOMEM when libev's emergency reserve is spent and cannot be refilled;
 * call it before registering anything with libev. iof__ev_fd_probe: 0 if
 * a descriptor is free for libev's async pipe, else -EMFILE/-ENFILE.
 * iof__ev_syserr_take: the errno of a syserr libev reported on this thread
 * since the probe (0: none), cleared. */
IOF_HIDDEN void iof__ev_init(void);
IOF_HIDDEN int iof__ev_mem_ok(void);
IOF_HIDDEN int iof__ev_fd_probe(void);
IOF_HIDDEN int iof__ev_syserr_take(void);

/* Closes and frees every socket still open on io (its destroy). */
IOF_HIDDEN void iof__io_close_all(iof_io_context *io);

#endif
