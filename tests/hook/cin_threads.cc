// std::cin (synced with stdio, the default) read by main while a typist
// thread writes the lines into a pipe on fd 0 and a ticker thread ticks;
// run plain (real threads: the reference) and under iofiber-run, where
// the threads are fibers of one OS thread: libstdc++ reads through
// glibc's getc and friends, which must wait as a fiber.
// Prints "all steps right" when every step is.
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <iostream>
#include <string>
#include <thread>

static std::atomic<int> ticks{0};
static std::atomic<bool> stop{false};
static std::atomic<int> asked{0};
static int failed = 0;

static void check(bool ok, const char *what) {
  if (!ok) {
    std::fprintf(stderr, "cin_threads: %s\n", what);
    failed = 1;
  }
}

int main() {
  int p[2];
  check(pipe(p) == 0 && dup2(p[0], 0) == 0, "pipe on stdin");
  std::thread ticker([] {
    while (!stop) {
      ++ticks;
      usleep(2000);
    }
  });
  static const char *const lines[] = {"hello world\n", "42\n"};
  std::thread typist([&] {
    for (int i = 0; i < 2; i++) {
      while (asked <= i) usleep(1000);
      usleep(50 * 1000);
      std::string s = lines[i];
      if (write(p[1], s.data(), s.size()) != (ssize_t)s.size()) return;
    }
  });
  int t0 = ticks;
  asked = 1;
  std::string s;
  std::getline(std::cin, s);
  check(s == "hello world", "getline's line");
  check(ticks - t0 >= 5, "the ticker ticked during getline");
  t0 = ticks;
  asked = 2;
  int v = 0;
  std::cin >> v;
  check(v == 42, "operator>>'s number");
  check(ticks - t0 >= 5, "the ticker ticked during operator>>");
  typist.join();
  stop = true;
  ticker.join();
  if (!failed) std::puts("all steps right");
  return failed;
}
