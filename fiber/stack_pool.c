/* Recycling stack pool: the frame allocator fibers use by default.
 *
 * Each thread keeps a small cache per pool that only it touches, so the
 * common allocate/free pair takes no lock. Behind the caches sits a shared
 * depot under a mutex; stacks that stay there unused give their pages back
 * to the OS (see depot_put; MADV_DONTNEED: MADV_FREE leaves RSS high until
 * memory pressure, which is what the cap is meant to prevent). Only
 * requests of exactly the pool's stack size are recycled; other sizes are
 * mapped and unmapped directly.
 *
 * Counting. The live frames are two counters: `live_own`, counted by the
 * pool's owner thread (the first thread that made a cache for it, until it
 * exits) with a relaxed load and store, and `live_shared`, where every
 * other thread's cache flushes its own count (`delta`, written by that
 * thread only) once it reaches +-FLUSH_EVERY, with one atomic
 * read-modify-write. A locked RMW per allocation and per free cost a spawn
 * about 12 ns of 38 (each waits for the store buffer to drain), and when
 * frames are launched on one thread and freed on another (a thread pool)
 * or two threads share the pool, a counter both write moves its cache line
 * between their cores on every launch (~230 ns each way on some hosts).
 * live = own + shared + the deltas (mod 2^64; a frame may be counted up by
 * one and down by another), summed by stats under the pool lock. peak
 * takes own + shared at each owner allocation and at each flush (a CAS
 * only when it rises): exact for a pool only its owner uses; otherwise it
 * may miss up to FLUSH_EVERY - 1 frames per other thread, and two loads a
 * moment apart may skew it by the allocations in flight. Everything else
 * is derived or owner-written:
 * - allocated: per-thread counters, written only by the thread that owns
 *   the cache (relaxed load + store, no RMW), summed by stats under the
 *   pool lock; a thread that exits folds its count into `retired`.
 * - live_bytes: live * stack_size + `odd_bytes`, where odd_bytes collects
 *   the difference (mod 2^64) for the rare frames of other sizes.
 * - budget: only a pool with a budget keeps `reserved` (bytes, one more
 *   RMW per alloc and per free) to refuse allocations past it.
 * - mapped, failed and the counts of threads without a cache are global
 *   atomics touched only on slow paths (mmap, munmap, errors, depot).
 * All figures but peak are exact whenever no allocation or free is in
 * flight.
 *
 * Guards. A stack of its own is one mapping with a guard page under it
 * (stack_map.c). Dense stacks (IOF_STACK_GUARD_CHUNK, or AUTO once the
 * process's guard budget is spent) are carved top down from chunks with
 * one guard page each; they are never unmapped one by one: past the
 * depot's cap they wait in `spare` with their pages released, and the
 * chunks go when the pool is destroyed. */
#include "fiber/stack_map.h"
#include "fiber/sanitizer.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/mman.h>

#define CACHE_SLOTS 4

/* Under ASan a cached stack is poisoned but for its link (the top 64
 * bytes), so that a use of a destroyed fiber's frame is reported. */
#ifdef IOF_ASAN
#define POISON_CACHED(base, size) __asan_poison_memory_region(base, (size)-64)
#define UNPOISON(base, size) __asan_unpoison_memory_region(base, size)
#else
#define POISON_CACHED(base, size) ((void)(base), (void)(size))
#define UNPOISON(base, size) ((void)(base), (void)(size))
#endif

/* A free stack's link lives in its top page, which a used stack has always
 * touched, so caching costs no extra resident page. */
typedef struct stack_node {
  struct stack_node *next;
  bool released; /* pages given back since its last use (depot_put) */
} stack_node;

#define NODE_BELOW_TOP 64

typedef struct pool_cache {
  struct pool_cache *next; /* in the pool's list of caches */
  stack_node *head;
  /* Written by the owner only (relaxed load + store); read by stats. */
  atomic_size_t n;         /* stacks in this cache */
  atomic_size_t allocated; /* successful allocations by this thread */
  atomic_long delta;       /* live frames not yet flushed to live_shared */
  bool own; /* the pool's owner cache: counts in live_own (set under lock) */
} pool_cache;

