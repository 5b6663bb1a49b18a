/* Unmodified servers and libraries of other kinds under iofiber-run, each
 * driven by a real client (this driver runs plain):
 * - nginx, one process, file reads on its thread pool (aio threads: the
 *   pool's threads wait on a condition variable and report through an
 *   eventfd in nginx's own epoll set): ab fetches a 100 KiB file 2,000
 *   times over 50 keep-alive connections;
 * - nginx with its master and 2 workers through a configuration reload
 *   (SIGHUP: new workers) and a reopening of its logs (SIGUSR1): ab
 *   after each, the access log renamed before the reopening gets no
 *   more lines, the new one every later request;
 * - haproxy with nbthread 4 (a thread per epoll loop, its own per-thread
 *   state in thread-locals), proxying to a second frontend of itself: ab,
 *   2,000 requests over 50 connections; then in master-worker mode
 *   through a reload (SIGUSR2: the master execs itself again and forks a
 *   new worker): ab before and after;
 * - apache2 -X, event MPM with 50 worker threads: ab over keep-alive
 *   connections, then POSTs to a CGI (fork and exec from a worker);
 * - apache2 with its parent process through a graceful restart (SIGUSR1)
 *   and a full restart (SIGHUP), each unloading every module (dlclose)
 *   and loading it again, mod_ldap's libgnutls with its thread-locals
 *   too: ab and the CGI after each;
 * - lighttpd (single-threaded epoll loop, sendfile, CGI by fork): ab on a
 *   file and on a CGI, then again after a graceful restart (SIGUSR1,
 *   lighttpd 1.4.56 and later: its modules unloaded and loaded again in
 *   the same process);
 * - slapd (OpenLDAP, a thread pool on condition variables behind an epoll
 *   listener, LMDB): ldapadd of 201 entries, then 10 ldapsearch at once;
 * - named -n 4 (BIND 9, libuv loops whose per-thread state lives in
 *   libisc's thread-locals): 4 dig batches of 200 UDP queries, TCP, AXFR,
 *   then the zone rewritten and reloaded by `rndc reload` and by SIGHUP
 *   (each reload unloads BIND's filter-aaaa plugin and loads it again):
 *   the new records served, the batches again;
 * - pdns_recursor --threads=2 (each query in an MTasker context, its own
 *   stack switch inside the thread) serving a zone of its own: the same
 *   batches and TCP;
 * - mosquitto: 2 subscribers receive every one of 2 x 500 QoS 1 messages,
 *   then 2 more, connected through a configuration reload (SIGHUP);
 * - python3 with pyzmq: libzmq's io threads (eventfd mailboxes, epoll),
 *   a ROUTER/DEALER broker thread, 4 worker threads and 20 REQ client
 *   threads, then PUSH/PULL fan-in from 5 threads;
 * - python3 with grpcio: a gRPC server on a thread pool and 10 client
 *   threads (unary and server-streaming calls; gRPC's core keeps its
 *   execution context in thread-locals of a module Python dlopens);
 * - ruby threads: a threaded TCP upper-casing server, Queue, Mutex.
 * Each server runs on at most MAX_THREADS OS threads and stops on
 * SIGTERM with its plain exit status. A program that is not installed is
 * skipped (scripts/install-deps.sh installs them). */
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "driver_support.h"
#include "test_support.h"

#define AB "/usr/bin/ab"
#define NGINX "/usr/sbin/nginx"
#define HAPROXY "/usr/sbin/haproxy"
#define APACHE "/usr/sbin/apache2"
#define APACHE_MODS "/usr/lib/apache2/modules"
#define LIGHTTPD "/usr/sbin/lighttpd"
#define SLAPD "/usr/sbin/slapd"
#define LDAPADD "/usr/bin/ldapadd"
#define LDAPSEARCH "/usr/bin/ldapsearch"
#define NAMED "/usr/sbin/named"
#define DIG "/usr/bin/dig"
#define RNDC "/usr/sbin/rndc"
#define FILTER_AAAA "/usr/lib/x86_64-linux-gnu/bind/filter-aaaa.so"
#define PDNS_RECURSOR "/usr/sbin/pdns_recursor"
#define MOSQUITTO "/usr/sbin/mosquitto"
#define MOSQ_PUB "/usr/bin/mosquitto_pub"
#define MOSQ_SUB "/usr/bin/mosquitto_sub"
#define PYTHON "/usr/bin/python3"
#define RUBY "/usr/bin/ruby"
#define SH "/bin/sh"

/* The io thread, and the resolver's worker or the hook's helper. */
#define MAX_THREADS 3
#define FILE_BYTES (100 * 1024)
#define POST_BYTES 50000
#define HAPROXY_BYTES 8000

static char tmpdir[] = "/tmp/iof-daemons-XXXXXX";

static void tmp_path(char *out, size_t cap, const char *name) {
  snprintf(out, cap, "%s/%s", tmpdir, name);
}

/* Writes a printf-formatted text to the file `name` in tmpdir; its path in
 * out. */
static void write_text(char *out, size_t cap, const char *name, mode_t mode,
                       const char *fmt, ...) {
  tmp_path(out, cap, name);
  char buf[8192];
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  assert_true(n > 0 && (size_t)n < sizeof buf);
  assert_true(drv_write_file(out, buf, (size_t)n, mode));
}

/* Starts argv (under iofiber-run) and waits until it listens on port. */
static pid_t start(const char *const *argv, int port, const char *err) {
  pid_t pid = drv_spawn(argv, -1, NULL, err);
  if (!drv_wait_listening(port, pid)) {
    static char buf[65536];
    drv_stop(pid);
    size_t n = drv_slurp(err, buf, sizeof buf);
    fprintf(stderr, "%s\n", buf + (n > 2048 ? n - 2048 : 0));
    fail_msg("not listening on %d", port);
  }
  return pid;
}

static size_t count(const char *text, const char *what) {
  size_t n = 0;
  for (const char *p = text; (p = strstr(p, what)); p += strlen(what)) n++;
  return n;
}

/* Waits (up to `seconds`) until the file at path holds `what` at least n
 * times; whether it does. */
static bool wait_text(const char *path, const char *what, size_t n,
                      int seconds) {
  static char buf[1 << 20];
  for (int i = 0; i < seconds * 50; i++) {
    drv_slurp(path, buf, sizeof buf);
    if (count(buf, what) >= n) return true;
    usleep(20000);
  }
  print_message("%s: %zu of %zu \"%s\"\n", path, count(buf, what), n, what);
  return false;
}

/* How many times the file at path holds `what`. */
static size_t count_in(const char *path, const char *what) {
  static char buf[1 << 20];
  drv_slurp(path, buf, sizeof buf);
  return count(buf, what);
}

/* The count of `call` made from fibers in the hook's report at exit
 * (IOF_HOOK_VERBOSE=1) in the file at path, or -1. */
static long fiber_calls(const char *path, const char *call) {
  static char buf[1 << 20];
  char label[64];
  drv_slurp(path, buf, sizeof buf);
  snprintf(label, sizeof label, "]: %s ", call);
  return drv_figure(buf, label);
}

/* The number of sockets pid has open. */
static int sockets_open(pid_t pid) {
  char dir[64], path[320], link[64];
  snprintf(dir, sizeof dir, "/proc/%d/fd", (int)pid);
  DIR *d = opendir(dir);
  if (!d) return -1;
  int n = 0;
  struct dirent *e;
  while ((e = readdir(d))) {
    snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
    ssize_t l = readlink(path, link, sizeof link - 1);
    if (l > 0 && (link[l] = '\0', strncmp(link, "socket:", 7) == 0)) n++;
  }
  closedir(d);
  return n;
}

typedef struct ab_result {
  int status;
  long done, failed, kept, length, non2xx;
} ab_result;

/* ab with the arguments given (NULL-terminated), then url. */
static ab_result ab(const char *url, ...) {
  const char *argv[24] = {AB, "-q"};
  int n = 2;
  va_list ap;
  va_start(ap, url);
  for (const char *a; (a = va_arg(ap, const char *)) && n < 21;) argv[n++] = a;
  va_end(ap);
  argv[n++] = url;
  argv[n] = NULL;
  char out[128], report[8192];
  tmp_path(out, sizeof out, "ab.out");
  ab_result r = {.status = drv_run(argv, out, 30)};
  drv_slurp(out, report, sizeof report);
  r.done = drv_figure(report, "Complete requests:");
  r.failed = drv_figure(report, "Failed requests:");
  r.kept = drv_figure(report, "Keep-Alive requests:");
  r.length = drv_figure(report, "Document Length:");
  r.non2xx = drv_figure(report, "Non-2xx responses:");
  if (r.status || r.failed) print_message("ab: %s\n", report);
  return r;
}

/* A document root (tmpdir/name) with file.bin (FILE_BYTES) and
 * cgi/count.cgi, and post.bin (POST_BYTES) to post to it. */
