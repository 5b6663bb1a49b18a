/* compat's threads: pthread_create/join/detach/self/equal/exit on fiber
 * "threads" (and the real calls on real threads), keys on fiber-local
 * storage.
 *
 * A fiber thread is a chain launched with a small malloc'd record as its
 * argument. The chain's frame (the stack) is freed the moment the fiber
 * ends, joined or not; the record alone stays until pthread_join (or goes
 * at once when detached), like the few bytes a real thread keeps for its
 * joiner. pthread_exit unwinds to the chain's entry with longjmp. */
#include "compat/signal_internal.h"
#include "compat/sigmask_internal.h"
#include "compat/thread_internal.h"

#include <dlfcn.h>
#include <errno.h>
#include <gnu/libc-version.h>
#include <link.h>
#include <iofiber/compat_io.h>
#include <iofiber/fls.h>
#include <iofiber/timer.h>
#include <sched.h>
#include <setjmp.h>
#include <signal.h>
#include <string.h>
#include <unistd.h>
#include <stdio.h>
#include <stdlib.h>

/* What a running fiber thread keeps on its own stack (thread_main's
 * frame): the jump to its end, its cleanup chain and its cancellation
 * state. cancel_w and cancel_woke are read and written under the record's
 * lk (pthread_cancel), the rest by the thread alone (cancel_off is read by
 * pthread_cancel under lk too). */
typedef struct thread_run {
  jmp_buf end;
  iof__unwind *chain;     /* newest first */
  iof__wait *cancel_w;    /* the cancellation point it waits in, or NULL */
  bool cancel_woke;       /* pthread_cancel ended that wait */
  bool cancel_off;        /* PTHREAD_CANCEL_DISABLE */
  bool cancel_async;      /* the type asked for (acts as deferred) */
  bool exiting;           /* unwinding: no more cancellation */
  struct tls_dtor *dtors; /* thread_local destructors, newest first */
  struct iof__cthread *join_target;   /* the thread it joins (under its lk) */
  struct iof__poll_cache *poll_cache; /* poll.c's, or NULL */
} thread_run;

/* A destructor of one of the thread's own thread-locals (C++ thread_local
 * objects register them through __cxa_thread_atexit_impl). */
typedef struct tls_dtor {
  struct tls_dtor *next;
  void (*fn)(void *);
  void *obj;
} tls_dtor;

struct iof__cthread {
  /* First: a record taken from the spares is cleared after it (the lock
   * may be held by a caller with a stale id at that moment). */
  atomic_int lk;
  void *(*fn)(void *);
  void *arg;
  void *ret;        /* before it runs: a name given meanwhile (malloc'd) */
  thread_run *run;  /* on the fiber's stack while it runs (under lk) */
  iof_fiber *fiber; /* while it runs (under lk) */
  void (*on_end)(void *ret);
  iof__tls_area *tls; /* its thread-locals, or NULL (the OS thread's) */
  uint32_t stack;     /* at most IOF_FIBER_STACK_MAX */
  /* Under lk. Bit-fields: the record's size is documented. */
  bool done : 1, detached : 1, joining : 1;
  bool retired : 1;        /* joined, or ended detached: a spare (below) */
  bool started : 1;        /* thread_main ran: ret is no early name since */
  bool own_stack : 1;      /* its frame is the program's memory */
  bool intr_restart : 1;   /* intr_op is one SA_RESTART restarts */
  bool cancel_pending : 1; /* pthread_cancel came */
  bool sigwaiting : 1;     /* in the sigwait family: any pthread_kill ends
                              its wait, blocked or not */
  iof__waitq joiner;
  /* pthread_kill's signals for it (bit sig - 1) and its interruptible
   * wait, both under lk (see iof__cthread_intr_enter). */
  uint64_t sig_pending;
  iof_io_op *intr_op;
  /* Its signal mask (sigmask.c): written only by the thread itself, read
   * by pthread_kill and by handlers. */
  _Atomic uint64_t sigmask;
};

/* What a never-joined thread keeps (documented in docs/porting.md). */
_Static_assert(sizeof(struct iof__cthread) <= 112, "join record size");

static atomic_long live_threads;

/* Records are never given back to malloc: a retired one (joined, or
 * detached and ended) goes to the spares, which pthread_create takes from
 * first. A stale id (a second join, pthread_kill(t, 0) on a thread that
 * was joined or ended detached) then still names a record: the calls find
 * it retired under its lock and answer ESRCH, as glibc does for the
 * descriptors it caches, instead of reading freed memory. An id that a
 * later thread reuses names that thread, as a reused tid does. The spares
 * number at most the peak of records alive at once. Linked through arg. */
static atomic_int spares_lk;
static iof__cthread *spares;

static void record_retire(iof__cthread *t) {
  iof__lk_lock(&t->lk);
  t->retired = true;
  iof__lk_unlock(&t->lk);
  iof__lk_lock(&spares_lk);
  t->arg = spares;
  spares = t;
  iof__lk_unlock(&spares_lk);
}

/* A cleared record, still retired until record_publish: a spare (cleared
 * under its lock, which a stale caller may hold) or a new one. A stale id
 * keeps its ESRCH while pthread_create fills the record in: a join that
 * found it neither retired nor detached there queued on it, and the new
 * thread, detached, claimed that join at its end and never woke it. */
static iof__cthread *record_new(void) {
  iof__lk_lock(&spares_lk);
  iof__cthread *t = spares;
  if (t) spares = t->arg;
  iof__lk_unlock(&spares_lk);
  if (!t) t = calloc(1, sizeof *t);
  if (!t) return NULL;
  iof__lk_lock(&t->lk);
  memset((char *)t + sizeof t->lk, 0, sizeof *t - sizeof t->lk);
  t->retired = true;
  iof__lk_unlock(&t->lk);
  return t;
}

/* The record set up: its id names it from here. The flags share their
 * bytes with those stale callers write under the lock. */
static void record_publish(iof__cthread *t, bool own_stack, bool detached) {
  iof__lk_lock(&t->lk);
  t->own_stack = own_stack;
  t->detached = detached;
  t->retired = false;
  iof__lk_unlock(&t->lk);
}

/* Whether the id is stale: its record was retired. */
static bool record_retired(iof__cthread *t) {
  iof__lk_lock(&t->lk);
  bool r = t->retired;
  iof__lk_unlock(&t->lk);
  return r;
}
static void (*_Atomic idle_hook)(void);

long iof__cthread_live(void) {
  return atomic_load(&live_threads);
}

void iof__cthread_set_idle_hook(void (*hook)(void)) {
  atomic_store(&idle_hook, hook);
}