#define FLUSH_EVERY 32 /* see Counting */

struct iof_stack_pool {
  iof_frame_allocator base;
  size_t stack_size;
  size_t cache_max;
  size_t depot_max;
  size_t budget;
  int guard;
  uint64_t id;
  struct iof_stack_pool *next_pool; /* registry of live pools */
  pthread_mutex_t lock;             /* depot and the list of caches */
  stack_node *depot;
  size_t depot_n;
  size_t depot_low; /* lowest depot_n since trim_at (see depot_put) */
  int64_t trim_at;
  pool_cache *caches;
  pool_cache *owner; /* the cache that counts in live_own, or NULL (lock) */
  size_t retired;    /* `allocated` of the caches of exited threads (lock) */
  /* Dense chunks (lock): the one being carved, all of them, spare stacks. */
  size_t chunk_bytes;
  char *carve_lo, *carve_cur;
  void **chunks;
  size_t nchunks, chunks_cap;
  void **spare; /* bases, pages released (the link would keep a page) */
  size_t spare_n, spare_cap;
  /* Live frames (see Counting), on a line of their own. */
  _Alignas(64) atomic_size_t live_own;
  atomic_size_t live_shared;
  atomic_size_t peak;
  /* Slow paths only. */
  _Alignas(64) atomic_size_t reserved; /* bytes; only with a budget */
  atomic_size_t odd_bytes;             /* sum of (size - stack_size) */
  atomic_size_t allocated;             /* by threads without a cache */
  atomic_size_t mapped, failed, dense;
};

/* The calling thread's caches, found by pool id (ids are never reused, so a
 * slot left by a destroyed pool can never match a new one); the pool used
 * last is kept in slot 0, so the common lookup is one compare. */
static __thread struct {
  uint64_t id;
  pool_cache *cache;
} slots[CACHE_SLOTS] __attribute__((tls_model("initial-exec")));

static pthread_mutex_t registry_lock = PTHREAD_MUTEX_INITIALIZER;
static iof_stack_pool *registry;
static uint64_t next_id = 1;
static pthread_key_t exit_key;
static pthread_once_t exit_once = PTHREAD_ONCE_INIT;

static stack_node *node_of(void *base, size_t size) {
  return (stack_node *)((char *)base + size - NODE_BELOW_TOP);
}

static void *base_of(stack_node *n, size_t size) {
  return (char *)n + NODE_BELOW_TOP - size;
}

static void release_pages(iof_stack_pool *p, void *base) {
  size_t page = iof__page_size();
  madvise(base, p->stack_size - page, MADV_DONTNEED);
}

static void unmap_stack(iof_stack_pool *p, void *base) {
  if (iof__stack_is_dense(base)) {
    /* Unmapping one stack of a chunk would split its mapping: keep it,
     * all pages released (before another thread can take it). */
    madvise(base, p->stack_size, MADV_DONTNEED);
    pthread_mutex_lock(&p->lock);
    if (p->spare_n == p->spare_cap) {
      size_t cap = p->spare_cap ? 2 * p->spare_cap : 64;
      void **a = realloc(p->spare, cap * sizeof *a);
      if (!a) { /* over the depot's cap rather than lost */
        stack_node *s = node_of(base, p->stack_size);
        s->released = true;
        s->next = p->depot;
        p->depot = s;
        p->depot_n++;
        pthread_mutex_unlock(&p->lock);
        return;
      }
      p->spare = a;
      p->spare_cap = cap;
    }
    p->spare[p->spare_n++] = base;
    pthread_mutex_unlock(&p->lock);
    return;
  }
  iof__stack_unmap(base, p->stack_size);
  atomic_fetch_sub_explicit(&p->mapped, 1, memory_order_relaxed);
}

/* A stack carved from the pool's current chunk (a new chunk when it is
 * used up). NULL with errno ENOMEM. */
