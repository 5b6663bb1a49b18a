/* Thread-locals per fiber thread. A blocking-style program's __thread
 * variables are per thread; its "threads" here are fibers that take turns
 * on one OS thread, whose TLS blocks they would share. So compat's fiber
 * threads each keep an area with their own values of the program's
 * variables, and a switch into one puts its values in place when another
 * area's are there, saving those first. A thread that keeps running (one
 * connection, or a fiber thread alone on its io thread) costs nothing but
 * a check per switch. Values move, addresses do not: code built for
 * threads may keep a thread-local's address for as long as it likes.
 *
 * Whose blocks ($IOF_THREAD_LOCALS):
 * - default: the executable's, the libraries it names itself (DT_NEEDED:
 *   a program built as an executable over its own libraries keeps its
 *   per-thread state there, as named does in libisc and ruby in libruby),
 *   and the C++ runtime's (the exception being handled: a fiber that
 *   waits inside a catch block while another throws would see its
 *   exception freed). What those libraries pull in stays per OS thread;
 * - "all": every library's too, except the ones that are per OS thread
 *   by design: libc (errno is saved anyway; malloc's caches), the malloc
 *   in use, sanitizers, the runtime itself;
 * - "shared": none (one block per OS thread, as before).
 * A block that contains the runtime (linked with the static library) or
 * the malloc in use stays per OS thread in every mode.
 *
 * Only blocks in the static TLS area, at the same offset from the thread
 * pointer in every thread: a fresh thread lists them (a library loaded
 * later by dlopen may have its block allocated per thread on first use).
 *
 * Areas are reference counted: a fiber thread that hops to another
 * executor (iof_run) is switched in on another thread while its values
 * still sit in the blocks of the thread it last ran on; that thread keeps
 * naming the area until it switches another in, and copies back only if
 * the values are still its own (home). */
#include "fiber/fiber_internal.h"

#include <dlfcn.h>
#include <errno.h>
#include <link.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>

#define SEGS_MAX 16

/* The blocks kept per fiber thread: at tp + off in every thread, at `at`
 * in an area's buffer. */
static struct {
  int n;
  size_t size; /* of all, in an area */
  struct {
    ptrdiff_t off;
    size_t size, at;
  } seg[SEGS_MAX];
  unsigned char *init; /* initial values, laid out as in an area */
} B;

/* 0 not looked at yet, 1 being looked at, 2 decided (B.n 0: none). */
static atomic_int decided;

enum { MODE_PROGRAM, MODE_ALL, MODE_SHARED };
static int mode;

/* Modules loaded later (dlopen) get their TLS blocks per thread on first
 * use, at addresses of their own in each thread, not at one offset from
 * the thread pointer: nothing to copy in place. A fiber thread gets
 * blocks of its own for them instead, through the loader's
 * __tls_get_addr, which the hook interposes. By module id: */
#define DYN_MODS 512
enum { DYN_UNKNOWN, DYN_PER_OS_THREAD, DYN_PER_FIBER };
static struct {
  atomic_uchar kind;
  atomic_uint gen; /* bumped when the id's module is unloaded */
  bool at_start;   /* in static TLS since the start (seen by the probe) */
  uintptr_t base;  /* the module's load address, once classified */
  const void *image;
  size_t filesz, memsz, align;
} D[DYN_MODS];
static atomic_flag dyn_lk;

static bool in(const void *p, const void *lo, size_t n) {
  return (const char *)p >= (const char *)lo &&
         (const char *)p < (const char *)lo + n;
}

static bool has_code(const struct dl_phdr_info *info, const void *fn) {
  for (int i = 0; i < info->dlpi_phnum; i++) {
    const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
    if (ph->p_type == PT_LOAD &&
        in(fn, (const void *)(info->dlpi_addr + ph->p_vaddr), ph->p_memsz))
      return true;
  }
  return false;
}

/* Whether the module defines the malloc in use. malloc's address may be
 * the canonical PLT entry of a non-PIE executable that takes it (node):
 * code of the executable, but no definition, which dladdr1 (definitions
 * only) tells apart. */
static bool defines_malloc(const struct dl_phdr_info *info) {
  const void *m = (const void *)(uintptr_t)malloc;
  if (!has_code(info, m)) return false;
  Dl_info di;
  const ElfW(Sym) *sym = NULL;
  if (!dladdr1(m, &di, (void **)&sym, RTLD_DL_SYMENT) || !sym) return false;
  return di.dli_sname && strcmp(di.dli_sname, "malloc") == 0 &&
         sym->st_shndx != SHN_UNDEF;
}

