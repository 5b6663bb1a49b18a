#include "hook_support.h"

#include <arpa/inet.h>
#include <errno.h>
#include <ftw.h>
#include <stdio.h>
#include <sys/wait.h>
#include <time.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

int hook_run_fibers(int n, iof_fn fn, void *arg) {
  iof_io_context *io = iof_io_context_create();
  if (!io) return -12;
  int r = 0;
  for (int i = 0; i < n && r == 0; i++) {
    iof_launch_opts o = {.stack_size = 256 * 1024};
    r = iof_run_async(iof_io_context_executor(io), &o, fn, arg);
  }
  int rr = iof_io_context_run(io);
  iof_io_context_destroy(io);
  return r < 0 ? r : rr < 0 ? rr : 0;
}

static void (*client_fn)(int);
static atomic_int client_next;

static int client_fiber(void *arg) {
  (void)arg;
  client_fn(atomic_fetch_add(&client_next, 1));
  return 0;
}

static void *client_thread(void *arg) {
  client_fn((int)(intptr_t)arg);
  return NULL;
}

int hook_run_clients(int n, bool under_run, void (*client)(int index)) {
  if (n < 0 || n > 1024 || !client) return -EINVAL;
  client_fn = client;
  atomic_store(&client_next, 0);
  if (!under_run) return hook_run_fibers(n, client_fiber, NULL);
  pthread_t t[1024];
  for (int i = 0; i < n; i++) {
    int r = pthread_create(&t[i], NULL, client_thread, (void *)(intptr_t)i);
    if (r) {
      for (int j = 0; j < i; j++) pthread_join(t[j], NULL);
      return -r;
    }
  }
  for (int i = 0; i < n; i++) pthread_join(t[i], NULL);
  return 0;
}

unsigned long hook_count(const char *call, int which) {
  unsigned long c[3] = {0, 0, 0};
  if (iof_hook_counts(call, c) != 0) return ~0ul;
  return c[which];
}

int hook_free_port(void) {
  int s = socket(AF_INET, SOCK_STREAM, 0);
  if (s < 0) return -errno;
  struct sockaddr_in a = {.sin_family = AF_INET};
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t l = sizeof a;
  int p = -EIO;
  if (bind(s, (struct sockaddr *)&a, sizeof a) == 0 &&
      getsockname(s, (struct sockaddr *)&a, &l) == 0)
    p = ntohs(a.sin_port);
  close(s);
  return p;
}

bool hook_wait_for(pid_t pid, int ms, int *st) {
  struct timespec t0, now;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  for (;;) {
    pid_t r = waitpid(pid, st, WNOHANG);
    if (r == pid || (r < 0 && errno != EINTR)) return true;
    clock_gettime(CLOCK_MONOTONIC, &now);
    if ((now.tv_sec - t0.tv_sec) * 1000 +
            (now.tv_nsec - t0.tv_nsec) / 1000000 >=
        ms)
      return false;
    usleep(20000);
  }
}

static int remove_entry(const char *path, const struct stat *sb, int flag,
                        struct FTW *ftw) {
  (void)sb, (void)flag, (void)ftw;
  remove(path);
  return 0;
}

void hook_remove_tree(char *dir) {
  if (dir[0]) nftw(dir, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
  dir[0] = '\0';
}
