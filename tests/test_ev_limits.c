/* libev at the edge of the process's resources: out of descriptors and out
 * of memory must come back as error codes, and the process goes on.
 *
 * - Rule: with exactly one free descriptor iof_io_context_create returns
 *   NULL with errno EMFILE (libev would abort creating its async pipe);
 *   attach too; a libev pipe failure the probe did not see is survived.
 *   Checked in a forked child (descriptor limits are per process).
 * - Rule: when libev's bookkeeping cannot grow (its realloc fails), the
 *   process does not abort: the growth is served from the emergency
 *   reserve, the next operation that needs libev reports -ENOMEM while the
 *   reserve cannot be refilled, and operations succeed again once memory
 *   is back. Allocation failures are injected through malloc/realloc
 *   (plain builds; the sanitizers own malloc). */
#include "test_support.h"
#include "io_test.h"

#include <iofiber/iofiber.h>

#include <errno.h>
#include <ev.h>
#include <fcntl.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define SANITIZED 1
#endif
#endif

#define MS 1000000LL

IOF_TEST_WATCHDOG(arm, disarm, 20)

/* ---- allocation failure injection (plain builds) ------------------------ */

#ifndef SANITIZED
extern void *__libc_malloc(size_t n);
extern void *__libc_realloc(void *p, size_t n);

#define BIG 8192
static atomic_int fail_big_next; /* fail this many requests >= BIG */
static atomic_bool fail_big_all; /* fail every request >= BIG */
static atomic_int failed_big;    /* how many were failed */

static bool inject(size_t n) {
  if (n < BIG) return false;
  if (atomic_load(&fail_big_all)) {
    atomic_fetch_add(&failed_big, 1);
    return true;
  }
  int k = atomic_load(&fail_big_next);
  while (k > 0 && !atomic_compare_exchange_weak(&fail_big_next, &k, k - 1)) {
  }
  if (k > 0) atomic_fetch_add(&failed_big, 1);
  return k > 0;
}

void *malloc(size_t n) {
  if (inject(n)) {
    errno = ENOMEM;
    return NULL;
  }
  return __libc_malloc(n);
}

void *realloc(void *p, size_t n) {
  if (inject(n)) {
    errno = ENOMEM;
    return NULL;
  }
  return __libc_realloc(p, n);
}
#endif

/* ---- out of descriptors (forked child) ---------------------------------- */

/* Leaves exactly `free_n` descriptors free under the current limit: fills
 * the table with /dev/null, then closes free_n of them. */
static int fill[256];
static int nfill;

static void leave_free(int free_n) {
  while (nfill > 0 && free_n-- > 0) close(fill[--nfill]);
}

static void fill_all(void) {
  for (;;) {
    int fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
    if (fd < 0) break;
    if (nfill == 256) _exit(80);
    fill[nfill++] = fd;
  }
}

/* What a running io_context asks libev for needs no new descriptor: a
 * timer, a signal (the loop's wake-up pipe serves it), an io watcher on a
 * socket made earlier. Checked with the table full. */
typedef struct full {
  iof_io_context *io;
  iof_socket *s;
  int sleep_r, sig_r;
  ssize_t read_r;
} full;

static int full_signal_fn(void *arg) {
  full *f = arg;
  f->sig_r = iof_signal_wait(f->io, SIGUSR2);
  return 0;
}

static int full_main_fn(void *arg) {
  full *f = arg;
  f->sleep_r = iof_sleep_for(2 * MS);
  kill(getpid(), SIGUSR2); /* the signal fiber waits by now */
  char c;
  f->read_r = iof_read_some(f->s, &c, 1);
  return 0;
}

static void fd_child(void) {
  /* The library's first io_context (with descriptors to spare). */
  iof_io_context *io = iof_io_context_create();
  if (!io) _exit(10);
  if (iof_io_context_destroy(io) != 0) _exit(11);
  struct rlimit rl;
  getrlimit(RLIMIT_NOFILE, &rl);
  rl.rlim_cur = 64;
  if (setrlimit(RLIMIT_NOFILE, &rl) != 0) _exit(12);

  /* Exactly one free: the loop's epoll takes it, the async pipe cannot be
   * made: NULL/EMFILE, not libev's abort. */
  fill_all();
  leave_free(1);
  errno = 0;
  if (iof_io_context_create()) _exit(20);
  if (errno != EMFILE) _exit(21);
  /* None free: NULL/EMFILE too. */
  fill_all();
  errno = 0;
  if (iof_io_context_create()) _exit(22);
  if (errno != EMFILE) _exit(23);

  /* attach to a host loop that has no async pipe yet, nothing free. */
  leave_free(1);
  struct ev_loop *host = ev_loop_new(EVFLAG_AUTO);
  if (!host) _exit(30);
  errno = 0;
  if (iof_io_context_attach(host)) _exit(31);
  if (errno != EMFILE) _exit(32);

  /* libev asked directly with nothing free (what a race past the probe
   * looks like): the reserved pair lets it make its pipe; no abort. */
  ev_async a;
  ev_async_init(&a, NULL);
  ev_async_start(host, &a);
  if (!ev_is_active(&a)) _exit(33);
  ev_async_stop(host, &a);
  ev_loop_destroy(host); /* closes its pipe: two free again */

  /* With room again (the reserve pair, epoll, eventfd) it works. */
  leave_free(4);
  io = iof_io_context_create();
  if (!io) _exit(40);

  /* Then, with the table full again, timers, signals and io watchers. */
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) _exit(42);
  full f = {.io = io, .sleep_r = 1, .sig_r = 1, .read_r = 1};
  if (iof_socket_adopt(io, sv[0], &f.s) != 0) _exit(43);
  fill_all();
  if (write(sv[1], "z", 1) != 1) _exit(44);
  if (iof_launch(iof_io_context_executor(io), full_signal_fn, &f) != 0)
    _exit(45);
  if (iof_launch(iof_io_context_executor(io), full_main_fn, &f) != 0) _exit(46);
  if (iof_io_context_run_for(io, 2000 * MS) < 0) _exit(47);
  if (f.sleep_r != 0) _exit(48);
  if (f.sig_r != SIGUSR2) _exit(49);
  if (f.read_r != 1) _exit(50);
  if (iof_io_context_destroy(io) != 0) _exit(51);
  _exit(0);
}