static void make_site(const char *name, char *root, size_t cap) {
  char post[256];
  tmp_path(root, cap, name);
  tmp_path(post, sizeof post, "post.bin");
  assert_true(drv_make_site(root, post, FILE_BYTES, POST_BYTES));
}

static void check_run(ab_result r, long n, bool keep_alive, long length) {
  assert_int_equal(r.status, 0);
  assert_int_equal(r.done, n);
  assert_int_equal(r.failed, 0);
  if (keep_alive) assert_int_equal(r.kept, n);
  assert_int_equal(r.length, length);
}

static void check_file_run(ab_result r, long n, bool keep_alive) {
  check_run(r, n, keep_alive, FILE_BYTES);
}

static void check_cgi_run(ab_result r, long n) {
  assert_int_equal(r.status, 0);
  assert_int_equal(r.done, n);
  assert_int_equal(r.failed, 0);
  assert_int_equal(r.non2xx, -1); /* the line is absent: none */
  /* "q=a=b\n" and the count of bytes the script read, "50000\n". */
  assert_int_equal(r.length, 6 + 6);
}

static void check_threads(const char *who, int threads) {
  if (threads < 1 || threads > MAX_THREADS)
    fail_msg("%s ran on %d OS threads", who, threads);
}

/* ---- nginx ------------------------------------------------------------- */

static void test_nginx(void **state) {
  (void)state;
  if (!drv_installed((const char *const[]){NGINX, AB, NULL})) skip();
  char root[128], conf[128], err[128], url[96], run_dir[128];
  make_site("nginx-www", root, sizeof root);
  /* nginx hands its temporary directories to the user it serves as. */
  tmp_path(run_dir, sizeof run_dir, "nginx-run");
  assert_int_equal(mkdir(run_dir, 0755), 0);
  int port = drv_free_port();
  write_text(conf, sizeof conf, "nginx.conf", 0644,
             "daemon off;\nmaster_process off;\nworker_processes 1;\n"
             "error_log %s/nginx.log info;\npid %s/nginx.pid;\n"
             "thread_pool pool threads=8;\n"
             "events { worker_connections 1024; }\n"
             "http {\n access_log off;\n client_body_temp_path %s;\n"
             " proxy_temp_path %s;\n fastcgi_temp_path %s;\n"
             " uwsgi_temp_path %s;\n scgi_temp_path %s;\n"
             " server {\n  listen 127.0.0.1:%d;\n  root %s;\n"
             "  sendfile off;\n  aio threads=pool;\n"
             "  output_buffers 1 16k;\n }\n}\n",
             run_dir, run_dir, run_dir, run_dir, run_dir, run_dir, run_dir,
             port, root);
  tmp_path(err, sizeof err, "nginx.err");
  pid_t pid = start((const char *const[]){IOF_RUN_PATH, NGINX, "-p", run_dir,
                                          "-c", conf, NULL},
                    port, err);
  snprintf(url, sizeof url, "http://127.0.0.1:%d/file.bin", port);
  ab_result r = ab(url, "-k", "-n", "2000", "-c", "50", NULL);
  int threads = drv_os_threads(pid);
  int exit_st = drv_stop(pid);
  print_message("nginx under iofiber-run: %ld/2000 (%ld failed, %ld kept "
                "alive); %d OS thread(s); exit %d on SIGTERM\n",
                r.done, r.failed, r.kept, threads, exit_st);
  check_file_run(r, 2000, true);
  check_threads("nginx", threads);
  assert_int_equal(exit_st, 0);
}

/* nginx with its master process and 2 workers (forked from the master's
 * fiber: they run plain, see porting.md) through a configuration reload
 * (SIGHUP: the master reads the configuration again and starts new
 * workers, the old ones finish) and a reopening of the logs (SIGUSR1,
 * after the access log was renamed). */
static void test_nginx_reload(void **state) {
  (void)state;
  if (!drv_installed((const char *const[]){NGINX, AB, NULL})) skip();
  char root[128], conf[128], err[128], url[96], run_dir[128], log[160];
  char access[160], moved[160];
  make_site("nginx-reload-www", root, sizeof root);
  tmp_path(run_dir, sizeof run_dir, "nginx-reload-run");
  assert_int_equal(mkdir(run_dir, 0755), 0);
  snprintf(log, sizeof log, "%s/nginx.log", run_dir);
  snprintf(access, sizeof access, "%s/access.log", run_dir);
  snprintf(moved, sizeof moved, "%s/access.log.1", run_dir);
  int port = drv_free_port();
  write_text(conf, sizeof conf, "nginx-reload.conf", 0644,
             "daemon off;\nmaster_process on;\nworker_processes 2;\n"
             "error_log %s notice;\npid %s/nginx.pid;\n"
             "thread_pool pool threads=8;\n"
             "events { worker_connections 1024; }\n"
             "http {\n access_log %s;\n client_body_temp_path %s;\n"
             " proxy_temp_path %s;\n fastcgi_temp_path %s;\n"
             " uwsgi_temp_path %s;\n scgi_temp_path %s;\n"
             " server {\n  listen 127.0.0.1:%d;\n  root %s;\n"
             "  sendfile off;\n  aio threads=pool;\n"
             "  output_buffers 1 16k;\n }\n}\n",
             log, run_dir, access, run_dir, run_dir, run_dir, run_dir, run_dir,
             port, root);
  tmp_path(err, sizeof err, "nginx-reload.err");
  pid_t pid = start((const char *const[]){IOF_RUN_PATH, NGINX, "-p", run_dir,
                                          "-c", conf, NULL},
                    port, err);
  snprintf(url, sizeof url, "http://127.0.0.1:%d/file.bin", port);
  ab_result r[3];
  r[0] = ab(url, "-k", "-n", "1000", "-c", "50", NULL);
  kill(pid, SIGHUP);
  /* Two new workers, and the two old ones gone. */
  bool reloaded = wait_text(log, "start worker process ", 4, 10) &&
                  wait_text(log, "exited with code 0", 2, 10);
  r[1] = ab(url, "-k", "-n", "1000", "-c", "50", NULL);
  /* Every request so far is logged, one line each (the workers write
   * each as it ends); then the log moves away and is reopened. */
  size_t before = count_in(access, "\n");
  assert_int_equal(rename(access, moved), 0);
  kill(pid, SIGUSR1);
  /* The master and each worker reopen. */
  bool reopened = wait_text(log, ": reopening logs", 3, 10);
  r[2] = ab(url, "-k", "-n", "1000", "-c", "50", NULL);
  int threads = drv_os_threads(pid);
  int exit_st = drv_stop(pid);
  size_t after = count_in(access, "\n"), old = count_in(moved, "\n");
  size_t killed = count_in(log, "exited on signal");
  print_message("nginx master + 2 workers under iofiber-run: %ld/1000 "
                "before the reload (SIGHUP, %s), %ld/1000 after, %ld/1000 "
                "after reopening the logs (SIGUSR1, %s; access log %zu "
                "lines before, %zu after); %zu workers killed by a signal; "
                "master on %d OS thread(s); exit %d on SIGTERM\n",
                r[0].done, reloaded ? "done" : "not done", r[1].done, r[2].done,
                reopened ? "done" : "not done", old, after, killed, threads,
                exit_st);
  for (int i = 0; i < 3; i++) check_file_run(r[i], 1000, true);
  assert_true(reloaded);
  assert_true(reopened);
  assert_int_equal(before, 2000);
  assert_int_equal(old, 2000);
  assert_int_equal(after, 1000);
  assert_int_equal(killed, 0);
  check_threads("nginx's master", threads);
  assert_int_equal(exit_st, 0);
}

/* ---- haproxy ----------------------------------------------------------- */

/* haproxy's configuration (tmpdir/name): nbthread 4, a frontend on port
 * (returned) proxying to a second frontend of its own, which serves a
 * file of HAPROXY_BYTES from memory, so each request is an accepted and a
 * connected socket. */
static int haproxy_conf(char *conf, size_t cap, const char *name) {
  char small[128];
  /* What haproxy returns itself must fit in one of its buffers. */
  tmp_path(small, sizeof small, "small.bin");
  static unsigned char data[HAPROXY_BYTES];
  for (size_t i = 0; i < sizeof data; i++) data[i] = (unsigned char)(i * 7);
  assert_true(drv_write_file(small, data, HAPROXY_BYTES, 0644));
  int port = drv_free_port(), back = drv_free_port();
  write_text(conf, cap, name, 0644,
             "global\n nbthread 4\n maxconn 1000\n"
             "defaults\n mode http\n timeout connect 5s\n"
             " timeout client 10s\n timeout server 10s\n"
             "frontend fe\n bind 127.0.0.1:%d\n default_backend be\n"
             "backend be\n balance roundrobin\n"
             " server s1 127.0.0.1:%d\n server s2 127.0.0.1:%d\n"
             "frontend origin\n bind 127.0.0.1:%d\n"
             " http-request return status 200 content-type "
             "application/octet-stream file %s\n",
             port, back, back, back, small);
  return port;
}

