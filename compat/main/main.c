/* libiofiber-compat's main: runs the program's own main (renamed
 * iof_compat_user_main by <iofiber/compat.h>) as a fiber thread through
 * iof_main, and exits with its status. Kept out of libiofiber so that
 * linking the core library never brings a main in. */
#include <iofiber/compat_thread.h>
#include <iofiber/env.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

extern char **environ;

/* Declared with the widest form of main; a main(void) or main(argc, argv)
 * ignores the extra arguments (as the C runtime's own call does). */
int iof_compat_user_main(int argc, char **argv, char **envp);

typedef struct user_call {
  int argc;
  char **argv;
  int status;
  int ran;
} user_call;

static int run_user_main(void *p) {
  user_call *c = p;
  c->ran = 1;
  c->status = iof_compat_user_main(c->argc, c->argv, environ);
  /* Returning from main is exit(status), made here while the other fiber
   * threads still run: exit handlers and destructors may join them. */
  exit(c->status);
}

int main(int argc, char **argv) {
  /* Already a fiber: iofiber-run's hook took over main before us (it runs
   * main through iof_main, which would refuse a second one). */
  if (iof_env_current()) return iof_compat_user_main(argc, argv, environ);
  user_call c = {argc, argv, 0, 0};
  int r = iof_main(run_user_main, &c);
  if (r < 0 && !c.ran) {
    fprintf(stderr, "iofiber: cannot start the program: %s\n", strerror(-r));
    return 127;
  }
  return c.status;
}
