/* Stack overflow reporting, as death tests in forked children: a fiber that
 * recurses without bound into its guard page dies with SIGABRT after one
 * line on stderr naming it and its stack size; other faults are not
 * reported as overflows and keep their usual outcome.
 *
 * IOF_TEST_THREADED: one child overflows a fiber on a second thread.
 *
 * The parent never runs a fiber itself: each child is the first user of
 * the library in its process, so it installs the overflow handler there
 * (after any handler the child installed first). */
#include "test_support.h"

#include <iofiber/fiber.h>
#include <iofiber/frame_allocator.h>

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#if defined(__has_include)
#if __has_include(<valgrind/valgrind.h>)
#include <valgrind/valgrind.h>
#define ON_VALGRIND() (RUNNING_ON_VALGRIND != 0)
#endif
#endif
#ifndef ON_VALGRIND
#define ON_VALGRIND() 0
#endif

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define UNDER_SANITIZER 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define UNDER_SANITIZER 1
#endif
#endif
#ifndef UNDER_SANITIZER
#define UNDER_SANITIZER 0
#endif

#define SMALL IOF_FIBER_STACK_MIN

/* ---- what the children run ----------------------------------------------- */

static volatile int never = -1; /* keeps the recursion from being provably
                                   infinite (or a loop) to the compiler */

static __attribute__((noinline)) int recurse(int n) {
  volatile char buf[200];
  buf[0] = (char)n;
  buf[sizeof buf - 1] = (char)(n >> 8);
  if (n == never) return 0;
  int r = recurse(n + 1); /* not a tail call: buf is read after it */
  return r + buf[0] + buf[sizeof buf - 1];
}

static int deep_fiber(void *arg) {
  (void)arg;
  return recurse(0);
}

/* Address 16, hidden from the compiler's bounds analysis. */
static volatile int *volatile bad_address = (volatile int *)(uintptr_t)16;

static int null_write_fiber(void *arg) {
  (void)arg;
  *bad_address = 1;
  return 0;
}

/* The child's end of the info pipe: it reports the fiber's stack size. */
static int info_fd = -1;

static void report_size(iof_fiber *f) {
  size_t n = iof_fiber_stack_size(f);
  ssize_t w = write(info_fd, &n, sizeof n);
  (void)w;
}

static iof_fiber *make(iof_frame_allocator *a, size_t size, iof_fn fn,
                       const char *name) {
  iof_fiber *f = iof_fiber_create(a, size, fn, NULL);
  if (!f) _exit(90);
  if (name && iof_fiber_set_name(f, name) != 0) _exit(91);
  report_size(f);
  return f;
}

static void run(iof_fiber *f) {
  if (iof_fiber_resume(f) != 0) _exit(92);
}

/* One frame of 80,000 bytes on a 64 KiB stack: without stack-clash
 * probing the stack pointer jumps over the guard page into whatever lies
 * below (here another fiber's stack) and the writes land there silently. */
static __attribute__((noinline)) int big_frame(int n) {
  volatile char buf[80000];
  IOF_TEST_ESCAPE(buf);
  buf[0] = (char)n;
  buf[sizeof buf - 1] = (char)(n + 1);
  return buf[0] + buf[sizeof buf - 1];
}

static int big_frame_fiber(void *arg) {
  (void)arg;
  return big_frame(never);
}

enum scenario {
  SC_BIG_FRAME,      /* "big": an 80,000-byte frame, default 64 KiB stack */
  SC_DEFAULT_ALLOC,  /* "deep", 16 KiB from the default allocator */
  SC_POOL,           /* "deep", a pool of 16 KiB stacks */
  SC_DENSE,          /* "deep", a pool of dense 16 KiB stacks (one guard
                        page per 2 MiB chunk) */
  SC_MMAP,           /* "deep", the mmap allocator, 64 KiB */
  SC_THREAD,         /* "deep" on a second thread */
  SC_LONG_NAME,      /* a 40-byte name, reported as its first 31 bytes */
  SC_NO_NAME,        /* unnamed: '' */
  SC_USER_HANDLER,   /* overflow with a user SIGSEGV handler installed */
  SC_NULL_IN_FIBER,  /* write to address 16 in a fiber */
  SC_NULL_IN_THREAD, /* the same outside fibers, library initialised */
  SC_NULL_CHAINED,   /* write to 16 in a fiber, user handler installed */
  SC_OWN_STACK_RO,   /* write to a read-only page inside the fiber's own
                        stack, far above its stack pointer's reach */
};

/* The mmap allocator, remembering the last frame it gave out. */
static char *last_base;

