/* iof_when_all / iof_when_any: structured concurrency over child chains.
 *
 * The group lives on the parent's stack, which stays put until every child
 * is gone. Children are launched with iof__run_async_ex on the parent's
 * executor, from the chain's frame allocator, all sharing one child stop
 * source; a callback on the parent's token forwards a stop to it. Child
 * fibers take their task index in start order (fibers are
 * interchangeable, so no per-child record is needed). Each child's end is
 * reported by on_freed, i.e. after its frame is freed: the count of
 * pending children plus one for the parent's own suspension reaches zero
 * exactly once, and whoever gets it there resumes the parent (the parent's
 * suspend returns it inline, or the last child posts it to the parent's
 * executor). */
#include <iofiber/when.h>

#include "sched/sync_internal.h"

#include <errno.h>
#include <limits.h>

typedef struct group {
  const iof_fn *fns;
  void *const *args;
  int *statuses;
  bool any;
  atomic_size_t next;    /* the next task index a starting child takes */
  atomic_size_t pending; /* children not freed yet, + 1 for the parent */
  atomic_int first_err;  /* 0 until the first failure */
  atomic_int winner;     /* when_any: -1 until a child succeeds */
  int win_status;
  iof_stop_source src;
  iof_fiber *parent;
  iof_executor_ref ex;
} group;

static void record_error(group *g, int st) {
  int expect = 0;
  atomic_compare_exchange_strong(&g->first_err, &expect, st);
}

static int child_main(void *arg) {
  group *g = arg;
  size_t i = atomic_fetch_add_explicit(&g->next, 1, memory_order_relaxed);
  int st = g->fns[i](g->args ? g->args[i] : NULL);
  if (g->statuses) g->statuses[i] = st;
  if (g->any) {
    if (st >= 0) {
      int expect = -1;
      if (atomic_compare_exchange_strong(&g->winner, &expect, (int)i)) {
        g->win_status = st;
        iof_stop_source_request(&g->src);
      }
    } else {
      record_error(g, st);
    }
  } else if (st < 0) {
    record_error(g, st);
    iof_stop_source_request(&g->src);
  }
  return st;
}

static void arrive(group *g) {
  if (atomic_fetch_sub_explicit(&g->pending, 1, memory_order_acq_rel) == 1)
    (void)iof_executor_post(g->ex, g->parent);
}

/* After the child's frame is freed (on the thread that ran it last). */
static void child_freed(void *user, int status) {
  group *g = user;
  if (status == -ECANCELED) {
    /* Possibly never started (drained during a shutdown): it took no
     * index, so nothing else to record than the error. */
    record_error(g, status);
  }
  arrive(g);
}

static iof_fiber *join_suspend(void *self, iof_fiber *h, const iof_env *env) {
  group *g = self;
  g->parent = h;
  g->ex = env->executor;
  /* The parent's own arrival: if the children are all gone already,
   * resume at once. */
  if (atomic_fetch_sub_explicit(&g->pending, 1, memory_order_acq_rel) == 1)
    return h; /* await_hook routes it through a strand it left */
  return NULL;
}

static const iof_awaitable_vtbl join_vtbl = {NULL, join_suspend, NULL};

__attribute__((constructor)) static void name_join(void) {
  iof__debug_label(&join_vtbl, "children (when_all, when_any)", NULL);
}

static void forward_stop(void *arg) {
  iof_stop_source_request(arg);
}

static int run_group(group *g, size_t n) {
  iof_fiber *self = iof__sync_fiber();
  if (!self) return -EPERM;
  if (iof__debug_walking) return -EDEADLK; /* no child could launch */
  const iof_env *env = iof_env_current();
  if (iof_stop_requested(env->stop_token)) return -ECANCELED;
  int r = iof_stop_source_init(&g->src);
  if (r < 0) return r;
  atomic_init(&g->next, 0);
  atomic_init(&g->pending, n + 1);
  atomic_init(&g->first_err, 0);
  atomic_init(&g->winner, -1);
  g->win_status = 0;
  iof_stop_callback parent_cb;
  iof__stop_callback_register(&parent_cb, env->stop_token, forward_stop,
                              &g->src);
  iof_launch_opts opts = {0};
  opts.stop_token = iof_stop_source_token(&g->src);
  opts.frame_allocator = iof_current_frame_allocator();
  opts.user = g;
  size_t launched = 0;
  for (; launched < n; launched++) {
    r = iof__run_async_ex(env->executor, &opts, child_main, g, child_freed);
    if (r < 0) break;
  }
  if (launched < n) {
    /* Stop what runs; the children never launched count as arrived. */
    record_error(g, r);
    iof_stop_source_request(&g->src);
    atomic_fetch_sub_explicit(&g->pending, n - launched, memory_order_acq_rel);
  }
  /* Uncancellable and immune to the shutdown refusal: the children always
   * end (a shutdown drains or cancels them), and the group lives here. */
  iof__await_always(g, &join_vtbl);
  iof_stop_callback_unregister(&parent_cb);
  iof_stop_source_destroy(&g->src);
  /* Children that never took an index did not run. */
  size_t started = atomic_load(&g->next);
  if (g->statuses)
    for (size_t i = started; i < n; i++) g->statuses[i] = -ECANCELED;
  return 0;
}

int iof_when_all(size_t n, const iof_fn *fns, void *const *args,
                 int *statuses) {
  if (n == 0) return 0;
  if (!fns) return -EINVAL;
  for (size_t i = 0; i < n; i++)
    if (!fns[i]) return -EINVAL;
  group g = {.fns = fns, .args = args, .statuses = statuses, .any = false};
  int r = run_group(&g, n);
  if (r < 0) return r;
  return atomic_load(&g.first_err);
}

int iof_when_any(size_t n, const iof_fn *fns, void *const *args, int *winner) {
  if (winner) *winner = -1;
  if (n == 0 || n > INT_MAX || !fns) return -EINVAL;
  for (size_t i = 0; i < n; i++)
    if (!fns[i]) return -EINVAL;
  group g = {.fns = fns, .args = args, .statuses = NULL, .any = true};
  int r = run_group(&g, n);
  if (r < 0) return r;
  int w = atomic_load(&g.winner);
  if (w >= 0) {
    if (winner) *winner = w;
    return g.win_status;
  }
  r = atomic_load(&g.first_err);
  return r < 0 ? r : -ECANCELED;
}