static bool named(const char *path, const char *const *names) {
  const char *base = strrchr(path, '/');
  base = base ? base + 1 : path;
  for (; *names; names++)
    if (strncmp(base, *names, strlen(*names)) == 0) return true;
  return false;
}

static const char *const cxx_runtime[] = {"libstdc++.so", "libc++abi.so", NULL};
static const char *const per_os_thread[] = {
    "libc.so",     "libpthread.so", "ld-linux",    "ld64.so",
    "libiofiber",  "libasan",       "libtsan",     "liblsan",
    "libubsan",    "libhwasan",     "libjemalloc", "libtcmalloc",
    "libmimalloc", "libvgpreload",  "vgpreload",   NULL};

#define NEEDED_MAX 64

typedef struct look_ctx {
  int mode;
  bool first;
  char *tp;
  int n_needed;
  const char *needed[NEEDED_MAX]; /* the executable's DT_NEEDED names */
} look_ctx;

/* The names in the executable's DT_NEEDED entries (in its string table,
 * which stays mapped). */
static void list_needed(const struct dl_phdr_info *info, look_ctx *c) {
  const ElfW(Dyn) *dyn = NULL;
  for (int i = 0; i < info->dlpi_phnum; i++)
    if (info->dlpi_phdr[i].p_type == PT_DYNAMIC)
      dyn = (const ElfW(Dyn) *)(info->dlpi_addr + info->dlpi_phdr[i].p_vaddr);
  if (!dyn) return;
  uintptr_t strtab = 0;
  for (const ElfW(Dyn) *d = dyn; d->d_tag != DT_NULL; d++)
    if (d->d_tag == DT_STRTAB) strtab = d->d_un.d_ptr;
  if (!strtab) return;
  /* The loader relocates the entry in place where the dynamic section is
   * writable (x86-64, AArch64), not where it is read-only (RISC-V): an
   * unrelocated one is below the load address of a PIE. */
  if (strtab < info->dlpi_addr) strtab += info->dlpi_addr;
  for (const ElfW(Dyn) *d = dyn; d->d_tag != DT_NULL; d++)
    if (d->d_tag == DT_NEEDED && c->n_needed < NEEDED_MAX)
      c->needed[c->n_needed++] = (const char *)(strtab + d->d_un.d_val);
}

/* Whether the module at path is one the executable names: the loader
 * records the path it found the DT_NEEDED name at, so its last part is
 * that name. */
static bool needed_by_exe(const char *path, const look_ctx *c) {
  const char *base = strrchr(path, '/');
  base = base ? base + 1 : path;
  for (int i = 0; i < c->n_needed; i++)
    if (strcmp(base, c->needed[i]) == 0) return true;
  return false;
}

/* In the probe thread: takes the blocks the mode keeps apart. */
static int look(struct dl_phdr_info *info, size_t size, void *p) {
  (void)size;
  look_ctx *c = p;
  bool exe = c->first;
  c->first = false;
  const ElfW(Phdr) *tls = NULL;
  for (int i = 0; i < info->dlpi_phnum; i++)
    if (info->dlpi_phdr[i].p_type == PT_TLS) tls = &info->dlpi_phdr[i];
  /* An executable with the runtime or its own malloc inside keeps its
   * thread-locals per OS thread, and so do the libraries it names. */
  if (exe && !defines_malloc(info) &&
      !(tls && info->dlpi_tls_data &&
        in(&iof__tls_state, info->dlpi_tls_data, tls->p_memsz)))
    list_needed(info, c);
  if (tls && info->dlpi_tls_data && info->dlpi_tls_modid < DYN_MODS) {
    /* Its __tls_get_addr calls go to the loader: decided here, so that
     * they never look at the thread (iof__tls_dyn_addr). */
    D[info->dlpi_tls_modid].at_start = true;
    atomic_store_explicit(&D[info->dlpi_tls_modid].kind, DYN_PER_OS_THREAD,
                          memory_order_release);
  }
  if (!tls || !tls->p_memsz || !info->dlpi_tls_data || B.n == SEGS_MAX)
    return 0;
  const char *name = info->dlpi_name ? info->dlpi_name : "";
  if (!exe && !named(name, cxx_runtime) &&
      (named(name, per_os_thread) ||
       (c->mode == MODE_PROGRAM && !needed_by_exe(name, c))))
    return 0;
  /* The runtime or the allocator inside: per OS thread. */
  if (in(&iof__tls_state, info->dlpi_tls_data, tls->p_memsz) ||
      defines_malloc(info))
    return 0;
  size_t at = (B.size + 15) & ~(size_t)15;
  unsigned char *init = realloc(B.init, at + tls->p_memsz);
  if (!init) return 1; /* what was taken so far stays */
  B.init = init;
  memcpy(init + at, (const void *)(info->dlpi_addr + tls->p_vaddr),
         tls->p_filesz);
  memset(init + at + tls->p_filesz, 0, tls->p_memsz - tls->p_filesz);
  B.seg[B.n].off = (char *)info->dlpi_tls_data - c->tp;
  B.seg[B.n].size = tls->p_memsz;
  B.seg[B.n].at = at;
  B.n++;
  B.size = at + tls->p_memsz;
  return 0;
}

