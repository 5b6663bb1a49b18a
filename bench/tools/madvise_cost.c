#define _GNU_SOURCE
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>
static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec * 1e9 + t.tv_nsec;
}
static long rss(void) {
  long a, b;
  FILE *f = fopen("/proc/self/statm", "r");
  fscanf(f, "%ld %ld", &a, &b);
  fclose(f);
  return b * 4;
}
int main(void) {
  enum { N = 256, SZ = 64 * 1024, TOUCH = 16 * 1024 };
  int advs[2] = {MADV_DONTNEED, MADV_FREE};
  const char *names[2] = {"MADV_DONTNEED", "MADV_FREE"};
  for (int k = 0; k < 2; k++) {
    char *m = mmap(NULL, (size_t)N * SZ, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    for (int i = 0; i < N; i++)
      memset(m + (size_t)i * SZ + SZ - TOUCH, 1, TOUCH);
    long r0 = rss();
    double t0 = now(), tadv = 0, ttouch = 0;
    for (int rep = 0; rep < 50; rep++) {
      double a = now();
      for (int i = 0; i < N; i++)
        madvise(m + (size_t)i * SZ, SZ - 4096, advs[k]);
      tadv += now() - a;
      a = now();
      for (int i = 0; i < N; i++)
        memset(m + (size_t)i * SZ + SZ - TOUCH, 2, TOUCH);
      ttouch += now() - a;
    }
    for (int i = 0; i < N; i++) madvise(m + (size_t)i * SZ, SZ - 4096, advs[k]);
    long r1 = rss();
    printf("%-14s madvise %.0f ns/stack, re-touch 16K %.0f ns/stack, RSS "
           "before %ld KB after release %ld KB (%.1f ms total)\n",
           names[k], tadv / (50.0 * N), ttouch / (50.0 * N), r0, r1,
           (now() - t0) / 1e6);
    munmap(m, (size_t)N * SZ);
  }
}
