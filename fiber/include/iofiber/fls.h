/* iofiber: fiber-local storage. A value set in a fiber follows it across
 * threads (thread_local does not once fibers migrate); its destructor runs
 * when the fiber ends. Outside fibers the calls act on the calling thread,
 * whose destructors run at thread exit. */
#ifndef IOFIBER_FLS_H
#define IOFIBER_FLS_H

#include <stdint.h>

#include <iofiber/frame_allocator.h>

#ifdef __cplusplus
extern "C" {
#endif

#define IOF_FLS_KEYS_MAX 1024 /* = PTHREAD_KEYS_MAX */

typedef struct iof_fls_key {
  uint32_t index;
  uint32_t gen; /* 0 never names a live key */
} iof_fls_key;

/* Creates a key; `destructor` (may be NULL) is called with each non-NULL
 * value when its fiber (or thread) ends. 0; -EINVAL on NULL key; -EAGAIN
 * when IOF_FLS_KEYS_MAX keys exist. */
IOF_API int iof_fls_key_create(iof_fls_key *key, void (*destructor)(void *));

/* Deletes a key; values still set are dropped without their destructor
 * (as pthread_key_delete). 0, or -EINVAL for a key that is not live. */
IOF_API int iof_fls_key_delete(iof_fls_key key);

/* The running fiber's (or thread's) value; NULL if unset or key invalid. */
IOF_API void *iof_fls_get(iof_fls_key key);

/* Sets the value. 0; -EINVAL for a dead key; -ENOMEM (the first value of
 * a fiber allocates its table). */
IOF_API int iof_fls_set(iof_fls_key key, void *value);

#ifdef __cplusplus
}
#endif
#endif
