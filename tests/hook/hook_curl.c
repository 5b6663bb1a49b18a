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
#include <spawn.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <iofiber/env.h>
#include <iofiber/io_context.h>
#include <iofiber/launch.h>

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

typedef struct body {
  char data[64];
  size_t len;
} body;

static size_t on_data(char *p, size_t size, size_t nmemb, void *user) {
  body *b = user;
  size_t n = size * nmemb;
  size_t room = sizeof b->data - b->len;
  memcpy(b->data + b->len, p, n < room ? n : room);
  b->len += n < room ? n : room;
  return n;
}

static void fetch(int i) {
  tids[i] = (pid_t)syscall(SYS_gettid);
  int t = os_threads();
  int m = atomic_load(&max_threads);
  while (t > m && !atomic_compare_exchange_weak(&max_threads, &m, t)) {
  }
  CURL *h = curl_easy_init();
  if (!h) return;
  char url[64];
  snprintf(url, sizeof url, "http://127.0.0.1:%d/item/%d", port, i);
  body b = {.len = 0};
  curl_easy_setopt(h, CURLOPT_URL, url);
  curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_data);
  curl_easy_setopt(h, CURLOPT_WRITEDATA, &b);
  curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, 20000L);
  CURLcode rc = curl_easy_perform(h);
  long code = 0;
  curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &code);
  if (rc == CURLE_OK && code == 200 && b.len == 5 &&
      !memcmp(b.data, "hello", 5))
    atomic_fetch_add(&ok_count, 1);
  else
    fprintf(stderr, "hook_curl: request %d: %s, HTTP %ld, %zu bytes\n", i,
            curl_easy_strerror(rc), code, b.len);
  curl_easy_cleanup(h);
}

static int fiber_main(void *arg) {
  fetch((int)(intptr_t)arg);
  return 0;
}

static void *thread_main(void *arg) {
  fetch((int)(intptr_t)arg);
  return NULL;
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
  if (under_run) {
    pthread_t t[N];
    for (int i = 0; i < N; i++)
      if (pthread_create(&t[i], NULL, thread_main, (void *)(intptr_t)i)) {
        fprintf(stderr, "hook_curl: pthread_create failed\n");
        return 1;
      }
    for (int i = 0; i < N; i++) pthread_join(t[i], NULL);
  } else {
    iof_io_context *io = iof_io_context_create();
    if (!io) return 1;
    for (int i = 0; i < N; i++) {
      iof_launch_opts o = {.stack_size = 256 * 1024};
      if (iof_run_async(iof_io_context_executor(io), &o, fiber_main,
                        (void *)(intptr_t)i))
        return 1;
    }
    iof_io_context_run(io);
    iof_io_context_destroy(io);
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
