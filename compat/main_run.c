/* iof_main: a blocking-style program's main as a fiber thread on fresh
 * io_contexts (one per OS thread), and the placement of the fiber threads
 * it creates. */
#include "compat/signal_internal.h"
#include "compat/thread_internal.h"

#include <errno.h>
#include <limits.h>
#include <stdbool.h>
#include <stdint.h>
#include <iofiber/io_context.h>
#include <stdlib.h>
#include <string.h>

#define MAIN_STACK_DEFAULT ((size_t)8 * 1024 * 1024)
#define THREADS_MAX 1024

static struct {
  atomic_int busy;
  unsigned n;
  iof_io_context **io;
  /* The extra io threads. Here, not on iof_main_ex's stack: main may call
   * exit from its fiber, and a leak checker scans globals, not the stack
   * the OS thread left for the fiber's. */
  pthread_t *tid;
  _Atomic unsigned rr;
  /* main's end */
  atomic_int main_state; /* 0 running, 1 returned, 2 pthread_exit */
  int status;
} G;

static _Atomic size_t thread_stack; /* 0: not decided yet */

static bool stack_ok(size_t v) {
  return v >= IOF_FIBER_STACK_MIN && v <= IOF_FIBER_STACK_MAX;
}

/* "64k", "1m", "131072" -> bytes; 0 when unparsable or outside the
 * fiber stack limits (a sign, an overflow, "0"). */
static size_t parse_size(const char *s) {
  if (!s || *s < '0' || *s > '9') return 0;
  char *end;
  errno = 0;
  unsigned long long v = strtoull(s, &end, 10);
  if (errno) return 0;
  unsigned shift = 0;
  if (*end == 'k' || *end == 'K')
    shift = 10, end++;
  else if (*end == 'm' || *end == 'M')
    shift = 20, end++;
  if (*end || v > (ULLONG_MAX >> shift)) return 0;
  v <<= shift;
  return v <= SIZE_MAX && stack_ok((size_t)v) ? (size_t)v : 0;
}

size_t iof__compat_thread_stack(void) {
  size_t v = atomic_load_explicit(&thread_stack, memory_order_relaxed);
  if (v) return v;
  v = parse_size(getenv("IOF_STACK_SIZE"));
  if (!v) v = IOF_FIBER_STACK_DEFAULT;
  atomic_store_explicit(&thread_stack, v, memory_order_relaxed);
  return v;
}

iof_executor_ref iof__compat_pick_executor(iof_fiber *self) {
  iof_executor_ref mine = self->env->executor;
  unsigned n = G.n;
  if (n < 2 || !G.io) return mine;
  /* Only threads of iof_main's own contexts are spread out. */
  iof_execution_context *ctx = iof_executor_context(mine);
  bool ours = false;
  for (unsigned i = 0; i < n && !ours; i++)
    ours = iof_io_context_context(G.io[i]) == ctx;
  if (!ours) return mine;
  unsigned i = atomic_fetch_add_explicit(&G.rr, 1, memory_order_relaxed);
  return iof_io_context_executor(G.io[i % n]);
}

static void stop_all(void) {
  for (unsigned i = 0; i < G.n; i++) iof_io_context_stop(G.io[i]);
}

typedef struct main_call {
  iof_fn fn;
  void *arg;
  int status;
} main_call;

static void *main_thread(void *p) {
  main_call *mc = p;
  iof__compat_set_main(iof_fiber_current());
  mc->status = mc->fn(mc->arg);
  iof__compat_set_main(NULL);
  atomic_store(&G.main_state, 1);
  return NULL;
}

/* main's fiber has ended and its stack is gone. */
static void main_end(void *ret) {
  (void)ret;
  int expect = 0;
  /* Still 0: main left through pthread_exit; the program lives on until
   * the last fiber thread ends (the idle hook). */
  if (atomic_compare_exchange_strong(&G.main_state, &expect, 2)) return;
  stop_all();
}

