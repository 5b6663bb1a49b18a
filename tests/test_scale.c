/* Scale: 100,000 launched fibers live at once, each asleep on a timer,
 * then all cancelled by one stop request, in bounded time and without
 * touching vm.max_map_count: on the default pool (a guard page per stack
 * that costs no mapping on Linux 6.13+; dense chunks past the mapping
 * budget before that) and on a pool of dense chunks. Fibers on dense
 * stacks still report an overflow (checked at the switch), and a launch
 * stopped by the kernel's mapping limit says so on stderr, naming
 * vm.max_map_count. */
#include "test_support.h"

#include <iofiber/iofiber.h>

#include <errno.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

IOF_TEST_WATCHDOG(arm_watchdog, disarm_watchdog, 120)

#define N 100000
#if defined(__SANITIZE_ADDRESS__)
/* ASan's shadow of 100,000 touched stack tops stays resident (~800 MB);
 * the second run (dense pool) is kept smaller there. */
#define N_DENSE (N / 5)
#else
#define N_DENSE N
#endif
#define HOUR (3600LL * 1000000000LL)

static atomic_long asleep, cancelled, other;

static int sleeper(void *arg) {
  (void)arg;
  atomic_fetch_add(&asleep, 1);
  int r = iof_sleep_for(HOUR);
  atomic_fetch_add(r == -ECANCELED ? &cancelled : &other, 1);
  return 0;
}

static size_t count_maps(void) {
  FILE *f = fopen("/proc/self/maps", "r");
  assert_non_null(f);
  size_t n = 0;
  int c;
  while ((c = fgetc(f)) != EOF) n += c == '\n';
  fclose(f);
  return n;
}

static size_t max_map_count(void) {
  FILE *f = fopen("/proc/sys/vm/max_map_count", "r");
  unsigned long v = 65530;
  if (f) {
    if (fscanf(f, "%lu", &v) != 1) v = 65530;
    fclose(f);
  }
  return v;
}

/* Launches n sleepers on a fresh io_context (frames from alloc, NULL: the
 * default pool), waits until all sleep, cancels them with one request and
 * runs them to their end. */
static void many_sleepers(iof_frame_allocator *alloc, long n) {
  atomic_store(&asleep, 0);
  atomic_store(&cancelled, 0);
  atomic_store(&other, 0);
  uint64_t t0 = iof_test_now_ns();
  iof_io_context *io = iof_io_context_create();
  assert_non_null(io);
  iof_stop_source src;
  assert_int_equal(iof_stop_source_init(&src), 0);
  iof_launch_opts o = {0};
  o.stop_token = iof_stop_source_token(&src);
  o.frame_allocator = alloc;
  iof_executor_ref ex = iof_io_context_executor(io);
  for (long i = 0; i < n; i++) {
    int r = iof_run_async(ex, &o, sleeper, NULL);
    if (r != 0) fail_msg("launch %ld of %ld: %s", i, n, strerror(-r));
    /* Start them as we go: a queue of 100,000 unstarted fibers is not
     * what is measured. */
    if (i % 1024 == 1023) assert_true(iof_io_context_poll(io) >= 0);
  }
  while (atomic_load(&asleep) < n) assert_true(iof_io_context_poll(io) >= 0);
  size_t maps = count_maps(), max = max_map_count();
  printf("# %ld fibers asleep after %lld ms, %zu mappings (limit %zu), "
         "RSS %zu MiB\n",
         n, (long long)ms_since(t0), maps, max, iof_test_rss_bytes() >> 20);
  assert_true(maps < max * 3 / 4);
  assert_int_equal(atomic_load(&cancelled), 0);
  assert_true(iof_stop_source_request(&src));
  assert_true(iof_io_context_run(io) >= 0);
  assert_int_equal(atomic_load(&cancelled), n);
  assert_int_equal(atomic_load(&other), 0);
  printf("# all cancelled after %lld ms\n", (long long)ms_since(t0));
  assert_int_equal(iof_io_context_destroy(io), 0);
  iof_stop_source_destroy(&src);
  printf("# after destroy: %zu mappings, RSS %zu MiB\n", count_maps(),
         iof_test_rss_bytes() >> 20);
  assert_true(ms_since(t0) < 60000);
}

static void default_pool_holds_100k_sleeping_fibers(void **state) {
  (void)state;
  many_sleepers(NULL, N);
}

static void dense_pool_holds_100k_sleeping_fibers(void **state) {
  (void)state;
  iof_stack_pool_options bad = {.guard = 3};
  errno = 0;
  assert_null(iof_stack_pool_create(&bad));
  assert_int_equal(errno, EINVAL);
  iof_stack_pool_options po = {.guard = IOF_STACK_GUARD_CHUNK};
  iof_stack_pool *p = iof_stack_pool_create(&po);
  assert_non_null(p);
  many_sleepers(iof_stack_pool_allocator(p), N_DENSE);
  struct iof_stack_pool_stats st;
  assert_int_equal(iof_stack_pool_stats(p, &st), 0);
  assert_int_equal(st.live, 0);
  assert_true(st.peak >= N_DENSE);
  assert_true(st.dense >= N_DENSE);
  assert_int_equal(st.dense, st.mapped);
  assert_int_equal(iof_stack_pool_destroy(p), 0);
}

