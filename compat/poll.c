/* poll, select and epoll_wait in fibers.
 *
 * The answer always comes from the kernel: a check with a zero timeout
 * (the plain call). When nothing is ready the fiber waits for "maybe
 * ready" and checks again, so revents and the sets are exactly the
 * kernel's. The wait is on one fd through the io_context: the fd itself
 * when poll has just one, the epoll fd for epoll_wait, and otherwise a
 * throwaway epoll set holding the requested events (one epoll_ctl per
 * fd, no allocation; it scales to thousands of fds and knows POLLPRI,
 * which an ev_io does not). A fiber thread (compat's pthreads) keeps its
 * set from one wait to the next instead: see "kept epoll set". */
#include <iofiber/compat_io.h>

#include "compat/fd_table.h"
#include "compat/signal_internal.h"
#include "compat/sigmask_internal.h"
#include "compat/thread_internal.h"

#include <iofiber/timer.h>

#include <errno.h>
#include <limits.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>

static const struct timespec zero_ts = {0, 0};

/* ms from now as a monotonic deadline; < 0: none. */
static int64_t deadline_ms(int ms) {
  return ms < 0 ? -1 : iof__now_ns() + (int64_t)ms * 1000000;
}

/* ppoll and pselect read the timeout in glibc too (a wild pointer faults
 * there as here); epoll_pwait2 hands it to the kernel, so compat asks the
 * kernel (iof__ts_check) for the plain call's EFAULT. */
static bool ts_valid(const struct timespec *ts) {
  return ts->tv_sec >= 0 && ts->tv_nsec >= 0 && ts->tv_nsec < 1000000000;
}

static int64_t deadline_ts(const struct timespec *ts) {
  if (!ts) return -1;
  int64_t now = iof__now_ns();
  if (ts->tv_sec > (INT64_MAX - now) / 1000000000 - 1) return -1;
  return now + (int64_t)ts->tv_sec * 1000000000 + ts->tv_nsec;
}

/* epoll_ctl op (ADD or MOD) of fd for ev on the set: 0 or -errno. Files
 * (EPERM) are ready at once, so the check saw them; a number closed
 * meanwhile (EBADF) is the check's to report. */
static int ep_ctl(int ep, int op, int fd, uint32_t ev) {
  struct epoll_event e;
  memset(&e, 0, sizeof e);
  e.events = ev;
  e.data.fd = fd;
  if (epoll_ctl(ep, op, fd, &e) == 0) return 0;
  if (errno == EPERM || errno == EBADF) return 0;
  return -errno;
}

static int ep_add(int ep, int fd, uint32_t ev) {
  return ep_ctl(ep, EPOLL_CTL_ADD, fd, ev);
}

/* Adds a poll entry; a second entry for the same fd widens the first,
 * which needs the old mask: recomputed from the poll array. */
static int ep_add_poll(int ep, const struct pollfd *fds, nfds_t i) {
  uint32_t ev = (uint16_t)fds[i].events;
  int r = ep_add(ep, fds[i].fd, ev);
  if (r != -EEXIST) return r;
  for (nfds_t j = 0; j < i; j++)
    if (fds[j].fd == fds[i].fd) ev |= (uint16_t)fds[j].events;
  return ep_ctl(ep, EPOLL_CTL_MOD, fds[i].fd, ev);
}

/* The wait between two checks: 0 (check again), -ETIMEDOUT, or -errno
 * (-EINTR: a handler ran, signal_internal.h). When the epoll set cannot be
 * built (no fd left, watch limit) it falls back to checking every 10 ms. */
static int wait_set(int ep, int64_t deadline) {
  if (ep >= 0) return iof__fd_wait_plain(ep, EV_READ, deadline, false);
  int64_t next = iof__now_ns() + 10 * 1000000;
  if (deadline >= 0 && deadline < next) next = deadline;
  int r = iof__compat_intr_sleep(iof__compat_fiber(), next, false);
  if (r != -ETIMEDOUT) return r;
  return deadline >= 0 && iof__now_ns() >= deadline ? -ETIMEDOUT : 0;
}

/* A masked call's signalfd (iof__compat_admit_fd) joins the set it waits
 * on; 0 or -errno. */
