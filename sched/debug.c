/* The registry of live launched fibers and its walk (iof_fiber_walk,
 * iof_fiber_dump); docs/debugging.md. A global list under a spinlock taken
 * at launch and at exit only: a switch touches no shared state, an await
 * stores what it waits on in the chain's own record. */
#include "sched/sched_internal.h"

#include <iofiber/debug.h>

#include <errno.h>
#include <sched.h>
#include <stdatomic.h>

/* Read by the gdb extension (share/iofiber/gdb/iofiber.py) by these names:
 * keep them, and the chain and fiber fields it reads, in step with it. */
IOF_HIDDEN iof_chain *iof__debug_chains;
IOF_HIDDEN atomic_int iof__debug_lock;
static unsigned long last_id;
IOF_HIDDEN _Thread_local bool iof__debug_walking;

static void lock(void) {
  while (atomic_exchange_explicit(&iof__debug_lock, 1, memory_order_acquire))
    while (atomic_load_explicit(&iof__debug_lock, memory_order_relaxed))
      sched_yield();
}

static void unlock(void) {
  atomic_store_explicit(&iof__debug_lock, 0, memory_order_release);
}

void iof__debug_register(iof_chain *c) {
  lock();
  c->dbg_id = ++last_id;
  c->dbg_prev = NULL;
  c->dbg_next = iof__debug_chains;
  if (iof__debug_chains) iof__debug_chains->dbg_prev = c;
  iof__debug_chains = c;
  unlock();
}

void iof__debug_unregister(iof_chain *c) {
  lock();
  if (c->dbg_prev)
    c->dbg_prev->dbg_next = c->dbg_next;
  else
    iof__debug_chains = c->dbg_next;
  if (c->dbg_next) c->dbg_next->dbg_prev = c->dbg_prev;
  unlock();
}

/* ---- labels ------------------------------------------------------------ */

#define MAX_LABELS 32

static struct label {
  const void *vt;
  const char *label;
  iof__debug_describe_fn describe;
} labels[MAX_LABELS];
static atomic_int nlabels;

void iof__debug_label(const void *vt, const char *label,
                      iof__debug_describe_fn describe) {
  int i = atomic_fetch_add(&nlabels, 1);
  if (i >= MAX_LABELS) return; /* unnamed: shown as a plain address */
  labels[i] = (struct label){vt, label, describe};
}

static const struct label *find_label(const void *vt) {
  int n = atomic_load(&nlabels);
  if (n > MAX_LABELS) n = MAX_LABELS;
  for (int i = 0; i < n; i++)
    if (labels[i].vt == vt) return &labels[i];
  return NULL;
}

/* ---- walk -------------------------------------------------------------- */

static iof_fiber_run_state run_state(const iof_fiber *f) {
  switch (f->state) {
  case IOF_FS_CREATED:
    return IOF_FIBER_CREATED;
  case IOF_FS_RUNNING:
    return IOF_FIBER_RUNNING;
  default:
    return IOF_FIBER_SUSPENDED;
  }
}

int iof_fiber_walk(iof_fiber_walk_fn fn, void *arg) {
  if (!fn) return -EINVAL;
  if (iof__debug_walking) return -EDEADLK; /* the lock is held: spin */
  /* Oldest first: the list is pushed at the head, so go to its tail. */
  lock();
  iof__debug_walking = true;
  iof_chain *c = iof__debug_chains;
  while (c && c->dbg_next) c = c->dbg_next;
  int n = 0;
  for (; c; c = c->dbg_prev) {
    const iof_fiber *f = c->fiber;
    const iof_env *env = f->env ? f->env : &c->env;
    iof_fiber_info info = {0};
    info.fiber = f;
    info.id = c->dbg_id;
    info.name = f->name;
    info.state = run_state(f);
    info.executor = env->executor;
    const struct label *el = find_label(env->executor.vt);
    info.executor_kind = el ? el->label : "executor";
    info.waiting = "";
    const void *vt = c->wait_vt;
    if (info.state == IOF_FIBER_SUSPENDED && vt) {
      const struct label *wl = find_label(vt);
      info.waiting = wl ? wl->label : "custom awaitable";
      info.waiting_on = c->wait_aw;
      if (wl && wl->describe) {
        const char *d = wl->describe(c->wait_aw, &info.waiting_on);
        if (d) info.waiting = d;
      }
    }
    info.stack_size = f->stack_size;
    n++;
    if (fn(&info, arg)) break;
  }
  iof__debug_walking = false;
  unlock();
  return n;
}

static const char *const state_names[] = {"created", "running", "suspended"};

static int dump_one(const iof_fiber_info *i, void *arg) {
  FILE *out = arg;
  int r = fprintf(out, "#%lu \"%s\" %s on %s@%p", i->id, i->name,
                  state_names[i->state], i->executor_kind, i->executor.ex);
  if (r >= 0 && i->waiting[0])
    r = fprintf(out, ", waiting: %s @%p", i->waiting, i->waiting_on);
  if (r >= 0) r = fputc('\n', out);
  return r < 0;
}

int iof_fiber_dump(FILE *out) {
  if (!out) out = stderr;
  int n = iof_fiber_walk(dump_one, out);
  if (fflush(out) != 0 || ferror(out)) return -EIO;
  return n;
}
