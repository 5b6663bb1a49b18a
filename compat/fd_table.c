/* The fd table and the wait loop every blocking compat call shares (see
 * fd_table.h). */
#include "compat/fd_table.h"

#include <iofiber/compat_io.h>
#include "compat/signal_internal.h"
#include "compat/sigmask_internal.h"

#include <errno.h>
#include <string.h>
#include <fcntl.h>
#include <stdlib.h>
#include <sys/stat.h>

#include <iofiber/launch.h>

#define CHUNK_BITS 10
#define CHUNK_SIZE (1 << CHUNK_BITS)
#define CHUNKS 4096 /* 4M fd numbers */

static _Atomic(iof__fd_slot *) chunks[CHUNKS];

bool iof__compat_forked;

/* Runs in the child, on the forking thread: flags it when that was a
 * fiber (see fd_table.h). */
static void forked_child(void) {
  if (!iof__compat_fiber()) return;
  iof__sigmask_apply_real(); /* the child is that fiber thread alone */
  iof__compat_forked = true;
  for (int fd = 0; fd <= 2; fd++) iof__compat_child_std_blocking(fd);
}

IOF_API void iof_compat_fork_child(void) {
  forked_child();
}

__attribute__((constructor)) static void compat_fork_handler(void) {
  (void)pthread_atfork(NULL, NULL, forked_child);
}

iof__fd_slot *iof__fd_slot_peek(int fd) {
  if (fd < 0 || (fd >> CHUNK_BITS) >= CHUNKS) return NULL;
  iof__fd_slot *c =
      atomic_load_explicit(&chunks[fd >> CHUNK_BITS], memory_order_acquire);
  return c ? &c[fd & (CHUNK_SIZE - 1)] : NULL;
}

iof__fd_slot *iof__fd_slot_get(int fd) {
  if (fd < 0 || (fd >> CHUNK_BITS) >= CHUNKS) return NULL;
  _Atomic(iof__fd_slot *) *p = &chunks[fd >> CHUNK_BITS];
  iof__fd_slot *c = atomic_load_explicit(p, memory_order_acquire);
  if (!c) {
    /* Racing threads may both allocate: one wins, the other frees. */
    iof__fd_slot *n = calloc(CHUNK_SIZE, sizeof *n);
    if (!n) return NULL;
    if (atomic_compare_exchange_strong_explicit(p, &c, n, memory_order_acq_rel,
                                                memory_order_acquire))
      c = n;
    else
      free(n);
  }
  return &c[fd & (CHUNK_SIZE - 1)];
}

/* Held for a few instructions (a link, a generation check, a wake-up
 * post): a spin that yields beats a mutex the hook could interpose. */
static void slot_lock(iof__fd_slot *s) {
  int expect = 0;
  while (!atomic_compare_exchange_weak_explicit(
      &s->lock, &expect, 1, memory_order_acquire, memory_order_relaxed)) {
    expect = 0;
    iof__libc.sched_yield();
  }
}

static void slot_unlock(iof__fd_slot *s) {
  atomic_store_explicit(&s->lock, 0, memory_order_release);
}

static int64_t timeo_ns(int fd, int name) {
  struct timeval tv = {0, 0};
  socklen_t len = sizeof tv;
  if (iof__libc.getsockopt(fd, SOL_SOCKET, name, &tv, &len) != 0) return 0;
  /* Capped (146 years) so that the waits can add it to the clock. */
  if (tv.tv_sec >= INT64_MAX / 2 / 1000000000) return INT64_MAX / 2;
  return (int64_t)tv.tv_sec * 1000000000 + (int64_t)tv.tv_usec * 1000;
}

bool iof__fd_lingers(int fd) {
  struct linger lg = {0, 0};
  socklen_t len = sizeof lg;
  return iof__libc.getsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, &len) == 0 &&
         lg.l_onoff && lg.l_linger > 0;
}