static void test_haproxy(void **state) {
  (void)state;
  if (!drv_installed((const char *const[]){HAPROXY, AB, NULL})) skip();
  char conf[128], err[128], url[96];
  int port = haproxy_conf(conf, sizeof conf, "haproxy.cfg");
  tmp_path(err, sizeof err, "haproxy.err");
  pid_t pid = start(
      (const char *const[]){IOF_RUN_PATH, HAPROXY, "-f", conf, "-db", NULL},
      port, err);
  snprintf(url, sizeof url, "http://127.0.0.1:%d/file.bin", port);
  ab_result r = ab(url, "-k", "-n", "2000", "-c", "50", NULL);
  ab_result r2 = ab(url, "-n", "1000", "-c", "50", NULL);
  int threads = drv_os_threads(pid);
  int exit_st = drv_stop(pid);
  print_message("haproxy nbthread 4 under iofiber-run: %ld/2000 kept alive "
                "(%ld failed), %ld/1000 (%ld failed); %d OS thread(s); "
                "exit %d on SIGTERM\n",
                r.done, r.failed, r2.done, r2.failed, threads, exit_st);
  check_run(r, 2000, true, HAPROXY_BYTES);
  check_run(r2, 1000, false, HAPROXY_BYTES);
  check_threads("haproxy", threads);
  /* haproxy -db leaves on SIGTERM through the default action. */
  assert_int_equal(exit_st, 128 + SIGTERM);
}

/* haproxy in master-worker mode (-W; the worker is forked from the
 * master's fiber and runs plain, see porting.md) through a reload
 * (SIGUSR2: the master execs itself, reads the configuration, forks a new
 * worker and execs itself once more to wait for its workers; the old
 * worker finishes). The master execs itself to wait at start too:
 * iofiber-run --follow-exec keeps its new images on fibers. The old worker's
 * exit status is not checked: haproxy 2.6's sometimes crashes at that soft
 * stop, plainly too. */
static void test_haproxy_reload(void **state) {
  (void)state;
  if (!drv_installed((const char *const[]){HAPROXY, AB, NULL})) skip();
  char conf[128], err[128], url[96];
  int port = haproxy_conf(conf, sizeof conf, "haproxy-reload.cfg");
  tmp_path(err, sizeof err, "haproxy-reload.err");
  /* The hook's report at exit (of the master's last image) shows that it
   * still ran on fibers. */
  setenv("IOF_HOOK_VERBOSE", "1", 1);
  pid_t pid =
      start((const char *const[]){IOF_RUN_PATH, "--follow-exec", HAPROXY, "-W",
                                  "-db", "-f", conf, NULL},
            port, err);
  unsetenv("IOF_HOOK_VERBOSE");
  snprintf(url, sizeof url, "http://127.0.0.1:%d/file.bin", port);
  ab_result r[2];
  r[0] = ab(url, "-k", "-n", "1000", "-c", "50", NULL);
  kill(pid, SIGUSR2);
  /* The new master logs its configuration loaded and its new worker. */
  bool reloaded = wait_text(err, "Reloading HAProxy", 1, 10) &&
                  wait_text(err, "Loading success.", 2, 10) &&
                  wait_text(err, "New worker", 2, 10);
  r[1] = ab(url, "-k", "-n", "1000", "-c", "50", NULL);
  int threads = drv_os_threads(pid);
  int exit_st = drv_stop(pid);
  long waits = fiber_calls(err, "waitpid");
  print_message("haproxy -W (master and worker) under iofiber-run: "
                "%ld/1000 (%ld failed), reload (SIGUSR2) %s, %ld/1000 (%ld "
                "failed); master on %d OS thread(s), its last image reaped "
                "workers with %ld waitpid calls from a fiber; exit %d on "
                "SIGTERM\n",
                r[0].done, r[0].failed, reloaded ? "done" : "not done",
                r[1].done, r[1].failed, threads, waits, exit_st);
  check_run(r[0], 1000, true, HAPROXY_BYTES);
  assert_true(reloaded);
  check_run(r[1], 1000, true, HAPROXY_BYTES);
  check_threads("haproxy's master", threads);
  assert_true(waits >= 1);
  /* The master waits for its worker and exits 0. */
  assert_int_equal(exit_st, 0);
}

/* ---- apache2 ----------------------------------------------------------- */

static void test_apache(void **state) {
  (void)state;
  char mpm[128];
  snprintf(mpm, sizeof mpm, "%s/mod_mpm_event.so", APACHE_MODS);
  if (!drv_installed((const char *const[]){APACHE, AB, SH, NULL}) ||
      access(mpm, R_OK))
    skip();
  char root[128], conf[128], err[128], url[96], post[128], run_dir[128];
  make_site("apache-www", root, sizeof root);
  tmp_path(post, sizeof post, "post.bin");
  /* apache hands its mutex directory to the User it serves as. */
  tmp_path(run_dir, sizeof run_dir, "apache-run");
  assert_int_equal(mkdir(run_dir, 0755), 0);
  int port = drv_free_port();
  write_text(conf, sizeof conf, "apache.conf", 0644,
             "ServerRoot %s\nServerName localhost\nListen 127.0.0.1:%d\n"
             "LoadModule mpm_event_module %s/mod_mpm_event.so\n"
             "LoadModule authz_core_module %s/mod_authz_core.so\n"
             "LoadModule alias_module %s/mod_alias.so\n"
             "LoadModule cgi_module %s/mod_cgi.so\n"
             "PidFile %s/apache.pid\nErrorLog %s/apache.log\n"
             "Mutex file:%s default\nDocumentRoot %s\n"
             "ScriptAlias /cgi/ %s/cgi/\n"
             "User nobody\nGroup nogroup\n"
             "StartServers 1\nServerLimit 1\nThreadsPerChild 50\n"
             "MaxRequestWorkers 50\nMaxKeepAliveRequests 0\n"
             "<Directory %s>\n Require all granted\n</Directory>\n",
             tmpdir, port, APACHE_MODS, APACHE_MODS, APACHE_MODS, APACHE_MODS,
             run_dir, run_dir, run_dir, root, root, root);
  tmp_path(err, sizeof err, "apache.err");
  pid_t pid =
      start((const char *const[]){IOF_RUN_PATH, APACHE, "-X", "-f", conf, NULL},
            port, err);
  snprintf(url, sizeof url, "http://127.0.0.1:%d/file.bin", port);
  ab_result r = ab(url, "-k", "-n", "2000", "-c", "50", NULL);
  snprintf(url, sizeof url, "http://127.0.0.1:%d/cgi/count.cgi?a=b", port);
  ab_result c = ab(url, "-n", "200", "-c", "50", "-p", post, "-T",
                   "application/octet-stream", NULL);
  int threads = drv_os_threads(pid);
  int exit_st = drv_stop(pid);
  print_message("apache2 -X (event MPM, 50 threads) under iofiber-run: file "
                "%ld/2000 (%ld failed, %ld kept alive), CGI %ld/200 (%ld "
                "failed); %d OS thread(s); exit %d on SIGTERM\n",
                r.done, r.failed, r.kept, c.done, c.failed, threads, exit_st);
  check_file_run(r, 2000, true);
  check_cgi_run(c, 200);
  check_threads("apache2", threads);
  assert_int_equal(exit_st, 0);
}

/* apache2 with its parent process (the event MPM's children are forked
 * from the parent's fiber and run plain, see porting.md), through a
 * graceful restart (SIGUSR1) and a full one (SIGHUP): each re-reads the
 * configuration, dlclose's every module and loads it again in the parent.
 * mod_ldap brings libldap and libgnutls, which has thread-locals of its
 * own: it is unloaded and loaded again at the same TLS module id. */
