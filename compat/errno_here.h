/* Force-included into every compat/ source (CMakeLists.txt). Not installed.
 *
 * compat reads errno before a wait and sets it after. glibc declares
 * __errno_location const, so the compiler may reuse the address it
 * returned before the wait; a fiber on a multi-thread executor (a thread
 * pool, a strand over one, an iof_run hop) may come back on another OS
 * thread, and would then write the errno of the thread it left. Here
 * every errno access computes the address from the thread pointer read
 * anew (an asm the compiler cannot reuse) plus errno's offset from it,
 * the same in every thread (libc's errno is in static TLS). */
#ifndef IOF_COMPAT_ERRNO_HERE_H
#define IOF_COMPAT_ERRNO_HERE_H

#include <errno.h>
#include <stddef.h>

#if defined(__GNUC__) && (defined(__x86_64__) || defined(__aarch64__))
__attribute__((visibility("hidden"))) extern ptrdiff_t iof__errno_off;
__attribute__((visibility("hidden"))) int *iof__errno_first(void);

static inline int *iof__errno_here(void) {
  char *tp;
#ifdef __x86_64__
  __asm__ volatile("movq %%fs:0, %0" : "=r"(tp) : : "memory");
#else
  __asm__ volatile("mrs %0, tpidr_el0" : "=r"(tp) : : "memory");
#endif
  ptrdiff_t off = __atomic_load_n(&iof__errno_off, __ATOMIC_RELAXED);
  return __builtin_expect(off != 0, 1) ? (int *)(tp + off) : iof__errno_first();
}

#undef errno
#define errno (*iof__errno_here())
#endif

#endif
