/* popen and pclose in a threaded program, run plain (real threads: the
 * reference), under iofiber-run and with the header swap, where its
 * threads are fibers of one OS thread:
 * - main reads a slow command's output (fgets on the popen stream) while
 *   a ticker thread keeps ticking (a read that held the OS thread would
 *   stop it), and pclose gives the command's exit status;
 * - a popen'd "w" stream feeds `cat`, whose output file is checked;
 * - no child is left to reap afterwards.
 * Prints "all steps right" when every step is. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define STEPS_NAME "popen"
#include "steps.h"
#include "ticker.h"

int main(void) {
  pthread_t t;
  CHECK(pthread_create(&t, NULL, ticker, NULL) == 0, "ticker");
  usleep(5000);
  int t0 = atomic_load(&ticks);
  FILE *f = popen("sleep 0.1; echo slow output; exit 4", "r");
  CHECK(f != NULL, "popen r");
  char line[128] = "";
  CHECK(f && fgets(line, sizeof line, f) && !strcmp(line, "slow output\n"),
        "the command's output");
  /* About 50 ticks in the command's 100 ms; a read holding the OS thread
   * leaves one at most. 5 leaves room for a loaded machine's slow wakes. */
  CHECK(atomic_load(&ticks) - t0 >= 5, "the ticker ran while main read");
  int st = f ? pclose(f) : -1;
  CHECK(st != -1 && WIFEXITED(st) && WEXITSTATUS(st) == 4,
        "pclose gives the exit status");

  char path[64], cmd[128];
  snprintf(path, sizeof path, "/tmp/iof-popen-%d", (int)getpid());
  snprintf(cmd, sizeof cmd, "cat > %s", path);
  f = popen(cmd, "w");
  CHECK(f != NULL, "popen w");
  for (int i = 0; f && i < 500; i++) fprintf(f, "row %d\n", i);
  CHECK(f && pclose(f) == 0, "pclose of the writer");
  FILE *in = fopen(path, "r");
  int rows = 0;
  while (in && fgets(line, sizeof line, in)) rows++;
  if (in) fclose(in);
  unlink(path);
  CHECK(rows == 500, "cat got every row");

  CHECK(waitpid(-1, NULL, WNOHANG) == -1, "no child left to reap");

  atomic_store(&stop, true);
  CHECK(pthread_join(t, NULL) == 0, "join");
  if (!failed) printf("all steps right\n");
  return failed;
}