static void *probe(void *p) {
  look_ctx *c = p;
  c->tp = __builtin_thread_pointer();
  dl_iterate_phdr(look, c);
  return NULL;
}

static void decide(void) {
  int st = atomic_load_explicit(&decided, memory_order_acquire);
  if (st == 2) return;
  st = 0;
  if (atomic_compare_exchange_strong(&decided, &st, 1)) {
    const char *e = getenv("IOF_THREAD_LOCALS");
    look_ctx c = {.mode = MODE_PROGRAM, .first = true};
    if (e && strcmp(e, "all") == 0) c.mode = MODE_ALL;
    if (e && strcmp(e, "shared") == 0) c.mode = MODE_SHARED;
    mode = c.mode;
    pthread_t t;
    sigset_t all, old;
    /* The probe takes no signal meant for the program's threads. A thread
     * that cannot be made leaves every block shared. */
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    if (c.mode != MODE_SHARED && pthread_create(&t, NULL, probe, &c) == 0)
      pthread_join(t, NULL);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    atomic_store_explicit(&decided, 2, memory_order_release);
    return;
  }
  while (atomic_load_explicit(&decided, memory_order_acquire) != 2) {
  }
}

static void lock(iof__tls_area *a) {
  while (atomic_flag_test_and_set_explicit(&a->lk, memory_order_acquire)) {
  }
}

static void unlock(iof__tls_area *a) {
  atomic_flag_clear_explicit(&a->lk, memory_order_release);
}

static void release(iof__tls_area *a) {
  if (atomic_fetch_sub_explicit(&a->refs, 1, memory_order_acq_rel) != 1) return;
  for (unsigned i = 0; i < a->n_dyn; i++) free(a->dyn[i].block);
  free(a->dyn);
  free(a);
}

/* Values between the blocks of the thread whose thread pointer is tp
 * and an area's buffer, or another thread's blocks. */
static void save(const char *tp, unsigned char *buf) {
  for (int i = 0; i < B.n; i++)
    memcpy(buf + B.seg[i].at, tp + B.seg[i].off, B.seg[i].size);
}

static void load(char *tp, const unsigned char *buf) {
  for (int i = 0; i < B.n; i++)
    memcpy(tp + B.seg[i].off, buf + B.seg[i].at, B.seg[i].size);
}

static void move(char *to, const char *from) {
  for (int i = 0; i < B.n; i++)
    memcpy(to + B.seg[i].off, from + B.seg[i].off, B.seg[i].size);
}

int iof__tls_area_new(bool inherit, iof__tls_area **out) {
  *out = NULL;
  decide();
  /* With no static blocks to keep apart a thread still needs an area for
   * the blocks of modules loaded later; main uses the OS thread's. */
  if (!B.n && (inherit || mode == MODE_SHARED)) return 0;
  iof__tls_area *a = malloc(sizeof *a + B.size);
  if (!a) return -ENOMEM;
  atomic_init(&a->home, NULL);
  atomic_init(&a->refs, 1);
  atomic_flag_clear(&a->lk);
  a->os_blocks = inherit || mode == MODE_SHARED;
  a->n_dyn = 0;
  a->dyn = NULL;
  if (inherit)
    save(__builtin_thread_pointer(), a->buf);
  else
    memcpy(a->buf, B.init, B.size);
  *out = a;
  return 0;
}

void iof__tls_area_free(iof__tls_area *a) {
  release(a);
}

void iof__tls_area_ref(iof__tls_area *a) {
  atomic_fetch_add_explicit(&a->refs, 1, memory_order_relaxed);
}

/* The values th holds for a go back to a's buffer, if they are a's. */
static void put_back(iof_thread_state *th, iof__tls_area *a) {
  lock(a);
  if (atomic_load_explicit(&a->home, memory_order_relaxed) == th) {
    save(th->tp, a->buf);
    atomic_store_explicit(&a->home, NULL, memory_order_relaxed);
  }
  unlock(a);
}