unsigned iof__fd_learn(int fd, iof__fd_slot *s) {
  int fl = iof__libc.fcntl(fd, F_GETFL);
  if (fl < 0) return 0;
  unsigned st = IOF__FD_KNOWN;
  if (fl & O_NONBLOCK) {
    st |= IOF__FD_USER_NB;
  } else {
    struct stat sb;
    if (fstat(fd, &sb) != 0) return 0;
    /* Files and block devices are always "ready" to epoll's mind (it
     * refuses them); a terminal's O_NONBLOCK would be shared with the
     * shell that owns it. Those block their thread, as documented. */
    /* Likewise a pipe on stdin/stdout/stderr: its other users (the
     * processes of a pipeline, make's jobs) would see O_NONBLOCK too. */
    /* The shared ones are waited for without O_NONBLOCK: readiness
     * first, then the plain call (iof__fd_wait_first). */
    if (S_ISREG(sb.st_mode) || S_ISDIR(sb.st_mode) || S_ISBLK(sb.st_mode)) {
      st |= IOF__FD_PASS;
    } else if ((S_ISCHR(sb.st_mode) && isatty(fd)) ||
               (fd <= 2 && S_ISFIFO(sb.st_mode))) {
      st |= IOF__FD_PASS | IOF__FD_SHARED;
    } else if (iof__libc.fcntl(fd, F_SETFL, fl | O_NONBLOCK) == 0) {
      st |= IOF__FD_RT_NB;
      if (S_ISSOCK(sb.st_mode)) {
        atomic_store(&s->rcv_ns, timeo_ns(fd, SO_RCVTIMEO));
        atomic_store(&s->snd_ns, timeo_ns(fd, SO_SNDTIMEO));
        atomic_store(&s->linger, iof__fd_lingers(fd));
      }
    } else {
      st |= IOF__FD_PASS;
    }
  }
  unsigned expect = 0;
  if (!atomic_compare_exchange_strong(&s->flags, &expect, st)) return expect;
  return st;
}

/* Whether a cancelled waiter must be seen leaving before the fd closes:
 * its io thread may still have the fd in its epoll set, and closing under
 * it would race with libev's epoll_ctl. Not when the io_context is not
 * being run (nothing touches the fd) or when this very thread runs it
 * outside a fiber (the waiter could never leave while we wait). */
static bool must_see_leave(const iof__fd_waiter *w, bool in_fiber) {
  iof_io_context *io = w->fw.op.io;
  if (!atomic_load_explicit(&io->running, memory_order_acquire)) return false;
  return in_fiber || !iof__thread_runs(&io->ctx);
}

static bool leaving(iof__fd_slot *s, unsigned gen, bool in_fiber) {
  for (iof__fd_waiter *w = s->waiters; w; w = w->next)
    if (w->gen == gen && must_see_leave(w, in_fiber)) return true;
  return false;
}

void iof__fd_range_reset(unsigned first, unsigned last) {
  unsigned end = (unsigned)CHUNKS << CHUNK_BITS; /* past the table */
  if (last >= end) last = end - 1;
  for (unsigned fd = first; fd <= last && fd >= first;) {
    if (!atomic_load_explicit(&chunks[fd >> CHUNK_BITS],
                              memory_order_acquire)) {
      fd = ((fd >> CHUNK_BITS) + 1) << CHUNK_BITS; /* no records there */
      continue;
    }
    iof__fd_reset((int)fd, 0);
    fd++;
  }
}

void iof__fd_reset(int fd, unsigned flags) {
  iof__fd_slot *s = flags ? iof__fd_slot_get(fd) : iof__fd_slot_peek(fd);
  if (!s) return;
  bool in_fiber = iof__compat_fiber() != NULL;
  if (iof__compat_forked) {
    /* The child's copy of the table: its waiters are the parent's
     * fibers, which the parent's close would end, not ours. */
    atomic_fetch_add_explicit(&s->gen, 1, memory_order_relaxed);
    atomic_store_explicit(&s->rcv_ns, 0, memory_order_relaxed);
    atomic_store_explicit(&s->snd_ns, 0, memory_order_relaxed);
    atomic_store_explicit(&s->linger, false, memory_order_relaxed);
    atomic_store_explicit(&s->flags, flags, memory_order_release);
    return;
  }
  slot_lock(s);
  unsigned gen = atomic_fetch_add_explicit(&s->gen, 1, memory_order_acq_rel);
  /* The waiters unlink themselves when they disarm (on their io thread). */
  for (iof__fd_waiter *w = s->waiters; w; w = w->next)
    if (w->gen == gen) iof__fd_wait_cancel(&w->fw, -EBADF);
  atomic_store_explicit(&s->rcv_ns, 0, memory_order_relaxed);
  atomic_store_explicit(&s->snd_ns, 0, memory_order_relaxed);
  atomic_store_explicit(&s->drained, false, memory_order_relaxed);
  atomic_store_explicit(&s->linger, false, memory_order_relaxed);
  atomic_store_explicit(&s->flags, flags, memory_order_release);
  bool wait = leaving(s, gen, in_fiber);
  slot_unlock(s);
  if (!wait) return;
  int saved = errno;
  for (;;) {
    if (in_fiber) {
      if (iof_yield() < 0) in_fiber = false; /* shutting down: spin */
    } else {
      iof__libc.sched_yield();
    }
    slot_lock(s);
    wait = leaving(s, gen, in_fiber);
    slot_unlock(s);
    if (!wait) break;
  }
  errno = saved;
}

