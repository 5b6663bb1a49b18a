/* stdio on sockets and pipes from fibers (iof_compat_fdopen): fgets,
 * fprintf, fflush and fread suspend only the calling fiber, so a line
 * protocol between two fibers of one thread works (with glibc's own
 * stream the reader would hold the thread and the writer never run);
 * fileno, fclose, EOF, large writes, fdopen's error codes, and glibc's
 * stream on a regular file; popen's stream and pclose's wait likewise. */
#include "check_test.h"

#include <iofiber/compat_io.h>

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

static int sv[2];
static atomic_int ticks;
static atomic_bool done;

static int ticker(void *arg) {
  (void)arg;
  while (!atomic_load(&done)) {
    atomic_fetch_add(&ticks, 1);
    iof_sleep_for(2000000);
  }
  return 0;
}

/* ---- a line protocol between two fibers of one thread ----------------- */

static int line_server(void *arg) {
  (void)arg;
  FILE *f = iof_compat_fdopen(sv[0], "r+");
  CHECK(f != NULL);
  if (!f) return 0;
  CHECK(fileno(f) == sv[0]);
  char line[128];
  int n = 0;
  while (fgets(line, sizeof line, f)) {
    line[strcspn(line, "\n")] = 0;
    CHECK(fprintf(f, "echo %d: %s\n", n++, line) > 0);
    CHECK(fflush(f) == 0);
  }
  CHECK(feof(f) && !ferror(f)); /* the peer shut its side */
  CHECK(n == 3);
  CHECK(fclose(f) == 0);
  errno = 0;
  CHECK(fcntl(sv[0], F_GETFD) == -1 && errno == EBADF); /* fclose closed it */
  return 0;
}

static int line_client(void *arg) {
  (void)arg;
  FILE *f = iof_compat_fdopen(sv[1], "r+");
  CHECK(f != NULL);
  if (!f) return 0;
  const char *words[3] = {"alpha", "beta", "gamma"};
  char line[128], want[128];
  for (int i = 0; i < 3; i++) {
    iof_sleep_for(10000000);
    CHECK(fprintf(f, "%s\n", words[i]) > 0);
    CHECK(fflush(f) == 0);
    CHECK(fgets(line, sizeof line, f) != NULL);
    snprintf(want, sizeof want, "echo %d: %s\n", i, words[i]);
    CHECK(strcmp(line, want) == 0);
  }
  CHECK(shutdown(fileno(f), SHUT_WR) == 0);
  CHECK(fgets(line, sizeof line, f) == NULL && feof(f));
  CHECK(fclose(f) == 0);
  atomic_store(&done, true);
  return 0;
}

static void test_line_protocol_one_thread(void **state) {
  (void)state;
  assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
  atomic_store(&ticks, 0);
  atomic_store(&done, false);
  run_fibers3(line_server, line_client, ticker);
  assert_no_failures();
  assert_true(atomic_load(&done));
  assert_true(atomic_load(&ticks) >= 10); /* the thread kept running */
}

/* ---- a megabyte through a pipe ---------------------------------------- */

enum { BIG = 1 << 20 };
static int pp[2];

static int big_writer(void *arg) {
  (void)arg;
  char *buf = malloc(BIG);
  CHECK(buf != NULL);
  if (!buf) return 0;
  for (int i = 0; i < BIG; i++) buf[i] = (char)(i * 7);
  FILE *f = iof_compat_fdopen(pp[1], "w");
  CHECK(f != NULL);
  CHECK(fwrite(buf, 1, BIG, f) == BIG); /* many partial pipe writes */
  CHECK(fclose(f) == 0);
  free(buf);
  return 0;
}

static int big_reader(void *arg) {
  (void)arg;
  FILE *f = iof_compat_fdopen(pp[0], "r");
  CHECK(f != NULL);
  if (!f) return 0;
  char chunk[4096];
  size_t total = 0, bad = 0, n;
  while ((n = fread(chunk, 1, sizeof chunk, f)) > 0) {
    for (size_t i = 0; i < n; i++)
      if (chunk[i] != (char)((total + i) * 7)) bad++;
    total += n;
  }
  CHECK(total == BIG && bad == 0 && feof(f));
  CHECK(fclose(f) == 0);
  atomic_store(&done, true);
  return 0;
}

static void test_megabyte_through_a_pipe(void **state) {
  (void)state;
  assert_int_equal(pipe(pp), 0);
  atomic_store(&done, false);
  run_fibers3(big_reader, big_writer, NULL);
  assert_no_failures();
  assert_true(atomic_load(&done));
}

/* ---- errors, files, plain threads ------------------------------------- */

