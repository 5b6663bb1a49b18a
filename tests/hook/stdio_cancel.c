/* A thread cancelled while it waits in fgets on a socket's stdio stream:
 * glibc releases the stream's lock as the thread unwinds, so the threads
 * after it can use the stream. Under iofiber-run the cancel leaves the
 * fiber by a jump past glibc's cleanup, and the lock stayed held: with 2
 * io threads the next fgets from the other one waited forever. Run plain,
 * under iofiber-run with 2 io threads and with the header swap. Prints
 * "all steps right" when every step is. */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define STEPS_NAME "stdio_cancel"
#include "steps.h"

static int sv[2];
static FILE *fp;

static void *reader(void *arg) {
  (void)arg;
  char line[64];
  (void)fgets(line, sizeof line, fp); /* nothing comes: cancelled here */
  return NULL;
}

static void *user(void *arg) {
  (void)arg;
  int free_now = ftrylockfile(fp) == 0;
  CHECK(free_now, "the stream's lock is free");
  if (free_now) funlockfile(fp);
  CHECK(write(sv[1], "line\n", 5) == 5, "write");
  char line[64] = "";
  CHECK(fgets(line, sizeof line, fp) != NULL, "fgets after the cancel");
  CHECK(strcmp(line, "line\n") == 0, "the line");
  return NULL;
}

int main(void) {
  CHECK(socketpair(AF_UNIX, SOCK_STREAM, 0, sv) == 0, "socketpair");
  fp = fdopen(sv[0], "r");
  CHECK(fp != NULL, "fdopen");
  if (!fp) return 1;
  pthread_t t;
  CHECK(pthread_create(&t, NULL, reader, NULL) == 0, "create the reader");
  usleep(50000); /* it waits in fgets */
  CHECK(pthread_cancel(t) == 0, "cancel");
  void *res = NULL;
  CHECK(pthread_join(t, &res) == 0 && res == PTHREAD_CANCELED, "cancelled");
  for (int i = 0; i < 4; i++) {
    CHECK(pthread_create(&t, NULL, user, NULL) == 0, "create a user");
    CHECK(pthread_join(t, NULL) == 0, "join a user");
  }
  fclose(fp);
  close(sv[1]);
  if (!failed) printf("all steps right\n");
  return failed;
}
