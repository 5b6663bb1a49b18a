/* Drives examples/legacy-echo (both builds): starts the server binary
 * given on the command line on a free port, opens 1,000 concurrent
 * connections with its own epoll client, checks every echoed byte, and
 * reports the server's threads and memory (VmRSS + one kernel stack per
 * thread) while all connections are open. With two binaries (threads
 * build, fibers build) it also checks that the fibers build runs on one
 * OS thread and uses less memory.
 *
 * usage: legacy_echo_check THREADS_BINARY [FIBERS_BINARY] */
#include "test_support.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <stdbool.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define CLIENTS 1000
#define PAYLOAD (16 * 1024) /* bytes each client sends and expects back */
#define FIRST 64            /* sent first, so every connection is served */
#define KSTACK_KIB 16       /* x86-64 kernel stack per thread */

static const char *bin_threads, *bin_fibers;

typedef struct server {
  pid_t pid;
  int port;
} server;

typedef struct client {
  int fd;
  size_t sent, got, limit; /* limit: bytes to send in this phase */
  int bad;
} client;

static client cl[CLIENTS];

static unsigned char pattern(int c, size_t i) {
  return (unsigned char)(c * 31 + i * 7 + (i >> 8));
}

static void start_server(const char *bin, server *s) {
  int p[2];
  assert_int_equal(pipe(p), 0);
  s->pid = fork();
  assert_true(s->pid >= 0);
  if (s->pid == 0) {
    dup2(p[1], 1);
    close(p[0]);
    close(p[1]);
    execl(bin, bin, "0", (char *)NULL);
    _exit(127);
  }
  close(p[1]);
  char line[128] = {0};
  size_t n = 0;
  while (n < sizeof line - 1) {
    ssize_t r = read(p[0], line + n, 1);
    if (r <= 0 || line[n] == '\n') break;
    n++;
  }
  close(p[0]);
  assert_int_equal(sscanf(line, "listening on %d", &s->port), 1);
}

/* Threads and VmRSS (KiB) of pid from /proc/pid/status. */
static void proc_status(pid_t pid, long *threads, long *rss_kib) {
  char path[64], buf[4096];
  snprintf(path, sizeof path, "/proc/%d/status", (int)pid);
  FILE *f = fopen(path, "r");
  assert_non_null(f);
  *threads = *rss_kib = -1;
  while (fgets(buf, sizeof buf, f)) {
    sscanf(buf, "Threads: %ld", threads);
    sscanf(buf, "VmRSS: %ld", rss_kib);
  }
  fclose(f);
}

/* Runs the epoll client until every client has sent and got `limit`
 * bytes; false on a timeout (10 s). */
static bool pump(int ep) {
  uint64_t deadline = iof_test_now_ns() + 10000000000ull;
  int pending = 0;
  for (int c = 0; c < CLIENTS; c++)
    if (cl[c].got < cl[c].limit) pending++;
  unsigned char buf[8192];
  struct epoll_event ev[256];
  while (pending > 0) {
    if (iof_test_now_ns() > deadline) return false;
    int n = epoll_wait(ep, ev, 256, 100);
    for (int k = 0; k < n; k++) {
      int c = (int)ev[k].data.u32;
      client *x = &cl[c];
      if ((ev[k].events & EPOLLOUT) && x->sent < x->limit) {
        size_t want = x->limit - x->sent;
        if (want > sizeof buf) want = sizeof buf;
        for (size_t i = 0; i < want; i++) buf[i] = pattern(c, x->sent + i);
        ssize_t w = send(x->fd, buf, want, MSG_NOSIGNAL);
        if (w > 0) x->sent += (size_t)w;
      }
      if (ev[k].events & (EPOLLIN | EPOLLHUP | EPOLLERR)) {
        ssize_t r = recv(x->fd, buf, sizeof buf, 0);
        if (r == 0 || (r < 0 && errno != EAGAIN)) {
          x->bad = 1;
          fprintf(stderr, "client %d: connection lost at %zu\n", c, x->got);
          return false;
        }
        for (ssize_t i = 0; i < r; i++)
          if (buf[i] != pattern(c, x->got + (size_t)i)) x->bad = 1;
        if (r > 0) {
          x->got += (size_t)r;
          if (x->got == x->limit) pending--;
        }
      }
    }
  }
  return true;
}

