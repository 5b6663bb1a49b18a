/* Tutorial step 1: fibers and launching (docs/tutorial.md).
 *
 * Two fibers take turns on one io_context. Each runs straight-line code;
 * iof_yield() lets the other ready fibers run, and iof_io_context_run()
 * returns once every launched fiber has finished. */
#include <stdio.h>

#include <iofiber/iofiber.h>

static int counter(void *arg) {
  const char *who = arg;
  for (int i = 1; i <= 3; i++) {
    printf("%s: step %d\n", who, i);
    iof_yield(); /* the other fiber runs now */
  }
  return 0;
}

int main(void) {
  iof_io_context *io = iof_io_context_create();
  if (!io) return 1;
  iof_executor_ref ex = iof_io_context_executor(io);
  /* Launching never runs the fiber right away: it is queued on ex. */
  if (iof_launch(ex, counter, "ping") != 0) return 1;
  if (iof_launch(ex, counter, "pong") != 0) return 1;
  int ran = iof_io_context_run(io); /* runs until no work is left */
  printf("run returned after %d fiber resumes\n", ran);
  return iof_io_context_destroy(io) == 0 ? 0 : 1;
}