static int thread_main(void *p) {
  iof__cthread *t = p;
  thread_run run = {0};
  iof__lk_lock(&t->lk);
  t->fiber = iof__cthr_fiber();
  t->started = true;
  if (t->ret) { /* named before it ran */
    iof_fiber_set_name(t->fiber, t->ret);
    free(t->ret);
    t->ret = NULL;
  }
  t->run = &run;
  bool own_stack = t->own_stack; /* a bit-field: read under the lock */
  iof__lk_unlock(&t->lk);
  if (own_stack) {
    /* Its frame is the program's memory, given once: the fibers it starts
     * with the current allocator (iof_when_all's children) take theirs
     * from its context's, not that memory again over its own frames. */
    iof_fiber *self = iof__cthr_fiber();
    iof_chain *c = self->sched;
    c->env.frame_allocator =
        iof_context_frame_allocator(iof_executor_context(c->env.executor));
    iof__refresh_allocator(self);
  }
  if (t->tls) iof__tls_attach(t->tls);
  iof__sigmask_host_enter(atomic_load(&t->sigmask));
  if (!setjmp(run.end)) t->ret = t->fn(t->arg);
  /* As glibc: thread_local destructors, then (at the fiber's end) keys'. */
  while (run.dtors) {
    tls_dtor *d = run.dtors;
    run.dtors = d->next;
    d->fn(d->obj);
    free(d);
  }
  iof__sigmask_host_leave(atomic_load(&t->sigmask));
  iof__poll_cache_free(run.poll_cache);
  if (t->tls) {
    iof__tls_detach();
    t->tls = NULL;
  }
  iof__lk_lock(&t->lk);
  t->fiber = NULL;
  t->run = NULL;
  iof__lk_unlock(&t->lk);
  return 0;
}

/* The record of the fiber thread running here, or NULL. */
static iof__cthread *self_record(void) {
  iof_fiber *f = iof__cthr_fiber();
  if (!f) return NULL;
  iof_chain *c = f->sched;
  return c && c->fn == thread_main ? c->arg : NULL;
}

struct iof__poll_cache **iof__cthread_poll_cache(void) {
  iof__cthread *t = self_record();
  return t && t->run ? &t->run->poll_cache : NULL;
}

/* After the frame is freed (key destructors have run in the fiber). */
static void thread_freed(void *user, int status) {
  (void)status;
  iof__cthread *t = user;
  iof__lk_lock(&t->lk);
  if (!t->started) { /* never ran (shut down first): no result, no name */
    free(t->ret);
    t->ret = NULL;
  }
  iof__lk_unlock(&t->lk);
  if (t->on_end) t->on_end(t->ret);
  iof__lk_lock(&t->lk);
  t->done = true;
  bool det = t->detached;
  iof__wnode *n = iof__wq_claim_first(&t->joiner, 0);
  iof__lk_unlock(&t->lk);
  if (det)
    record_retire(t);
  else if (n)
    iof__cwait_wake(n->w); /* t belongs to the joiner from here */
  if (atomic_fetch_sub(&live_threads, 1) == 1) {
    void (*h)(void) = atomic_load(&idle_hook);
    if (h) h();
  }
}

/* Fiber threads whose stack is not the default size (a pthread attr's,
 * IOF_STACK_SIZE) take it from a pool of its size class, the next power of
 * two, made on first use: mapped and unmapped for each thread, a
 * thread-per-connection server paid an munmap per connection (a TLB
 * shootdown of every CPU running the process). Past SIZE_CLASSES distinct
 * classes, stacks are mapped directly again. Pools live as long as the
 * process, as the default one does. */
#define SIZE_CLASSES 16

static struct {
  size_t size; /* written before pool is published */
  iof_stack_pool *_Atomic pool;
} classes[SIZE_CLASSES];
/* A spin lock: libc's mutex is what the hook intercepts (once per class). */
static atomic_flag classes_lock = ATOMIC_FLAG_INIT;

iof_stack_pool *iof__compat_stack_class(size_t size) {
  for (int i = 0; i < SIZE_CLASSES; i++) {
    iof_stack_pool *p =
        atomic_load_explicit(&classes[i].pool, memory_order_acquire);
    if (!p) break;
    if (classes[i].size == size) return p;
  }
  return NULL;
}

/* The pool of class c, made in the first free slot if there is none yet;
 * NULL when the table is full or the pool could not be made. */
static iof_stack_pool *class_pool(size_t c) {
  iof_stack_pool *p = iof__compat_stack_class(c);
  if (p) return p;
  while (atomic_flag_test_and_set_explicit(&classes_lock, memory_order_acquire))
    iof_compat_sched_yield();
  p = iof__compat_stack_class(c); /* made meanwhile? */
  for (int i = 0; !p && i < SIZE_CLASSES; i++) {
    if (atomic_load_explicit(&classes[i].pool, memory_order_relaxed)) continue;
    iof_stack_pool_options o = {0};
    o.stack_size = c;
    o.depot_max = 64;
    p = iof_stack_pool_create(&o);
    if (p) {
      classes[i].size = c;
      atomic_store_explicit(&classes[i].pool, p, memory_order_release);
    }
    break;
  }
  atomic_flag_clear_explicit(&classes_lock, memory_order_release);
  return p;
}

/* The pool for *stack's class (*stack becomes the class size), or NULL:
 * the context's default allocator, with *stack unchanged. */
static iof_frame_allocator *class_allocator(size_t *stack) {
  if (*stack == IOF_FIBER_STACK_DEFAULT || *stack > IOF_FIBER_STACK_MAX)
    return NULL;
  size_t c = IOF_FIBER_STACK_MIN;
  while (c < *stack) c <<= 1;
  if (c == IOF_FIBER_STACK_DEFAULT) {
    *stack = c;
    return NULL;
  }
  iof_stack_pool *p = class_pool(c);
  if (!p) return NULL;
  *stack = c;
  return iof_stack_pool_allocator(p);
}

/* main's thread-locals, for iof__cthread_main_tls_back. */
static iof__tls_area *main_tls;

void iof__cthread_main_tls_back(void) {
  iof__tls_area *a = main_tls;
  main_tls = NULL;
  if (a) iof__tls_restore(a);
}

