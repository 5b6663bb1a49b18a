/* Fibers: creation, the switch, suspension, symmetric transfer, exit.
 *
 * Every switch carries a message (who switched, why, and an optional hook)
 * to the side that lands; the landing side records the switcher's context
 * and runs the hook on its own stack. That single mechanism gives resume,
 * suspend, suspend-with-hook (what iof_await is built on), transfer, and a
 * safe exit: a finished fiber is freed by the landing side, after the last
 * switch away from it. */
#include "fiber/fiber_internal.h"
#include "fiber/sanitizer.h"
#include "fiber/stack_map.h"

#include <errno.h>
#include <stddef.h>
#include <pthread.h>
#include <stdint.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

enum switch_kind { SW_RESUME, SW_SUSPEND, SW_EXIT };

typedef struct switch_msg {
  iof_fiber *from;
  iof_fiber *to;
  iof_fiber_hook hook;
  void *arg;
  int kind;
} switch_msg;

__thread iof_thread_state iof__tls_state
    __attribute__((tls_model("initial-exec")));
#define tls_state iof__tls_state

/* A fiber's state is read by iof_fiber_walk on any thread while its own
 * thread switches it: a relaxed atomic store (a plain store on x86). */
static inline void set_state(int *state, int v) {
  __atomic_store_n(state, v, __ATOMIC_RELAXED);
}

static pthread_key_t thread_key;
static pthread_once_t thread_key_once = PTHREAD_ONCE_INIT;

static void thread_exit(void *p) {
  iof_thread_state *th = p;
  if (th->root.fls) iof__fls_run_destructors(&th->root);
  if (th->tls_cur) iof__tls_thread_end(th);
}

static void make_thread_key(void) {
  (void)pthread_key_create(&thread_key, thread_exit);
}

static __attribute__((noinline)) void thread_init(iof_thread_state *th) {
  /* A library constructor that runs before libiofiber's own (it does not
   * depend on us) may reach the runtime through the hook, e.g. a pthread
   * call routed to compat: the libc table must be filled before its first
   * use, and every compat path comes through here first on a thread. */
  iof__libc_init();
  set_state(&th->root.state, IOF_FS_RUNNING);
  th->current = &th->root;
  th->tp = __builtin_thread_pointer();
#ifdef IOF_TSAN
  th->root.tsan_fiber = __tsan_get_current_fiber();
#endif
  pthread_once(&thread_key_once, make_thread_key);
  (void)pthread_setspecific(thread_key, th);
  iof__overflow_thread_init();
  th->ready = 1;
}

__attribute__((noinline)) iof_thread_state *iof__thread(void) {
  iof_thread_state *th = &tls_state;
  if (__builtin_expect(!th->ready, 0)) thread_init(th);
  return th;
}

iof_thread_state *iof__thread_peek(void) {
  return tls_state.ready ? &tls_state : NULL;
}

size_t iof__page_size(void) {
  static size_t page;
  if (!page) page = (size_t)sysconf(_SC_PAGESIZE);
  return page;
}

int64_t iof__coarse_now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
  return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* A fiber on a dense stack has just switched out: its stack pointer and
 * the zone under its stack must show no overflow. No ASan check of the
 * zone: it is outside every frame. */
__attribute__((noinline, no_sanitize_address)) static void
soft_check(const iof_fiber *f) {
  const uint64_t *z = (const uint64_t *)f->base;
  uint64_t any = 0;
  for (size_t i = 0; i < IOF_SOFT_ZONE / sizeof *z; i++) any |= z[i];
  if (any || (const char *)f->ctx < f->soft_lo) iof__overflow_report(f);
}

/* Runs first on the landing side of every switch. Everything is copied out
 * of the message before the hook runs: the hook may publish `from`, which
 * can then run (and reuse its stack) on another thread. */
