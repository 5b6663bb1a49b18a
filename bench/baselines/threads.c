/* iof-bench-threads: thread per connection, blocking sockets, the program
 * a fiber runtime is meant to replace. Each connection gets a detached
 * thread with a small stack (--stack, 64 KiB by default) and its buffer in
 * the thread's frame (peer.h). */
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "peer.h"

static peer_opts opts;
static char http_block[64 * PEER_HTTP_RESPONSE_LEN];

static int write_all(int fd, const char *p, size_t n) {
  while (n) {
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

static void serve(int fd, char *buf) {
  unsigned hstate = 0;
  for (;;) {
    ssize_t n = read(fd, buf, opts.buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    int r;
    if (opts.http) {
      unsigned k = peer_http_feed(&hstate, buf, (size_t)n);
      if (k > 64) k = 64;
      r = write_all(fd, http_block, k * PEER_HTTP_RESPONSE_LEN);
    } else {
      r = write_all(fd, buf, (size_t)n);
    }
    if (r < 0) break;
  }
}

static void *conn_main(void *arg) {
  int fd = (int)(intptr_t)arg;
  if (peer_buf_on_stack(&opts)) {
    char buf[opts.buf];
    serve(fd, buf);
  } else {
    char *buf = malloc(opts.buf);
    if (buf) serve(fd, buf);
    free(buf);
  }
  close(fd);
  return NULL;
}

int main(int argc, char **argv) {
  peer_init(argc, argv, "iof-bench-threads", &opts);
  for (int i = 0; i < 64; i++)
    memcpy(http_block + i * PEER_HTTP_RESPONSE_LEN, PEER_HTTP_RESPONSE,
           PEER_HTTP_RESPONSE_LEN);
  int port;
  int lfd = peer_listen(&opts, true, &port);
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
  pthread_attr_setstacksize(&attr, opts.stack);
  peer_ready(port);
  for (;;) {
    int fd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EMFILE || errno == ENFILE) usleep(1000);
      continue;
    }
    peer_nodelay(fd);
    pthread_t t;
    if (pthread_create(&t, &attr, conn_main, (void *)(intptr_t)fd) != 0)
      close(fd);
  }
}
