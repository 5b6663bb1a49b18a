/* Stack mappings with a guard page, and the two simplest frame allocators. */
#include "fiber/stack_map.h"
#include "fiber/sanitizer.h"

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/mman.h>

void *iof__stack_map(size_t size) {
  size_t page = iof__page_size();
  /* Callers round size up to pages: a wrapped huge request arrives as 0
   * (or near SIZE_MAX), and must fail rather than map a bare guard page. */
  if (size == 0 || size > SIZE_MAX / 2) {
    errno = ENOMEM;
    return NULL;
  }
  /* One mapping, guard included, so the guard can never be unmapped apart
   * from its stack; MAP_NORESERVE because most stacks stay mostly unused. */
  char *m =
      mmap(NULL, size + page, PROT_READ | PROT_WRITE,
           MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_STACK, -1, 0);
  if (m == MAP_FAILED) return NULL;
  if (mprotect(m, page, PROT_NONE) != 0) {
    int e = errno;
    munmap(m, size + page);
    errno = e;
    return NULL;
  }
  return m + page;
}

void iof__stack_unmap(void *base, size_t size) {
  size_t page = iof__page_size();
#ifdef IOF_ASAN
  /* A pooled stack may be poisoned; the next mapping here must not be. */
  __asan_unpoison_memory_region(base, size);
#endif
  munmap((char *)base - page, size + page);
}

static void *mmap_allocate(iof_frame_allocator *self, size_t size) {
  (void)self;
  if (size == 0) {
    errno = EINVAL;
    return NULL;
  }
  size_t page = iof__page_size();
  return iof__stack_map((size + page - 1) & ~(page - 1));
}

static void mmap_deallocate(iof_frame_allocator *self, void *p, size_t size) {
  (void)self;
  size_t page = iof__page_size();
  if (p) iof__stack_unmap(p, (size + page - 1) & ~(page - 1));
}

static const iof_frame_allocator_vtbl mmap_vtbl = {mmap_allocate,
                                                   mmap_deallocate};
static iof_frame_allocator mmap_alloc = {&mmap_vtbl};

iof_frame_allocator *iof_mmap_allocator(void) {
  return &mmap_alloc;
}

static void *malloc_allocate(iof_frame_allocator *self, size_t size) {
  (void)self;
  if (size == 0) {
    errno = EINVAL;
    return NULL;
  }
  /* No object can be that large; sanitizer runtimes abort instead of
   * returning NULL for such a request. */
  if (size > SIZE_MAX / 2) {
    errno = ENOMEM;
    return NULL;
  }
  void *p = malloc(size);
  if (!p) errno = ENOMEM;
  return p;
}

static void malloc_deallocate(iof_frame_allocator *self, void *p, size_t size) {
  (void)self;
  (void)size;
  free(p);
}

static const iof_frame_allocator_vtbl malloc_vtbl = {malloc_allocate,
                                                     malloc_deallocate};
static iof_frame_allocator malloc_alloc = {&malloc_vtbl};

iof_frame_allocator *iof_malloc_allocator(void) {
  return &malloc_alloc;
}