static void test_apache_restart(void **state) {
  (void)state;
  char mods[3][128];
  static const char *const names[] = {"mpm_event", "ldap", "xml2enc"};
  for (int i = 0; i < 3; i++)
    snprintf(mods[i], sizeof mods[i], "%s/mod_%s.so", APACHE_MODS, names[i]);
  if (!drv_installed((const char *const[]){APACHE, AB, SH, NULL}) ||
      access(mods[0], R_OK) || access(mods[1], R_OK) || access(mods[2], R_OK))
    skip();
  char root[128], conf[128], err[128], log[128], url[96], cgi[96], post[128];
  char run_dir[128];
  make_site("apache-restart-www", root, sizeof root);
  tmp_path(post, sizeof post, "post.bin");
  tmp_path(run_dir, sizeof run_dir, "apache-restart-run");
  assert_int_equal(mkdir(run_dir, 0755), 0);
  tmp_path(log, sizeof log, "apache-restart-run/apache.log");
  int port = drv_free_port();
  write_text(conf, sizeof conf, "apache-restart.conf", 0644,
             "ServerRoot %s\nServerName localhost\nListen 127.0.0.1:%d\n"
             "LoadModule mpm_event_module %s\n"
             "LoadModule authz_core_module %s/mod_authz_core.so\n"
             "LoadModule alias_module %s/mod_alias.so\n"
             "LoadModule cgi_module %s/mod_cgi.so\n"
             "LoadModule ldap_module %s\nLoadModule xml2enc_module %s\n"
             "PidFile %s/apache.pid\nErrorLog %s\nLogLevel info\n"
             "Mutex file:%s default\nDocumentRoot %s\n"
             "ScriptAlias /cgi/ %s/cgi/\n"
             "User nobody\nGroup nogroup\n"
             "StartServers 1\nServerLimit 1\nThreadsPerChild 50\n"
             "MinSpareThreads 25\nMaxSpareThreads 75\n"
             "MaxRequestWorkers 50\nMaxKeepAliveRequests 0\n"
             "<Directory %s>\n Require all granted\n</Directory>\n",
             tmpdir, port, mods[0], APACHE_MODS, APACHE_MODS, APACHE_MODS,
             mods[1], mods[2], run_dir, log, run_dir, root, root, root);
  tmp_path(err, sizeof err, "apache-restart.err");
  /* The hook's report at exit says how many dlclose calls it took. */
  setenv("IOF_HOOK_VERBOSE", "1", 1);
  pid_t pid = start((const char *const[]){IOF_RUN_PATH, APACHE, "-DFOREGROUND",
                                          "-f", conf, NULL},
                    port, err);
  unsetenv("IOF_HOOK_VERBOSE");
  snprintf(url, sizeof url, "http://127.0.0.1:%d/file.bin", port);
  snprintf(cgi, sizeof cgi, "http://127.0.0.1:%d/cgi/count.cgi?a=b", port);
  /* Each generation logs that it is "resuming normal operations" once
   * configured; mod_ldap logs its SDK once per load. */
  static const char *const signals_seen[] = {NULL, "AH00493: SIGUSR1 received",
                                             "AH00494: SIGHUP received"};
  static const int sigs[] = {0, SIGUSR1, SIGHUP};
  ab_result r[3], c[3];
  bool restarted[3];
  for (int g = 0; g < 3; g++) {
    if (g) kill(pid, sigs[g]);
    restarted[g] =
        (!signals_seen[g] || wait_text(log, signals_seen[g], 1, 10)) &&
        wait_text(log, "AH00489", (size_t)g + 1, 10);
    r[g] = ab(url, "-k", "-n", "1000", "-c", "25", NULL);
    c[g] = ab(cgi, "-n", "100", "-c", "25", "-p", post, "-T",
              "application/octet-stream", NULL);
  }
  int threads = drv_os_threads(pid);
  int exit_st = drv_stop(pid);
  size_t ldap_loads = count_in(log, "AH01318");
  size_t crashes = count_in(log, "exit signal");
  /* (apache puts its error log on stderr, where the report goes.) */
  long dlcloses = fiber_calls(log, "dlclose");
  print_message("apache2 (event MPM) under iofiber-run, after start, graceful "
                "restart, restart: files %ld, %ld, %ld/1000, CGI %ld, %ld, "
                "%ld/100; %zu loads of mod_ldap, %ld dlclose calls, %zu "
                "children crashed; parent on %d OS thread(s); exit %d on "
                "SIGTERM\n",
                r[0].done, r[1].done, r[2].done, c[0].done, c[1].done,
                c[2].done, ldap_loads, dlcloses, crashes, threads, exit_st);
  for (int g = 0; g < 3; g++) {
    assert_true(restarted[g]);
    check_file_run(r[g], 1000, true);
    check_cgi_run(c[g], 100);
  }
  assert_int_equal(ldap_loads, 3);
  /* Each restart unloads the six modules (and the first configuration
   * pass at start once more). */
  assert_true(dlcloses >= 2 * 6);
  assert_int_equal(crashes, 0);
  check_threads("apache2's parent", threads);
  assert_int_equal(exit_st, 0);
  assert_int_equal(count_in(log, "AH00491: caught SIGTERM"), 1);
}

/* ---- lighttpd ---------------------------------------------------------- */

/* The minor version of lighttpd 1.4 (0 if it is not 1.4.x). */
static int lighttpd_minor(void) {
  char out[128], buf[256];
  tmp_path(out, sizeof out, "lighttpd-version.out");
  if (drv_run((const char *const[]){LIGHTTPD, "-v", NULL}, out, 10)) return 0;
  drv_slurp(out, buf, sizeof buf);
  long minor = drv_figure(buf, "lighttpd/1.4.");
  return minor > 0 ? (int)minor : 0;
}

/* lighttpd, then (1.4.56 and later) through a graceful restart
 * (SIGUSR1: it stops listening, lets its connections finish, frees its
 * server with its modules, dlclose'd, reads its configuration again and
 * loads them again, all in the same process): the file and the CGI again
 * after it. */
static void test_lighttpd(void **state) {
  (void)state;
  if (!drv_installed((const char *const[]){LIGHTTPD, AB, SH, NULL})) skip();
  char root[128], conf[128], err[128], log[128], url[96], cgi[96], post[128];
  make_site("lighttpd-www", root, sizeof root);
  tmp_path(post, sizeof post, "post.bin");
  tmp_path(log, sizeof log, "lighttpd.log");
  int port = drv_free_port();
  write_text(conf, sizeof conf, "lighttpd.conf", 0644,
             "server.document-root = \"%s\"\nserver.bind = \"127.0.0.1\"\n"
             "server.port = %d\nserver.modules += (\"mod_cgi\")\n"
             "cgi.assign = (\".cgi\" => \"\")\n"
             "server.network-backend = \"sendfile\"\n"
             "server.errorlog = \"%s\"\n",
             root, port, log);
  bool graceful = lighttpd_minor() >= 56;
  tmp_path(err, sizeof err, "lighttpd.err");
  /* The hook's report at exit says how many dlclose calls it took. */
  setenv("IOF_HOOK_VERBOSE", "1", 1);
  pid_t pid = start(
      (const char *const[]){IOF_RUN_PATH, LIGHTTPD, "-D", "-f", conf, NULL},
      port, err);
  unsetenv("IOF_HOOK_VERBOSE");
  snprintf(url, sizeof url, "http://127.0.0.1:%d/file.bin", port);
  snprintf(cgi, sizeof cgi, "http://127.0.0.1:%d/cgi/count.cgi?a=b", port);
  ab_result r[2], c[2];
  bool restarted = false;
  int runs = graceful ? 2 : 1;
  for (int i = 0; i < runs; i++) {
    if (i) {
      kill(pid, SIGUSR1);
      restarted = wait_text(log, "graceful shutdown started", 1, 10) &&
                  wait_text(log, "server started", 2, 10);
    }
    r[i] = ab(url, "-k", "-n", "2000", "-c", "50", NULL);
    c[i] = ab(cgi, "-n", "200", "-c", "50", "-p", post, "-T",
              "application/octet-stream", NULL);
  }
  int threads = drv_os_threads(pid);
  /* lighttpd exits 1 when a connection is still open at SIGTERM (plainly
   * too): the last ones may still be in their lingering close. */
  for (int i = 0; i < 100 && sockets_open(pid) > 1; i++) usleep(20000);
  int exit_st = drv_stop(pid);
  long dlcloses = fiber_calls(err, "dlclose");
  print_message("lighttpd under iofiber-run: file %ld/2000 (%ld failed, %ld "
                "kept alive), CGI %ld/200 (%ld failed); %d OS thread(s); "
                "exit %d on SIGTERM\n",
                r[0].done, r[0].failed, r[0].kept, c[0].done, c[0].failed,
                threads, exit_st);
  if (graceful)
    print_message("lighttpd after a graceful restart (SIGUSR1, %s, %ld "
                  "dlclose calls in all): file %ld/2000 (%ld failed), CGI "
                  "%ld/200 (%ld failed)\n",
                  restarted ? "done" : "not done", dlcloses, r[1].done,
                  r[1].failed, c[1].done, c[1].failed);
  else
    print_message("lighttpd older than 1.4.56: no graceful restart\n");
  for (int i = 0; i < runs; i++) {
    check_file_run(r[i], 2000, false);
    check_cgi_run(c[i], 200);
  }
  if (graceful) {
    assert_true(restarted);
    /* mod_cgi was unloaded through the hook at the restart, and again at
     * exit. */
    assert_true(dlcloses >= 2);
  }
  check_threads("lighttpd", threads);
  assert_int_equal(exit_st, 0);
}

/* ---- slapd ------------------------------------------------------------- */