static void *carve(iof_stack_pool *p) {
  size_t page = iof__page_size();
  pthread_mutex_lock(&p->lock);
  if (p->carve_cur == p->carve_lo) {
    if (p->nchunks == p->chunks_cap) {
      size_t cap = p->chunks_cap ? 2 * p->chunks_cap : 16;
      void **a = realloc(p->chunks, cap * sizeof *a);
      if (!a) {
        pthread_mutex_unlock(&p->lock);
        errno = ENOMEM;
        return NULL;
      }
      p->chunks = a;
      p->chunks_cap = cap;
    }
    char *c = iof__dense_chunk(p->chunk_bytes);
    if (!c) {
      pthread_mutex_unlock(&p->lock);
      errno = ENOMEM;
      return NULL;
    }
    p->chunks[p->nchunks++] = c;
    p->carve_lo = c + page;
    p->carve_cur = c + p->chunk_bytes;
  }
  p->carve_cur -= p->stack_size;
  void *base = p->carve_cur;
  pthread_mutex_unlock(&p->lock);
  atomic_fetch_add_explicit(&p->mapped, 1, memory_order_relaxed);
  atomic_fetch_add_explicit(&p->dense, 1, memory_order_relaxed);
  return base;
}

/* A stack from the OS: its own mapping and guard, or a dense one. */
static void *new_stack(iof_stack_pool *p) {
  if (p->guard == IOF_STACK_GUARD_PAGE ||
      (p->guard == IOF_STACK_GUARD_AUTO && iof__guard_budget_left())) {
    void *base = iof__stack_map(p->stack_size);
    if (base) {
      atomic_fetch_add_explicit(&p->mapped, 1, memory_order_relaxed);
      return base;
    }
    /* AUTO at the kernel's limit: a chunk costs two mappings for many
     * stacks. */
    if (p->guard == IOF_STACK_GUARD_PAGE || errno != ENOMEM) return NULL;
  }
  return carve(p);
}

static void release_stack(iof_stack_pool *p, stack_node *s) {
  if (s->released) return;
  release_pages(p, base_of(s, p->stack_size));
  s->released = true;
}

/* Page decay. The depot is a LIFO: the stacks at its bottom that no take
 * reached during a whole TRIM_NS (depot_low of them) are outside the
 * working set, and the first put after that interval gives their pages
 * back. A burst's stacks stop holding memory one interval after the burst,
 * and a steady load that cycles stacks through the depot (fibers launched
 * on one thread and ended on another, several threads sharing one pool)
 * does not pay an madvise per pass. On a machine with several CPUs each
 * madvise interrupts every other CPU running the process to flush its TLB:
 * releasing every stack past a fixed warm count cost two io threads that
 * launch 64 fibers at a time ~1.8 us per launch instead of ~0.1 us.
 * Called under the lock; returns the detached idle stacks, which the caller
 * releases without the lock and gives back to depot_return. */
#define TRIM_NS 100000000
static stack_node *detach_idle(iof_stack_pool *p) {
  int64_t now = iof__coarse_now_ns();
  if (now - p->trim_at < TRIM_NS) return NULL;
  size_t idle = p->depot_low;
  p->trim_at = now;
  p->depot_low = p->depot_n;
  if (!idle) return NULL;
  size_t keep = p->depot_n - idle;
  stack_node **pp = &p->depot;
  for (size_t i = 0; i < keep; i++) pp = &(*pp)->next;
  stack_node *tail = *pp;
  *pp = NULL;
  p->depot_n = p->depot_low = keep;
  return tail;
}

static void unmap_chain(iof_stack_pool *p, stack_node *chain) {
  while (chain) {
    stack_node *s = chain;
    chain = s->next;
    unmap_stack(p, base_of(s, p->stack_size));
  }
}

/* Puts released stacks under the rest of the depot: they are taken last,
 * and count as idle from the start. What no longer fits is unmapped. */
static void depot_return(iof_stack_pool *p, stack_node *chain) {
  stack_node *spill = NULL;
  pthread_mutex_lock(&p->lock);
  stack_node **pp = &p->depot;
  while (*pp) pp = &(*pp)->next;
  while (chain) {
    stack_node *s = chain;
    chain = s->next;
    s->next = NULL;
    if (p->depot_n < p->depot_max) {
      *pp = s;
      pp = &s->next;
      p->depot_n++;
      p->depot_low++;
    } else {
      s->next = spill;
      spill = s;
    }
  }
  pthread_mutex_unlock(&p->lock);
  unmap_chain(p, spill);
}

