/* The io_context: a libev loop and the run queue of its fibers.
 *
 * Posts from the thread running the context go to a local queue with no
 * lock; posts from other threads go to a locked remote queue and wake the
 * loop through ev_async. The run loop resumes the fibers ready at the start
 * of a batch, then polls libev (without blocking while fibers are ready),
 * and returns once no work is counted and nothing is ready. Attached to a
 * host's loop, the same batches run from libev watchers instead. */
#include <iofiber/io_context.h>

#include "io/io_internal.h"

#include <errno.h>
#include <ev.h>
#include <sched.h>
#include <stdlib.h>

static bool on_loop_thread(const iof_io_context *io) {
  return iof__thread_runs(&io->ctx);
}

static void take_remote(iof_io_context *io) {
  if (!atomic_load_explicit(&io->remote_pending, memory_order_acquire)) return;
  pthread_mutex_lock(&io->rlock);
  iof__q_append(&io->local, &io->remote);
  atomic_store_explicit(&io->remote_pending, false, memory_order_relaxed);
  pthread_mutex_unlock(&io->rlock);
}

static bool has_ready(iof_io_context *io) {
  return io->local.head ||
         atomic_load_explicit(&io->remote_pending, memory_order_acquire);
}

/* A call from another thread that wakes the loop once the run may
 * return: the run's owner may destroy io as soon as it sees the change, so
 * the caller counts itself in remote_posting (which destroy waits for)
 * before it makes the change, and drops the count once ev_async_send is
 * done with io. */
static void remote_wake_begin(iof_io_context *io) {
  atomic_fetch_add_explicit(&io->remote_posting, 1, memory_order_relaxed);
}

static void remote_wake_end(iof_io_context *io) {
  ev_async_send(io->loop, &io->wake);
  atomic_fetch_sub_explicit(&io->remote_posting, 1, memory_order_release);
}

void iof__io_enqueue(iof_io_context *io, iof_fiber *h) {
  if (on_loop_thread(io)) {
    iof__q_push(&io->local, h);
    if (!io->own_loop && !ev_is_active(&io->idle))
      ev_idle_start(io->loop, &io->idle);
    return;
  }
  /* Only the post that finds the remote queue empty wakes the loop: the
   * loop takes the whole queue at once, so a later post joins a queue
   * whose wake-up is already on its way (ev_async_send costs a full
   * memory fence even when it sends nothing: a quarter of a launch).
   * Once the lock is released the loop may run h to its end and the
   * context be destroyed while the waker still wakes it: destroy waits
   * for remote_posting to drop, counted under the lock, so the drain
   * that takes h sees it (waking under the lock instead made the
   * spinning loop block on it: 2.5x slower hops). */
  pthread_mutex_lock(&io->rlock);
  bool wake = !atomic_load_explicit(&io->remote_pending, memory_order_relaxed);
  if (wake) remote_wake_begin(io);
  iof__q_push(&io->remote, h);
  atomic_store_explicit(&io->remote_pending, true, memory_order_release);
  pthread_mutex_unlock(&io->rlock);
  if (wake) remote_wake_end(io);
}

static int io_post(const void *ex, iof_fiber *h) {
  iof_io_context *io = (iof_io_context *)ex;
  if (iof__refuse_after_shutdown(&io->ctx, h)) return -ESHUTDOWN;
  iof__io_enqueue(io, h);
  return 0;
}

static int io_dispatch(const void *ex, iof_fiber *h) {
  iof_io_context *io = (iof_io_context *)ex;
  if (iof__refuse_after_shutdown(&io->ctx, h)) return -ESHUTDOWN;
  if (on_loop_thread(io)) return 1;
  iof__io_enqueue(io, h);
  return 0;
}

static iof_execution_context *io_context_of(const void *ex) {
  return &((iof_io_context *)ex)->ctx;
}

void iof__io_work_started(iof_io_context *io) {
  atomic_fetch_add_explicit(&io->work, 1, memory_order_relaxed);
}

