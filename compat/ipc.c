/* Message queues and System V semaphores from a fiber: mq_send/mq_receive
 * (POSIX) and semop, msgsnd, msgrcv (System V).
 *
 * A POSIX queue is a descriptor on Linux, so a fiber waits for it as for a
 * socket: it tries the call with a deadline already passed (which never
 * blocks, whatever the queue's O_NONBLOCK), and waits for readiness on
 * ETIMEDOUT. System V objects give no readiness at all: a fiber tries
 * without sleeping (IPC_NOWAIT, or semtimedop with a zero timeout) and
 * pauses between tries (compat/backoff.c), as for file locks. Either way only
 * the fiber waits, and the other fibers of its thread (one of which may be the
 * peer) run. Outside fibers, and for calls that do not block (IPC_NOWAIT, an
 * O_NONBLOCK queue), the plain call. Interruption follows signal(7): the queue
 * calls are restarted after SA_RESTART handlers, the System V ones never. */
#include <iofiber/compat_io.h>

#include "compat/backoff.h"
#include "compat/fd_table.h"
#include "compat/thread_internal.h"

#include <errno.h>

#ifndef MSG_COPY
#define MSG_COPY 040000
#endif

/* ---- POSIX message queues ---------------------------------------------- */

static const struct timespec passed = {0, 0};

/* After a try found the queue empty (full): waits for it with the user's
 * absolute CLOCK_REALTIME deadline (abs NULL: none), converted on the
 * first wait into *deadline. 0: try again; else -errno. s and gen: q's
 * slot (NULL: beyond the table) and its generation, read before the first
 * try. */
static int mq_wait(mqd_t q, int events, const struct timespec *abs,
                   int64_t *deadline, iof__fd_slot *s, unsigned gen) {
  if (abs && *deadline == 0) {
    int r = iof__abs_to_mono(CLOCK_REALTIME, abs, deadline);
    if (r < 0) return r;
  }
  int64_t d = abs ? *deadline : -1;
  if (d >= 0 && iof__now_ns() >= d) return -ETIMEDOUT;
  if (!s) {
    int r = iof__fd_wait_plain(q, events, d, true);
    return r == -ETIMEDOUT ? 0 : r;
  }
  /* The wait goes through the slot, with the generation the tries saw: a
   * close since (iof_compat_close, mq_close; another thread or fiber)
   * ends it with EBADF, and it never starts on a closed number (libev
   * aborts on one) nor on the file that took the number next. The slot
   * learns the queue first if compat did not know it. */
  if (atomic_load_explicit(&s->gen, memory_order_acquire) != gen) return -EBADF;
  if (!atomic_load_explicit(&s->flags, memory_order_acquire) &&
      !iof__fd_learn(q, s))
    return -EBADF; /* no longer open */
  iof__fd_op op = {0};
  op.slot = s;
  op.fiber = iof__compat_fiber();
  op.gen = gen;
  op.fd = q;
  op.events = events;
  int r = iof__fd_wait_op(&op, d, true);
  return r == -ETIMEDOUT ? 0 : r; /* the last try decides */
}

/* One send or receive, as the caller asked it. */
typedef struct mq_op {
  mqd_t q;
  char *msg;
  size_t len;
  unsigned *prio_out; /* receive */
  unsigned prio;      /* send */
  bool send;
} mq_op;

static ssize_t mq_try(const mq_op *o, const struct timespec *abs) {
  if (o->send)
    return iof__libc.mq_timedsend(o->q, o->msg, o->len, o->prio, abs);
  return iof__libc.mq_timedreceive(o->q, o->msg, o->len, o->prio_out, abs);
}

static ssize_t mq_run(const mq_op *o, const struct timespec *abs) {
  if (!iof__compat_fiber()) {
    if (abs) return mq_try(o, abs);
    if (o->send) return iof__libc.mq_send(o->q, o->msg, o->len, o->prio);
    return iof__libc.mq_receive(o->q, o->msg, o->len, o->prio_out);
  }
  /* Linux reads and checks the timeout before it looks at the queue
   * (EFAULT, EINVAL even when the call would not block). */
  int r = abs ? iof__ts_check(abs) : 0;
  if (r < 0) {
    errno = -r;
    return -1;
  }
  int saved = errno;
  int64_t deadline = 0;
  /* Read before the first try: a close between a try and the wait must
   * show (see mq_wait). */
  iof__fd_slot *s = iof__fd_slot_get(o->q);
  unsigned gen = s ? atomic_load_explicit(&s->gen, memory_order_acquire) : 0;
  for (;;) {
    ssize_t n = mq_try(o, &passed);
    if (n >= 0) {
      errno = saved;
      return n;
    }
    if (errno != ETIMEDOUT) return -1; /* EAGAIN: an O_NONBLOCK queue */
    r = mq_wait(o->q, o->send ? EV_WRITE : EV_READ, abs, &deadline, s, gen);
    if (r < 0) {
      errno = -r;
      return -1;
    }
  }
}

ssize_t iof_compat_mq_receive(mqd_t q, char *msg, size_t len, unsigned *prio) {
  mq_op o = {q, msg, len, prio, 0, false};
  return mq_run(&o, NULL);
}

