/* Unmodified thread-per-connection proxies under iofiber-run: each client
 * connection is a pthread in the proxy, which the hook makes a fiber.
 * - tinyproxy (HTTP proxy);
 * - microsocks (SOCKS5);
 * - stunnel (TLS server, OpenSSL in every connection thread);
 * - privoxy (HTTP proxy; a reverse lookup of its own address per
 *   connection, run on the resolver's threads).
 * This driver runs plain. It serves an origin that answers each request
 * after DELAY_MS with a 256 KiB body, and starts CLIENTS curl processes at
 * once through the proxy. Checked: every body arrives intact; the origin
 * saw all CLIENTS requests in progress at one time (the proxy overlapped
 * them); the proxy ran them on at most MAX_THREADS OS threads (plainly it
 * would run CLIENTS + 1; privoxy's lookups may add a resolver thread each
 * while they overlap, but those leave within seconds of the burst); the
 * proxy stops on SIGTERM. A program that is not installed is skipped
 * (scripts/install-deps.sh installs them). */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "driver_support.h"
#include "test_support.h"

#define TINYPROXY "/usr/bin/tinyproxy"
#define MICROSOCKS "/usr/bin/microsocks"
#define STUNNEL "/usr/bin/stunnel4"
#define OPENSSL "/usr/bin/openssl"
#define CURL "/usr/bin/curl"
#define PRIVOXY "/usr/sbin/privoxy"

#define CLIENTS 20
#define DELAY_MS 400
#define BODY (256 * 1024)
/* The io thread, and the resolver's worker or the hook's helper. */
#define MAX_THREADS 3

static char tmpdir[] = "/tmp/iof-proxies-XXXXXX";
static unsigned char body[BODY];

static void tmp_path(char *out, size_t cap, const char *name) {
  snprintf(out, cap, "%s/%s", tmpdir, name);
}

static int64_t now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* ---- the origin: DELAY_MS, then the body; counts requests in progress */

static int origin_fd = -1, origin_port;
static atomic_int in_progress, max_in_progress;

static void *origin_conn(void *arg) {
  int c = (int)(intptr_t)arg;
  char req[2048];
  size_t n = 0;
  while (n < sizeof req - 1) {
    ssize_t r = read(c, req + n, sizeof req - 1 - n);
    if (r <= 0) break;
    n += (size_t)r;
    req[n] = '\0';
    if (strstr(req, "\r\n\r\n")) break;
  }
  int now = atomic_fetch_add(&in_progress, 1) + 1;
  int m = atomic_load(&max_in_progress);
  while (now > m && !atomic_compare_exchange_weak(&max_in_progress, &m, now)) {
  }
  usleep(DELAY_MS * 1000);
  atomic_fetch_sub(&in_progress, 1);
  char head[128];
  int h = snprintf(head, sizeof head,
                   "HTTP/1.0 200 OK\r\nContent-Length: %d\r\n"
                   "Connection: close\r\n\r\n",
                   BODY);
  bool ok = write(c, head, (size_t)h) == h;
  for (size_t off = 0; ok && off < BODY;) {
    ssize_t w = write(c, body + off, BODY - off);
    ok = w > 0;
    off += ok ? (size_t)w : 0;
  }
  close(c);
  return NULL;
}

static void *origin_main(void *arg) {
  (void)arg;
  for (;;) {
    int c = accept(origin_fd, NULL, NULL);
    if (c < 0) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      return NULL; /* closed at teardown */
    }
    pthread_t t;
    if (pthread_create(&t, NULL, origin_conn, (void *)(intptr_t)c) == 0)
      pthread_detach(t);
    else
      close(c);
  }
}