/* th stops naming its area: the values it holds for it go back to it (they
 * also stay in place), and th's reference goes. */
static void forget(iof_thread_state *th) {
  iof__tls_area *cur = th->tls_cur;
  if (!cur) return;
  th->tls_cur = NULL;
  put_back(th, cur);
  release(cur);
}

void iof__tls_enter_slow(iof_thread_state *th, iof__tls_area *a) {
  if (th->tls_cur != a) {
    forget(th);
    iof__tls_area_ref(a);
    th->tls_cur = a;
  }
  lock(a);
  iof_thread_state *home = atomic_load_explicit(&a->home, memory_order_relaxed);
  if (!home)
    load(th->tp, a->buf);
  else if (home != th) /* it ran elsewhere last: its values are there */
    move(th->tp, home->tp);
  atomic_store_explicit(&a->home, th, memory_order_relaxed);
  unlock(a);
}

void iof__tls_attach(iof__tls_area *a) {
  iof_thread_state *th = iof__thread();
  iof_fiber *f = th->current;
  f->tls = a;
  iof__tls_enter_slow(th, a);
  f->tls_on = true;
}

void iof__tls_detach(void) {
  iof_thread_state *th = iof__thread();
  iof_fiber *f = th->current;
  iof__tls_area *a = f->tls;
  if (!f->tls_on) return;
  f->tls_on = false;
  f->tls = NULL;
  /* It was entered here last (it is running): its last values go to its
   * buffer (iof__tls_restore may want them) and also stay in place, for
   * the key destructors that run after this. */
  forget(th);
  release(a);
}

void iof__tls_restore(iof__tls_area *a) {
  iof_thread_state *th = iof__thread();
  iof__tls_enter_slow(th, a);
  forget(th);
  release(a);
}

bool iof__tls_owns(const void *addr) {
  iof_thread_state *th = iof__thread_peek();
  if (!th || !th->current->tls_on) return false;
  for (int i = 0; i < B.n; i++)
    if (in(addr, th->tp + B.seg[i].off, B.seg[i].size)) return true;
  return false;
}

void iof__tls_thread_end(iof_thread_state *th) {
  forget(th);
}

bool iof__tls_owns_dyn(const void *addr) {
  iof_thread_state *th = iof__thread_peek();
  if (!th || !th->current->tls_on) return false;
  iof__tls_area *a = th->current->tls;
  for (unsigned i = 0; a && i < a->n_dyn; i++)
    if (a->dyn[i].block && a->dyn[i].gen == atomic_load(&D[i].gen) &&
        in(addr, a->dyn[i].block, D[i].memsz))
      return true;
  return false;
}

typedef struct dyn_find {
  unsigned long id;
  int kind;
} dyn_find;

static bool static_tls_flag(const struct dl_phdr_info *info) {
  for (int i = 0; i < info->dlpi_phnum; i++) {
    if (info->dlpi_phdr[i].p_type != PT_DYNAMIC) continue;
    const ElfW(Dyn) *d =
        (const ElfW(Dyn) *)(info->dlpi_addr + info->dlpi_phdr[i].p_vaddr);
    for (; d->d_tag != DT_NULL; d++)
      if (d->d_tag == DT_FLAGS && (d->d_un.d_val & DF_STATIC_TLS)) return true;
  }
  return false;
}

static int find_module(struct dl_phdr_info *info, size_t size, void *p) {
  (void)size;
  dyn_find *f = p;
  if (info->dlpi_tls_modid != f->id) return 0;
  D[f->id].base = info->dlpi_addr;
  const ElfW(Phdr) *tls = NULL;
  for (int i = 0; i < info->dlpi_phnum; i++)
    if (info->dlpi_phdr[i].p_type == PT_TLS) tls = &info->dlpi_phdr[i];
  const char *name = info->dlpi_name ? info->dlpi_name : "";
  /* A module built for static TLS (initial-exec accesses) was given a
   * static block at dlopen: its accesses that do not come here use it. */
  if (!tls || static_tls_flag(info) || named(name, per_os_thread) ||
      defines_malloc(info))
    return 1;
  D[f->id].image = (const void *)(info->dlpi_addr + tls->p_vaddr);
  D[f->id].filesz = tls->p_filesz;
  D[f->id].memsz = tls->p_memsz;
  D[f->id].align = tls->p_align;
  f->kind = DYN_PER_FIBER;
  return 1;
}

static void dyn_lock(void) {
  while (atomic_flag_test_and_set_explicit(&dyn_lk, memory_order_acquire)) {
  }
}

static void dyn_unlock(void) {
  atomic_flag_clear_explicit(&dyn_lk, memory_order_release);
}

