/* Unmodified multi-threaded servers under iofiber-run, driven by their own
 * load generators (this driver runs plain):
 * - memcached -t 4 (libevent worker threads fed through pipes by the
 *   listener thread, plus its maintenance threads): memcslap sets 10,000
 *   keys from 100 connections, then reads them back over the binary
 *   protocol; the server's own counters must show every set and every
 *   hit. memccapable then runs its protocol conformance suite (ASCII and
 *   binary, every command) and must pass all of it;
 * - civetweb with a pool of 60 worker threads: ab fetches a 100 KiB file
 *   3,000 times over 50 keep-alive connections, then POSTs 50 KB to a
 *   shell CGI (fork and exec from a worker, pipes both ways) 300 times
 *   from 50 connections: every request must complete, none fail.
 * Each server runs on at most MAX_THREADS OS threads (plainly memcached
 * runs 10, civetweb 62) and exits 0 on SIGTERM. A program that is not
 * installed is skipped (scripts/install-deps.sh installs them). */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <setjmp.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "driver_support.h"
#include "test_support.h"

#define MEMCACHED "/usr/bin/memcached"
#define MEMCSLAP "/usr/bin/memcslap"
#define MEMCCAPABLE "/usr/bin/memccapable"
#define CIVETWEB "/usr/bin/civetweb"
#define AB "/usr/bin/ab"
#define SH "/bin/sh"

/* The io thread, and the resolver's worker or the hook's helper. */
#define MAX_THREADS 3
#define FILE_BYTES (100 * 1024)
#define POST_BYTES 50000

static char tmpdir[] = "/tmp/iof-servers-XXXXXX";

static void tmp_path(char *out, size_t cap, const char *name) {
  snprintf(out, cap, "%s/%s", tmpdir, name);
}

/* ---- memcached --------------------------------------------------------- */

/* memcached's counter `name` from its "stats" command, or -1. */
static long mc_stat(int port, const char *name) {
  int s = drv_connect(port);
  if (s < 0) return -1;
  static const char cmd[] = "stats\r\n";
  char buf[8192];
  size_t n = 0;
  if (write(s, cmd, sizeof cmd - 1) == (ssize_t)(sizeof cmd - 1)) {
    while (n < sizeof buf - 1) {
      ssize_t r = read(s, buf + n, sizeof buf - 1 - n);
      if (r <= 0) break;
      n += (size_t)r;
      buf[n] = '\0';
      if (strstr(buf, "END\r\n")) break;
    }
  }
  close(s);
  buf[n] = '\0';
  char key[64];
  snprintf(key, sizeof key, "STAT %s ", name);
  const char *p = strstr(buf, key);
  return p ? strtol(p + strlen(key), NULL, 10) : -1;
}

static void test_memcached(void **state) {
  (void)state;
  if (!drv_installed(
          (const char *const[]){MEMCACHED, MEMCSLAP, MEMCCAPABLE, NULL}))
    skip();
  char err[128], out[128], ps[16], server[32];
  tmp_path(err, sizeof err, "memcached.err");
  tmp_path(out, sizeof out, "client.out");
  int port = drv_free_port();
  snprintf(ps, sizeof ps, "%d", port);
  snprintf(server, sizeof server, "127.0.0.1:%d", port);
  /* memcached refuses to run as root without a user to switch to. */
  const char *argv[16] = {IOF_RUN_PATH, MEMCACHED, "-U", "0", "-l", "127.0.0.1",
                          "-p",         ps,        "-t", "4", "-c", "1024"};
  if (geteuid() == 0) argv[12] = "-u", argv[13] = "nobody";
  pid_t pid = drv_spawn(argv, -1, NULL, err);
  if (!drv_wait_listening(port, pid)) {
    drv_stop(pid);
    fail_msg("not listening on %d", port);
  }

  char servers[48];
  snprintf(servers, sizeof servers, "--servers=%s", server);
  int st =
      drv_run((const char *const[]){MEMCSLAP, servers, "--concurrency=100",
                                    "--execute-number=100", "--test=set", NULL},
              out, 15);
  long sets = mc_stat(port, "cmd_set");
  /* The get test stores its 100 keys, then reads each 100 times. */
  int st2 =
      drv_run((const char *const[]){MEMCSLAP, servers, "--concurrency=100",
                                    "--execute-number=100", "--test=get",
                                    "--binary", NULL},
              out, 15);
  long sets2 = mc_stat(port, "cmd_set");
  long gets = mc_stat(port, "cmd_get"), hits = mc_stat(port, "get_hits");
  long conns = mc_stat(port, "total_connections");
  int threads = drv_os_threads(pid);
  char cap_out[128], buf[65536];
  tmp_path(cap_out, sizeof cap_out, "memccapable.out");
  int st3 = drv_run(
      (const char *const[]){MEMCCAPABLE, "-h", "127.0.0.1", "-p", ps, NULL},
      cap_out, 30);
  drv_slurp(cap_out, buf, sizeof buf);
  bool all_passed = strstr(buf, "All tests passed") != NULL;
  int exit_st = drv_stop(pid);
  print_message("memcached under iofiber-run: memcslap exits %d %d, %ld sets, "
                "%ld gets, %ld hits, %ld connections; memccapable exit %d%s; "
                "%d OS thread(s); exit %d on SIGTERM\n",
                st, st2, sets, gets, hits, conns, st3,
                all_passed ? " (all passed)" : "", threads, exit_st);
  if (!all_passed) print_message("memccapable: %s\n", buf);
  assert_int_equal(st, 0);
  assert_int_equal(st2, 0);
  assert_int_equal(sets, 100 * 100);
  assert_int_equal(sets2 - sets, 100);
  assert_int_equal(gets, 100 * 100);
  assert_int_equal(hits, 100 * 100);
  assert_true(conns >= 200);
  assert_int_equal(st3, 0);
  assert_true(all_passed);
  assert_true(threads >= 1 && threads <= MAX_THREADS);
  assert_int_equal(exit_st, 0);
}

