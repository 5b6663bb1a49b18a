/* A thread polling many sockets (more than get a watcher each) while
 * another feeds one of them, round after round: under iofiber-run the
 * poller keeps one epoll set between its waits. Between rounds the
 * program closes every epoll fd it can see with close_range (as a daemon's
 * closefrom would): the runtime's own are refused, the poller's kept set
 * is not, and the next round must not wait on a closed number (it spun
 * there, starving the feeder on the same OS thread). Each round must end
 * by the write, well before poll's timeout. Then the same with select.
 * Run plain and under
 * iofiber-run. Prints "all steps right" when every step is. */
#include <dirent.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/select.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define STEPS_NAME "poll_many"
#include "steps.h"

#define N 40
#define ROUNDS 6

static int sv[N][2];
static int go[2];
static volatile int feed;

static void *feeder(void *arg) {
  (void)arg;
  char b;
  while (read(go[0], &b, 1) == 1) {
    usleep(20000); /* the poller waits by then */
    CHECK(write(sv[feed][1], "f", 1) == 1, "feed");
  }
  return NULL;
}

static void close_epoll_fds(void) {
  DIR *d = opendir("/proc/self/fd");
  CHECK(d != NULL, "opendir");
  if (!d) return;
  int fds[64], n = 0;
  struct dirent *e;
  while ((e = readdir(d)) != NULL && n < 64) {
    char path[300], target[64];
    snprintf(path, sizeof path, "/proc/self/fd/%s", e->d_name);
    ssize_t l = readlink(path, target, sizeof target - 1);
    if (l <= 0) continue;
    target[l] = '\0';
    if (strcmp(target, "anon_inode:[eventpoll]") == 0)
      fds[n++] = atoi(e->d_name);
  }
  closedir(d);
  for (int i = 0; i < n; i++)
    (void)close_range((unsigned)fds[i], (unsigned)fds[i], 0);
}

int main(void) {
  for (int i = 0; i < N; i++)
    CHECK(socketpair(AF_UNIX, SOCK_STREAM, 0, sv[i]) == 0, "socketpair");
  CHECK(pipe(go) == 0, "pipe");
  pthread_t t;
  CHECK(pthread_create(&t, NULL, feeder, NULL) == 0, "pthread_create");
  struct pollfd p[N];
  for (int i = 0; i < N; i++) p[i] = (struct pollfd){sv[i][0], POLLIN, 0};
  for (int r = 0; r < ROUNDS; r++) {
    if (r == 3) close_epoll_fds();
    feed = (r * 7 + 3) % N;
    CHECK(write(go[1], "g", 1) == 1, "go");
    struct timespec a, b;
    clock_gettime(CLOCK_MONOTONIC, &a);
    int k = poll(p, N, 10000);
    clock_gettime(CLOCK_MONOTONIC, &b);
    CHECK(k == 1 && p[feed].revents == POLLIN, "poll reports the fed one");
    CHECK(b.tv_sec - a.tv_sec < 5, "woken by the write, not the timeout");
    char c;
    CHECK(read(sv[feed][0], &c, 1) == 1, "read");
  }
  /* The same through select (its sets rebuilt from copies each round). */
  int maxfd = 0;
  for (int i = 0; i < N; i++)
    if (sv[i][0] > maxfd) maxfd = sv[i][0];
  for (int r = 0; r < ROUNDS; r++) {
    feed = (r * 11 + 5) % N;
    CHECK(write(go[1], "g", 1) == 1, "go");
    fd_set rd;
    FD_ZERO(&rd);
    for (int i = 0; i < N; i++) FD_SET(sv[i][0], &rd);
    struct timeval tv = {10, 0};
    struct timespec a, b;
    clock_gettime(CLOCK_MONOTONIC, &a);
    int k = select(maxfd + 1, &rd, NULL, NULL, &tv);
    clock_gettime(CLOCK_MONOTONIC, &b);
    CHECK(k == 1 && FD_ISSET(sv[feed][0], &rd), "select reports the fed one");
    CHECK(b.tv_sec - a.tv_sec < 5, "select woken by the write");
    char c;
    CHECK(read(sv[feed][0], &c, 1) == 1, "read");
  }
  close(go[1]);
  CHECK(pthread_join(t, NULL) == 0, "pthread_join");
  if (!failed) printf("all steps right\n");
  return failed;
}