/* The io_context serving fd waits and lookups of fibers that run on no
 * io_context (a thread pool): made on first use, run by a background
 * thread for the life of the process. */
static iof_io_context *fallback;
static pthread_once_t fallback_once = PTHREAD_ONCE_INIT;

static void *fallback_main(void *arg) {
  iof_io_context *io = arg;
  iof_work_guard g; /* runs for the life of the process */
  iof_work_guard_init(&g, iof_io_context_executor(io));
  iof_io_context_run(io);
  return NULL;
}

static void make_fallback(void) {
  iof_io_context *io = iof_io_context_create();
  pthread_t t;
  if (!io) return;
  if (iof__thread_create_quiet(&t, fallback_main, io) != 0) {
    iof_io_context_destroy(io);
    return;
  }
  iof__libc.pthread_detach(t);
  fallback = io;
}

iof_io_context *iof__compat_io(iof_fiber *f) {
  iof_io_context *io = iof__io_of(iof_executor_context(f->env->executor));
  if (io) return io;
  iof__libc.pthread_once(&fallback_once, make_fallback);
  return fallback;
}

bool iof__fd_begin(iof__fd_op *op, int fd, int events) {
  iof_fiber *f = iof__compat_fiber();
  iof__fd_slot *s = f ? iof__fd_slot_get(fd) : iof__fd_slot_peek(fd);
  if (!s) return false;
  unsigned gen = atomic_load_explicit(&s->gen, memory_order_acquire);
  unsigned st = atomic_load_explicit(&s->flags, memory_order_acquire);
  if (!st) {
    if (!f) return false; /* not ours yet: the plain call is exact */
    st = iof__fd_learn(fd, s);
    if (!st) return false; /* not open: the plain call says EBADF */
  }
  if (st & (IOF__FD_USER_NB | IOF__FD_PASS)) return false;
  op->slot = s;
  op->fiber = f;
  op->gen = gen;
  op->fd = fd;
  op->events = events;
  op->saved_errno = errno;
  op->deadline_ns = 0;
  return true;
}

/* Under the slot lock, as a wait on the fd (generation gen) arms: whether
 * its loop already watched this very file (see iof__fd_wait.same_file). */
static void note_watch(iof__fd_slot *s, iof__fd_wait *fw, unsigned gen) {
  void *loop = fw->op.io->loop;
  fw->same_file = s->ev_loop == loop && s->ev_gen == gen + 1;
  s->ev_loop = loop;
  s->ev_gen = gen + 1;
}

/* After the wait: libev gave up on the fd, so the next wait registers it
 * anew. */
static void note_unwatch(iof__fd_slot *s, iof__fd_wait *fw) {
  if (fw->failed) s->ev_loop = NULL;
}

static int waiter_arm(iof__fd_wait *fw) {
  iof__fd_waiter *w = (iof__fd_waiter *)fw;
  iof__fd_slot *s = w->slot;
  slot_lock(s);
  if (atomic_load_explicit(&s->gen, memory_order_relaxed) != w->gen) {
    slot_unlock(s);
    return -EBADF;
  }
  note_watch(s, fw, w->gen);
  w->prev = NULL;
  w->next = s->waiters;
  if (s->waiters) s->waiters->prev = w;
  s->waiters = w;
  w->linked = true;
  slot_unlock(s);
  return 0;
}

