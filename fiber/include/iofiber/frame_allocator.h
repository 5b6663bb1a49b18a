/* iofiber: frame allocators. A frame is one fiber's stack plus its control
 * block, allocated in one piece (the C analogue of a coroutine frame). */
#ifndef IOFIBER_FRAME_ALLOCATOR_H
#define IOFIBER_FRAME_ALLOCATOR_H

#include <stddef.h>
#include <stdint.h>

/* An atomic member of a public struct. C++ (17 and later) has no _Atomic
 * before C++23: there the member is a std::atomic of the same size and
 * alignment (checked below), so C and C++ code agree on the layout. */
#ifdef __cplusplus
#include <atomic>
#define IOF_ATOMIC(T) std::atomic<T>
static_assert(sizeof(std::atomic<int>) == sizeof(int) &&
                  alignof(std::atomic<int>) == alignof(int),
              "std::atomic<int> must match _Atomic int");
static_assert(sizeof(std::atomic<void *>) == sizeof(void *) &&
                  alignof(std::atomic<void *>) == alignof(void *),
              "std::atomic<void *> must match _Atomic(void *)");
#else
#include <stdatomic.h>
#define IOF_ATOMIC(T) _Atomic(T)
#endif

#ifdef __cplusplus
extern "C" {
#endif

#if defined(IOF_BUILDING)
#define IOF_API __attribute__((visibility("default")))
#else
#define IOF_API
#endif

typedef struct iof_frame_allocator iof_frame_allocator;

/* allocate returns `size` usable bytes (page aligned for the stack
 * allocators) or NULL with errno set (ENOMEM). deallocate takes back a
 * frame with the size it was allocated with; it may run on any thread. */
typedef struct iof_frame_allocator_vtbl {
  void *(*allocate)(iof_frame_allocator *self, size_t size);
  void (*deallocate)(iof_frame_allocator *self, void *p, size_t size);
} iof_frame_allocator_vtbl;

/* Embed this as the first member of your allocator object. */
struct iof_frame_allocator {
  const iof_frame_allocator_vtbl *vtbl;
};

/* The process-wide default frame allocator: a stack pool with default
 * options (64 KiB stacks, IOF_STACK_GUARD_AUTO). Never NULL. */
IOF_API iof_frame_allocator *iof_default_frame_allocator(void);

/* Fresh mmap + guard page on every allocation, munmap on free: the
 * baseline the pool must beat. A static object; never NULL. */
IOF_API iof_frame_allocator *iof_mmap_allocator(void);

/* malloc/free, no guard page (overflows are not detected). Never NULL. */
IOF_API iof_frame_allocator *iof_malloc_allocator(void);

/* ---- Recycling stack pool ------------------------------------------- */

typedef struct iof_stack_pool iof_stack_pool;

/* How a pool's stacks are guarded (see iof_stack_pool_options.guard). A
 * guard page costs the kernel two memory mappings per stack, out of
 * vm.max_map_count (65530 by default), unless the kernel has guard markers
 * (Linux 6.13+), which cost none. */
enum iof_stack_guard {
  /* A guard page under every stack; on kernels without guard markers only
   * while the process's stacks hold fewer than a quarter of
   * vm.max_map_count guard pages, then dense chunks (below). */
  IOF_STACK_GUARD_AUTO = 0,
  /* Always a guard page of its own: on old kernels launches fail with
   * ENOMEM near 32,000 live stacks (a line on stderr names the limit). */
  IOF_STACK_GUARD_PAGE = 1,
  /* Dense chunks: stacks carved side by side from 2 MiB chunks with one
   * guard page per chunk; the other stacks are checked in software at
   * every switch out of their fiber (stack pointer and a 64-byte zone at
   * the stack's bottom that must stay zero): an overflow is reported at
   * the fiber's next switch instead of at the faulting access, or when it
   * reaches its chunk's guard page, whichever comes first. */
  IOF_STACK_GUARD_CHUNK = 2
};

typedef struct iof_stack_pool_options {
  size_t stack_size;   /* bytes per cached stack; 0: 64 KiB. Rounded to pages */
  size_t thread_cache; /* stacks kept per thread; 0: 16 */
  size_t depot_max;    /* stacks kept in the shared depot; 0: 256 */
  size_t budget;       /* max bytes of live frames; 0: unlimited */
  int guard;           /* enum iof_stack_guard; 0: AUTO */
} iof_stack_pool_options;

/* A struct tag only (as struct stat / stat()): the function has the name. */
struct iof_stack_pool_stats {
  size_t live;       /* frames handed out and not yet returned */
  size_t cached;     /* stacks kept for reuse (thread caches + depot) */
  size_t allocated;  /* successful allocations since creation */
  size_t peak;       /* highest `live` seen: exact while only the first
                        thread that used the pool allocates; other
                        threads' counts join it every 32 frames, so it
                        may miss up to 31 per other thread */
  size_t mapped;     /* stacks currently mapped from the OS (live+cached) */
  size_t failed;     /* allocations refused (budget or ENOMEM) */
  size_t live_bytes; /* bytes of live frames (what the budget counts) */
  size_t dense;      /* of `mapped`, stacks carved from dense chunks */
};

/* Creates a pool: per-thread caches (no lock on the fast path) in front of
 * a shared depot; stacks guarded as opts->guard says. Stacks that stay in
 * the depot unused for 100 ms give their pages back to the OS at its next
 * use, and a thread's cache gives them back when the thread exits. opts
 * may be NULL. Requests larger than the pool's stack size are mapped and
 * unmapped directly (still counted). Returns NULL with errno EINVAL (absurd
 * sizes) or ENOMEM. */
IOF_API iof_stack_pool *
iof_stack_pool_create(const iof_stack_pool_options *opts);

/* Frees every cached stack and the pool. -EBUSY (and nothing freed) while
 * frames are live; -EINVAL on NULL. No thread may use the pool meanwhile. */
IOF_API int iof_stack_pool_destroy(iof_stack_pool *pool);

/* The pool as a frame allocator (the same object; never NULL for a pool). */
IOF_API iof_frame_allocator *iof_stack_pool_allocator(iof_stack_pool *pool);

/* Fills *out with a snapshot. 0, or -EINVAL on NULL. */
IOF_API int iof_stack_pool_stats(iof_stack_pool *pool,
                                 struct iof_stack_pool_stats *out);

/* ---- Tracking allocator --------------------------------------------- */

typedef struct iof_tracking_stats {
  size_t live; /* frames allocated and not yet freed */
  size_t live_bytes;
  size_t total; /* successful allocations since creation */
  size_t freed; /* deallocations since creation */
} iof_tracking_stats;

/* Wraps `inner` (NULL: the default allocator) and counts live frames and
 * bytes; thread safe. Returns NULL with errno EINVAL (inner's vtbl or one
 * of its slots is NULL) or ENOMEM. */
IOF_API iof_frame_allocator *
iof_tracking_allocator_create(iof_frame_allocator *inner);

/* 0, or -EINVAL if `a` is not a tracking allocator. */
IOF_API int iof_tracking_allocator_stats(iof_frame_allocator *a,
                                         iof_tracking_stats *out);

/* Frees the wrapper. -EBUSY while frames are live, -EINVAL if not one. */
IOF_API int iof_tracking_allocator_destroy(iof_frame_allocator *a);

#ifdef __cplusplus
}
#endif
#endif
