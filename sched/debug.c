/* The registry of live launched fibers and its walk (iof_fiber_walk,
 * iof_fiber_dump); docs/debugging.md. Lists under spinlocks taken at launch
 * and at exit only: a switch touches no shared state, an await stores what
 * it waits on in the chain's own record.
 *
 * One list per launching thread (a shard), so that threads that launch and
 * end their own fibers (an io_context per thread) never write the same
 * lock: a chain stays in its launcher's shard, and a chain that ends on
 * another thread (a pool's) takes that shard's lock to leave. Ids come in
 * blocks of ID_BLOCK per shard, for the same reason: increasing with each
 * thread's launches, and close to launch order across threads. A shard
 * outlives its thread (its chains may still run elsewhere) and is taken
 * over by the next thread that launches. */
#include "sched/sched_internal.h"

#include <iofiber/debug.h>

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>

#define ID_BLOCK 64

typedef struct iof__debug_shard {
  atomic_flag lock;
  atomic_bool owned; /* a live thread launches into it */
  iof_chain *head;   /* newest first */
  unsigned long next_id, id_end;
  struct iof__debug_shard *next; /* all shards, never freed */
  iof_chain *walk;               /* the walk's cursor (all locks held) */
} iof__debug_shard;

/* Read by the gdb extension (share/iofiber/gdb/iofiber.py) by these names:
 * keep them, and the shard, chain and fiber fields it reads, in step. */
IOF_HIDDEN iof__debug_shard *iof__debug_shards;
IOF_HIDDEN _Thread_local bool iof__debug_walking
    __attribute__((tls_model("initial-exec")));

static atomic_flag shards_lock = ATOMIC_FLAG_INIT; /* the list */
static atomic_ulong id_blocks;          /* next block of ids, from 0 */
static iof__debug_shard shared_shard = {/* when no shard could be made */
                                        .lock = ATOMIC_FLAG_INIT};
static _Thread_local iof__debug_shard *my_shard;
static pthread_key_t shard_key;
static pthread_once_t shard_once = PTHREAD_ONCE_INIT;
static bool shard_key_ok;

/* At thread exit: the shard is free for the next thread. No lock: a walk
 * holds the list's lock while it calls the user's function, which may
 * wait for this thread to end. */
static void shard_release(void *p) {
  iof__debug_shard *sh = p;
  my_shard = NULL;
  atomic_store_explicit(&sh->owned, false, memory_order_release);
}

static void make_shard_key(void) {
  shard_key_ok = pthread_key_create(&shard_key, shard_release) == 0;
}

/* This thread's shard: a free one, else a new one; the shared shard when
 * neither can be had, or when no key could give it back at thread exit. */
static __attribute__((noinline)) iof__debug_shard *take_shard(void) {
  pthread_once(&shard_once, make_shard_key);
  iof__debug_shard *sh = NULL;
  if (shard_key_ok) {
    iof__spin_lock(&shards_lock);
    for (sh = iof__debug_shards; sh; sh = sh->next) {
      bool free_one = false;
      if (atomic_compare_exchange_strong(&sh->owned, &free_one, true)) break;
    }
    if (!sh && (sh = calloc(1, sizeof *sh)) != NULL) {
      atomic_flag_clear(&sh->lock);
      atomic_init(&sh->owned, true);
      sh->next = iof__debug_shards;
      iof__debug_shards = sh;
    }
    iof__spin_unlock(&shards_lock);
    if (sh && pthread_setspecific(shard_key, sh) != 0) {
      shard_release(sh);
      sh = NULL;
    }
  }
  if (!sh) {
    iof__spin_lock(&shards_lock);
    if (!atomic_load(&shared_shard.owned)) { /* listed once, for all */
      atomic_store(&shared_shard.owned, true);
      shared_shard.next = iof__debug_shards;
      iof__debug_shards = &shared_shard;
    }
    iof__spin_unlock(&shards_lock);
    sh = &shared_shard;
  }
  return my_shard = sh;
}

