// The public headers used from C++17: every header compiles (each one
// alone in its own generated translation unit, and all through the
// umbrella here), the structs with atomic members have the layout the C
// library was built with, IOF_MUTEX_INIT and IOF_RWLOCK_INIT work, and a
// fiber runs through the io_context, a mutex, a read-write lock, a stream
// pipe and the buffered reader.
#include <iofiber/iofiber.h>

#include <cerrno>
#include <cstddef>
#include <cstdio>
#include <cstring>

extern "C" size_t iof_test_c_layout(int i);

static iof_mutex global_mutex = IOF_MUTEX_INIT;
static iof_rwlock global_rwlock = IOF_RWLOCK_INIT;

static int failures;
#define CHECK(c)                                                               \
  do {                                                                         \
    if (!(c)) {                                                                \
      std::fprintf(stderr, "cxx: check failed: %s (line %d)\n", #c, __LINE__); \
      failures++;                                                              \
    }                                                                          \
  } while (0)

struct work {
  iof_io_context *io;
  int lines = 0;
  int lock = -1;
  int rdlock = -1;
};

static int body(void *arg) {
  work *w = static_cast<work *>(arg);
  w->lock = iof_mutex_lock(&global_mutex);
  if (w->lock == 0) iof_mutex_unlock(&global_mutex);
  w->rdlock = iof_rwlock_rdlock(&global_rwlock);
  if (w->rdlock == 0) iof_rwlock_unlock(&global_rwlock);
  iof_stream *a = nullptr, *b = nullptr;
  if (iof_stream_pipe(w->io, &a, &b) < 0) return -1;
  const char text[] = "one\ntwo\n";
  iof_stream_write(a, text, sizeof text - 1);
  iof_stream_shutdown_write(a);
  iof_reader r;
  char buf[32];
  if (iof_reader_init(&r, b, buf, sizeof buf) == 0) {
    iof_bytes line;
    while (iof_reader_read_line(&r, &line) == 1) w->lines++;
    iof_reader_destroy(&r);
  }
  iof_stream_pipe_free(a);
  iof_stream_pipe_free(b);
  return 0;
}

int main() {
  CHECK(sizeof(iof_mutex) == iof_test_c_layout(0));
  CHECK(offsetof(iof_mutex, owner) == iof_test_c_layout(1));
  CHECK(offsetof(iof_mutex, lock) == iof_test_c_layout(2));
  CHECK(sizeof(iof_execution_context) == iof_test_c_layout(3));
  CHECK(offsetof(iof_execution_context, frame_allocator) ==
        iof_test_c_layout(4));
  CHECK(offsetof(iof_execution_context, kind) == iof_test_c_layout(5));
  CHECK(sizeof(iof_reader) == iof_test_c_layout(6));

  work w;
  w.io = iof_io_context_create();
  CHECK(w.io != nullptr);
  CHECK(iof_launch(iof_io_context_executor(w.io), body, &w) == 0);
  CHECK(iof_io_context_run(w.io) >= 1);
  CHECK(iof_io_context_destroy(w.io) == 0);
  CHECK(w.lock == 0);
  CHECK(w.rdlock == 0);
  CHECK(w.lines == 2);
  CHECK(std::strcmp(iof_strerror(IOF_EAI_NONAME), "unknown error") != 0);
  CHECK(iof_mutex_destroy(&global_mutex) == 0);
  CHECK(iof_rwlock_destroy(&global_rwlock) == 0);
  if (failures) return 1;
  std::puts("cxx ok");
  return 0;
}