int iof__cthread_start(iof_executor_ref ex, size_t stack,
                       iof_frame_allocator *alloc, bool detached,
                       void *(*fn)(void *), void *arg,
                       void (*on_end)(void *ret), pthread_t *out) {
  bool own_stack = alloc != NULL;
  if (!alloc) alloc = class_allocator(&stack);
  iof__cthread *t = record_new();
  if (!t) return -ENOMEM;
  /* main (no fiber yet) keeps the values the OS thread has, and gives
   * them back at iof_main's end; a thread created later starts from the
   * initial ones, as a new thread does. */
  bool is_main = iof__cthr_fiber() == NULL;
  if (iof__tls_area_new(is_main, &t->tls) < 0) {
    record_retire(t);
    return -ENOMEM;
  }
  t->fn = fn;
  t->arg = arg;
  t->on_end = on_end;
  t->stack = (uint32_t)stack;
  atomic_init(&t->sigmask, iof__sigmask_current()); /* as pthread_create */
  record_publish(t, own_stack, detached);
  /* The id is published before the thread can run (it may read it). */
  if (out) *out = (pthread_t)((uintptr_t)t | 1);
  iof_launch_opts o = {0};
  o.stack_size = stack;
  o.frame_allocator = alloc;
  o.user = t;
  atomic_fetch_add(&live_threads, 1);
  int r = iof__run_async_ex(ex, &o, thread_main, t, thread_freed);
  if (r < 0) {
    atomic_fetch_sub(&live_threads, 1);
    if (t->tls) iof__tls_area_free(t->tls);
    record_retire(t);
  } else if (is_main && t->tls) {
    /* main's context is not running yet (iof_main runs it next). */
    iof__tls_area_ref(t->tls);
    main_tls = t->tls;
  }
  return r;
}

/* glibc reports its default size (RLIMIT_STACK's, 8 MiB) for an attr
 * whose size was never set, and that must not give every fiber thread
 * 8 MiB; but a program may set exactly that size and need it (OpenLDAP
 * asks for 8 MiB). glibc keeps 0 in its record until a size is set: the
 * word that holds it is found once, by setting two sizes on a probe attr.
 * Without it, a size equal to the default reads as "not set". */
enum { SIZE_WORDS = sizeof(pthread_attr_t) / sizeof(size_t) };

static int probe_size_word(void) {
  pthread_attr_t a;
  size_t w[SIZE_WORDS], sizes[2] = {(size_t)1 << 20, (size_t)3 << 20};
  bool maybe[SIZE_WORDS];
  if (pthread_attr_init(&a) != 0) return -1;
  memcpy(w, &a, sizeof w);
  for (int i = 0; i < SIZE_WORDS; i++) maybe[i] = w[i] == 0;
  for (int k = 0; k < 2; k++) {
    if (pthread_attr_setstacksize(&a, sizes[k]) != 0) break;
    memcpy(w, &a, sizeof w);
    for (int i = 0; i < SIZE_WORDS; i++) maybe[i] &= w[i] == sizes[k];
  }
  pthread_attr_destroy(&a);
  int found = -1;
  for (int i = 0; i < SIZE_WORDS; i++) {
    if (!maybe[i]) continue;
    if (found >= 0) return -1; /* ambiguous */
    found = i;
  }
  return found;
}

static size_t plain_default_stack(void) {
  pthread_attr_t a;
  size_t v = 0;
  if (pthread_attr_init(&a) != 0) return 1;
  if (pthread_attr_getstacksize(&a, &v) != 0 || !v) v = 1;
  pthread_attr_destroy(&a);
  return v;
}

static pthread_once_t size_once = PTHREAD_ONCE_INIT;
static int size_word;
static size_t size_default;

static void probe_sizes(void) {
  size_word = probe_size_word();
  size_default = plain_default_stack();
}

/* The stack size attr asks for, or 0 when it never set one. */
static size_t attr_stack(const pthread_attr_t *attr) {
  iof__libc.pthread_once(&size_once, probe_sizes);
  size_t s = 0;
  if (size_word >= 0) {
    memcpy(&s, (const char *)attr + (size_t)size_word * sizeof s, sizeof s);
    return s;
  }
  if (pthread_attr_getstacksize(attr, &s) != 0 || s == size_default) return 0;
  return s;
}

/* A stack the program allocated (pthread_attr_setstack): the fiber runs
 * on it, as the thread would, so that code finding its stack from the
 * memory it gave (or the memory from the stack pointer) works. This
 * allocator object sits at the top of that memory, above the frame, where
 * the stack never reaches; it hands out the memory below itself once and
 * takes nothing back (the program owns it: the frame is given back before
 * a joiner wakes, so the program may free it once pthread_join returns). */
typedef struct user_stack {
  iof_frame_allocator base;
  char *lo;
  bool given;
} user_stack;

static void *user_stack_allocate(iof_frame_allocator *self, size_t size) {
  user_stack *u = (user_stack *)self;
  if (u->given || size > (size_t)((char *)u - u->lo)) {
    errno = ENOMEM;
    return NULL;
  }
  u->given = true;
  return (char *)u - size;
}

static void user_stack_deallocate(iof_frame_allocator *self, void *p,
                                  size_t size) {
  (void)self, (void)p, (void)size;
}

static const iof_frame_allocator_vtbl user_stack_vtbl = {user_stack_allocate,
                                                         user_stack_deallocate};

/* The allocator over attr's stack, *stack set to the frame size it gives
 * (whole pages below the object); NULL when attr has no stack address or
 * too little room is left for a fiber (a pool stack of that size then). */
static iof_frame_allocator *attr_user_stack(const pthread_attr_t *attr,
                                            size_t *stack) {
  void *addr = NULL;
  size_t size = 0;
  /* glibc keeps the top; without an address set it reports 0 - size. */
  if (pthread_attr_getstack(attr, &addr, &size) != 0 || !size ||
      (uintptr_t)addr + size == 0)
    return NULL;
  uintptr_t top = (uintptr_t)addr + size;
  uintptr_t obj = (top - sizeof(user_stack)) & ~(uintptr_t)63;
  if (obj < (uintptr_t)addr) return NULL;
  size_t page = (size_t)sysconf(_SC_PAGESIZE);
  size_t room = (size_t)(obj - (uintptr_t)addr) & ~(page - 1);
  if (room < IOF_FIBER_STACK_MIN || room > IOF_FIBER_STACK_MAX) return NULL;
  user_stack *u = (user_stack *)obj;
  u->base.vtbl = &user_stack_vtbl;
  u->lo = addr;
  u->given = false;
  *stack = room;
  return &u->base;
}