static int ep_add_admit(int ep, int sfd) {
  return ep >= 0 && sfd >= 0 ? ep_add(ep, sfd, EPOLLIN) : 0;
}

/* The number stops naming the throwaway file: a slot compat kept for it
 * learns so (its waits must not trust an earlier registration). */
static void ep_close(int ep) {
  if (ep < 0) return;
  iof__fd_reset(ep, 0);
  iof__libc.close(ep);
}

/* The throwaway fds a wait holds, closed if its fiber thread exits
 * during the wait (cancelled). */
static void close_held(void *p) {
  int **held = p;
  ep_close(*held[0]);
  ep_close(*held[1]);
}

#define HOLD_FDS()                                                             \
  int *held[2] = {&ep, &sfd};                                                  \
  iof__unwind g;                                                               \
  (void)iof__cthread_guard_push(&g, close_held, held)

/* Ends a fiber wait: the kernel's answer (r >= 0 or -1 with its errno),
 * or a wait failure as -1 + errno; errno at entry kept otherwise. */
static int finish(iof__unwind *g, int ep, int sfd, int r, int werr, int saved) {
  iof__cthread_guard_pop(g);
  int e = errno;
  ep_close(ep);
  ep_close(sfd);
  if (werr) {
    errno = werr;
    return -1;
  }
  errno = r < 0 ? e : saved;
  return r;
}

/* ---- a fiber thread's kept epoll set --------------------------------------
 * A poll or select loop over many fds waits with the same fds call after
 * call; a throwaway set costs an epoll_ctl per fd per wait (1,000 idle
 * fds: a round trip 8x a plain poll's). So a fiber thread keeps the set of
 * its last such wait: the next one on the same fds (the same numbers still
 * naming the same files: compat's generations) reuses it, an fd whose
 * events changed costs one MOD, and any other change builds it anew (a
 * registration left by a closed number cannot be removed by number once
 * the number is reused). Its fd sits high, where programs do not pick
 * numbers; one the program closes or replaces anyway (closefrom) is left
 * to it and the set made anew. */
typedef struct pc_ent {
  int fd;
  uint32_t ev;
  unsigned gen;
} pc_ent;

struct iof__poll_cache {
  int ep;          /* -1: none */
  unsigned ep_gen; /* its number's generation: changed, it is not ours */
  size_t n, cap;
  pc_ent *have; /* what ep holds, in the caller's order */
  pc_ent *want; /* the wait being set up */
};

static unsigned gen_of(int fd) {
  iof__fd_slot *sl = iof__fd_slot_get(fd);
  return sl ? atomic_load_explicit(&sl->gen, memory_order_acquire) : 0;
}

static bool pc_own(const struct iof__poll_cache *pc) {
  return pc->ep >= 0 && gen_of(pc->ep) == pc->ep_gen;
}

static void pc_drop_set(struct iof__poll_cache *pc) {
  if (pc_own(pc)) ep_close(pc->ep);
  pc->ep = -1;
  pc->n = 0;
}

void iof__poll_cache_free(struct iof__poll_cache *pc) {
  if (!pc) return;
  pc_drop_set(pc);
  free(pc->have);
  free(pc->want);
  free(pc);
}

/* The caller's cache with room for n entries, or NULL (not a fiber thread,
 * or no memory: the throwaway set then). */
static struct iof__poll_cache *pc_get(size_t n) {
  struct iof__poll_cache **slot = iof__cthread_poll_cache();
  if (!slot) return NULL;
  struct iof__poll_cache *pc = *slot;
  if (!pc) {
    pc = calloc(1, sizeof *pc);
    if (!pc) return NULL;
    pc->ep = -1;
    *slot = pc;
  }
  if (n > pc->cap) {
    pc_ent *h = realloc(pc->have, n * sizeof *h);
    if (h) pc->have = h;
    pc_ent *w = h ? realloc(pc->want, n * sizeof *w) : NULL;
    if (w) pc->want = w;
    if (!h || !w) return NULL;
    pc->cap = n;
  }
  return pc;
}

/* Records fd for ev in want[k]; false when fd is beyond compat's table
 * (no generation to trust: no kept set). */