void iof__debug_register(iof_chain *c) {
  iof__debug_shard *sh = my_shard ? my_shard : take_shard();
  iof__spin_lock(&sh->lock);
  if (sh->next_id == sh->id_end) {
    unsigned long b =
        atomic_fetch_add_explicit(&id_blocks, 1, memory_order_relaxed);
    sh->next_id = b * ID_BLOCK + 1;
    sh->id_end = sh->next_id + ID_BLOCK;
  }
  c->dbg_id = sh->next_id++;
  c->dbg_shard = sh;
  c->dbg_prev = NULL;
  c->dbg_next = sh->head;
  if (sh->head) sh->head->dbg_prev = c;
  sh->head = c;
  iof__spin_unlock(&sh->lock);
}

void iof__debug_unregister(iof_chain *c) {
  iof__debug_shard *sh = c->dbg_shard;
  iof__spin_lock(&sh->lock);
  if (c->dbg_prev)
    c->dbg_prev->dbg_next = c->dbg_next;
  else
    sh->head = c->dbg_next;
  if (c->dbg_next) c->dbg_next->dbg_prev = c->dbg_prev;
  iof__spin_unlock(&sh->lock);
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
  switch (__atomic_load_n(&f->state, __ATOMIC_RELAXED)) {
  case IOF_FS_CREATED:
    return IOF_FIBER_CREATED;
  case IOF_FS_RUNNING:
    return IOF_FIBER_RUNNING;
  default:
    return IOF_FIBER_SUSPENDED;
  }
}

static void fill_info(iof_fiber_info *info, const iof_chain *c) {
  const iof_fiber *f = c->fiber;
  const iof_env *env = f->env ? f->env : &c->env;
  info->fiber = f;
  info->id = c->dbg_id;
  info->name = f->name;
  info->state = run_state(f);
  info->executor = env->executor;
  const struct label *el = find_label(env->executor.vt);
  info->executor_kind = el ? el->label : "executor";
  info->waiting = "";
  /* Written by the fiber's thread at each await (relaxed atomics: plain
   * stores on x86), read here while it may run. */
  const void *vt = __atomic_load_n(&c->wait_vt, __ATOMIC_RELAXED);
  const void *aw = __atomic_load_n(&c->wait_aw, __ATOMIC_RELAXED);
  if (info->state == IOF_FIBER_SUSPENDED && vt) {
    const struct label *wl = find_label(vt);
    info->waiting = wl ? wl->label : "custom awaitable";
    info->waiting_on = aw;
    if (wl && wl->describe) {
      const char *d = wl->describe(aw, &info->waiting_on);
      if (d) info->waiting = d;
    }
  }
  info->stack_size = f->stack_size;
}

/* The oldest chain not yet walked, over all shards (each walks from its
 * tail, the oldest, towards its head). */
static iof_chain *next_oldest(void) {
  iof__debug_shard *best = NULL;
  for (iof__debug_shard *sh = iof__debug_shards; sh; sh = sh->next)
    if (sh->walk && (!best || sh->walk->dbg_id < best->walk->dbg_id)) best = sh;
  if (!best) return NULL;
  iof_chain *c = best->walk;
  best->walk = c->dbg_prev;
  return c;
}

int iof_fiber_walk(iof_fiber_walk_fn fn, void *arg) {
  if (!fn) return -EINVAL;
  if (iof__debug_walking) return -EDEADLK; /* the locks are held: spin */
  iof__spin_lock(&shards_lock);
  for (iof__debug_shard *sh = iof__debug_shards; sh; sh = sh->next) {
    iof__spin_lock(&sh->lock);
    iof_chain *c = sh->head;
    while (c && c->dbg_next) c = c->dbg_next;
    sh->walk = c;
  }
  iof__debug_walking = true;
  /* A run mark no context matches, on top while the callback runs: the
   * io and yield fast paths, which test the top mark, are not taken, and
   * the slow paths refuse to wait (iof__await_as). */
  static const iof_execution_context walk_ctx;
  iof_run_mark mark;
  iof__run_mark_push(&mark, &walk_ctx);
  int n = 0;
  for (iof_chain *c; (c = next_oldest()) != NULL;) {
    iof_fiber_info info = {0};
    fill_info(&info, c);
    n++;
    if (fn(&info, arg)) break;
  }
  iof__run_mark_pop(&mark);
  iof__debug_walking = false;
  for (iof__debug_shard *sh = iof__debug_shards; sh; sh = sh->next)
    iof__spin_unlock(&sh->lock);
  iof__spin_unlock(&shards_lock);
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