void iof__io_work_finished(iof_io_context *io) {
  if (on_loop_thread(io)) {
    atomic_fetch_sub_explicit(&io->work, 1, memory_order_acq_rel);
    return;
  }
  /* Not the last work: one decrement, nobody to wake. */
  long w = atomic_load_explicit(&io->work, memory_order_relaxed);
  while (w > 1)
    if (atomic_compare_exchange_weak_explicit(
            &io->work, &w, w - 1, memory_order_acq_rel, memory_order_relaxed))
      return;
  /* Likely the last: a blocked run must see it (and may then return and
   * its owner destroy io). The count is published by the release of the
   * decrement, which the run's read of the work acquires. */
  remote_wake_begin(io);
  if (atomic_fetch_sub_explicit(&io->work, 1, memory_order_acq_rel) == 1)
    ev_async_send(io->loop, &io->wake); /* let a blocked run see it */
  atomic_fetch_sub_explicit(&io->remote_posting, 1, memory_order_release);
}

static void io_work_started(const void *ex) {
  iof__io_work_started((iof_io_context *)ex);
}

static void io_work_finished(const void *ex) {
  iof__io_work_finished((iof_io_context *)ex);
}

const iof_executor_vtbl iof__io_vtbl = {
    io_dispatch,   io_post,         NULL,
    io_context_of, io_work_started, io_work_finished};

/* Names a fiber yielding at home for iof_fiber_walk (io_yield). */
static const iof_awaitable_vtbl yield_label = {NULL, NULL, NULL};

__attribute__((constructor)) static void name_io(void) {
  iof__debug_label(&iof__io_vtbl, "io_context", NULL);
  iof__debug_label(&yield_label, "yield", NULL);
}

/* Resumes the fibers ready now, at most max of them (max < 0: all);
 * fibers made ready meanwhile wait for the next batch, so a fiber that
 * yields in a loop cannot starve libev. Returns how many ran. */
static long run_batch(iof_io_context *io, long max) {
  take_remote(io);
  /* Saved and restored: a fiber of the batch may run another loop. */
  iof_fiber_queue outer = io->batch;
  iof_fiber *outer_runner = io->batch_runner;
  long outer_handed = io->handed;
  io->batch = io->local;
  io->local.head = io->local.tail = NULL;
  iof_thread_state *th = iof__thread_fast(); /* the loop's stack: stays */
  /* Hand-offs skip the count of max: only for an unlimited batch. */
  io->batch_runner = max < 0 ? th->current : NULL;
  io->handed = 0;
  long n = 0;
  while (io->batch.head && (max < 0 || n < max)) {
    iof__fiber_run(th, iof__io_batch_pop(io));
    n++;
  }
  n += io->handed;
  iof_fiber_queue batch = io->batch;
  io->batch = outer;
  io->batch_runner = outer_runner;
  io->handed = outer_handed;
  if (batch.head) { /* over the limit: back in front, in order */
    batch.tail->next = io->local.head;
    if (!io->local.head) io->local.tail = batch.tail;
    io->local.head = batch.head;
  }
  return n;
}

/* Once io shuts down, the fibers waiting on its sockets are failed here,
 * on io's thread: the home path of io waits (wait.c) relies on it instead
 * of sched/'s shutdown registry. */
static void cancel_waits_on_shutdown(iof_io_context *io) {
  if (__builtin_expect(
          !atomic_load_explicit(&io->ctx.state, memory_order_acquire), 1) ||
      io->waits_cancelled)
    return;
  io->waits_cancelled = true;
  iof__io_cancel_socket_waits(io);
}

static bool idle_now(iof_io_context *io) {
  return atomic_load(&io->work) == 0 && !has_ready(io);
}

/* ---- attached mode: the host's ev_run drives batches ------------------ */

static void attached_run(iof_io_context *io) {
  /* Running for the batch, as in a run: a fiber's run, poll or destroy of
   * its own context from inside gets -EBUSY (a run there nested a loop
   * on the fiber's stack that waited for the fiber's own chain: a hang),
   * and so does another thread's run meanwhile. */
  int expect = 0;
  if (!atomic_compare_exchange_strong(&io->running, &expect, 1)) return;
  iof_run_mark mark;
  iof__run_mark_push(&mark, &io->ctx);
  cancel_waits_on_shutdown(io);
  run_batch(io, -1);
  iof__run_mark_pop(&mark);
  if (io->fd_fresh) iof__fd_check_now(io); /* see iof__fd_check_now */
  if (io->local.head) {
    if (!ev_is_active(&io->idle)) ev_idle_start(io->loop, &io->idle);
  } else if (ev_is_active(&io->idle)) {
    ev_idle_stop(io->loop, &io->idle);
  }
  /* Pending work keeps the host loop alive (the async watcher is ref'd). */
  bool want_ref = atomic_load(&io->work) > 0;
  if (want_ref && !io->wake.data) {
    ev_ref(io->loop);
    io->wake.data = io;
  } else if (!want_ref && io->wake.data) {
    ev_unref(io->loop);
    io->wake.data = NULL;
  }
  atomic_store(&io->running, 0);
}