/* Puts a chain of stacks in the depot, unmapping what exceeds its cap;
 * with `release` (a thread's cache at its exit) their pages go back at
 * once, else idle stacks decay (detach_idle). */
static void depot_put(iof_stack_pool *p, stack_node *chain, bool release) {
  if (release) {
    for (stack_node *s = chain; s; s = s->next) release_stack(p, s);
    depot_return(p, chain);
    return;
  }
  stack_node *spill = NULL;
  pthread_mutex_lock(&p->lock);
  while (chain) {
    stack_node *s = chain;
    chain = s->next;
    if (p->depot_n < p->depot_max) {
      s->next = p->depot;
      p->depot = s;
      p->depot_n++;
    } else {
      s->next = spill;
      spill = s;
    }
  }
  stack_node *idle = detach_idle(p);
  pthread_mutex_unlock(&p->lock);
  unmap_chain(p, spill);
  if (idle) {
    for (stack_node *s = idle; s; s = s->next) release_stack(p, s);
    depot_return(p, idle);
  }
}

static void thread_exit(void *unused) {
  (void)unused;
  pthread_mutex_lock(&registry_lock);
  for (int i = 0; i < CACHE_SLOTS; i++) {
    uint64_t id = slots[i].id;
    pool_cache *c = slots[i].cache;
    slots[i].id = 0;
    slots[i].cache = NULL;
    iof_stack_pool *p = registry;
    while (p && p->id != id) p = p->next_pool;
    if (!id || !p) continue;
    stack_node *chain = c->head;
    c->head = NULL;
    atomic_store_explicit(&c->n, 0, memory_order_relaxed);
    pthread_mutex_lock(&p->lock);
    for (pool_cache **pp = &p->caches; *pp; pp = &(*pp)->next)
      if (*pp == c) {
        *pp = c->next;
        break;
      }
    p->retired += atomic_load_explicit(&c->allocated, memory_order_relaxed);
    atomic_fetch_add_explicit(
        &p->live_shared,
        (size_t)atomic_load_explicit(&c->delta, memory_order_relaxed),
        memory_order_relaxed);
    /* The lock orders this thread's last live_own update before the next
     * owner's first. */
    if (p->owner == c) p->owner = NULL;
    pthread_mutex_unlock(&p->lock);
    free(c);
    depot_put(p, chain, true);
  }
  pthread_mutex_unlock(&registry_lock);
}

static void make_exit_key(void) {
  (void)pthread_key_create(&exit_key, thread_exit);
}

/* A slot whose pool was destroyed (by another thread: destroy clears only
 * its own thread's slots), or -1. Its cache went with the pool. */
static int stale_slot(void) {
  int stale = -1;
  pthread_mutex_lock(&registry_lock);
  for (int i = 0; i < CACHE_SLOTS && stale < 0; i++) {
    iof_stack_pool *q = registry;
    while (q && q->id != slots[i].id) q = q->next_pool;
    if (!q) stale = i;
  }
  pthread_mutex_unlock(&registry_lock);
  if (stale >= 0) slots[stale].id = 0, slots[stale].cache = NULL;
  return stale;
}

static __attribute__((noinline)) pool_cache *find_cache(iof_stack_pool *p) {
  int found = -1, free_slot = -1;
  for (int i = 1; i < CACHE_SLOTS; i++) {
    if (slots[i].id == p->id) found = i;
    if (!slots[i].id && free_slot < 0) free_slot = i;
  }
  if (!slots[0].id) free_slot = 0;
  pool_cache *c;
  if (found >= 0) {
    c = slots[found].cache;
  } else {
    if (free_slot < 0) free_slot = stale_slot();
    if (free_slot < 0) return NULL; /* too many pools here: use the depot */
    c = calloc(1, sizeof *c);
    if (!c) return NULL;
    pthread_once(&exit_once, make_exit_key);
    (void)pthread_setspecific(exit_key, (void *)1);
    pthread_mutex_lock(&p->lock);
    c->next = p->caches;
    p->caches = c;
    if (!p->owner) {
      p->owner = c;
      c->own = true;
    }
    pthread_mutex_unlock(&p->lock);
    found = free_slot;
  }
  /* Move it to slot 0. */
  slots[found] = slots[0];
  slots[0].id = p->id;
  slots[0].cache = c;
  return c;
}