static bool pc_want(struct iof__poll_cache *pc, size_t k, int fd, uint32_t ev) {
  iof__fd_slot *sl = iof__fd_slot_get(fd);
  if (!sl) return false;
  pc->want[k] =
      (pc_ent){fd, ev, atomic_load_explicit(&sl->gen, memory_order_acquire)};
  return true;
}

/* The union of the events wanted for want[k]'s fd (poll may name an fd
 * twice). */
static uint32_t pc_union(const struct iof__poll_cache *pc, size_t m, size_t k) {
  uint32_t ev = 0;
  for (size_t j = 0; j < m; j++)
    if (pc->want[j].fd == pc->want[k].fd) ev |= pc->want[j].ev;
  return ev;
}

/* The kept set made to hold want[0..m): the epoll fd to wait on, or -1
 * (the set could not be made: the caller's fallback). */
static int pc_sync(struct iof__poll_cache *pc, size_t m) {
  bool same = pc_own(pc) && pc->n == m;
  for (size_t k = 0; same && k < m; k++)
    same =
        pc->have[k].fd == pc->want[k].fd && pc->have[k].gen == pc->want[k].gen;
  if (same) {
    for (size_t k = 0; k < m; k++) {
      if (pc->have[k].ev == pc->want[k].ev) continue;
      int r = ep_ctl(pc->ep, EPOLL_CTL_MOD, pc->want[k].fd, pc_union(pc, m, k));
      if (r == -ENOENT) /* an fd that was not in the set (a file) */
        r = ep_ctl(pc->ep, EPOLL_CTL_ADD, pc->want[k].fd, pc_union(pc, m, k));
      if (r < 0) {
        same = false;
        break;
      }
      pc->have[k].ev = pc->want[k].ev;
    }
    if (same) return pc->ep;
  }
  pc_drop_set(pc);
  int ep = epoll_create1(EPOLL_CLOEXEC);
  if (ep < 0) return -1;
  /* Moved high as the runtime's own are, but not listed: the program may
   * close it (see above). */
  ep = iof__rt_fd_adopt(ep);
  iof__rt_fd_forget(ep);
  for (size_t k = 0; k < m; k++) {
    int r = ep_ctl(ep, EPOLL_CTL_ADD, pc->want[k].fd, pc->want[k].ev);
    if (r == -EEXIST)
      r = ep_ctl(ep, EPOLL_CTL_MOD, pc->want[k].fd, pc_union(pc, k + 1, k));
    if (r < 0) {
      ep_close(ep);
      return -1;
    }
  }
  pc->ep = ep;
  pc->ep_gen = gen_of(ep);
  pc->n = m;
  if (m) memcpy(pc->have, pc->want, m * sizeof *pc->have);
  return ep;
}

/* The kept set for a poll array, or -1 (none: the throwaway set). */
static int pc_poll(const struct pollfd *fds, nfds_t n) {
  struct iof__poll_cache *pc = pc_get(n);
  if (!pc) return -1;
  size_t m = 0;
  for (nfds_t i = 0; i < n; i++)
    if (fds[i].fd >= 0 && !pc_want(pc, m++, fds[i].fd, (uint16_t)fds[i].events))
      return -1;
  return pc_sync(pc, m);
}

/* The kept set for select's sets (copies as given), or -1. */
static int pc_select(int nfds, const fd_set *rd, const fd_set *wr,
                     const fd_set *ex) {
  size_t m = 0;
  for (int fd = 0; fd < nfds; fd++)
    m += (rd && FD_ISSET(fd, rd)) || (wr && FD_ISSET(fd, wr)) ||
         (ex && FD_ISSET(fd, ex));
  struct iof__poll_cache *pc = pc_get(m);
  if (!pc) return -1;
  for (int fd = 0, k = 0; fd < nfds; fd++) {
    uint32_t ev = (rd && FD_ISSET(fd, rd) ? EPOLLIN : 0) |
                  (wr && FD_ISSET(fd, wr) ? EPOLLOUT : 0) |
                  (ex && FD_ISSET(fd, ex) ? EPOLLPRI : 0);
    if (ev && !pc_want(pc, (size_t)k++, fd, ev)) return -1;
  }
  return pc_sync(pc, m);
}