static void wake_cb(struct ev_loop *loop, ev_async *w, int revents) {
  (void)loop;
  (void)revents;
  iof_io_context *io =
      (iof_io_context *)((char *)w - offsetof(iof_io_context, wake));
  if (!io->own_loop && atomic_load(&io->running) == 0) attached_run(io);
}

static void idle_cb(struct ev_loop *loop, ev_idle *w, int revents) {
  (void)loop;
  (void)revents;
  iof_io_context *io =
      (iof_io_context *)((char *)w - offsetof(iof_io_context, idle));
  if (atomic_load(&io->running) == 0) attached_run(io);
}

static void prepare_cb(struct ev_loop *loop, ev_prepare *w, int revents) {
  (void)loop;
  (void)revents;
  iof_io_context *io =
      (iof_io_context *)((char *)w - offsetof(iof_io_context, prepare));
  if (atomic_load(&io->running) == 0) attached_run(io);
}

static void deadline_cb(struct ev_loop *loop, ev_timer *w, int revents) {
  (void)loop;
  (void)revents;
  iof_io_context *io =
      (iof_io_context *)((char *)w - offsetof(iof_io_context, deadline));
  io->timed_out = true;
}

/* Timers of waits on this context's thread: libev's own heap. The
 * ev_timer lives in the timer's impl bytes (on the waiter's stack). */
_Static_assert(sizeof(ev_timer) <= IOF__TIMER_IMPL, "ev_timer fits in impl");

static void io_timer_cb(struct ev_loop *loop, ev_timer *e, int revents) {
  (void)loop;
  (void)revents;
  iof__timer *t = e->data;
  t->fire(t->arg);
}

static int io_timer_arm(iof_execution_context *ctx, iof__timer *t) {
  iof_io_context *io = (iof_io_context *)ctx;
  int r = iof__ev_mem_ok(); /* libev's heap must be able to grow */
  if (r < 0) return r;
  ev_timer *e = (ev_timer *)(void *)t->impl;
  /* libev counts from its cached "now", stale by however long the fibers
   * ran since the loop last woke: refresh it, or the timer fires early;
   * and count from the absolute deadline read before the refresh, so that
   * libev's now is later, never earlier. A preemption between the two
   * reads would make the timer late by as much: read again then. A
   * deadline passed already (an in-order sleep preempted before it got
   * here) keeps its place among the other due timers: libev takes a
   * negative interval and fires it with them, in order of expiry. */
  int64_t before, left;
  for (int tries = 0;; tries++) {
    before = iof__now_ns();
    ev_now_update(io->loop);
    if (iof__now_ns() - before < 50000 || tries == 3) break;
  }
  left = iof__sat_sub(t->deadline, before);
  ev_timer_init(e, io_timer_cb, (double)left / 1e9, 0.);
  e->data = t;
  ev_timer_start(io->loop, e);
  return 0;
}

static void io_timer_cancel(iof_execution_context *ctx, iof__timer *t) {
  ev_timer_stop(((iof_io_context *)ctx)->loop, (ev_timer *)(void *)t->impl);
}

/* A stretched poll interval (poll_every above POLL_EVERY) holds only
 * within the tick of the last poll: slow fibers must not delay I/O by a
 * whole interval. */
static bool stretch_holds(const iof_io_context *io) {
  return io->poll_every == POLL_EVERY || iof__coarse_now_ns() == io->poll_tick;
}

/* iof_yield of a fiber at home: straight onto the local queue (the loop
 * resumes it with the next batch) and the thread to the next fiber of this
 * batch, or back to the loop. Only this thread takes from the local queue,
 * so queueing before the switch away is safe. With nothing else ready, the
 * fiber continues at once (see below). */