static inline iof_fiber *land(iof_transfer t) {
  switch_msg *m = t.data;
  iof_fiber *from = m->from;
#ifdef IOF_ASAN
  iof_fiber *to = m->to;
  __sanitizer_finish_switch_fiber(to->asan_fake, &from->stack_lo,
                                  &from->stack_len);
#endif
  from->ctx = t.fctx;
  if (__builtin_expect(from->soft_lo != NULL, 0)) soft_check(from);
  /* Read after the check: fewer registers live across its call. */
  iof_fiber_hook hook = m->hook;
  void *arg = m->arg;
  int kind = m->kind;
  if (kind == SW_SUSPEND) {
    set_state(&from->state, IOF_FS_SUSPENDED);
    return hook ? hook(from, arg) : NULL;
  }
  if (kind == SW_EXIT) {
    set_state(&from->state, IOF_FS_DONE);
    if (from->on_exit) from->on_exit(from);
  }
  return NULL;
}

static inline void announce(iof_thread_state *th, iof_fiber *from,
                            iof_fiber *to, int kind) {
  th->current = to;
  if (__builtin_expect(to->tls_on, 0)) iof__tls_enter(th, to->tls);
#ifdef IOF_ASAN
  __sanitizer_start_switch_fiber(kind == SW_EXIT ? NULL : &from->asan_fake,
                                 to->stack_lo, to->stack_len);
#else
  (void)from;
  (void)kind;
#endif
#ifdef IOF_TSAN
  __tsan_switch_to_fiber(to->tsan_fiber, 0);
#endif
}

/* Not under TSan: its function-exit hook would run in the C function's
 * epilogue after __tsan_switch_to_fiber, popping the target fiber's shadow
 * call stack. */
#if defined(__x86_64__) && defined(__ELF__) && !defined(IOF_PLAIN_SWITCH) &&   \
    !defined(IOF_TSAN)
/* Return prediction around jump_fcontext (x86-64). fcontext leaves through
 * an indirect jump, so a `call jump_fcontext` leaves one return address on
 * the CPU's return stack that no `ret` matches, and the landing side's
 * returns are then predicted from the other side's calls: each one after a
 * switch used to mispredict. Here the public calls end with a tail call to
 * iof__switch (a jump), which enters jump_fcontext with a jump too, after
 * pushing the address of its own landing code: every suspended context
 * continues at that one address (a well-predicted indirect jump), nothing
 * is pushed on the return stack, the landing code calls iof__landed (a
 * balanced call) and goes back to the user's caller with an indirect jump
 * rather than a `ret` the return stack would mispredict. When the compiler
 * does not emit the tail call (sanitizer builds), iof__switch is called
 * normally and returns into the C function: the same code, just slower.
 * Symmetric transfer from a hook loops inside iof__switch, on the same
 * stack depth. The message lives in a per-thread slot: a switch starts and
 * lands on one thread, and the landing side copies it out first. */
IOF_HIDDEN int iof__switch(iof_fctx to, void *msg);
IOF_HIDDEN iof_transfer iof__landed(iof_transfer t);

/* The landing code handles the usual switch itself, without the call: a
 * resume, or a suspend with no hook (a park, a hand-off), from a fiber
 * with a guarded stack, and an exit with no on_exit (a spawn's last
 * switch). It stores the switcher's context (rax, the fctx jump_fcontext
 * hands over) and, for a suspend or an exit, its state; anything else (a
 * hook, on_exit, a dense stack, ASan's bookkeeping) goes to iof__landed.
 * The offsets are checked below. */
