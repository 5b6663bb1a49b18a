/* A thread-per-connection line server that talks through stdio (fdopen,
 * fgets, fprintf, fflush), as classic servers do, with its clients as
 * threads of the same program. Run plain (real threads: the reference),
 * under iofiber-run and with the header swap, where every thread is a
 * fiber of one OS thread:
 * - a silent client connects first, and its server thread waits in fgets;
 * - 8 other clients each exchange 5 lines with their server threads
 *   meanwhile: all finish while the silent one still says nothing (a
 *   server thread whose fgets held the OS thread would stop everyone);
 * - then the silent client speaks and gets its answer; fileno and fclose
 *   behave as with glibc's streams.
 * Prints "all steps right" when every step is. */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define STEPS_NAME "stdio_sockets"
#include "steps.h"

#define FAST 8
#define LINES 5

static int lfd;
static struct sockaddr_in addr;
static atomic_int fast_done;

static void *serve(void *p) {
  int fd = (int)(intptr_t)p;
  FILE *f = fdopen(fd, "r+");
  CHECK(f != NULL, "fdopen on a socket");
  if (!f) return NULL;
  CHECK(fileno(f) == fd, "fileno gives the socket back");
  char line[256];
  while (fgets(line, sizeof line, f)) {
    line[strcspn(line, "\r\n")] = 0;
    fprintf(f, "you said <%s>\n", line);
    CHECK(fflush(f) == 0, "fflush");
  }
  CHECK(fclose(f) == 0, "fclose");
  return NULL;
}

static void *acceptor(void *p) {
  (void)p;
  for (int i = 0; i < FAST + 1; i++) {
    int c = accept(lfd, NULL, NULL);
    CHECK(c >= 0, "accept");
    pthread_t t;
    CHECK(pthread_create(&t, NULL, serve, (void *)(intptr_t)c) == 0,
          "server thread");
    pthread_detach(t);
  }
  return NULL;
}

static FILE *dial(void) {
  int s = socket(AF_INET, SOCK_STREAM, 0);
  CHECK(s >= 0 && connect(s, (struct sockaddr *)&addr, sizeof addr) == 0,
        "connect");
  FILE *f = fdopen(s, "r+");
  CHECK(f != NULL, "client fdopen");
  return f;
}

static int talk(FILE *f, const char *what) {
  char line[256], want[256];
  fprintf(f, "%s\n", what);
  if (fflush(f) != 0 || !fgets(line, sizeof line, f)) return 0;
  snprintf(want, sizeof want, "you said <%s>\n", what);
  return strcmp(line, want) == 0;
}

static void *fast_client(void *p) {
  int id = (int)(intptr_t)p;
  FILE *f = dial();
  if (!f) return NULL;
  int ok = 1;
  for (int i = 0; i < LINES; i++) {
    char what[64];
    snprintf(what, sizeof what, "client %d line %d", id, i);
    ok &= talk(f, what);
    usleep(2000);
  }
  CHECK(ok, "every answer of a fast client");
  fclose(f);
  atomic_fetch_add(&fast_done, 1);
  return NULL;
}

int main(void) {
  lfd = socket(AF_INET, SOCK_STREAM, 0);
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof addr;
  CHECK(lfd >= 0 && bind(lfd, (struct sockaddr *)&addr, sizeof addr) == 0 &&
            listen(lfd, 64) == 0 &&
            getsockname(lfd, (struct sockaddr *)&addr, &len) == 0,
        "listen");
  pthread_t acc;
  CHECK(pthread_create(&acc, NULL, acceptor, NULL) == 0, "acceptor");

  FILE *silent = dial();
  usleep(20000); /* its server thread is in fgets now */
  pthread_t t[FAST];
  for (int i = 0; i < FAST; i++)
    CHECK(pthread_create(&t[i], NULL, fast_client, (void *)(intptr_t)i) == 0,
          "client thread");
  /* Bounded: 5 s, then the check below fails instead of hanging. */
  for (int i = 0; i < 500 && atomic_load(&fast_done) < FAST; i++) usleep(10000);
  CHECK(atomic_load(&fast_done) == FAST,
        "the fast clients finished while the silent one waited");
  CHECK(silent && talk(silent, "at last"), "the silent client's answer");
  if (silent) fclose(silent);
  for (int i = 0; i < FAST; i++) pthread_join(t[i], NULL);
  pthread_join(acc, NULL);
  close(lfd);
  if (!failed) printf("all steps right\n");
  return failed;
}
