/* A module loaded with dlopen whose thread-locals are dynamic TLS (one
 * block per thread, made on first use through __tls_get_addr), as a
 * Python extension module's: gRPC keeps a pointer to the current
 * execution context, an object on the running thread's stack, in one.
 * Loaded by thread_locals_dlopen. */
#include <stddef.h>
#include <string.h>

static __thread int mod_id = -1;
static __thread char mod_name[48];
static __thread int *mod_ctx;

void tld_set(int id, const char *name) {
  mod_id = id;
  strncpy(mod_name, name, sizeof mod_name - 1);
}

int tld_id(void) {
  return mod_id;
}

const char *tld_name(void) {
  return mod_name;
}

/* Runs fn(arg) with *ctx as the thread's current context, as a scope
 * object would: set on entry, cleared on exit. What fn sees through
 * tld_ctx must stay ctx while other threads open and close theirs. */
int tld_with_ctx(int *ctx, int (*fn)(void *), void *arg) {
  int *outer = mod_ctx;
  mod_ctx = ctx;
  int r = fn(arg);
  mod_ctx = outer;
  return r;
}

int *tld_ctx(void) {
  return mod_ctx;
}
