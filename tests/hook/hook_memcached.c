/* A real blocking client library (libmemcached: connect, poll, recv, send,
 * sendmsg inside libmemcached.so, on sockets it makes non-blocking itself)
 * called from 100 fibers at once against a memcached this program starts
 * on 127.0.0.1. Each client has its own memcached_st and checks:
 * - set/get of a short value and of a 200 KiB one (more than a socket
 *   buffer holds: its reads and writes wait in the middle of the value);
 * - a multi-get of its keys and a missing one (two results, right values);
 * - an increment of one shared counter (every value 1..N seen once).
 * Then, once every client got that far, each asks a second "server": a TCP
 * listener of this program that never accepts, so the request is sent and
 * no reply comes; libmemcached's poll timeout (300 ms) ends it with
 * MEMCACHED_TIMEOUT. memcached has no server-side sleep; these 100 silent
 * waits play its part. On fibers they are all in progress at one instant
 * (about 300 ms from the first start to the last end, on one OS thread); a
 * thread blocked in libmemcached's poll would need 100 x 300 ms.
 * IOF_HOOK_VERBOSE=1: no poll, connect, recv, send or sendmsg blocked the
 * thread.
 *
 * The same binary runs two ways, like hook_libpq:
 * - hook linked, main on its thread: it launches the clients as fibers;
 * - under iofiber-run (main is already a fiber): it makes pthreads, which
 *   the hook turns into fibers.
 * Exit 0: pass; 77: memcached is not installed; 1: failure. memcached is
 * stopped on every exit (a watchdog bounds the run; the server gets
 * SIGKILL when this process dies). */
#include <errno.h>
#include <libmemcached/memcached.h>
#include <netinet/in.h>
#include <pwd.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <arpa/inet.h>
#include <fcntl.h>
#include <time.h>
#include <unistd.h>

#include <iofiber/env.h>

#include "hook_support.h"

#define N 100
#define SILENT_MS 300
#define BIG (200 * 1024)
#define WATCHDOG_S 60

static volatile pid_t server;
static int port, silent_port;
static atomic_int ok_count;
static atomic_int arrived;
static atomic_long incr_sum;
static pid_t tids[N];
static int64_t wait_start[N], wait_end[N];

static int64_t now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* ---- the servers -------------------------------------------------------- */

static const char *memcached_path(void) {
  static const char *const c[] = {"/usr/bin/memcached",
                                  "/usr/local/bin/memcached"};
  for (size_t i = 0; i < sizeof c / sizeof *c; i++)
    if (access(c[i], X_OK) == 0) return c[i];
  return NULL;
}

static memcached_st *client_for(int p, uint64_t poll_ms) {
  memcached_st *mc = memcached_create(NULL);
  if (!mc) return NULL;
  if (memcached_server_add(mc, "127.0.0.1", (in_port_t)p) !=
          MEMCACHED_SUCCESS ||
      memcached_behavior_set(mc, MEMCACHED_BEHAVIOR_CONNECT_TIMEOUT, 5000) !=
          MEMCACHED_SUCCESS ||
      memcached_behavior_set(mc, MEMCACHED_BEHAVIOR_POLL_TIMEOUT, poll_ms) !=
          MEMCACHED_SUCCESS) {
    memcached_free(mc);
    return NULL;
  }
  return mc;
}

/* The shared counter the clients increment; also the readiness check. */
static bool reset_counter(int p) {
  memcached_st *mc = client_for(p, 200);
  if (!mc) return false;
  bool ok = memcached_set(mc, "total", 5, "0", 1, 0, 0) == MEMCACHED_SUCCESS;
  memcached_free(mc);
  return ok;
}

/* memcached refuses to run as root without -u. The parent death signal:
 * a test killed from outside takes the server with it. */