/* Events for an ev_io when poll watches a single fd, 0 when an ev_io
 * cannot express them (POLLPRI, POLLRDHUP, nothing at all). POLLERR, POLLHUP
 * and POLLNVAL are output only: the kernel ignores them in events and
 * reports them anyway, and an error or hangup wakes either ev_io, so
 * callers that ask for them (libpq: POLLIN | POLLERR) keep the single fd
 * wait instead of a throwaway epoll set per wait. */
static int single_events(short ev) {
  ev &= ~(POLLERR | POLLHUP | POLLNVAL);
  if (ev & ~(POLLIN | POLLOUT | POLLRDNORM | POLLWRNORM)) return 0;
  return (ev & (POLLIN | POLLRDNORM) ? EV_READ : 0) |
         (ev & (POLLOUT | POLLWRNORM) ? EV_WRITE : 0);
}

/* The fds of a poll array to wait on one by one (iof__fd_wait_plain_any):
 * their count, or -1 when an ev_io cannot express one of them or there are
 * more than IOF__FD_WAIT_ANY_MAX (the caller builds an epoll set). */
static int poll_watch_list(const struct pollfd *fds, nfds_t n, int *wfd,
                           int *wev) {
  int k = 0;
  for (nfds_t i = 0; i < n; i++) {
    if (fds[i].fd < 0) continue;
    int ev = single_events(fds[i].events);
    if (!ev || k == IOF__FD_WAIT_ANY_MAX) return -1;
    wfd[k] = fds[i].fd;
    wev[k++] = ev;
  }
  return k ? k : -1;
}

/* After a wait on poll_watch_list's fds that some closed (bits of closed,
 * by their index in its list): POLLNVAL for the entries of those numbers,
 * which are not asked about again (they may name other files by now), and
 * the kernel's answer for the others. poll's result or -1 (errno). */
static int closed_revents(struct pollfd *fds, nfds_t n, unsigned closed) {
  nfds_t at[IOF__FD_WAIT_ANY_MAX];
  int fd[IOF__FD_WAIT_ANY_MAX], m = 0;
  for (nfds_t i = 0, k = 0; i < n; i++) {
    if (fds[i].fd < 0) continue;
    if (closed & (1u << k++)) {
      at[m] = i;
      fd[m++] = fds[i].fd;
      fds[i].fd = -1; /* left out of the check below */
    }
  }
  int r = iof__libc.poll(fds, n, 0);
  for (int j = 0; j < m; j++) {
    fds[at[j]].fd = fd[j];
    fds[at[j]].revents = POLLNVAL;
  }
  return r < 0 ? r : r + m;
}

/* A masked call's signalfd (iof__compat_admit_fd) added to a watch list
 * of nwatch fds: the new count, or -1 (no room: an epoll set then). */
static int admit_watch(int nwatch, int *wfd, int *wev, int sfd) {
  if (nwatch < 1 || nwatch >= IOF__FD_WAIT_ANY_MAX) return -1;
  wfd[nwatch] = sfd;
  wev[nwatch] = EV_READ;
  return nwatch + 1;
}

/* Fairness among the fibers of an io thread. A thread that loops on
 * poll/select/epoll_wait calls that return at once (always something
 * ready that it does not consume, or a zero timeout) is preempted among
 * threads; a fiber doing it would starve the others, e.g. the one that
 * would consume the events (redis-benchmark --threads). So: a zero-timeout
 * check that finds nothing yields, and every IOF__BUSY_STREAK-th check in a
 * row on this thread that returns without waiting yields too. */
#define IOF__BUSY_STREAK 64
static __thread unsigned busy_streak;

static void returned_at_once(int r) {
  if (r == 0 || ++busy_streak >= IOF__BUSY_STREAK) {
    busy_streak = 0;
    iof_compat_sched_yield();
  }
}

