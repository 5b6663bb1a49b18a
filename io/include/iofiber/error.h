/* iofiber: error codes and their text. Every call returns 0 (or a count)
 * or a negative code: -errno, or one of the IOF_EAI_* codes below, which
 * report name resolution failures. The IOF_EAI_* codes lie in -3000..-3099,
 * out of the range of any errno value, so the two never collide. */
#ifndef IOFIBER_ERROR_H
#define IOFIBER_ERROR_H

#include <stdbool.h>

#include <iofiber/frame_allocator.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Resolution failures (getaddrinfo's EAI_* as distinct codes). */
#define IOF_EAI_NONAME (-3001)     /* no such host or service */
#define IOF_EAI_AGAIN (-3002)      /* temporary failure: try again later */
#define IOF_EAI_FAIL (-3003)       /* non-recoverable failure of the lookup */
#define IOF_EAI_NODATA (-3004)     /* the host has no address (of the family) */
#define IOF_EAI_FAMILY (-3005)     /* address family not supported */
#define IOF_EAI_SERVICE (-3006)    /* service unknown for the socket type */
#define IOF_EAI_SOCKTYPE (-3007)   /* socket type not supported */
#define IOF_EAI_BADFLAGS (-3008)   /* invalid hints flags */
#define IOF_EAI_ADDRFAMILY (-3009) /* the host has no address in the family */
#define IOF_EAI_OVERFLOW (-3010)   /* an argument buffer overflowed */
#define IOF_EAI_FIRST (-3099)      /* the range reserved for them */
#define IOF_EAI_LAST (-3000)

/* True for a code of the IOF_EAI_* range. */
#define IOF_IS_EAI(err) ((err) >= IOF_EAI_FIRST && (err) <= IOF_EAI_LAST)

/* A description of err: a library code (IOF_EAI_*), a negated errno
 * (or a positive errno value), 0 ("success"). Never NULL: a static string,
 * thread-safe; an unknown code gives "unknown error". */
IOF_API const char *iof_strerror(int err);

/* The IOF_EAI_* code of a getaddrinfo result (EAI_MEMORY: -ENOMEM,
 * EAI_SYSTEM: -sys_errno, 0: 0). */
IOF_API int iof_gai_error(int gai, int sys_errno);

#ifdef __cplusplus
}
#endif
#endif
