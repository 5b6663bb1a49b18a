/* iofiber: waiting for POSIX signals in a fiber (libev ev_signal). */
#ifndef IOFIBER_SIGNAL_H
#define IOFIBER_SIGNAL_H

#include <iofiber/io_context.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Suspends until signal signo is delivered to the process; returns signo.
 * While a fiber waits, the signal's disposition is libev's (the default
 * action does not happen); the program's own (a handler, SIG_IGN) comes
 * back once the last wait on it ends. A signal can be watched by one
 * io_context at a time. -EINVAL (bad signo, SIGKILL/SIGSTOP, the fault
 * signals SIGSEGV/SIGBUS/SIGILL/SIGFPE, which must keep crashing, and the
 * C library's own signals between 31 and SIGRTMIN), -EBUSY
 * (another io_context watches it, or a libev loop of the program's own
 * does, other than the host loop of an attached io), -ECANCELED, -EPERM
 * outside a launched fiber, -ENOMEM (as iof_read_some: libev could not
 * grow). */
IOF_API int iof_signal_wait(iof_io_context *io, int signo);

#ifdef __cplusplus
}
#endif
#endif
