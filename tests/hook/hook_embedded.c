/* A legacy libev server that links libiofiber-hook and moves one handler to
 * fibers: the host owns ev_default_loop, runs it itself (ev_run), keeps its
 * own watchers (a 5 ms ev_timer, an ev_io on a pipe), and attaches an
 * io_context to the loop. 50 fibers on that context call a real blocking
 * client library (libcurl's easy interface) against a local server that
 * answers after D = 200 ms.
 *
 * What it proves: the library's waits are watchers on the host's loop, so
 * the loop never stops turning. The host's timer fires all through the
 * requests (its largest gap stays far below D; a blocked thread would give
 * one gap of 50 x D), the host's own ev_io answers a fiber's write through
 * the hook, all fetches overlap (about D in all, on one OS thread), and
 * the host's own blocking call outside fibers goes straight to libc.
 * Exit 0 on success, 1 on failure; a watchdog ends a hung run. */
#include <curl/curl.h>
#include <errno.h>
#include <ev.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <iofiber/io_context.h>
#include <iofiber/launch.h>

#include "hook_support.h"
#include "http_delay_server.h"

#define N 50
#define DELAY_MS 200
#define TICK_MS 5
#define WATCHDOG_S 30

static int port;
static int ok_count, done_count;
static pid_t tids[N];
static pid_t host_tid;

/* The host's own state: timer ticks and the largest gap between two. */
static int64_t last_tick_ms, max_gap_ms;
static long ticks;
/* The pipe a fiber writes through the hook and the host's ev_io reads. */
static int to_host[2];
static char host_got;

static int64_t now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void on_tick(struct ev_loop *loop, ev_timer *w, int revents) {
  (void)loop, (void)w, (void)revents;
  int64_t t = now_ms();
  if (t - last_tick_ms > max_gap_ms) max_gap_ms = t - last_tick_ms;
  last_tick_ms = t;
  ticks++;
}

static void on_pipe(struct ev_loop *loop, ev_io *w, int revents) {
  (void)revents;
  /* The host's code on the loop thread, outside fibers: a plain read. */
  if (read(w->fd, &host_got, 1) != 1) host_got = '?';
  ev_io_stop(loop, w);
}

static int fetch(void *arg) {
  int i = (int)(intptr_t)arg;
  tids[i] = (pid_t)syscall(SYS_gettid);
  if (i == 0 && write(to_host[1], "f", 1) != 1)
    fprintf(stderr, "hook_embedded: write to the host: %s\n", strerror(errno));
  /* Fibers of one loop thread: no race on the counts. */
  if (http_delay_fetch(port, i, "hook_embedded")) ok_count++;
  done_count++;
  return 0;
}

int main(int argc, char **argv) {
  if (argc > 1 && !strcmp(argv[1], "--server"))
    return http_delay_server_child(DELAY_MS);
  signal(SIGALRM, SIG_DFL);
  alarm(WATCHDOG_S);
  int keep = -1;
  port = http_delay_server_spawn(&keep);
  if (port < 0) {
    fprintf(stderr, "hook_embedded: server: %s\n", strerror(-port));
    return 1;
  }
  if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK) return 1;
  if (pipe(to_host)) return 1;
  host_tid = (pid_t)syscall(SYS_gettid);

  /* The host: its loop and its watchers, before iofiber is involved. */
  struct ev_loop *loop = ev_default_loop(0);
  ev_timer tick;
  ev_timer_init(&tick, on_tick, TICK_MS / 1000.0, TICK_MS / 1000.0);
  ev_timer_start(loop, &tick);
  ev_io pipe_w;
  ev_io_init(&pipe_w, on_pipe, to_host[0], EV_READ);
  ev_io_start(loop, &pipe_w);

  iof_io_context *io = iof_io_context_attach(loop);
  if (!io) {
    fprintf(stderr, "hook_embedded: attach: %s\n", strerror(errno));
    return 1;
  }
  for (int i = 0; i < N; i++) {
    iof_launch_opts o = {.stack_size = 256 * 1024};
    if (iof_run_async(iof_io_context_executor(io), &o, fetch,
                      (void *)(intptr_t)i))
      return 1;
  }
  unsigned long plain_before = hook_count("usleep", 2);
  int64_t t0 = now_ms();
  last_tick_ms = t0;
  /* The host's own loop, as it always ran it. */
  while (done_count < N && now_ms() - t0 < 20000) ev_run(loop, EVRUN_ONCE);
  int64_t elapsed = now_ms() - t0;
  usleep(1); /* the host's own blocking call, outside fibers */
  unsigned long plain_after = hook_count("usleep", 2);
  ev_timer_stop(loop, &tick);
  ev_io_stop(loop, &pipe_w);
  int d = iof_io_context_destroy(io);
  curl_global_cleanup();
  close(keep);

  int same_thread = 0;
  for (int i = 0; i < N; i++) same_thread += tids[i] == host_tid;
  unsigned long poll_fiber = hook_count("poll", 0);
  unsigned long poll_blocked = hook_count("poll", 1);
  printf("hook_embedded: %d/%d ok in %lld ms (D = %d ms) on the host's "
         "thread (%d/%d), host timer: %ld ticks, largest gap %lld ms; host "
         "ev_io read '%c'; poll: %lu in fibers, %lu blocked; usleep outside "
         "fibers: %lu\n",
         ok_count, N, (long long)elapsed, DELAY_MS, same_thread, N, ticks,
         (long long)max_gap_ms, host_got ? host_got : '-', poll_fiber,
         poll_blocked, plain_after - plain_before);
  bool pass = ok_count == N && d == 0 && same_thread == N &&
              elapsed >= DELAY_MS - 20 && elapsed < 10 * DELAY_MS &&
              max_gap_ms < DELAY_MS / 2 && ticks >= elapsed / TICK_MS / 4 &&
              host_got == 'f' && poll_blocked == 0 && poll_fiber > 0 &&
              plain_after - plain_before == 1;
  return pass ? 0 : 1;
}
