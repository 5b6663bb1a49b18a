// C++ thread_local objects in std::threads, run plain and under
// iofiber-run (the threads are fibers sharing an OS thread there): each
// thread constructs its own objects on first use, keeps them across
// blocking calls while the others run, and their destructors run when the
// thread ends, each once, on that thread's objects; main's at exit. An
// exception caught in one thread while another throws is unaffected.
// Prints "all steps right" when every step is.
#include <atomic>
#include <chrono>
#include <cstdio>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

static std::atomic<int> failed{0};
#define CHECK(c, what)                                                         \
  do {                                                                         \
    if (!(c)) {                                                                \
      std::fprintf(stderr, "thread_locals_cxx: %s: %s\n", what, #c);         \
      failed++;                                                                \
    }                                                                          \
  } while (0)

static std::atomic<int> constructed{0}, destroyed{0};
static std::atomic<int> destroyed_with[8];

struct Conn {
  int id = -1;
  std::string log;
  Conn() { constructed++; }
  ~Conn() {
    destroyed++;
    if (id >= 0 && id < 8 && log == "conn " + std::to_string(id))
      destroyed_with[id]++;
  }
};

static thread_local Conn conn;

// main's own, destroyed by exit after main returns (every thread builds
// one: a translation unit's thread_locals are built together).
struct AtExit {
  bool in_main = false;
  ~AtExit() {
    if (in_main) std::printf("main's thread_local destroyed\n");
  }
};
static thread_local AtExit main_object;

static void serve(int id) {
  conn.id = id;
  conn.log = "conn " + std::to_string(id);
  for (int r = 0; r < 10; r++) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1 + id % 3));
    CHECK(conn.id == id && conn.log == "conn " + std::to_string(id),
          "its own object after a sleep");
    try {
      throw std::runtime_error("request " + std::to_string(id));
    } catch (const std::runtime_error &e) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
      CHECK(std::string(e.what()) == "request " + std::to_string(id),
            "a caught exception across a sleep");
    }
  }
}

int main() {
  main_object.in_main = true;
  std::vector<std::thread> ts;
  for (int i = 0; i < 8; i++) ts.emplace_back(serve, i);
  for (auto &t : ts) t.join();
  CHECK(constructed == 9, "one object per thread (main too)");
  CHECK(destroyed == 8, "each destroyed once at its thread's end");
  for (int i = 0; i < 8; i++)
    CHECK(destroyed_with[i] == 1, "destroyed with its own values");
  if (!failed) std::printf("all steps right\n");
  std::fflush(stdout);
  return failed != 0;
}