static int poll_fiber(struct pollfd *fds, nfds_t n, int64_t deadline,
                      const sigset_t *mask) {
  /* Refused before the set is walked: a NULL array, or a count the
   * syscall would truncate (it takes an unsigned int; any count past
   * RLIMIT_NOFILE is EINVAL to the kernel). */
  if (!fds && n) {
    errno = EFAULT;
    return -1;
  }
  if (n > (nfds_t)INT_MAX) {
    errno = EINVAL;
    return -1;
  }
  int saved = errno;
  int ep = -1, sfd = -1;
  HOLD_FDS();
  bool built = false;
  int kept = -1; /* the fiber thread's kept set, when waiting on it */
  int nwatch = -1;
  int wfd[IOF__FD_WAIT_ANY_MAX], wev[IOF__FD_WAIT_ANY_MAX];
  bool waited = false;
  for (;;) {
    int r = mask ? iof__libc.ppoll(fds, n, &zero_ts, mask)
                 : iof__libc.poll(fds, n, 0);
    if (r != 0) {
      if (!built && !waited) returned_at_once(r);
      return finish(&g, ep, sfd, r, 0, saved);
    }
    if (deadline >= 0 && iof__now_ns() >= deadline)
      return finish(&g, ep, sfd, 0, 0, saved);
    int w;
    /* The array is read once the kernel has (a wild one: its EFAULT). */
    if (!waited) {
      nwatch = poll_watch_list(fds, n, wfd, wev);
      /* The signal the mask lets in is one more fd to watch. */
      if (mask && (sfd = iof__compat_admit_fd(mask)) >= 0)
        nwatch = admit_watch(nwatch, wfd, wev, sfd);
    }
    if (nwatch > 0) {
      /* A few fds: a watcher each on the loop, no throwaway epoll set
       * (its create, adds and close: 4+ system calls per wait). */
      unsigned closed;
      w = iof__fd_wait_plain_any(wfd, wev, nwatch, deadline, &closed);
      if (w == -EBADF) /* some closed: POLLNVAL, and no new wait on them */
        return finish(&g, ep, sfd, closed_revents(fds, n, closed), 0, saved);
    } else {
      if (!built) {
        built = true;
        /* A masked call's signalfd is this call's own: no kept set. */
        kept = sfd < 0 ? pc_poll(fds, n) : -1;
        if (kept < 0) ep = epoll_create1(EPOLL_CLOEXEC);
        for (nfds_t i = 0; kept < 0 && ep >= 0 && i < n; i++)
          if (fds[i].fd >= 0 && ep_add_poll(ep, fds, i) < 0) {
            ep_close(ep);
            ep = -1;
          }
        if (kept < 0 && ep_add_admit(ep, sfd) < 0) {
          ep_close(ep);
          ep = -1;
        }
      }
      w = wait_set(kept >= 0 ? kept : ep, deadline);
    }
    waited = true;
    busy_streak = 0;
    if (w == -ETIMEDOUT) {
      r = mask ? iof__libc.ppoll(fds, n, &zero_ts, mask)
               : iof__libc.poll(fds, n, 0);
      return finish(&g, ep, sfd, r, 0, saved);
    }
    if (w < 0 && w != -EBADF) return finish(&g, ep, sfd, -1, -w, saved);
  }
}

/* poll(NULL, 0, ms) and select(0, ..., &tv) are sleeps. */
static int sleep_to(int64_t deadline) {
  int saved = errno;
  int r = iof__compat_intr_sleep(iof__compat_fiber(), deadline, false);
  errno = r != -ETIMEDOUT ? -r : saved;
  return r != -ETIMEDOUT ? -1 : 0;
}

int iof_compat_poll(struct pollfd *fds, nfds_t n, int timeout_ms) {
  if (timeout_ms == 0 && iof__compat_fiber()) {
    int r = iof__libc.poll(fds, n, 0);
    if (r >= 0) returned_at_once(r);
    return r;
  }
  if (timeout_ms == 0 || !iof__compat_fiber())
    return iof__libc.poll(fds, n, timeout_ms);
  if (n == 0 && timeout_ms > 0) return sleep_to(deadline_ms(timeout_ms));
  return poll_fiber(fds, n, deadline_ms(timeout_ms), NULL);
}

int iof_compat_ppoll(struct pollfd *fds, nfds_t n,
                     const struct timespec *timeout, const sigset_t *mask) {
  if (!iof__compat_fiber() || (timeout && !ts_valid(timeout)) ||
      (timeout && !timeout->tv_sec && !timeout->tv_nsec))
    return iof__libc.ppoll(fds, n, timeout, mask);
  iof__sigmask_hold h;
  iof__sigmask_hold_begin(&h, mask);
  int r = poll_fiber(fds, n, deadline_ts(timeout), mask);
  iof__sigmask_hold_release(&h);
  return r;
}

