/* A frame allocator wrapper that counts what passes through it: the way a
 * test proves which allocator every fiber of a chain came from. */
#include "fiber/fiber_internal.h"

#include <errno.h>
#include <stdatomic.h>
#include <stdlib.h>

typedef struct tracking {
  iof_frame_allocator base;
  iof_frame_allocator *inner;
  atomic_size_t live, live_bytes, total, freed;
} tracking;

static void *tracking_allocate(iof_frame_allocator *self, size_t size) {
  tracking *t = (tracking *)self;
  void *p = t->inner->vtbl->allocate(t->inner, size);
  if (!p) return NULL;
  atomic_fetch_add_explicit(&t->live, 1, memory_order_relaxed);
  atomic_fetch_add_explicit(&t->live_bytes, size, memory_order_relaxed);
  atomic_fetch_add_explicit(&t->total, 1, memory_order_relaxed);
  return p;
}

static void tracking_deallocate(iof_frame_allocator *self, void *p,
                                size_t size) {
  tracking *t = (tracking *)self;
  t->inner->vtbl->deallocate(t->inner, p, size);
  atomic_fetch_sub_explicit(&t->live_bytes, size, memory_order_relaxed);
  atomic_fetch_add_explicit(&t->freed, 1, memory_order_relaxed);
  /* Last, with release: whoever sees live reach 0 (and may destroy t)
   * sees this call done with t. */
  atomic_fetch_sub_explicit(&t->live, 1, memory_order_release);
}

static const iof_frame_allocator_vtbl tracking_vtbl = {tracking_allocate,
                                                       tracking_deallocate};

iof_frame_allocator *iof_tracking_allocator_create(iof_frame_allocator *inner) {
  /* Checked now: the first allocation would call through NULL. */
  if (inner &&
      (!inner->vtbl || !inner->vtbl->allocate || !inner->vtbl->deallocate)) {
    errno = EINVAL;
    return NULL;
  }
  tracking *t = calloc(1, sizeof *t);
  if (!t) {
    errno = ENOMEM;
    return NULL;
  }
  t->base.vtbl = &tracking_vtbl;
  t->inner = inner ? inner : iof_default_frame_allocator();
  return &t->base;
}

int iof_tracking_allocator_stats(iof_frame_allocator *a,
                                 iof_tracking_stats *out) {
  if (!a || a->vtbl != &tracking_vtbl || !out) return -EINVAL;
  tracking *t = (tracking *)a;
  out->live = atomic_load_explicit(&t->live, memory_order_acquire);
  out->live_bytes = atomic_load(&t->live_bytes);
  out->total = atomic_load(&t->total);
  out->freed = atomic_load(&t->freed);
  return 0;
}

int iof_tracking_allocator_destroy(iof_frame_allocator *a) {
  if (!a || a->vtbl != &tracking_vtbl) return -EINVAL;
  tracking *t = (tracking *)a;
  if (atomic_load(&t->live)) return -EBUSY;
  free(t);
  return 0;
}
