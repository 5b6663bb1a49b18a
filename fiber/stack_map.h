/* Page-level stack mappings shared by the mmap allocator and the pool. */
#ifndef IOF_STACK_MAP_H
#define IOF_STACK_MAP_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>

#include "fiber/fiber_internal.h"

/* Maps `size` usable bytes with a guard page right below the returned
 * address (a page-table guard marker where the kernel has them, else a
 * PROT_NONE page); pages are touched lazily. NULL with errno on failure. */
IOF_HIDDEN void *iof__stack_map(size_t size);
IOF_HIDDEN void iof__stack_unmap(void *base, size_t size);

/* True while a stack of its own may be mapped without eating into the
 * kernel's mapping limit: always with guard markers, else while fewer
 * than a quarter of vm.max_map_count stacks hold a PROT_NONE guard. */
IOF_HIDDEN bool iof__guard_budget_left(void);

/* A chunk of `bytes` (page multiple) for dense stacks: its first page is a
 * guard, the rest writable. NULL with errno ENOMEM. Never reused once
 * released (address space only). */
IOF_HIDDEN void *iof__dense_chunk(size_t bytes);
IOF_HIDDEN void iof__dense_chunk_release(void *chunk, size_t bytes);

/* True if p lies in a dense chunk (its stack has no guard page of its own
 * unless it is the chunk's lowest). */
IOF_HIDDEN bool iof__stack_is_dense(const void *p);

/* Dense reservations made so far (never decreases). */
IOF_HIDDEN extern atomic_int iof__dense_regions;

/* iof__stack_is_dense without a call while no process has dense stacks
 * (the usual case): what every fiber creation asks. */
static inline bool iof__stack_maybe_dense(const void *p) {
  return atomic_load_explicit(&iof__dense_regions, memory_order_relaxed) &&
         iof__stack_is_dense(p);
}

/* The stack pool's vtbl and its two entries, which the fiber layer calls
 * directly (no indirect call) for a pool's frames. allocate sets errno on
 * every failure. */
IOF_HIDDEN extern const iof_frame_allocator_vtbl iof__pool_vtbl;
IOF_HIDDEN void *iof__pool_allocate(iof_frame_allocator *pool, size_t size);
IOF_HIDDEN void iof__pool_deallocate(iof_frame_allocator *pool, void *base,
                                     size_t size);

/* vm.max_map_count, read once. */
IOF_HIDDEN size_t iof__max_map_count(void);

/* After a mapping failed with err: when the process is at the kernel's
 * mapping limit, says so once on stderr, naming vm.max_map_count. */
IOF_HIDDEN void iof__map_failed(int err);

#endif
