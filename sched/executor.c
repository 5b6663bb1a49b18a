/* Executor refs: the thin public layer over the vtable, and the per-thread
 * run marks that tell dispatch when inline is safe. */
#include "sched/sched_internal.h"

#include <errno.h>
#include <sched.h>
#include <stdio.h>

static inline iof_run_mark **marks(void) {
  return (iof_run_mark **)&iof__thread()->marks;
}

void iof__run_mark_push(iof_run_mark *m, const iof_execution_context *ctx) {
  iof_run_mark **top = marks();
  m->ctx = ctx;
  m->prev = *top;
  *top = m;
}

void iof__run_mark_pop(iof_run_mark *m) {
  *marks() = m->prev;
}

bool iof__thread_runs(const iof_execution_context *ctx) {
  for (iof_run_mark *m = *marks(); m; m = m->prev)
    if (m->ctx == ctx) return true;
  return false;
}

bool iof__refuse_after_shutdown(const iof_execution_context *ctx,
                                const iof_fiber *h) {
  /* The state test first: it is a plain load, and false on every wake. */
  return h->state == IOF_FS_CREATED && iof_execution_context_stopping(ctx);
}

void iof__report_stuck(const char *what, size_t n) {
  fprintf(stderr,
          "iofiber: %s destroy: %zu unit(s) of work outstanding "
          "(suspended fibers that never finished, or work guards); "
          "-EBUSY, the context stays shut down until they end\n",
          what, n);
}

iof_fiber *iof_executor_dispatch(iof_executor_ref ex, iof_fiber *h) {
  if (!ex.vt || !h || !ex.vt->dispatch) {
    errno = EINVAL;
    return NULL;
  }
  int bad = iof__fiber_handover_check(h);
  if (bad < 0) {
    errno = -bad;
    return NULL;
  }
  int r = ex.vt->dispatch(ex.ex, h);
  if (r > 0) return h;
  /* One report for NULL: errno 0 means queued, anything else refused. */
  errno = r < 0 ? -r : 0;
  return NULL;
}

int iof_executor_post(iof_executor_ref ex, iof_fiber *h) {
  if (!ex.vt || !h || !ex.vt->post) return -EINVAL;
  int bad = iof__fiber_handover_check(h);
  if (bad < 0) return bad;
  return ex.vt->post(ex.ex, h);
}

bool iof_executor_equal(iof_executor_ref a, iof_executor_ref b) {
  if (!a.vt || !b.vt) return !a.vt && !b.vt;
  if (a.vt != b.vt) return false;
  if (a.ex == b.ex) return true;
  return a.vt->equal ? a.vt->equal(a.ex, b.ex) : false;
}

void *iof_executor_target(iof_executor_ref ref, const iof_executor_vtbl *vt) {
  return ref.vt && ref.vt == vt ? (void *)ref.ex : NULL;
}

iof_execution_context *iof_executor_context(iof_executor_ref ex) {
  return ex.vt && ex.vt->context ? ex.vt->context(ex.ex) : NULL;
}

void iof_executor_on_work_started(iof_executor_ref ex) {
  if (ex.vt && ex.vt->on_work_started) ex.vt->on_work_started(ex.ex);
}

void iof_executor_on_work_finished(iof_executor_ref ex) {
  if (ex.vt && ex.vt->on_work_finished) ex.vt->on_work_finished(ex.ex);
}

int iof_work_guard_init(iof_work_guard *g, iof_executor_ref ex) {
  if (!g) return -EINVAL;
  g->ex = ex;
  if (!ex.vt) return -EINVAL;
  iof_executor_on_work_started(ex);
  return 0;
}

void iof_work_guard_reset(iof_work_guard *g) {
  if (!g || !g->ex.vt) return;
  iof_executor_ref ex = g->ex;
  g->ex.vt = NULL;
  g->ex.ex = NULL;
  iof_executor_on_work_finished(ex);
}

bool iof_work_guard_owns(const iof_work_guard *g) {
  return g && g->ex.vt;
}

void iof__spin_lock_wait(atomic_flag *l) {
  for (int spins = 1;
       atomic_flag_test_and_set_explicit(l, memory_order_acquire);)
    if (++spins > 64) sched_yield();
}

bool iof__spin_step(int64_t start, int i, int64_t len, int64_t *spun) {
  if (i & 15) {
    iof__cpu_relax();
    return true;
  }
  int64_t t = iof__now_ns() - start;
  *spun = t;
  if (t > len) return false;
  if (t > IOF_SPIN_PAUSE_NS)
    sched_yield();
  else
    iof__cpu_relax();
  return true;
}