static int errors(void *arg) {
  (void)arg;
  int p[2];
  CHECK(pipe(p) == 0);
  errno = 0;
  CHECK(iof_compat_fdopen(p[0], "w") == NULL && errno == EINVAL);
  errno = 0;
  CHECK(iof_compat_fdopen(p[1], "r+") == NULL && errno == EINVAL);
  errno = 0;
  CHECK(iof_compat_fdopen(p[0], "x") == NULL && errno == EINVAL);
  errno = 0;
  CHECK(iof_compat_fdopen(-1, "r") == NULL && errno == EBADF);
  /* A refused mode leaves the fd open and in the fibers' hands. */
  CHECK(iof_compat_write(p[1], "z", 1) == 1);
  char c;
  CHECK(iof_compat_read(p[0], &c, 1) == 1 && c == 'z');
  /* "a" on a pipe: glibc's O_APPEND, the fd's view kept blocking. */
  FILE *w = iof_compat_fdopen(p[1], "a");
  CHECK(w != NULL);
  CHECK(fcntl(p[1], F_GETFL) & O_APPEND);
  CHECK((iof_compat_fcntl(p[1], F_GETFL) & O_NONBLOCK) == 0);
  errno = 0;
  CHECK(fseek(w, 0, SEEK_SET) == -1 && errno == ESPIPE);
  CHECK(fclose(w) == 0);
  CHECK(iof_compat_close(p[0]) == 0);

  /* A regular file gets glibc's own stream: seekable. */
  char path[] = "/tmp/iof-stdio-XXXXXX";
  int fd = mkstemp(path);
  CHECK(fd >= 0);
  unlink(path);
  FILE *f = iof_compat_fdopen(fd, "w+");
  CHECK(f != NULL && fileno(f) == fd);
  CHECK(fputs("hello file\n", f) >= 0);
  CHECK(fseek(f, 6, SEEK_SET) == 0);
  char line[32];
  CHECK(fgets(line, sizeof line, f) && strcmp(line, "file\n") == 0);
  CHECK(fclose(f) == 0);
  return 0;
}

static void test_errors_and_files(void **state) {
  (void)state;
  run_fibers3(errors, NULL, NULL);
  assert_no_failures();
}

/* ---- popen and pclose ------------------------------------------------- */

static int popen_fiber(void *arg) {
  (void)arg;
  /* Reading a command's output while it runs: the ticker goes on. */
  int t0 = atomic_load(&ticks);
  FILE *f = iof_compat_popen("sleep 0.05; echo one; sleep 0.05; echo two", "r");
  CHECK(f != NULL);
  if (!f) return 0;
  char line[64];
  CHECK(fgets(line, sizeof line, f) && strcmp(line, "one\n") == 0);
  CHECK(fgets(line, sizeof line, f) && strcmp(line, "two\n") == 0);
  CHECK(fgets(line, sizeof line, f) == NULL && feof(f));
  int st = iof_compat_pclose(f);
  CHECK(st != -1 && WIFEXITED(st) && WEXITSTATUS(st) == 0);
  /* ~50 ticks of 2 ms in the command's 100 ms; a blocked thread gets at
   * most one. 5 leaves room for a loaded machine (it read 19 of 20). */
  CHECK(atomic_load(&ticks) - t0 >= 5);

  /* Its exit status; pclose waits while the command still runs. */
  f = iof_compat_popen("sleep 0.05; exit 3", "re");
  CHECK(f != NULL && (fcntl(fileno(f), F_GETFD) & FD_CLOEXEC));
  st = f ? iof_compat_pclose(f) : -1;
  CHECK(st != -1 && WIFEXITED(st) && WEXITSTATUS(st) == 3);

  /* Writing to a command. */
  char path[] = "/tmp/iof-popen-XXXXXX";
  int fd = mkstemp(path);
  CHECK(fd >= 0);
  close(fd);
  char cmd[128];
  snprintf(cmd, sizeof cmd, "cat > %s", path);
  f = iof_compat_popen(cmd, "w");
  CHECK(f != NULL);
  if (f) {
    for (int i = 0; i < 1000; i++) fprintf(f, "line %d\n", i);
    st = iof_compat_pclose(f);
    CHECK(st != -1 && WIFEXITED(st) && WEXITSTATUS(st) == 0);
  }
  FILE *in = fopen(path, "r");
  int lines = 0;
  while (in && fgets(line, sizeof line, in)) lines++;
  if (in) fclose(in);
  unlink(path);
  CHECK(lines == 1000);

  /* Modes. */
  errno = 0;
  CHECK(iof_compat_popen("true", "x") == NULL && errno == EINVAL);
  errno = 0;
  CHECK(iof_compat_popen("true", "") == NULL && errno == EINVAL);
  errno = 0;
  CHECK(iof_compat_popen("true", "rw") == NULL && errno == EINVAL);
  errno = 0;
  CHECK(iof_compat_popen("true", "wr") == NULL && errno == EINVAL);
  /* fclose of a popen stream reaps the child and returns its status, as
   * glibc's. */
  f = iof_compat_popen("exit 3", "r");
  CHECK(f != NULL);
  if (f) CHECK(fclose(f) == 3 << 8);
  atomic_store(&done, true);
  return 0;
}

static void test_popen_in_a_fiber(void **state) {
  (void)state;
  atomic_store(&ticks, 0);
  atomic_store(&done, false);
  run_fibers3(popen_fiber, ticker, NULL);
  assert_no_failures();
  /* Outside fibers: libc's stream, which pclose takes too. */
  FILE *f = iof_compat_popen("echo plain", "r");
  assert_non_null(f);
  char line[32];
  assert_non_null(fgets(line, sizeof line, f));
  assert_string_equal(line, "plain\n");
  int st = iof_compat_pclose(f);
  assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
}

IOF_TEST_CHECK_FIXTURES(setup, teardown, 30)

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_line_protocol_one_thread, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(test_megabyte_through_a_pipe, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(test_errors_and_files, setup, teardown),
      cmocka_unit_test_setup_teardown(test_popen_in_a_fiber, setup, teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
