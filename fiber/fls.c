/* Fiber-local storage: a per-fiber table, allocated on first set, indexed
 * by key; a generation per slot makes values of a deleted key invisible.
 * The table only grows to the highest key the fiber sets (keys are handed
 * out lowest first), so 1024 possible keys cost a fiber that uses two of
 * them a few dozen bytes. */
#include "fiber/fiber_internal.h"

#include <iofiber/fls.h>

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>

#define DESTRUCTOR_ROUNDS 4

typedef struct fls_slot {
  uint32_t gen;
  void *val;
} fls_slot;

typedef struct fls_table {
  uint32_t cap;
  fls_slot s[];
} fls_table;

static struct {
  _Atomic uint32_t gen; /* odd: live */
  void (*_Atomic dtor)(void *);
} keys[IOF_FLS_KEYS_MAX];
/* A spin lock, not a pthread mutex: libiofiber-hook routes
 * pthread_key_create here, and allocators (jemalloc) create keys from their
 * first malloc, which may come from another library's constructor before
 * libiofiber's own filled the libc table a pthread mutex would go through.
 * Held for a short scan of the key table, rarely contended. */
static atomic_flag keys_lock = ATOMIC_FLAG_INIT;

static void keys_lock_acquire(void) {
  while (atomic_flag_test_and_set_explicit(&keys_lock, memory_order_acquire))
    ;
}

static void keys_lock_release(void) {
  atomic_flag_clear_explicit(&keys_lock, memory_order_release);
}

static int live(iof_fls_key k) {
  return k.index < IOF_FLS_KEYS_MAX && (k.gen & 1) &&
         atomic_load_explicit(&keys[k.index].gen, memory_order_acquire) ==
             k.gen;
}

int iof_fls_key_create(iof_fls_key *key, void (*destructor)(void *)) {
  if (!key) return -EINVAL;
  keys_lock_acquire();
  for (uint32_t i = 0; i < IOF_FLS_KEYS_MAX; i++) {
    uint32_t g = atomic_load_explicit(&keys[i].gen, memory_order_relaxed);
    if (g & 1) continue;
    atomic_store_explicit(&keys[i].dtor, destructor, memory_order_relaxed);
    atomic_store_explicit(&keys[i].gen, g + 1, memory_order_release);
    keys_lock_release();
    key->index = i;
    key->gen = g + 1;
    return 0;
  }
  keys_lock_release();
  return -EAGAIN;
}

int iof_fls_key_delete(iof_fls_key key) {
  keys_lock_acquire();
  int ok = live(key);
  if (ok)
    atomic_store_explicit(&keys[key.index].gen, key.gen + 1,
                          memory_order_release);
  keys_lock_release();
  return ok ? 0 : -EINVAL;
}

void *iof_fls_get(iof_fls_key key) {
  if (!live(key)) return NULL;
  /* A thread without fiber state has set nothing: do not create it. */
  iof_thread_state *th = iof__thread_peek();
  fls_table *t = th ? th->current->fls : NULL;
  return t && key.index < t->cap && t->s[key.index].gen == key.gen
             ? t->s[key.index].val
             : NULL;
}

int iof_fls_set(iof_fls_key key, void *value) {
  if (!live(key)) return -EINVAL;
  iof_fiber *f = iof__thread()->current;
  fls_table *t = f->fls;
  if (!t || key.index >= t->cap) {
    if (!value) return 0;
    uint32_t cap = t ? t->cap : 0, ncap = 8;
    while (ncap <= key.index) ncap *= 2;
    fls_table *n = realloc(t, sizeof *t + ncap * sizeof(fls_slot));
    if (!n) return -ENOMEM;
    for (uint32_t i = cap; i < ncap; i++) n->s[i] = (fls_slot){0, NULL};
    n->cap = ncap;
    f->fls = t = n;
  }
  t->s[key.index].gen = key.gen;
  t->s[key.index].val = value;
  return 0;
}

/* The live key at `index` (for pthread_key_t, which has no room for the
 * generation); {index, 0} names no live key. */
iof_fls_key iof__fls_key_at(uint32_t index) {
  iof_fls_key k = {index, 0};
  if (index < IOF_FLS_KEYS_MAX) {
    uint32_t g = atomic_load_explicit(&keys[index].gen, memory_order_acquire);
    if (g & 1) k.gen = g;
  }
  return k;
}

void iof__fls_run_destructors(iof_fiber *f) {
  /* Destructors may set values again (as with pthread keys): a few rounds.
   * A set may also grow (move) the table: re-read it after each call. */
  for (int round = 0; f->fls && round < DESTRUCTOR_ROUNDS; round++) {
    int again = 0;
    for (uint32_t i = 0; i < ((fls_table *)f->fls)->cap; i++) {
      fls_table *t = f->fls;
      void *v = t->s[i].val;
      if (!v) continue;
      t->s[i].val = NULL;
      iof_fls_key k = {i, t->s[i].gen};
      void (*d)(void *) =
          atomic_load_explicit(&keys[i].dtor, memory_order_relaxed);
      if (live(k) && d) {
        d(v);
        again = 1;
      }
    }
    if (!again) break;
  }
  free(f->fls);
  f->fls = NULL;
}
