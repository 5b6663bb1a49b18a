/* Tutorial step 3: timeouts and cancellation (docs/tutorial.md).
 *
 * - iof_sleep_for suspends one fiber, not the thread.
 * - iof_with_deadline gives a piece of code a time limit: every blocking
 *   call inside it completes with -ECANCELED when the limit passes, and the
 *   call returns -ETIMEDOUT.
 * - A stop source cancels whole chains: every blocking call of a fiber
 *   launched with its token returns -ECANCELED once it is requested. */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <iofiber/iofiber.h>

#define MS ((int64_t)1000000)

static iof_io_context *io;
static iof_stop_source stop;
static int failures;

static void check(const char *what, int got, int want) {
  printf("%-40s %s (%s)\n", what, got == want ? "ok" : "UNEXPECTED",
         got < 0 ? strerror(-got) : "0");
  failures += got != want;
}

/* Waits for data that never comes: only a deadline or a stop ends it. */
static int read_forever(void *arg) {
  iof_socket *s = arg;
  char c;
  return (int)iof_read_some(s, &c, 1);
}

static int with_deadline(void *arg) {
  iof_socket *s = arg;
  int64_t t0 = iof_now_ns();
  check("sleep 10 ms", iof_sleep_for(10 * MS), 0);
  check("read with a 20 ms deadline",
        iof_with_deadline(20 * MS, read_forever, s), -ETIMEDOUT);
  printf("both took %lld ms\n", (long long)((iof_now_ns() - t0) / MS));
  iof_stop_source_request(&stop); /* ends the sleeper below */
  return 0;
}

static int sleeper(void *arg) {
  (void)arg;
  check("an hour's sleep, stopped", iof_sleep_for(3600 * 1000 * MS),
        -ECANCELED);
  check("any later call is cancelled at once", iof_sleep_for(MS), -ECANCELED);
  return 0;
}

int main(void) {
  int fds[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) != 0) return 1;
  io = iof_io_context_create();
  iof_socket *rd;
  if (!io || iof_socket_adopt(io, fds[0], &rd) != 0) return 1;
  iof_stop_source_init(&stop);
  iof_launch_opts opts = {.stop_token = iof_stop_source_token(&stop)};
  iof_executor_ref ex = iof_io_context_executor(io);
  if (iof_launch(ex, with_deadline, rd) ||
      iof_run_async(ex, &opts, sleeper, NULL))
    return 1;
  iof_io_context_run(io);
  iof_socket_free(rd);
  close(fds[1]);
  iof_stop_source_destroy(&stop);
  iof_io_context_destroy(io);
  return failures ? 1 : 0;
}