#define IOF_SW_FROM 0
#define IOF_SW_HOOK 16
#define IOF_SW_KIND 32
#define IOF_FB_CTX 0
#define IOF_FB_STATE 16
#define IOF_FB_SOFT_LO 136
#define IOF_FB_ON_EXIT 96
#define IOF_STR_(x) #x
#define IOF_STR(x) IOF_STR_(x)
/* clang-format off */
#ifdef IOF_ASAN
#define IOF_LAND_FAST ""
#else
#define IOF_LAND_FAST                                                  \
  "  movq " IOF_STR(IOF_SW_FROM) "(%rdx), %rcx\n"                      \
  "  cmpq $0, " IOF_STR(IOF_SW_HOOK) "(%rdx)\n"                        \
  "  jne 3f\n"                                                         \
  "  cmpq $0, " IOF_STR(IOF_FB_SOFT_LO) "(%rcx)\n"                     \
  "  jne 3f\n"                                                         \
  "  movl " IOF_STR(IOF_SW_KIND) "(%rdx), %r8d\n"                      \
  "  cmpl $1, %r8d\n" /* SW_SUSPEND; SW_RESUME is 0 */                 \
  "  ja 5f\n"                                                          \
  "  movq %rax, " IOF_STR(IOF_FB_CTX) "(%rcx)\n" /* flags kept */      \
  "  jne 4f\n"                                                         \
  "  movl $2, " IOF_STR(IOF_FB_STATE) "(%rcx)\n" /* IOF_FS_SUSPENDED */ \
  "4:\n"                                                               \
  "  xorl %eax, %eax\n"                                                \
  "  popq %rcx\n"                                                      \
  "  jmp *%rcx\n"                                                      \
  "5:\n" /* SW_EXIT: done, unless on_exit has to run */               \
  "  cmpq $0, " IOF_STR(IOF_FB_ON_EXIT) "(%rcx)\n"                    \
  "  jne 3f\n"                                                         \
  "  movl $3, " IOF_STR(IOF_FB_STATE) "(%rcx)\n" /* IOF_FS_DONE */     \
  "  jmp 4b\n"                                                         \
  "3:\n"
#endif
/* clang-format on */

__asm__(".text\n"
        ".p2align 4\n"
        ".globl iof__switch\n"
        ".hidden iof__switch\n"
        ".type iof__switch,@function\n"
        "iof__switch:\n"
        "  leaq 1f(%rip), %rax\n"
        "  pushq %rax\n"
        "  jmp *" IOF_FCTX_JUMP_NAME "@GOTPCREL(%rip)\n"
        "1:\n"
        "  endbr64\n" IOF_LAND_FAST
        "  subq $8, %rsp\n" /* 16-byte alignment for the call */
        "  call iof__landed\n"
        "  addq $8, %rsp\n"
        "  testq %rax, %rax\n"
        "  jnz 2f\n"
        "  popq %rcx\n" /* eax is 0: the call's result */
        "  jmp *%rcx\n"
        "2:\n"
        "  movq %rax, %rdi\n"
        "  movq %rdx, %rsi\n"
        "  leaq 1b(%rip), %rax\n"
        "  pushq %rax\n"
        "  jmp *" IOF_FCTX_JUMP_NAME "@GOTPCREL(%rip)\n"
        ".size iof__switch, .-iof__switch\n");

_Static_assert(offsetof(switch_msg, from) == IOF_SW_FROM, "landing: from");
_Static_assert(offsetof(switch_msg, hook) == IOF_SW_HOOK, "landing: hook");
_Static_assert(offsetof(switch_msg, kind) == IOF_SW_KIND, "landing: kind");
_Static_assert(offsetof(iof_fiber, ctx) == IOF_FB_CTX, "landing: ctx");
_Static_assert(offsetof(iof_fiber, state) == IOF_FB_STATE, "landing: state");
_Static_assert(offsetof(iof_fiber, soft_lo) == IOF_FB_SOFT_LO,
               "landing: soft_lo");
_Static_assert(offsetof(iof_fiber, on_exit) == IOF_FB_ON_EXIT,
               "landing: on_exit");
_Static_assert(sizeof(((iof_fiber *)0)->state) == 4, "landing: state size");
_Static_assert(SW_RESUME == 0 && SW_SUSPEND == 1 && SW_EXIT == 2,
               "landing: kinds");
_Static_assert(IOF_FS_SUSPENDED == 2 && IOF_FS_DONE == 3, "landing: states");

static __thread switch_msg tls_msg __attribute__((tls_model("initial-exec")));

/* The landing side: record the switch, run the hook; when the hook hands
 * back a fiber, set up its resume and return where to jump. */