int iof_compat_pthread_create(pthread_t *thread, const pthread_attr_t *attr,
                              void *(*fn)(void *), void *arg) {
  /* Checked for plain threads too: glibc would start a thread that jumps
   * to NULL, or write through a NULL id. */
  if (!thread || !fn) return EINVAL;
  iof_fiber *self = iof__cthr_fiber();
  if (!self) return iof__libc.pthread_create(thread, attr, fn, arg);
  size_t stack = iof__compat_thread_stack();
  int det = PTHREAD_CREATE_JOINABLE;
  iof_frame_allocator *own = NULL;
  if (attr) {
    size_t s = attr_stack(attr);
    if (s) stack = s;
    if (pthread_attr_getdetachstate(attr, &det) != 0) return EINVAL;
    own = attr_user_stack(attr, &stack);
  }
  if (stack < IOF_FIBER_STACK_MIN) stack = IOF_FIBER_STACK_MIN;
  if (stack > IOF_FIBER_STACK_MAX) return EAGAIN; /* as mmap would fail */
  int r =
      iof__cthread_start(iof__compat_pick_executor(self), stack, own,
                         det == PTHREAD_CREATE_DETACHED, fn, arg, NULL, thread);
  if (r == -EINVAL) return EINVAL;
  return r < 0 ? EAGAIN : 0;
}

static iof__cthread *record_of(pthread_t t) {
  uintptr_t v = (uintptr_t)t;
  return v & 1 ? (iof__cthread *)(v & ~(uintptr_t)1) : NULL;
}

static iof__cthread *record_of_fiber(iof_fiber *f);

/* ---- exit, cleanup handlers, cancellation ------------------------------
 * glibc keeps the cleanup buffers of pthread_cleanup_push and the cancel
 * state in its thread descriptor, which the fiber threads of an OS thread
 * share: a fiber thread keeps its own in its thread_run instead. Exit runs
 * the chain newest first: compat's own cleanups are called, a user's
 * buffer is longjmp'd into (its routine runs, then its
 * __pthread_unwind_next comes back to unwind), then the stack unwinds to
 * thread_main, and the fiber's end runs the key destructors. */

/* Entries below `frame` belong to frames a longjmp has left (a handler's
 * siglongjmp out of a wait): dropped, as they are dead. */
static iof__unwind *live_chain(thread_run *run, const void *frame) {
  while (run->chain && (const void *)run->chain < frame)
    run->chain = run->chain->prev;
  return run->chain;
}

static _Noreturn void unwind(thread_run *run) {
  for (;;) {
    iof__unwind *u = live_chain(run, __builtin_frame_address(0));
    if (!u) longjmp(run->end, 1);
    run->chain = u->prev;
    if (u->fn) {
      u->fn(u->arg);
      continue;
    }
    __pthread_unwind_buf_t *b = u->arg;
    /* Saved by __sigsetjmp without the mask: longjmp reads no more than
     * the buffer holds (called through a pointer, which the compiler does
     * not size-check against a whole jmp_buf). */
    void (*volatile jump)(struct __jmp_buf_tag *, int) = longjmp;
    jump((struct __jmp_buf_tag *)(void *)b->__cancel_jmp_buf, 1);
    __builtin_unreachable();
  }
}

static _Noreturn void thread_exit(iof__cthread *t, void *retval) {
  iof__lk_lock(&t->lk);
  t->run->exiting = true; /* no cancellation inside the handlers */
  t->run->cancel_w = NULL;
  t->run->join_target = NULL; /* a cancel may have left a join */
  iof__lk_unlock(&t->lk);
  t->ret = retval;
  unwind(t->run);
}

/* Under t->lk: a cancel must act now in t (t running, itself). */
static bool cancel_due(const iof__cthread *t) {
  return t->cancel_pending && t->run && !t->run->cancel_off && !t->run->exiting;
}

/* The calling fiber thread acts on a due cancel. */
static void test_cancel(iof__cthread *t) {
  iof__lk_lock(&t->lk);
  bool due = cancel_due(t);
  iof__lk_unlock(&t->lk);
  if (due) thread_exit(t, PTHREAD_CANCELED);
}

void iof__cthread_testcancel(void) {
  iof__cthread *t = self_record();
  if (t && t->run) test_cancel(t);
}

bool iof__cthread_guard_push(iof__unwind *u, void (*fn)(void *), void *arg) {
  iof__cthread *t = self_record();
  u->fn = fn;
  u->arg = arg;
  u->prev = NULL;
  if (!t || !t->run) return false;
  u->prev = live_chain(t->run, __builtin_frame_address(0));
  t->run->chain = u;
  return true;
}

/* Takes u (and whatever a longjmp left above it) off the chain. */
static void chain_remove(thread_run *run, iof__unwind *u) {
  for (iof__unwind *c = run->chain; c; c = c->prev)
    if (c == u) {
      run->chain = u->prev;
      return;
    }
}

void iof__cthread_guard_pop(iof__unwind *u) {
  iof__cthread *t = self_record();
  if (t && t->run) chain_remove(t->run, u);
}

/* A wait that is a cancellation point: begin runs behind cancel_begin,
 * which registers the wait for pthread_cancel once its record is set up
 * (before, an abort would be lost to the record's initialization). */
typedef struct cancel_op {
  iof__cthread *t;
  void *op;
  iof__wait_begin begin;
} cancel_op;

static bool cancel_begin(void *p, iof__wait *w) {
  cancel_op *c = p;
  iof__lk_lock(&c->t->lk);
  if (cancel_due(c->t)) {
    iof__lk_unlock(&c->t->lk);
    w->result = -ECANCELED;
    return false;
  }
  c->t->run->cancel_w = w;
  iof__lk_unlock(&c->t->lk);
  return c->begin(c->op, w);
}

/* After such a wait: whether the cancel acts now (it came, and no waker
 * completed the wait: a cond signal or a sem post is not consumed). */
static bool cancel_after(iof__cthread *t, const iof__wait *w) {
  iof__lk_lock(&t->lk);
  t->run->cancel_w = NULL;
  bool due = cancel_due(t) && !w->by_waker;
  iof__lk_unlock(&t->lk);
  return due;
}

int iof__cthread_cwait(void *op, iof__wait_begin begin, iof__cwait *cw,
                       int64_t deadline_ns) {
  iof__cthread *t = self_record();
  if (!t || !t->run) return iof__cwait_block(op, begin, cw, deadline_ns);
  test_cancel(t);
  cancel_op c = {t, op, begin};
  int r = iof__cwait_block(&c, cancel_begin, cw, deadline_ns);
  return cancel_after(t, &cw->w) ? -ECANCELED : r;
}

/* A sleep's wait: nothing to queue, its timer ends it. */
static bool sleep_begin(void *op, iof__wait *w) {
  (void)op;
  return iof__wait_publish(w);
}