/* Whether the kernel can read `used` bytes of each set (iof__mem_check:
 * a system call per page). The sets are usually neighbours on one stack
 * page, which is asked about once. */
static bool sets_readable(fd_set *rd, fd_set *wr, fd_set *ex, size_t used) {
  fd_set *set[3] = {rd, wr, ex};
  uintptr_t lo[3], hi[3];
  int asked = 0;
  for (int i = 0; i < 3; i++) {
    if (!set[i] || !used) continue;
    uintptr_t a = (uintptr_t)set[i] >> 12;
    uintptr_t b = ((uintptr_t)set[i] + used - 1) >> 12;
    bool known = false;
    for (int k = 0; k < asked && b >= a; k++)
      known = known || (a >= lo[k] && b <= hi[k]);
    if (known) continue;
    if (iof__mem_check(set[i], used) < 0) return false;
    lo[asked] = a;
    hi[asked] = b;
    asked++;
  }
  return true;
}

/* Puts the caller's sets back as given (from the copies r0, w0, e0). */
static void sets_back(fd_set *rd, fd_set *wr, fd_set *ex, const fd_set *r0,
                      const fd_set *w0, const fd_set *e0, size_t used) {
  if (rd) memcpy(rd, r0, used);
  if (wr) memcpy(wr, w0, used);
  if (ex) memcpy(ex, e0, used);
}

/* The fds of select's sets to wait on one by one, as poll_watch_list:
 * their count, or -1 (an exceptional condition, too many, none). */
static int select_watch_list(int nfds, const fd_set *rd, const fd_set *wr,
                             const fd_set *ex, int *wfd, int *wev) {
  int k = 0;
  for (int fd = 0; fd < nfds; fd++) {
    if (ex && FD_ISSET(fd, ex)) return -1;
    int ev = (rd && FD_ISSET(fd, rd) ? EV_READ : 0) |
             (wr && FD_ISSET(fd, wr) ? EV_WRITE : 0);
    if (!ev) continue;
    if (k == IOF__FD_WAIT_ANY_MAX) return -1;
    wfd[k] = fd;
    wev[k++] = ev;
  }
  return k ? k : -1;
}

/* select in a fiber: the sets are checked with a zero timeout, restored
 * from copies before each check. */