/* ---- dense stacks: overflow check and mapping limit (forked) ------------ */

static volatile int never = -1;

/* Writes a 1 KiB pattern per frame, to `depth` frames, then returns. */
static __attribute__((noinline)) int dig(int depth) {
  volatile char buf[1024];
  memset((char *)buf, 0xab, sizeof buf);
  IOF_TEST_ESCAPE(buf);
  if (depth == never || depth == 0) return buf[0];
  int r = dig(depth - 1);
  return r + buf[1];
}

static int overflow_then_suspend(void *arg) {
  int *depth = arg;
  int r = dig(*depth); /* back from it: only the zone shows the overflow */
  iof_fiber_suspend();
  return r;
}

/* Runs fn in a child with stderr on a pipe; returns the wait status and
 * what the child wrote (up to cap - 1 bytes). */
static int in_child(void (*fn)(void), char *out, size_t cap) {
  int fd[2];
  assert_int_equal(pipe(fd), 0);
  fflush(NULL);
  pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) {
    close(fd[0]);
    dup2(fd[1], 2);
    fn();
    _exit(0);
  }
  close(fd[1]);
  size_t n = 0;
  ssize_t r;
  while (n + 1 < cap && (r = read(fd[0], out + n, cap - 1 - n)) > 0)
    n += (size_t)r;
  out[n] = '\0';
  close(fd[0]);
  int st;
  assert_int_equal(waitpid(pid, &st, 0), pid);
  return st;
}

static int g_depth;

static void child_overflow(void) {
  iof_stack_pool_options po = {.stack_size = 16384,
                               .guard = IOF_STACK_GUARD_CHUNK};
  iof_stack_pool *p = iof_stack_pool_create(&po);
  if (!p) _exit(90);
  /* The first stack of a chunk is its highest: under it lies the next
   * stack of the chunk, mapped and writable, not a guard page. */
  iof_fiber *f = iof_fiber_create(iof_stack_pool_allocator(p), 16384,
                                  overflow_then_suspend, &g_depth);
  if (!f) _exit(91);
  iof_fiber_set_name(f, "digger");
  iof_fiber_resume(f);
  _exit(0); /* not reached when the check fires */
}

static void dense_stack_overflow_is_reported_at_the_switch(void **state) {
  (void)state;
  char out[512];
  /* Within the stack: no report. */
  g_depth = 4;
  int st = in_child(child_overflow, out, sizeof out);
  assert_true(WIFEXITED(st));
  assert_int_equal(WEXITSTATUS(st), 0);
  assert_string_equal(out, "");
  /* 20 KiB of frames on a 16 KiB stack: into the neighbour, then back. */
  g_depth = 20;
  st = in_child(child_overflow, out, sizeof out);
  assert_true(WIFSIGNALED(st));
  assert_int_equal(WTERMSIG(st), SIGABRT);
  assert_non_null(strstr(out, "iofiber: stack overflow in fiber 'digger'"));
}

static int noop(void *arg) {
  (void)arg;
  return 0;
}

static void child_at_map_limit(void) {
  /* Split a region page by page until the kernel refuses: the process is
   * then at vm.max_map_count. */
  size_t page = (size_t)sysconf(_SC_PAGESIZE), max = max_map_count();
  char *m = mmap(NULL, (2 * max + 8) * page, PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (m == MAP_FAILED) _exit(80);
  size_t i = 0;
  while (i < max + 4 && mprotect(m + 2 * i * page, page, PROT_READ) == 0) i++;
  if (errno != ENOMEM) _exit(81);
  iof_stack_pool_options po = {.guard = IOF_STACK_GUARD_CHUNK};
  iof_stack_pool *p = iof_stack_pool_create(&po);
  if (!p) _exit(82);
  iof_fiber *f = iof_fiber_create(iof_stack_pool_allocator(p),
                                  IOF_FIBER_STACK_DEFAULT, noop, NULL);
  if (f) _exit(83);
  if (errno != ENOMEM) _exit(84);
  _exit(0);
}

static void launch_at_the_mapping_limit_names_vm_max_map_count(void **state) {
  (void)state;
  char out[1024];
  int st = in_child(child_at_map_limit, out, sizeof out);
  assert_true(WIFEXITED(st));
  assert_int_equal(WEXITSTATUS(st), 0);
  assert_non_null(strstr(out, "vm.max_map_count"));
  assert_non_null(strstr(out, "-ENOMEM"));
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(default_pool_holds_100k_sleeping_fibers,
                                      arm_watchdog, disarm_watchdog),
      cmocka_unit_test_setup_teardown(dense_pool_holds_100k_sleeping_fibers,
                                      arm_watchdog, disarm_watchdog),
      cmocka_unit_test_setup_teardown(
          dense_stack_overflow_is_reported_at_the_switch, arm_watchdog,
          disarm_watchdog),
      cmocka_unit_test_setup_teardown(
          launch_at_the_mapping_limit_names_vm_max_map_count, arm_watchdog,
          disarm_watchdog),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
