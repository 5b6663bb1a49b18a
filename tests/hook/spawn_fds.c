/* Starting a program from a fiber under iofiber-run, with connections
 * open: system, popen and posix_spawn put back in blocking mode the fds
 * the child uses (its standard streams, pipes, the sockets posix_spawn
 * copies onto its stdin or stdout), and only those. A server's sockets
 * above 2, which the child inherits without using them, stay
 * non-blocking: afterwards a connection's thread waiting for its client
 * must not hold up the other connections (it held the OS thread, and
 * every fiber on it, until its client spoke).
 * Exit 0: every step right; it prints what failed. SIGALRM ends a hang. */
#include <errno.h>
#include <pthread.h>
#include <spawn.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

#define STEPS_NAME "spawn_fds"
#include "steps.h"

/* A connection's thread: echoes until EOF. */
static void *echo(void *arg) {
  int fd = (int)(long)arg;
  char b[64];
  ssize_t n;
  while ((n = read(fd, b, sizeof b)) > 0)
    if (write(fd, b, (size_t)n) != n) break;
  return NULL;
}

static bool round_trip(int fd, const char *msg) {
  size_t n = strlen(msg);
  char b[64] = {0};
  if (write(fd, msg, n) != (ssize_t)n) return false;
  size_t got = 0;
  while (got < n) {
    ssize_t r = read(fd, b + got, n - got);
    if (r <= 0) return false;
    got += (size_t)r;
  }
  return memcmp(b, msg, n) == 0;
}

static void idle_connections_keep_running(void) {
  int a[2], b[2];
  if (socketpair(AF_UNIX, SOCK_STREAM, 0, a) ||
      socketpair(AF_UNIX, SOCK_STREAM, 0, b))
    return;
  pthread_t ta, tb;
  pthread_create(&ta, NULL, echo, (void *)(long)a[0]);
  pthread_create(&tb, NULL, echo, (void *)(long)b[0]);
  CHECK(round_trip(a[1], "a0") && round_trip(b[1], "b0"), "before");

  CHECK(system("true") == 0, "system");
  FILE *p = popen("true", "r");
  CHECK(p && pclose(p) == 0, "popen");
  pid_t pid;
  char *argv[] = {"true", NULL};
  CHECK(posix_spawn(&pid, "/bin/true", NULL, NULL, argv, environ) == 0,
        "posix_spawn");
  CHECK(waitpid(pid, NULL, 0) == pid, "waitpid");

  /* a's thread reads again after its reply: it must wait as a fiber. */
  CHECK(round_trip(a[1], "a1"), "a after the children");
  CHECK(round_trip(b[1], "b1"), "b while a's thread waits");
  close(a[1]);
  close(b[1]);
  pthread_join(ta, NULL);
  pthread_join(tb, NULL);
  close(a[0]);
  close(b[0]);
}

static void *late_client(void *arg) {
  int fd = (int)(long)arg;
  usleep(200000); /* cat is reading by now */
  (void)!write(fd, "data", 4);
  shutdown(fd, SHUT_WR);
  return NULL;
}

/* cat with a connection as its stdin (posix_spawn's dup2): it reads a
 * blocking socket, as it would from a plain server. */
static void socket_as_child_stdin(void) {
  int c[2], out[2];
  if (socketpair(AF_UNIX, SOCK_STREAM, 0, c) || pipe(out)) return;
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, c[0], 0);
  posix_spawn_file_actions_adddup2(&fa, out[1], 1);
  posix_spawn_file_actions_addclose(&fa, c[1]);
  posix_spawn_file_actions_addclose(&fa, out[0]);
  char *argv[] = {"cat", NULL};
  pid_t pid;
  int r = posix_spawn(&pid, "/bin/cat", &fa, NULL, argv, environ);
  posix_spawn_file_actions_destroy(&fa);
  CHECK(r == 0, "posix_spawn cat");
  close(c[0]);
  close(out[1]);
  pthread_t t;
  pthread_create(&t, NULL, late_client, (void *)(long)c[1]);
  char buf[64] = {0};
  size_t got = 0;
  ssize_t n;
  while (got < sizeof buf - 1 &&
         (n = read(out[0], buf + got, sizeof buf - 1 - got)) > 0)
    got += (size_t)n;
  pthread_join(t, NULL);
  int st = 0;
  CHECK(r != 0 || waitpid(pid, &st, 0) == pid, "cat reaped");
  CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0, "cat succeeded");
  CHECK(strcmp(buf, "data") == 0, "cat read the connection");
  close(c[1]);
  close(out[0]);
}

int main(void) {
  alarm(20);
  idle_connections_keep_running();
  socket_as_child_stdin();
  if (!failed) printf("spawn_fds: all steps right\n");
  return failed;
}