static int select_fiber(int nfds, fd_set *rd, fd_set *wr, fd_set *ex,
                        int64_t deadline, const sigset_t *mask) {
  /* Only the bytes of the sets the kernel uses (whole longs, as it reads
   * them), after asking it whether it can read them (its EFAULT). */
  size_t used = ((size_t)nfds + 63) / 64 * 8;
  if (!sets_readable(rd, wr, ex, used))
    return iof__libc.pselect(nfds, rd, wr, ex, &zero_ts, mask);
  int saved = errno;
  fd_set r0, w0, e0;
  if (rd) memcpy(&r0, rd, used);
  if (wr) memcpy(&w0, wr, used);
  if (ex) memcpy(&e0, ex, used);
  int ep = -1, sfd = -1;
  HOLD_FDS();
  bool built = false;
  int kept = -1; /* as in poll_fiber */
  int wfd[IOF__FD_WAIT_ANY_MAX], wev[IOF__FD_WAIT_ANY_MAX];
  int nwatch = select_watch_list(nfds, rd ? &r0 : NULL, wr ? &w0 : NULL,
                                 ex ? &e0 : NULL, wfd, wev);
  bool waited = false;
  for (bool first = true;; first = false) {
    /* The first try finds the sets intact: a read-only set gets the
     * kernel's EFAULT there, not a fault in a copy back. */
    if (!first) sets_back(rd, wr, ex, &r0, &w0, &e0, used);
    int r = iof__libc.pselect(nfds, rd, wr, ex, &zero_ts, mask);
    if (r != 0) {
      if (!built && !waited) returned_at_once(r);
      return finish(&g, ep, sfd, r, 0, saved);
    }
    if (deadline >= 0 && iof__now_ns() >= deadline)
      return finish(&g, ep, sfd, 0, 0, saved);
    if (!waited && !built && mask && (sfd = iof__compat_admit_fd(mask)) >= 0)
      nwatch = admit_watch(nwatch, wfd, wev, sfd);
    int w;
    if (nwatch > 0) {
      /* As poll: a watcher each for a few fds, no epoll set. A number
       * closed meanwhile ends it with EBADF, select's answer. */
      unsigned closed;
      w = iof__fd_wait_plain_any(wfd, wev, nwatch, deadline, &closed);
    } else {
      if (!built) {
        built = true;
        kept = sfd < 0 ? pc_select(nfds, rd ? &r0 : NULL, wr ? &w0 : NULL,
                                   ex ? &e0 : NULL)
                       : -1;
        if (kept < 0) ep = epoll_create1(EPOLL_CLOEXEC);
        for (int fd = 0; kept < 0 && ep >= 0 && fd < nfds; fd++) {
          uint32_t ev = (rd && FD_ISSET(fd, &r0) ? EPOLLIN : 0) |
                        (wr && FD_ISSET(fd, &w0) ? EPOLLOUT : 0) |
                        (ex && FD_ISSET(fd, &e0) ? EPOLLPRI : 0);
          if (ev && ep_add(ep, fd, ev) < 0) {
            ep_close(ep);
            ep = -1;
          }
        }
        if (kept < 0 && ep_add_admit(ep, sfd) < 0) {
          ep_close(ep);
          ep = -1;
        }
      }
      w = wait_set(kept >= 0 ? kept : ep, deadline);
    }
    waited = true;
    busy_streak = 0;
    if (w == 0 || w == -ETIMEDOUT) continue; /* the next check decides */
    /* A failed select leaves the sets as they were given (an EINTR above
     * all: callers that loop on it pass the same sets again), not as the
     * last check emptied them. */
    sets_back(rd, wr, ex, &r0, &w0, &e0, used);
    return finish(&g, ep, sfd, -1, -w, saved);
  }
}

int iof_compat_select(int nfds, fd_set *rd, fd_set *wr, fd_set *ex,
                      struct timeval *timeout) {
  if (timeout && !timeout->tv_sec && !timeout->tv_usec && nfds > 0 &&
      iof__compat_fiber()) {
    int r = iof__libc.select(nfds, rd, wr, ex, timeout);
    if (r >= 0) returned_at_once(r);
    return r;
  }
  if (!iof__compat_fiber() || nfds < 0 || nfds > FD_SETSIZE ||
      (timeout && (timeout->tv_sec < 0 || timeout->tv_usec < 0 ||
                   timeout->tv_usec >= 1000000)) ||
      (timeout && !timeout->tv_sec && !timeout->tv_usec))
    return iof__libc.select(nfds, rd, wr, ex, timeout);
  struct timespec ts;
  if (timeout) {
    ts.tv_sec = timeout->tv_sec;
    ts.tv_nsec = timeout->tv_usec * 1000;
  }
  int64_t deadline = deadline_ts(timeout ? &ts : NULL);
  int r = nfds == 0 && deadline >= 0
              ? sleep_to(deadline)
              : select_fiber(nfds, rd, wr, ex, deadline, NULL);
  if (timeout && deadline >= 0) { /* Linux reports the time left */
    int e = errno;
    int64_t left = deadline - iof__now_ns();
    if (left < 0) left = 0;
    timeout->tv_sec = left / 1000000000;
    timeout->tv_usec = (left % 1000000000) / 1000;
    errno = e;
  }
  return r;
}

int iof_compat_pselect(int nfds, fd_set *rd, fd_set *wr, fd_set *ex,
                       const struct timespec *timeout, const sigset_t *mask) {
  if (!iof__compat_fiber() || nfds < 0 || nfds > FD_SETSIZE ||
      (timeout && !ts_valid(timeout)) ||
      (timeout && !timeout->tv_sec && !timeout->tv_nsec))
    return iof__libc.pselect(nfds, rd, wr, ex, timeout, mask);
  iof__sigmask_hold h;
  iof__sigmask_hold_begin(&h, mask);
  int r = select_fiber(nfds, rd, wr, ex, deadline_ts(timeout), mask);
  iof__sigmask_hold_release(&h);
  return r;
}

