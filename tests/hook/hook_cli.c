/* iofiber-run on unmodified programs: a shell, the curl command-line client
 * against a local server, the environment its exec'ed children see, and
 * the launcher's own errors. This program itself runs plain. */
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "http_delay_server.h"
#include "test_support.h"

typedef struct run_result {
  int status; /* exit code, or 128 + signal */
  char out[4096];
  char err[16384];
} run_result;

static void drain(int fd, char *buf, size_t cap) {
  size_t n = 0;
  ssize_t r;
  while ((r = read(fd, buf + n, cap - 1 - n)) > 0) n += (size_t)r;
  buf[n] = '\0';
  close(fd);
}

/* Runs argv with extra "NAME=value" settings (NULL value: unset). */
static void run(run_result *res, const char *const *env,
                const char *const *argv) {
  int o[2], e[2];
  assert_int_equal(pipe(o), 0);
  assert_int_equal(pipe(e), 0);
  pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) {
    dup2(o[1], 1);
    dup2(e[1], 2);
    close(o[0]), close(o[1]), close(e[0]), close(e[1]);
    for (; env && env[0]; env += 2)
      env[1] ? setenv(env[0], env[1], 1) : unsetenv(env[0]);
    execv(argv[0], (char *const *)argv);
    _exit(99);
  }
  close(o[1]), close(e[1]);
  drain(o[0], res->out, sizeof res->out);
  drain(e[0], res->err, sizeof res->err);
  int st;
  assert_int_equal(waitpid(pid, &st, 0), pid);
  res->status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

static const char *const no_preload[] = {"LD_PRELOAD", NULL, "IOF_RUN", NULL,
                                         NULL};

static void test_shell(void **state) {
  (void)state;
  run_result r;
  run(&r, no_preload,
      (const char *const[]){IOF_RUN_PATH, "/bin/sh", "-c", "echo ok", NULL});
  assert_int_equal(r.status, 0);
  assert_string_equal(r.out, "ok\n");
  /* A pipeline: the shell makes the pipe in its main fiber; the children
   * it forks must still read and write it blocking. */
  run(&r, no_preload,
      (const char *const[]){IOF_RUN_PATH, "/bin/sh", "-c",
                            "seq 1 200000 | tail -n 1", NULL});
  assert_int_equal(r.status, 0);
  assert_string_equal(r.out, "200000\n");
}

static void test_children_not_taken_over(void **state) {
  (void)state;
  static const char *const env[] = {"LD_PRELOAD", "libm.so.6", "IOF_RUN", NULL,
                                    NULL};
  const char *script = "echo \"[$IOF_RUN][$LD_PRELOAD]\"";
  run_result r;
  run(&r, env,
      (const char *const[]){IOF_RUN_PATH, "/bin/sh", "-c", script, NULL});
  assert_int_equal(r.status, 0);
  /* The shell ran on fibers, but what it runs starts plain. */
  assert_string_equal(r.out, "[][libm.so.6]\n");
  run(&r, env,
      (const char *const[]){IOF_RUN_PATH, "--follow-exec", "/bin/sh", "-c",
                            script, NULL});
  assert_int_equal(r.status, 0);
  assert_non_null(strstr(r.out, "[1]["));
  assert_non_null(strstr(r.out, "libiofiber-hook.so.0:libm.so.6]\n"));
}

static int port;

static void test_curl_cli(void **state) {
  (void)state;
  if (access("/usr/bin/curl", X_OK) != 0) skip();
  char url[64];
  snprintf(url, sizeof url, "http://127.0.0.1:%d/cli", port);
  static const char *const env[] = {"LD_PRELOAD",       NULL, "IOF_RUN", NULL,
                                    "IOF_HOOK_VERBOSE", "1",  NULL};
  run_result r;
  run(&r, env,
      (const char *const[]){IOF_RUN_PATH, "/usr/bin/curl", "-sS", "--max-time",
                            "10", url, NULL});
  assert_int_equal(r.status, 0);
  assert_string_equal(r.out, "hello");
  /* The counters curl's process printed at exit: its waits were made by a
   * fiber (the "fiber" column of poll is not 0). */
  const char *line = strstr(r.err, " poll ");
  assert_non_null(line);
  unsigned long fiber = 0, blocked = 0, outside = 0;
  assert_int_equal(
      sscanf(line, " poll %lu %lu %lu", &fiber, &blocked, &outside), 3);
  assert_true(fiber > 0);
  assert_int_equal(blocked, 0);
}

