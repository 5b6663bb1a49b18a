/* Threads on a pipeline's pipes must not stop each other. This program
 * starts itself again as the child process, with stdout and stdin on
 * pipes (as in `feeder | server | logger`):
 * - stdout: the parent starts draining only after 200 ms, while a writer
 *   thread writes 512 KiB with write(1) and writev(1);
 * - stdin: two reader threads wait in read(0); the parent writes one
 *   line, then another 100 ms after the child took the first (fd 3 tells
 *   it). Both readers wake for the first: the one that misses it must
 *   wait again, not sit in the kernel;
 * - a ticker thread keeps ticking all along.
 * Run plain (real threads: the reference), under iofiber-run and with the
 * header swap, where the threads are fibers of one OS thread: a call that
 * held that thread would stop the ticker (before the fix the write did;
 * inherited pipes on 0-2 keep their blocking mode, shared with the other
 * processes). Every byte must arrive, in order; an empty stdin made
 * non-blocking behind the runtime's back says EAGAIN; a terminal, which
 * refuses RWF_NOWAIT, is written plainly. On a kernel that refuses
 * RWF_NOWAIT on pipes the calls are the plain ones (the read waits for
 * readiness first): then only the bytes are checked.
 * Prints "all steps right" when every step is. */
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <spawn.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

#define STEPS_NAME "std_pipes"
#include "steps.h"
#include "ticker.h"

enum { CHUNK = 64 * 1024, CHUNKS = 8, DELAY_MS = 200, GAP_MS = 100 };

static unsigned char byte_at(size_t i) {
  return (unsigned char)(i * 7 + i / 251);
}

static int ticks_during; /* ticks while the writer wrote */

static void *writer(void *p) {
  (void)p;
  static unsigned char buf[CHUNK * CHUNKS];
  for (size_t i = 0; i < sizeof buf; i++) buf[i] = byte_at(i);
  int t0 = atomic_load(&ticks);
  for (int c = 0; c < CHUNKS - 2; c++) {
    ssize_t n = write(1, buf + (size_t)c * CHUNK, CHUNK);
    CHECK(n == CHUNK, "write to the full pipe");
  }
  /* The last two chunks in one writev, split unevenly. */
  struct iovec v[3] = {{buf + (CHUNKS - 2) * CHUNK, 1000},
                       {buf + (CHUNKS - 2) * CHUNK + 1000, CHUNK - 1000},
                       {buf + (CHUNKS - 1) * CHUNK, CHUNK}};
  ssize_t n = writev(1, v, 3);
  CHECK(n == 2 * CHUNK, "writev to the full pipe");
  ticks_during = atomic_load(&ticks) - t0;
  /* A terminal refuses RWF_NOWAIT: its writes are the plain call, whole,
   * the first one and the next. */
  int m = posix_openpt(O_RDWR | O_NOCTTY);
  if (m >= 0 && grantpt(m) == 0 && unlockpt(m) == 0) {
    int t = open(ptsname(m), O_RDWR | O_NOCTTY);
    CHECK(t >= 0, "open the terminal");
    CHECK(write(t, "one\n", 4) == 4, "first write to a terminal");
    CHECK(write(t, "two\n", 4) == 4, "next write to a terminal");
    char got[32] = {0};
    size_t have = 0;
    while (have < 10) {
      ssize_t r = read(m, got + have, sizeof got - 1 - have);
      if (r <= 0) break;
      have += (size_t)r;
    }
    CHECK(strcmp(got, "one\r\ntwo\r\n") == 0, "the terminal's bytes");
    close(t);
  }
  if (m >= 0) close(m);
  return NULL;
}

/* Whether this kernel lets a write to a pipe refuse to wait. */
static bool pipes_take_nowait(void) {
  int p[2];
  if (pipe(p) != 0) return false;
  char c = 'x';
  struct iovec v = {&c, 1};
  bool ok = pwritev2(p[1], &v, 1, -1, RWF_NOWAIT) == 1;
  close(p[0]);
  close(p[1]);
  return ok;
}

/* A reader of stdin: one line, and the tick count when it came. */
typedef struct line_read {
  char line[16];
  int at_tick;
} line_read;

static void *reader(void *p) {
  line_read *r = p;
  ssize_t n = read(0, r->line, 4);
  r->at_tick = atomic_load(&ticks);
  CHECK(n == 4, "read(0) of one line");
  /* The parent sends the second line GAP_MS after this tells it the first
   * was taken (fd 3), so a slow first reader cannot shrink the gap. */
  if (n == 4 && strcmp(r->line, "one\n") == 0)
    CHECK(write(3, "a", 1) == 1, "tell the parent");
  return NULL;
}

/* The child: stdout and stdin are the pipes it inherited. Exit 0 when
 * the calls did what they should and the ticker ran meanwhile (where it
 * can). */
