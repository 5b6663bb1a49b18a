/* The program the gdb test (tests/gdb/run.sh) debugs: two fibers suspended
 * in known functions, and a third that stops in gdb_stop_here() while they
 * wait. After the breakpoint it releases them and exits 0. */
#include <iofiber/iofiber.h>

#include <stdio.h>

static iof_event ev;

/* noinline and with a side effect: these must appear as frames. */
__attribute__((noinline)) int parked_in_alpha(int depth) {
  if (depth > 0) return parked_in_alpha(depth - 1) + 1;
  return iof_event_wait(&ev);
}

__attribute__((noinline)) int napping_in_beta(void) {
  return iof_sleep_for(20 * 1000000); /* 20 ms */
}

__attribute__((noinline)) void gdb_stop_here(void) {
  __asm__ volatile("" ::: "memory");
}

static int alpha(void *arg) {
  (void)arg;
  return parked_in_alpha(3) == 3 ? 0 : -1;
}

static int beta(void *arg) {
  (void)arg;
  return napping_in_beta();
}

static int inspector(void *arg) {
  (void)arg;
  gdb_stop_here();
  iof_fiber_dump(stdout);
  return iof_event_set(&ev);
}

int main(void) {
  iof_io_context *io = iof_io_context_create();
  if (!io || iof_event_init(&ev, true) != 0) return 1;
  iof_executor_ref ex = iof_io_context_executor(io);
  iof_launch_opts a = {.name = "alpha"}, b = {.name = "beta"},
                  c = {.name = "inspector"};
  if (iof_run_async(ex, &a, alpha, NULL) || iof_run_async(ex, &b, beta, NULL) ||
      iof_run_async(ex, &c, inspector, NULL))
    return 1;
  if (iof_io_context_run(io) < 0) return 1;
  iof_event_destroy(&ev);
  if (iof_io_context_destroy(io) != 0) return 1;
  puts("gdb_target: done");
  return 0;
}
