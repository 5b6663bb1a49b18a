/* Internal pieces of io/: the io_context layout and the wait machinery
 * every blocking operation is built on. Not installed. */
#ifndef IOF_IO_INTERNAL_H
#define IOF_IO_INTERNAL_H

#include <iofiber/io_context.h>

#include <ev.h>
#include <errno.h>

#include "sched/sync_internal.h"

#include <stdatomic.h>
#include <stddef.h>

typedef struct iof_io_op iof_io_op;

/* While fibers are ready, the run loop polls libev once per poll_every
 * fibers run (hand-offs and yields that continue at once included): from
 * POLL_EVERY, doubling up to POLL_EVERY_MAX while polls find nothing
 * within one tick of the coarse clock (see poll_after in io_context.c). */
#define POLL_EVERY 64
#define POLL_EVERY_MAX 1024

struct iof_io_context {
  iof_execution_context ctx;
  struct ev_loop *loop;
  bool own_loop;
  ev_async wake;
  ev_idle idle;       /* attached: keeps the host loop spinning while ready */
  ev_prepare prepare; /* attached: runs ready fibers before the loop blocks */
  ev_timer deadline;  /* run_for */
  iof_fiber_queue local;
  /* The batch run_batch is running, and who runs it (the loop's fiber, the
   * resumer of every fiber of the batch; NULL when handing off is off): a
   * fiber that parks at home switches straight to the next fiber of the
   * batch (iof__io_park) instead of through the loop. `handed` counts
   * those switches for the loop's count of fibers run. */
  iof_fiber_queue batch;
  iof_fiber *batch_runner;
  long handed;
  long poll_every;   /* fibers run between polls while some are ready */
  int64_t poll_tick; /* the coarse clock at the last poll */
  pthread_mutex_t rlock;
  iof_fiber_queue remote;
  atomic_bool remote_pending;
  atomic_int remote_posting; /* remote posts still reading io (destroy) */
  atomic_long work;
  atomic_bool stopped;      /* iof_io_context_stop: holds until restart */
  atomic_bool idle_stopped; /* the last run ran out of work: reported by
                               stopped(), cleared by the next run */
  atomic_int running;
  bool timed_out;
  iof_spin_policy spin_policy; /* the run loop's (its thread only) */
  struct iof_socket *sockets;  /* open sockets, closed at destroy */
  bool waits_cancelled;        /* shutdown: the sockets' waiters were failed
                                  (io's thread) */
  int rt_fds[2]; /* an owned loop's epoll fd and wake-up fd, listed */
  /* Waits on foreign fds (iof_wait_readable/writable) begun since the loop
   * last registered its fds, checked by fd_check just before it does
   * (io's thread only; see socket.c). */
  struct iof__fresh_fd *fd_fresh;
  ev_prepare fd_check;
};

/* fd_check's callback (socket.c), and the check itself, which a host's
 * loop needs at the end of each batch: its batches run in a prepare
 * watcher, after libev chose the prepare watchers of that round. */
IOF_HIDDEN void iof__fd_check(struct ev_loop *loop, ev_prepare *w, int revents);
IOF_HIDDEN void iof__fd_check_now(iof_io_context *io);

/* The io_context behind an execution context, or NULL. */
IOF_HIDDEN iof_io_context *iof__io_of(iof_execution_context *ctx);

/* Queues h on io (any thread), even during its shutdown. */
IOF_HIDDEN void iof__io_enqueue(iof_io_context *io, iof_fiber *h);

/* iof_io_context_executor and the work count without the calls through
 * the executor table: the io wait path runs them on every wait. */
IOF_HIDDEN extern const iof_executor_vtbl iof__io_vtbl;
static inline iof_executor_ref iof__io_executor(iof_io_context *io) {
  return iof_executor_make(io, &iof__io_vtbl);
}
IOF_HIDDEN void iof__io_work_started(iof_io_context *io);
IOF_HIDDEN void iof__io_work_finished(iof_io_context *io);

