/* iofiber: name resolution. getaddrinfo runs on a worker thread of the
 * io_context (a service), the calling fiber suspended meanwhile. */
#ifndef IOFIBER_RESOLVER_H
#define IOFIBER_RESOLVER_H

#include <netdb.h>

#include <iofiber/error.h>
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
 * failures as the IOF_EAI_* codes of <iofiber/error.h> (IOF_EAI_NONAME:
 * no such host, IOF_EAI_AGAIN: temporary failure, IOF_EAI_NODATA...),
 * except EAI_MEMORY (-ENOMEM) and EAI_SYSTEM (the -errno); -EAGAIN when
 * no worker thread runs and none could be started (nothing waited).
 * iof_strerror describes them. */
IOF_API int iof_resolve(iof_io_context *io, const char *host,
                        const char *service, const struct addrinfo *hints,
                        struct addrinfo **res);

#ifdef __cplusplus
}
#endif
#endif
