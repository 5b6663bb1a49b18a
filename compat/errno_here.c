/* errno's offset from the thread pointer (see errno_here.h). */
#include "compat/errno_here.h"

#if defined(__GNUC__) && (defined(__x86_64__) || defined(__aarch64__))
ptrdiff_t iof__errno_off;

int *iof__errno_first(void) {
  int *p = __errno_location();
  /* Racing first callers store the same value. */
  __atomic_store_n(&iof__errno_off,
                   (char *)p - (char *)__builtin_thread_pointer(),
                   __ATOMIC_RELAXED);
  return p;
}
#endif