static void *rec_allocate(iof_frame_allocator *self, size_t size) {
  (void)self;
  iof_frame_allocator *m = iof_mmap_allocator();
  last_base = m->vtbl->allocate(m, size);
  return last_base;
}

static void rec_deallocate(iof_frame_allocator *self, void *p, size_t size) {
  (void)self;
  iof_frame_allocator *m = iof_mmap_allocator();
  m->vtbl->deallocate(m, p, size);
}

static const iof_frame_allocator_vtbl rec_vtbl = {rec_allocate, rec_deallocate};

static volatile int *volatile ro_address;

static int ro_write_fiber(void *arg) {
  (void)arg;
  *ro_address = 1;
  return 0;
}

static void *thread_overflow(void *arg) {
  (void)arg;
  run(make(NULL, SMALL, deep_fiber, "deep"));
  return NULL;
}

static void user_handler(int sig) {
  (void)sig;
  static const char msg[] = "user handler\n";
  ssize_t w = write(2, msg, sizeof msg - 1);
  (void)w;
  /* Die of a signal nobody else raises (an exit code could be replaced
   * by Valgrind's --error-exitcode). */
  signal(SIGUSR1, SIG_DFL);
  raise(SIGUSR1);
  _exit(42);
}

static void install_user_handler(void) {
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = user_handler;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGSEGV, &sa, NULL);
}

static void child(enum scenario sc) {
  switch (sc) {
  case SC_BIG_FRAME: {
    /* Stacks are mapped top-down: the second one (kept alive, never run)
     * lies right under the first one's guard page. */
    iof_fiber *f = make(NULL, IOF_FIBER_STACK_DEFAULT, big_frame_fiber, "big");
    iof_fiber *below =
        iof_fiber_create(NULL, IOF_FIBER_STACK_DEFAULT, big_frame_fiber, NULL);
    if (!below) _exit(97);
    run(f);
    break;
  }
  case SC_DEFAULT_ALLOC:
    run(make(NULL, SMALL, deep_fiber, "deep"));
    break;
  case SC_POOL: {
    iof_stack_pool_options o = {.stack_size = SMALL};
    iof_stack_pool *p = iof_stack_pool_create(&o);
    if (!p) _exit(93);
    run(make(iof_stack_pool_allocator(p), SMALL, deep_fiber, "deep"));
    break;
  }
  case SC_DENSE: {
    iof_stack_pool_options o = {.stack_size = SMALL,
                                .guard = IOF_STACK_GUARD_CHUNK};
    iof_stack_pool *p = iof_stack_pool_create(&o);
    if (!p) _exit(93);
    run(make(iof_stack_pool_allocator(p), SMALL, deep_fiber, "deep"));
    break;
  }
  case SC_MMAP:
    run(make(iof_mmap_allocator(), IOF_FIBER_STACK_DEFAULT, deep_fiber,
             "deep"));
    break;
  case SC_THREAD: {
    pthread_t t;
    if (pthread_create(&t, NULL, thread_overflow, NULL) != 0) _exit(94);
    pthread_join(t, NULL);
    break;
  }
  case SC_LONG_NAME:
    run(make(NULL, SMALL, deep_fiber,
             "0123456789abcdefghijklmnopqrstuvwxyzABCD"));
    break;
  case SC_NO_NAME:
    run(make(NULL, SMALL, deep_fiber, NULL));
    break;
  case SC_USER_HANDLER:
    install_user_handler();
    run(make(NULL, SMALL, deep_fiber, "deep"));
    break;
  case SC_NULL_IN_FIBER:
    run(make(NULL, SMALL, null_write_fiber, "nullw"));
    break;
  case SC_NULL_IN_THREAD: {
    /* Run (and end) a fiber first so the handler is in place. */
    iof_fiber *f = make(NULL, SMALL, deep_fiber, "unused");
    (void)iof_fiber_destroy(f);
    iof_fiber *g = iof_fiber_create(NULL, SMALL, null_write_fiber, NULL);
    (void)g;                                      /* created, never run */
    if (iof_fiber_suspend() != -EPERM) _exit(95); /* initialises the thread */
    *bad_address = 1;
    break;
  }
  case SC_OWN_STACK_RO: {
    static iof_frame_allocator rec = {&rec_vtbl};
    iof_fiber *f = make(&rec, IOF_FIBER_STACK_DEFAULT, ro_write_fiber, "ro");
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    /* The fifth page of the stack: inside it, 44 KiB below its top. */
    if (mprotect(last_base + 4 * page, page, PROT_READ) != 0) _exit(96);
    ro_address = (volatile int *)(last_base + 4 * page + 8);
    run(f);
    break;
  }
  case SC_NULL_CHAINED:
    install_user_handler();
    run(make(NULL, SMALL, null_write_fiber, "nullw"));
    break;
  }
  _exit(0); /* survived: the parent reports it */
}

