/* Fiber-local storage: a per-fiber table, allocated on first set, indexed
 * by key; a generation per slot makes values of a deleted key invisible. */
#include "fiber/fiber_internal.h"

#include <iofiber/fls.h>

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>

#define DESTRUCTOR_ROUNDS 4

typedef struct fls_table {
  uint32_t gen[IOF_FLS_KEYS_MAX];
  void *val[IOF_FLS_KEYS_MAX];
} fls_table;

static struct {
  _Atomic uint32_t gen; /* odd: live */
  void (*_Atomic dtor)(void *);
} keys[IOF_FLS_KEYS_MAX];
static pthread_mutex_t keys_lock = PTHREAD_MUTEX_INITIALIZER;

static int live(iof_fls_key k) {
  return k.index < IOF_FLS_KEYS_MAX && (k.gen & 1) &&
         atomic_load_explicit(&keys[k.index].gen, memory_order_acquire) ==
             k.gen;
}

int iof_fls_key_create(iof_fls_key *key, void (*destructor)(void *)) {
  if (!key) return -EINVAL;
  pthread_mutex_lock(&keys_lock);
  for (uint32_t i = 0; i < IOF_FLS_KEYS_MAX; i++) {
    uint32_t g = atomic_load_explicit(&keys[i].gen, memory_order_relaxed);
    if (g & 1) continue;
    atomic_store_explicit(&keys[i].dtor, destructor, memory_order_relaxed);
    atomic_store_explicit(&keys[i].gen, g + 1, memory_order_release);
    pthread_mutex_unlock(&keys_lock);
    key->index = i;
    key->gen = g + 1;
    return 0;
  }
  pthread_mutex_unlock(&keys_lock);
  return -EAGAIN;
}

int iof_fls_key_delete(iof_fls_key key) {
  pthread_mutex_lock(&keys_lock);
  int ok = live(key);
  if (ok)
    atomic_store_explicit(&keys[key.index].gen, key.gen + 1,
                          memory_order_release);
  pthread_mutex_unlock(&keys_lock);
  return ok ? 0 : -EINVAL;
}

void *iof_fls_get(iof_fls_key key) {
  if (!live(key)) return NULL;
  fls_table *t = iof__thread()->current->fls;
  return t && t->gen[key.index] == key.gen ? t->val[key.index] : NULL;
}

int iof_fls_set(iof_fls_key key, void *value) {
  if (!live(key)) return -EINVAL;
  iof_fiber *f = iof__thread()->current;
  fls_table *t = f->fls;
  if (!t) {
    if (!value) return 0;
    t = calloc(1, sizeof *t);
    if (!t) return -ENOMEM;
    f->fls = t;
  }
  t->gen[key.index] = key.gen;
  t->val[key.index] = value;
  return 0;
}

void iof__fls_run_destructors(iof_fiber *f) {
  fls_table *t = f->fls;
  /* Destructors may set values again (as with pthread keys): a few rounds. */
  for (int round = 0; t && round < DESTRUCTOR_ROUNDS; round++) {
    int again = 0;
    for (uint32_t i = 0; i < IOF_FLS_KEYS_MAX; i++) {
      void *v = t->val[i];
      if (!v) continue;
      t->val[i] = NULL;
      iof_fls_key k = {i, t->gen[i]};
      void (*d)(void *) =
          atomic_load_explicit(&keys[i].dtor, memory_order_relaxed);
      if (live(k) && d) {
        d(v);
        again = 1;
      }
    }
    if (!again) break;
  }
  f->fls = NULL;
  free(t);
}