static inline pool_cache *get_cache(iof_stack_pool *p) {
  if (__builtin_expect(slots[0].id == p->id, 1)) return slots[0].cache;
  return find_cache(p);
}

static bool reserve_budget(iof_stack_pool *p, size_t size) {
  if (!p->budget) return true;
  size_t now =
      atomic_fetch_add_explicit(&p->reserved, size, memory_order_relaxed);
  if (now + size > p->budget) {
    atomic_fetch_sub_explicit(&p->reserved, size, memory_order_relaxed);
    return false;
  }
  return true;
}

static void unreserve(iof_stack_pool *p, size_t size) {
  if (p->budget)
    atomic_fetch_sub_explicit(&p->reserved, size, memory_order_relaxed);
}

/* Live frames: own + shared + every cache's delta (p->lock held). */
static size_t live_locked(iof_stack_pool *p) {
  size_t live = atomic_load_explicit(&p->live_own, memory_order_relaxed) +
                atomic_load_explicit(&p->live_shared, memory_order_relaxed);
  for (pool_cache *c = p->caches; c; c = c->next)
    live += (size_t)atomic_load_explicit(&c->delta, memory_order_relaxed);
  return live;
}

static inline void raise_peak(iof_stack_pool *p, size_t live) {
  size_t peak = atomic_load_explicit(&p->peak, memory_order_relaxed);
  while (__builtin_expect(live > peak, 0) &&
         !atomic_compare_exchange_weak_explicit(&p->peak, &peak, live,
                                                memory_order_relaxed,
                                                memory_order_relaxed)) {
  }
}

/* Counts d (+1 or -1) in c, a cache that is not the owner's; at
 * +-FLUSH_EVERY the count goes to live_shared. */
static inline void count_delta(iof_stack_pool *p, pool_cache *c, long d) {
  d += atomic_load_explicit(&c->delta, memory_order_relaxed);
  if (__builtin_expect(d < FLUSH_EVERY && d > -FLUSH_EVERY, 1)) {
    atomic_store_explicit(&c->delta, d, memory_order_relaxed);
    return;
  }
  /* Stats may read between the two stores: they see the count twice or
   * not at all for that moment, as with any allocation in flight. */
  size_t shared = atomic_fetch_add_explicit(&p->live_shared, (size_t)d,
                                            memory_order_relaxed) +
                  (size_t)d;
  atomic_store_explicit(&c->delta, 0, memory_order_relaxed);
  if (d > 0)
    raise_peak(p, shared +
                      atomic_load_explicit(&p->live_own, memory_order_relaxed));
}

/* A frame returned by the thread whose cache is c (NULL: none). */
static inline void count_free(iof_stack_pool *p, pool_cache *c) {
  if (c && c->own)
    atomic_store_explicit(
        &p->live_own,
        atomic_load_explicit(&p->live_own, memory_order_relaxed) - 1,
        memory_order_relaxed);
  else if (c)
    count_delta(p, c, -1);
  else
    atomic_fetch_sub_explicit(&p->live_shared, 1, memory_order_relaxed);
}

static inline void count_alloc(iof_stack_pool *p, pool_cache *c) {
  if (c && c->own) {
    size_t own = atomic_load_explicit(&p->live_own, memory_order_relaxed) + 1;
    atomic_store_explicit(&p->live_own, own, memory_order_relaxed);
    raise_peak(
        p, own + atomic_load_explicit(&p->live_shared, memory_order_relaxed));
  } else if (c) {
    count_delta(p, c, 1);
  } else {
    raise_peak(
        p, atomic_fetch_add_explicit(&p->live_shared, 1, memory_order_relaxed) +
               1 + atomic_load_explicit(&p->live_own, memory_order_relaxed));
  }
  if (c)
    atomic_store_explicit(
        &c->allocated,
        atomic_load_explicit(&c->allocated, memory_order_relaxed) + 1,
        memory_order_relaxed);
  else
    atomic_fetch_add_explicit(&p->allocated, 1, memory_order_relaxed);
}

