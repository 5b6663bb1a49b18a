/* libiofiber-hook linked into a program: reads from glibc's own stdin
 * stream (fgets, getline, getchar, fread, scanf) and read(0) suspend only
 * the calling fiber while a pipe or a terminal on fd 0 has nothing yet.
 * glibc reads its streams with an internal read no interposer reaches, so
 * before the hook waited for the fd these held the thread: the fiber that
 * was to write the line never ran (a plain thread writes it after 3 s,
 * so a failure is a failed assertion, not a hang). */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdatomic.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "hook_support.h"
#include "test_support.h"

enum { K_FGETS, K_GETLINE, K_GETCHAR, K_FREAD, K_SCANF, K_READ, K_COUNT };

static const char *const lines[K_COUNT] = {"hello\n", "getline\n", "c\n",
                                           "abcde\n", "42\n",      "raw\n"};
/* The interposer each kind reaches (by glibc's inline versions under
 * optimization: getline is __getdelim, getchar is getc). */
static const char *const calls[K_COUNT][2] = {{"fgets", "__fgets_chk"},
                                              {"getline", "__getdelim"},
                                              {"getc", "getchar"},
                                              {"fread", "__fread_chk"},
                                              {"__isoc99_vfscanf", "vfscanf"},
                                              {"read", "__read_chk"}};

/* Fiber calls counted so far for kind k. */
static unsigned long fiber_calls(int k) {
  unsigned long n = 0;
  for (int i = 0; i < 2; i++) {
    unsigned long c = hook_count(calls[k][i], 0);
    if (c != ~0ul) n += c; /* ~0: a name the hook does not count */
  }
  return n;
}

typedef struct stdin_case {
  int wfd; /* the other end of fd 0 */
  int kind;
  int order[2], n;
  char got[64];
  int64_t waited_ms;
} stdin_case;

static int reader(void *arg) {
  stdin_case *c = arg;
  int64_t t0 = iof_test_now_ns();
  char *l = NULL;
  size_t cap = 0;
  int v = 0;
  switch (c->kind) {
  case K_FGETS:
    if (!fgets(c->got, sizeof c->got, stdin)) strcpy(c->got, "(null)");
    break;
  case K_GETLINE:
    snprintf(c->got, sizeof c->got, "%s",
             getline(&l, &cap, stdin) > 0 ? l : "(eof)");
    free(l);
    break;
  case K_GETCHAR:
    c->got[0] = (char)getchar();
    c->got[1] = (char)getchar(); /* the '\n', buffered */
    break;
  case K_FREAD:
    if (fread(c->got, 1, 6, stdin) != 6) strcpy(c->got, "(short)");
    break;
  case K_SCANF:
    if (scanf("%d", &v) != 1) v = -1;
    snprintf(c->got, sizeof c->got, "%d%c", v, getchar());
    break;
  case K_READ:
    if (read(0, c->got, sizeof c->got - 1) <= 0) strcpy(c->got, "(none)");
    break;
  }
  c->waited_ms = ms_since(t0);
  c->order[c->n++] = 1;
  return 0;
}

static int feeder(void *arg) {
  stdin_case *c = arg;
  usleep(50 * 1000); /* a fiber's sleep */
  c->order[c->n++] = 2;
  const char *s = lines[c->kind];
  return write(c->wfd, s, strlen(s)) == (ssize_t)strlen(s) ? 0 : -errno;
}

static int pair(void *arg) {
  const iof_env *env = iof_env_current();
  int r = iof_launch(env->executor, reader, arg);
  if (r == 0) r = iof_launch(env->executor, feeder, arg);
  return r;
}

/* The safety net: writes the line from a plain thread after 3 s. */
typedef struct net {
  stdin_case *c;
  atomic_bool done;
} net;

static void *net_fn(void *arg) {
  net *n = arg;
  for (int i = 0; i < 300 && !atomic_load(&n->done); i++) usleep(10 * 1000);
  if (!atomic_load(&n->done)) {
    const char *s = lines[n->c->kind];
    if (write(n->c->wfd, s, strlen(s)) < 0) perror("net write");
  }
  return NULL;
}

/* Every kind of read, fd 0 being the read end of `rfd` (written on wfd). */
static void reads_on(int rfd, int wfd) {
  int saved = dup(0);
  assert_true(saved >= 0);
  assert_int_equal(dup2(rfd, 0), 0);
  clearerr(stdin);
  for (int k = 0; k < K_COUNT; k++) {
    stdin_case c = {.wfd = wfd, .kind = k};
    net n = {.c = &c};
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, net_fn, &n), 0);
    unsigned long before = fiber_calls(k);
    assert_int_equal(hook_run_fibers(1, pair, &c), 0);
    atomic_store(&n.done, true);
    assert_int_equal(pthread_join(t, NULL), 0);
    /* The feeder ran while the reader waited: the line came from it. */
    print_message("%s: %s waited %lld ms, order %d %d\n", calls[k][0], c.got,
                  (long long)c.waited_ms, c.order[0], c.order[1]);
    assert_int_equal(c.order[0], 2);
    assert_int_equal(c.order[1], 1);
    assert_true(c.waited_ms >= 30 && c.waited_ms < 2000);
    assert_string_equal(c.got, k == K_SCANF ? "42\n" : lines[k]);
    assert_true(fiber_calls(k) > before); /* a fiber's call */
  }
  assert_int_equal(dup2(saved, 0), 0);
  close(saved);
  clearerr(stdin);
}

static void test_stdin_pipe(void **state) {
  (void)state;
  int p[2];
  assert_int_equal(pipe(p), 0);
  reads_on(p[0], p[1]);
  close(p[0]);
  close(p[1]);
}

/* A terminal keeps its blocking mode (the shell shares it): the wait is
 * for readiness, then the plain read. */
static void test_stdin_terminal(void **state) {
  (void)state;
  int m = posix_openpt(O_RDWR | O_NOCTTY);
  if (m < 0) skip(); /* no /dev/ptmx here */
  assert_int_equal(grantpt(m), 0);
  assert_int_equal(unlockpt(m), 0);
  int s = open(ptsname(m), O_RDWR | O_NOCTTY);
  assert_true(s >= 0);
  reads_on(s, m);
  close(s);
  close(m);
}

IOF_TEST_WATCHDOG(setup, teardown, 30)

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_stdin_pipe, setup, teardown),
      cmocka_unit_test_setup_teardown(test_stdin_terminal, setup, teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
