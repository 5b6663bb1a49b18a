/* Stack mappings with a guard page, dense chunks for kernels that make a
 * guard page cost a memory mapping, and the two simplest frame allocators.
 *
 * A PROT_NONE guard splits a mapping: every stack then costs two of the
 * kernel's memory mappings (vm.max_map_count, 65530 by default), which caps
 * a process near 32,000 stacks. Linux 6.13 and later install guard pages
 * as page-table markers (MADV_GUARD_INSTALL) instead: no mapping is split,
 * neighbouring stacks merge into one mapping, and every stack keeps a real
 * guard page. On older kernels stacks keep a PROT_NONE guard each while a
 * process-wide budget lasts (a quarter of vm.max_map_count); past it pools
 * carve stacks from chunks with one guard page per chunk, and fibers on
 * those stacks are checked in software at every switch (fiber.c). */
#include "fiber/stack_map.h"
#include "fiber/sanitizer.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

#ifndef MADV_GUARD_INSTALL
#define MADV_GUARD_INSTALL 102
#endif

/* 1: the kernel installs guard markers; 0: it does not; -1: not probed. */
static atomic_int light_guards = -1;
/* Live stacks holding a PROT_NONE guard (two mappings each). */
static atomic_size_t split_stacks;

static size_t read_size_file(const char *path, size_t dflt) {
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return dflt;
  char buf[32];
  ssize_t n = read(fd, buf, sizeof buf - 1);
  close(fd);
  if (n <= 0) return dflt;
  buf[n] = '\0';
  char *end;
  unsigned long long v = strtoull(buf, &end, 10);
  return end == buf ? dflt : (size_t)v;
}

size_t iof__max_map_count(void) {
  static atomic_size_t cached;
  size_t v = atomic_load_explicit(&cached, memory_order_relaxed);
  if (!v) {
    v = read_size_file("/proc/sys/vm/max_map_count", 65530);
    atomic_store_explicit(&cached, v, memory_order_relaxed);
  }
  return v;
}

