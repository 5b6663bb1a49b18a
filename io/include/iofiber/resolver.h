/* iofiber: name resolution. getaddrinfo runs on a worker thread of the
 * io_context (a service), the calling fiber suspended meanwhile. */
#ifndef IOFIBER_RESOLVER_H
#define IOFIBER_RESOLVER_H

#include <netdb.h>

#include <iofiber/io_context.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Declared here too: strict C11 builds get netdb.h without it. */
struct addrinfo;

/* Resolves host/service (either may be NULL, as getaddrinfo; hints may be
 * NULL). 0 and *res (free it with freeaddrinfo); -ECANCELED (stop token,
 * shutdown); -EPERM outside a launched fiber; -EINVAL (also for a numeric
 * service outside 0-65535, which getaddrinfo would truncate); getaddrinfo's
 * failures as -errno: EAI_NONAME/EAI_NODATA/EAI_FAIL -> -EHOSTUNREACH,
 * EAI_AGAIN -> -EAGAIN, EAI_MEMORY -> -ENOMEM, EAI_SERVICE/EAI_BADFLAGS/
 * EAI_SOCKTYPE -> -EINVAL, EAI_FAMILY -> -EAFNOSUPPORT, EAI_SYSTEM -> the
 * errno, others -> -EIO. */
IOF_API int iof_resolve(iof_io_context *io, const char *host,
                        const char *service, const struct addrinfo *hints,
                        struct addrinfo **res);

#ifdef __cplusplus
}
#endif
#endif
