/* Internal view of fibers, shared by fiber/ and sched/. Not installed. */
#ifndef IOF_FIBER_INTERNAL_H
#define IOF_FIBER_INTERNAL_H

#include <iofiber/fiber.h>
#include <errno.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "fiber/fcontext.h"

#define IOF_HIDDEN __attribute__((visibility("hidden")))

enum iof_fiber_state {
  IOF_FS_CREATED,
  IOF_FS_RUNNING,
  IOF_FS_SUSPENDED,
  IOF_FS_DONE,
  /* Written into the control block when the frame is freed: a second
   * destroy of a frame still cached by its pool sees it. */
  IOF_FS_FREED = 0x0f5eed
};

/* The control block lives at the top of the fiber's own frame; its tail is
 * the frame footer (allocator, base, size) that lets any thread free it. */
struct iof_fiber {
  iof_fctx ctx;       /* where to continue it while not running */
  iof_fiber *resumer; /* who gets control when it suspends */
  int state;
  int status;
  /* In a run queue of the library's own contexts (sched/'s iof__q_push to
   * iof__q_pop): only that context may run or free it, so the public
   * resume, destroy and iof_launch_cancel refuse it. */
  bool queued;
  /* It has thread-locals of its own (tls, thread_locals.c): read on every
   * switch into it, so kept in the line of ctx. */
  bool tls_on;
  /* While it waits in one of the library's waits: that wait's claim word
   * (sched/'s iof__wait state). The public resume refuses the fiber while
   * the word says published and unclaimed (IOF__CLAIM_OPEN): only the
   * claimer may hand it on. NULL otherwise. */
  const _Atomic int *claim;
  iof_fn fn;
  void *arg;
  /* Used by sched/: the intrusive run-queue link, the launch record kept in
   * the frame, fiber-local storage and the hook that runs once the fiber has
   * switched away for the last time (it may free the frame). */
  iof_fiber *next;
  const struct iof_env *env; /* the env of the running call (iof_run swaps) */
  void *strand;              /* the strand this fiber holds while it runs */
  void *sched;
  void *fls;
  void (*on_exit)(iof_fiber *f);
  /* Frame footer. */
  iof_frame_allocator *alloc;
  void *base;
  size_t frame_size;
  size_t stack_size;
  /* Dense stacks only (no guard page of their own): the lowest address the
   * fiber may use; the 64 bytes under it must stay zero. NULL otherwise. */
  const char *soft_lo;
  char name[32];
  /* Sanitizer bookkeeping. */
  void *asan_fake;
  const void *stack_lo;
  size_t stack_len;
  void *tsan_fiber;
  unsigned vg_id;
  struct iof__tls_area *tls; /* its thread-locals while tls_on */
};

/* The value of a claim word (iof_fiber.claim) while the wait is published
 * and nothing has ended it: sched/'s IOF__W_WAITING. Before publication
 * (a wait that completed at once) the fiber may already be on its way to
 * its executor. */
#define IOF__CLAIM_OPEN 1

/* f waits in one of the library's waits that nothing has ended yet:
 * resuming or posting it would end the wait early, with the primitive
 * still holding its record. */
static inline bool iof__fiber_parked(const iof_fiber *f) {
  const _Atomic int *c = f->claim;
  return c && atomic_load_explicit(c, memory_order_acquire) == IOF__CLAIM_OPEN;
}

/* Whether a public call may hand f (not NULL) on to run: -EINVAL once it
 * finished; -EBUSY while it sits in one of the library's run queues (a
 * second link would lose the fibers behind it) or is parked in one of its
 * waits; else 0. Resume and transfer also refuse a running f; a post may
 * queue one (a fiber posting itself). */
static inline int iof__fiber_handover_check(const iof_fiber *f) {
  if (f->state == IOF_FS_DONE || f->state == IOF_FS_FREED) return -EINVAL;
  return f->queued || iof__fiber_parked(f) ? -EBUSY : 0;
}

/* Per-thread state. `root` stands for the thread's own stack. */
typedef struct iof_thread_state {
  iof_fiber root;
  iof_fiber *current; /* &root outside fibers */
  int ready;
  /* sched/'s run marks (iof_run_mark), innermost first: which contexts
   * this thread is running now. Here so one look-up gives both. */
  void *marks;
  /* Thread-locals (thread_locals.c): the area that last entered this
   * thread (it holds a reference), and the thread pointer. */
  struct iof__tls_area *tls_cur;
  char *tp;
} iof_thread_state;

