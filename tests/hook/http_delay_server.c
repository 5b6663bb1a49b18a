#include "http_delay_server.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <spawn.h>
#include <stdio.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

static int delay;

static void *serve_one(void *arg) {
  int c = (int)(intptr_t)arg;
  char buf[2048];
  size_t n = 0;
  while (n < sizeof buf - 1) {
    ssize_t r = read(c, buf + n, sizeof buf - 1 - n);
    if (r <= 0) break;
    n += (size_t)r;
    buf[n] = '\0';
    if (strstr(buf, "\r\n\r\n")) break;
  }
  usleep((useconds_t)delay * 1000);
  static const char resp[] = "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n"
                             "Content-Type: text/plain\r\n"
                             "Connection: close\r\n\r\nhello";
  size_t off = 0;
  while (off < sizeof resp - 1) {
    ssize_t w = write(c, resp + off, sizeof resp - 1 - off);
    if (w <= 0) break;
    off += (size_t)w;
  }
  close(c);
  return NULL;
}

static void *acceptor(void *arg) {
  int l = (int)(intptr_t)arg;
  for (;;) {
    int c = accept(l, NULL, NULL);
    if (c < 0) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      usleep(1000);
      continue;
    }
    pthread_t t;
    pthread_attr_t a;
    pthread_attr_init(&a);
    pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
    pthread_attr_setstacksize(&a, 64 * 1024);
    if (pthread_create(&t, &a, serve_one, (void *)(intptr_t)c) != 0) close(c);
    pthread_attr_destroy(&a);
  }
  return NULL;
}

int http_delay_server_start(int delay_ms) {
  delay = delay_ms;
  int l = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (l < 0) return -errno;
  struct sockaddr_in a = {.sin_family = AF_INET};
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  if (bind(l, (struct sockaddr *)&a, sizeof a) || listen(l, 512) ||
      getsockname(l, (struct sockaddr *)&a, &len)) {
    int e = errno;
    close(l);
    return -e;
  }
  pthread_t t;
  if (pthread_create(&t, NULL, acceptor, (void *)(intptr_t)l) != 0) {
    close(l);
    return -EAGAIN;
  }
  pthread_detach(t);
  return ntohs(a.sin_port);
}

extern char **environ;

int http_delay_server_spawn(int *keep) {
  int in[2], out[2];
  if (pipe(in)) return -errno;
  if (pipe(out)) {
    int e = errno;
    close(in[0]);
    close(in[1]);
    return -e;
  }
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, in[0], 0);
  posix_spawn_file_actions_adddup2(&fa, out[1], 1);
  posix_spawn_file_actions_addclose(&fa, in[1]);
  posix_spawn_file_actions_addclose(&fa, out[0]);
  char *argv[] = {"http_delay_server", "--server", NULL};
  pid_t pid;
  int r = posix_spawn(&pid, "/proc/self/exe", &fa, NULL, argv, environ);
  posix_spawn_file_actions_destroy(&fa);
  close(in[0]);
  close(out[1]);
  if (r) {
    close(in[1]);
    close(out[0]);
    return -r;
  }
  char buf[16] = {0};
  size_t n = 0;
  while (n < sizeof buf - 1) {
    ssize_t k = read(out[0], buf + n, 1);
    if (k <= 0 || buf[n] == '\n') break;
    n++;
  }
  close(out[0]);
  *keep = in[1];
  return atoi(buf) > 0 ? atoi(buf) : -EIO;
}

int http_delay_server_child(int delay_ms) {
  /* stdin is a pipe a fiber made under iofiber-run: the hook put it back
   * in blocking mode before posix_spawn, or this read would fail at once
   * with EAGAIN and the server would quit. */
  int p = http_delay_server_start(delay_ms);
  if (p < 0) return 1;
  printf("%d\n", p);
  fflush(stdout);
  char c;
  while (read(0, &c, 1) > 0) {
  }
  _exit(0);
}
