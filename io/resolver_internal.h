/* Jobs on the resolver threads (for compat's gethostbyname_r and
 * getaddrinfo, which need the raw results). Not installed. */
#ifndef IOF_IO_RESOLVER_INTERNAL_H
#define IOF_IO_RESOLVER_INTERNAL_H

#include "io/io_internal.h"

/* In a launched fiber: runs fn(arg) on one of io's resolver threads while
 * the fiber waits. 0: fn ran and arg is the caller's again. On any failure
 * arg is no longer the caller's: release(arg) runs once nobody needs it
 * (at once, or when an fn already started ends). Failures: -ECANCELED
 * (stop token, shutdown), -ENOMEM, -EAGAIN (no thread), -EINVAL (fn or io
 * NULL), -EPERM outside a launched fiber. */
IOF_HIDDEN int iof__resolver_run(iof_io_context *io, void (*fn)(void *),
                                 void *arg, void (*release)(void *));

/* Resolver threads per io_context, at most (1..64, default 64); read when
 * a request is queued. Tests that hold the only worker set it to 1. */
IOF_HIDDEN extern int iof__resolver_max_threads;

/* How long (ms, default 2000) a worker waits for a request before it
 * leaves, when it is not the last one; read at each wait. */
IOF_HIDDEN extern int iof__resolver_idle_ms;

#endif