static pid_t spawn_memcached(const char *exe, int p) {
  char ps[16];
  snprintf(ps, sizeof ps, "%d", p);
  const char *user = getpwnam("nobody") ? "nobody" : "root";
  char *argv[] = {(char *)exe,  "-l",
                  "127.0.0.1",  "-p",
                  ps,           "-U",
                  "0",          "-t",
                  "2",          "-c",
                  "1024",       "-m",
                  "64",         geteuid() == 0 ? "-u" : NULL,
                  (char *)user, NULL};
  pid_t parent = getpid();
  pid_t pid = fork();
  if (pid == 0) {
    int in = open("/dev/null", O_RDWR);
    if (in < 0 || dup2(in, 0) < 0 || dup2(in, 1) < 0) _exit(127);
    if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0 || getppid() != parent)
      _exit(125);
    execv(exe, argv);
    _exit(127);
  }
  return pid < 0 ? -errno : pid;
}

/* Starts memcached on a free port; waits (bounded) until it answers. */
static int start_server(const char *exe) {
  for (int attempt = 0; attempt < 5; attempt++) {
    int p = hook_free_port();
    if (p < 0) return p;
    pid_t pid = spawn_memcached(exe, p);
    if (pid < 0) return (int)pid;
    server = pid;
    for (int64_t end = now_ms() + 10000; now_ms() < end;) {
      if (reset_counter(p)) {
        port = p;
        return 0;
      }
      int st;
      if (waitpid(pid, &st, WNOHANG) == pid) { /* port taken, or broken */
        server = 0;
        break;
      }
      usleep(20000);
    }
    if (server) return -ETIMEDOUT;
  }
  return -EADDRINUSE;
}

static void stop_server(void) {
  pid_t pid = server;
  if (!pid) return;
  kill(pid, SIGKILL);
  waitpid(pid, NULL, 0);
  server = 0;
}

/* A listener that never accepts: the kernel completes the clients'
 * handshakes into its backlog, takes their requests, and nobody answers. */
static int silent_listener(void) {
  int s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (s < 0) return -errno;
  struct sockaddr_in a = {.sin_family = AF_INET};
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t l = sizeof a;
  if (bind(s, (struct sockaddr *)&a, sizeof a) != 0 || listen(s, 1024) != 0 ||
      getsockname(s, (struct sockaddr *)&a, &l) != 0) {
    int e = errno;
    close(s);
    return -e;
  }
  silent_port = ntohs(a.sin_port);
  return s;
}

static void on_watchdog(int sig) {
  (void)sig;
  static const char msg[] = "hook_memcached: watchdog: the test hung\n";
  ssize_t w = write(2, msg, sizeof msg - 1);
  (void)w;
  if (server) kill(server, SIGKILL);
  _exit(1);
}

/* ---- the clients -------------------------------------------------------- */

static bool fail_at(int i, const char *what, memcached_st *mc,
                    memcached_return_t rc) {
  fprintf(stderr, "hook_memcached: client %d: %s: %s (%s)\n", i, what,
          memcached_strerror(mc, rc), memcached_last_error_message(mc));
  return false;
}

static void big_value(char *buf, int i) {
  for (size_t k = 0; k < BIG; k++)
    buf[k] = (char)('a' + (k * 7 + (size_t)i) % 26);
}

static bool get_is(memcached_st *mc, int i, const char *key, const char *want,
                   size_t want_len) {
  size_t len = 0;
  uint32_t flags = 0;
  memcached_return_t rc;
  char *v = memcached_get(mc, key, strlen(key), &len, &flags, &rc);
  bool ok = v && rc == MEMCACHED_SUCCESS && len == want_len &&
            !memcmp(v, want, len) && flags == (uint32_t)i;
  free(v);
  if (!ok && rc != MEMCACHED_SUCCESS) return fail_at(i, key, mc, rc);
  if (!ok)
    fprintf(stderr, "hook_memcached: client %d: %s: wrong value\n", i, key);
  return ok;
}