ssize_t iof_compat_mq_timedreceive(mqd_t q, char *msg, size_t len,
                                   unsigned *prio, const struct timespec *abs) {
  mq_op o = {q, msg, len, prio, 0, false};
  return mq_run(&o, abs); /* NULL: no timeout, as glibc */
}

int iof_compat_mq_send(mqd_t q, const char *msg, size_t len, unsigned prio) {
  mq_op o = {q, (char *)msg, len, NULL, prio, true};
  return (int)mq_run(&o, NULL);
}

int iof_compat_mq_timedsend(mqd_t q, const char *msg, size_t len, unsigned prio,
                            const struct timespec *abs) {
  mq_op o = {q, (char *)msg, len, NULL, prio, true};
  return (int)mq_run(&o, abs);
}

/* glibc's mq_close is close(2) itself. */
int iof_compat_mq_close(mqd_t q) {
  return iof_compat_close(q);
}

/* ---- System V semaphores and message queues ---------------------------- */

/* A try that fails after the call has waited: EINVAL then means the id
 * went away meanwhile (removed: the kernel wakes its sleepers with
 * EIDRM). */
static int after_wait(int err, bool waited) {
  return waited && err == EINVAL ? EIDRM : err;
}

#define IPC_PAUSE_MIN_NS 50000LL
#define IPC_PAUSE_MAX_NS 5000000LL
static bool all_nowait(const struct sembuf *sops, size_t n) {
  for (size_t i = 0; i < n; i++)
    if (!(sops[i].sem_flg & IPC_NOWAIT)) return false;
  return true;
}

/* semtimedop with a zero timeout never sleeps (EAGAIN when it would),
 * and lets the kernel check the caller's array itself (EFAULT). */
static const struct timespec zero = {0, 0};

int iof_compat_semtimedop(int id, struct sembuf *sops, size_t n,
                          const struct timespec *timeout) {
  iof_fiber *f = iof__compat_fiber();
  int64_t deadline = INT64_MAX;
  if (f && timeout && timeout != &zero) {
    int r = iof__ts_check(timeout);
    if (r == 0) r = iof__rel_to_mono(timeout, &deadline);
    if (r < 0) {
      errno = -r;
      return -1;
    }
    if (!timeout->tv_sec && !timeout->tv_nsec) f = NULL; /* a try */
  }
  if (!f) return iof__libc.semtimedop(id, sops, n, timeout);
  int saved = errno;
  iof__backoff b;
  iof__backoff_init(&b, f, IPC_PAUSE_MIN_NS, IPC_PAUSE_MAX_NS, false);
  for (bool waited = false;; waited = true) {
    if (iof__libc.semtimedop(id, sops, n, &zero) == 0) {
      errno = saved;
      return 0;
    }
    if (errno != EAGAIN) {
      errno = after_wait(errno, waited);
      return -1;
    }
    /* Only operations that all say IPC_NOWAIT never wait (the kernel
     * read the array: it is readable). */
    if (!waited && all_nowait(sops, n)) return -1;
    int r = iof__backoff_pause(&b, deadline);
    if (r < 0) {
      errno = r == -ETIMEDOUT ? EAGAIN : -r; /* semtimedop's timeout */
      return -1;
    }
  }
}

int iof_compat_semop(int id, struct sembuf *sops, size_t n) {
  return iof_compat_semtimedop(id, sops, n, NULL);
}

int iof_compat_msgsnd(int id, const void *msg, size_t size, int flags) {
  iof_fiber *f = iof__compat_fiber();
  if (!f || (flags & IPC_NOWAIT)) return iof__libc.msgsnd(id, msg, size, flags);
  int saved = errno;
  iof__backoff b;
  iof__backoff_init(&b, f, IPC_PAUSE_MIN_NS, IPC_PAUSE_MAX_NS, false);
  for (bool waited = false;; waited = true) {
    if (iof__libc.msgsnd(id, msg, size, flags | IPC_NOWAIT) == 0) {
      errno = saved;
      return 0;
    }
    if (errno != EAGAIN) {
      errno = after_wait(errno, waited);
      return -1;
    }
    int r = iof__backoff_pause(&b, INT64_MAX);
    if (r < 0) {
      errno = -r;
      return -1;
    }
  }
}

ssize_t iof_compat_msgrcv(int id, void *msg, size_t size, long type,
                          int flags) {
  iof_fiber *f = iof__compat_fiber();
  /* MSG_COPY never waits: the kernel requires IPC_NOWAIT with it (EINVAL
   * without), which the retries below would add. */
  if (!f || (flags & (IPC_NOWAIT | MSG_COPY)))
    return iof__libc.msgrcv(id, msg, size, type, flags);
  int saved = errno;
  iof__backoff b;
  iof__backoff_init(&b, f, IPC_PAUSE_MIN_NS, IPC_PAUSE_MAX_NS, false);
  for (bool waited = false;; waited = true) {
    ssize_t n = iof__libc.msgrcv(id, msg, size, type, flags | IPC_NOWAIT);
    if (n >= 0) {
      errno = saved;
      return n;
    }
    if (errno != ENOMSG) {
      errno = after_wait(errno, waited);
      return -1;
    }
    int r = iof__backoff_pause(&b, INT64_MAX);
    if (r < 0) {
      errno = -r;
      return -1;
    }
  }
}