__attribute__((noinline)) static iof_transfer
land_next(switch_msg *m, iof_fiber *self, iof_fiber *next) {
  if (next->state != IOF_FS_DONE && next->state != IOF_FS_RUNNING) {
    iof_thread_state *th = iof__thread();
    next->resumer = self;
    set_state(&next->state, IOF_FS_RUNNING);
    *m = (switch_msg){self, next, NULL, NULL, SW_RESUME};
    announce(th, self, next, SW_RESUME);
    return (iof_transfer){next->ctx, m};
  }
  return (iof_transfer){NULL, NULL};
}

/* Kept apart from land_next so that the usual hook result (NULL: the
 * fiber was published) pays for few saved registers. */
__attribute__((noinline)) static iof_transfer landed_full(iof_transfer t) {
  switch_msg *m = t.data;
  iof_fiber *self = m->to;
  iof_fiber *next = land(t);
  if (next) return land_next(m, self, next);
  return (iof_transfer){NULL, NULL};
}

#ifndef IOF_ASAN
/* A fiber's last switch: it is done once it is off its stack; on_exit may
 * free the frame. A tail call from iof__landed, which then saves nothing. */
__attribute__((noinline)) static iof_transfer landed_exit(iof_fiber *from) {
  set_state(&from->state, IOF_FS_DONE);
  if (from->on_exit) from->on_exit(from);
  return (iof_transfer){NULL, NULL};
}
#endif

/* What the landing code leaves to C (see iof__switch): an exit with an
 * on_exit to run (every launched fiber's) without the callee-saved register
 * spills the hook call costs landed_full, and, where the landing code has no
 * fast path (ASan builds take landed_full), the plain resumes and suspends. */
iof_transfer iof__landed(iof_transfer t) {
#ifndef IOF_ASAN
  switch_msg *m = t.data;
  iof_fiber *from = m->from;
  if (__builtin_expect(from->soft_lo == NULL, 1)) {
    int kind = m->kind;
    from->ctx = t.fctx;
    if (kind == SW_EXIT) return landed_exit(from);
    if (m->hook == NULL) { /* a resume, or a plain suspend or park */
      if (kind == SW_SUSPEND) set_state(&from->state, IOF_FS_SUSPENDED);
      return (iof_transfer){NULL, NULL};
    }
  }
#endif
  return landed_full(t);
}

/* A switch into a fiber with its own thread-locals, out of line: the
 * usual switch then makes no call before its tail call and saves no
 * registers. */
__attribute__((noinline)) static int switch_tls(iof_thread_state *th,
                                                iof_fiber *from, iof_fiber *to,
                                                switch_msg *m) {
  announce(th, from, to, m->kind);
  return iof__switch(to->ctx, m);
}

static inline int switch_to(iof_thread_state *th, iof_fiber *from,
                            iof_fiber *to, int kind, iof_fiber_hook hook,
                            void *arg) {
  switch_msg *m = &tls_msg;
  m->from = from;
  m->to = to;
  m->hook = hook;
  if (hook) m->arg = arg; /* read only with a hook */
  m->kind = kind;
  if (__builtin_expect(to->tls_on, 0)) return switch_tls(th, from, to, m);
  announce(th, from, to, kind);
  return iof__switch(to->ctx, m);
}
#else
/* Portable form: a call, and the landing runs after jump_fcontext returns;
 * a hook's fiber is resumed by the loop in iof_fiber_resume. */
static inline iof_fiber *do_switch(iof_thread_state *th, iof_fiber *from,
                                   iof_fiber *to, int kind, iof_fiber_hook hook,
                                   void *arg) {
  switch_msg m = {from, to, hook, arg, kind};
  announce(th, from, to, kind);
  iof_transfer t = jump_fcontext(to->ctx, &m);
  return land(t);
}

static inline int switch_to(iof_thread_state *th, iof_fiber *from,
                            iof_fiber *to, int kind, iof_fiber_hook hook,
                            void *arg) {
  iof_fiber *self = th->current;
  iof_fiber *f = do_switch(th, from, to, kind, hook, arg);
  /* A hook may hand back a fiber that is already finished or running
   * elsewhere only through a bug in the hook; refuse rather than jump. */
  while (f && f->state != IOF_FS_DONE && f->state != IOF_FS_RUNNING) {
    th = iof__thread();
    f->resumer = self;
    set_state(&f->state, IOF_FS_RUNNING);
    f = do_switch(th, self, f, SW_RESUME, NULL, NULL);
  }
  return 0;
}
#endif