static void waiter_disarm(iof__fd_wait *fw) {
  iof__fd_waiter *w = (iof__fd_waiter *)fw;
  iof__fd_slot *s = w->slot;
  slot_lock(s);
  if (w->linked) {
    if (w->prev)
      w->prev->next = w->next;
    else
      s->waiters = w->next;
    if (w->next) w->next->prev = w->prev;
    w->linked = false;
  }
  note_unwatch(s, fw);
  slot_unlock(s);
}

/* A thread's stand-in for the kernel's blocking wait on an fd whose
 * O_NONBLOCK the runtime set. A handler ends it with -EINTR where the
 * kernel would end the call it replaces: a handler without SA_RESTART, or
 * any handler when the socket has a timeout (deadline_ns >= 0); after the
 * others it goes on, as SA_RESTART would restart the call. */
static int thread_wait(int fd, int events, int64_t deadline_ns) {
  struct pollfd p = {fd,
                     (short)((events & EV_READ ? POLLIN : 0) |
                             (events & EV_WRITE ? POLLOUT : 0)),
                     0};
  unsigned norestart = iof__compat_norestart_runs;
  for (;;) {
    int ms = -1;
    if (deadline_ns >= 0) {
      int64_t left = deadline_ns - iof__now_ns();
      if (left <= 0) return -ETIMEDOUT;
      ms = (int)((left + 999999) / 1000000);
    }
    int r = iof__libc.poll(&p, 1, ms);
    if (r > 0) return (p.revents & POLLNVAL) ? -EBADF : 0;
    if (r < 0 && errno != EINTR) return -errno;
    if (r < 0 && (deadline_ns >= 0 || norestart != iof__compat_norestart_runs))
      return -EINTR;
  }
}

/* A fiber's wait linked to op's slot, so that close ends it with -EBADF.
 * restart: whether SA_RESTART would have restarted the blocking call. */
int iof__fd_wait_op(iof__fd_op *op, int64_t deadline_ns, bool restart) {
  iof__fd_waiter w = {0};
  w.fw.fd = op->fd;
  w.fw.events = op->events;
  w.fw.on_arm = waiter_arm;
  w.fw.on_disarm = waiter_disarm;
  w.slot = op->slot;
  w.gen = op->gen;
  bool reg = iof__compat_intr_enter(op->fiber, &w.fw.op, restart);
  int r = iof__compat_intr_leave(
      reg, iof__fd_wait_run(&w.fw, iof__compat_io(op->fiber), deadline_ns));
  /* Closed (and maybe reused) while the wait ended, the deadline's end
   * too: a message queue's last try would be on the new file. */
  if ((r == 0 || r == -ETIMEDOUT) &&
      atomic_load_explicit(&op->slot->gen, memory_order_acquire) != op->gen)
    r = -EBADF;
  return r;
}

int iof__fd_wait_for(iof__fd_op *op, int64_t deadline_ns) {
  if (!op->fiber) return thread_wait(op->fd, op->events, deadline_ns);
  /* A timeout on the socket makes the call one SA_RESTART does not
   * restart. */
  return iof__fd_wait_op(op, deadline_ns, deadline_ns < 0);
}

bool iof__fd_again(iof__fd_op *op) {
  if (errno != EAGAIN && errno != EWOULDBLOCK) return false;
  if (op->deadline_ns == 0) {
    int64_t t = atomic_load_explicit(op->events & EV_WRITE ? &op->slot->snd_ns
                                                           : &op->slot->rcv_ns,
                                     memory_order_relaxed);
    op->deadline_ns = t > 0 ? iof__now_ns() + t : -1;
  }
  int r = iof__fd_wait_for(op, op->deadline_ns);
  if (r == 0) {
    errno = op->saved_errno;
    return true;
  }
  errno = r == -ETIMEDOUT ? EAGAIN : -r;
  return false;
}

/* A plain wait (poll, select) on an fd compat knows shares the slot's
 * record of registrations; it is not linked to the slot otherwise. */
static int plain_arm(iof__fd_wait *fw) {
  iof__fd_slot *s = iof__fd_slot_peek(fw->fd);
  if (!s) return 0;
  slot_lock(s);
  if (atomic_load_explicit(&s->flags, memory_order_relaxed) & IOF__FD_KNOWN)
    note_watch(s, fw, atomic_load_explicit(&s->gen, memory_order_relaxed));
  slot_unlock(s);
  return 0;
}