static void out_of_descriptors_is_emfile_not_abort(void **state) {
  (void)state;
  int errp[2];
  assert_int_equal(pipe(errp), 0);
  fflush(NULL);
  pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) {
    close(errp[0]);
    dup2(errp[1], 2);
    close(errp[1]);
    signal(SIGABRT, SIG_DFL);
    fd_child();
  }
  close(errp[1]);
  char err[4096];
  size_t len = 0;
  ssize_t r;
  while (len < sizeof err - 1 &&
         (r = read(errp[0], err + len, sizeof err - 1 - len)) > 0)
    len += (size_t)r;
  err[len] = 0;
  close(errp[0]);
  int st;
  assert_int_equal(waitpid(pid, &st, 0), pid);
  if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
    fail_msg("child: %s %d, stderr:\n%s", WIFEXITED(st) ? "exit" : "signal",
             WIFEXITED(st) ? WEXITSTATUS(st) : WTERMSIG(st), err);
}

/* ---- out of memory inside libev (injected) ------------------------------ */

#ifndef SANITIZED
typedef struct oom {
  iof_io_context *io;
  int high_fd, low_fd;
  int grew, refused_wait, refused_sleep, recovered;
} oom;

static int oom_fn(void *arg) {
  oom *o = arg;
  /* (1) libev's descriptor table must grow to high_fd: the system says
   * no once, the reserve serves it, the wait succeeds. */
  atomic_store(&fail_big_next, 1);
  o->grew = iof_wait_readable(o->io, o->high_fd, 1000 * MS);
  atomic_store(&fail_big_next, 0);
  /* (2) Memory stays short: the reserve cannot be refilled, so what needs
   * libev is refused up front. */
  atomic_store(&fail_big_all, true);
  o->refused_wait = iof_wait_readable(o->io, o->low_fd, 1000 * MS);
  o->refused_sleep = iof_sleep_for(1 * MS);
  atomic_store(&fail_big_all, false);
  /* (3) Memory is back: serving again. */
  o->recovered = iof_wait_readable(o->io, o->low_fd, 1000 * MS);
  return 0;
}
#endif

static void libev_out_of_memory_is_enomem_not_abort(void **state) {
  (void)state;
#ifdef SANITIZED
  skip();
#else
  struct rlimit rl;
  getrlimit(RLIMIT_NOFILE, &rl);
  if (rl.rlim_cur < 1100 && rl.rlim_max >= 1100) {
    rl.rlim_cur = 1100;
    setrlimit(RLIMIT_NOFILE, &rl);
  }
  getrlimit(RLIMIT_NOFILE, &rl);
  if (rl.rlim_cur < 1100) skip();
  iof_io_context *io = iof_io_context_create();
  assert_non_null(io);
  int sv[2];
  assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
  assert_int_equal(write(sv[1], "x", 1), 1); /* sv[0] is readable */
  int high = dup2(sv[0], 1050);
  assert_int_equal(high, 1050);
  oom o = {.io = io, .high_fd = high, .low_fd = sv[0]};
  atomic_store(&failed_big, 0);
  launch(io, oom_fn, &o);
  run_all(io);
  assert_int_equal(o.grew, 0);
  assert_true(atomic_load(&failed_big) >= 1);
  assert_int_equal(o.refused_wait, -ENOMEM);
  assert_int_equal(o.refused_sleep, -ENOMEM);
  assert_int_equal(o.recovered, 0);
  close(high);
  close(sv[0]);
  close(sv[1]);
  assert_int_equal(iof_io_context_destroy(io), 0);
#endif
}

#define T(f) cmocka_unit_test_setup_teardown(f, arm, disarm)

int main(void) {
  const struct CMUnitTest tests[] = {
      T(out_of_descriptors_is_emfile_not_abort),
      T(libev_out_of_memory_is_enomem_not_abort),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