static int setup(void **state) {
  (void)state;
  atomic_store(&in_progress, 0);
  atomic_store(&max_in_progress, 0);
  origin_fd = socket(AF_INET, SOCK_STREAM, 0);
  if (origin_fd < 0) return -1;
  int one = 1;
  setsockopt(origin_fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  struct sockaddr_in a = {.sin_family = AF_INET};
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t l = sizeof a;
  if (bind(origin_fd, (struct sockaddr *)&a, sizeof a) ||
      getsockname(origin_fd, (struct sockaddr *)&a, &l) ||
      listen(origin_fd, 128))
    return -1;
  origin_port = ntohs(a.sin_port);
  pthread_t t;
  if (pthread_create(&t, NULL, origin_main, NULL)) return -1;
  pthread_detach(t);
  return 0;
}

static int teardown(void **state) {
  (void)state;
  shutdown(origin_fd, SHUT_RDWR); /* ends origin_main's accept */
  close(origin_fd);
  origin_fd = -1;
  return 0;
}

/* ---- the clients ------------------------------------------------------ */

/* Runs CLIENTS curls with `args` (the proxy options and the URL; "%d" in
 * the URL becomes the client's number) while sampling the proxy's OS
 * threads; returns how many bodies arrived intact. */
static int run_clients(pid_t proxy, const char *const *args, size_t nargs,
                       int *max_threads) {
  pid_t pids[CLIENTS];
  char outs[CLIENTS][128];
  for (int i = 0; i < CLIENTS; i++) {
    char name[32];
    snprintf(name, sizeof name, "out%d", i);
    tmp_path(outs[i], sizeof outs[i], name);
    const char *argv[16] = {CURL, "-s", "-S",   "--max-time",
                            "20", "-o", outs[i]};
    size_t k = 7;
    char url[128];
    for (size_t j = 0; j < nargs && k < 15; j++) {
      if (strstr(args[j], "%d")) {
        snprintf(url, sizeof url, args[j], i);
        argv[k++] = url;
      } else {
        argv[k++] = args[j];
      }
    }
    argv[k] = NULL;
    pids[i] = drv_spawn(argv, -1, NULL, NULL);
  }
  *max_threads = 0;
  int left = CLIENTS, status[CLIENTS];
  bool done[CLIENTS] = {false};
  int64_t end = now_ms() + 30000;
  while (left > 0 && now_ms() < end) {
    int t = drv_os_threads(proxy);
    if (t > *max_threads) *max_threads = t;
    for (int i = 0; i < CLIENTS; i++) {
      int st;
      if (!done[i] && waitpid(pids[i], &st, WNOHANG) == pids[i]) {
        done[i] = true;
        status[i] = WIFEXITED(st) ? WEXITSTATUS(st) : 128;
        left--;
      }
    }
    usleep(10000);
  }
  int ok = 0;
  static unsigned char got[BODY + 1];
  for (int i = 0; i < CLIENTS; i++) {
    if (!done[i]) {
      kill(pids[i], SIGKILL);
      waitpid(pids[i], NULL, 0);
      continue;
    }
    FILE *f = fopen(outs[i], "rb");
    size_t n = f ? fread(got, 1, sizeof got, f) : 0;
    if (f) fclose(f);
    if (status[i] == 0 && n == BODY && !memcmp(got, body, BODY)) ok++;
    unlink(outs[i]);
  }
  return ok;
}

static void check_max(const char *name, pid_t proxy, int ok, int threads,
                      int max_threads, const char *err) {
  kill(proxy, SIGTERM);
  int st = drv_wait_exit(proxy, 10);
  char buf[4096];
  drv_slurp(err, buf, sizeof buf);
  print_message("%s under iofiber-run: %d/%d bodies intact, %d requests in "
                "progress at once at the origin, at most %d OS thread(s), "
                "exit %d\n",
                name, ok, CLIENTS, atomic_load(&max_in_progress), threads, st);
  if (ok != CLIENTS) print_message("%s stderr: %s\n", name, buf);
  assert_int_equal(ok, CLIENTS);
  assert_int_equal(atomic_load(&max_in_progress), CLIENTS);
  assert_true(threads >= 1 && threads <= max_threads);
  assert_true(st >= 0); /* stopped (microsocks leaves on the signal) */
}

static void check(const char *name, pid_t proxy, int ok, int threads,
                  const char *err) {
  check_max(name, proxy, ok, threads, MAX_THREADS, err);
}

/* ---- tinyproxy: HTTP proxy, a thread per connection (1.11) ----------- */

static void test_tinyproxy(void **state) {
  (void)state;
  if (access(TINYPROXY, X_OK) || access(CURL, X_OK)) skip();
  char conf[128], err[128];
  tmp_path(conf, sizeof conf, "tinyproxy.conf");
  tmp_path(err, sizeof err, "tinyproxy.err");
  int port = drv_free_port();
  FILE *f = fopen(conf, "w");
  assert_non_null(f);
  fprintf(f,
          "Port %d\nListen 127.0.0.1\nTimeout 30\nMaxClients 100\n"
          "LogLevel Error\nAllow 127.0.0.1\n",
          port);
  fclose(f);
  pid_t pid = drv_spawn(
      (const char *const[]){IOF_RUN_PATH, TINYPROXY, "-d", "-c", conf, NULL},
      -1, NULL, err);
  assert_true(drv_wait_listening(port, pid));
  char proxy[64], url[64];
  snprintf(proxy, sizeof proxy, "http://127.0.0.1:%d", port);
  snprintf(url, sizeof url, "http://127.0.0.1:%d/item/%%d", origin_port);
  int threads;
  int ok =
      run_clients(pid, (const char *const[]){"-x", proxy, url}, 3, &threads);
  check("tinyproxy", pid, ok, threads, err);
}

/* ---- microsocks: SOCKS5, a thread per connection ---------------------- */

static void test_microsocks(void **state) {
  (void)state;
  if (access(MICROSOCKS, X_OK) || access(CURL, X_OK)) skip();
  char err[128];
  tmp_path(err, sizeof err, "microsocks.err");
  int port = drv_free_port();
  char ps[16];
  snprintf(ps, sizeof ps, "%d", port);
  pid_t pid = drv_spawn((const char *const[]){IOF_RUN_PATH, MICROSOCKS, "-i",
                                              "127.0.0.1", "-p", ps, NULL},
                        -1, NULL, err);
  assert_true(drv_wait_listening(port, pid));
  char proxy[64], url[64];
  snprintf(proxy, sizeof proxy, "127.0.0.1:%d", port);
  snprintf(url, sizeof url, "http://127.0.0.1:%d/item/%%d", origin_port);
  int threads;
  int ok = run_clients(pid, (const char *const[]){"--socks5", proxy, url}, 3,
                       &threads);
  check("microsocks", pid, ok, threads, err);
}

/* ---- stunnel: TLS in front of the origin, a thread per connection ----- */

static void test_stunnel(void **state) {
  (void)state;
  if (access(STUNNEL, X_OK) || access(OPENSSL, X_OK) || access(CURL, X_OK))
    skip();
  char key[128], cert[128], conf[128], err[128];
  tmp_path(key, sizeof key, "key.pem");
  tmp_path(cert, sizeof cert, "cert.pem");
  tmp_path(conf, sizeof conf, "stunnel.conf");
  tmp_path(err, sizeof err, "stunnel.err");
  pid_t mk = drv_spawn((const char *const[]){OPENSSL, "req", "-x509", "-newkey",
                                             "rsa:2048", "-nodes", "-keyout",
                                             key, "-out", cert, "-days", "1",
                                             "-subj", "/CN=127.0.0.1", NULL},
                       -1, NULL, NULL);
  assert_int_equal(drv_wait_exit(mk, 30), 0);
  int port = drv_free_port();
  FILE *f = fopen(conf, "w");
  assert_non_null(f);
  fprintf(f,
          "foreground = yes\npid =\ndebug = 3\n[https]\n"
          "accept = 127.0.0.1:%d\nconnect = 127.0.0.1:%d\n"
          "cert = %s\nkey = %s\n",
          port, origin_port, cert, key);
  fclose(f);
  pid_t pid = drv_spawn(
      (const char *const[]){IOF_RUN_PATH, STUNNEL, conf, NULL}, -1, NULL, err);
  assert_true(drv_wait_listening(port, pid));
  char url[64];
  snprintf(url, sizeof url, "https://127.0.0.1:%d/item/%%d", port);
  int threads;
  int ok = run_clients(pid, (const char *const[]){"-k", url}, 2, &threads);
  check("stunnel", pid, ok, threads, err);
}

/* ---- privoxy: HTTP proxy, a thread per connection ------------------- */

static void test_privoxy(void **state) {
  (void)state;
  if (access(PRIVOXY, X_OK) || access(CURL, X_OK)) skip();
  char conf[128], err[128];
  tmp_path(conf, sizeof conf, "privoxy.conf");
  tmp_path(err, sizeof err, "privoxy.err");
  int port = drv_free_port();
  FILE *f = fopen(conf, "w");
  assert_non_null(f);
  fprintf(f,
          "listen-address 127.0.0.1:%d\nmax-client-connections 100\n"
          "socket-timeout 30\n",
          port);
  fclose(f);
  pid_t pid = drv_spawn(
      (const char *const[]){IOF_RUN_PATH, PRIVOXY, "--no-daemon", conf, NULL},
      -1, NULL, err);
  assert_true(drv_wait_listening(port, pid));
  char proxy[64], url[64];
  snprintf(proxy, sizeof proxy, "http://127.0.0.1:%d", port);
  snprintf(url, sizeof url, "http://127.0.0.1:%d/item/%%d", origin_port);
  int threads;
  int ok =
      run_clients(pid, (const char *const[]){"-x", proxy, url}, 3, &threads);
  /* Each connection's reverse lookup of the proxy's own address runs on a
   * resolver thread; the threads of overlapping lookups leave once idle
   * (2 s), all but one: the io thread and that one remain. */
  int after = drv_os_threads(pid);
  for (int i = 0; i < 100 && after > 2; i++) {
    usleep(50000);
    after = drv_os_threads(pid);
  }
  print_message("privoxy: %d OS thread(s) at most during the requests, %d "
                "once idle\n",
                threads, after);
  check_max("privoxy", pid, ok, threads, MAX_THREADS + CLIENTS, err);
  assert_true(after >= 1 && after <= 2); /* checked once privoxy stopped */
}

static int rm_entry(const char *path) {
  struct stat sb;
  if (lstat(path, &sb) == 0 && !S_ISDIR(sb.st_mode)) unlink(path);
  return 0;
}

int main(void) {
  signal(SIGPIPE, SIG_IGN);
  if (!mkdtemp(tmpdir)) return 1;
  for (size_t i = 0; i < BODY; i++) body[i] = (unsigned char)(i * 7 + i / 251);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_tinyproxy, setup, teardown),
      cmocka_unit_test_setup_teardown(test_microsocks, setup, teardown),
      cmocka_unit_test_setup_teardown(test_stunnel, setup, teardown),
      cmocka_unit_test_setup_teardown(test_privoxy, setup, teardown),
  };
  int r = cmocka_run_group_tests(tests, NULL, NULL);
  const char *names[] = {"tinyproxy.conf", "tinyproxy.err", "microsocks.err",
                         "key.pem",        "cert.pem",      "stunnel.conf",
                         "stunnel.err",    "privoxy.conf",  "privoxy.err"};
  for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
    char p[128];
    tmp_path(p, sizeof p, names[i]);
    rm_entry(p);
  }
  rmdir(tmpdir);
  return r;
}