#define LDAP_ENTRIES 200
#define LDAP_SEARCHES 10

static void test_slapd(void **state) {
  (void)state;
  if (!drv_installed((const char *const[]){SLAPD, LDAPADD, LDAPSEARCH, NULL}) ||
      access("/etc/ldap/schema/inetorgperson.schema", R_OK))
    skip();
  char db[128], conf[128], ldif[128], err[128], uri[64], out[128];
  tmp_path(db, sizeof db, "ldap-db");
  assert_int_equal(mkdir(db, 0700), 0);
  write_text(conf, sizeof conf, "slapd.conf", 0644,
             "include /etc/ldap/schema/core.schema\n"
             "include /etc/ldap/schema/cosine.schema\n"
             "include /etc/ldap/schema/inetorgperson.schema\n"
             "modulepath /usr/lib/ldap\nmoduleload back_mdb\n"
             "pidfile %s/slapd.pid\nthreads 8\n"
             "database mdb\nmaxsize 104857600\n"
             "suffix \"dc=example,dc=com\"\n"
             "rootdn \"cn=admin,dc=example,dc=com\"\nrootpw secret\n"
             "directory %s\n",
             tmpdir, db);
  static char entries[LDAP_ENTRIES * 160 + 256];
  size_t n = (size_t)snprintf(entries, sizeof entries,
                              "dn: dc=example,dc=com\nobjectClass: dcObject\n"
                              "objectClass: organization\no: Example\n"
                              "dc: example\n\n");
  for (int i = 0; i < LDAP_ENTRIES; i++)
    n += (size_t)snprintf(entries + n, sizeof entries - n,
                          "dn: cn=user%d,dc=example,dc=com\n"
                          "objectClass: inetOrgPerson\ncn: user%d\nsn: S%d\n"
                          "mail: user%d@example.com\n\n",
                          i, i, i, i);
  tmp_path(ldif, sizeof ldif, "data.ldif");
  assert_true(drv_write_file(ldif, entries, n, 0644));
  int port = drv_free_port();
  snprintf(uri, sizeof uri, "ldap://127.0.0.1:%d/", port);
  tmp_path(err, sizeof err, "slapd.err");
  pid_t pid = start((const char *const[]){IOF_RUN_PATH, SLAPD, "-f", conf, "-h",
                                          uri, "-d", "0", NULL},
                    port, err);
  tmp_path(out, sizeof out, "ldapadd.out");
  int st = drv_run((const char *const[]){LDAPADD, "-x", "-H", uri, "-D",
                                         "cn=admin,dc=example,dc=com", "-w",
                                         "secret", "-f", ldif, NULL},
                   out, 20);
  pid_t c[LDAP_SEARCHES];
  char outs[LDAP_SEARCHES][128];
  for (int i = 0; i < LDAP_SEARCHES; i++) {
    char name[32];
    snprintf(name, sizeof name, "search%d.out", i);
    tmp_path(outs[i], sizeof outs[i], name);
    c[i] = drv_spawn((const char *const[]){LDAPSEARCH, "-x", "-LLL", "-H", uri,
                                           "-b", "dc=example,dc=com",
                                           "(cn=user*)", "mail", NULL},
                     -1, outs[i], NULL);
  }
  int searches_ok = 0;
  for (int i = 0; i < LDAP_SEARCHES; i++) {
    static char buf[LDAP_ENTRIES * 100];
    int s = drv_wait_exit(c[i], 20);
    drv_slurp(outs[i], buf, sizeof buf);
    if (s == 0 && count(buf, "\nmail: user") == LDAP_ENTRIES) searches_ok++;
  }
  int threads = drv_os_threads(pid);
  int exit_st = drv_stop(pid);
  print_message("slapd under iofiber-run: ldapadd exit %d, %d/%d searches "
                "found all %d entries; %d OS thread(s); exit %d on "
                "SIGTERM\n",
                st, searches_ok, LDAP_SEARCHES, LDAP_ENTRIES, threads, exit_st);
  assert_int_equal(st, 0);
  assert_int_equal(searches_ok, LDAP_SEARCHES);
  check_threads("slapd", threads);
  assert_int_equal(exit_st, 0);
}

/* ---- named ------------------------------------------------------------- */

#define DNS_HOSTS 100
#define DNS_BATCHES 4

/* The zone file of example.test (tmpdir/example.zone, its path in zone):
 * DNS_HOSTS hosts with an A and a TXT record each, the serial given, and
 * the records in extra. */
static void write_zone_file(char *zone, size_t zcap, int serial,
                            const char *extra) {
  static char text[DNS_HOSTS * 120 + 512];
  size_t n = (size_t)snprintf(text, sizeof text,
                              "$ORIGIN example.test.\n$TTL 300\n"
                              "@ IN SOA ns1 admin %d 3600 600 86400 300\n"
                              "@ IN NS ns1\nns1 IN A 127.0.0.1\n%s",
                              serial, extra);
  for (int i = 1; i <= DNS_HOSTS; i++)
    n += (size_t)snprintf(text + n, sizeof text - n,
                          "h%d IN A 10.0.%d.%d\nh%d IN TXT \"host number "
                          "%d\"\n",
                          i, i / 256, i % 256, i, i);
  assert_true(n < sizeof text);
  tmp_path(zone, zcap, "example.zone");
  assert_true(drv_write_file(zone, text, n, 0644));
}

/* A zone of DNS_HOSTS hosts (an A and a TXT record each) for
 * example.test, and the dig batch that asks for all of them. */
static void write_zone(char *zone, size_t zcap, char *queries, size_t qcap) {
  static char text[DNS_HOSTS * 60];
  write_zone_file(zone, zcap, 1, "");
  size_t n = 0;
  for (int i = 1; i <= DNS_HOSTS; i++)
    n += (size_t)snprintf(text + n, sizeof text - n,
                          "h%d.example.test A\nh%d.example.test TXT\n", i, i);
  tmp_path(queries, qcap, "queries");
  assert_true(drv_write_file(queries, text, n, 0644));
}

/* Waits (up to ~5 s) until the server on port ps answers for the zone:
 * servers listen before their zones are loaded (plainly too). */
static void dns_wait_ready(const char *ps) {
  char out[128], buf[256];
  tmp_path(out, sizeof out, "dig-ready.out");
  for (int i = 0; i < 50; i++) {
    drv_run((const char *const[]){DIG, "+time=1", "+tries=1", "+short",
                                  "@127.0.0.1", "-p", ps, "h1.example.test",
                                  NULL},
            out, 5);
    drv_slurp(out, buf, sizeof buf);
    if (strcmp(buf, "10.0.0.1\n") == 0) return;
    usleep(50000);
  }
}

/* DNS_BATCHES digs at once, each asking every query of the batch over
 * UDP; how many got every answer. */
static int dns_batches(const char *ps, const char *queries) {
  pid_t c[DNS_BATCHES];
  char outs[DNS_BATCHES][128];
  for (int i = 0; i < DNS_BATCHES; i++) {
    char name[32];
    snprintf(name, sizeof name, "dig%d.out", i);
    tmp_path(outs[i], sizeof outs[i], name);
    /* Each dig from a port of its own: dig's sockets allow the port to be
     * shared, and two digs on one port take each other's answers (an "ID
     * mismatch" and a lost query, plainly too). */
    char from[32];
    snprintf(from, sizeof from, "127.0.0.1#%d", drv_free_port());
    c[i] = drv_spawn((const char *const[]){DIG, "-b", from, "+time=3",
                                           "+tries=1", "+short", "@127.0.0.1",
                                           "-p", ps, "-f", queries, NULL},
                     -1, outs[i], NULL);
  }
  int ok = 0;
  for (int i = 0; i < DNS_BATCHES; i++) {
    static char buf[16384];
    int s = drv_wait_exit(c[i], 20);
    drv_slurp(outs[i], buf, sizeof buf);
    if (s == 0 && count(buf, "10.0.") == DNS_HOSTS &&
        count(buf, "\"host number ") == DNS_HOSTS)
      ok++;
    else
      print_message("dig exit %d: %s\n", s, buf);
  }
  return ok;
}

/* One query over TCP, answered right. */
static bool dns_tcp_ok(const char *ps) {
  char out[128], buf[256];
  tmp_path(out, sizeof out, "dig-tcp.out");
  int st =
      drv_run((const char *const[]){DIG, "+tcp", "+short", "@127.0.0.1", "-p",
                                    ps, "h7.example.test", "TXT", NULL},
              out, 10);
  drv_slurp(out, buf, sizeof buf);
  return st == 0 && strcmp(buf, "\"host number 7\"\n") == 0;
}

