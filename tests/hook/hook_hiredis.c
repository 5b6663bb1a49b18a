/* A real blocking client library (hiredis: connect, poll, read, write
 * inside libhiredis.so) called from 100 fibers at once against a real
 * redis-server this program starts on 127.0.0.1. Each fiber opens its own
 * connection, checks SET/GET/INCR replies, then issues `BLPOP key 0.2`
 * on an empty list: redis parks that client for 200 ms and answers nil.
 * On fibers the 100 parked requests overlap (about 200 ms in all, on one OS
 * thread); a blocked thread would need 100 x 200 ms.
 *
 * The same binary runs two ways, like hook_curl:
 * - hook linked, main on its thread: it launches 100 fibers itself;
 * - under iofiber-run (main is already a fiber): it makes 100 pthreads,
 *   which the hook turns into fibers.
 * Exit 0: pass; 77: redis-server is not installed; 1: failure. */
#include <errno.h>
#include <fcntl.h>
#include <hiredis/hiredis.h>
#include <signal.h>
#include <stdarg.h>
#include <spawn.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#include <time.h>
#include <unistd.h>

#include <iofiber/env.h>
#include <iofiber/io_context.h>
#include <iofiber/launch.h>

#include "hook_support.h"

#define N 100
#define BLOCK_MS 200

extern char **environ;

static int port;
static atomic_int ok_count;
static atomic_long incr_sum;
static pid_t tids[N];

static int64_t now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static const char *redis_server_path(void) {
  static const char *const c[] = {"/usr/bin/redis-server",
                                  "/usr/local/bin/redis-server"};
  for (size_t i = 0; i < sizeof c / sizeof *c; i++)
    if (access(c[i], X_OK) == 0) return c[i];
  return NULL;
}

static bool redis_ping(int p) {
  struct timeval tv = {0, 200000};
  redisContext *c = redisConnectWithTimeout("127.0.0.1", p, tv);
  bool ok = false;
  if (c && !c->err) {
    redisReply *r = redisCommand(c, "PING");
    ok = r && r->type == REDIS_REPLY_STATUS && !strcmp(r->str, "PONG");
    if (r) freeReplyObject(r);
  }
  if (c) redisFree(c);
  return ok;
}