static int child_process(void) {
  alarm(20); /* a read that waits where it should fail ends here */
  bool nowait = pipes_take_nowait();
  pthread_t tt, wt, rt[2];
  line_read lr[2] = {{{0}, 0}, {{0}, 0}};
  CHECK(pthread_create(&tt, NULL, ticker, NULL) == 0, "ticker");
  for (int i = 0; i < 2; i++)
    CHECK(pthread_create(&rt[i], NULL, reader, &lr[i]) == 0, "reader");
  CHECK(pthread_create(&wt, NULL, writer, NULL) == 0, "writer");
  CHECK(pthread_join(wt, NULL) == 0, "join writer");
  for (int i = 0; i < 2; i++)
    CHECK(pthread_join(rt[i], NULL) == 0, "join reader");
  atomic_store(&stop, true);
  CHECK(pthread_join(tt, NULL) == 0, "join ticker");
  /* O_NONBLOCK set behind the runtime's back (a raw system call, as
   * another process sharing the pipe could): an empty stdin says EAGAIN
   * at once, as the plain read would, instead of waiting. */
  CHECK(syscall(SYS_fcntl, 0, F_SETFL, O_NONBLOCK) == 0, "raw O_NONBLOCK");
  char c;
  errno = 0;
  CHECK(read(0, &c, 1) == -1 && errno == EAGAIN, "EAGAIN when non-blocking");
  CHECK(write(3, "b", 1) == 1, "tell the parent");
  bool one_two =
      (strcmp(lr[0].line, "one\n") == 0 && strcmp(lr[1].line, "two\n") == 0) ||
      (strcmp(lr[0].line, "two\n") == 0 && strcmp(lr[1].line, "one\n") == 0);
  CHECK(one_two, "each reader got one of the lines");
  int gap = abs(lr[1].at_tick - lr[0].at_tick);
  /* 200 ms (100 ms) at one tick per 2 ms: about 100 (50) ticks; a held
   * thread lets none through. */
  if (nowait) {
    CHECK(ticks_during >= 10, "the ticker ran during the write");
    CHECK(gap >= 5, "the ticker ran between the two lines");
  }
  fprintf(stderr,
          "std_pipes: %d ticks during the write, %d between the "
          "lines%s\n",
          ticks_during, gap, nowait ? "" : " (pipes refuse RWF_NOWAIT here)");
  return failed;
}

int main(int argc, char **argv) {
  if (argc > 1 && strcmp(argv[1], "child") == 0) return child_process();
  /* The parent: starts the child with its stdout and stdin on pipes, as a
   * shell pipeline would; drains stdout after DELAY_MS and checks every
   * byte, then feeds stdin two lines GAP_MS apart. */
  int out[2], in[2], ack[2];
  CHECK(pipe(out) == 0 && pipe(in) == 0 && pipe(ack) == 0, "pipe");
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, out[1], 1);
  posix_spawn_file_actions_adddup2(&fa, in[0], 0);
  posix_spawn_file_actions_adddup2(&fa, ack[1], 3);
  posix_spawn_file_actions_addclose(&fa, ack[0]);
  posix_spawn_file_actions_addclose(&fa, ack[1]);
  posix_spawn_file_actions_addclose(&fa, out[0]);
  posix_spawn_file_actions_addclose(&fa, out[1]);
  posix_spawn_file_actions_addclose(&fa, in[0]);
  posix_spawn_file_actions_addclose(&fa, in[1]);
  char *args[] = {argv[0], "child", NULL};
  extern char **environ;
  pid_t child;
  CHECK(posix_spawn(&child, "/proc/self/exe", &fa, NULL, args, environ) == 0,
        "posix_spawn");
  posix_spawn_file_actions_destroy(&fa);
  close(out[1]);
  close(in[0]);
  close(ack[1]);
  usleep(DELAY_MS * 1000);
  static unsigned char buf[16384];
  size_t at = 0;
  bool in_order = true;
  while (at < (size_t)CHUNK * CHUNKS) {
    ssize_t n = read(out[0], buf, sizeof buf);
    CHECK(n >= 0, "read");
    if (n <= 0) break;
    for (ssize_t i = 0; i < n; i++)
      if (buf[i] != byte_at(at + (size_t)i)) in_order = false;
    at += (size_t)n;
  }
  CHECK(in_order && at == (size_t)CHUNK * CHUNKS, "every byte, in order");
  CHECK(write(in[1], "one\n", 4) == 4, "first line");
  char a;
  CHECK(read(ack[0], &a, 1) == 1, "the child took the first line");
  usleep(GAP_MS * 1000);
  CHECK(write(in[1], "two\n", 4) == 4, "second line");
  /* stdin stays open (no EOF) until the child's non-blocking read. */
  CHECK(read(ack[0], &a, 1) == 1, "the child read with O_NONBLOCK");
  close(in[1]);
  CHECK(read(out[0], buf, sizeof buf) == 0, "nothing more on stdout");
  close(out[0]);
  close(ack[0]);
  int status = -1;
  CHECK(waitpid(child, &status, 0) == child, "waitpid");
  CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0, "the child");
  if (!failed) printf("all steps right\n");
  return failed;
}
