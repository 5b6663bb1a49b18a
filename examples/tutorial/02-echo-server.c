/* Tutorial step 2: a TCP echo server, one fiber per connection
 * (docs/tutorial.md).
 *
 * The acceptor fiber accepts connections and launches a fiber for each;
 * the connection fiber reads and writes as blocking code would. To keep
 * the program self-contained, a client fiber in the same process connects,
 * checks the echo, and closes the listener, which ends the accept loop. */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include <iofiber/iofiber.h>

static iof_io_context *io;
static iof_socket *listener;

static int connection(void *arg) {
  iof_socket *c = arg;
  char buf[4096];
  ssize_t n;
  while ((n = iof_read_some(c, buf, sizeof buf)) > 0) /* 0: peer closed */
    if (iof_write(c, buf, (size_t)n) < 0) break;
  iof_socket_free(c);
  return 0;
}

static int acceptor(void *arg) {
  (void)arg;
  iof_socket *c;
  int r;
  while ((r = iof_accept(listener, &c, NULL, NULL)) == 0)
    if (iof_launch(iof_io_context_executor(io), connection, c) != 0)
      iof_socket_free(c);
  /* -ECANCELED once the listener is closed; -EMFILE etc. would need a
   * back-off (see examples/echo-server.c). */
  return r == -ECANCELED || r == -EBADF ? 0 : r;
}

static int client(void *arg) {
  int *ok = arg;
  char port[16], reply[6] = {0};
  snprintf(port, sizeof port, "%d", iof_socket_local_port(listener));
  iof_socket *s;
  if (iof_tcp_connect(io, "127.0.0.1", port, &s) != 0) return -1;
  if (iof_write(s, "hello", 5) == 5 && iof_read(s, reply, 5) == 5)
    *ok = strcmp(reply, "hello") == 0;
  printf("client got \"%s\" back\n", reply);
  iof_socket_free(s);
  iof_socket_close(listener); /* cancels the pending accept */
  return 0;
}

int main(void) {
  int ok = 0;
  io = iof_io_context_create();
  if (!io) return 1;
  /* Port "0": the kernel picks a free one. */
  if (iof_tcp_listen(io, "127.0.0.1", "0", 0, 0, &listener) != 0) return 1;
  printf("listening on 127.0.0.1:%d\n", iof_socket_local_port(listener));
  iof_executor_ref ex = iof_io_context_executor(io);
  if (iof_launch(ex, acceptor, NULL) || iof_launch(ex, client, &ok)) return 1;
  iof_io_context_run(io);
  iof_socket_free(listener);
  iof_io_context_destroy(io);
  return ok ? 0 : 1;
}
