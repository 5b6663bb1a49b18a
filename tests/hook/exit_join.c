/* A destructor that joins a thread at exit (as libuv's does for its
 * thread pool). Built plainly and run under iofiber-run, and built through
 * the header swap: the worker is a fiber "thread", and the join must find
 * it still running after main returned. Prints "joined at exit". */
#include <pthread.h>
#include <stdio.h>
#include <unistd.h>

static pthread_t worker;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t wake = PTHREAD_COND_INITIALIZER;
static int stop;

static void *work(void *arg) {
  pthread_mutex_lock(&lock);
  while (!stop) pthread_cond_wait(&wake, &lock);
  pthread_mutex_unlock(&lock);
  return arg;
}

__attribute__((destructor)) static void join_worker(void) {
  pthread_mutex_lock(&lock);
  stop = 1;
  pthread_cond_signal(&wake);
  pthread_mutex_unlock(&lock);
  if (pthread_join(worker, NULL) == 0) puts("joined at exit");
}

int main(void) {
  if (pthread_create(&worker, NULL, work, NULL) != 0) return 1;
  usleep(1000);
  return 0;
}
