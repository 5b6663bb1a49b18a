/* Tutorial step 7: porting a thread-per-connection server
 * (docs/tutorial.md, docs/porting.md).
 *
 * handle_client() below was a pthread body using recv/send and a __thread
 * request counter. The port keeps its shape: the thread is a fiber, each
 * blocking call its iof_ twin, the thread-local a fiber-local. A stop
 * source replaces the "running" flag a signal handler used to clear. */
#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <iofiber/iofiber.h>

static iof_io_context *io;
static iof_socket *listener;
static iof_stop_source stop; /* was: static volatile sig_atomic_t running */
static iof_fls_key requests; /* was: static __thread long requests */

/* was: static void *handle_client(void *arg), started by pthread_create */
static int handle_client(void *arg) {
  iof_socket_stream ss;
  iof_stream *in = iof_socket_stream_init(&ss, arg);
  char line[256];
  size_t filled = 0;
  long *count = calloc(1, sizeof *count);
  if (!count || iof_fls_set(requests, count) < 0) { /* freed by the key */
    free(count);
    iof_socket_free(arg);
    return -ENOMEM;
  }
  for (;;) {
    /* was: a recv() loop until '\n' */
    ssize_t n = iof_stream_read_until(in, line, sizeof line, &filled, "\n", 1);
    if (n <= 0) break; /* EOF, error, or -ECANCELED on stop */
    for (ssize_t i = 0; i < n; i++) line[i] = (char)toupper(line[i]);
    ++*(long *)iof_fls_get(requests);
    if (iof_write(arg, line, (size_t)n) < 0) break; /* was: send() loop */
    memmove(line, line + n, filled - (size_t)n);
    filled -= (size_t)n;
  }
  printf("connection closed after %ld request(s)\n",
         *(long *)iof_fls_get(requests));
  iof_socket_free(arg); /* was: close(fd) */
  return 0;
}

static int accept_loop(void *arg) {
  (void)arg;
  iof_launch_opts opts = {.stop_token = iof_stop_source_token(&stop)};
  iof_socket *c;
  for (;;) {
    int r = iof_accept(listener, &c, NULL, NULL); /* was: accept() */
    if (r == -ECANCELED || r == -EBADF) return 0; /* stopping */
    if (r < 0) {
      /* -EMFILE and friends: the connection waits in the backlog and the
       * listener stays readable, so retrying at once would spin. */
      iof_sleep_for(20 * 1000 * 1000); /* was: usleep(20000) */
      continue;
    }
    if (iof_run_async(iof_io_context_executor(io), &opts, handle_client, c))
      iof_socket_free(c);
  }
}

static int client(void *arg) {
  int *ok = arg;
  char port[16], reply[32] = {0};
  snprintf(port, sizeof port, "%d", iof_socket_local_port(listener));
  iof_socket *s;
  if (iof_tcp_connect(io, "127.0.0.1", port, &s) != 0) return -1;
  iof_write(s, "one\ntwo\n", 8);
  *ok = iof_read(s, reply, 8) == 8 && strcmp(reply, "ONE\nTWO\n") == 0;
  fputs(reply, stdout);
  /* Shut everything down: the stop ends the handler's pending read, the
   * close ends the accept loop. */
  iof_stop_source_request(&stop);
  iof_socket_close(listener);
  iof_socket_free(s);
  return 0;
}

int main(void) {
  int ok = 0;
  io = iof_io_context_create();
  if (!io || iof_stop_source_init(&stop) != 0 ||
      iof_fls_key_create(&requests, free) != 0 ||
      iof_tcp_listen(io, "127.0.0.1", "0", 0, 0, &listener) != 0)
    return 1;
  iof_executor_ref ex = iof_io_context_executor(io);
  iof_launch(ex, accept_loop, NULL);
  iof_launch(ex, client, &ok);
  iof_io_context_run(io);
  iof_socket_free(listener);
  iof_io_context_destroy(io);
  iof_stop_source_destroy(&stop);
  return ok ? 0 : 1;
}