static bool run_client(memcached_st *mc, int i, char *big) {
  char key[32], val[32], bkey[32];
  snprintf(key, sizeof key, "k:%d", i);
  snprintf(val, sizeof val, "value-%d", i * 7);
  snprintf(bkey, sizeof bkey, "big:%d", i);
  memcached_return_t rc =
      memcached_set(mc, key, strlen(key), val, strlen(val), 0, (uint32_t)i);
  if (rc != MEMCACHED_SUCCESS) return fail_at(i, "set", mc, rc);
  if (!get_is(mc, i, key, val, strlen(val))) return false;
  big_value(big, i);
  rc = memcached_set(mc, bkey, strlen(bkey), big, BIG, 0, (uint32_t)i);
  if (rc != MEMCACHED_SUCCESS) return fail_at(i, "set big", mc, rc);
  if (!get_is(mc, i, bkey, big, BIG)) return false;

  /* Both keys and a missing one in one request. */
  char missing[32];
  snprintf(missing, sizeof missing, "none:%d", i);
  const char *keys[3] = {key, bkey, missing};
  size_t lens[3] = {strlen(key), strlen(bkey), strlen(missing)};
  rc = memcached_mget(mc, keys, lens, 3);
  if (rc != MEMCACHED_SUCCESS) return fail_at(i, "mget", mc, rc);
  int found = 0;
  bool right = true;
  memcached_result_st *res;
  while ((res = memcached_fetch_result(mc, NULL, &rc)) != NULL) {
    const char *k = memcached_result_key_value(res);
    size_t kl = memcached_result_key_length(res);
    const char *v = memcached_result_value(res);
    size_t vl = memcached_result_length(res);
    if (kl == lens[0] && !memcmp(k, key, kl))
      right &= vl == strlen(val) && !memcmp(v, val, vl);
    else if (kl == lens[1] && !memcmp(k, bkey, kl))
      right &= vl == BIG && !memcmp(v, big, vl);
    else
      right = false;
    found++;
    memcached_result_free(res);
  }
  if (rc != MEMCACHED_END && rc != MEMCACHED_SUCCESS &&
      rc != MEMCACHED_NOTFOUND)
    return fail_at(i, "fetch", mc, rc);
  if (found != 2 || !right) {
    fprintf(stderr, "hook_memcached: client %d: mget: %d results%s\n", i, found,
            right ? "" : ", wrong values");
    return false;
  }

  uint64_t n = 0;
  rc = memcached_increment(mc, "total", 5, 1, &n);
  if (rc != MEMCACHED_SUCCESS) return fail_at(i, "incr", mc, rc);
  if (n < 1 || n > N) {
    fprintf(stderr, "hook_memcached: client %d: incr gave %llu\n", i,
            (unsigned long long)n);
    return false;
  }
  atomic_fetch_add(&incr_sum, (long)n);
  return true;
}

/* Every client gets here first, so the silent waits start together. */
static void wait_for_all(void) {
  atomic_fetch_add(&arrived, 1);
  for (int64_t end = now_ms() + 20000;
       atomic_load(&arrived) < N && now_ms() < end;)
    usleep(2000);
}

/* A request to the listener that never answers: MEMCACHED_TIMEOUT after
 * the poll timeout, not before. */
static bool silent_case(int i) {
  memcached_st *mc = client_for(silent_port, SILENT_MS);
  if (!mc) return false;
  size_t len;
  uint32_t flags;
  memcached_return_t rc;
  wait_start[i] = now_ms();
  char *v = memcached_get(mc, "x", 1, &len, &flags, &rc);
  wait_end[i] = now_ms();
  bool ok = !v && rc == MEMCACHED_TIMEOUT &&
            wait_end[i] - wait_start[i] >= SILENT_MS - 10;
  if (!ok)
    fprintf(stderr,
            "hook_memcached: client %d: silent server: %s after %lld ms\n", i,
            memcached_strerror(mc, rc),
            (long long)(wait_end[i] - wait_start[i]));
  free(v);
  memcached_free(mc);
  return ok;
}

static void client(int i) {
  tids[i] = (pid_t)syscall(SYS_gettid);
  memcached_st *mc = client_for(port, 10000);
  char *big = malloc(BIG);
  bool ok = mc && big && run_client(mc, i, big);
  free(big);
  if (mc) memcached_free(mc);
  wait_for_all();
  ok = silent_case(i) && ok;
  if (ok) atomic_fetch_add(&ok_count, 1);
}