/* Never inlined: a fiber may resume on another thread, and the compiler
 * must not reuse a TLS address computed before a switch. */
IOF_HIDDEN iof_thread_state *iof__thread(void);

/* iof_fiber_suspend for a caller that holds th (iof__thread()) and self,
 * its current fiber (not the root): no look-up, no hook. */
IOF_HIDDEN int iof__fiber_park(iof_thread_state *th, iof_fiber *self);

/* Suspends self (th's current fiber) and runs next in its place, for
 * self's resumer: what a run loop would do next, without switching to the
 * loop in between. next must be suspended or new (else self just parks). */
IOF_HIDDEN int iof__fiber_handoff(iof_thread_state *th, iof_fiber *self,
                                  iof_fiber *next);

/* iof_fiber_resume of f (not NULL) by a run loop on its thread's own
 * stack, which holds th across resumes: th cannot go stale there. */
IOF_HIDDEN int iof__fiber_run(iof_thread_state *th, iof_fiber *f);

/* The thread state itself (fiber.c); read it through iof__thread or
 * iof__thread_fast only. */
IOF_HIDDEN extern __thread iof_thread_state iof__tls_state
    __attribute__((tls_model("initial-exec")));

/* The address of an initial-exec TLS variable of this thread, for the hot
 * paths. The thread pointer is read by a volatile asm ordered with memory
 * (and so with every call, the fiber switch included): unlike a plain TLS
 * access, the compiler cannot reuse an address computed before a switch
 * after which the fiber may run on another thread. Where that is not
 * available (IOF__HAVE_TLS_ADDR undefined) callers use their noinline
 * accessors. */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
/* The initial-exec sequence the linker knows (and relaxes to a constant in
 * an executable): the thread pointer plus the variable's offset from the
 * GOT. Written out, because the compiler's own arithmetic on
 * __builtin_thread_pointer() is not always a sequence the linker accepts. */
#define IOF__TLS_ADDR(var)                                                     \
  __extension__({                                                              \
    __typeof__(&(var)) iof_p_;                                                 \
    __asm__ volatile("movq %%fs:0, %0\n\t"                                     \
                     "addq " #var "@gottpoff(%%rip), %0"                       \
                     : "=r"(iof_p_)                                            \
                     :                                                         \
                     : "memory");                                              \
    iof_p_;                                                                    \
  })
#define IOF__HAVE_TLS_ADDR 1
#endif

/* iof__thread inlined (see IOF__TLS_ADDR). */
static inline iof_thread_state *iof__thread_fast(void) {
#ifdef IOF__HAVE_TLS_ADDR
  iof_thread_state *th = IOF__TLS_ADDR(iof__tls_state);
  if (__builtin_expect(th->ready, 1)) return th;
#endif
  return iof__thread();
}

/* iof__thread_fast, or NULL on a thread whose state is not set up yet (the
 * caller then calls iof__thread out of line, keeping its fast path free of
 * calls). */
static inline iof_thread_state *iof__thread_if_ready(void) {
#ifdef IOF__HAVE_TLS_ADDR
  iof_thread_state *th = IOF__TLS_ADDR(iof__tls_state);
  return __builtin_expect(th->ready, 1) ? th : NULL;
#else
  return iof__thread();
#endif
}

/* The thread's state if it has run fibers, else NULL; async-signal-safe. */
IOF_HIDDEN iof_thread_state *iof__thread_peek(void);

/* Per-fiber thread-locals (thread_locals.c). A fiber thread of compat
 * keeps the program's own __thread variables (the executable's TLS block)
 * in an area; the values are put in place when it is switched in on a
 * thread where another area was, and saved then. `home` is the thread
 * whose block holds the area's live values (NULL: they are in buf). */
typedef struct iof__tls_area {
  _Atomic(iof_thread_state *) home;
  atomic_int refs; /* the owner's, and each thread's tls_cur */
  atomic_flag lk;  /* held while values move in or out */
  /* Blocks of modules loaded later (dynamic TLS), by module id: the
   * owner's own, on the heap, made on its first access (only the owner
   * touches them; freed with the area, or once their module is unloaded:
   * gen is the id's generation they were made in). main (inherit) has
   * none: it uses the OS thread's. */
  bool os_blocks;
  unsigned n_dyn;
  struct iof__tls_dyn {
    void *block;
    unsigned gen;
  } * dyn;
  _Alignas(16) unsigned char buf[];
} iof__tls_area;

