/* Page-level stack mappings shared by the mmap allocator and the pool. */
#ifndef IOF_STACK_MAP_H
#define IOF_STACK_MAP_H

#include <stddef.h>

#include "fiber/fiber_internal.h"

/* Maps `size` usable bytes with a PROT_NONE guard page right below the
 * returned address; pages are touched lazily. NULL with errno on failure. */
IOF_HIDDEN void *iof__stack_map(size_t size);
IOF_HIDDEN void iof__stack_unmap(void *base, size_t size);

#endif
