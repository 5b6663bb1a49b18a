/* Tutorial step 6: fibers inside an existing libev program
 * (docs/tutorial.md, docs/embedding.md).
 *
 * The host owns the loop and keeps calling ev_run; iof_io_context_attach
 * adds fibers to it. The host's own watchers (here a repeating timer) and
 * the fibers share the one thread. Link with libev too (the iofiber
 * CMake targets and pkg-config files already add it). */
#include <ev.h>
#include <stdio.h>

#include <iofiber/iofiber.h>

static int ticks;

static void on_tick(struct ev_loop *loop, ev_timer *w, int revents) {
  (void)revents;
  printf("host timer tick %d\n", ++ticks);
  if (ticks == 3) ev_timer_stop(loop, w);
}

static int handler(void *arg) {
  const char *name = arg;
  for (int i = 0; i < 2; i++) {
    printf("fiber %s: step %d\n", name, i);
    iof_sleep_for(15 * 1000000); /* a timer on the host's loop */
  }
  return 0;
}

int main(void) {
  struct ev_loop *loop = ev_default_loop(0);
  iof_io_context *io = iof_io_context_attach(loop);
  if (!io) return 1;
  ev_timer tick;
  ev_timer_init(&tick, on_tick, 0.01, 0.01);
  ev_timer_start(loop, &tick);
  iof_launch(iof_io_context_executor(io), handler, "a");
  iof_launch(iof_io_context_executor(io), handler, "b");
  ev_run(loop, 0); /* the host's loop, unchanged: returns when all is done */
  iof_io_context_destroy(io); /* before the loop goes away */
  return ticks == 3 ? 0 : 1;
}