void iof__fiber_exit(int status) {
  iof_thread_state *th = iof__thread();
  iof_fiber *self = th->current;
  self->status = status;
  if (self->fls) iof__fls_run_destructors(self);
  th = iof__thread();
  switch_to(th, self, self->resumer, SW_EXIT, NULL, NULL);
  __builtin_unreachable();
}

static void fiber_entry(iof_transfer t) {
#if defined(__x86_64__) && defined(__GCC_HAVE_DWARF2_CFI_ASM)
  /* The outermost frame of a fiber's stack: debuggers and unwinders stop
   * here instead of walking into make_fcontext's trampoline and beyond. */
  __asm__ volatile(".cfi_undefined rip");
#endif
  switch_msg *m = t.data;
  iof_fiber *self = m->to;
  (void)land(t);
  self->status = self->fn(self->arg);
  if (self->fls) iof__fls_run_destructors(self);
    /* The thread that resumed this fiber last set itself up before; fn may
     * have moved the fiber to another thread, so the address is read anew
     * (IOF__TLS_ADDR), never one the compiler kept across the call. */
#ifdef IOF__HAVE_TLS_ADDR
  iof_thread_state *th = IOF__TLS_ADDR(iof__tls_state);
#else
  iof_thread_state *th = iof__thread();
#endif
  switch_to(th, self, self->resumer, SW_EXIT, NULL, NULL);
  __builtin_unreachable();
}

iof_fiber *iof__fiber_create_ex(iof_frame_allocator *alloc, size_t stack_size,
                                iof_fn fn, void *arg, size_t extra,
                                void **extra_out) {
  if (!stack_size) stack_size = IOF_FIBER_STACK_DEFAULT; /* as everywhere */
  if (!fn || stack_size < IOF_FIBER_STACK_MIN ||
      stack_size > IOF_FIBER_STACK_MAX || extra > 4096) {
    errno = EINVAL;
    return NULL;
  }
  if (!alloc) alloc = iof_default_frame_allocator();
  size_t page = iof__page_size();
  size_t size = (stack_size + page - 1) & ~(page - 1);
  char *base;
  if (__builtin_expect(alloc->vtbl == &iof__pool_vtbl, 1)) {
    base = iof__pool_allocate(alloc, size); /* it says why it failed */
    if (!base) return NULL;
  } else if (!alloc->vtbl || !alloc->vtbl->allocate ||
             !alloc->vtbl->deallocate) {
    errno = EINVAL; /* a zeroed allocator object: nothing to call */
    return NULL;
  } else {
    int saved = errno;
    errno = 0;
    base = alloc->vtbl->allocate(alloc, size);
    if (!base) {
      if (!errno) errno = ENOMEM; /* an allocator that did not say why */
      return NULL;
    }
    errno = saved;
  }
  /* The control block and the extra area share the top page with the first
   * stack frames, so an idle fiber touches one or two pages. */
  extra = (extra + 15) & ~(size_t)15;
  uintptr_t top = (uintptr_t)base + size;
  uintptr_t cb = (top - sizeof(iof_fiber) - extra) & ~(uintptr_t)63;
  iof_fiber *f = (iof_fiber *)cb;
  if (extra_out) {
    *extra_out = extra ? memset((char *)f + sizeof *f, 0, extra) : NULL;
  }
  /* Field by field rather than a memset of the whole block: only what a
   * reader may see before it is written again needs a value (the name
   * only needs its terminator). */
  char *sp = (char *)(cb & ~(uintptr_t)15);
  size_t len = (size_t)(sp - base);
  const char *soft_lo = NULL;
  size_t usable = len;
  if (__builtin_expect(iof__stack_maybe_dense(base), 0)) {
    soft_lo = base + IOF_SOFT_ZONE;
    usable -= IOF_SOFT_ZONE;
  }
  f->resumer = NULL;
  set_state(&f->state, IOF_FS_CREATED);
  f->status = 0;
  f->queued = false;
  f->tls_on = false; /* tls is read only when set */
  f->fn = fn;
  f->arg = arg;
  f->next = NULL;
  f->env = NULL;
  f->strand = NULL;
  f->sched = NULL;
  f->claim = NULL;
  f->fls = NULL;
  f->on_exit = NULL;
  f->alloc = alloc;
  f->base = base;
  f->frame_size = size;
  f->stack_size = usable;
  f->soft_lo = soft_lo;
  f->name[0] = '\0';
#ifdef IOF_ASAN
  /* The sanitizer fields are read only in the builds that set them. */
  f->asan_fake = NULL;
  f->stack_lo = base;
  f->stack_len = len;
#endif
#ifdef IOF_HAVE_VALGRIND
  /* A recycled frame keeps Memcheck's view from its previous fiber (areas
   * that fiber popped are noaccess); a new fiber owns the whole stack. */
  VALGRIND_MAKE_MEM_UNDEFINED(base, len);
#endif
  f->ctx = make_fcontext(sp, len, fiber_entry);
#ifdef IOF_TSAN
  f->tsan_fiber = __tsan_create_fiber(0);
#endif
#ifdef IOF_HAVE_VALGRIND
  f->vg_id = VALGRIND_STACK_REGISTER(base, sp);
#endif
  return f;
}