/* `dig +short` of name and type from the server on port ps, into buf. */
static void dig_short(const char *ps, const char *name, const char *type,
                      char *buf, size_t cap) {
  char out[128];
  tmp_path(out, sizeof out, "dig-one.out");
  if (drv_run((const char *const[]){DIG, "+time=2", "+tries=1", "+short",
                                    "@127.0.0.1", "-p", ps, name, type, NULL},
              out, 10))
    buf[0] = '\0';
  else
    drv_slurp(out, buf, cap);
}

/* Waits (up to ~5 s) until the server on port ps answers `want` for name
 * (a new record of a reloaded zone); whether it does. */
static bool dns_wait_answer(const char *ps, const char *name,
                            const char *want) {
  char buf[256];
  for (int i = 0; i < 50; i++) {
    dig_short(ps, name, "A", buf, sizeof buf);
    if (strcmp(buf, want) == 0) return true;
    usleep(100000);
  }
  return false;
}

/* A key for rndc (a test's own: any 32 bytes in base64). */
#define RNDC_KEY                                                               \
  "key \"rndc-key\" { algorithm hmac-sha256; secret "                          \
  "\"aW9maWJlci10ZXN0LWtleS1ub3Qtc2VjcmV0LTAxMjM=\"; };\n"

/* named serves the zone, then reloads it (and its configuration) twice:
 * `rndc reload` over its control channel (a TCP connection to a fiber),
 * then SIGHUP, the zone file rewritten with a new serial and a new
 * record before each. With BIND's filter-aaaa plugin (which it unloads
 * and loads again, dlclose and dlopen, at each reload) h1's AAAA record
 * is filtered from IPv4 clients. */
static void test_named(void **state) {
  (void)state;
  if (!drv_installed((const char *const[]){NAMED, DIG, NULL})) skip();
  bool rndc = drv_installed((const char *const[]){RNDC, NULL});
  bool plugin = access(FILTER_AAAA, R_OK) == 0;
  char conf[128], rconf[128], zone[128], queries[128], err[128], out[128];
  char plugin_line[256] = "";
  write_zone(zone, sizeof zone, queries, sizeof queries);
  static const char aaaa[] = "h1 IN AAAA 2001:db8::1\n";
  write_zone_file(zone, sizeof zone, 1, aaaa);
  if (plugin)
    snprintf(plugin_line, sizeof plugin_line,
             "plugin query \"%s\" { filter-aaaa-on-v4 yes; };\n", FILTER_AAAA);
  int port = drv_free_port(), rport = drv_free_port();
  write_text(conf, sizeof conf, "named.conf", 0644,
             "options {\n directory \"%s\";\n"
             " listen-on port %d { 127.0.0.1; };\n listen-on-v6 { none; };\n"
             " pid-file \"%s/named.pid\";\n recursion no;\n"
             " allow-query { any; };\n allow-transfer { any; };\n"
             " dnssec-validation no;\n};\n" RNDC_KEY
             "controls { inet 127.0.0.1 port %d allow { 127.0.0.1; } "
             "keys { \"rndc-key\"; }; };\n%s"
             "zone \"example.test\" { type master; file \"%s\"; };\n",
             tmpdir, port, tmpdir, rport, plugin_line, zone);
  write_text(rconf, sizeof rconf, "rndc.conf", 0600,
             RNDC_KEY "options { default-key \"rndc-key\"; default-server "
                      "127.0.0.1; default-port %d; };\n",
             rport);
  tmp_path(err, sizeof err, "named.err");
  const char *user = geteuid() == 0 ? "root" : NULL;
  const char *argv[16] = {IOF_RUN_PATH, NAMED, "-g", "-n", "4", "-c", conf};
  if (user) argv[7] = "-u", argv[8] = user;
  /* The hook's report at exit says how many dlclose calls it took. */
  setenv("IOF_HOOK_VERBOSE", "1", 1);
  pid_t pid = start(argv, port, err);
  unsetenv("IOF_HOOK_VERBOSE");
  char ps[16];
  snprintf(ps, sizeof ps, "%d", port);
  dns_wait_ready(ps);
  int batches_ok[3] = {dns_batches(ps, queries)};
  bool tcp_ok = dns_tcp_ok(ps);
  static char buf[16384];
  tmp_path(out, sizeof out, "dig-axfr.out");
  int st2 = drv_run((const char *const[]){DIG, "+short", "@127.0.0.1", "-p", ps,
                                          "example.test", "AXFR", NULL},
                    out, 10);
  drv_slurp(out, buf, sizeof buf);
  /* SOA twice, NS, ns1's A and AAAA, and every host's A and TXT. */
  size_t axfr = count(buf, "\n");
  /* The plugin hides the AAAA record from us (an IPv4 client). */
  const char *want_aaaa = plugin ? "" : "2001:db8::1\n";
  char got[256];
  dig_short(ps, "h1.example.test", "AAAA", got, sizeof got);
  int aaaa_ok = strcmp(got, want_aaaa) == 0;
  /* The reloads: a new serial and record each time. */
  int rndc_st = -1;
  bool reloaded[3] = {true, false, false};
  for (int i = 1; i <= 2; i++) {
    char extra[128], name[32], want[32];
    snprintf(extra, sizeof extra, "%snew%d IN A 10.9.9.%d\n", aaaa, i, i);
    snprintf(name, sizeof name, "new%d.example.test", i);
    snprintf(want, sizeof want, "10.9.9.%d\n", i);
    write_zone_file(zone, sizeof zone, 1 + i, extra);
    if (i == 1 && rndc) {
      tmp_path(out, sizeof out, "rndc.out");
      rndc_st = drv_run(
          (const char *const[]){RNDC, "-c", rconf, "reload", NULL}, out, 10);
      drv_slurp(out, buf, sizeof buf);
      if (rndc_st || !strstr(buf, "server reload successful"))
        print_message("rndc reload: exit %d: %s\n", rndc_st, buf);
    } else {
      kill(pid, SIGHUP);
    }
    reloaded[i] = dns_wait_answer(ps, name, want);
    batches_ok[i] = dns_batches(ps, queries);
    dig_short(ps, "h1.example.test", "AAAA", got, sizeof got);
    aaaa_ok += strcmp(got, want_aaaa) == 0;
  }
  tcp_ok = tcp_ok && dns_tcp_ok(ps);
  int threads = drv_os_threads(pid);
  int exit_st = drv_stop(pid);
  size_t by_rndc = count_in(err, "received control channel command 'reload'");
  size_t by_hup = count_in(err, "received SIGHUP signal to reload zones");
  size_t plugin_loads = count_in(err, "loading plugin");
  long dlcloses = fiber_calls(err, "dlclose");
  print_message("named -n 4 under iofiber-run: %d/%d UDP batches of %d "
                "answers, TCP %s, AXFR %zu records; %d OS thread(s); exit "
                "%d on SIGTERM\n",
                batches_ok[0], DNS_BATCHES, 2 * DNS_HOSTS,
                tcp_ok ? "ok" : "bad", axfr, threads, exit_st);
  print_message("named reloads: rndc reload %s (exit %d), SIGHUP %s; UDP "
                "batches after them %d, %d/%d; filter-aaaa plugin %s, "
                "loaded %zu times, AAAA answers right %d/3; %ld dlclose "
                "calls\n",
                rndc ? (reloaded[1] ? "done" : "not done") : "(no rndc)",
                rndc_st, reloaded[2] ? "done" : "not done", batches_ok[1],
                batches_ok[2], DNS_BATCHES, plugin ? "used" : "missing",
                plugin_loads, aaaa_ok, dlcloses);
  for (int i = 0; i < 3; i++) {
    assert_true(reloaded[i]);
    assert_int_equal(batches_ok[i], DNS_BATCHES);
  }
  assert_true(tcp_ok);
  assert_int_equal(st2, 0);
  assert_int_equal(axfr, 5 + 2 * DNS_HOSTS);
  assert_int_equal(aaaa_ok, 3);
  if (rndc) {
    assert_int_equal(rndc_st, 0);
    assert_int_equal(by_rndc, 1);
  }
  assert_int_equal(by_hup, rndc ? 1 : 2);
  if (plugin) {
    assert_int_equal(plugin_loads, 3);
    /* The two reloads unloaded it through the hook (and exit once more). */
    assert_true(dlcloses >= 2);
  }
  check_threads("named", threads);
  assert_int_equal(exit_st, 0);
}

/* ---- pdns_recursor ----------------------------------------------------- */