/* Starts redis-server (no persistence) on a free port; 0 or -errno. */
static int start_redis(const char *exe, pid_t *pid) {
  for (int attempt = 0; attempt < 5; attempt++) {
    int p = hook_free_port();
    if (p < 0) return p;
    char ps[16];
    snprintf(ps, sizeof ps, "%d", p);
    char *argv[] = {(char *)exe, "--port",     ps,        "--bind",
                    "127.0.0.1", "--save",     "",        "--appendonly",
                    "no",        "--loglevel", "warning", NULL};
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
    int r = posix_spawn(pid, exe, &fa, NULL, argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    if (r) return -r;
    for (int i = 0; i < 100; i++) { /* up to ~5 s */
      if (redis_ping(p)) {
        port = p;
        return 0;
      }
      int st;
      if (waitpid(*pid, &st, WNOHANG) == *pid) break; /* port taken */
      usleep(50000);
    }
    kill(*pid, SIGKILL);
    waitpid(*pid, NULL, 0);
  }
  return -EADDRINUSE;
}

static redisReply *cmd(redisContext *c, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  redisReply *r = redisvCommand(c, fmt, ap);
  va_end(ap);
  return r;
}

static bool check(int i, redisContext *c) {
  char key[32], val[32];
  snprintf(key, sizeof key, "k:%d", i);
  snprintf(val, sizeof val, "value-%d", i * 7);
  redisReply *r = cmd(c, "SET %s %s", key, val);
  bool ok = r && r->type == REDIS_REPLY_STATUS && !strcmp(r->str, "OK");
  if (r) freeReplyObject(r);
  if (!ok) return false;
  r = cmd(c, "GET %s", key);
  ok = r && r->type == REDIS_REPLY_STRING && !strcmp(r->str, val);
  if (r) freeReplyObject(r);
  if (!ok) return false;
  for (int k = 1; k <= 3; k++) {
    r = cmd(c, "INCR n:%d", i);
    ok = r && r->type == REDIS_REPLY_INTEGER && r->integer == k;
    if (r) freeReplyObject(r);
    if (!ok) return false;
  }
  r = cmd(c, "INCR total");
  ok =
      r && r->type == REDIS_REPLY_INTEGER && r->integer >= 1 && r->integer <= N;
  if (ok) atomic_fetch_add(&incr_sum, (long)r->integer);
  if (r) freeReplyObject(r);
  if (!ok) return false;
  /* Parked by the server for BLOCK_MS, then nil. */
  int64_t t0 = now_ms();
  r = cmd(c, "BLPOP empty:%d %.3f", i, BLOCK_MS / 1000.0);
  ok = r && r->type == REDIS_REPLY_NIL && now_ms() - t0 >= BLOCK_MS - 20;
  if (r) freeReplyObject(r);
  return ok;
}

static void client(int i) {
  tids[i] = (pid_t)syscall(SYS_gettid);
  struct timeval tv = {5, 0};
  redisContext *c = redisConnectWithTimeout("127.0.0.1", port, tv);
  if (!c || c->err) {
    fprintf(stderr, "hook_hiredis: client %d: connect: %s\n", i,
            c ? c->errstr : "no memory");
    if (c) redisFree(c);
    return;
  }
  if (check(i, c))
    atomic_fetch_add(&ok_count, 1);
  else
    fprintf(stderr, "hook_hiredis: client %d: wrong reply (%s)\n", i,
            c->err ? c->errstr : "unexpected value");
  redisFree(c);
}

int main(void) {
  const char *exe = redis_server_path();
  if (!exe) {
    printf("hook_hiredis: SKIP: redis-server not installed "
           "(scripts/install-deps.sh installs redis-server)\n");
    return 77;
  }
  bool under_run = iof_env_current() != NULL;
  pid_t server;
  int r = start_redis(exe, &server);
  if (r < 0) {
    fprintf(stderr, "hook_hiredis: redis-server: %s\n", strerror(-r));
    return 1;
  }
  int64_t t0 = now_ms();
  if (hook_run_clients(N, under_run, client) < 0) {
    fprintf(stderr, "hook_hiredis: the clients could not start\n");
    return 1;
  }
  int64_t elapsed = now_ms() - t0;
  /* The shared counter went 1..N, each value seen once. */
  bool total_ok = atomic_load(&incr_sum) == (long)N * (N + 1) / 2;
  kill(server, SIGTERM);
  waitpid(server, NULL, 0);
  int distinct = 0;
  for (int i = 0; i < N; i++) {
    bool seen = false;
    for (int j = 0; j < i; j++) seen |= tids[j] == tids[i];
    distinct += !seen;
  }
  int ok = atomic_load(&ok_count);
  printf("hook_hiredis: %s: %d/%d clients ok in %lld ms (BLPOP %d ms each), "
         "INCR total %s, %d distinct OS thread(s) ran them\n",
         under_run ? "iofiber-run" : "hook linked", ok, N, (long long)elapsed,
         BLOCK_MS, total_ok ? "1..N" : "WRONG", distinct);
  /* iofiber-run --threads K spreads the "threads" over K io threads; the
   * hook takes IOF_THREADS out of main's environment, so the test is told
   * K by a variable of its own. */
  const char *th = getenv("IOF_TEST_IO_THREADS");
  int io_threads = under_run && th && atoi(th) > 0 ? atoi(th) : 1;
  bool pass = ok == N && total_ok && elapsed >= BLOCK_MS - 20 &&
              elapsed < 10 * BLOCK_MS && distinct <= io_threads;
  return pass ? 0 : 1;
}
