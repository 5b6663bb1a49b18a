/* Consumer check for the libev side of the API: a host program with its own
 * libev loop attaches an io_context, runs a fiber that sleeps on it, and
 * calls ev_run itself. Links with nothing but the iofiber target (or
 * `pkg-config --libs iofiber`): libev must come with it. */
#include <ev.h>
#include <stdio.h>

#include <iofiber/iofiber.h>

static int fiber_ran;
static int host_timer_fired;

static int sleeper(void *arg) {
  (void)arg;
  if (iof_sleep_for(1000000) != 0) return -1; /* 1 ms on the host's loop */
  fiber_ran = 1;
  return 0;
}

static void on_host_timer(struct ev_loop *loop, ev_timer *w, int revents) {
  (void)loop;
  (void)w;
  (void)revents;
  host_timer_fired = 1;
}

int main(void) {
  struct ev_loop *loop = ev_loop_new(EVFLAG_AUTO);
  if (!loop) return 1;
  iof_io_context *io = iof_io_context_attach(loop);
  if (!io) return 1;
  ev_timer t;
  ev_timer_init(&t, on_host_timer, 0.001, 0.);
  ev_timer_start(loop, &t);
  if (iof_launch(iof_io_context_executor(io), sleeper, NULL) != 0) return 1;
  ev_run(loop, 0); /* returns once the host timer and the fiber are done */
  if (iof_io_context_destroy(io) != 0) return 1;
  ev_loop_destroy(loop);
  if (!fiber_ran || !host_timer_fired) {
    fprintf(stderr, "ev_attach: fiber %d, host timer %d\n", fiber_ran,
            host_timer_fired);
    return 1;
  }
  puts("ev_attach ok");
  return 0;
}