/* ---- civetweb ---------------------------------------------------------- */

static void test_civetweb(void **state) {
  (void)state;
  if (!drv_installed((const char *const[]){CIVETWEB, AB, SH, NULL})) skip();
  char root[128], cgi_dir[160], body[128], err[128], out[128];
  tmp_path(root, sizeof root, "www");
  snprintf(cgi_dir, sizeof cgi_dir, "%s/cgi", root);
  tmp_path(body, sizeof body, "post.bin");
  assert_true(drv_make_site(root, body, FILE_BYTES, POST_BYTES));
  tmp_path(err, sizeof err, "civetweb.err");
  tmp_path(out, sizeof out, "ab.out");

  int port = drv_free_port();
  char listen[32];
  snprintf(listen, sizeof listen, "127.0.0.1:%d", port);
  pid_t pid = drv_spawn(
      (const char *const[]){IOF_RUN_PATH, CIVETWEB, "-document_root", root,
                            "-listening_ports", listen, "-num_threads", "60",
                            "-enable_keep_alive", "yes", "-cgi_pattern",
                            "**.cgi$", NULL},
      -1, NULL, err);
  if (!drv_wait_listening(port, pid)) {
    drv_stop(pid);
    fail_msg("not listening on %d", port);
  }

  char url[96], report[8192];
  snprintf(url, sizeof url, "http://%s/file.bin", listen);
  int st = drv_run((const char *const[]){AB, "-q", "-k", "-n", "3000", "-c",
                                         "50", url, NULL},
                   out, 20);
  drv_slurp(out, report, sizeof report);
  long done = drv_figure(report, "Complete requests:");
  long failed = drv_figure(report, "Failed requests:");
  long kept = drv_figure(report, "Keep-Alive requests:");
  long length = drv_figure(report, "Document Length:");

  snprintf(url, sizeof url, "http://%s/cgi/count.cgi?a=b", listen);
  int st2 = drv_run(
      (const char *const[]){AB, "-q", "-n", "300", "-c", "50", "-p", body, "-T",
                            "application/octet-stream", url, NULL},
      out, 20);
  drv_slurp(out, report, sizeof report);
  long cgi_done = drv_figure(report, "Complete requests:");
  long cgi_failed = drv_figure(report, "Failed requests:");
  long non2xx = drv_figure(report, "Non-2xx responses:");
  long cgi_length = drv_figure(report, "Document Length:");
  int threads = drv_os_threads(pid);
  int exit_st = drv_stop(pid);
  print_message("civetweb under iofiber-run: file %ld/3000 (%ld failed, %ld "
                "kept alive, %ld bytes), CGI %ld/300 (%ld failed, %ld bytes); "
                "%d OS thread(s); exit %d on SIGTERM\n",
                done, failed, kept, length, cgi_done, cgi_failed, cgi_length,
                threads, exit_st);
  if (cgi_done != 300 || cgi_failed) print_message("ab: %s\n", report);
  assert_int_equal(st, 0);
  assert_int_equal(done, 3000);
  assert_int_equal(failed, 0);
  assert_int_equal(kept, 3000);
  assert_int_equal(length, FILE_BYTES);
  assert_int_equal(st2, 0);
  assert_int_equal(cgi_done, 300);
  assert_int_equal(cgi_failed, 0);
  assert_int_equal(non2xx, -1); /* the line is absent: none */
  /* "q=a=b\n" and the count of bytes the script read, "50000\n". */
  assert_int_equal(cgi_length, 6 + 6);
  assert_true(threads >= 1 && threads <= MAX_THREADS);
  assert_int_equal(exit_st, 0);
}

int main(void) {
  signal(SIGPIPE, SIG_IGN);
  if (!mkdtemp(tmpdir)) return 1;
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_memcached),
      cmocka_unit_test(test_civetweb),
  };
  int r = cmocka_run_group_tests(tests, NULL, NULL);
  drv_remove_tree(tmpdir);
  return r;
}
