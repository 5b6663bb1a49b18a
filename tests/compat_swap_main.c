/* A program on the header swap with the library's main (two io threads,
 * IOF_THREADS=2). Its main starts as daemons do, closing every fd above 2
 * and dup2'ing onto numbers it picks: the runtime's own descriptors
 * (libev's epoll and wake-up fds, the reserved pair) must survive that, or
 * libev fails its next epoll_ctl. Then threads wait on a pipe and sleep,
 * and main returns while the other io thread exists: under ASan the leak
 * check runs at that exit, and nothing the runtime allocated may be
 * reachable only from the OS thread's stack, which it does not scan once
 * the thread runs on a fiber's stack. */
#include <iofiber/compat.h>

static int p[2];

static void *writer(void *arg) {
  usleep(20 * 1000);
  if (write(p[1], "x", 1) != 1) return NULL;
  return arg;
}

int main(void) {
  int closed = 0, refused = 0;
  for (int fd = 3; fd < 1024; fd++) {
    if (close(fd) == 0)
      closed++;
    else if (errno == EBADF && fcntl(fd, F_GETFD) >= 0)
      refused++; /* open, yet not ours to close: the runtime's */
  }
  /* dup2 onto every low number: the runtime's stay refused. */
  for (int fd = 3; fd < 64; fd++) (void)dup2(2, fd);
  for (int fd = 3; fd < 64; fd++) (void)close(fd);
  printf("compat_swap_main: closed %d fds, %d refused\n", closed, refused);
  if (refused < 2) return 4; /* at least one loop's epoll and wake-up fds */
  usleep(10 * 1000);
  if (pipe(p) != 0) return 5;
  pthread_t t;
  void *r = NULL;
  if (pthread_create(&t, NULL, writer, (void *)7) != 0) return 2;
  char c = 0;
  if (read(p[0], &c, 1) != 1 || c != 'x') return 6;
  if (pthread_join(t, &r) != 0 || r != (void *)7) return 3;
  puts("compat_swap_main: returned from main");
  return 0;
}
