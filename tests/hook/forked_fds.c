/* A child forked from a fiber under iofiber-run (or with the header swap)
 * sees its fds as a plain process does, although the runtime made them
 * non-blocking for the parent's fibers (a PostgreSQL backend forked by a
 * postmaster run under iofiber-run): F_GETFL shows the program's own view,
 * O_NONBLOCK set by the child makes recv say EAGAIN, a number the child
 * closes and reuses is the new socket's, and a blocking recv ends with
 * EINTR where the kernel's would: after a handler without SA_RESTART, or
 * any handler on a socket with SO_RCVTIMEO; after an SA_RESTART handler it
 * goes on and gets the data. Plain, the kernel answers the same.
 * Exit 0: every step right; it prints what failed. SIGALRM ends a hang. */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define STEPS_NAME "forked_fds"
#include "steps.h"

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

/* A connected pair the parent's fiber has read from once: under the
 * runtime, [0] is then non-blocking underneath, blocking to the program. */
static void used_pair(int sv[2]) {
  char c;
  if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv) != 0 ||
      send(sv[1], "p", 1, 0) != 1 || recv(sv[0], &c, 1, 0) != 1) {
    fprintf(stderr, "forked_fds: setup: %s\n", strerror(errno));
    failed = 1;
  }
}

static void on_alarm(int sig) {
  (void)sig;
}

static void handler(int flags) {
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_alarm;
  sa.sa_flags = flags;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGALRM, &sa, NULL);
}

static void alarm_in(long ms) {
  struct itimerval it = {{0, 0}, {ms / 1000, (ms % 1000) * 1000}};
  setitimer(ITIMER_REAL, &it, NULL);
}

/* The child's checks; returns its exit status (0: all right). */
static int child(int a[2], int b[2], int c[2], int d[2], int e[2]) {
  char ch;
  /* The program never asked for O_NONBLOCK on a. */
  int fl = fcntl(a[0], F_GETFL);
  CHECK(fl >= 0 && !(fl & O_NONBLOCK), "child F_GETFL shows the user's view");

  /* The child asks for it: recv says EAGAIN at once. */
  CHECK(fcntl(a[0], F_SETFL, fl | O_NONBLOCK) == 0, "child F_SETFL");
  double t0 = now();
  errno = 0;
  ssize_t r = recv(a[0], &ch, 1, 0);
  CHECK(r == -1 && errno == EAGAIN && now() - t0 < 0.5,
        "child's own O_NONBLOCK: EAGAIN at once");

  /* b's number closed and reused by a new non-blocking socket. */
  int num = b[0];
  close(b[0]);
  int n[2];
  CHECK(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, n) == 0,
        "child socketpair");
  if (n[0] != num) {
    CHECK(dup2(n[0], num) == num, "child dup2");
    close(n[0]);
  }
  t0 = now();
  errno = 0;
  r = recv(num, &ch, 1, 0);
  CHECK(r == -1 && errno == EAGAIN && now() - t0 < 0.5,
        "reused number: the new socket's mode");

  /* A handler without SA_RESTART ends a blocking recv. */
  handler(0);
  alarm_in(150);
  t0 = now();
  errno = 0;
  r = recv(c[0], &ch, 1, 0);
  double took = now() - t0;
  CHECK(r == -1 && errno == EINTR && took > 0.1 && took < 2,
        "no SA_RESTART: EINTR");

  /* Any handler ends it on a socket with a receive timeout. */
  handler(SA_RESTART);
  struct timeval tv = {5, 0};
  CHECK(setsockopt(e[0], SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv) == 0,
        "child SO_RCVTIMEO");
  alarm_in(150);
  t0 = now();
  errno = 0;
  r = recv(e[0], &ch, 1, 0);
  took = now() - t0;
  CHECK(r == -1 && errno == EINTR && took > 0.1 && took < 2,
        "SA_RESTART with SO_RCVTIMEO: EINTR");

  /* SA_RESTART without a timeout: the call goes on until the parent's
   * byte arrives (1.5 s after the fork). */
  alarm_in(150);
  t0 = now();
  r = recv(d[0], &ch, 1, 0);
  took = now() - t0;
  CHECK(r == 1 && ch == 'x' && took > 0.3, "SA_RESTART: restarted, data");
  return failed;
}

int main(void) {
  int a[2], b[2], c[2], d[2], e[2];
  used_pair(a);
  used_pair(b);
  used_pair(c);
  used_pair(d);
  used_pair(e);
  if (failed) return 1;
  alarm(30); /* a hang ends the test */
  pid_t p = fork();
  if (p == 0) {
    alarm(20);
    _exit(child(a, b, c, d, e));
  }
  CHECK(p > 0, "fork");
  usleep(1500 * 1000);
  CHECK(send(d[1], "x", 1, 0) == 1, "parent send");
  int st = -1;
  CHECK(waitpid(p, &st, 0) == p, "waitpid");
  CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0, "child's checks");
  /* The parent's fibers still wait on their fds without blocking. */
  char ch;
  CHECK(send(c[1], "y", 1, 0) == 1 && recv(c[0], &ch, 1, 0) == 1 && ch == 'y',
        "parent recv after the child");
  if (failed) return 1;
  puts("forked_fds: all steps right");
  return 0;
}