/* ---- the parent side ----------------------------------------------------- */

struct outcome {
  int status;     /* from waitpid */
  char err[8192]; /* the child's stderr */
  size_t stack_size;
  bool have_size;
};

static void read_all(int fd, char *buf, size_t cap, size_t *len) {
  *len = 0;
  for (;;) {
    ssize_t r = read(fd, buf + *len, cap - 1 - *len);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) break;
    *len += (size_t)r;
    if (*len == cap - 1) {
      char sink[256]; /* drain the rest */
      while (read(fd, sink, sizeof sink) > 0) {
      }
      break;
    }
  }
  buf[*len] = '\0';
}

/* The handlers in place before cmocka installed its own. */
static const int cmocka_signals[] = {SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGSYS};
static struct sigaction saved_handlers[5];

static void save_handlers(void) {
  for (size_t i = 0; i < sizeof cmocka_signals / sizeof *cmocka_signals; i++)
    sigaction(cmocka_signals[i], NULL, &saved_handlers[i]);
}

static void run_child(enum scenario sc, struct outcome *o) {
  int errp[2], infop[2];
  assert_int_equal(pipe(errp), 0);
  assert_int_equal(pipe(infop), 0);
  fflush(NULL);
  pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) {
    /* cmocka catches SIGSEGV (and longjmps back into its runner) while a
     * test runs: give the child the handlers of a plain process, or
     * whatever the sanitizer had installed before cmocka. */
    for (size_t i = 0; i < sizeof cmocka_signals / sizeof *cmocka_signals; i++)
      sigaction(cmocka_signals[i], &saved_handlers[i], NULL);
    close(errp[0]);
    close(infop[0]);
    dup2(errp[1], 2);
    close(errp[1]);
    info_fd = infop[1];
    child(sc);
    _exit(0);
  }
  close(errp[1]);
  close(infop[1]);
  size_t len;
  memset(o, 0, sizeof *o);
  read_all(errp[0], o->err, sizeof o->err, &len);
  size_t n;
  ssize_t r = read(infop[0], &n, sizeof n);
  if (r == (ssize_t)sizeof n) {
    o->stack_size = n;
    o->have_size = true;
  }
  close(errp[0]);
  close(infop[0]);
  assert_int_equal(waitpid(pid, &o->status, 0), pid);
}

/* Lines of the child's stderr that start with "iofiber:"; Valgrind (and
 * the sanitizers) may add their own lines around them. */
static int count_lines(const char *text, const char *prefix, char *first,
                       size_t cap) {
  int n = 0;
  size_t plen = strlen(prefix);
  for (const char *p = text; *p;) {
    const char *nl = strchr(p, '\n');
    size_t len = nl ? (size_t)(nl - p) : strlen(p);
    if (len >= plen && memcmp(p, prefix, plen) == 0) {
      if (n == 0 && first) {
        size_t c = len < cap - 1 ? len : cap - 1;
        memcpy(first, p, c);
        first[c] = '\0';
      }
      n++;
    }
    p += len + (nl ? 1 : 0);
  }
  return n;
}

static void expect_overflow(enum scenario sc, const char *name) {
  struct outcome o;
  run_child(sc, &o);
  if (!(WIFSIGNALED(o.status) && WTERMSIG(o.status) == SIGABRT))
    fail_msg("child did not abort: status 0x%x, stderr:\n%s", o.status, o.err);
  assert_true(o.have_size);
  assert_true(o.stack_size > 0);
  char want[160];
  snprintf(want, sizeof want,
           "iofiber: stack overflow in fiber '%s' (stack size %zu bytes)", name,
           o.stack_size);
  char line[512] = "";
  int n = count_lines(o.err, "iofiber:", line, sizeof line);
  if (n != 1) fail_msg("%d report lines in:\n%s", n, o.err);
  assert_string_equal(line, want);
  /* Nothing else at all, unless a tool writes its own lines. */
  if (!ON_VALGRIND()) {
    char whole[200];
    snprintf(whole, sizeof whole, "%s\n", want);
    assert_string_equal(o.err, whole);
  }
}

static void test_overflow_default_allocator(void **state) {
  (void)state;
  expect_overflow(SC_DEFAULT_ALLOC, "deep");
}

static void test_overflow_pool(void **state) {
  (void)state;
  expect_overflow(SC_POOL, "deep");
}