static void on_idle(void) {
  if (atomic_load(&G.main_state) == 2) stop_all();
}

static void *worker(void *p) {
  iof_io_context *io = p;
  iof_work_guard g;
  /* Keeps run going while the context has no fiber (yet). */
  if (iof_work_guard_init(&g, iof_io_context_executor(io)) == 0) {
    (void)iof_io_context_run(io);
    iof_work_guard_reset(&g);
  }
  return NULL;
}

static unsigned pick_threads(const iof_main_opts *opts) {
  unsigned long n = opts && opts->threads ? opts->threads : 0;
  if (!n) {
    /* Digits only: strtoul would read "-1" as the largest count. */
    const char *s = getenv("IOF_THREADS");
    char *end = NULL;
    n = s && *s >= '0' && *s <= '9' ? strtoul(s, &end, 10) : 1;
    if (end && *end) n = 1;
  }
  if (n < 1) n = 1;
  return n > THREADS_MAX ? THREADS_MAX : (unsigned)n;
}

int iof_main(iof_fn fn, void *arg) {
  return iof_main_ex(fn, arg, NULL);
}

int iof_main_ex(iof_fn fn, void *arg, const iof_main_opts *opts) {
  if (!fn) return -EINVAL;
  if (opts &&
      ((opts->thread_stack_size && !stack_ok(opts->thread_stack_size)) ||
       (opts->main_stack_size && !stack_ok(opts->main_stack_size))))
    return -EINVAL;
  int expect = 0;
  if (!atomic_compare_exchange_strong(&G.busy, &expect, 1)) return -EBUSY;
  /* This call's choice only: 0 decides again from the environment. */
  atomic_store(&thread_stack, opts ? opts->thread_stack_size : 0);
  size_t main_stack = opts && opts->main_stack_size ? opts->main_stack_size
                                                    : MAIN_STACK_DEFAULT;
  unsigned n = pick_threads(opts);
  int r = 0;
  pthread_t *tid = G.tid = calloc(n, sizeof *tid);
  G.io = calloc(n, sizeof *G.io);
  G.n = 0;
  if (!tid || !G.io) {
    r = -ENOMEM;
    goto out;
  }
  for (unsigned i = 0; i < n; i++) {
    G.io[i] = iof_io_context_create();
    if (!G.io[i]) {
      r = errno ? -errno : -ENOMEM;
      goto out;
    }
    G.n = i + 1;
  }
  atomic_store(&G.main_state, 0);
  atomic_store(&G.rr, 0);
  main_call mc = {fn, arg, 0};
  iof__cthread_set_idle_hook(on_idle);
  r = iof__cthread_start(iof_io_context_executor(G.io[0]), main_stack, NULL,
                         true, main_thread, &mc, main_end, NULL);
  if (r < 0) goto out;
  unsigned started = 1;
  for (; started < n; started++)
    if (iof__thread_create_quiet(&tid[started], worker, G.io[started]) != 0)
      break;
  (void)iof_io_context_run(G.io[0]);
  stop_all();
  iof__cthread_main_tls_back();
  for (unsigned i = 1; i < started; i++) iof__libc.pthread_join(tid[i], NULL);
  r = atomic_load(&G.main_state) == 1 ? mc.status : 0;
  if (iof__cthread_live() > 0) {
    /* Fiber threads still run (as threads may when main returns): their
     * contexts cannot be destroyed without running them to the end, so
     * they stay; the caller is about to exit. */
    iof__cthread_set_idle_hook(NULL);
    free(tid);
    G.tid = NULL;
    atomic_store(&G.busy, 0);
    return r;
  }
out:
  iof__cthread_set_idle_hook(NULL);
  for (unsigned i = 0; i < G.n; i++) iof_io_context_destroy(G.io[i]);
  free(G.io);
  G.io = NULL;
  G.n = 0;
  free(tid);
  G.tid = NULL;
  atomic_store(&G.busy, 0);
  return r;
}