static int epoll_fiber(int epfd, struct epoll_event *events, int max,
                       int64_t deadline, const sigset_t *mask) {
  int saved = errno;
  bool waited = false;
  int ep = -1, sfd = -1; /* ep stays -1: HOLD_FDS and finish take both */
  HOLD_FDS();
  for (;;) {
    /* epoll_pwait with a zero timeout returns before it looks for signals:
     * one its mask lets in is delivered by a ppoll of nothing. */
    if (sfd >= 0 && iof__libc.ppoll(NULL, 0, &zero_ts, mask) < 0)
      return finish(&g, ep, sfd, -1, 0, saved);
    int r = iof__libc.epoll_pwait(epfd, events, max, 0, mask);
    if (r != 0) {
      if (!waited) returned_at_once(r);
      return finish(&g, ep, sfd, r, 0, saved);
    }
    if (deadline >= 0 && iof__now_ns() >= deadline)
      return finish(&g, ep, sfd, 0, 0, saved);
    if (!waited && mask) sfd = iof__compat_admit_fd(mask);
    int w;
    if (sfd >= 0) {
      /* The epoll fd and the signal the mask lets in, a watcher each. */
      int wfd[2] = {epfd, sfd}, wev[2] = {EV_READ, EV_READ};
      unsigned closed;
      w = iof__fd_wait_plain_any(wfd, wev, 2, deadline, &closed);
      if (w == -EBADF && (closed & 1)) /* epfd closed by another fiber */
        return finish(&g, ep, sfd, -1, EBADF, saved);
    } else {
      w = iof__fd_wait_plain(epfd, EV_READ, deadline, false);
    }
    waited = true;
    busy_streak = 0;
    if (w == -ETIMEDOUT) {
      r = iof__libc.epoll_pwait(epfd, events, max, 0, mask);
      return finish(&g, ep, sfd, r, 0, saved);
    }
    if (w == -EBADF && sfd < 0) /* epfd closed by another fiber */
      return finish(&g, ep, sfd, -1, EBADF, saved);
    if (w < 0 && w != -EBADF) return finish(&g, ep, sfd, -1, -w, saved);
  }
}

int iof_compat_epoll_wait(int epfd, struct epoll_event *events, int max,
                          int timeout_ms) {
  if (timeout_ms == 0 && iof__compat_fiber()) {
    int r = iof__libc.epoll_wait(epfd, events, max, 0);
    if (r >= 0) returned_at_once(r);
    return r;
  }
  if (timeout_ms == 0 || !iof__compat_fiber())
    return iof__libc.epoll_wait(epfd, events, max, timeout_ms);
  return epoll_fiber(epfd, events, max, deadline_ms(timeout_ms), NULL);
}

/* epoll_pwait(2) in a fiber: the fiber thread wears mask for the wait. */
static int epoll_masked(int epfd, struct epoll_event *events, int max,
                        int64_t deadline, const sigset_t *mask) {
  iof__sigmask_hold h;
  iof__sigmask_hold_begin(&h, mask);
  int r = epoll_fiber(epfd, events, max, deadline, mask);
  iof__sigmask_hold_release(&h);
  return r;
}

int iof_compat_epoll_pwait2(int epfd, struct epoll_event *events, int max,
                            const struct timespec *timeout,
                            const sigset_t *mask) {
  if (!iof__compat_fiber() || (timeout && iof__ts_check(timeout) < 0) ||
      (timeout && !timeout->tv_sec && !timeout->tv_nsec))
    return iof__libc.epoll_pwait2(epfd, events, max, timeout, mask);
  return epoll_masked(epfd, events, max, deadline_ts(timeout), mask);
}

int iof_compat_epoll_pwait(int epfd, struct epoll_event *events, int max,
                           int timeout_ms, const sigset_t *mask) {
  if (timeout_ms == 0 || !iof__compat_fiber())
    return iof__libc.epoll_pwait(epfd, events, max, timeout_ms, mask);
  return epoll_masked(epfd, events, max, deadline_ms(timeout_ms), mask);
}
