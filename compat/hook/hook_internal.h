/* libiofiber-hook internals shared by its sources. Not installed. */
#ifndef IOF_COMPAT_HOOK_INTERNAL_H
#define IOF_COMPAT_HOOK_INTERNAL_H

#include <netdb.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <semaphore.h>
#include <signal.h>
#include <stdbool.h>
#include <sys/epoll.h>
#include <sys/file.h>
#include <sys/ioctl.h>
#include <sys/select.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <fcntl.h>
#include <time.h>
#include <unistd.h>

/* The library is built with hidden visibility; interposers are exported. */
#define IOF_HOOK_API __attribute__((visibility("default")))
#define IOF_HOOK_HIDDEN __attribute__((visibility("hidden")))
#define IOF_HOOK_WEAK __attribute__((weak))

/* Environment variables shared by iofiber-run and the hook. */
#define IOF_HOOK_ENV_RUN "IOF_RUN"            /* "1": take over main */
#define IOF_HOOK_ENV_THREADS "IOF_THREADS"    /* io threads, default 1 */
#define IOF_HOOK_ENV_FOLLOW "IOF_FOLLOW_EXEC" /* "1": exec'ed children too */
#define IOF_HOOK_ENV_VERBOSE "IOF_HOOK_VERBOSE"

/* True when the caller is a launched fiber and the hook has not stepped
 * aside (a child forked from a fiber). Async-signal-safe. */
IOF_HOOK_HIDDEN bool iof__hook_in_fiber(void);

#endif
