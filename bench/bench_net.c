/* Network suite helpers: see bench_net.h. */
#include "bench_net.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <linux/perf_event.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bench.h"

/* ---- CPUs --------------------------------------------------------------- */

static int cpus[2] = {-2, -2};

static void pick_cpus(void) {
  if (cpus[0] != -2) return;
  cpus[0] = cpus[1] = -1;
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof set, &set) != 0) return;
  int found = 0, pick[2];
  for (int c = 0; c < CPU_SETSIZE && found < 2; c++)
    if (CPU_ISSET(c, &set)) pick[found++] = c;
  if (found < 2) return;
  cpus[0] = pick[0];
  cpus[1] = pick[1];
}

int bench_server_cpu(void) {
  pick_cpus();
  return cpus[0];
}

int bench_client_cpu(void) {
  pick_cpus();
  return cpus[1];
}

void bench_pin_process(int cpu) {
  if (cpu < 0) return;
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  sched_setaffinity(0, sizeof set, &set);
}

/* ---- peers -------------------------------------------------------------- */

static bool executable(const char *path) {
  return access(path, X_OK) == 0;
}

int bench_peer_path(const char *name, char *out, size_t n) {
  snprintf(out, n, "%s/iof-bench-%s", bench_exe_dir(), name);
  return executable(out) ? 0 : -ENOENT;
}

int bench_find_program(const char *name, char *out, size_t n) {
  static const char *const rel[] = {"", "/../examples", "/../compat",
                                    "/../tools", "/.."};
  for (size_t i = 0; i < sizeof rel / sizeof rel[0]; i++) {
    snprintf(out, n, "%s%s/%s", bench_exe_dir(), rel[i], name);
    if (executable(out)) return 0;
  }
  const char *path = getenv("PATH");
  while (path && *path) {
    const char *colon = strchr(path, ':');
    size_t len = colon ? (size_t)(colon - path) : strlen(path);
    snprintf(out, n, "%.*s/%s", (int)len, path, name);
    if (len && executable(out)) return 0;
    path = colon ? colon + 1 : NULL;
  }
  return -ENOENT;
}

int bench_free_port(void) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -errno;
  struct sockaddr_in sa = {.sin_family = AF_INET,
                           .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  socklen_t len = sizeof sa;
  int rc = 0;
  if (bind(fd, (struct sockaddr *)&sa, sizeof sa) < 0 ||
      getsockname(fd, (struct sockaddr *)&sa, &len) < 0)
    rc = -errno;
  close(fd);
  return rc < 0 ? rc : ntohs(sa.sin_port);
}

static int try_connect(int port) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -errno;
  struct sockaddr_in sa = {.sin_family = AF_INET,
                           .sin_port = htons((uint16_t)port),
                           .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  int rc = connect(fd, (struct sockaddr *)&sa, sizeof sa) < 0 ? -errno : 0;
  close(fd);
  return rc;
}

int bench_peer_start(bench_peer *p, char *const argv[], int port,
                     double timeout_s) {
  int pfd[2];
  if (pipe2(pfd, O_CLOEXEC) < 0) return -errno;
  fflush(NULL);
  pid_t pid = fork();
  if (pid < 0) {
    int e = errno;
    close(pfd[0]);
    close(pfd[1]);
    return -e;
  }
  if (pid == 0) {
    prctl(PR_SET_PDEATHSIG, SIGTERM);
    bench_pin_process(bench_server_cpu());
    dup2(pfd[1], STDOUT_FILENO);
    execv(argv[0], argv);
    _exit(127);
  }
  close(pfd[1]);
  p->pid = pid;
  p->port = port;
  uint64_t deadline = bench_now_ns() + (uint64_t)(timeout_s * 1e9);
  int rc = -ETIMEDOUT;
  char line[64];
  size_t len = 0;
  while (bench_now_ns() < deadline) {
    if (port) {
      if (try_connect(port) == 0) {
        rc = 0;
        break;
      }
      if (waitpid(pid, NULL, WNOHANG) == pid) {
        p->pid = 0;
        rc = -ECHILD;
        break;
      }
      usleep(20000);
      continue;
    }
    struct pollfd pf = {.fd = pfd[0], .events = POLLIN};
    if (poll(&pf, 1, 100) <= 0) continue;
    ssize_t n = read(pfd[0], line + len, sizeof line - 1 - len);
    if (n <= 0) {
      rc = -ECHILD; /* exited before saying its port */
      break;
    }
    len += (size_t)n;
    line[len] = '\0';
    if (strchr(line, '\n')) {
      rc = sscanf(line, "port %d", &p->port) == 1 ? 0 : -EPROTO;
      break;
    }
    if (len == sizeof line - 1) {
      rc = -EPROTO;
      break;
    }
  }
  close(pfd[0]);
  if (rc < 0) {
    fprintf(stderr, "iof-bench: %s did not start: %s\n", argv[0],
            strerror(-rc));
    bench_peer_stop(p);
  }
  return rc;
}