static __attribute__((noinline)) void *fail(iof_stack_pool *p, int err) {
  atomic_fetch_add_explicit(&p->failed, 1, memory_order_relaxed);
  errno = err;
  return NULL;
}

static void *refill(iof_stack_pool *p, pool_cache *c) {
  stack_node *got = NULL;
  pthread_mutex_lock(&p->lock);
  size_t want = c ? p->cache_max / 2 + 1 : 1;
  while (p->depot && want--) {
    stack_node *s = p->depot;
    p->depot = s->next;
    p->depot_n--;
    if (p->depot_n < p->depot_low) p->depot_low = p->depot_n;
    s->next = got;
    got = s;
  }
  void *spare = !got && p->spare_n ? p->spare[--p->spare_n] : NULL;
  pthread_mutex_unlock(&p->lock);
  if (spare) {
    UNPOISON(spare, p->stack_size);
    return spare;
  }
  if (!got) return new_stack(p);
  if (c) {
    size_t n = atomic_load_explicit(&c->n, memory_order_relaxed);
    for (stack_node *s = got->next; s;) {
      stack_node *nx = s->next;
      s->next = c->head;
      c->head = s;
      n++;
      s = nx;
    }
    atomic_store_explicit(&c->n, n, memory_order_relaxed);
  }
  /* Only a cached stack was poisoned: a fresh mapping's shadow is left
   * untouched (unpoisoning it would fault in shadow pages). */
  UNPOISON(base_of(got, p->stack_size), p->stack_size);
  return base_of(got, p->stack_size);
}

/* Frames of another size than the pool's: mapped and unmapped directly. */
static __attribute__((noinline)) void *odd_allocate(iof_stack_pool *p,
                                                    size_t size) {
  size_t page = iof__page_size();
  size_t rsize = (size + page - 1) & ~(page - 1);
  if (!reserve_budget(p, rsize)) return fail(p, ENOMEM);
  void *base = iof__stack_map(rsize);
  if (!base) {
    unreserve(p, rsize);
    return fail(p, ENOMEM);
  }
  atomic_fetch_add_explicit(&p->mapped, 1, memory_order_relaxed);
  atomic_fetch_add_explicit(&p->odd_bytes, rsize - p->stack_size,
                            memory_order_relaxed);
  count_alloc(p, NULL);
  return base;
}

/* Everything but the common case: other sizes, a budget, another pool than
 * the thread's last one, an empty cache. */
static __attribute__((noinline)) void *alloc_slow(iof_stack_pool *p,
                                                  size_t size) {
  if (size != p->stack_size) {
    if (!size) return fail(p, EINVAL);
    size_t page = iof__page_size();
    if (((size + page - 1) & ~(page - 1)) != p->stack_size)
      return odd_allocate(p, size);
    size = p->stack_size;
  }
  if (!reserve_budget(p, size)) return fail(p, ENOMEM);
  pool_cache *c = get_cache(p);
  stack_node *s = c ? c->head : NULL;
  void *base;
  if (s) {
    c->head = s->next;
    atomic_store_explicit(&c->n,
                          atomic_load_explicit(&c->n, memory_order_relaxed) - 1,
                          memory_order_relaxed);
    base = base_of(s, size);
    UNPOISON(base, size);
  } else {
    base = refill(p, c);
    if (!base) {
      unreserve(p, size);
      return fail(p, ENOMEM);
    }
  }
  count_alloc(p, c);
  return base;
}

void *iof__pool_allocate(iof_frame_allocator *self, size_t size) {
  iof_stack_pool *p = (iof_stack_pool *)self;
  if (__builtin_expect(
          size == p->stack_size && !p->budget && slots[0].id == p->id, 1)) {
    pool_cache *c = slots[0].cache;
    stack_node *s = c->head;
    if (__builtin_expect(s != NULL, 1)) {
      c->head = s->next;
      atomic_store_explicit(
          &c->n, atomic_load_explicit(&c->n, memory_order_relaxed) - 1,
          memory_order_relaxed);
      count_alloc(p, c);
      UNPOISON(base_of(s, size), size);
      return base_of(s, size);
    }
  }
  return alloc_slow(p, size);
}

