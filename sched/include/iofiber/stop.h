/* iofiber: stop tokens (the C form of std::stop_source / stop_token /
 * stop_callback). Stop state is reference counted: the source holds one
 * reference, each launch that carries a token holds one for its chain's
 * life, and users who keep a token elsewhere retain/release it. */
#ifndef IOFIBER_STOP_H
#define IOFIBER_STOP_H

#include <stdbool.h>
#include <stdint.h>

#include <iofiber/frame_allocator.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct iof_stop_state iof_stop_state;

/* A token is a value (one pointer); a zero token is empty: never stops. */
typedef struct iof_stop_token {
  iof_stop_state *state;
} iof_stop_token;

typedef struct iof_stop_source {
  iof_stop_state *state;
} iof_stop_source;

/* Registration record; lives where the caller puts it (often on a fiber's
 * stack) until unregistered. Fields are private. */
typedef struct iof_stop_callback {
  struct iof_stop_callback *prev, *next;
  iof_stop_state *state;
  void (*fn)(void *arg);
  void *arg;
  int linked;
} iof_stop_callback;

/* Creates the shared state. 0; -EINVAL on NULL; -ENOMEM. */
IOF_API int iof_stop_source_init(iof_stop_source *src);

/* Drops the source's reference; tokens stay valid and keep reporting what
 * happened. Idempotent on an already destroyed (zeroed) source. */
IOF_API void iof_stop_source_destroy(iof_stop_source *src);

/* A token on the source's state (no reference taken: retain it to keep it
 * past the source). Empty token for a NULL or destroyed source. */
IOF_API iof_stop_token iof_stop_source_token(const iof_stop_source *src);

/* Requests a stop: runs every registered callback synchronously on this
 * thread. True only for the first request; false after, or on NULL. */
IOF_API bool iof_stop_source_request(iof_stop_source *src);

/* True once a stop was requested (false for an empty token). */
IOF_API bool iof_stop_requested(iof_stop_token tok);

/* False for an empty token, or when the source is gone without a request:
 * a stop can then never come. */
IOF_API bool iof_stop_possible(iof_stop_token tok);

/* Reference counting for tokens kept beyond the source's life. retain
 * returns the same token; both accept an empty token. */
IOF_API iof_stop_token iof_stop_token_retain(iof_stop_token tok);
IOF_API void iof_stop_token_release(iof_stop_token tok);

/* Registers fn(arg) to run when a stop is requested. If it already was,
 * fn runs at once, inside this call. Returns 0 when registered, 1 when fn
 * already ran, -EINVAL on NULL cb/fn (an empty token registers nothing and
 * returns 0: it can never fire), -EBUSY if cb is still registered on any
 * token (unregister it first). A record whose fn already ran is
 * unregistered first, as by iof_stop_callback_unregister. */
IOF_API int iof_stop_callback_register(iof_stop_callback *cb,
                                       iof_stop_token tok,
                                       void (*fn)(void *arg), void *arg);

/* Unregisters (a registration keeps the stop state alive until then). If
 * fn is running on another thread, waits until it returns;
 * if fn is unregistering itself, returns at once. Safe to call twice. */
IOF_API void iof_stop_callback_unregister(iof_stop_callback *cb);

#ifdef __cplusplus
}
#endif
#endif
