/* Stack overflow reporting. A fault in the guard page under the running
 * fiber's stack is reported in one line on stderr, then the process aborts.
 * The handler runs on an alternate signal stack (the faulting stack is the
 * one that overflowed). Other faults go to whatever handler was there. */
#include "fiber/fiber_internal.h"
#include "fiber/stack_map.h"

#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <ucontext.h>
#include <unistd.h>

static struct sigaction old_segv;
static pthread_once_t install_once = PTHREAD_ONCE_INIT;
static pthread_key_t altstack_key;

static size_t fmt_u(char *out, size_t v) {
  char tmp[24];
  size_t n = 0;
  do tmp[n++] = (char)('0' + v % 10);
  while ((v /= 10));
  for (size_t i = 0; i < n; i++) out[i] = tmp[n - 1 - i];
  return n;
}

static uintptr_t fault_sp(void *ucv) {
  ucontext_t *uc = ucv;
#if defined(__x86_64__)
  return (uintptr_t)uc->uc_mcontext.gregs[REG_RSP];
#elif defined(__aarch64__)
  return (uintptr_t)uc->uc_mcontext.sp;
#else
  (void)uc;
  return UINTPTR_MAX;
#endif
}

/* An overflow faults in the guard page, or just below it when one frame
 * is larger than a page; then the stack pointer is below the stack too. */
static int is_overflow(const iof_fiber *f, uintptr_t addr, uintptr_t sp) {
  uintptr_t lo = (uintptr_t)f->base;
  uintptr_t page = iof__page_size();
  if (addr < lo && addr >= lo - page) return 1;
  /* A dense stack (IOF_STACK_GUARD_CHUNK) has no guard page of its own: a
   * deep overflow runs through the stacks carved below it down to its
   * chunk's guard, up to a chunk (2 MiB) away. The stack pointer below
   * the stack and the fault in the dense reservation say it is one. */
  if (f->soft_lo && sp < lo && addr < lo &&
      iof__stack_is_dense((const void *)addr))
    return 1;
  return sp < lo + 256 && addr < lo + 256 && addr + (1u << 20) >= lo;
}

void iof__overflow_report(const iof_fiber *f) {
  char line[160];
  size_t n = 0;
  const char *a = "iofiber: stack overflow in fiber '";
  memcpy(line, a, strlen(a));
  n += strlen(a);
  size_t nl = strnlen(f->name, sizeof f->name);
  memcpy(line + n, f->name, nl);
  n += nl;
  const char *b = "' (stack size ";
  memcpy(line + n, b, strlen(b));
  n += strlen(b);
  n += fmt_u(line + n, f->stack_size);
  const char *c = " bytes)\n";
  memcpy(line + n, c, strlen(c));
  n += strlen(c);
  ssize_t w = write(STDERR_FILENO, line, n);
  (void)w;
  signal(SIGABRT, SIG_DFL);
  abort();
}

static void on_segv(int sig, siginfo_t *si, void *uc) {
  iof_thread_state *th = iof__thread_peek();
  iof_fiber *f = th ? th->current : NULL;
  if (f && f != &th->root && f->base &&
      is_overflow(f, (uintptr_t)si->si_addr, fault_sp(uc)))
    iof__overflow_report(f);
  if (old_segv.sa_flags & SA_SIGINFO) {
    if (old_segv.sa_sigaction) old_segv.sa_sigaction(sig, si, uc);
    return;
  }
  if (old_segv.sa_handler != SIG_DFL && old_segv.sa_handler != SIG_IGN) {
    old_segv.sa_handler(sig);
    return;
  }
  /* Default action: returning re-executes the faulting access. */
  signal(sig, SIG_DFL);
}

static void free_altstack(void *p) {
  stack_t off = {.ss_flags = SS_DISABLE};
  sigaltstack(&off, NULL);
  munmap(p, (size_t)SIGSTKSZ < 65536 ? 65536 : (size_t)SIGSTKSZ);
}

static void install(void) {
  (void)pthread_key_create(&altstack_key, free_altstack);
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_sigaction = on_segv;
  sa.sa_flags = SA_SIGINFO | SA_ONSTACK;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGSEGV, &sa, &old_segv);
}

void iof__overflow_thread_init(void) {
  pthread_once(&install_once, install);
  stack_t cur;
  if (sigaltstack(NULL, &cur) == 0 && !(cur.ss_flags & SS_DISABLE)) return;
  size_t size = (size_t)SIGSTKSZ < 65536 ? 65536 : (size_t)SIGSTKSZ;
  void *p = mmap(NULL, size, PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return;
  stack_t ss = {.ss_sp = p, .ss_size = size, .ss_flags = 0};
  if (sigaltstack(&ss, NULL) != 0) {
    munmap(p, size);
    return;
  }
  (void)pthread_setspecific(altstack_key, p);
}