/* The report line of call in err ("... poll  F  B  O"): the fiber column,
 * or -1 if no such line. */
static long fiber_count(const char *err, const char *call) {
  char key[64];
  snprintf(key, sizeof key, " %s ", call);
  const char *line = strstr(err, key);
  unsigned long f, b, o;
  if (!line || sscanf(line + strlen(key), "%lu %lu %lu", &f, &b, &o) != 3)
    return -1;
  return (long)f;
}

static void test_follow_exec(void **state) {
  (void)state;
  if (access("/usr/bin/curl", X_OK) != 0) skip();
  char script[128];
  snprintf(script, sizeof script,
           "exec /usr/bin/curl -sS --max-time 10 http://127.0.0.1:%d/fx", port);
  static const char *const env[] = {"LD_PRELOAD",       NULL, "IOF_RUN", NULL,
                                    "IOF_HOOK_VERBOSE", "1",  NULL};
  run_result r;
  /* The shell runs on fibers but execs curl plain: no hook, no report. */
  run(&r, env,
      (const char *const[]){IOF_RUN_PATH, "/bin/sh", "-c", script, NULL});
  assert_int_equal(r.status, 0);
  assert_string_equal(r.out, "hello");
  assert_int_equal(fiber_count(r.err, "poll"), -1);
  /* With --follow-exec, curl itself runs on fibers. */
  run(&r, env,
      (const char *const[]){IOF_RUN_PATH, "--follow-exec", "/bin/sh", "-c",
                            script, NULL});
  assert_int_equal(r.status, 0);
  assert_string_equal(r.out, "hello");
  assert_true(fiber_count(r.err, "poll") > 0);
}

static void test_launcher_errors(void **state) {
  (void)state;
  run_result r;
  run(&r, no_preload, (const char *const[]){IOF_RUN_PATH, NULL});
  assert_int_equal(r.status, 2);
  run(&r, no_preload,
      (const char *const[]){IOF_RUN_PATH, "--threads", "0", "/bin/true", NULL});
  assert_int_equal(r.status, 2);
  run(&r, no_preload,
      (const char *const[]){IOF_RUN_PATH, "/nonexistent/program", NULL});
  assert_int_equal(r.status, 127);
  run(&r, no_preload,
      (const char *const[]){IOF_RUN_PATH, "--threads", "2", "/bin/sh", "-c",
                            "exit 3", NULL});
  assert_int_equal(r.status, 3);
  /* IOF_THREADS from the environment counts unless --threads is given:
   * the program's OS threads are its io threads. */
  const char *const three[] = {"LD_PRELOAD",  NULL, "IOF_RUN", NULL,
                               "IOF_THREADS", "3",  NULL};
#define THREADS_OF_SH "grep Threads: /proc/$$/status | tr -dc 0-9"
  const char *const show[] = {IOF_RUN_PATH, "/bin/sh", "-c", THREADS_OF_SH,
                              NULL};
  run(&r, three, show);
  assert_string_equal(r.out, "3");
  run(&r, three,
      (const char *const[]){IOF_RUN_PATH, "--threads", "2", "/bin/sh", "-c",
                            THREADS_OF_SH, NULL});
  assert_string_equal(r.out, "2");
  const char *const unset[] = {"LD_PRELOAD",  NULL, "IOF_RUN", NULL,
                               "IOF_THREADS", NULL, NULL};
  run(&r, unset, show);
  assert_string_equal(r.out, "1");
}

static void test_static_binary_warned(void **state) {
  (void)state;
  run_result r;
  run(&r, no_preload, (const char *const[]){IOF_RUN_PATH, STATIC_PROG, NULL});
  assert_int_equal(r.status, 0);
  assert_string_equal(r.out, "static ok\n");
  assert_non_null(strstr(r.err, "statically linked"));
}

IOF_TEST_WATCHDOG(setup, teardown, 20)

int main(void) {
  port = http_delay_server_start(0);
  if (port < 0) return 1;
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_shell, setup, teardown),
      cmocka_unit_test_setup_teardown(test_children_not_taken_over, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(test_curl_cli, setup, teardown),
      cmocka_unit_test_setup_teardown(test_follow_exec, setup, teardown),
      cmocka_unit_test_setup_teardown(test_launcher_errors, setup, teardown),
      cmocka_unit_test_setup_teardown(test_static_binary_warned, setup,
                                      teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
