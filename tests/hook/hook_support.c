#include "hook_support.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

int hook_run_fibers(int n, iof_fn fn, void *arg) {
  iof_io_context *io = iof_io_context_create();
  if (!io) return -12;
  int r = 0;
  for (int i = 0; i < n && r == 0; i++) {
    iof_launch_opts o = {.stack_size = 256 * 1024};
    r = iof_run_async(iof_io_context_executor(io), &o, fn, arg);
  }
  int rr = iof_io_context_run(io);
  iof_io_context_destroy(io);
  return r < 0 ? r : rr < 0 ? rr : 0;
}

unsigned long hook_count(const char *call, int which) {
  unsigned long c[3] = {0, 0, 0};
  if (iof_hook_counts(call, c) != 0) return ~0ul;
  return c[which];
}

int hook_free_port(void) {
  int s = socket(AF_INET, SOCK_STREAM, 0);
  if (s < 0) return -errno;
  struct sockaddr_in a = {.sin_family = AF_INET};
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t l = sizeof a;
  int p = -EIO;
  if (bind(s, (struct sockaddr *)&a, sizeof a) == 0 &&
      getsockname(s, (struct sockaddr *)&a, &l) == 0)
    p = ntohs(a.sin_port);
  close(s);
  return p;
}
