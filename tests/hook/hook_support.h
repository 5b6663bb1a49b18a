/* Helpers shared by the hook tests (programs linked with libiofiber-hook). */
#ifndef IOF_TEST_HOOK_SUPPORT_H
#define IOF_TEST_HOOK_SUPPORT_H

#include <stdbool.h>
#include <sys/types.h>

#include <iofiber/hook.h>
#include <iofiber/io_context.h>
#include <iofiber/launch.h>

/* Runs fn(arg) in `n` fibers on a fresh io_context on this thread and
 * returns when all have finished (0), or -errno. */
int hook_run_fibers(int n, iof_fn fn, void *arg);

/* Runs client(0) ... client(n - 1) at once and returns when all have
 * returned: as n fibers on a fresh io_context on this thread when the
 * hook is linked into a plain main (under_run false), or as n pthreads,
 * which the hook makes fibers, under iofiber-run (main already a fiber).
 * 0, or -errno (nothing left running). n <= 1024. */
int hook_run_clients(int n, bool under_run, void (*client)(int index));

/* Waits up to ms for pid to end: true if it did (its status in *st, when
 * st is not NULL), false if it still runs. */
bool hook_wait_for(pid_t pid, int ms, int *st);

/* Removes the directory tree at dir (a test's temporary directory) and
 * sets dir to "" so that a second call does nothing. */
void hook_remove_tree(char *dir);

/* The hook's counter for call: which = 0 fiber layer, 1 blocked the thread,
 * 2 outside fibers. */
unsigned long hook_count(const char *call, int which);

/* A free TCP port on 127.0.0.1 from the kernel, or -errno. A server told to
 * bind it a moment later can still lose it to another program: callers
 * retry with a new one. */
int hook_free_port(void);

#endif