static __attribute__((noinline)) void spill(iof_stack_pool *p, pool_cache *c) {
  /* Keep the most recently used half (their pages are warm); send the
   * rest to the depot in one locked batch. */
  size_t keep = p->cache_max / 2;
  stack_node *chain;
  if (keep == 0) {
    chain = c->head;
    c->head = NULL;
  } else {
    stack_node *t = c->head;
    for (size_t i = 1; i < keep && t; i++) t = t->next;
    chain = t->next;
    t->next = NULL;
  }
  atomic_store_explicit(&c->n, keep, memory_order_relaxed);
  depot_put(p, chain, false);
}

static __attribute__((noinline)) void odd_deallocate(iof_stack_pool *p,
                                                     void *base, size_t size) {
  size_t page = iof__page_size();
  size_t rsize = (size + page - 1) & ~(page - 1);
  iof__stack_unmap(base, rsize);
  atomic_fetch_sub_explicit(&p->mapped, 1, memory_order_relaxed);
  atomic_fetch_sub_explicit(&p->odd_bytes, rsize - p->stack_size,
                            memory_order_relaxed);
  unreserve(p, rsize);
  count_free(p, NULL);
}

static __attribute__((noinline)) void dealloc_slow(iof_stack_pool *p,
                                                   void *base, size_t size) {
  if (size != p->stack_size) {
    size_t page = iof__page_size();
    if (((size + page - 1) & ~(page - 1)) != p->stack_size) {
      odd_deallocate(p, base, size);
      return;
    }
    size = p->stack_size;
  }
  stack_node *s = node_of(base, size);
  POISON_CACHED(base, size);
  s->released = false;
  pool_cache *c = get_cache(p);
  if (c) {
    s->next = c->head;
    c->head = s;
    size_t n = atomic_load_explicit(&c->n, memory_order_relaxed) + 1;
    atomic_store_explicit(&c->n, n, memory_order_relaxed);
    if (n > p->cache_max) spill(p, c);
  } else {
    s->next = NULL;
    depot_put(p, s, false);
  }
  /* After the stack is back: stats never count it both live and cached. */
  unreserve(p, size);
  count_free(p, c);
}

void iof__pool_deallocate(iof_frame_allocator *self, void *base, size_t size) {
  iof_stack_pool *p = (iof_stack_pool *)self;
  if (!base) return;
  if (__builtin_expect(
          size == p->stack_size && !p->budget && slots[0].id == p->id, 1)) {
    pool_cache *c = slots[0].cache;
    size_t n = atomic_load_explicit(&c->n, memory_order_relaxed) + 1;
    if (__builtin_expect(n <= p->cache_max, 1)) {
      stack_node *s = node_of(base, size);
      POISON_CACHED(base, size);
      s->next = c->head;
      s->released = false;
      c->head = s;
      atomic_store_explicit(&c->n, n, memory_order_relaxed);
      count_free(p, c);
      return;
    }
  }
  dealloc_slow(p, base, size);
}

const iof_frame_allocator_vtbl iof__pool_vtbl = {iof__pool_allocate,
                                                 iof__pool_deallocate};

iof_stack_pool *iof_stack_pool_create(const iof_stack_pool_options *opts) {
  iof_stack_pool_options o = {0};
  if (opts) o = *opts;
  size_t page = iof__page_size();
  if (!o.stack_size) o.stack_size = IOF_FIBER_STACK_DEFAULT;
  if (o.stack_size < IOF_FIBER_STACK_MIN ||
      o.stack_size > IOF_FIBER_STACK_MAX || o.thread_cache > 65536 ||
      o.depot_max > (1u << 20) || o.guard < IOF_STACK_GUARD_AUTO ||
      o.guard > IOF_STACK_GUARD_CHUNK) {
    errno = EINVAL;
    return NULL;
  }
  iof_stack_pool *p = calloc(1, sizeof *p);
  if (!p) {
    errno = ENOMEM;
    return NULL;
  }
  p->base.vtbl = &iof__pool_vtbl;
  p->stack_size = (o.stack_size + page - 1) & ~(page - 1);
  p->cache_max = o.thread_cache ? o.thread_cache : 16;
  p->depot_max = o.depot_max ? o.depot_max : 256;
  p->trim_at = iof__coarse_now_ns();
  p->budget = o.budget;
  p->guard = o.guard;
  /* About 2 MiB per chunk: two mappings for 32 default stacks. */
  size_t per = ((size_t)2 << 20) / p->stack_size;
  p->chunk_bytes = page + (per ? per : 1) * p->stack_size;
  pthread_mutex_init(&p->lock, NULL);
  pthread_mutex_lock(&registry_lock);
  p->id = next_id++;
  p->next_pool = registry;
  registry = p;
  pthread_mutex_unlock(&registry_lock);
  return p;
}

