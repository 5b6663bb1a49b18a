/* iofiber: listing the live fibers of the process, for debugging.
 *
 * Every fiber started with iof_run_async / iof_launch is registered from
 * its launch until its end (one short lock at launch and at exit, nothing
 * on a switch). Raw fibers from iof_fiber_create are not listed. The gdb
 * extension (share/iofiber/gdb/iofiber.py, see docs/debugging.md) shows
 * the same list from a debugger and backtraces of suspended fibers. */
#ifndef IOFIBER_DEBUG_H
#define IOFIBER_DEBUG_H

#include <stdio.h>

#include <iofiber/executor.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum iof_fiber_run_state {
  IOF_FIBER_CREATED,   /* launched, never ran yet */
  IOF_FIBER_RUNNING,   /* running on some thread now */
  IOF_FIBER_SUSPENDED, /* waiting, or ready in an executor's queue */
} iof_fiber_run_state;

/* One live fiber, as seen by iof_fiber_walk. Pointers are valid only
 * during the callback. */
typedef struct iof_fiber_info {
  const iof_fiber *fiber;
  unsigned long id;          /* unique, from 1; increases with each
                                thread's launches (across threads, close
                                to launch order) */
  const char *name;          /* "" when unnamed (iof_launch_opts.name) */
  iof_fiber_run_state state; /* a snapshot: other threads keep running */
  iof_executor_ref executor; /* where it runs (its chain's executor) */
  const char *executor_kind; /* "io_context", "thread_pool", "strand", or
                                "executor" for user-written ones */
  const char *waiting;       /* what a suspended fiber awaits, e.g.
                                "socket readable", "sync primitive"; ""
                                when not suspended in an await */
  const void *waiting_on;    /* the socket or timer awaited; for sync
                                primitives, the wait's record */
  size_t stack_size;
} iof_fiber_info;

/* Called once per live launched fiber; return non-zero to stop the walk. */
typedef int (*iof_fiber_walk_fn)(const iof_fiber_info *info, void *arg);

/* Calls fn for each live launched fiber of the process, by id (launch
 * order on each thread).
 * The registry is locked during the walk: fn must not launch fibers, wait
 * for one to end, suspend or block (launches, cancels, dumps, running or
 * destroying an io_context, joining or destroying a thread pool from fn
 * fail with -EDEADLK, and so does every call of the library that would
 * wait or suspend there: a sleep, a lock, channel, socket or timer wait
 * that cannot complete at once, iof_yield, a hop of iof_run,
 * iof_when_all/any). Returns how many fibers fn saw; -EINVAL on NULL
 * fn; -EDEADLK when called from fn itself. */
IOF_API int iof_fiber_walk(iof_fiber_walk_fn fn, void *arg);

/* Writes one line per live launched fiber to out (NULL: stderr):
 *   #id "name" state executor-kind@address [waiting on what @address]
 * Returns the number of fibers listed, or -EIO if writing failed;
 * -EDEADLK from an iof_fiber_walk callback. */
IOF_API int iof_fiber_dump(FILE *out);

#ifdef __cplusplus
}
#endif
#endif