static int io_yield(iof_execution_context *ctx, iof_thread_state *th,
                    iof_fiber *self, iof_fiber *next) {
  iof_io_context *io = (iof_io_context *)ctx;
  bool alone =
      io->batch_runner == self->resumer && !io->batch.head && !io->local.head &&
      !atomic_load_explicit(&io->remote_pending, memory_order_relaxed) &&
      io->handed < io->poll_every - 1 &&
      ((io->handed & (POLL_EVERY - 1)) != POLL_EVERY - 1 || stretch_holds(io));
  if (alone && !next) {
    /* Nothing else is ready: the loop would resume this fiber next. It
     * continues at once, counted as run; every poll_every-th yield still
     * goes through the loop, which polls I/O and timers then. */
    io->handed++;
    iof__refresh_allocator(self); /* as every resume */
    return 0;
  }
  if (alone) /* next is the only ready fiber: the loop would run it now */
    iof__q_push(&io->batch, next);
  else
    iof__q_push(&io->local, next ? next : self);
  if (!io->own_loop && !ev_is_active(&io->idle))
    ev_idle_start(io->loop, &io->idle); /* a host's loop must not block */
  iof__io_park(th, self, io, &yield_label, NULL);
  return 0;
}

static const iof__ctx_kind io_kind = {io_timer_arm, io_timer_cancel,
                                      &iof__io_vtbl, io_yield};

iof_io_context *iof__io_of(iof_execution_context *ctx) {
  return ctx && ctx->kind == &io_kind ? (iof_io_context *)ctx : NULL;
}

/* The io_context's own service, made first so it is destroyed last: its
 * destroy closes sockets left open. Pending waits on the context are
 * cancelled at shutdown by the wait registry of sched/, as every wait,
 * except socket waits of the home path: the loop's thread fails those. */
typedef struct io_service {
  iof_service base;
  iof_io_context *io;
} io_service;

static iof_service *io_service_create(iof_execution_context *ctx) {
  io_service *s = calloc(1, sizeof *s);
  if (s) s->io = (iof_io_context *)ctx;
  return s ? &s->base : NULL;
}

/* Wakes a loop blocked in libev, so that its thread fails the sockets'
 * waiters (cancel_waits_on_shutdown); a destroy does that itself. */
static void io_service_shutdown(iof_service *svc) {
  iof_io_context *io = ((io_service *)svc)->io;
  ev_async_send(io->loop, &io->wake);
}

static void io_service_destroy(iof_service *svc) {
  iof__io_close_all(((io_service *)svc)->io);
  free(svc);
}

static const iof_service_key io_service_key = {
    "iofiber.io", io_service_create, io_service_shutdown, io_service_destroy};

static iof_io_context *make(struct ev_loop *loop, bool own) {
  /* The async watcher may make libev create its pipe: a descriptor must
   * be free (libev would abort otherwise), and memory for its arrays. */
  int fe = iof__ev_fd_probe();
  if (fe < 0 || iof__ev_mem_ok() < 0) {
    errno = fe < 0 ? -fe : ENOMEM;
    return NULL;
  }
  iof_io_context *io = calloc(1, sizeof *io);
  if (!io || iof_execution_context_init(&io->ctx) != 0) {
    free(io);
    errno = ENOMEM;
    return NULL;
  }
  io->ctx.kind = &io_kind;
  io->spin_policy.credit = 4;
  io->loop = loop;
  io->own_loop = own;
  io->poll_every = POLL_EVERY;
  if (!iof_make_service(&io->ctx, &io_service_key)) {
    iof_execution_context_destroy(&io->ctx);
    free(io);
    errno = ENOMEM;
    return NULL;
  }
  pthread_mutex_init(&io->rlock, NULL);
  ev_async_init(&io->wake, wake_cb);
  io->rt_fds[0] = io->rt_fds[1] = -1;
  int wake_fd = own ? iof__rt_fd_lowest_free() : -1;
  if (own) iof__rt_fd_enter(); /* libev may make its eventfd here */
  ev_async_start(loop, &io->wake);
  if (own) iof__rt_fd_leave(); /* a host's loop keeps its fds its own */
  int se = iof__ev_syserr_take();
  if (se) {
    /* Another thread took the probed descriptor: libev got the reserved
     * pair instead. An owned loop goes (closing its pipe); a host's loop
     * keeps the pipe it now has. */
    ev_async_stop(loop, &io->wake);
    iof_execution_context_destroy(&io->ctx);
    pthread_mutex_destroy(&io->rlock);
    free(io);
    errno = se == ENFILE ? ENFILE : EMFILE;
    return NULL;
  }
  /* Listed unless the hook moved and listed it already. */
  if (own) io->rt_fds[1] = iof__rt_fd_claim(wake_fd, IOF__RT_WAKEUP);
  ev_prepare_init(&io->fd_check, iof__fd_check);
  ev_idle_init(&io->idle, idle_cb);
  ev_timer_init(&io->deadline, deadline_cb, 0., 0.);
  if (!own) {
    ev_prepare_init(&io->prepare, prepare_cb);
    ev_prepare_start(loop, &io->prepare);
    ev_unref(loop); /* the prepare watcher must not keep the host alive */
    ev_unref(loop); /* nor the async one, until work is pending */
    io->wake.data = NULL;
  }
  return io;
}