static size_t count_maps(void) {
  int fd = open("/proc/self/maps", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return 0;
  char buf[4096];
  size_t lines = 0;
  ssize_t n;
  while ((n = read(fd, buf, sizeof buf)) > 0)
    for (ssize_t i = 0; i < n; i++) lines += buf[i] == '\n';
  close(fd);
  return lines;
}

void iof__map_failed(int err) {
  if (err != ENOMEM) return;
  /* Read only now: a failure is the rare case worth two file reads. */
  size_t max = iof__max_map_count(), have = count_maps();
  if (!have || have + 8 < max) return;
  static atomic_bool told;
  if (atomic_exchange(&told, true)) return;
  fprintf(stderr,
          "iofiber: cannot map a fiber stack: the process has %zu memory "
          "mappings, the kernel's limit vm.max_map_count is %zu "
          "(raise it with sysctl vm.max_map_count=N, or see the stack pool's "
          "guard modes); -ENOMEM\n",
          have, max);
}

static bool install_guard(char *m, size_t page) {
  int lg = atomic_load_explicit(&light_guards, memory_order_relaxed);
  if (lg != 0) {
    if (madvise(m, page, MADV_GUARD_INSTALL) == 0) {
      if (lg < 0) atomic_store(&light_guards, 1);
      return true;
    }
    if (errno != EINVAL) return false;
    atomic_store(&light_guards, 0);
  }
  if (mprotect(m, page, PROT_NONE) != 0) return false;
  atomic_fetch_add_explicit(&split_stacks, 1, memory_order_relaxed);
  return true;
}

bool iof__guard_budget_left(void) {
  if (atomic_load_explicit(&light_guards, memory_order_relaxed) != 0)
    return true; /* unknown yet, or free: the next map finds out */
  return atomic_load_explicit(&split_stacks, memory_order_relaxed) <
         iof__max_map_count() / 4;
}

void *iof__stack_map(size_t size) {
  size_t page = iof__page_size();
  /* Callers round size up to pages: a wrapped huge request arrives as 0
   * (or near SIZE_MAX), and must fail rather than map a bare guard page. */
  if (size == 0 || size > SIZE_MAX / 2) {
    errno = ENOMEM;
    return NULL;
  }
  /* One mapping, guard included, so the guard can never be unmapped apart
   * from its stack; MAP_NORESERVE because most stacks stay mostly unused.
   * No huge pages: with light guards stacks merge into large mappings, and
   * a 2 MiB page would make each idle stack resident. */
  char *m =
      mmap(NULL, size + page, PROT_READ | PROT_WRITE,
           MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_STACK, -1, 0);
  if (m == MAP_FAILED) {
    iof__map_failed(errno);
    return NULL;
  }
  (void)madvise(m, size + page, MADV_NOHUGEPAGE);
  if (!install_guard(m, page)) {
    int e = errno;
    munmap(m, size + page);
    iof__map_failed(e);
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
  if (atomic_load_explicit(&light_guards, memory_order_relaxed) == 0)
    atomic_fetch_sub_explicit(&split_stacks, 1, memory_order_relaxed);
  munmap((char *)base - page, size + page);
}

/* ---- dense chunks ------------------------------------------------------
 * Chunks come from large PROT_NONE reservations: a chunk's first page stays
 * PROT_NONE (its guard), the rest is made writable. Reservations are never
 * given back, so "is this stack dense" is a range test. */

#define MAX_REGIONS 16
#define REGION_BYTES ((size_t)64 << 30)

static pthread_mutex_t region_lock = PTHREAD_MUTEX_INITIALIZER;
static struct { char *lo, *hi; } regions[MAX_REGIONS];
atomic_int iof__dense_regions;
static char *region_cur; /* bump pointer in the last region (lock) */

bool iof__stack_is_dense(const void *p) {
  int n = atomic_load_explicit(&iof__dense_regions, memory_order_acquire);
  for (int i = 0; i < n; i++)
    if ((const char *)p >= regions[i].lo && (const char *)p < regions[i].hi)
      return true;
  return false;
}

static bool new_region(size_t need) {
  int n = atomic_load_explicit(&iof__dense_regions, memory_order_relaxed);
  if (n == MAX_REGIONS) return false;
  /* Address space only; a tight RLIMIT_AS gets a smaller one. */
  for (size_t len = REGION_BYTES; len >= need; len /= 2) {
    char *m = mmap(NULL, len, PROT_NONE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (m == MAP_FAILED) {
      if (errno != ENOMEM) return false;
      continue;
    }
    (void)madvise(m, len, MADV_NOHUGEPAGE);
    regions[n].lo = m;
    regions[n].hi = m + len;
    region_cur = m;
    atomic_store_explicit(&iof__dense_regions, n + 1, memory_order_release);
    return true;
  }
  return false;
}

void *iof__dense_chunk(size_t bytes) {
  size_t page = iof__page_size();
  pthread_mutex_lock(&region_lock);
  int n = atomic_load_explicit(&iof__dense_regions, memory_order_relaxed);
  if ((!n || (size_t)(regions[n - 1].hi - region_cur) < bytes) &&
      !new_region(bytes)) {
    pthread_mutex_unlock(&region_lock);
    iof__map_failed(ENOMEM);
    errno = ENOMEM;
    return NULL;
  }
  char *c = region_cur;
  if (mprotect(c + page, bytes - page, PROT_READ | PROT_WRITE) != 0) {
    int e = errno;
    pthread_mutex_unlock(&region_lock);
    iof__map_failed(e);
    errno = ENOMEM;
    return NULL;
  }
  region_cur += bytes;
  pthread_mutex_unlock(&region_lock);
  return c;
}

void iof__dense_chunk_release(void *chunk, size_t bytes) {
  size_t page = iof__page_size();
#ifdef IOF_ASAN
  __asan_unpoison_memory_region((char *)chunk + page, bytes - page);
#endif
  /* Back to PROT_NONE: it merges into the reservation again. The address
   * range is not reused (the reservation is a bump allocator). */
  (void)madvise((char *)chunk + page, bytes - page, MADV_DONTNEED);
  (void)mprotect((char *)chunk + page, bytes - page, PROT_NONE);
}

/* ---- the mmap and malloc allocators ------------------------------------ */

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
