// Consumer check in C++17: the installed headers compile as C++ and a
// fiber runs through the installed library.
#include <iofiber/iofiber.h>

#include <cstdio>

static int fn(void *arg) {
  int *x = static_cast<int *>(arg);
  *x += 1;
  iof_fiber_suspend();
  *x += 1;
  return 7;
}

int main() {
  int x = 0;
  iof_fiber *f = iof_fiber_create(nullptr, 0, fn, &x);
  if (!f) return 1;
  while (!iof_fiber_done(f)) iof_fiber_resume(f);
  bool ok = x == 2 && iof_fiber_status(f) == 7;
  iof_fiber_destroy(f);
  std::puts(ok ? "consumer c++ ok" : "consumer c++ FAILED");
  return ok ? 0 : 1;
}
