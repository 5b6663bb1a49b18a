/* iof-bench-libuv: a libuv server written the usual way: uv_read_start with
 * a per-connection buffer, the answer sent with uv_try_write and only what
 * the socket did not take queued with uv_write (reading paused meanwhile).
 */
#include <stdlib.h>
#include <string.h>

#include <uv.h>

#include "peer.h"

typedef struct conn {
  uv_tcp_t tcp;
  uv_write_t req;
  unsigned hstate;
  char buf[]; /* opts.buf bytes */
} conn;

static peer_opts opts;
static uv_loop_t *loop;
static char http_block[64 * PEER_HTTP_RESPONSE_LEN];

static void on_close(uv_handle_t *h) {
  free(h);
}

static void on_alloc(uv_handle_t *h, size_t hint, uv_buf_t *b) {
  (void)hint;
  conn *c = (conn *)h;
  *b = uv_buf_init(c->buf, (unsigned)opts.buf);
}

static void on_read(uv_stream_t *s, ssize_t n, const uv_buf_t *b);

static void on_written(uv_write_t *req, int status) {
  conn *c = req->data;
  if (status < 0 ||
      uv_read_start((uv_stream_t *)&c->tcp, on_alloc, on_read) < 0)
    uv_close((uv_handle_t *)&c->tcp, on_close);
}

static void on_read(uv_stream_t *s, ssize_t n, const uv_buf_t *b) {
  conn *c = (conn *)s;
  if (n < 0) {
    uv_close((uv_handle_t *)s, on_close);
    return;
  }
  if (n == 0) return;
  uv_buf_t out;
  if (opts.http) {
    unsigned k = peer_http_feed(&c->hstate, b->base, (size_t)n);
    if (k > 64) k = 64;
    if (!k) return;
    out = uv_buf_init(http_block, (unsigned)(k * PEER_HTTP_RESPONSE_LEN));
  } else {
    out = uv_buf_init(b->base, (unsigned)n);
  }
  int w = uv_try_write(s, &out, 1);
  if (w == (int)out.len) return;
  if (w < 0 && w != UV_EAGAIN) {
    uv_close((uv_handle_t *)s, on_close);
    return;
  }
  if (w > 0) {
    out.base += w;
    out.len -= (unsigned)w;
  }
  /* The rest is still in c->buf (or the static block): stop reading
   * until it is out so the buffer is not overwritten. */
  uv_read_stop(s);
  c->req.data = c;
  if (uv_write(&c->req, s, &out, 1, on_written) < 0)
    uv_close((uv_handle_t *)s, on_close);
}

static void on_connection(uv_stream_t *server, int status) {
  if (status < 0) return;
  conn *c = malloc(sizeof *c + opts.buf);
  if (!c) return;
  c->hstate = 0;
  uv_tcp_init(loop, &c->tcp);
  if (uv_accept(server, (uv_stream_t *)&c->tcp) < 0) {
    uv_close((uv_handle_t *)&c->tcp, on_close);
    return;
  }
  uv_tcp_nodelay(&c->tcp, 1);
  uv_read_start((uv_stream_t *)&c->tcp, on_alloc, on_read);
}

int main(int argc, char **argv) {
  peer_init(argc, argv, "iof-bench-libuv", &opts);
  for (int i = 0; i < 64; i++)
    memcpy(http_block + i * PEER_HTTP_RESPONSE_LEN, PEER_HTTP_RESPONSE,
           PEER_HTTP_RESPONSE_LEN);
  loop = uv_default_loop();
  int port;
  int lfd = peer_listen(&opts, false, &port);
  uv_tcp_t server;
  uv_tcp_init(loop, &server);
  if (uv_tcp_open(&server, lfd) < 0 ||
      uv_listen((uv_stream_t *)&server, 4096, on_connection) < 0)
    return 1;
  peer_ready(port);
  return uv_run(loop, UV_RUN_DEFAULT);
}
