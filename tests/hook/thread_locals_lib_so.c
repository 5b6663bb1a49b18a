/* A library with per-thread state of its own, as a program's own library
 * keeps it (named's libisc: the loop thread's index; ruby's libruby: the
 * running execution context). Linked into thread_locals_lib. */
#include <string.h>

static __thread int lib_id = -1;
static __thread char lib_name[48];

void tll_set(int id, const char *name) {
  lib_id = id;
  strncpy(lib_name, name, sizeof lib_name - 1);
}

int tll_id(void) {
  return lib_id;
}

const char *tll_name(void) {
  return lib_name;
}
