/* The table of libc entry points (see libc.h). */
#include "fiber/libc.h"

#include <dlfcn.h>
#include <stdatomic.h>
#include <sys/ioctl.h>
#include <fcntl.h>

iof__libc_fns iof__libc;

static atomic_int state; /* 0 empty, 1 filling, 2 ready */
static bool hooked;

/* The ordinary symbols: what the program would call itself. */
#define PLAIN(ret, name, params) t.name = name;

static void fill_plain(iof__libc_fns *tp) {
  iof__libc_fns t;
  IOF__LIBC_CALLS(PLAIN)
  *tp = t;
}
#undef PLAIN

/* Straight from libc.so.6: a handle lookup never sees an interposer,
 * whatever the load order. Rows libc lacks keep their plain value. */
#define FROM_LIBC(ret, name, params)                                           \
  {                                                                            \
    void *p = dlsym(h, #name);                                                 \
    if (p) *(void **)&tp->name = p;                                            \
  }

static void fill_from_libc(iof__libc_fns *tp) {
  void *h = dlopen("libc.so.6", RTLD_LAZY | RTLD_NOLOAD);
  if (!h) return;
  IOF__LIBC_CALLS(FROM_LIBC)
  /* The handle is kept (libc is never unloaded): dlclose here would be the
   * hook's, which needs this table. */
}
#undef FROM_LIBC

void iof__libc_init(void) {
  int s = atomic_load_explicit(&state, memory_order_acquire);
  if (s == 2) return;
  int expect = 0;
  if (!atomic_compare_exchange_strong(&state, &expect, 1)) {
    while (atomic_load_explicit(&state, memory_order_acquire) != 2)
      ;
    return;
  }
  iof__libc_fns t;
  fill_plain(&t);
  hooked = dlsym(RTLD_DEFAULT, "iof_hook_version") != NULL;
  if (hooked) fill_from_libc(&t);
  iof__libc = t;
  atomic_store_explicit(&state, 2, memory_order_release);
}

bool iof__libc_hooked(void) {
  iof__libc_init();
  return hooked;
}

__attribute__((constructor(101))) static void libc_ctor(void) {
  iof__libc_init();
}