/* libev closes its own descriptors here. */
static void destroy_loop(struct ev_loop *loop) {
  iof__rt_fd_enter();
  ev_loop_destroy(loop);
  iof__rt_fd_leave();
}

iof_io_context *iof_io_context_create(void) {
  iof__ev_init();
  if (iof__ev_mem_ok() < 0) {
    errno = ENOMEM;
    return NULL;
  }
  errno = 0;
  int epoll_fd = iof__rt_fd_lowest_free(); /* where libev's will go */
  iof__rt_fd_enter();
  struct ev_loop *loop = ev_loop_new(EVFLAG_AUTO | EVFLAG_NOSIGMASK);
  iof__rt_fd_leave();
  if (!loop) {
    /* epoll_create's errno survives libev's cleanup. */
    errno = errno == EMFILE || errno == ENFILE ? errno : ENOMEM;
    return NULL;
  }
  iof_io_context *io = make(loop, true);
  if (!io) destroy_loop(loop);
  if (io) io->rt_fds[0] = iof__rt_fd_claim(epoll_fd, IOF__RT_EPOLL);
  return io;
}

iof_io_context *iof_io_context_attach(struct ev_loop *loop) {
  if (!loop) {
    errno = EINVAL;
    return NULL;
  }
  iof__ev_init();
  return make(loop, false);
}

iof_executor_ref iof_io_context_executor(iof_io_context *io) {
  return iof_executor_make(io, io ? &iof__io_vtbl : NULL);
}

iof_execution_context *iof_io_context_context(iof_io_context *io) {
  return io ? &io->ctx : NULL;
}

struct ev_loop *iof_io_context_loop(iof_io_context *io) {
  return io ? io->loop : NULL;
}

/* Fibers of this context are away in iof_run on another context and the
 * run loop just ran fibers: watch the remote queue for a while (the spin
 * policy's length) before blocking in epoll, since a cross-thread wake-up (the
 * eventfd write, the other thread's futex wake of this one) costs more than the
 * hop itself. libev is polled without blocking every few microseconds
 * meanwhile, so I/O is not held up. True if a fiber came. */
static bool spin_for_return(iof_io_context *io, int64_t start, int64_t *spun) {
  int64_t polled = start, len = iof__spin_begin(&io->spin_policy, start);
  for (int i = 1; iof__spin_step(start, i, len, spun); i++) {
    if (has_ready(io)) return true;
    if (i & 255) continue;
    int64_t now = iof__now_ns();
    if (now - polled > 5000) {
      ev_run(io->loop, EVRUN_NOWAIT);
      polled = now;
      /* The poll ran a stop's wake-up or run_for's deadline: the run
       * ends now (its wake-up is spent, libev would not return). */
      if (atomic_load(&io->stopped) || io->timed_out) break;
    }
  }
  return has_ready(io);
}

