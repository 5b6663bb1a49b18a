/* A child made by the raw clone system call, as vsftpd makes its session
 * processes (syscall(SYS_clone, CLONE_NEW...|SIGCHLD): no fork handlers
 * run), run under iofiber-run. The child forbids itself new fds, as
 * vsftpd's unprivileged one does, then sleeps and writes: it must step
 * aside like a forked child (plain calls), not run a copy of the parent's
 * event loop on the parent's epoll instance, where an event for an fd the
 * parent watches made libev rebuild its backend and, with no fd allowed,
 * spin forever. Exit 0: the child ended and its byte arrived. */
#include <signal.h>
#include <stdio.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

int main(void) {
  int p[2];
  if (pipe(p) != 0) return 2;
  pid_t c = (pid_t)syscall(SYS_clone, SIGCHLD, 0, 0, 0, 0);
  if (c < 0) return 2;
  if (c == 0) {
    struct rlimit none = {0, 0};
    (void)setrlimit(RLIMIT_NOFILE, &none);
    usleep(50000);
    if (write(p[1], "x", 1) != 1) _exit(3);
    usleep(50000); /* the parent's fibers now wait on p[0]'s events */
    _exit(0);
  }
  char ch = 0;
  if (read(p[0], &ch, 1) != 1 || ch != 'x') return 1;
  for (int i = 0; i < 500; i++) { /* 5 s */
    int st = 0;
    pid_t r = waitpid(c, &st, WNOHANG);
    if (r == c) return WIFEXITED(st) && WEXITSTATUS(st) == 0 ? 0 : 1;
    usleep(10000);
  }
  fprintf(stderr, "raw_clone: the child is still running after 5 s\n");
  kill(c, SIGKILL);
  waitpid(c, NULL, 0);
  return 1;
}
