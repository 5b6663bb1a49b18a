/* iofiber: libiofiber-hook's own entry points (link iofiber::hook or
 * pkg-config iofiber-hook; under iofiber-run look them up with dlsym). */
#ifndef IOFIBER_HOOK_H
#define IOFIBER_HOOK_H

#ifdef __cplusplus
extern "C" {
#endif

/* The hook's version string ("0.1.0"); its presence in a process is what
 * the runtime checks to bypass the interposers for its own calls. */
__attribute__((visibility("default"))) const char *iof_hook_version(void);

/* The per-call counters (counted only when IOF_HOOK_VERBOSE is set):
 * out[0] calls made by fibers that went to the fiber layer, out[1] calls
 * made by fibers that blocked their thread (no fiber version), out[2] calls
 * made outside fibers. 0; -ENOENT for a call the hook does not know;
 * -EINVAL on NULL. */
__attribute__((visibility("default"))) int
iof_hook_counts(const char *call, unsigned long out[3]);

#ifdef __cplusplus
}
#endif

#endif
