/* What keeps libev from aborting the process.
 *
 * libev has two fatal paths: an allocation that returns NULL (ev_realloc
 * aborts) and a system error while it makes its signal/async pipe
 * (evpipe_init retries pipe() in a loop around the syserr callback, whose
 * default is abort). Neither can be turned into an error return inside
 * libev, so iofiber makes sure they are not reached, or are survived:
 *
 * - Memory. A process-wide allocator (installed before the first loop)
 *   keeps an emergency reserve: a block at least twice the largest request
 *   libev has made (an array grows to about twice its size), never less
 *   than RESERVE_MIN. When the system cannot satisfy libev, the reserve is
 *   freed and the request retried, so libev gets its memory and carries
 *   on. Every operation that is about to register something with libev
 *   first checks the reserve (iof__ev_mem_ok), and refills it if it was
 *   spent; if that fails the operation reports -ENOMEM before touching
 *   libev. Growth that happens inside ev_run (pending queues, the epoll
 *   event array) is covered by the reserve alone.
 *
 * - Descriptors. Only evpipe_init needs descriptors after the loop exists
 *   (eventfd, else a pipe). iof_io_context_create/attach probe for a free
 *   descriptor just before ev_async_start and fail with EMFILE if there is
 *   none. A thread that takes the last descriptor between the probe and
 *   libev's eventfd is caught by the syserr callback: it closes a reserved
 *   pair of descriptors (held since initialisation), so libev's retry of
 *   pipe() succeeds, and records the error for the caller, which then
 *   undoes the creation and reports EMFILE. The pair is re-acquired by
 *   the next creation. */
#include "io/io_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#define RESERVE_MIN (256 * 1024)

void *_Atomic iof__ev_reserve;    /* the emergency block, or NULL */
atomic_long iof__ev_reserve_size; /* its size (>= RESERVE_MIN) while present */
atomic_long iof__ev_largest;      /* largest request libev made */
static atomic_int fd_reserve[2] = {-1, -1};
static pthread_mutex_t fd_lock = PTHREAD_MUTEX_INITIALIZER;
static __thread int tls_syserr; /* errno of the last syserr here */
static pthread_once_t init_once = PTHREAD_ONCE_INIT;

static void say(const char *a, const char *b) {
  ssize_t w = write(STDERR_FILENO, a, strlen(a));
  if (b) w = write(STDERR_FILENO, b, strlen(b));
  w = write(STDERR_FILENO, "\n", 1);
  (void)w;
}

static void *ev_alloc(void *ptr, long size) EV_NOEXCEPT {
  if (size == 0) {
    free(ptr);
    return NULL;
  }
  long big = atomic_load_explicit(&iof__ev_largest, memory_order_relaxed);
  while (size > big &&
         !atomic_compare_exchange_weak(&iof__ev_largest, &big, size)) {
  }
  void *p = realloc(ptr, (size_t)size);
  if (p) return p;
  void *r = atomic_exchange(&iof__ev_reserve, NULL);
  if (r) {
    free(r);
    p = realloc(ptr, (size_t)size);
    if (p) return p;
  }
  /* Reserve spent (another thread's growth took it): memory may come
   * back shortly; libev aborts if it does not. */
  for (int i = 0; i < 200 && !p; i++) {
    struct timespec ms = {0, 1000000};
    nanosleep(&ms, NULL);
    p = realloc(ptr, (size_t)size);
  }
  if (!p) say("iofiber: out of memory inside libev, reserve spent", NULL);
  return p;
}

/* Under fd_lock: two racing creations must not both take a pair. */
static void take_fd_reserve(void) {
  if (atomic_load(&fd_reserve[0]) >= 0) return;
  pthread_mutex_lock(&fd_lock);
  int fds[2];
  if (atomic_load(&fd_reserve[0]) < 0 && pipe2(fds, O_CLOEXEC) == 0) {
    /* Listed where they are: a descriptor freed for libev must be under
     * the open-file limit, which may drop later. A program that wants the
     * number gets it (iof__rt_fd_release). */
    iof__rt_fd_list(fds[0]);
    iof__rt_fd_list(fds[1]);
    atomic_store(&fd_reserve[1], fds[1]);
    atomic_store(&fd_reserve[0], fds[0]);
  }
  pthread_mutex_unlock(&fd_lock);
}

static bool release_fd_reserve(void) {
  pthread_mutex_lock(&fd_lock);
  int a = atomic_exchange(&fd_reserve[0], -1);
  int b = atomic_exchange(&fd_reserve[1], -1);
  pthread_mutex_unlock(&fd_lock);
  iof__rt_fd_forget(a);
  iof__rt_fd_forget(b);
  if (a >= 0) close(a);
  if (b >= 0) close(b);
  return a >= 0 || b >= 0;
}

bool iof__rt_fd_release(int fd) {
  if (fd < 0 ||
      (fd != atomic_load(&fd_reserve[0]) && fd != atomic_load(&fd_reserve[1])))
    return false;
  /* The next creation takes a new pair (take_fd_reserve). */
  return release_fd_reserve();
}

static void on_syserr(const char *msg) EV_NOEXCEPT {
  int e = errno ? errno : EIO;
  tls_syserr = e;
  /* The pipe retry loop: hand libev the reserved descriptors. */
  if (msg && strstr(msg, "pipe") && release_fd_reserve()) return;
  if (msg && strstr(msg, "pipe")) {
    /* Nothing left to give: libev would retry forever. */
    say("iofiber: libev cannot create its pipe: ", strerror(e));
    abort();
  }
  /* Other reports (epoll_wait) return to libev, which goes on. */
}

static void init(void) {
  ev_set_allocator(ev_alloc);
  ev_set_syserr_cb(on_syserr);
  take_fd_reserve();
  void *r = malloc(RESERVE_MIN);
  if (r) {
    atomic_store(&iof__ev_reserve_size, RESERVE_MIN);
    atomic_store(&iof__ev_reserve, r);
  }
}

void iof__ev_init(void) {
  pthread_once(&init_once, init);
}

int iof__ev_mem_refill(void) {
  long want = 2 * atomic_load_explicit(&iof__ev_largest, memory_order_relaxed) +
              64 * 1024;
  if (want < RESERVE_MIN) want = RESERVE_MIN;
  void *r = atomic_load_explicit(&iof__ev_reserve, memory_order_acquire);
  if (__builtin_expect(r && atomic_load_explicit(&iof__ev_reserve_size,
                                                 memory_order_relaxed) >= want,
                       1))
    return 0;
  void *fresh = malloc((size_t)want);
  if (!fresh) return r ? 0 : -ENOMEM; /* a smaller reserve still helps */
  atomic_store(&iof__ev_reserve_size, want);
  free(atomic_exchange(&iof__ev_reserve, fresh));
  return 0;
}

int iof__ev_fd_probe(void) {
  take_fd_reserve();
  int fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (fd < 0) return errno == EMFILE || errno == ENFILE ? -errno : -EMFILE;
  close(fd);
  tls_syserr = 0;
  return 0;
}

int iof__ev_syserr_take(void) {
  int e = tls_syserr;
  tls_syserr = 0;
  return e;
}