int iof__cthread_sleep(iof_fiber *f, int64_t deadline_ns) {
  iof__cthread *t = record_of_fiber(f);
  if (!t || !t->run || t != self_record()) {
    int r = iof_sleep_until(deadline_ns); /* the timers' own order */
    return r == 0 ? -ETIMEDOUT : r;
  }
  test_cancel(t);
  cancel_op c = {t, NULL, sleep_begin};
  iof__wait w;
  int r = iof__wait_block(&c, cancel_begin, &w, deadline_ns,
                          IOF__WAIT_CANCELLABLE | IOF__WAIT_IN_ORDER |
                              IOF__WAIT_IO);
  if (cancel_after(t, &w)) thread_exit(t, PTHREAD_CANCELED);
  return r;
}

int iof_compat_pthread_setcancelstate(int state, int *old) {
  if (state != PTHREAD_CANCEL_ENABLE && state != PTHREAD_CANCEL_DISABLE)
    return EINVAL;
  iof__cthread *t = self_record();
  if (!t || !t->run) return iof__libc.pthread_setcancelstate(state, old);
  iof__lk_lock(&t->lk);
  if (old)
    *old = t->run->cancel_off ? PTHREAD_CANCEL_DISABLE : PTHREAD_CANCEL_ENABLE;
  t->run->cancel_off = state == PTHREAD_CANCEL_DISABLE;
  iof__lk_unlock(&t->lk);
  return 0;
}

int iof_compat_pthread_setcanceltype(int type, int *old) {
  if (type != PTHREAD_CANCEL_DEFERRED && type != PTHREAD_CANCEL_ASYNCHRONOUS)
    return EINVAL;
  iof__cthread *t = self_record();
  if (!t || !t->run) return iof__libc.pthread_setcanceltype(type, old);
  if (old)
    *old = t->run->cancel_async ? PTHREAD_CANCEL_ASYNCHRONOUS
                                : PTHREAD_CANCEL_DEFERRED;
  t->run->cancel_async = type == PTHREAD_CANCEL_ASYNCHRONOUS;
  return 0;
}

void iof_compat_pthread_testcancel(void) {
  iof__cthread *t = self_record();
  if (!t || !t->run) {
    iof__libc.pthread_testcancel();
    return;
  }
  test_cancel(t);
}

/* The calls glibc's pthread_cleanup_push/pop expand to (C, without
 * exceptions): a fiber thread's buffers go on its own chain. The buffer's
 * spare words hold the chain entry. */
_Static_assert(sizeof(((__pthread_unwind_buf_t *)0)->__pad) >=
                   sizeof(iof__unwind),
               "chain entry in the buffer's spare words");

void iof_compat_pthread_register_cancel(__pthread_unwind_buf_t *buf) {
  iof__cthread *t = self_record();
  if (!t || !t->run) {
    iof__libc.__pthread_register_cancel(buf);
    return;
  }
  (void)iof__cthread_guard_push((iof__unwind *)(void *)buf->__pad, NULL, buf);
}

void iof_compat_pthread_unregister_cancel(__pthread_unwind_buf_t *buf) {
  iof__cthread *t = self_record();
  if (!t || !t->run) {
    iof__libc.__pthread_unregister_cancel(buf);
    return;
  }
  chain_remove(t->run, (iof__unwind *)(void *)buf->__pad);
}

void iof_compat_pthread_unwind_next(__pthread_unwind_buf_t *buf) {
  iof__cthread *t = self_record();
  if (!t || !t->run) {
    iof__libc.__pthread_unwind_next(buf);
    __builtin_unreachable();
  }
  unwind(t->run); /* a handler ran: the next one, or the end */
}

typedef struct join_op {
  iof__cthread *t;
  iof__wnode node;
  bool published;
} join_op;

static bool join_begin(void *p, iof__wait *w) {
  join_op *op = p;
  iof__cthread *t = op->t;
  iof__lk_lock(&t->lk);
  if (t->done) {
    iof__lk_unlock(&t->lk);
    w->result = 0;
    return false;
  }
  bool queued = iof__wq_push_publish(&t->joiner, &op->node, &op->published, w);
  iof__lk_unlock(&t->lk);
  return queued;
}

/* deadline_ns: CLOCK_MONOTONIC, < 0 none; try: EBUSY rather than wait. */
static int join_record(iof__cthread *t, void **retval, int64_t deadline_ns,
                       bool try);

static void set_join_target(iof__cthread *self, iof__cthread *t) {
  iof__lk_lock(&self->lk);
  self->run->join_target = t;
  iof__lk_unlock(&self->lk);
}

static int join(pthread_t thread, void **retval, int64_t deadline_ns,
                bool try) {
  iof__cthread *t = record_of(thread);
  iof__cthread *self = self_record();
  if (t == self) return EDEADLK;
  iof__cthread_testcancel(); /* a cancellation point, even if t is done */
  if (try || !self || !self->run)
    return join_record(t, retval, deadline_ns, try);
  /* Two threads joining each other would wait forever: as glibc, the
   * second one's join is EDEADLK. Each records its target before it
   * looks at the other's, under the locks: of two racing joins, at least
   * the later look sees the earlier record. */
  set_join_target(self, t);
  iof__lk_lock(&t->lk);
  bool cycle = t->run && t->run->join_target == self && !t->done;
  iof__lk_unlock(&t->lk);
  int r = cycle ? EDEADLK : join_record(t, retval, deadline_ns, try);
  set_join_target(self, NULL);
  return r;
}

static int join_record(iof__cthread *t, void **retval, int64_t deadline_ns,
                       bool try) {
  iof__lk_lock(&t->lk);
  if (t->retired) {
    iof__lk_unlock(&t->lk);
    return ESRCH;
  }
  if (t->detached || t->joining) {
    iof__lk_unlock(&t->lk);
    return EINVAL;
  }
  bool done = t->done;
  t->joining = !try || done;
  iof__lk_unlock(&t->lk);
  if (!done) {
    if (try) return EBUSY;
    join_op op = {t, {0}, false};
    iof__cwait cw;
    op.node.w = &cw.w;
    int r = iof__cthread_cwait(&op, join_begin, &cw, deadline_ns);
    if (r < 0) {
      /* Timed out or cancelled: t stays joinable, unless it ended (and
       * claimed the wait) meanwhile. */
      iof__lk_lock(&t->lk);
      if (op.published) iof__wq_unlink(&t->joiner, &op.node);
      done = t->done;
      if (!done) t->joining = false;
      iof__lk_unlock(&t->lk);
      if (!done) {
        if (r == -ECANCELED) iof__cthread_testcancel();
        return -r;
      }
    }
  }
  if (retval) *retval = t->ret;
  record_retire(t);
  return 0;
}

