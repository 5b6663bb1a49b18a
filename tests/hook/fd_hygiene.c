/* Daemon-style fd hygiene under iofiber-run: a program that closes every
 * fd above 2 at start (closefrom, close_range, a close loop, as ssh and
 * daemons do) and dup2s onto numbers of its choosing must not take the
 * runtime's own descriptors (libev's epoll fd and eventfd) with them:
 * afterwards its threads still sleep, and talk over a pipe and a socket
 * pair, on fibers. Then stdio on a pipe from a child process (fdopen +
 * fgets, as sort and busybox wget do): the fd the runtime made
 * non-blocking reads as a blocking one; and a pipe passed on fd 77 to a
 * program a child execs (as Python's multiprocessing spawn does) blocks
 * there too. Exit 0: every step right; it prints what failed. */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define THREADS 8

static int fail(const char *what) {
  fprintf(stderr, "fd_hygiene: %s (%s)\n", what, strerror(errno));
  return 1;
}

static int pipefd[2], pair[2];
static int tags[THREADS + 1]; /* what each thread returns */

static void *sleeper(void *arg) {
  usleep(50000);
  return arg;
}

static void *writer(void *arg) {
  usleep(20000); /* the reader is parked on the pipe first */
  (void)!write(pipefd[1], "ping", 4);
  char b[4];
  if (read(pair[1], b, 4) != 4 || memcmp(b, "pong", 4) != 0) return NULL;
  return arg;
}

/* The exec'ed side (run plain): cat of fd, as blocking reads. */
static int cat_fd(int fd) {
  char b[256];
  ssize_t n;
  while ((n = read(fd, b, sizeof b)) > 0)
    if (write(1, b, (size_t)n) != n) return 1;
  if (n < 0) return fail("cat-fd read");
  return 0;
}

int main(int argc, char **argv) {
  if (argc == 3 && strcmp(argv[1], "--cat-fd") == 0)
    return cat_fd(atoi(argv[2]));
  signal(SIGPIPE, SIG_IGN); /* a failed child: EPIPE, reported */
  closefrom(3);
  if (close_range(3, ~0U, 0) != 0) return fail("close_range");
  for (int fd = 3; fd < 4096; fd++) close(fd);
  /* Every number a program could pick from the low range: dup2 onto it
   * either works or says EBADF (a runtime fd), and nothing breaks. */
  int refused = 0;
  for (int fd = 3; fd < 2048; fd++) {
    if (dup2(1, fd) == fd)
      close(fd);
    else if (errno == EBADF)
      refused++;
    else
      return fail("dup2");
  }
  if (pipe(pipefd) != 0) return fail("pipe");
  if (socketpair(AF_UNIX, SOCK_STREAM, 0, pair) != 0) return fail("socketpair");
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  pthread_t t[THREADS], w;
  for (int i = 0; i < THREADS; i++)
    if (pthread_create(&t[i], NULL, sleeper, &tags[i]) != 0)
      return fail("pthread_create");
  if (pthread_create(&w, NULL, writer, &tags[THREADS]) != 0)
    return fail("pthread_create");
  char b[4];
  if (read(pipefd[0], b, 4) != 4 || memcmp(b, "ping", 4) != 0)
    return fail("pipe read");
  if (write(pair[0], "pong", 4) != 4) return fail("socket write");
  void *r;
  for (int i = 0; i < THREADS; i++)
    if (pthread_join(t[i], &r) != 0 || r != &tags[i]) return fail("join");
  if (pthread_join(w, &r) != 0 || r != &tags[THREADS]) return fail("writer");
  clock_gettime(CLOCK_MONOTONIC, &t1);
  double ms = (t1.tv_sec - t0.tv_sec) * 1e3 + (t1.tv_nsec - t0.tv_nsec) / 1e6;
  /* The sleeps overlap (fibers or threads alike): well under 8 x 50 ms. */
  if (ms > 300) return fail("sleeps did not overlap");
  /* stdio on a pipe whose writer is slow. */
  int lp[2];
  if (pipe(lp) != 0) return fail("pipe");
  pid_t pid = fork();
  if (pid < 0) return fail("fork");
  if (pid == 0) {
    close(lp[0]);
    for (int i = 0; i < 3; i++) {
      usleep(30000);
      if (dprintf(lp[1], "line %d\n", i) < 0) _exit(1);
    }
    _exit(0);
  }
  close(lp[1]);
  FILE *in = fdopen(lp[0], "r");
  if (!in) return fail("fdopen");
  char line[64];
  int lines = 0;
  while (fgets(line, sizeof line, in)) lines++;
  if (ferror(in)) return fail("fgets");
  fclose(in);
  int st;
  if (waitpid(pid, &st, 0) != pid || !WIFEXITED(st) || WEXITSTATUS(st) != 0)
    return fail("child");
  if (lines != 3) return fail("stdio lines");

  /* A pipe on fd 77 of an exec'ed program, written late. */
  int pin[2], pout[2];
  if (pipe(pin) != 0 || pipe(pout) != 0) return fail("pipe");
  pid = fork();
  if (pid < 0) return fail("fork");
  if (pid == 0) {
    dup2(pout[1], 1);
    close(pout[0]);
    close(pout[1]);
    close(pin[1]);
    /* 77: a number no fd of the parent had (its record is stale). */
    if (pin[0] != 77) {
      dup2(pin[0], 77);
      close(pin[0]);
    }
    execl("/proc/self/exe", "fd_hygiene", "--cat-fd", "77", (char *)NULL);
    _exit(127);
  }
  close(pin[0]);
  close(pout[1]);
  usleep(50000); /* cat reads an empty pipe first */
  if (write(pin[1], "abc\n", 4) != 4) return fail("write");
  close(pin[1]);
  char got[16];
  size_t have = 0;
  ssize_t r2;
  while (have < sizeof got - 1 &&
         (r2 = read(pout[0], got + have, sizeof got - 1 - have)) > 0)
    have += (size_t)r2;
  close(pout[0]);
  if (waitpid(pid, &st, 0) != pid || !WIFEXITED(st) || WEXITSTATUS(st) != 0)
    return fail("cat-fd child");
  if (have != 4 || memcmp(got, "abc\n", 4) != 0) return fail("cat's output");
  /* The list forms of exec, which the hook rebuilds as arrays. */
  for (int how = 0; how < 2; how++) {
    int o[2];
    if (pipe(o) != 0) return fail("pipe");
    pid = fork();
    if (pid < 0) return fail("fork");
    if (pid == 0) {
      dup2(o[1], 1);
      close(o[0]);
      close(o[1]);
      char *env[] = {"IOF_X=from-execle", NULL};
      if (how == 0)
        execle("/bin/sh", "sh", "-c", "echo $IOF_X", (char *)NULL, env);
      else
        execlp("sh", "sh", "-c", "echo from-execlp", (char *)NULL);
      _exit(127);
    }
    close(o[1]);
    char out[32];
    size_t got_n = 0;
    ssize_t k;
    while (got_n < sizeof out - 1 &&
           (k = read(o[0], out + got_n, sizeof out - 1 - got_n)) > 0)
      got_n += (size_t)k;
    out[got_n] = '\0';
    close(o[0]);
    if (waitpid(pid, &st, 0) != pid) return fail("waitpid");
    if (strcmp(out, how == 0 ? "from-execle\n" : "from-execlp\n") != 0)
      return fail("exec list forms");
  }
  printf("fd hygiene ok (%d dup2 targets refused)\n", refused);
  return 0;
}
