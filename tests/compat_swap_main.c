/* A program on the header swap with the library's main: its main runs as
 * a fiber thread and returns while another io thread exists. Under ASan
 * the leak checker runs at that exit: nothing the runtime allocated may be
 * reachable only from the OS thread's stack, which it does not scan once
 * the thread runs on a fiber's stack. */
#include <iofiber/compat.h>

static void *worker(void *arg) {
  return arg;
}

int main(void) {
  pthread_t t;
  void *r = NULL;
  if (pthread_create(&t, NULL, worker, (void *)7) != 0) return 2;
  if (pthread_join(t, &r) != 0 || r != (void *)7) return 3;
  puts("compat_swap_main: returned from main");
  return 0;
}