int iof_compat_cxa_thread_atexit_impl(void (*fn)(void *), void *obj,
                                      void *dso) {
  (void)dso;
  iof__cthread *t = self_record();
  /* main's go to glibc, which runs them at exit (called from main, with
   * its values in place) as it does for a main thread. */
  if (!t || !t->tls || t->tls == main_tls || !fn ||
      !(iof__tls_owns(obj) || iof__tls_owns_dyn(obj)))
    return -ESRCH;
  tls_dtor *d = malloc(sizeof *d);
  if (!d) return -ENOMEM;
  *d = (tls_dtor){t->run->dtors, fn, obj};
  t->run->dtors = d;
  return 0;
}

void *iof_compat_tls_get_addr(void *ti, void *(*real)(void *)) {
  if (!ti || !real) { /* a loader's call never has these */
    errno = EINVAL;
    return NULL;
  }
  return iof__tls_dyn_addr(ti, real);
}

/* Whether h is the handle (glibc: the link_map) of a loaded module, in
 * any namespace: the loader's lists (r_debug, through the executable's
 * DT_DEBUG; each namespace's with r_version 2), walked under its lock (a
 * dl_iterate_phdr callback) without reading *h. `known`: the lists were
 * found, and all of them (else the handle cannot be judged). */
typedef struct handle_find {
  const void *h;
  bool v1_complete; /* glibc 2.35 or later */
  bool found, known;
} handle_find;

static bool glibc_at_least(int major, int minor) {
  int ma = 0, mi = 0;
  if (sscanf(gnu_get_libc_version(), "%d.%d", &ma, &mi) != 2) return false;
  return ma > major || (ma == major && mi >= minor);
}

static int find_handle(struct dl_phdr_info *info, size_t size, void *p) {
  (void)size;
  handle_find *f = p;
  const ElfW(Dyn) *dyn = NULL; /* the first module is the executable */
  for (int i = 0; i < info->dlpi_phnum; i++)
    if (info->dlpi_phdr[i].p_type == PT_DYNAMIC)
      dyn = (const ElfW(Dyn) *)(info->dlpi_addr + info->dlpi_phdr[i].p_vaddr);
  const struct r_debug_extended *d = NULL;
  for (; dyn && dyn->d_tag != DT_NULL; dyn++)
    if (dyn->d_tag == DT_DEBUG)
      d = (const struct r_debug_extended *)dyn->d_un.d_ptr;
  /* From glibc 2.35 the first list says r_version 2 once a second
   * namespace exists; before, other namespaces are not listed there. */
  f->known = d && (d->base.r_version >= 2 || f->v1_complete);
  for (; d; d = d->base.r_version >= 2 ? d->r_next : NULL)
    for (const struct link_map *l = d->base.r_map; l; l = l->l_next)
      if ((const void *)l == f->h) {
        f->found = true;
        return 1;
      }
  return 1; /* the executable's entry is enough */
}

int iof_compat_dlclose(void *handle) {
  handle_find f = {handle, glibc_at_least(2, 35), false, false};
  if (handle) dl_iterate_phdr(find_handle, &f);
  if (!handle || (f.known && !f.found)) { /* glibc's would dereference it */
    errno = EINVAL;
    return -1;
  }
  int r = iof__libc.dlclose(handle);
  if (r == 0) iof__tls_modules_closed();
  return r;
}

int iof_compat_pthread_join(pthread_t thread, void **retval) {
  if (!record_of(thread)) return iof__libc.pthread_join(thread, retval);
  return join(thread, retval, -1, false);
}

int iof_compat_pthread_detach(pthread_t thread) {
  iof__cthread *t = record_of(thread);
  if (!t) return iof__libc.pthread_detach(thread);
  iof__lk_lock(&t->lk);
  if (t->retired || t->detached || t->joining) {
    int e = t->retired ? ESRCH : EINVAL;
    iof__lk_unlock(&t->lk);
    return e;
  }
  t->detached = true;
  bool done = t->done;
  iof__lk_unlock(&t->lk);
  if (done) record_retire(t);
  return 0;
}

pthread_t iof_compat_pthread_self(void) {
  iof__cthread *t = self_record();
  return t ? (pthread_t)((uintptr_t)t | 1) : iof__libc.pthread_self();
}

int iof_compat_pthread_equal(pthread_t a, pthread_t b) {
  return a == b;
}

void iof_compat_pthread_exit(void *retval) {
  iof__cthread *t = self_record();
  if (t && t->run) thread_exit(t, retval);
  iof_thread_state *th = iof__thread_peek();
  if (!th || th->current == &th->root) iof__libc.pthread_exit(retval);
  /* A fiber that pthread_create did not start ends as if its function had
   * returned 0 (pthread_exit cannot return, and the OS thread is not the
   * caller's to end). */
  iof__chain_exit(th->current, 0);
}

/* ---- calls that take a pthread_t ------------------------------------ */

/* glibc would dereference a fiber thread's id as its own thread
 * descriptor: these answer for fiber threads and pass real ids on. */

int iof_compat_pthread_setname_np(pthread_t thread, const char *name) {
  if (!name) return EINVAL; /* glibc would strlen(NULL) */
  iof__cthread *t = record_of(thread);
  if (!t) return pthread_setname_np(thread, name);
  size_t n = strlen(name);
  if (n > 15) return ERANGE;
  /* Not running yet (named right after pthread_create): kept until it
   * runs. */
  char *early = malloc(n + 1);
  if (!early) return ENOMEM;
  memcpy(early, name, n + 1);
  int r = 0;
  iof__lk_lock(&t->lk);
  if (t->retired) {
    r = ESRCH;
  } else if (t->fiber) {
    iof_fiber_set_name(t->fiber, name);
  } else if (!t->started) {
    /* Once it ran, ret is its result (the name of an ended thread is
     * gone with its fiber, as a thread's with its task). */
    char *old = t->ret;
    t->ret = early;
    early = old;
  }
  iof__lk_unlock(&t->lk);
  free(early);
  return r;
}

int iof_compat_pthread_getname_np(pthread_t thread, char *buf, size_t len) {
  if (!buf) return EINVAL; /* glibc would write through it */
  iof__cthread *t = record_of(thread);
  if (!t) return pthread_getname_np(thread, buf, len);
  iof__lk_lock(&t->lk);
  const char *n = t->retired              ? NULL
                  : t->fiber              ? iof_fiber_name(t->fiber)
                  : !t->started && t->ret ? (const char *)t->ret
                                          : "";
  size_t l = n ? strlen(n) : 0;
  /* glibc refuses a buffer shorter than a kernel thread name (16), even
   * for a short name: the same answer whatever the name is now. */
  int r = !n ? ESRCH : len >= 16 && l < len ? 0 : ERANGE;
  if (!r) memcpy(buf, n, l + 1);
  iof__lk_unlock(&t->lk);
  return r;
}