static void drop_stack(iof_stack_pool *p, stack_node *s) {
  void *base = base_of(s, p->stack_size);
  if (!iof__stack_is_dense(base)) iof__stack_unmap(base, p->stack_size);
}

int iof_stack_pool_destroy(iof_stack_pool *p) {
  if (!p) return -EINVAL;
  pthread_mutex_lock(&p->lock);
  size_t live = live_locked(p);
  pthread_mutex_unlock(&p->lock);
  if (live) return -EBUSY;
  pthread_mutex_lock(&registry_lock);
  for (iof_stack_pool **pp = &registry; *pp; pp = &(*pp)->next_pool)
    if (*pp == p) {
      *pp = p->next_pool;
      break;
    }
  pthread_mutex_unlock(&registry_lock);
  /* Caches of other threads go too: their slots keep a dead id only. */
  for (int i = 0; i < CACHE_SLOTS; i++)
    if (slots[i].id == p->id) slots[i].id = 0, slots[i].cache = NULL;
  while (p->caches) {
    pool_cache *c = p->caches;
    p->caches = c->next;
    while (c->head) {
      stack_node *s = c->head;
      c->head = s->next;
      drop_stack(p, s);
    }
    free(c);
  }
  while (p->depot) {
    stack_node *s = p->depot;
    p->depot = s->next;
    drop_stack(p, s);
  }
  /* Spare stacks go with their chunks. */
  for (size_t i = 0; i < p->nchunks; i++)
    iof__dense_chunk_release(p->chunks[i], p->chunk_bytes);
  free(p->chunks);
  free(p->spare);
  pthread_mutex_destroy(&p->lock);
  free(p);
  return 0;
}

iof_frame_allocator *iof_stack_pool_allocator(iof_stack_pool *p) {
  return p ? &p->base : NULL;
}

int iof_stack_pool_stats(iof_stack_pool *p, struct iof_stack_pool_stats *out) {
  if (!p || !out) return -EINVAL;
  pthread_mutex_lock(&p->lock);
  size_t cached = p->depot_n + p->spare_n;
  size_t allocated = p->retired;
  for (pool_cache *c = p->caches; c; c = c->next) {
    cached += atomic_load_explicit(&c->n, memory_order_relaxed);
    allocated += atomic_load_explicit(&c->allocated, memory_order_relaxed);
  }
  size_t live = live_locked(p);
  pthread_mutex_unlock(&p->lock);
  out->live = live;
  out->cached = cached;
  out->allocated = allocated + atomic_load(&p->allocated);
  out->peak = atomic_load(&p->peak);
  out->mapped = atomic_load(&p->mapped);
  out->failed = atomic_load(&p->failed);
  out->live_bytes = live * p->stack_size + atomic_load(&p->odd_bytes);
  out->dense = atomic_load(&p->dense);
  return 0;
}

static iof_stack_pool *default_pool;
static pthread_once_t default_once = PTHREAD_ONCE_INIT;
/* The answer, once known: every iof_fiber_create(NULL, ...) asks. */
static iof_frame_allocator *_Atomic default_alloc;

static void make_default_pool(void) {
  default_pool = iof_stack_pool_create(NULL);
}

iof_frame_allocator *iof_default_frame_allocator(void) {
  iof_frame_allocator *a =
      atomic_load_explicit(&default_alloc, memory_order_acquire);
  if (__builtin_expect(a != NULL, 1)) return a;
  pthread_once(&default_once, make_default_pool);
  a = default_pool ? &default_pool->base : iof_mmap_allocator();
  atomic_store_explicit(&default_alloc, a, memory_order_release);
  return a;
}
