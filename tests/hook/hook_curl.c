/* A real blocking client library (libcurl's easy interface: connect, poll,
 * send, recv inside libcurl.so) called from 100 fibers at once against a
 * local server that answers each request after D ms. On fibers all finish
 * in about D on one OS thread; on a blocked thread they would take 100 D.
 *
 * The same binary runs two ways:
 * - hook linked, main on its thread: it makes an io_context and launches
 *   100 fibers itself;
 * - under iofiber-run (main is already a fiber): it makes 100 pthreads,
 *   which the hook turns into fibers.
 * Exits 0 when every request got "hello", within 10 D, on one thread. */
#include <curl/curl.h>
#include <errno.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <iofiber/env.h>

#include "hook_support.h"
#include "http_delay_server.h"

#define N 100
#define DELAY_MS 200

static int port;
static atomic_int ok_count;
static atomic_int max_threads;
static pid_t tids[N];

static int64_t now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static int os_threads(void) {
  FILE *f = fopen("/proc/self/status", "r");
  if (!f) return -1;
  char line[256];
  int n = -1;
  while (fgets(line, sizeof line, f))
    if (sscanf(line, "Threads: %d", &n) == 1) break;
  fclose(f);
  return n;
}

static void fetch(int i) {
  tids[i] = (pid_t)syscall(SYS_gettid);
  int t = os_threads();
  int m = atomic_load(&max_threads);
  while (t > m && !atomic_compare_exchange_weak(&max_threads, &m, t)) {
  }
  if (http_delay_fetch(port, i, "hook_curl")) atomic_fetch_add(&ok_count, 1);
}

int main(int argc, char **argv) {
  if (argc > 1 && !strcmp(argv[1], "--server"))
    return http_delay_server_child(DELAY_MS);
  bool under_run = iof_env_current() != NULL;
  int keep = -1;
  port = http_delay_server_spawn(&keep);
  if (port < 0) {
    fprintf(stderr, "hook_curl: server: %s\n", strerror(-port));
    return 1;
  }
  if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK) return 1;
  int64_t t0 = now_ms();
  if (hook_run_clients(N, under_run, fetch) < 0) {
    fprintf(stderr, "hook_curl: the clients could not start\n");
    return 1;
  }
  int64_t elapsed = now_ms() - t0;
  curl_global_cleanup();
  close(keep);
  int distinct = 0;
  for (int i = 0; i < N; i++) {
    bool seen = false;
    for (int j = 0; j < i; j++) seen |= tids[j] == tids[i];
    distinct += !seen;
  }
  int ok = atomic_load(&ok_count);
  printf("hook_curl: %s: %d/%d ok in %lld ms (D = %d ms), %d distinct OS "
         "thread(s) ran them, at most %d threads in the process\n",
         under_run ? "iofiber-run" : "hook linked", ok, N, (long long)elapsed,
         DELAY_MS, distinct, atomic_load(&max_threads));
  bool pass = ok == N && elapsed >= DELAY_MS - 20 && elapsed < 10 * DELAY_MS &&
              distinct == 1 && atomic_load(&max_threads) <= 4;
  return pass ? 0 : 1;
}
