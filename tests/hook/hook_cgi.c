/* The CGI pattern of forking servers (tinyhttpd...), run under
 * iofiber-run: a thread per connection that forks a child, which dup2s two
 * pipes onto its stdin/stdout (dup2, or close and dup or F_DUPFD) and
 * execs /bin/sh; the parent writes the
 * request to the child and relays its answer. Clients are threads of the
 * same process, so every thread here is a fiber on one OS thread.
 *
 * What must hold: the exec'ed shell reads a blocking stdin (the pipe was
 * made by a fiber, non-blocking for the runtime), and the parent's own fds
 * shared with the children (the listening socket, inherited without
 * close-on-exec) stay non-blocking for its fibers: a blocking accept would
 * stop every fiber of the process. Exit 0: every reply right. */
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#define CLIENTS 20
#define ROUNDS 3

static int listener;
static int port;
static atomic_int ok_count;
static atomic_int forks;

static ssize_t read_all(int fd, char *buf, size_t cap) {
  size_t n = 0;
  ssize_t r;
  while (n < cap - 1 && (r = read(fd, buf + n, cap - 1 - n)) > 0)
    n += (size_t)r;
  buf[n] = '\0';
  return (ssize_t)n;
}

static void *serve(void *arg) {
  int c = (int)(intptr_t)arg;
  char req[64];
  ssize_t n = read(c, req, sizeof req - 1);
  if (n <= 0) {
    close(c);
    return NULL;
  }
  int in[2], out[2];
  if (pipe(in) || pipe(out)) {
    close(c);
    return NULL;
  }
  /* The child moves its pipes onto stdin/stdout in one of the three ways
   * programs do: dup2, close + dup (GNU tar), close + F_DUPFD. */
  int how = atomic_fetch_add(&forks, 1) % 3;
  pid_t pid = fork();
  if (pid == 0) {
    if (how == 0) {
      dup2(in[0], 0);
      dup2(out[1], 1);
    } else {
      close(0);
      if ((how == 1 ? dup(in[0]) : fcntl(in[0], F_DUPFD, 0)) != 0) _exit(126);
      close(1);
      if ((how == 1 ? dup(out[1]) : fcntl(out[1], F_DUPFD, 1)) != 1) _exit(126);
    }
    close(in[0]), close(in[1]), close(out[0]), close(out[1]), close(c);
    execl("/bin/sh", "sh", "-c", "read x; echo \"got $x\"", (char *)NULL);
    _exit(127);
  }
  close(in[0]);
  close(out[1]);
  /* The shell may start reading before this write: its stdin must block. */
  usleep(20000);
  (void)!write(in[1], req, (size_t)n);
  close(in[1]);
  char ans[64];
  ssize_t m = read_all(out[0], ans, sizeof ans);
  close(out[0]);
  waitpid(pid, NULL, 0);
  if (m > 0) (void)!write(c, ans, (size_t)m);
  close(c);
  return NULL;
}

static void *acceptor(void *arg) {
  (void)arg;
  for (int i = 0; i < CLIENTS * ROUNDS; i++) {
    int c = accept(listener, NULL, NULL);
    if (c < 0) return NULL;
    pthread_t t;
    if (pthread_create(&t, NULL, serve, (void *)(intptr_t)c) == 0)
      pthread_detach(t);
  }
  return NULL;
}

static void *client(void *arg) {
  int i = (int)(intptr_t)arg;
  int s = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(port)};
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(s, (struct sockaddr *)&a, sizeof a) != 0) {
    close(s);
    return NULL;
  }
  char msg[32], want[48], got[64];
  int len = snprintf(msg, sizeof msg, "req%d\n", i);
  snprintf(want, sizeof want, "got req%d\n", i);
  (void)!write(s, msg, (size_t)len);
  read_all(s, got, sizeof got);
  close(s);
  if (strcmp(got, want) == 0)
    atomic_fetch_add(&ok_count, 1);
  else
    fprintf(stderr, "hook_cgi: client %d got \"%s\"\n", i, got);
  return NULL;
}

int main(void) {
  listener = socket(AF_INET, SOCK_STREAM, 0); /* inherited by children */
  struct sockaddr_in a = {.sin_family = AF_INET};
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t al = sizeof a;
  if (listener < 0 || bind(listener, (struct sockaddr *)&a, sizeof a) ||
      listen(listener, 64) || getsockname(listener, (struct sockaddr *)&a, &al))
    return 1;
  port = ntohs(a.sin_port);
  pthread_t acc;
  if (pthread_create(&acc, NULL, acceptor, NULL)) return 1;
  for (int r = 0; r < ROUNDS; r++) {
    pthread_t t[CLIENTS];
    for (int i = 0; i < CLIENTS; i++)
      if (pthread_create(&t[i], NULL, client,
                         (void *)(intptr_t)(r * CLIENTS + i)))
        return 1;
    for (int i = 0; i < CLIENTS; i++) pthread_join(t[i], NULL);
  }
  pthread_join(acc, NULL);
  int ok = atomic_load(&ok_count);
  printf("hook_cgi: %d/%d CGI replies right\n", ok, CLIENTS * ROUNDS);
  return ok == CLIENTS * ROUNDS ? 0 : 1;
}
