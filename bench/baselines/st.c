/* iof-bench-st: State Threads (libst), the classic C green-thread
 * library: one st_thread per connection on a --stack sized stack (64 KiB
 * by default), blocking-style st_read/st_write on a buffer in its frame
 * (peer.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/select.h>
#include <sys/socket.h>
#include <unistd.h>

#include <st.h>

#include "peer.h"

static peer_opts opts;
static char http_block[64 * PEER_HTTP_RESPONSE_LEN];

static void serve(st_netfd_t c, char *buf) {
  unsigned hstate = 0;
  for (;;) {
    ssize_t n = st_read(c, buf, opts.buf, ST_UTIME_NO_TIMEOUT);
    if (n <= 0) break;
    ssize_t r;
    size_t want;
    if (opts.http) {
      unsigned k = peer_http_feed(&hstate, buf, (size_t)n);
      if (k > 64) k = 64;
      want = k * PEER_HTTP_RESPONSE_LEN;
      r = want ? st_write(c, http_block, want, ST_UTIME_NO_TIMEOUT) : 0;
    } else {
      want = (size_t)n;
      r = st_write(c, buf, want, ST_UTIME_NO_TIMEOUT);
    }
    if (r != (ssize_t)want) break;
  }
}

static void *conn_main(void *arg) {
  st_netfd_t c = arg;
  if (peer_buf_on_stack(&opts)) {
    char buf[opts.buf];
    serve(c, buf);
  } else {
    char *buf = malloc(opts.buf);
    if (buf) serve(c, buf);
    free(buf);
  }
  st_netfd_close(c);
  return NULL;
}

int main(int argc, char **argv) {
  peer_init(argc, argv, "iof-bench-st", &opts);
  for (int i = 0; i < 64; i++)
    memcpy(http_block + i * PEER_HTTP_RESPONSE_LEN, PEER_HTTP_RESPONSE,
           PEER_HTTP_RESPONSE_LEN);
  /* epoll if libst has it: the select backend stops at FD_SETSIZE
   * descriptors. Debian's libst is built with select only, and
   * st_set_eventsys accepts the request all the same. */
  if (st_set_eventsys(ST_EVENTSYS_ALT) < 0) perror("st_set_eventsys");
  if (st_init() < 0) {
    perror("st_init");
    return 1;
  }
  if (strcmp(st_get_eventsys_name(), "select") == 0)
    fprintf(stderr,
            "iof-bench-st: libst polls with select(): at most %d "
            "connections\n",
            FD_SETSIZE);
  int port;
  int lfd = peer_listen(&opts, false, &port);
  st_netfd_t l = st_netfd_open_socket(lfd);
  if (!l) {
    perror("st_netfd_open_socket");
    return 1;
  }
  peer_ready(port);
  for (;;) {
    st_netfd_t c = st_accept(l, NULL, NULL, ST_UTIME_NO_TIMEOUT);
    if (!c) continue;
    peer_nodelay(st_netfd_fileno(c));
    if (!st_thread_create(conn_main, c, 0, (int)opts.stack)) st_netfd_close(c);
  }
}
