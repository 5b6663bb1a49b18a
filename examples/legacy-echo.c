/* legacy-echo: a classic thread-per-connection TCP echo server written
 * against plain POSIX and pthreads only: blocking accept, read and write,
 * one detached thread per client. Nothing in it knows about iofiber.
 *
 * The build makes two programs from this one unedited file:
 *   legacy-echo-threads  compiled as is: one OS thread per connection
 *   legacy-echo-fibers   compiled with -include iofiber/compat.h and linked
 *                        with libiofiber-compat: one fiber per connection,
 *                        all on one OS thread (IOF_THREADS=N for N)
 *
 * Usage: legacy-echo [-b ADDR] [-s STACK_KIB] [PORT]   (PORT 0: any free
 * port; the chosen port is printed as "listening on PORT"). */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

static pthread_mutex_t stats_lock = PTHREAD_MUTEX_INITIALIZER;
static long clients_now, clients_total;

static void usage(FILE *to, const char *prog) {
  fprintf(to,
          "usage: %s [-b ADDR] [-s STACK_KIB] [PORT]\n"
          "  thread-per-connection TCP echo server (blocking POSIX calls)\n"
          "  -b ADDR       address to listen on (default 127.0.0.1)\n"
          "  -s STACK_KIB  stack size of each connection thread (default: "
          "the system's)\n"
          "  PORT          TCP port (default 7007; 0 picks a free one)\n"
          "  prints \"listening on PORT\" once ready\n",
          prog);
}

static void count(long delta) {
  pthread_mutex_lock(&stats_lock);
  clients_now += delta;
  if (delta > 0) clients_total++;
  pthread_mutex_unlock(&stats_lock);
}

static int write_all(int fd, const char *p, size_t n) {
  while (n > 0) {
    ssize_t w = write(fd, p, n);
    if (w < 0) {
      if (errno == EINTR) continue;
      return -1;
    }
    p += w;
    n -= (size_t)w;
  }
  return 0;
}

static void *serve(void *arg) {
  int fd = (int)(intptr_t)arg;
  char buf[4096];
  count(1);
  for (;;) {
    ssize_t n = read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    if (write_all(fd, buf, (size_t)n) < 0) break;
  }
  close(fd);
  count(-1);
  return NULL;
}

/* Many clients need many descriptors: take the hard limit. */
static void raise_fd_limit(void) {
  struct rlimit rl;
  if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
    rl.rlim_cur = rl.rlim_max;
    setrlimit(RLIMIT_NOFILE, &rl);
  }
}

int main(int argc, char **argv) {
  const char *addr = "127.0.0.1";
  long port = 7007, stack_kib = 0;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
      usage(stdout, argv[0]);
      return 0;
    } else if (!strcmp(argv[i], "-b") && i + 1 < argc) {
      addr = argv[++i];
    } else if (!strcmp(argv[i], "-s") && i + 1 < argc) {
      stack_kib = strtol(argv[++i], NULL, 10);
    } else {
      char *end;
      port = strtol(argv[i], &end, 10);
      if (*end || port < 0 || port > 65535) {
        usage(stderr, argv[0]);
        return 2;
      }
    }
  }
  raise_fd_limit();
  signal(SIGPIPE, SIG_IGN);

  int l = socket(AF_INET, SOCK_STREAM, 0);
  if (l < 0) {
    perror("socket");
    return 1;
  }
  int one = 1;
  setsockopt(l, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  struct sockaddr_in sa;
  memset(&sa, 0, sizeof sa);
  sa.sin_family = AF_INET;
  sa.sin_port = htons((uint16_t)port);
  if (inet_pton(AF_INET, addr, &sa.sin_addr) != 1) {
    fprintf(stderr, "bad address %s\n", addr);
    return 2;
  }
  if (bind(l, (struct sockaddr *)&sa, sizeof sa) < 0 || listen(l, 4096) < 0) {
    perror("bind/listen");
    return 1;
  }
  socklen_t len = sizeof sa;
  getsockname(l, (struct sockaddr *)&sa, &len);
  printf("listening on %d\n", ntohs(sa.sin_port));
  fflush(stdout);

  pthread_attr_t attr;
  pthread_attr_init(&attr);
  if (stack_kib > 0) pthread_attr_setstacksize(&attr, (size_t)stack_kib * 1024);
  for (;;) {
    int c = accept(l, NULL, NULL);
    if (c < 0) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      if (errno == EMFILE || errno == ENFILE) {
        usleep(10000); /* out of descriptors: let some clients go */
        continue;
      }
      perror("accept");
      break;
    }
    pthread_t t;
    if (pthread_create(&t, &attr, serve, (void *)(intptr_t)c) != 0) {
      close(c);
      continue;
    }
    pthread_detach(t);
  }
  close(l);
  return 1;
}