/* A blocking operation on something registered with `io` (a socket, a
 * timer object, a signal, a resolver request): the one wait record of
 * sched/ (sync_internal.h) plus how to arm it on io's loop.
 *
 * arm runs on io's thread with the fiber suspended and the record
 * published; completion is a claim of the record (iof__io_complete) from a
 * libev callback on io's thread, or from any thread (the resolver's
 * worker); a stop request, the timeout and io's shutdown claim it the same
 * way. The claimer posts the fiber to io, where it disarms (disarm) and
 * then goes back to its own executor. */
/* What a socket's home wait and its wake touch comes first, the record's
 * claim fields right after: two cache lines instead of four, which counts
 * when a thousand parked fibers' records are cold. */
struct iof_io_op {
  iof__wnode node; /* in the waited object's queue, if it keeps one */
  iof_io_context *io;
  void *obj; /* what the wait is on (socket, timer...) */
  int dir;   /* EV_READ or EV_WRITE, for socket waits */
  bool armed;
  iof__wait w;
  int (*arm)(iof_io_op *op);     /* register with io's loop; < 0: refuse
                                    (the wait returns that at once) */
  void (*disarm)(iof_io_op *op); /* undo arm (only if it succeeded) */
};

/* Prepares op for a wait on io with arm/disarm (the record itself is set
 * up by the wait: no need to clear it all on every socket wait). */
static inline void iof__io_op_init(iof_io_op *op, iof_io_context *io,
                                   int (*arm)(iof_io_op *),
                                   void (*disarm)(iof_io_op *), void *obj) {
  op->node.prev = op->node.next = NULL;
  op->node.linked = false;
  op->node.data = op->node.owner = NULL;
  op->node.index = 0;
  op->dir = 0;
  op->armed = false;
  op->io = io;
  op->arm = arm;
  op->disarm = disarm;
  op->obj = obj;
  op->node.w = &op->w;
}

/* Runs in a launched fiber, on any thread: checks the chain's token
 * (-ECANCELED without suspending) and io's state, moves to io's thread if
 * needed, arms, suspends, and returns the result: what iof__io_complete
 * gave, -ECANCELED (stop request or shutdown), -ETIMEDOUT (deadline_ns, an
 * absolute monotonic time, passed; < 0: none). It always returns on the
 * fiber's own executor. -EPERM outside a launched fiber. */
IOF_HIDDEN int iof__io_wait(iof_io_op *op, int64_t deadline_ns);

/* The home path of io waits: true when th's current fiber may wait on io
 * through iof__io_wait_home: a launched fiber whose executor is io, on
 * io's thread (innermost run), holding no strand, with no stop token
 * (nothing from another thread can claim its wait). The _launched form is
 * for a caller that checked self is a launched fiber since its last
 * switch. */
static inline bool iof__io_launched_at_home(const iof_thread_state *th,
                                            const iof_fiber *self,
                                            const iof_io_context *io) {
  const iof_env *env = self->env;
  return env->executor.ex == io && env->executor.vt == &iof__io_vtbl &&
         !env->stop_token.state && !self->strand &&
         iof__thread_runs_top(th, &io->ctx);
}

static inline bool iof__io_at_home(const iof_thread_state *th,
                                   const iof_fiber *self,
                                   const iof_io_context *io) {
  return self != &th->root && self->env &&
         iof__io_launched_at_home(th, self, io);
}

/* Stack lines fetched ahead for the fiber a batch resumes next: the
 * saved registers and the frames of a socket wait above them. */
#define IOF__BATCH_PREFETCH_LINES 8
/* Fibers of an io_context from which their stacks leave the caches
 * between two turns (about 1.5 KiB each is touched per turn; a core's L2
 * holds 512 KiB to 2 MiB): below it the prefetches only cost instructions. */
#define IOF__BATCH_PREFETCH_MIN 256