/* After a non-blocking poll made while fibers were ready: the next one
 * comes twice as many fibers later if this one found nothing (no fiber
 * woken, no remote post) within the same tick, else after POLL_EVERY. A
 * non-blocking epoll_wait costs a system call (about 1 us under a
 * hypervisor with page-table isolation, 17 ns per yield at 64), and a
 * loop of fibers that only compute or yield gains nothing from it; the
 * tick bounds how long I/O can go unpolled whatever the fibers cost. A
 * host's loop may have watchers of its own: its interval stays fixed. */
static void poll_after(iof_io_context *io, bool found) {
  int64_t tick = iof__coarse_now_ns();
  if (found || tick != io->poll_tick || !io->own_loop)
    io->poll_every = POLL_EVERY;
  else if (io->poll_every < POLL_EVERY_MAX)
    io->poll_every *= 2;
  io->poll_tick = tick;
}

/* The one loop behind run, run_one, poll and run_for. max_fibers < 0: no
 * limit; wait: block in libev when nothing is ready; timeout_ns < 0: none. */

static int drive(iof_io_context *io, long max_fibers, bool wait,
                 int64_t timeout_ns) {
  if (!io) return -EINVAL;
  /* From an iof_fiber_walk callback: a fiber that ended would wait for the
   * registry the walk holds on this very thread. */
  if (iof__debug_walking) return -EDEADLK;
  int expect = 0;
  if (timeout_ns >= 0 && iof__ev_mem_ok() < 0) return -ENOMEM;
  if (!atomic_compare_exchange_strong(&io->running, &expect, 1)) return -EBUSY;
  iof_run_mark mark;
  iof__run_mark_push(&mark, &io->ctx);
  io->timed_out = false; /* a past run_for's expiry must not end this run */
  /* Running out of work is no stop: a fiber launched since then is run
   * now, never lost behind a stop nobody asked for. */
  atomic_store(&io->idle_stopped, false);
  if (timeout_ns >= 0) {
    ev_now_update(io->loop);
    ev_timer_set(&io->deadline, (double)timeout_ns / 1e9, 0.);
    ev_timer_start(io->loop, &io->deadline);
  }
  long ran = 0, polled_at = 0, spun_at = 0;
  int64_t missed = 0; /* a spin's start, judged after the sleep */
  while (!atomic_load(&io->stopped) && !io->timed_out) {
    cancel_waits_on_shutdown(io);
    ran += run_batch(io, max_fibers >= 0 ? max_fibers - ran : -1);
    if (max_fibers >= 0 && ran >= max_fibers) break;
    if (idle_now(io)) {
      atomic_store(&io->idle_stopped, true);
      break;
    }
    if (!wait) {
      ev_run(io->loop, EVRUN_NOWAIT);
      ran += run_batch(io, max_fibers >= 0 ? max_fibers - ran : -1);
      break;
    }
    /* While fibers are ready, poll libev only every poll_every of them: a
     * non-blocking epoll_wait per batch would cost a syscall per switch
     * when two fibers alternate. I/O still gets its turn at least once per
     * tick of the coarse clock. */
    bool ready = has_ready(io);
    if (ready && ran - polled_at < io->poll_every && stretch_holds(io))
      continue;
    if (!ready && ran != spun_at &&
        atomic_load_explicit(&io->ctx.away, memory_order_relaxed) > 0) {
      spun_at = ran;
      if (iof__spin_allowed(&io->spin_policy)) {
        int64_t start = iof__now_ns(), spun = 0;
        bool found = spin_for_return(io, start, &spun);
        missed = iof__spin_result(&io->spin_policy, found, start, spun);
        /* Found or not, the loop's checks come first: the spin's polls
         * may have run a stop's wake-up, run_for's deadline or the end
         * of the work, which the block below would wait for again. */
        continue;
      }
    }
    if (ready) {
      iof_fiber *tail = io->local.tail;
      ev_run(io->loop, EVRUN_NOWAIT);
      poll_after(io, io->local.tail != tail ||
                         atomic_load_explicit(&io->remote_pending,
                                              memory_order_relaxed));
    } else {
      ev_run(io->loop, EVRUN_ONCE);
      iof__spin_woke(&io->spin_policy, missed);
      missed = 0;
      io->poll_every = POLL_EVERY;
    }
    polled_at = ran;
  }
  if (timeout_ns >= 0) ev_timer_stop(io->loop, &io->deadline);
  iof__run_mark_pop(&mark);
  atomic_store(&io->running, 0);
  return ran > 0x7fffffff ? 0x7fffffff : (int)ran;
}