iof_fiber *iof_fiber_create(iof_frame_allocator *alloc, size_t stack_size,
                            iof_fn fn, void *arg) {
  return iof__fiber_create_ex(alloc, stack_size, fn, arg, 0, NULL);
}

void iof__fiber_free(iof_fiber *f) {
  /* The footer is read after the destructors: nothing is live across
   * their (rare) call. */
  if (__builtin_expect(f->fls != NULL, 0)) iof__fls_run_destructors(f);
  iof_frame_allocator *alloc = f->alloc;
  void *base = f->base;
  size_t size = f->frame_size;
#ifdef IOF_TSAN
  __tsan_destroy_fiber(f->tsan_fiber);
#endif
#ifdef IOF_HAVE_VALGRIND
  VALGRIND_STACK_DEREGISTER(f->vg_id);
#endif
#ifdef IOF_ASAN
  /* A dead fiber leaves stack poison behind; a recycled frame must not
   * inherit it. */
  __asan_unpoison_memory_region(base, size);
#endif
  set_state(&f->state, IOF_FS_FREED);
  if (__builtin_expect(alloc->vtbl == &iof__pool_vtbl, 1))
    iof__pool_deallocate(alloc, base, size);
  else
    alloc->vtbl->deallocate(alloc, base, size);
}

int iof_fiber_destroy(iof_fiber *f) {
  if (!f) return -EINVAL;
#ifdef IOF_ASAN
  /* A freed frame is poisoned (pool cache, or freed heap): refuse without
   * touching it. Other calls on it are reported by ASan. */
  if (__asan_address_is_poisoned(&f->state)) return -EINVAL;
#endif
  if (f->state == IOF_FS_FREED) return -EINVAL;
  if (f->state == IOF_FS_RUNNING || f->state == IOF_FS_SUSPENDED || f->queued)
    return -EBUSY;
  iof__fiber_free(f);
  return 0;
}

static inline int resume_on(iof_thread_state *th, iof_fiber *f) {
  iof_fiber *self = th->current;
  f->resumer = self;
  set_state(&f->state, IOF_FS_RUNNING);
  return switch_to(th, self, f, SW_RESUME, NULL, NULL);
}

/* A thread's first switch; a tail call, so the usual resume saves no
 * registers. */
__attribute__((noinline, cold)) static int resume_first(iof_fiber *f) {
  return resume_on(iof__thread(), f);
}

int iof_fiber_resume(iof_fiber *f) {
  if (!f) return -EINVAL;
  int bad = iof__fiber_handover_check(f);
  if (bad) return bad;
  if (f->state == IOF_FS_RUNNING) return -EBUSY;
  iof_thread_state *th = iof__thread_if_ready();
  if (__builtin_expect(!th, 0)) return resume_first(f);
  return resume_on(th, f);
}