/* Pops the fiber io's batch resumes now. With a thousand connections a
 * fiber's control block and stack have left the caches by its turn, and
 * each resume waited on them: the next fiber's stack and the block of the
 * one after are fetched now, while this one runs. That block was fetched
 * one pop earlier, so reading its ctx does not wait. */
static inline iof_fiber *iof__io_batch_pop(iof_io_context *io) {
  iof_fiber *f = iof__q_pop(&io->batch);
  iof_fiber *n = io->batch.head;
  if (n && atomic_load_explicit(&io->work, memory_order_relaxed) >=
               IOF__BATCH_PREFETCH_MIN) {
    const char *sp = (const char *)n->ctx;
#pragma GCC unroll 8
    for (int i = 0; i < IOF__BATCH_PREFETCH_LINES; i++)
      __builtin_prefetch(sp + 64 * i, 1);
    iof_fiber *nn = n->next;
    if (nn) {
      __builtin_prefetch(nn, 1);
      __builtin_prefetch((const char *)nn + 64, 1);
    }
  }
  return f;
}

/* Suspends self (at home on io, th's current fiber), already armed or
 * queued so that io's thread resumes it: hands the thread to the next
 * fiber of the loop's batch, or back to the loop. label (an awaitable
 * vtable named with iof__debug_label) and what tell iof_fiber_walk what it
 * waits for. Returns once resumed. */
static inline void iof__io_park(iof_thread_state *th, iof_fiber *self,
                                iof_io_context *io, const void *label,
                                void *what) {
  iof_chain *c = self->sched; /* what iof_fiber_walk reports while away */
  __atomic_store_n(&c->wait_vt, label, __ATOMIC_RELAXED);
  __atomic_store_n(&c->wait_aw, what, __ATOMIC_RELAXED);
  /* th is stale once back: not used again. */
  iof_fiber *next = io->batch.head;
  if (next && io->batch_runner == self->resumer) {
    iof__io_batch_pop(io); /* the loop would resume it next: do it here */
    io->handed++;
    iof__fiber_handoff(th, self, next);
  } else {
    iof__fiber_park(th, self);
  }
  __atomic_store_n(&c->wait_vt, NULL, __ATOMIC_RELAXED);
  iof__refresh_allocator(self);
}

/* The label of the home path's io waits (what: the iof_io_op). */
IOF_HIDDEN extern const iof_awaitable_vtbl iof__io_home_vtbl;

/* iof__io_wait with no deadline for a fiber at home (iof__io_at_home),
 * for an op whose arm queues it where io's shutdown fails it (a socket's
 * queues: iof__io_cancel_socket_waits). Arms and publishes before the
 * switch: every claim runs on this thread. op needs io, obj, dir and its
 * node's w and index set; arm and disarm are inlined from the caller. */
static inline __attribute__((always_inline)) int
iof__io_wait_home(iof_thread_state *th, iof_fiber *self, iof_io_op *op,
                  int (*arm)(iof_io_op *), void (*disarm)(iof_io_op *)) {
  iof_io_context *io = op->io;
  if (atomic_load_explicit(&io->ctx.state, memory_order_acquire))
    return -ECANCELED; /* shutting down */
  iof__wait *w = &op->w;
  /* Only what a claim and the wake read: the claim writes the result. */
  w->fiber = self;
  w->ex = iof__io_executor(io);
  atomic_store_explicit(&w->state, IOF__W_WAITING, memory_order_relaxed);
  int r = arm(op);
  if (r < 0) return r;
  self->claim = &w->state;
  iof__io_park(th, self, io, &iof__io_home_vtbl, op);
  self->claim = NULL;
  disarm(op); /* every claim of a queued op unlinked it already */
  return w->result;
}

/* Claims a pending op with `result` and wakes its fiber. Any thread. False
 * if something else claimed it first. */
static inline bool iof__io_complete(iof_io_op *op, int result) {
  if (!iof__wait_claim(&op->w, result, -1)) return false;
  iof__wait_wake(&op->w);
  return true;
}