/* A new area for a fiber thread: the variables' initial values, or with
 * inherit the calling thread's current ones (main). *out is NULL when the
 * program has none to keep apart. 0 or -ENOMEM. */
IOF_HIDDEN int iof__tls_area_new(bool inherit, iof__tls_area **out);
IOF_HIDDEN void iof__tls_area_free(iof__tls_area *a); /* drops a reference */

/* The running fiber takes a (from iof__tls_area_new, not NULL) as its
 * thread-locals; detach gives them up at its end and drops the owner's
 * reference (a is freed when no thread holds it). */
IOF_HIDDEN void iof__tls_attach(iof__tls_area *a);
IOF_HIDDEN void iof__tls_detach(void);

/* An extra reference to a, for iof__tls_restore: outside fibers, puts a's
 * last values (its fiber ended, or is suspended) in the calling thread's
 * blocks, as the thread's own, and drops that reference. */
IOF_HIDDEN void iof__tls_area_ref(iof__tls_area *a);
IOF_HIDDEN void iof__tls_restore(iof__tls_area *a);

/* Whether addr is one of the calling fiber's own thread-locals (in
 * static TLS: at the same address in every fiber thread of the OS
 * thread). */
IOF_HIDDEN bool iof__tls_owns(const void *addr);
/* Or in a block of a module loaded later, which the fiber thread owns. */
IOF_HIDDEN bool iof__tls_owns_dyn(const void *addr);
/* After a dlclose: module ids no longer loaded forget what they were, and
 * blocks made for them are dropped at their owner's next access (the
 * loader gives a freed id to the next module it loads). */
IOF_HIDDEN void iof__tls_modules_closed(void);

/* __tls_get_addr for the calling fiber thread (iof_compat_tls_get_addr). */
IOF_HIDDEN void *iof__tls_dyn_addr(void *ti, void *(*real)(void *));

IOF_HIDDEN void iof__tls_enter_slow(iof_thread_state *th, iof__tls_area *a);

/* On every switch into a fiber with tls_on: puts its values in place
 * unless they are there already. */
static inline void iof__tls_enter(iof_thread_state *th, iof__tls_area *a) {
  if (th->tls_cur == a &&
      atomic_load_explicit(&a->home, memory_order_relaxed) == th)
    return;
  iof__tls_enter_slow(th, a);
}

/* An OS thread's end: the values it holds go back to their area. */
IOF_HIDDEN void iof__tls_thread_end(iof_thread_state *th);

/* Creates a fiber whose control block reserves `extra` bytes (16-aligned,
 * zeroed) for the caller, returned in *extra_out. */
IOF_HIDDEN iof_fiber *iof__fiber_create_ex(iof_frame_allocator *alloc,
                                           size_t stack_size, iof_fn fn,
                                           void *arg, size_t extra,
                                           void **extra_out);

/* Frees the frame (no state checks). */
IOF_HIDDEN void iof__fiber_free(iof_fiber *f);

/* Ends the running fiber (not a thread's root) here, as if its function
 * had returned status: fiber-local destructors run, the stack is left as
 * it is (no unwinding, as pthread_exit in C), the resumer continues. */
IOF_HIDDEN __attribute__((noreturn)) void iof__fiber_exit(int status);

/* Overflow reporting (overflow.c): installs the SIGSEGV handler once and
 * gives the calling thread an alternate signal stack. */
IOF_HIDDEN void iof__overflow_thread_init(void);

/* Writes the one-line overflow report for f on stderr and aborts. */
IOF_HIDDEN __attribute__((noreturn)) void
iof__overflow_report(const iof_fiber *f);

/* Bytes at the bottom of a dense stack that the fiber must leave zero. */
#define IOF_SOFT_ZONE 64

/* Fiber-local storage teardown at fiber end (fls.c, sched issue). */
IOF_HIDDEN void iof__fls_run_destructors(iof_fiber *f);

/* The live fiber-local key at index ({index, 0} if none): compat's
 * pthread_key_t is the bare index. */
struct iof_fls_key;
IOF_HIDDEN struct iof_fls_key iof__fls_key_at(uint32_t index);

IOF_HIDDEN size_t iof__page_size(void);

/* CLOCK_MONOTONIC_COARSE in ns: the kernel's last tick, a few ns to read
 * where the precise clock may cost tens under a hypervisor. */
IOF_HIDDEN int64_t iof__coarse_now_ns(void);

#endif