/* The record of fiber f if it is a fiber thread's, else NULL. */
static iof__cthread *record_of_fiber(iof_fiber *f) {
  iof_chain *c = f ? f->sched : NULL;
  return c && c->fn == thread_main ? c->arg : NULL;
}

static uint64_t sig_bit(int sig) {
  return sig > 0 && sig <= 64 ? (uint64_t)1 << (sig - 1) : 0;
}

/* Under t->lk: the pending signals t's mask lets in, taken. */
static uint64_t take_pending(iof__cthread *t) {
  uint64_t p = t->sig_pending & ~atomic_load(&t->sigmask);
  t->sig_pending &= ~p;
  return p;
}

/* These waits are cancellation points too (fds, poll, sigwait, waitpid):
 * a due cancel acts before the wait and after it, however it ended (they
 * wait for readiness: nothing is consumed yet). What their callers hold
 * across the wait is on the cleanup chain (iof__cthread_guard_push). */
bool iof__cthread_intr_enter(iof_fiber *f, struct iof_io_op *op,
                             bool restartable, uint64_t *pending) {
  iof__cthread *t = record_of_fiber(f);
  *pending = 0;
  if (!t) return false;
  iof__lk_lock(&t->lk);
  if (cancel_due(t)) {
    iof__lk_unlock(&t->lk);
    thread_exit(t, PTHREAD_CANCELED);
  }
  *pending = take_pending(t);
  t->intr_op = op;
  t->intr_restart = restartable;
  if (t->run) t->run->cancel_w = &op->w;
  iof__lk_unlock(&t->lk);
  return true;
}

uint64_t iof__cthread_intr_leave(iof_fiber *f, bool *restartable) {
  iof__cthread *t = record_of_fiber(f);
  if (!t) return 0;
  iof__lk_lock(&t->lk);
  if (t->run) t->run->cancel_w = NULL;
  if (cancel_due(t)) {
    t->intr_op = NULL;
    iof__lk_unlock(&t->lk);
    thread_exit(t, PTHREAD_CANCELED);
  }
  uint64_t p = take_pending(t);
  t->intr_op = NULL;
  *restartable = t->intr_restart;
  iof__lk_unlock(&t->lk);
  return p;
}

int iof_compat_pthread_kill(pthread_t thread, int sig) {
  iof__cthread *t = record_of(thread);
  if (!t) return pthread_kill(thread, sig);
  /* 32 and 33 below SIGRTMIN are glibc's own (cancellation, setxid). */
  if (sig < 0 || sig >= NSIG || (sig >= 32 && sig < SIGRTMIN)) return EINVAL;
  if (record_retired(t)) return ESRCH;
  if (sig == 0) return 0; /* "does it exist": it is not yet joined */
  /* Ended, not joined yet: glibc answers 0 and sends nothing. The
   * disposition below would apply to a thread that is gone (a default
   * one ended the whole process). */
  iof__lk_lock(&t->lk);
  bool ended = t->done || (t->started && !t->fiber);
  iof__lk_unlock(&t->lk);
  if (ended) return 0;
  bool blocked = atomic_load(&t->sigmask) & sig_bit(sig);
  if (!blocked) {
    /* The disposition applies now; a blocked signal stays pending for the
     * thread whatever it is, as the kernel's does. */
    switch (iof__compat_disposition(sig)) {
    case IOF__SIG_IGNORE:
      return 0;
    case IOF__SIG_PROCESS:
      return kill(getpid(), sig) == 0 ? 0 : errno;
    }
    if (t == self_record()) { /* as raise(): runs before return */
      iof__compat_run_handler(sig);
      return 0;
    }
  }
  /* Like a thread's pending signal: its handler runs in that fiber, and
   * the interruptible call it waits in returns EINTR (or is restarted
   * under SA_RESTART). A fiber not waiting runs it at its next call; one
   * that blocks it, once it unblocks it. */
  iof__lk_lock(&t->lk);
  if (t->fiber) {
    t->sig_pending |= sig_bit(sig);
    if (t->intr_op && (!blocked || t->sigwaiting))
      (void)iof__io_complete(t->intr_op, -EINTR);
  }
  iof__lk_unlock(&t->lk);
  return 0;
}

_Atomic uint64_t *iof__cthread_sigmask(iof_fiber *f) {
  iof__cthread *t = record_of_fiber(f);
  return t ? &t->sigmask : NULL;
}

bool iof__cthread_sigwaiting(bool on) {
  iof__cthread *t = self_record();
  if (!t) return false;
  iof__lk_lock(&t->lk);
  t->sigwaiting = on;
  iof__lk_unlock(&t->lk);
  return true;
}

int iof__cthread_take_waited(uint64_t set) {
  iof__cthread *t = self_record();
  if (!t) return 0;
  iof__lk_lock(&t->lk);
  uint64_t p = t->sig_pending & set;
  int sig = p ? __builtin_ctzll(p) + 1 : 0; /* the lowest, as the kernel */
  if (sig) t->sig_pending &= ~sig_bit(sig);
  iof__lk_unlock(&t->lk);
  return sig;
}

uint64_t iof__cthread_take_unblocked(void) {
  iof__cthread *t = self_record();
  if (!t) return 0;
  iof__lk_lock(&t->lk);
  uint64_t p = take_pending(t);
  iof__lk_unlock(&t->lk);
  return p;
}

/* Deferred cancellation: marks it pending and ends the cancellation point
 * the thread waits in, if any; it acts there (or at the next one) unless
 * the thread disabled it. A thread that has ended: 0 (as glibc 2.34+). */
int iof_compat_pthread_cancel(pthread_t thread) {
  iof__cthread *t = record_of(thread);
  if (!t) return pthread_cancel(thread);
  iof__lk_lock(&t->lk);
  if (t->retired) {
    iof__lk_unlock(&t->lk);
    return ESRCH;
  }
  if (!t->done) {
    t->cancel_pending = true;
    if (cancel_due(t) && t->run->cancel_w)
      (void)iof__wait_abort(t->run->cancel_w, -ECANCELED);
  }
  iof__lk_unlock(&t->lk);
  return 0;
}

int iof_compat_pthread_getattr_np(pthread_t thread, pthread_attr_t *attr) {
  if (!attr) return EINVAL;
  iof__cthread *t = record_of(thread);
  if (!t) return pthread_getattr_np(thread, attr);
  if (record_retired(t)) return ESRCH;
  int r = pthread_attr_init(attr);
  if (r) return r;
  iof__lk_lock(&t->lk);
  bool det = t->detached;
  /* Where it runs: the lowest address its stack may use, for t->stack
   * bytes (the frame is that rounded up to pages, the control block at
   * its top). Stack scanners and guard-page makers (the JVM) read it. */
  void *lo = NULL;
  if (t->fiber)
    lo = t->fiber->soft_lo ? (void *)t->fiber->soft_lo : t->fiber->base;
  iof__lk_unlock(&t->lk);
  pthread_attr_setdetachstate(attr, det ? PTHREAD_CREATE_DETACHED
                                        : PTHREAD_CREATE_JOINABLE);
  if (lo)
    pthread_attr_setstack(attr, lo, t->stack);
  else
    pthread_attr_setstacksize(attr, t->stack);
  return 0;
}