int iof_io_context_run(iof_io_context *io) {
  return drive(io, -1, true, -1);
}

int iof_io_context_run_one(iof_io_context *io) {
  return drive(io, 1, true, -1);
}

int iof_io_context_poll(iof_io_context *io) {
  return drive(io, -1, false, -1);
}

int iof_io_context_run_for(iof_io_context *io, int64_t ns) {
  return drive(io, -1, true, ns < 0 ? 0 : ns);
}

void iof_io_context_stop(iof_io_context *io) {
  if (!io) return;
  /* The run may see the flag and return, and its owner destroy io, before
   * the wake-up below is sent: counted as a remote post. */
  remote_wake_begin(io);
  atomic_store(&io->stopped, true);
  remote_wake_end(io);
}

bool iof_io_context_stopped(const iof_io_context *io) {
  return io && (atomic_load(&io->stopped) || atomic_load(&io->idle_stopped));
}

void iof_io_context_restart(iof_io_context *io) {
  if (!io) return;
  atomic_store(&io->stopped, false);
  atomic_store(&io->idle_stopped, false);
}

int iof_io_context_destroy(iof_io_context *io) {
  if (!io) return -EINVAL;
  if (iof__debug_walking) return -EDEADLK; /* as drive */
  /* Held for the drain: a fiber (or its on_done) that calls run, poll or
   * destroy from inside it gets -EBUSY, as from inside a run, instead of
   * a nested loop on its own stack that waits for its own chain to end. */
  int expect = 0;
  if (!atomic_compare_exchange_strong(&io->running, &expect, 1)) return -EBUSY;
  /* (1) refuse launches, (2) services cancel what they hold, (3) run the
   * ready fibers to their end here, (4) then cancel never-started ones,
   * then (5) services are destroyed. */
  iof_execution_context_shutdown(&io->ctx);
  iof_run_mark mark;
  iof__run_mark_push(&mark, &io->ctx);
  cancel_waits_on_shutdown(io);
  /* (4) waits until (3) is over: never-started fibers are set aside while
   * any started one is ready, then cancelled (a raw fiber is run). */
  iof_fiber_queue later = {NULL, NULL};
  for (long i = 0; i < 10000000; i++) {
    take_remote(io);
    iof_fiber *f = iof__q_pop(&io->local);
    if (!f) {
      ev_run(io->loop, EVRUN_NOWAIT); /* completions already delivered */
      take_remote(io);
      f = iof__q_pop(&io->local);
    }
    if (f && f->state == IOF_FS_CREATED) {
      iof__q_push(&later, f);
      continue;
    }
    if (!f) f = iof__q_pop(&later);
    if (!f) break;
    iof__drain_one(f);
  }
  iof__run_mark_pop(&mark);
  /* Released once no fiber runs here: services' destroy callbacks (5) may
   * close this context's sockets from this thread, as outside a run. */
  atomic_store(&io->running, 0);
  /* As the thread pool: a chain still counted would be woken into freed
   * memory; keep the context (shut down) for a later destroy. */
  long left = atomic_load(&io->work);
  if (left > 0) {
    iof__report_stuck("io_context", (size_t)left);
    return -EBUSY;
  }
  iof_execution_context_destroy(&io->ctx);
  if (!io->own_loop) {
    if (io->wake.data) ev_unref(io->loop);
    ev_ref(io->loop);
    ev_ref(io->loop);
    ev_prepare_stop(io->loop, &io->prepare);
    ev_idle_stop(io->loop, &io->idle);
  }
  while (atomic_load_explicit(&io->remote_posting, memory_order_acquire))
    sched_yield();
  ev_prepare_stop(io->loop, &io->fd_check); /* a host's loop lives on */
  ev_async_stop(io->loop, &io->wake);
  if (io->own_loop) destroy_loop(io->loop);
  /* Closed by libev: the numbers are free for the program again. */
  for (int i = 0; i < 2; i++)
    if (io->rt_fds[i] >= 0) iof__rt_fd_forget(io->rt_fds[i]);
  pthread_mutex_destroy(&io->rlock);
  free(io);
  return 0;
}