static void test_pdns_recursor(void **state) {
  (void)state;
  if (!drv_installed((const char *const[]){PDNS_RECURSOR, DIG, NULL})) skip();
  char conf_dir[128], zone[128], queries[128], err[128], conf[160];
  char local[32], auth[192];
  write_zone(zone, sizeof zone, queries, sizeof queries);
  tmp_path(conf_dir, sizeof conf_dir, "pdns");
  assert_int_equal(mkdir(conf_dir, 0755), 0);
  snprintf(conf, sizeof conf, "%s/recursor.conf", conf_dir);
  assert_true(drv_write_file(conf, "", 0, 0644));
  int port = drv_free_port();
  snprintf(local, sizeof local, "--local-port=%d", port);
  snprintf(auth, sizeof auth, "--auth-zones=example.test=%s", zone);
  char cd[160], sd[160];
  snprintf(cd, sizeof cd, "--config-dir=%s", conf_dir);
  snprintf(sd, sizeof sd, "--socket-dir=%s", conf_dir);
  tmp_path(err, sizeof err, "pdns.err");
  /* Its threads run each query in an MTasker context of their own (a
   * stack switch inside the thread, here inside a fiber). */
  pid_t pid = start((const char *const[]){IOF_RUN_PATH, PDNS_RECURSOR, cd, sd,
                                          "--local-address=127.0.0.1", local,
                                          "--threads=2", "--daemon=no",
                                          "--write-pid=no", "--disable-syslog",
                                          "--setuid=", "--setgid=", auth, NULL},
                    port, err);
  char ps[16];
  snprintf(ps, sizeof ps, "%d", port);
  dns_wait_ready(ps);
  int batches_ok = dns_batches(ps, queries);
  bool tcp_ok = dns_tcp_ok(ps);
  int threads = drv_os_threads(pid);
  int exit_st = drv_stop(pid);
  print_message("pdns_recursor --threads=2 under iofiber-run: %d/%d UDP "
                "batches of %d answers, TCP %s; %d OS thread(s); exit %d on "
                "SIGTERM\n",
                batches_ok, DNS_BATCHES, 2 * DNS_HOSTS, tcp_ok ? "ok" : "bad",
                threads, exit_st);
  assert_int_equal(batches_ok, DNS_BATCHES);
  assert_true(tcp_ok);
  check_threads("pdns_recursor", threads);
  /* It leaves on SIGTERM through the default action. */
  assert_int_equal(exit_st, 128 + SIGTERM);
}

/* ---- mosquitto --------------------------------------------------------- */

#define MQ_MESSAGES 500
#define MQ_SUBS 2
#define MQ_PUBS 2

/* One round: MQ_SUBS subscribers (the round-th set to subscribe), then,
 * if reload_pid > 0, a configuration reload of it (SIGHUP, with the
 * subscribers connected), then MQ_PUBS publishers of MQ_MESSAGES QoS 1
 * messages each. How many publishers finished and how many subscribers
 * got every message, in ok[0] and ok[1]; whether the reload was logged. */
static bool mq_round(const char *ps, const char *log, const char *lines,
                     int round, pid_t reload_pid, int ok[2]) {
  char want[16];
  snprintf(want, sizeof want, "%d", MQ_PUBS * MQ_MESSAGES);
  pid_t subs[MQ_SUBS];
  char outs[MQ_SUBS][128];
  for (int i = 0; i < MQ_SUBS; i++) {
    char name[32];
    snprintf(name, sizeof name, "sub%d-%d.out", round, i);
    tmp_path(outs[i], sizeof outs[i], name);
    subs[i] = drv_spawn((const char *const[]){MOSQ_SUB, "-h", "127.0.0.1", "-p",
                                              ps, "-t", "t/#", "-q", "1", "-C",
                                              want, NULL},
                        -1, outs[i], NULL);
  }
  /* The subscriptions are in place once the broker logged them. */
  wait_text(log, "Received SUBSCRIBE", (size_t)(MQ_SUBS * round), 5);
  bool reloaded = true;
  if (reload_pid > 0) {
    kill(reload_pid, SIGHUP);
    reloaded = wait_text(log, "Reloading config.", 1, 5);
  }
  pid_t pubs[MQ_PUBS];
  for (int i = 0; i < MQ_PUBS; i++) {
    char topic[16];
    snprintf(topic, sizeof topic, "t/%d", i);
    int in = open(lines, O_RDONLY);
    pubs[i] =
        drv_spawn((const char *const[]){MOSQ_PUB, "-h", "127.0.0.1", "-p", ps,
                                        "-t", topic, "-q", "1", "-l", NULL},
                  in, NULL, NULL);
    close(in);
  }
  ok[0] = ok[1] = 0;
  for (int i = 0; i < MQ_PUBS; i++) ok[0] += drv_wait_exit(pubs[i], 20) == 0;
  for (int i = 0; i < MQ_SUBS; i++) {
    static char buf[MQ_PUBS * MQ_MESSAGES * 16 + 1];
    int s = drv_wait_exit(subs[i], 20);
    drv_slurp(outs[i], buf, sizeof buf);
    if (s == 0 && count(buf, "message ") == MQ_PUBS * MQ_MESSAGES &&
        count(buf, "message 499\n") == MQ_PUBS)
      ok[1]++;
  }
  return reloaded;
}

/* mosquitto: a round of publishers and subscribers, then a second one
 * whose subscribers stay connected through a configuration reload
 * (SIGHUP). */
static void test_mosquitto(void **state) {
  (void)state;
  if (!drv_installed(
          (const char *const[]){MOSQUITTO, MOSQ_PUB, MOSQ_SUB, NULL}))
    skip();
  char conf[128], err[128], lines[128];
  int port = drv_free_port();
  write_text(conf, sizeof conf, "mosquitto.conf", 0644,
             "listener %d 127.0.0.1\nallow_anonymous true\n"
             "persistence false\nmax_queued_messages 0\n",
             port);
  static char text[MQ_MESSAGES * 16];
  size_t n = 0;
  for (int i = 0; i < MQ_MESSAGES; i++)
    n += (size_t)snprintf(text + n, sizeof text - n, "message %d\n", i);
  tmp_path(lines, sizeof lines, "messages");
  assert_true(drv_write_file(lines, text, n, 0644));
  tmp_path(err, sizeof err, "mosquitto.err");
  pid_t pid = start(
      (const char *const[]){IOF_RUN_PATH, MOSQUITTO, "-v", "-c", conf, NULL},
      port, err);
  char ps[16];
  snprintf(ps, sizeof ps, "%d", port);
  int ok[2][2];
  mq_round(ps, err, lines, 1, 0, ok[0]);
  bool reloaded = mq_round(ps, err, lines, 2, pid, ok[1]);
  int threads = drv_os_threads(pid);
  int exit_st = drv_stop(pid);
  print_message("mosquitto under iofiber-run: %d/%d publishers done, %d/%d "
                "subscribers got all %d messages; through a reload (SIGHUP, "
                "%s): %d/%d publishers, %d/%d subscribers; %d OS thread(s); "
                "exit %d on SIGTERM\n",
                ok[0][0], MQ_PUBS, ok[0][1], MQ_SUBS, MQ_PUBS * MQ_MESSAGES,
                reloaded ? "done" : "not done", ok[1][0], MQ_PUBS, ok[1][1],
                MQ_SUBS, threads, exit_st);
  for (int r = 0; r < 2; r++) {
    assert_int_equal(ok[r][0], MQ_PUBS);
    assert_int_equal(ok[r][1], MQ_SUBS);
  }
  assert_true(reloaded);
  check_threads("mosquitto", threads);
  assert_int_equal(exit_st, 0);
}

/* ---- python3 + pyzmq --------------------------------------------------- */

static const char zmq_script[] =
    "import os, sys, threading, zmq\n"
    "ctx = zmq.Context(io_threads=2)\n"
    "port = int(sys.argv[1])\n"
    "CLIENTS, REQS = 20, 100\n"
    "def broker():\n"
    "    front = ctx.socket(zmq.ROUTER); "
    "front.bind(f'tcp://127.0.0.1:{port}')\n"
    "    back = ctx.socket(zmq.DEALER); back.bind('inproc://workers')\n"
    "    poller = zmq.Poller()\n"
    "    poller.register(front, zmq.POLLIN); poller.register(back, "
    "zmq.POLLIN)\n"
    "    while True:\n"
    "        ev = dict(poller.poll())\n"
    "        if front in ev:\n"
    "            m = front.recv_multipart()\n"
    "            if m[-1] == b'STOP': break\n"
    "            back.send_multipart(m)\n"
    "        if back in ev:\n"
    "            front.send_multipart(back.recv_multipart())\n"
    "    front.close(); back.close()\n"
    "def worker():\n"
    "    s = ctx.socket(zmq.DEALER); s.connect('inproc://workers')\n"
    "    while True:\n"
    "        m = s.recv_multipart()\n"
    "        s.send_multipart(m[:-1] + [m[-1].upper()])\n"
    "def client(i, res):\n"
    "    s = ctx.socket(zmq.REQ); s.connect(f'tcp://127.0.0.1:{port}')\n"
    "    for j in range(REQS):\n"
    "        s.send(f'c{i}-r{j}'.encode())\n"
    "        if s.recv() == f'C{i}-R{j}'.encode(): res[i] += 1\n"
    "    s.close()\n"
    "b = threading.Thread(target=broker); b.start()\n"
    "for _ in range(4): threading.Thread(target=worker, daemon=True).start()\n"
    "res = [0] * CLIENTS\n"
    "cs = [threading.Thread(target=client, args=(i, res)) "
    "for i in range(CLIENTS)]\n"
    "for c in cs: c.start()\n"
    "for c in cs: c.join()\n"
    "pull = ctx.socket(zmq.PULL); pull.bind('inproc://sink')\n"
    "def pusher(k):\n"
    "    p = ctx.socket(zmq.PUSH); p.connect('inproc://sink')\n"
    "    for _ in range(1000): p.send(b'%d' % k)\n"
    "    p.close()\n"
    "ps = [threading.Thread(target=pusher, args=(k,)) for k in range(5)]\n"
    "for p in ps: p.start()\n"
    "total = sum(int(pull.recv()) + 1 for _ in range(5000))\n"
    "for p in ps: p.join()\n"
    "with open(f'/proc/{os.getpid()}/status') as f:\n"
    "    th = [l.split()[1] for l in f if l.startswith('Threads')][0]\n"
    "s = ctx.socket(zmq.REQ); s.connect(f'tcp://127.0.0.1:{port}')\n"
    "s.send(b'STOP'); s.close(linger=1000); b.join()\n"
    "print('replies', sum(res), 'push', total, 'threads', th, flush=True)\n"
    "os._exit(0)\n";

