/* iof-bench-libev: the raw libev baseline. A hand-written callback server,
 * what a libev-based runtime cannot beat: one ev_io per connection; on
 * readable, read once and write the answer back; only a partial write
 * switches the watcher to EV_WRITE until the rest is out. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <ev.h>

#include "peer.h"

typedef struct conn {
  ev_io w;
  unsigned hstate; /* HTTP framing state */
  const char *out; /* unsent part of the answer */
  size_t left;
  char buf[]; /* opts.buf bytes */
} conn;

static peer_opts opts;
static char *http_block; /* PEER_HTTP_RESPONSE, 64 times */

static void conn_close(struct ev_loop *loop, conn *c) {
  ev_io_stop(loop, &c->w);
  close(c->w.fd);
  free(c);
}

static void set_events(struct ev_loop *loop, conn *c, int ev) {
  ev_io_stop(loop, &c->w);
  ev_io_set(&c->w, c->w.fd, ev);
  ev_io_start(loop, &c->w);
}

/* Writes c->out; 0 when all is out, 1 when the rest waits for EV_WRITE,
 * -1 on error. */
static int flush(conn *c) {
  while (c->left) {
    ssize_t n = write(c->w.fd, c->out, c->left);
    if (n < 0) {
      if (errno == EINTR) continue;
      return errno == EAGAIN ? 1 : -1;
    }
    c->out += n;
    c->left -= (size_t)n;
  }
  return 0;
}

static void conn_cb(struct ev_loop *loop, ev_io *w, int revents) {
  conn *c = (conn *)w;
  if (revents & EV_WRITE) {
    int r = flush(c);
    if (r < 0) conn_close(loop, c);
    if (r == 0) set_events(loop, c, EV_READ);
    return;
  }
  ssize_t n = read(w->fd, c->buf, opts.buf);
  if (n <= 0) {
    if (n < 0 && (errno == EAGAIN || errno == EINTR)) return;
    conn_close(loop, c);
    return;
  }
  if (opts.http) {
    unsigned k = peer_http_feed(&c->hstate, c->buf, (size_t)n);
    if (k > 64) k = 64; /* the load generator has one request in flight */
    c->out = http_block;
    c->left = k * PEER_HTTP_RESPONSE_LEN;
  } else {
    c->out = c->buf;
    c->left = (size_t)n;
  }
  int r = flush(c);
  if (r < 0) conn_close(loop, c);
  if (r > 0) set_events(loop, c, EV_WRITE);
}

static void accept_cb(struct ev_loop *loop, ev_io *w, int revents) {
  (void)revents;
  for (;;) {
    int fd = accept4(w->fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) return;
    conn *c = malloc(sizeof *c + opts.buf);
    if (!c) {
      close(fd);
      continue;
    }
    peer_nodelay(fd);
    c->hstate = 0;
    c->left = 0;
    ev_io_init(&c->w, conn_cb, fd, EV_READ);
    ev_io_start(loop, &c->w);
  }
}

int main(int argc, char **argv) {
  peer_init(argc, argv, "iof-bench-libev", &opts);
  http_block = malloc(64 * PEER_HTTP_RESPONSE_LEN);
  if (!http_block) return 1;
  for (int i = 0; i < 64; i++)
    memcpy(http_block + i * PEER_HTTP_RESPONSE_LEN, PEER_HTTP_RESPONSE,
           PEER_HTTP_RESPONSE_LEN);
  int port;
  int lfd = peer_listen(&opts, false, &port);
  struct ev_loop *loop = ev_default_loop(EVFLAG_AUTO);
  ev_io acc;
  ev_io_init(&acc, accept_cb, lfd, EV_READ);
  ev_io_start(loop, &acc);
  peer_ready(port);
  ev_run(loop, 0);
  return 0;
}
