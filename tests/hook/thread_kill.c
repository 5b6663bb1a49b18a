/* pthread_kill between threads, as glibc and the kernel do it:
 * - signal numbers: 0 checks the thread, glibc's internal 32 and 33 and
 *   numbers out of range are EINVAL (nothing is sent).
 * Run under iofiber-run, plainly and with the header swap; cases that end
 * the process run in a copy of this program (argv[1] names the case).
 * Exit 0: every step right; it prints what failed. */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static int failed;
#define CHECK(cond, what)                                                      \
  do {                                                                         \
    if (!(cond)) {                                                             \
      fprintf(stderr, "thread_kill: %s: %s (errno %s)\n", what, #cond,         \
              strerror(errno));                                                \
      failed = 1;                                                              \
    }                                                                          \
  } while (0)

static int pfd[2];

/* Waits in a blocking read of pfd until a byte comes. */
static void *reader(void *arg) {
  (void)arg;
  char c;
  while (read(pfd[0], &c, 1) < 0 && errno == EINTR) {
  }
  return NULL;
}

static void bad_numbers(void) {
  pthread_t t;
  pthread_create(&t, NULL, reader, NULL);
  usleep(20000);
  CHECK(pthread_kill(t, 0) == 0, "signal 0: the thread exists");
  CHECK(pthread_kill(t, 32) == EINVAL, "glibc's SIGCANCEL");
  CHECK(pthread_kill(t, 33) == EINVAL, "glibc's SIGSETXID");
  CHECK(pthread_kill(t, -1) == EINVAL, "negative");
  CHECK(pthread_kill(t, NSIG) == EINVAL, "NSIG");
  CHECK(pthread_kill(pthread_self(), 32) == EINVAL, "SIGCANCEL to self");
  (void)!write(pfd[1], "x", 1);
  pthread_join(t, NULL);
}

int main(int argc, char **argv) {
  (void)argc;
  (void)argv;
  setvbuf(stdout, NULL, _IONBF, 0);
  if (pipe(pfd) != 0) return 1;
  bad_numbers();
  if (!failed) printf("thread_kill: all steps right\n");
  return failed;
}
