/* The threaded console pattern: main reads its commands from stdin (a
 * pipe, then a terminal) while a typist thread writes them and a ticker
 * thread keeps ticking. Run plain (real threads: the reference), under
 * iofiber-run and with the header swap, where the threads are fibers of
 * one OS thread: a read of stdin that held that thread would stop both
 * (before the fix, every one of them did: glibc reads its stdin stream
 * with an internal read the hook cannot reach). Each read must wait for
 * the typist's line while the ticker ticks.
 * Prints "all steps right" when every step is. */
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define STEPS_NAME "stdin_threads"
#include "steps.h"
#include "ticker.h"

static const char *const lines[] = {"fgets\n", "getline\n", "c\n",
                                    "abcde\n", "42\n",      "raw\n"};
enum { NLINES = sizeof lines / sizeof lines[0] };

static int typist_fd;
static atomic_int asked; /* lines main has asked for */

/* Writes line i once main waits for it, 100 ms later. */
static void *typist(void *p) {
  (void)p;
  for (int i = 0; i < NLINES; i++) {
    while (atomic_load(&asked) <= i && !atomic_load(&stop)) usleep(1000);
    usleep(100 * 1000);
    size_t n = strlen(lines[i]);
    if (write(typist_fd, lines[i], n) != (ssize_t)n) return NULL;
  }
  return NULL;
}

/* Reads line i the way `kind` does; what arrived, for the check. */
static void read_line(int i, char *got, size_t cap) {
  char *l = NULL;
  size_t lcap = 0;
  int v = -1;
  memset(got, 0, cap);
  switch (i) {
  case 0:
    if (!fgets(got, (int)cap, stdin)) strcpy(got, "(null)");
    break;
  case 1:
    snprintf(got, cap, "%s", getline(&l, &lcap, stdin) > 0 ? l : "(eof)");
    free(l);
    break;
  case 2:
    got[0] = (char)getchar();
    got[1] = (char)getchar();
    break;
  case 3:
    if (fread(got, 1, 6, stdin) != 6) strcpy(got, "(short)");
    break;
  case 4:
#ifndef IOFIBER_COMPAT_H /* the header swap leaves scanf to the hook */
    if (scanf("%d", &v) != 1) v = -1;
    snprintf(got, cap, "%d%c", v, getchar());
#else
    (void)v;
    if (!fgets(got, (int)cap, stdin)) strcpy(got, "(null)");
#endif
    break;
  case 5:
    if (read(0, got, cap - 1) <= 0) strcpy(got, "(none)");
    break;
  }
}

/* Every read with fd 0 on `rfd`, lines typed on wfd. */
static void reads_on(int rfd, int wfd, const char *what) {
  int saved = dup(0);
  CHECK(saved >= 0 && dup2(rfd, 0) == 0, what);
  clearerr(stdin);
  typist_fd = wfd;
  atomic_store(&asked, 0);
  pthread_t t;
  CHECK(pthread_create(&t, NULL, typist, NULL) == 0, "typist");
  for (int i = 0; i < NLINES; i++) {
    int t0 = atomic_load(&ticks);
    atomic_store(&asked, i + 1);
    char got[64];
    read_line(i, got, sizeof got);
    int during = atomic_load(&ticks) - t0;
    if (strcmp(got, lines[i]) != 0 || during < 5)
      fprintf(stderr, "%s: %s line %d: got \"%s\", %d ticks\n", STEPS_NAME,
              what, i, got, during);
    CHECK(strcmp(got, lines[i]) == 0, "the typed line");
    CHECK(during >= 5, "the ticker ticked during the read"); /* ~50 */
  }
  pthread_join(t, NULL);
  CHECK(dup2(saved, 0) == 0, "stdin back");
  close(saved);
  clearerr(stdin);
}

int main(void) {
  pthread_t t;
  CHECK(pthread_create(&t, NULL, ticker, NULL) == 0, "ticker");
  int p[2];
  CHECK(pipe(p) == 0, "pipe");
  reads_on(p[0], p[1], "pipe");
  close(p[0]);
  close(p[1]);
  int m = posix_openpt(O_RDWR | O_NOCTTY);
  if (m >= 0 && grantpt(m) == 0 && unlockpt(m) == 0) {
    int s = open(ptsname(m), O_RDWR | O_NOCTTY);
    CHECK(s >= 0, "pty");
    if (s >= 0) reads_on(s, m, "terminal");
    close(s);
    close(m);
  }
  atomic_store(&stop, true);
  pthread_join(t, NULL);
  if (!failed) puts("all steps right");
  return failed;
}