/* Wakes the fiber of w, an io wait on io (w->ex is io's executor: every io
 * wait is woken where it is armed), claimed by a libev callback of io. A
 * loop io owns is polled only by the thread running io (its run loop or
 * destroy), so the fiber goes straight to the local queue: a started
 * fiber is never refused, and the thread needs no look-up. On a host's
 * loop: the executor's post. */
static inline void iof__io_wake_from_loop(iof_io_context *io, iof__wait *w) {
  if (io->own_loop)
    iof__q_push(&io->local, w->fiber);
  else
    iof__wait_wake(w);
}

/* The op owning a queue node (sockets and timers queue their waiters). */
static inline iof_io_op *iof__io_op_of(iof__wnode *n) {
  return (iof_io_op *)(void *)((char *)n - offsetof(iof_io_op, node));
}

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
IOF_HIDDEN int iof__ev_mem_refill(void);
IOF_HIDDEN extern void *_Atomic iof__ev_reserve;
IOF_HIDDEN extern atomic_long iof__ev_reserve_size;
IOF_HIDDEN extern atomic_long iof__ev_largest;
/* Inline: every io wait asks, and the reserve is nearly always in place
 * (the same test iof__ev_mem_refill starts with). */
static inline int iof__ev_mem_ok(void) {
  long want = 2 * atomic_load_explicit(&iof__ev_largest, memory_order_relaxed) +
              64 * 1024;
  if (__builtin_expect(
          atomic_load_explicit(&iof__ev_reserve, memory_order_acquire) &&
              atomic_load_explicit(&iof__ev_reserve_size,
                                   memory_order_relaxed) >= want,
          1))
    return 0;
  return iof__ev_mem_refill();
}
IOF_HIDDEN int iof__ev_fd_probe(void);
IOF_HIDDEN int iof__ev_syserr_take(void);

/* The runtime's own descriptors (runtime_fds.c). enter/leave bracket the
 * libev calls that make or close them, on this thread; list protects an
 * fd where it is. The rest is for
 * libiofiber-hook: whether a bracket is open here; adopt moves a new fd
 * high (close-on-exec) and lists it, returning its number; owned: listed;
 * forget: unlist; next: the lowest listed fd >= from, or -1. */
IOF_HIDDEN void iof__rt_fd_enter(void);
IOF_HIDDEN void iof__rt_fd_leave(void);
IOF_HIDDEN void iof__rt_fd_list(int fd);
IOF_API bool iof__rt_fd_scope(void);
IOF_API int iof__rt_fd_adopt(int fd);
IOF_API bool iof__rt_fd_owned(int fd);
IOF_API void iof__rt_fd_forget(int fd);
IOF_API int iof__rt_fd_next(int from);
/* A listed fd the program may have after all (ev_guard's reserved pair:
 * closed, to be taken again later): true once it is free. */
IOF_API bool iof__rt_fd_release(int fd);
/* Without the hook nothing moves libev's descriptors: these name them
 * where they are. lowest_free: the lowest unused number, or -1 (where the
 * kernel puts the next one); claim: lists fd if it is now open, unlisted,
 * and of the kind libev makes (IOF__RT_EPOLL: an epoll instance;
 * IOF__RT_WAKEUP: an eventfd or a pipe), returning fd, else -1. */
enum { IOF__RT_EPOLL, IOF__RT_WAKEUP };
IOF_HIDDEN int iof__rt_fd_lowest_free(void);
IOF_HIDDEN int iof__rt_fd_claim(int fd, int kind);

/* Fails every fiber waiting on a socket of io with -ECANCELED: io's
 * shutdown, on io's thread (or while nobody runs io). */
IOF_HIDDEN void iof__io_cancel_socket_waits(iof_io_context *io);

/* Closes and frees every socket still open on io (its destroy). */
IOF_HIDDEN void iof__io_close_all(iof_io_context *io);

#endif