int bench_peer_stop(bench_peer *p) {
  if (p->pid <= 0) return 0;
  kill(p->pid, SIGTERM);
  int status = 0;
  for (int i = 0; i < 500; i++) {
    pid_t r = waitpid(p->pid, &status, WNOHANG);
    if (r == p->pid) break;
    if (i == 499) {
      kill(p->pid, SIGKILL);
      waitpid(p->pid, &status, 0);
    }
    usleep(10000);
  }
  p->pid = 0;
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

/* ---- /proc -------------------------------------------------------------- */

int bench_proc_read(pid_t pid, bench_proc *out) {
  char path[64], buf[1024];
  memset(out, 0, sizeof *out);
  snprintf(path, sizeof path, "/proc/%d/io", (int)pid);
  FILE *f = fopen(path, "r");
  if (!f) return -errno;
  unsigned long long v;
  while (fgets(buf, sizeof buf, f)) {
    if (sscanf(buf, "syscr: %llu", &v) == 1) out->syscalls += v;
    if (sscanf(buf, "syscw: %llu", &v) == 1) out->syscalls += v;
  }
  fclose(f);
  snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
  f = fopen(path, "r");
  if (!f) return -errno;
  size_t n = fread(buf, 1, sizeof buf - 1, f);
  fclose(f);
  buf[n] = '\0';
  /* Fields after the command name (which may hold spaces): state is 3,
   * utime 14, stime 15. */
  char *p = strrchr(buf, ')');
  unsigned long long ut, st;
  long nthr;
  if (!p || sscanf(p + 2,
                   "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu "
                   "%*d %*d %*d %*d %ld",
                   &ut, &st, &nthr) != 3)
    return -EPROTO;
  out->utime = ut;
  out->stime = st;
  out->threads = nthr;
  snprintf(path, sizeof path, "/proc/%d/schedstat", (int)pid);
  f = fopen(path, "r");
  if (f) {
    unsigned long long ns;
    if (fscanf(f, "%llu", &ns) == 1) out->cpu_ns = ns;
    fclose(f);
  }
  return 0;
}

long bench_tracepoint_id(const char *event) {
  static const char *const roots[] = {"/sys/kernel/tracing/events",
                                      "/sys/kernel/debug/tracing/events"};
  for (size_t i = 0; i < 2; i++) {
    char path[256];
    snprintf(path, sizeof path, "%s/%s/id", roots[i], event);
    FILE *f = fopen(path, "r");
    if (!f) continue;
    long id = -1;
    if (fscanf(f, "%ld", &id) != 1) id = -1;
    fclose(f);
    if (id >= 0) return id;
  }
  return -1;
}

int bench_syscall_counter_open(pid_t pid) {
  long id = bench_tracepoint_id("raw_syscalls/sys_enter");
  if (id < 0) return -1;
  struct perf_event_attr a;
  memset(&a, 0, sizeof a);
  a.type = PERF_TYPE_TRACEPOINT;
  a.size = sizeof a;
  a.config = (uint64_t)id;
  a.inherit = 1; /* threads created later (thread per connection) */
  return (int)syscall(SYS_perf_event_open, &a, pid, -1, -1,
                      PERF_FLAG_FD_CLOEXEC);
}

uint64_t bench_syscall_counter_read(int fd) {
  uint64_t v = 0;
  if (fd < 0 || read(fd, &v, sizeof v) != sizeof v) return 0;
  return v;
}

long bench_proc_rss_kib(pid_t pid) {
  char path[64], buf[256];
  snprintf(path, sizeof path, "/proc/%d/status", (int)pid);
  FILE *f = fopen(path, "r");
  if (!f) return -errno;
  long kib = -ENOENT;
  while (fgets(buf, sizeof buf, f))
    if (sscanf(buf, "VmRSS: %ld kB", &kib) == 1) break;
  fclose(f);
  return kib;
}

double bench_ticks_per_s(void) {
  long t = sysconf(_SC_CLK_TCK);
  return t > 0 ? (double)t : 100.0;
}

/* ---- load generator ------------------------------------------------------ */

void bench_gen_close(bench_gen *g) {
  for (int i = 0; g->fds && i < g->k; i++)
    if (g->fds[i] >= 0) close(g->fds[i]);
  if (g->ep >= 0) close(g->ep);
  free(g->fds);
  free(g->got);
  free(g->sent_at);
  g->fds = NULL;
  g->got = NULL;
  g->sent_at = NULL;
  g->ep = -1;
}

int bench_gen_open(bench_gen *g, int port, int k, const char *req,
                   size_t req_len, size_t resp_len) {
  memset(g, 0, sizeof *g);
  g->k = k;
  g->req = req;
  g->req_len = req_len;
  g->resp_len = resp_len;
  g->ep = epoll_create1(EPOLL_CLOEXEC);
  g->fds = malloc((size_t)k * sizeof *g->fds);
  g->got = calloc((size_t)k, sizeof *g->got);
  g->sent_at = calloc((size_t)k, sizeof *g->sent_at);
  if (g->ep < 0 || !g->fds || !g->got || !g->sent_at) {
    bench_gen_close(g);
    return -ENOMEM;
  }
  for (int i = 0; i < k; i++) g->fds[i] = -1;
  struct sockaddr_in sa = {.sin_family = AF_INET,
                           .sin_port = htons((uint16_t)port),
                           .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  for (int i = 0; i < k; i++) {
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0 || connect(fd, (struct sockaddr *)&sa, sizeof sa) < 0) {
      int e = errno;
      if (fd >= 0) close(fd);
      bench_gen_close(g);
      return -e;
    }
    g->fds[i] = fd;
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
    struct epoll_event ev = {.events = EPOLLIN, .data.u32 = (uint32_t)i};
    if (epoll_ctl(g->ep, EPOLL_CTL_ADD, fd, &ev) < 0) {
      int e = errno;
      bench_gen_close(g);
      return -e;
    }
  }
  return 0;
}

static unsigned hist_bucket(uint64_t ns) {
  if (ns < 16) return (unsigned)ns;
  unsigned msb = 63u - (unsigned)__builtin_clzll(ns);
  unsigned b = msb * 16 + (unsigned)((ns >> (msb - 4)) & 15);
  return b < BENCH_HIST_BUCKETS ? b : BENCH_HIST_BUCKETS - 1;
}

static double hist_value(unsigned b) {
  if (b < 16) return b;
  unsigned msb = b / 16, sub = b % 16;
  /* the middle of the bucket */
  return ldexp(16.0 + sub + 0.5, (int)msb - 4);
}

double bench_hist_percentile(const uint64_t *hist, uint64_t n, double pct) {
  if (!n) return NAN;
  uint64_t want = (uint64_t)ceil(pct / 100.0 * (double)n);
  if (want < 1) want = 1;
  uint64_t seen = 0;
  for (unsigned b = 0; b < BENCH_HIST_BUCKETS; b++) {
    seen += hist[b];
    if (seen >= want) return hist_value(b);
  }
  return hist_value(BENCH_HIST_BUCKETS - 1);
}

double bench_gen_percentile(const bench_gen *g, double pct) {
  return bench_hist_percentile(g->hist, g->nlat, pct);
}

static int gen_send(bench_gen *g, int i) {
  size_t off = 0;
  g->sent_at[i] = bench_now_ns();
  g->issued++;
  int spins = 0;
  while (off < g->req_len) {
    ssize_t n = write(g->fds[i], g->req + off, g->req_len - off);
    if (n < 0) {
      if (errno == EINTR) continue;
      /* A full send buffer with one request in flight: the peer is slow
       * to read; wait briefly. */
      if (errno == EAGAIN && ++spins < 100000) {
        struct pollfd pf = {.fd = g->fds[i], .events = POLLOUT};
        poll(&pf, 1, 100);
        continue;
      }
      return -errno;
    }
    off += (size_t)n;
  }
  return 0;
}

static void *gen_thread(void *arg) {
  bench_gen *g = arg;
  char buf[65536];
  struct epoll_event evs[256];
  int rc = 0;
  for (int i = 0; i < g->k && g->issued < g->target && rc == 0; i++) {
    g->got[i] = 0;
    rc = gen_send(g, i);
  }
  while (rc == 0 && g->done < g->target) {
    int n =
        epoll_wait(g->ep, evs, 256, g->timeout_ms > 0 ? g->timeout_ms : 10000);
    if (n < 0) {
      if (errno == EINTR) continue;
      rc = -errno;
      break;
    }
    if (n == 0) {
      rc = -ETIMEDOUT;
      break;
    }
    for (int e = 0; e < n && rc == 0; e++) {
      int i = (int)evs[e].data.u32;
      size_t want = g->resp_len - g->got[i];
      ssize_t r = read(g->fds[i], buf, want < sizeof buf ? want : sizeof buf);
      if (r <= 0) {
        if (r < 0 && (errno == EAGAIN || errno == EINTR)) continue;
        rc = r == 0 ? -ECONNRESET : -errno;
        break;
      }
      if (g->got[i] == 0 && g->req_len >= 8 && g->resp_len == g->req_len &&
          r >= 8 && memcmp(buf, g->req, 8) != 0) {
        rc = -EPROTO; /* an echo that is not ours */
        break;
      }
      g->got[i] += (size_t)r;
      if (g->got[i] < g->resp_len) continue;
      g->got[i] = 0;
      uint64_t now = bench_now_ns();
      g->hist[hist_bucket(now - g->sent_at[i])]++;
      g->nlat++;
      g->done++;
      if (g->issued < g->target) rc = gen_send(g, i);
    }
  }
  g->error = rc;
  return NULL;
}

int bench_gen_run(bench_gen *g, uint64_t n) {
  g->target = n;
  g->issued = g->done = 0;
  g->error = 0;
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  int cpu = bench_client_cpu();
  if (cpu >= 0) {
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    pthread_attr_setaffinity_np(&attr, sizeof set, &set);
  }
  pthread_t t;
  int r = pthread_create(&t, &attr, gen_thread, g);
  pthread_attr_destroy(&attr);
  if (r != 0) return -r;
  pthread_join(t, NULL);
  /* A partial answer still on its way would be read as the next one's. */
  if (g->error == 0)
    for (int i = 0; i < g->k; i++)
      if (g->got[i]) g->error = -EPROTO;
  return g->error;
}

/* ---- a network case ------------------------------------------------------ */

static void net_teardown(void *arg) {
  bench_net_case *nc = arg;
  for (unsigned b = 0; b < BENCH_HIST_BUCKETS; b++)
    nc->hist[b] += nc->gen.hist[b];
  nc->nlat += nc->gen.nlat;
  bench_gen_close(&nc->gen);
  bench_peer_stop(&nc->peer);
  if (nc->sc_fd >= 0) close(nc->sc_fd);
  nc->sc_fd = -1;
}

static int net_setup(void *arg) {
  bench_net_case *nc = arg;
  int port = 0;
  nc->sc_fd = -1;
  if (nc->port_arg >= 0) {
    port = bench_free_port();
    if (port < 0) return port;
    snprintf(nc->port_buf, sizeof nc->port_buf, "%d", port);
    nc->argv[nc->port_arg] = nc->port_buf;
  }
  memset(&nc->gen, 0, sizeof nc->gen);
  nc->gen.ep = -1;
  int rc =
      bench_peer_start(&nc->peer, nc->argv, port,
                       nc->start_timeout_s > 0 ? nc->start_timeout_s : 10.0);
  if (rc < 0) return rc;
  /* Before the connections: a thread-per-connection server's threads are
   * counted only if created after the counter. */
  nc->sc_fd = bench_syscall_counter_open(nc->peer.pid);
  rc = bench_gen_open(&nc->gen, nc->peer.port, nc->k, nc->req, nc->req_len,
                      nc->resp_len);
  if (rc < 0) {
    bench_peer_stop(&nc->peer);
    if (nc->sc_fd >= 0) close(nc->sc_fd);
    nc->sc_fd = -1;
    return rc;
  }
  /* Warm-up: accepts, first allocations, TCP windows. Not in the
   * latency figures. */
  rc = bench_gen_run(&nc->gen, 4 * (uint64_t)nc->k + 64);
  memset(nc->gen.hist, 0, sizeof nc->gen.hist);
  nc->gen.nlat = 0;
  if (rc < 0) {
    net_teardown(nc);
    return rc;
  }
  return 0;
}

static int net_body(void *arg, uint64_t iters) {
  bench_net_case *nc = arg;
  bench_proc a, b;
  bool ok = bench_proc_read(nc->peer.pid, &a) == 0;
  uint64_t sc = bench_syscall_counter_read(nc->sc_fd);
  int rc = bench_gen_run(&nc->gen, iters);
  if (rc < 0) return rc;
  if (nc->sc_fd >= 0) {
    nc->all_syscalls += bench_syscall_counter_read(nc->sc_fd) - sc;
    nc->sc_rts += iters;
  }
  if (ok && bench_proc_read(nc->peer.pid, &b) == 0) {
    nc->syscalls += b.syscalls - a.syscalls;
    nc->utime += b.utime - a.utime;
    nc->stime += b.stime - a.stime;
    nc->rts += iters;
    nc->proc_ok = true;
    if (a.threads == 1 && b.threads == 1 && b.cpu_ns) {
      nc->cpu_ns += b.cpu_ns - a.cpu_ns;
      nc->cpu_rts += iters;
    }
  }
  return 0;
}

bench_case bench_net_case_make(bench_net_case *nc, const char *baseline,
                               double target, unsigned run_ms) {
  bench_case c = {.name = nc->name,
                  .unit = "ns/roundtrip",
                  .baseline = baseline,
                  .target = target,
                  .run_ms = run_ms,
                  /* throughput, not one connection's latency: every
                   * connection makes several round trips per run */
                  .min_iters = 8 * (uint64_t)nc->k + 64,
                  .arg = nc,
                  .setup = net_setup,
                  .body = net_body,
                  .teardown = net_teardown};
  return c;
}

void bench_net_notes(bench_ctx *ctx, const bench_net_case *nc) {
  double med = bench_median_of(ctx, nc->name);
  if (!isfinite(med)) return;
  bench_note(ctx, nc->name, "rt_s", 1e9 / med);
  bench_note(ctx, nc->name, "p50_us",
             bench_hist_percentile(nc->hist, nc->nlat, 50) / 1e3);
  bench_note(ctx, nc->name, "p99_us",
             bench_hist_percentile(nc->hist, nc->nlat, 99) / 1e3);
  if (nc->sc_rts)
    bench_note(ctx, nc->name, "sys_rt",
               (double)nc->all_syscalls / (double)nc->sc_rts);
  if (nc->cpu_rts)
    bench_note(ctx, nc->name, "cpu_us_rt",
               (double)nc->cpu_ns / 1e3 / (double)nc->cpu_rts);
  if (nc->proc_ok && nc->rts) {
    double rt = (double)nc->rts, us_per_tick = 1e6 / bench_ticks_per_s();
    bench_note(ctx, nc->name, "rw_rt", (double)nc->syscalls / rt);
    bench_note(ctx, nc->name, "user_us_rt",
               (double)nc->utime * us_per_tick / rt);
    bench_note(ctx, nc->name, "sys_us_rt",
               (double)nc->stime * us_per_tick / rt);
  }
}
