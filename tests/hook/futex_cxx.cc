// C++20's waiting primitives from std::threads: libstdc++ builds
// std::atomic::wait, std::counting_semaphore and std::latch on
// syscall(SYS_futex). Run plain and under iofiber-run, where the threads
// are fibers of one OS thread: a waiter that held that thread in the
// kernel would keep the notifier (which sleeps first, past libstdc++'s
// spinning) from ever running. Prints "all steps right" when every step
// is.
#include <atomic>
#include <chrono>
#include <cstdio>
#include <latch>
#include <semaphore>
#include <thread>
#include <vector>

static int failed;

#define CHECK(cond, what)                                                      \
  do {                                                                         \
    if (!(cond)) {                                                             \
      std::fprintf(stderr, "futex_cxx: %s: %s\n", what, #cond);                \
      failed = 1;                                                              \
    }                                                                          \
  } while (0)

using namespace std::chrono_literals;

int main() {
  auto t0 = std::chrono::steady_clock::now();

  // Ping-pong through two semaphores, the ponger sleeping before each
  // release.
  std::binary_semaphore ping(0), pong(0);
  int rounds = 0;
  std::thread ponger([&] {
    for (int i = 0; i < 20; i++) {
      ping.acquire();
      std::this_thread::sleep_for(2ms);
      pong.release();
    }
  });
  for (int i = 0; i < 20; i++) {
    ping.release();
    pong.acquire();
    rounds++;
  }
  ponger.join();
  CHECK(rounds == 20, "semaphore ping-pong");

  // atomic::wait until a value another thread stores after a sleep.
  std::atomic<int> stage{0};
  std::thread stager([&] {
    for (int s = 1; s <= 5; s++) {
      std::this_thread::sleep_for(3ms);
      stage.store(s);
      stage.notify_all();
    }
  });
  int seen = 0;
  while (seen < 5) {
    stage.wait(seen);
    seen = stage.load();
  }
  stager.join();
  CHECK(seen == 5, "atomic wait saw every stage");

  // A latch: eight workers count down, then all pass together.
  std::latch start(1), done(8);
  std::atomic<int> passed{0};
  std::vector<std::thread> workers;
  for (int i = 0; i < 8; i++)
    workers.emplace_back([&] {
      start.wait();
      passed++;
      done.count_down();
    });
  std::this_thread::sleep_for(5ms);
  CHECK(passed.load() == 0, "nobody passed the closed latch");
  start.count_down();
  done.wait();
  CHECK(passed.load() == 8, "everyone passed the open latch");
  for (auto &w : workers) w.join();

  CHECK(std::chrono::steady_clock::now() - t0 < 10s, "in bounded time");
  if (!failed) std::printf("all steps right\n");
  return failed;
}