static int classify(unsigned long id) {
  dyn_lock();
  int k = atomic_load_explicit(&D[id].kind, memory_order_relaxed);
  if (k == DYN_UNKNOWN) {
    dyn_find f = {id, DYN_PER_OS_THREAD};
    if (!D[id].at_start) dl_iterate_phdr(find_module, &f);
    k = f.kind;
    atomic_store_explicit(&D[id].kind, (unsigned char)k, memory_order_release);
  }
  dyn_unlock();
  return k;
}

/* The fiber thread's block of module id, made from the module's initial
 * image in generation gen; NULL without memory. */
static void *dyn_block(iof__tls_area *a, unsigned long id, unsigned gen) {
  if (id >= a->n_dyn) {
    unsigned n = (unsigned)id + 8 < DYN_MODS ? (unsigned)id + 8 : DYN_MODS;
    struct iof__tls_dyn *t = realloc(a->dyn, n * sizeof *t);
    if (!t) return NULL;
    memset(t + a->n_dyn, 0, (n - a->n_dyn) * sizeof *t);
    a->dyn = t;
    a->n_dyn = n;
  }
  size_t al = D[id].align > sizeof(void *) ? D[id].align : sizeof(void *);
  size_t size = D[id].memsz ? (D[id].memsz + al - 1) / al * al : al;
  unsigned char *b = aligned_alloc(al, size);
  if (!b) return NULL;
  memcpy(b, D[id].image, D[id].filesz);
  memset(b + D[id].filesz, 0, size - D[id].filesz);
  a->dyn[id] = (struct iof__tls_dyn){b, gen};
  return b;
}

/* Which classified ids still name the module they were classified for. */
typedef struct dyn_live {
  bool live[DYN_MODS];
} dyn_live;

static int mark_live(struct dl_phdr_info *info, size_t size, void *p) {
  (void)size;
  size_t id = info->dlpi_tls_modid;
  if (id && id < DYN_MODS && D[id].base == info->dlpi_addr)
    ((dyn_live *)p)->live[id] = true;
  return 0;
}

void iof__tls_modules_closed(void) {
  dyn_live *l = calloc(1, sizeof *l);
  if (!l) return; /* blocks stay as they are: as before the dlclose */
  dyn_lock();
  dl_iterate_phdr(mark_live, l);
  for (size_t id = 1; id < DYN_MODS; id++) {
    if (l->live[id] || D[id].at_start ||
        atomic_load_explicit(&D[id].kind, memory_order_relaxed) == DYN_UNKNOWN)
      continue;
    D[id].image = NULL;
    D[id].base = 0;
    atomic_fetch_add_explicit(&D[id].gen, 1, memory_order_relaxed);
    atomic_store_explicit(&D[id].kind, DYN_UNKNOWN, memory_order_release);
  }
  dyn_unlock();
  free(l);
}

/* force_align_arg_pointer: the loader's callers may misalign the stack
 * (see the hook), and this one calls the allocator. */
__attribute__((noinline, force_align_arg_pointer)) static void *
dyn_addr_slow(const unsigned long *index, void *(*real)(void *), int k) {
  unsigned long id = index[0];
  iof_thread_state *th = iof__thread_peek();
  iof_fiber *f = th ? th->current : NULL;
  iof__tls_area *a = f && f->tls_on ? f->tls : NULL;
  if (!a || a->os_blocks) return real((void *)index);
  unsigned gen = atomic_load_explicit(&D[id].gen, memory_order_acquire);
  if (id < a->n_dyn && a->dyn[id].block) {
    if (a->dyn[id].gen == gen) return (char *)a->dyn[id].block + index[1];
    free(a->dyn[id].block); /* its module was unloaded */
    a->dyn[id].block = NULL;
  }
  if (k == DYN_UNKNOWN) k = classify(id);
  if (k != DYN_PER_FIBER) return real((void *)index);
  void *b = dyn_block(a, id, gen);
  return b ? (char *)b + index[1] : real((void *)index);
}

void *iof__tls_dyn_addr(void *ti, void *(*real)(void *)) {
  const unsigned long *index = ti; /* module id, offset */
  unsigned long id = index[0];
  if (id >= DYN_MODS) return real(ti);
  /* Most calls are for libraries whose blocks are per OS thread: no look
   * at the thread for those, and a tail call to the loader's. */
  int k = atomic_load_explicit(&D[id].kind, memory_order_acquire);
  if (__builtin_expect(k == DYN_PER_OS_THREAD, 1)) return real(ti);
  return dyn_addr_slow(index, real, k);
}