int main(void) {
  const char *exe = memcached_path();
  if (!exe) {
    printf("hook_memcached: SKIP: memcached is not installed "
           "(scripts/install-deps.sh installs memcached)\n");
    return 77;
  }
  bool under_run = iof_env_current() != NULL;
  signal(SIGALRM, on_watchdog);
  alarm(WATCHDOG_S);
  int64_t t_start = now_ms();
  int r = start_server(exe);
  if (r < 0) {
    fprintf(stderr, "hook_memcached: memcached: %s\n", strerror(-r));
    stop_server();
    return 1;
  }
  int silent = silent_listener();
  if (silent < 0) {
    fprintf(stderr, "hook_memcached: listener: %s\n", strerror(-silent));
    stop_server();
    return 1;
  }
  int64_t t0 = now_ms();
  r = hook_run_clients(N, under_run, client);
  int64_t elapsed = now_ms() - t0;
  close(silent);
  stop_server();
  alarm(0);
  if (r < 0) {
    fprintf(stderr, "hook_memcached: clients: %s\n", strerror(-r));
    return 1;
  }

  /* The waits overlap when the last one started before the first ended. */
  int64_t last_start = 0, first_end = INT64_MAX, first_start = INT64_MAX,
          last_end = 0;
  for (int i = 0; i < N; i++) {
    if (!wait_end[i]) continue;
    if (wait_start[i] > last_start) last_start = wait_start[i];
    if (wait_start[i] < first_start) first_start = wait_start[i];
    if (wait_end[i] < first_end) first_end = wait_end[i];
    if (wait_end[i] > last_end) last_end = wait_end[i];
  }
  bool overlap = last_start < first_end;
  int64_t waits_ms = last_end - first_start;
  bool total_ok = atomic_load(&incr_sum) == (long)N * (N + 1) / 2;
  int distinct = 0;
  for (int i = 0; i < N; i++) {
    bool seen = false;
    for (int j = 0; j < i; j++) seen |= tids[j] == tids[i];
    distinct += !seen;
  }
  /* libmemcached's waits went to the fiber layer, none blocked the thread
   * (the counters count only under IOF_HOOK_VERBOSE). */
  static const char *const calls[] = {"poll", "connect", "recv", "send",
                                      "sendmsg"};
  unsigned long blocked = 0, polls = 0;
  for (size_t k = 0; k < sizeof calls / sizeof *calls; k++) {
    unsigned long b = hook_count(calls[k], 1);
    blocked += b == ~0ul ? 0 : b;
  }
  polls = hook_count("poll", 0);
  int ok = atomic_load(&ok_count);
  printf("hook_memcached: %s: %d/%d clients ok in %lld ms; incr total %s; "
         "the %d silent %d ms waits %s, in %lld ms; %d distinct OS "
         "thread(s), %lu poll(s) in fibers, %lu blocking call(s); server "
         "start %lld ms\n",
         under_run ? "iofiber-run" : "hook linked", ok, N, (long long)elapsed,
         total_ok ? "1..N" : "WRONG", N, SILENT_MS,
         overlap ? "overlapped" : "did NOT overlap", (long long)waits_ms,
         distinct, polls, blocked, (long long)(t0 - t_start));
  /* iofiber-run --threads K spreads the "threads" over K io threads; the
   * hook takes IOF_THREADS out of main's environment, so the test is told
   * K by a variable of its own. */
  const char *th = getenv("IOF_TEST_IO_THREADS");
  int io_threads = under_run && th && atoi(th) > 0 ? atoi(th) : 1;
  bool pass = ok == N && total_ok && overlap && waits_ms >= SILENT_MS - 10 &&
              waits_ms < 10 * SILENT_MS && elapsed < 20000 &&
              distinct <= io_threads && blocked == 0;
  return pass ? 0 : 1;
}