static void test_pyzmq(void **state) {
  (void)state;
  if (!drv_installed((const char *const[]){PYTHON, NULL})) skip();
  char script[128], out[128], buf[4096], ps[16];
  /* pyzmq installed? */
  tmp_path(out, sizeof out, "pyzmq.out");
  if (drv_run((const char *const[]){PYTHON, "-c", "import zmq", NULL}, out, 10))
    skip();
  write_text(script, sizeof script, "zmq_threads.py", 0644, "%s", zmq_script);
  snprintf(ps, sizeof ps, "%d", drv_free_port());
  int st = drv_run(
      (const char *const[]){IOF_RUN_PATH, PYTHON, script, ps, NULL}, out, 30);
  drv_slurp(out, buf, sizeof buf);
  print_message("python3 + pyzmq under iofiber-run: exit %d: %s", st, buf);
  long replies = drv_figure(buf, "replies "), push = drv_figure(buf, "push ");
  long threads = drv_figure(buf, "threads ");
  assert_int_equal(st, 0);
  assert_int_equal(replies, 20 * 100);
  assert_int_equal(push, 5 * 1000 * 3); /* 1 + 2 + ... + 5, 1,000 times */
  check_threads("python3 with libzmq", (int)threads);
}

/* ---- python3 + grpcio -------------------------------------------------- */

static const char grpc_script[] =
    "import grpc, os, threading\n"
    "from concurrent import futures\n"
    "same = lambda b: b\n"
    "def upper(req, ctx): return req.upper()\n"
    "def count(req, ctx):\n"
    "    for i in range(int(req)): yield b'item %d' % i\n"
    "h = grpc.method_handlers_generic_handler('t.Svc', {\n"
    "    'Upper': grpc.unary_unary_rpc_method_handler(upper, "
    "request_deserializer=same, response_serializer=same),\n"
    "    'Count': grpc.unary_stream_rpc_method_handler(count, "
    "request_deserializer=same, response_serializer=same)})\n"
    "server = grpc.server(futures.ThreadPoolExecutor(max_workers=8))\n"
    "server.add_generic_rpc_handlers((h,))\n"
    "port = server.add_insecure_port('127.0.0.1:0')\n"
    "server.start()\n"
    "CLIENTS, CALLS = 10, 100\n"
    "res = [0] * CLIENTS\n"
    "def client(i):\n"
    "    with grpc.insecure_channel(f'127.0.0.1:{port}') as ch:\n"
    "        up = ch.unary_unary('/t.Svc/Upper', request_serializer=same, "
    "response_deserializer=same)\n"
    "        st = ch.unary_stream('/t.Svc/Count', request_serializer=same, "
    "response_deserializer=same)\n"
    "        for j in range(CALLS):\n"
    "            if up(b'c%d r%d' % (i, j), timeout=10) == b'C%d R%d' % (i, "
    "j): res[i] += 1\n"
    "        res[i] += sum(1 for _ in st(b'50', timeout=10))\n"
    "ts = [threading.Thread(target=client, args=(i,)) for i in "
    "range(CLIENTS)]\n"
    "for t in ts: t.start()\n"
    "with open(f'/proc/{os.getpid()}/status') as f:\n"
    "    th = [l.split()[1] for l in f if l.startswith('Threads')][0]\n"
    "for t in ts: t.join()\n"
    "server.stop(1).wait()\n"
    "print('answers', sum(res), 'threads', th, flush=True)\n";

static void test_grpc(void **state) {
  (void)state;
  if (!drv_installed((const char *const[]){PYTHON, NULL})) skip();
  char script[128], out[128], buf[4096];
  tmp_path(out, sizeof out, "grpc.out");
  if (drv_run((const char *const[]){PYTHON, "-c", "import grpc", NULL}, out,
              10))
    skip();
  write_text(script, sizeof script, "grpc_threads.py", 0644, "%s", grpc_script);
  int st = drv_run((const char *const[]){IOF_RUN_PATH, PYTHON, script, NULL},
                   out, 30);
  drv_slurp(out, buf, sizeof buf);
  print_message("python3 + grpcio under iofiber-run: exit %d: %s", st, buf);
  assert_int_equal(st, 0);
  /* Each client's 100 unary calls and one stream of 50 items. */
  assert_int_equal(drv_figure(buf, "answers "), 10 * (100 + 50));
  check_threads("python3 with gRPC", (int)drv_figure(buf, "threads "));
}

/* ---- ruby -------------------------------------------------------------- */

static const char ruby_script[] =
    "require 'socket'\n"
    "srv = TCPServer.new('127.0.0.1', 0); port = srv.addr[1]\n"
    "q = Queue.new; m = Mutex.new; served = 0\n"
    "acc = Thread.new { 20.times { q << srv.accept }; 4.times { q << nil } }\n"
    "ws = 4.times.map { Thread.new { while (c = q.pop)\n"
    "  while (l = c.gets); c.write(l.upcase); end\n"
    "  c.close; m.synchronize { served += 1 }; end } }\n"
    "cs = 20.times.map { |i| Thread.new {\n"
    "  s = TCPSocket.new('127.0.0.1', port); ok = 0\n"
    "  50.times { |j| s.write(\"c#{i} l#{j}\\n\")\n"
    "    ok += 1 if s.gets == \"C#{i} L#{j}\\n\"; sleep 0.001 if j % 10 == 0 "
    "}\n"
    "  s.close_write; s.close; ok } }\n"
    "th = File.read(\"/proc/#{$$}/status\")[/Threads:\\s*(\\d+)/, 1]\n"
    "tot = cs.map(&:value).sum; acc.join; ws.each(&:join)\n"
    "puts \"answers #{tot} served #{served} threads #{th}\"\n";

static void test_ruby(void **state) {
  (void)state;
  if (!drv_installed((const char *const[]){RUBY, NULL})) skip();
  char script[128], out[128], buf[4096];
  write_text(script, sizeof script, "threads.rb", 0644, "%s", ruby_script);
  tmp_path(out, sizeof out, "ruby.out");
  int st =
      drv_run((const char *const[]){IOF_RUN_PATH, RUBY, script, NULL}, out, 30);
  drv_slurp(out, buf, sizeof buf);
  print_message("ruby threads under iofiber-run: exit %d: %s", st, buf);
  assert_int_equal(st, 0);
  assert_int_equal(drv_figure(buf, "answers "), 20 * 50);
  assert_int_equal(drv_figure(buf, "served "), 20);
  check_threads("ruby", (int)drv_figure(buf, "threads "));
}

int main(void) {
  signal(SIGPIPE, SIG_IGN);
  if (!mkdtemp(tmpdir)) return 1;
  /* apache2 serves as nobody. */
  chmod(tmpdir, 0755);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_nginx),     cmocka_unit_test(test_nginx_reload),
      cmocka_unit_test(test_haproxy),   cmocka_unit_test(test_haproxy_reload),
      cmocka_unit_test(test_apache),    cmocka_unit_test(test_apache_restart),
      cmocka_unit_test(test_lighttpd),  cmocka_unit_test(test_slapd),
      cmocka_unit_test(test_named),     cmocka_unit_test(test_pdns_recursor),
      cmocka_unit_test(test_mosquitto), cmocka_unit_test(test_pyzmq),
      cmocka_unit_test(test_grpc),      cmocka_unit_test(test_ruby),
  };
  int r = cmocka_run_group_tests(tests, NULL, NULL);
  drv_remove_tree(tmpdir);
  return r;
}
