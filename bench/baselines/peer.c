/* Shared peer-server plumbing: see peer.h. */
#include "peer.h"

#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

static void on_term(int sig) {
  (void)sig;
  _exit(0); /* callgrind writes its totals at exit_group */
}

static void usage(const char *name) {
  fprintf(stderr,
          "usage: %s [--http] [--buf BYTES] [--heap-buf] [--port N] "
          "[--stack BYTES]\n",
          name);
  exit(2);
}

static long num(const char *s, const char *name) {
  char *end;
  long v = strtol(s, &end, 10);
  if (!*s || *end || v < 0) usage(name);
  return v;
}

void peer_init(int argc, char **argv, const char *name, peer_opts *o) {
  memset(o, 0, sizeof *o);
  o->buf = 4096;
  o->stack = 64 * 1024;
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--http") == 0)
      o->http = true;
    else if (strcmp(argv[i], "--buf") == 0 && i + 1 < argc)
      o->buf = (size_t)num(argv[++i], name);
    else if (strcmp(argv[i], "--heap-buf") == 0)
      o->heap_buf = true;
    else if (strcmp(argv[i], "--port") == 0 && i + 1 < argc)
      o->port = (int)num(argv[++i], name);
    else if (strcmp(argv[i], "--stack") == 0 && i + 1 < argc)
      o->stack = (size_t)num(argv[++i], name);
    else
      usage(name);
  }
  if (o->buf < 64) o->buf = 64;
  struct rlimit rl;
  if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
    rl.rlim_cur = rl.rlim_max;
    setrlimit(RLIMIT_NOFILE, &rl);
  }
  signal(SIGTERM, on_term);
  signal(SIGPIPE, SIG_IGN);
}

int peer_listen(const peer_opts *o, bool blocking, int *port) {
  int fd = socket(
      AF_INET, SOCK_STREAM | SOCK_CLOEXEC | (blocking ? 0 : SOCK_NONBLOCK), 0);
  if (fd < 0) {
    perror("socket");
    exit(1);
  }
  int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  struct sockaddr_in sa = {.sin_family = AF_INET,
                           .sin_port = htons((uint16_t)o->port),
                           .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  socklen_t len = sizeof sa;
  if (bind(fd, (struct sockaddr *)&sa, sizeof sa) < 0 || listen(fd, 4096) < 0 ||
      getsockname(fd, (struct sockaddr *)&sa, &len) < 0) {
    perror("listen");
    exit(1);
  }
  *port = ntohs(sa.sin_port);
  return fd;
}

void peer_ready(int port) {
  printf("port %d\n", port);
  fflush(stdout);
}

void peer_nodelay(int fd) {
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

unsigned peer_http_feed(unsigned *state, const char *p, size_t n) {
  static const char end[4] = {'\r', '\n', '\r', '\n'};
  unsigned s = *state, k = 0;
  for (size_t i = 0; i < n; i++) {
    if (p[i] == end[s]) {
      if (++s == 4) {
        k++;
        s = 0;
      }
    } else {
      s = p[i] == '\r';
    }
  }
  *state = s;
  return k;
}

size_t peer_http_responses(char *out, size_t cap, unsigned k, unsigned *done) {
  size_t len = 0;
  unsigned i = 0;
  for (; i < k && len + PEER_HTTP_RESPONSE_LEN <= cap; i++) {
    memcpy(out + len, PEER_HTTP_RESPONSE, PEER_HTTP_RESPONSE_LEN);
    len += PEER_HTTP_RESPONSE_LEN;
  }
  *done = i;
  return len;
}