int iof__fiber_run(iof_thread_state *th, iof_fiber *f) {
  int st = f->state;
  if (__builtin_expect(st != IOF_FS_SUSPENDED && st != IOF_FS_CREATED, 0))
    return st == IOF_FS_RUNNING ? -EBUSY : -EINVAL;
  iof_fiber *self = th->current;
  f->resumer = self;
  set_state(&f->state, IOF_FS_RUNNING);
  return switch_to(th, self, f, SW_RESUME, NULL, NULL);
}

/* Reads the thread state itself rather than through iof__thread: it is
 * asked several times per operation, and noinline keeps the TLS address
 * from being cached across a switch in any caller. */
__attribute__((noinline)) iof_fiber *iof_fiber_current(void) {
  iof_thread_state *th = &tls_state;
  if (__builtin_expect(!th->ready, 0)) thread_init(th);
  return th->current == &th->root ? NULL : th->current;
}

static inline int suspend_on(iof_thread_state *th, iof_fiber_hook hook,
                             void *arg) {
  iof_fiber *self = th->current;
  if (self == &th->root) return -EPERM;
  return switch_to(th, self, self->resumer, SW_SUSPEND, hook, arg);
}

/* A thread that never ran a fiber: it has none to suspend. */
__attribute__((noinline, cold)) static int suspend_first(void) {
  return suspend_on(iof__thread(), NULL, NULL);
}

static inline int suspend(iof_fiber_hook hook, void *arg) {
  iof_thread_state *th = iof__thread_if_ready();
  if (__builtin_expect(!th, 0)) return suspend_first();
  return suspend_on(th, hook, arg);
}

int iof__fiber_park(iof_thread_state *th, iof_fiber *self) {
  return switch_to(th, self, self->resumer, SW_SUSPEND, NULL, NULL);
}

int iof__fiber_handoff(iof_thread_state *th, iof_fiber *self, iof_fiber *next) {
  int st = next->state;
  if (__builtin_expect(st != IOF_FS_SUSPENDED && st != IOF_FS_CREATED, 0))
    return iof__fiber_park(th, self); /* as a resume would refuse it */
  next->resumer = self->resumer;
  set_state(&next->state, IOF_FS_RUNNING);
  return switch_to(th, self, next, SW_SUSPEND, NULL, NULL);
}

int iof_fiber_suspend(void) {
  return suspend(NULL, NULL);
}

int iof_fiber_suspend_with(iof_fiber_hook hook, void *arg) {
  if (!hook) return -EINVAL;
  return suspend(hook, arg);
}

int iof_fiber_transfer(iof_fiber *next) {
  iof_thread_state *th = iof__thread_fast();
  iof_fiber *self = th->current;
  if (self == &th->root) return -EPERM;
  if (!next) return -EINVAL;
  int bad = iof__fiber_handover_check(next);
  if (bad) return bad;
  if (next->state == IOF_FS_RUNNING) return -EBUSY;
  next->resumer = self->resumer;
  set_state(&next->state, IOF_FS_RUNNING);
  return switch_to(th, self, next, SW_SUSPEND, NULL, NULL);
}

bool iof_fiber_done(const iof_fiber *f) {
  return f && f->state == IOF_FS_DONE;
}

bool iof_fiber_started(const iof_fiber *f) {
  return f && f->state != IOF_FS_CREATED;
}

int iof_fiber_status(const iof_fiber *f) {
  if (!f) return -EINVAL;
  return f->state == IOF_FS_DONE ? f->status : -EAGAIN;
}

int iof_fiber_set_name(iof_fiber *f, const char *name) {
  if (!f) return -EINVAL;
  if (!name) name = "";
  /* Bounded: only the bytes kept are read (a full char buffer without a
   * terminator is a name too). */
  size_t n = strnlen(name, sizeof f->name - 1);
  memcpy(f->name, name, n);
  f->name[n] = '\0';
  return 0;
}

const char *iof_fiber_name(const iof_fiber *f) {
  return f ? f->name : "";
}

size_t iof_fiber_stack_size(const iof_fiber *f) {
  return f ? f->stack_size : 0;
}