/* A dense stack has no guard page of its own: the recursion runs through
 * the stacks carved below it to its chunk's guard page, far below its own
 * bottom. That fault went unreported (a plain SIGSEGV). */
static void test_overflow_dense(void **state) {
  (void)state;
  expect_overflow(SC_DENSE, "deep");
}

static void test_overflow_mmap(void **state) {
  (void)state;
  expect_overflow(SC_MMAP, "deep");
}

static void test_overflow_thread(void **state) {
  (void)state;
  expect_overflow(SC_THREAD, "deep");
}

/* Rule: one frame larger than the guard page is still an overflow (the
 * library and its users are built with -fstack-clash-protection, so the
 * frame is probed page by page and the first probe under the stack hits
 * the guard). */
static void test_overflow_large_frame(void **state) {
  (void)state;
  expect_overflow(SC_BIG_FRAME, "big");
}

static void test_overflow_names(void **state) {
  (void)state;
  expect_overflow(SC_LONG_NAME, "0123456789abcdefghijklmnopqrstu");
  expect_overflow(SC_NO_NAME, "");
}

/* An overflow is reported even when the program has a SIGSEGV handler of
 * its own (installed before the library's). */
static void test_overflow_with_user_handler(void **state) {
  (void)state;
  expect_overflow(SC_USER_HANDLER, "deep");
}

/* A fault that is not in a guard page is not an overflow: the process dies
 * of SIGSEGV as it would without the library. Under ASan and TSan the
 * sanitizer's own SEGV handling was there first and gets the fault: it
 * reports it ("SEGV on unknown address") and exits with its error code. */
static void expect_plain_segv(enum scenario sc) {
  struct outcome o;
  run_child(sc, &o);
  assert_int_equal(count_lines(o.err, "iofiber:", NULL, 0), 0);
  assert_null(strstr(o.err, "stack overflow"));
  if (UNDER_SANITIZER) {
    if (WIFSIGNALED(o.status)) {
      assert_int_equal(WTERMSIG(o.status), SIGSEGV);
    } else {
      assert_true(WIFEXITED(o.status));
      assert_int_not_equal(WEXITSTATUS(o.status), 0);
      assert_non_null(strstr(o.err, "SEGV"));
    }
    return;
  }
  if (!(WIFSIGNALED(o.status) && WTERMSIG(o.status) == SIGSEGV))
    fail_msg("expected SIGSEGV: status 0x%x, stderr:\n%s", o.status, o.err);
  if (!ON_VALGRIND()) assert_string_equal(o.err, "");
}

static void test_null_write_in_fiber(void **state) {
  (void)state;
  expect_plain_segv(SC_NULL_IN_FIBER);
}

static void test_null_write_outside_fibers(void **state) {
  (void)state;
  expect_plain_segv(SC_NULL_IN_THREAD);
}

/* A fault inside the fiber's own stack, while its stack pointer is far
 * from the bottom, is no overflow either. */
static void test_fault_in_own_stack(void **state) {
  (void)state;
  expect_plain_segv(SC_OWN_STACK_RO);
}

/* A fault that is not an overflow goes to the handler that was installed
 * before the library's. */
static void test_null_write_chained(void **state) {
  (void)state;
  struct outcome o;
  run_child(SC_NULL_CHAINED, &o);
  /* TSan delays a signal raised inside a handler: then _exit(42) wins. */
  bool by_handler = (WIFSIGNALED(o.status) && WTERMSIG(o.status) == SIGUSR1) ||
                    (WIFEXITED(o.status) && WEXITSTATUS(o.status) == 42);
  if (!by_handler)
    fail_msg("user handler not called: status 0x%x, stderr:\n%s", o.status,
             o.err);
  assert_int_equal(count_lines(o.err, "user handler", NULL, 0), 1);
  assert_int_equal(count_lines(o.err, "iofiber:", NULL, 0), 0);
}

int main(int argc, char **argv) {
  /* An optional argument selects tests by name pattern. */
  if (argc > 1) cmocka_set_test_filter(argv[1]);
  save_handlers();
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_overflow_default_allocator),
      cmocka_unit_test(test_overflow_pool),
      cmocka_unit_test(test_overflow_dense),
      cmocka_unit_test(test_overflow_mmap),
      cmocka_unit_test(test_overflow_thread),
      cmocka_unit_test(test_overflow_large_frame),
      cmocka_unit_test(test_overflow_names),
      cmocka_unit_test(test_overflow_with_user_handler),
      cmocka_unit_test(test_null_write_in_fiber),
      cmocka_unit_test(test_null_write_outside_fibers),
      cmocka_unit_test(test_fault_in_own_stack),
      cmocka_unit_test(test_null_write_chained),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