/* ---- joins with a limit, scheduling, affinity, sigqueue ------------- */

int iof_compat_pthread_tryjoin_np(pthread_t thread, void **retval) {
  if (!record_of(thread)) return pthread_tryjoin_np(thread, retval);
  return join(thread, retval, -1, true);
}

/* abstime NULL: no limit, as glibc's. */
int iof_compat_pthread_clockjoin_np(pthread_t thread, void **retval,
                                    clockid_t clock,
                                    const struct timespec *abstime) {
  if (!record_of(thread))
    return pthread_clockjoin_np(thread, retval, clock, abstime);
  int64_t deadline = -1;
  if (abstime) {
    int r = iof__abs_to_mono(clock, abstime, &deadline);
    if (r < 0) return -r;
  }
  return join(thread, retval, deadline, false);
}

int iof_compat_pthread_timedjoin_np(pthread_t thread, void **retval,
                                    const struct timespec *abstime) {
  if (!record_of(thread)) return pthread_timedjoin_np(thread, retval, abstime);
  return iof_compat_pthread_clockjoin_np(thread, retval, CLOCK_REALTIME,
                                         abstime);
}

/* A fiber thread has no kernel thread of its own to schedule: it reports
 * SCHED_OTHER, accepts the policies an unprivileged thread may pick (at
 * priority 0) as no-ops, and refuses the real-time ones with EPERM (its
 * io thread runs other threads too). */
int iof_compat_pthread_getschedparam(pthread_t thread, int *policy,
                                     struct sched_param *param) {
  iof__cthread *t = record_of(thread);
  if (!t) return pthread_getschedparam(thread, policy, param);
  if (record_retired(t)) return ESRCH;
  if (!policy || !param) return EINVAL;
  *policy = SCHED_OTHER;
  memset(param, 0, sizeof *param);
  return 0;
}

int iof_compat_pthread_setschedparam(pthread_t thread, int policy,
                                     const struct sched_param *param) {
  iof__cthread *t = record_of(thread);
  if (!t) return pthread_setschedparam(thread, policy, param);
  if (record_retired(t)) return ESRCH;
  if (!param) return EINVAL;
  switch (policy) {
  case SCHED_OTHER:
  case SCHED_BATCH:
  case SCHED_IDLE:
    return param->sched_priority == 0 ? 0 : EINVAL;
  case SCHED_FIFO:
  case SCHED_RR:
    return EPERM;
  default:
    return EINVAL;
  }
}

int iof_compat_pthread_setschedprio(pthread_t thread, int prio) {
  iof__cthread *t = record_of(thread);
  if (!t) return pthread_setschedprio(thread, prio);
  if (record_retired(t)) return ESRCH;
  return prio == 0 ? 0 : EINVAL; /* SCHED_OTHER's only priority */
}

/* Its CPU time is not counted apart from its io thread's. */
int iof_compat_pthread_getcpuclockid(pthread_t thread, clockid_t *clock) {
  iof__cthread *t = record_of(thread);
  if (!t) return pthread_getcpuclockid(thread, clock);
  if (record_retired(t)) return ESRCH;
  return ENOTSUP;
}

/* A fiber thread runs where its io thread runs: get reports the calling
 * OS thread's set (the io thread's, from one of its fibers); set checks
 * the set and leaves it at that (pinning the io thread for one of its
 * fibers would move all the others, and a pool pinning each worker to
 * another CPU would end with all on the last). */
int iof_compat_pthread_getaffinity_np(pthread_t thread, size_t size,
                                      cpu_set_t *set) {
  if (!set) return EFAULT; /* the kernel's answer; glibc's is undefined */
  iof__cthread *t = record_of(thread);
  if (!t) return pthread_getaffinity_np(thread, size, set);
  if (record_retired(t)) return ESRCH;
  int e = errno;
  int r = sched_getaffinity(0, size, set) == 0 ? 0 : errno;
  errno = e;
  return r;
}

int iof_compat_pthread_setaffinity_np(pthread_t thread, size_t size,
                                      const cpu_set_t *set) {
  if (!set) return EFAULT; /* the kernel's answer; glibc's is undefined */
  iof__cthread *t = record_of(thread);
  if (!t) return pthread_setaffinity_np(thread, size, set);
  if (record_retired(t)) return ESRCH;
  cpu_set_t allowed;
  int e = errno;
  int r = sched_getaffinity(0, sizeof allowed, &allowed) == 0 ? 0 : errno;
  errno = e;
  if (r) return r;
  /* As the kernel: EINVAL when no CPU of the set may be used. */
  size_t n = size < sizeof allowed ? size : sizeof allowed;
  for (size_t cpu = 0; cpu < n * 8; cpu++)
    if (CPU_ISSET_S(cpu, size, set) && CPU_ISSET(cpu, &allowed)) return 0;
  return EINVAL;
}

/* As pthread_kill: the value does not travel (the handler's si_value is
 * 0). */
int iof_compat_pthread_sigqueue(pthread_t thread, int sig,
                                const union sigval value) {
  if (!record_of(thread)) return pthread_sigqueue(thread, sig, value);
  return iof_compat_pthread_kill(thread, sig);
}

/* ---- keys ------------------------------------------------------------- */

int iof_compat_pthread_key_create(pthread_key_t *key,
                                  void (*destructor)(void *)) {
  if (!key) return EINVAL;
  iof_fls_key k;
  int r = iof_fls_key_create(&k, destructor);
  if (r < 0) return -r;
  *key = (pthread_key_t)k.index;
  return 0;
}

int iof_compat_pthread_key_delete(pthread_key_t key) {
  iof_fls_key k = iof__fls_key_at(key);
  return k.gen && iof_fls_key_delete(k) == 0 ? 0 : EINVAL;
}

void *iof_compat_pthread_getspecific(pthread_key_t key) {
  return iof_fls_get(iof__fls_key_at(key));
}

int iof_compat_pthread_setspecific(pthread_key_t key, const void *value) {
  iof_fls_key k = iof__fls_key_at(key);
  if (!k.gen) return EINVAL;
  return -iof_fls_set(k, (void *)(uintptr_t)value);
}