typedef struct result {
  long threads, rss_kib;
} result;

static void run_one(const char *bin, result *res) {
  server s;
  start_server(bin, &s);
  int ep = epoll_create1(0);
  assert_true(ep >= 0);
  struct sockaddr_in sa = {0};
  sa.sin_family = AF_INET;
  sa.sin_port = htons((uint16_t)s.port);
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  for (int c = 0; c < CLIENTS; c++) {
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
    assert_true(fd >= 0);
    int r = connect(fd, (struct sockaddr *)&sa, sizeof sa);
    assert_true(r == 0 || errno == EINPROGRESS);
    cl[c] = (client){fd, 0, 0, FIRST, 0};
    struct epoll_event ev = {EPOLLIN | EPOLLOUT, {.u32 = (uint32_t)c}};
    assert_int_equal(epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev), 0);
  }
  uint64_t t0 = iof_test_now_ns();
  /* Phase 1: every connection echoes its first bytes, so all 1,000 are
   * being served at once; measure the server then. */
  assert_true(pump(ep));
  proc_status(s.pid, &res->threads, &res->rss_kib);
  /* Phase 2: the rest of the payload, every byte checked. */
  for (int c = 0; c < CLIENTS; c++) cl[c].limit = PAYLOAD;
  assert_true(pump(ep));
  double ms = (double)(iof_test_now_ns() - t0) / 1e6;
  int bad = 0;
  for (int c = 0; c < CLIENTS; c++) {
    bad += cl[c].bad || cl[c].got != PAYLOAD;
    close(cl[c].fd);
  }
  close(ep);
  kill(s.pid, SIGTERM);
  waitpid(s.pid, NULL, 0);
  printf("%-22s %d clients x %d bytes echoed and checked in %.0f ms; "
         "server threads %ld, VmRSS %ld KiB, + kernel stacks %ld KiB = "
         "%ld KiB\n",
         strrchr(bin, '/') ? strrchr(bin, '/') + 1 : bin, CLIENTS, PAYLOAD, ms,
         res->threads, res->rss_kib, res->threads * KSTACK_KIB,
         res->rss_kib + res->threads * KSTACK_KIB);
  assert_int_equal(bad, 0);
}

static void test_legacy_echo(void **state) {
  (void)state;
  result t, f;
  run_one(bin_threads, &t);
  assert_true(t.threads > CLIENTS); /* a thread per connection */
  if (!bin_fibers) return;
  run_one(bin_fibers, &f);
  /* The connections run on one OS thread (plus at most the runtime's
   * timer thread). */
  assert_true(f.threads <= 2);
  long mt = t.rss_kib + t.threads * KSTACK_KIB;
  long mf = f.rss_kib + f.threads * KSTACK_KIB;
  printf("memory: fibers %ld KiB vs threads %ld KiB (%.1fx less)\n", mf, mt,
         (double)mt / (double)mf);
  assert_true(mf < mt);
}

int main(int argc, char **argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: %s THREADS_BINARY [FIBERS_BINARY]\n", argv[0]);
    return 2;
  }
  bin_threads = argv[1];
  bin_fibers = argc > 2 ? argv[2] : NULL;
  struct rlimit rl;
  if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
    rl.rlim_cur = rl.rlim_max;
    setrlimit(RLIMIT_NOFILE, &rl);
  }
  if (rl.rlim_cur < CLIENTS + 64) {
    printf("skipped: RLIMIT_NOFILE hard limit %lu is below %d\n",
           (unsigned long)rl.rlim_max, CLIENTS + 64);
    return 0;
  }
  signal(SIGPIPE, SIG_IGN);
  iof_test_watchdog_arm(60);
  const struct CMUnitTest tests[] = {cmocka_unit_test(test_legacy_echo)};
  return cmocka_run_group_tests(tests, NULL, NULL);
}
