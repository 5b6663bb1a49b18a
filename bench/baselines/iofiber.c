/* iof-bench-iofiber: the iofiber server under test, written as a user
 * would: one io_context, an acceptor fiber, one fiber per connection
 * looping iof_read_some / iof_write on a --buf sized buffer in its frame
 * (peer.h). Stacks come from the default pool (64 KiB, guard page). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <iofiber/iofiber.h>

#include "peer.h"

static peer_opts opts;
static iof_io_context *io;
static char http_block[64 * PEER_HTTP_RESPONSE_LEN];

static void serve(iof_socket *sock, char *buf) {
  unsigned hstate = 0;
  for (;;) {
    ssize_t n = iof_read_some(sock, buf, opts.buf);
    if (n <= 0) break;
    int r;
    if (opts.http) {
      unsigned k = peer_http_feed(&hstate, buf, (size_t)n);
      if (k > 64) k = 64;
      r = k ? (int)iof_write(sock, http_block, k * PEER_HTTP_RESPONSE_LEN) : 0;
    } else {
      r = (int)iof_write(sock, buf, (size_t)n);
    }
    if (r < 0) break;
  }
}

static int connection(void *arg) {
  iof_socket *sock = arg;
  if (peer_buf_on_stack(&opts)) {
    char buf[opts.buf];
    serve(sock, buf);
  } else {
    char *buf = malloc(opts.buf);
    if (buf) serve(sock, buf);
    free(buf);
  }
  iof_socket_free(sock);
  return 0;
}

static int acceptor(void *arg) {
  iof_socket *listener = arg;
  for (;;) {
    iof_socket *s;
    int r = iof_accept(listener, &s, NULL, NULL);
    if (r == -ECANCELED || r == -EBADF) break;
    if (r == -EMFILE || r == -ENFILE) {
      iof_sleep_for(1000 * 1000);
      continue;
    }
    if (r < 0) continue;
    iof_socket_set_nodelay(s, true);
    if (iof_run_async(iof_io_context_executor(io), NULL, connection, s) < 0)
      iof_socket_free(s);
  }
  return 0;
}

int main(int argc, char **argv) {
  peer_init(argc, argv, "iof-bench-iofiber", &opts);
  for (int i = 0; i < 64; i++)
    memcpy(http_block + i * PEER_HTTP_RESPONSE_LEN, PEER_HTTP_RESPONSE,
           PEER_HTTP_RESPONSE_LEN);
  io = iof_io_context_create();
  if (!io) return 1;
  char port_s[16];
  snprintf(port_s, sizeof port_s, "%d", opts.port);
  iof_socket *listener;
  if (iof_tcp_listen(io, "127.0.0.1", port_s, 4096, 0, &listener) < 0) return 1;
  if (iof_run_async(iof_io_context_executor(io), NULL, acceptor, listener) < 0)
    return 1;
  peer_ready(iof_socket_local_port(listener));
  return iof_io_context_run(io) < 0;
}