static void plain_disarm(iof__fd_wait *fw) {
  iof__fd_slot *s = iof__fd_slot_peek(fw->fd);
  if (!s || !fw->failed) return;
  slot_lock(s);
  note_unwatch(s, fw);
  slot_unlock(s);
}

/* A fiber's wait on n fds: one record per fd, linked to the slot of a
 * number compat knows (a close from another fiber ends the wait, and a
 * reused number never reaches it), plain otherwise. Sized by n (a record
 * is ~460 bytes: poll is often called deep in a library, on a small
 * stack). */
static int wait_fds(iof_fiber *f, const int *fds, const int *events, int n,
                    int64_t deadline_ns, bool restart, unsigned *closed) {
  iof__fd_waiter w[n];
  iof__fd_wait *fws[n];
  memset(w, 0, (size_t)n * sizeof w[0]);
  for (int i = 0; i < n; i++) {
    w[i].fw.fd = fds[i];
    w[i].fw.events = events[i];
    iof__fd_slot *s = iof__fd_slot_peek(fds[i]);
    if (s && (atomic_load_explicit(&s->flags, memory_order_acquire) &
              IOF__FD_KNOWN)) {
      w[i].slot = s;
      w[i].gen = atomic_load_explicit(&s->gen, memory_order_acquire);
      w[i].fw.on_arm = waiter_arm;
      w[i].fw.on_disarm = waiter_disarm;
    } else {
      w[i].fw.on_arm = plain_arm;
      w[i].fw.on_disarm = plain_disarm;
    }
    fws[i] = &w[i].fw;
  }
  bool reg = iof__compat_intr_enter(f, &w[0].fw.op, restart);
  int r = iof__compat_intr_leave(
      reg, iof__fd_wait_any(fws, n, iof__compat_io(f), deadline_ns));
  /* Closed (and maybe reused) before or while the wait ended. A close
   * that came after the deadline claimed the wait but before this fiber ran
   * counts too: the caller's last check would ask the kernel about the
   * number, which may name another file by now. */
  *closed = 0;
  for (int i = 0; i < n; i++)
    if ((w[i].slot && atomic_load_explicit(&w[i].slot->gen,
                                           memory_order_acquire) != w[i].gen) ||
        (r == -EBADF && iof__rt_fd_owned(fds[i]))) /* refused: not open */
      *closed |= 1u << i;
  return *closed && (r == 0 || r == -EBADF || r == -ETIMEDOUT) ? -EBADF : r;
}

int iof__fd_wait_first(int fd, int events) {
  if (!iof__compat_fiber() || fd < 0) return 0;
  int saved = errno;
  struct pollfd p = {fd, events == EV_READ ? POLLIN : POLLOUT, 0};
  /* Ready, hung up, or an error the call itself will report. */
  if (iof__libc.poll(&p, 1, 0) != 0) {
    errno = saved;
    return 0;
  }
  iof__fd_slot *s = iof__fd_slot_peek(fd);
  unsigned st = s ? atomic_load_explicit(&s->flags, memory_order_acquire) : 0;
  if (!(st & IOF__FD_RT_NB)) { /* the runtime's O_NONBLOCK is no answer */
    int fl = iof__libc.fcntl(fd, F_GETFL);
    if (fl < 0 || (fl & O_NONBLOCK)) { /* the call says EBADF, or EAGAIN */
      errno = saved;
      return 0;
    }
  }
  int r = iof__fd_wait_plain(fd, events, -1, true);
  if (r == 0 || r == -EBADF) { /* ready, or closed: the call tells */
    errno = saved;
    return 0;
  }
  errno = -r;
  return -1;
}

int iof__fd_wait_plain(int fd, int events, int64_t deadline_ns, bool restart) {
  iof_fiber *f = iof__compat_fiber();
  if (!f) return thread_wait(fd, events, deadline_ns);
  unsigned closed;
  return wait_fds(f, &fd, &events, 1, deadline_ns, restart, &closed);
}

int iof__fd_wait_plain_any(const int *fds, const int *events, int n,
                           int64_t deadline_ns, unsigned *closed) {
  iof_fiber *f = iof__compat_fiber();
  if (!f || n < 1 || n > IOF__FD_WAIT_ANY_MAX) return -EINVAL;
  return wait_fds(f, fds, events, n, deadline_ns, false, closed);
}
