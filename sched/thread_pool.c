/* A fixed pool of threads sharing one run queue.
 *
 * Posts never take the pool's lock: a fiber is pushed on `inbox`, a
 * lock-free LIFO (one CAS), and a worker moves the whole inbox, put back in
 * FIFO order, into `q`, the queue the workers share under `lock`. A post
 * wakes a worker only when one is parked, none is spinning and none is
 * already being woken; it claims the sleeper it wakes, so a burst of posts
 * costs one wake-up, not one per post. The woken worker takes the whole
 * inbox; what it leaves queued is taken by the watcher (park()), or by a
 * worker it wakes when none watches. */
#include <iofiber/thread_pool.h>

#include "sched/sched_internal.h"
#include "sched/sync_internal.h"

#include <errno.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

struct iof_thread_pool {
  iof_execution_context ctx;
  /* Posters' line: the inbox and what they read to decide on a wake. */
  _Alignas(64) iof_fiber *_Atomic inbox;
  atomic_int sleepers; /* sleeping, or 0 while a wake is pending: posts */
  atomic_int spinning; /* workers spinning: a post need not wake anyone */
  /* Posts under way (destroy waits for them: a post reads the pool after
   * its fiber became visible, and that fiber may already have run). On a
   * line of its own: a spinner polls the inbox's. */
  _Alignas(64) atomic_long posting;
  /* Tracked work is started - finished, two counters on lines of their
   * own: a chain is launched on one thread and ends on a pool thread, and
   * one shared counter would move between them on every launch. Read
   * finished first: the difference is then never below the true count. */
  _Alignas(64) atomic_long started;
  _Alignas(64) atomic_long finished;
  atomic_long finish_left; /* finishes done reading the pool (destroy) */
  atomic_bool joining;     /* finishes then wake the joiner's threads */
  /* Workers' line. */
  _Alignas(64) pthread_mutex_t lock;
  pthread_cond_t cv;
  iof_fiber_queue q;           /* (lock) */
  atomic_long queued;          /* fibers in q: watched by a spinner */
  int sleeping;                /* parked workers not yet woken (lock) */
  int wakes;                   /* wakes sent, not yet taken (lock) */
  int running;                 /* workers inside a fiber (lock) */
  bool watching;               /* a parked worker has a timeout (lock) */
  iof_spin_policy spin_policy; /* (lock) */
  bool stop;
  bool joined;
  size_t exited;       /* workers past their loop (lock) */
  pthread_cond_t gone; /* the last worker left its loop (a second join) */
  size_t n;
  pthread_t *threads;
};

static long work_left(iof_thread_pool *p) {
  long done = atomic_load(&p->finished);
  return atomic_load(&p->started) - done;
}

/* Moves the inbox to the tail of q, oldest first (lock held). */
static bool take_inbox(iof_thread_pool *p) {
  if (!atomic_load_explicit(&p->inbox, memory_order_relaxed)) return false;
  iof_fiber *f =
      atomic_exchange_explicit(&p->inbox, NULL, memory_order_acquire);
  iof_fiber_queue fifo = {NULL, f};
  long n = 0;
  while (f) {
    iof_fiber *next = f->next;
    f->next = fifo.head;
    fifo.head = f;
    f = next;
    n++;
  }
  iof__q_append(&p->q, &fifo);
  atomic_store_explicit(
      &p->queued, atomic_load_explicit(&p->queued, memory_order_relaxed) + n,
      memory_order_relaxed);
  return n != 0;
}

static iof_fiber *pop(iof_thread_pool *p) {
  iof_fiber *f = iof__q_pop(&p->q);
  if (!f && take_inbox(p)) f = iof__q_pop(&p->q);
  if (f)
    atomic_store_explicit(
        &p->queued, atomic_load_explicit(&p->queued, memory_order_relaxed) - 1,
        memory_order_relaxed);
  return f;
}

/* What posts read to decide on a wake (lock held): while a woken worker
 * has not yet taken its wake it will take the whole inbox, and wake more
 * workers itself if a backlog is left (worker()), so posts need not. */
static void publish_sleepers(iof_thread_pool *p) {
  atomic_store(&p->sleepers, p->wakes ? 0 : p->sleeping);
}

/* Claims one parked worker for a wake-up (lock held); the caller signals
 * once it has released the lock, so that the woken thread does not block
 * on it at once. False if none is parked or a wake is already pending. */
static bool claim_sleeper(iof_thread_pool *p) {
  if (!p->sleeping || p->wakes) return false;
  p->sleeping--;
  p->wakes++;
  publish_sleepers(p);
  return true;
}

static bool work_waits(iof_thread_pool *p) {
  return atomic_load_explicit(&p->queued, memory_order_relaxed) ||
         atomic_load_explicit(&p->inbox, memory_order_relaxed);
}

/* Called with the lock held, queue empty, after running fibers: watches the
 * inbox and the queue without the lock for the spin's length; returns a
 * missed spin's start for iof__spin_woke (0: none). One spinner
 * at a time (the others sleep: on two cores a second spinner only steals
 * the CPU). */
static int64_t spin(iof_thread_pool *p) {
  if (atomic_load_explicit(&p->spinning, memory_order_relaxed) ||
      !iof__spin_allowed(&p->spin_policy))
    return 0;
  atomic_store(&p->spinning, 1);
  int64_t start = iof__now_ns(), spun = 0;
  int64_t len = iof__spin_begin(&p->spin_policy, start);
  pthread_mutex_unlock(&p->lock);
  /* Stop and join are seen under the lock once the spin ends. */
  for (int i = 1; !work_waits(p) && iof__spin_step(start, i, len, &spun); i++) {
  }
  bool found = work_waits(p);
  pthread_mutex_lock(&p->lock);
  /* A post that saw the spinner did not wake anyone: the caller takes its
   * fiber, or parks only after re-checking the inbox. */
  atomic_store(&p->spinning, 0);
  return iof__spin_result(&p->spin_policy, found, start, spun);
}

static bool must_exit(iof_thread_pool *p) {
  return p->stop || (atomic_load_explicit(&p->joining, memory_order_relaxed) &&
                     work_left(p) == 0);
}

/* How long the watcher sleeps at most: a fiber queued behind one that
 * holds its worker is picked up by a parked worker within this. */
#define WATCH_NS 2000000

/* Parks the calling worker until a post (or stop, join) wakes it (lock
 * held). The sleeper count is published before the inbox is read again,
 * and a post pushes before it reads the count (both sequentially
 * consistent): either the post sees the sleeper and wakes it, or this sees
 * the post. While other workers run fibers, one parked worker (the
 * watcher) wakes every WATCH_NS to take what they left queued (a post
 * that saw a spinner or a pending wake woke nobody, and a fiber may hold
 * its worker for long); with nothing running every worker sleeps until
 * woken, so an idle pool stays idle. */
static void park(iof_thread_pool *p) {
  p->sleeping++;
  publish_sleepers(p);
  if (atomic_load(&p->inbox)) {
    p->sleeping--;
    publish_sleepers(p);
    return;
  }
  bool watch = p->running > 0 && !p->watching;
  struct timespec until;
  if (watch) {
    p->watching = true;
    clock_gettime(CLOCK_MONOTONIC, &until);
    until.tv_nsec += WATCH_NS;
    if (until.tv_nsec >= 1000000000) {
      until.tv_sec++;
      until.tv_nsec -= 1000000000;
    }
  }
  while (!p->wakes && !must_exit(p)) {
    if (!watch) {
      pthread_cond_wait(&p->cv, &p->lock);
    } else if (pthread_cond_timedwait(&p->cv, &p->lock, &until) == ETIMEDOUT) {
      break;
    }
  }
  if (watch) p->watching = false;
  /* A wake is claimed for some parked worker, not for this one: whoever
   * wakes first takes it; the others uncount themselves. */
  if (p->wakes)
    p->wakes--;
  else
    p->sleeping--;
  publish_sleepers(p);
}

static void *worker(void *arg) {
  iof_thread_pool *p = arg;
  iof_run_mark mark;
  iof__run_mark_push(&mark, &p->ctx);
  pthread_mutex_lock(&p->lock);
  bool ran = false;
  int64_t missed = 0; /* this worker's last spin found nothing */
  for (;;) {
    iof_fiber *f = p->stop ? NULL : pop(p);
    if (f) {
      /* More is queued and workers sleep with none looking for work or
       * watching: wake one rather than leave the queue to this thread
       * alone (f may hold it for long). */
      bool wake = p->sleeping && !p->watching && work_waits(p) &&
                  !atomic_load_explicit(&p->spinning, memory_order_relaxed) &&
                  claim_sleeper(p);
      p->running++;
      pthread_mutex_unlock(&p->lock);
      if (wake) pthread_cond_signal(&p->cv);
      iof_fiber_resume(f);
      pthread_mutex_lock(&p->lock);
      p->running--;
      ran = true;
      continue;
    }
    if (must_exit(p)) break;
    if (ran) {
      ran = false;
      missed = spin(p);
      continue;
    }
    park(p);
    iof__spin_woke(&p->spin_policy, missed);
    missed = 0;
  }
  if (++p->exited == p->n) pthread_cond_broadcast(&p->gone);
  pthread_mutex_unlock(&p->lock);
  iof__run_mark_pop(&mark);
  return NULL;
}

static int pool_post(const void *ex, iof_fiber *h) {
  iof_thread_pool *p = (iof_thread_pool *)ex;
  if (iof__refuse_after_shutdown(&p->ctx, h)) return -ESHUTDOWN;
  atomic_fetch_add_explicit(&p->posting, 1, memory_order_relaxed);
  h->queued = true; /* the inbox is a queue of the pool's */
  iof_fiber *head = atomic_load_explicit(&p->inbox, memory_order_relaxed);
  do {
    h->next = head;
  } while (!atomic_compare_exchange_weak_explicit(
      &p->inbox, &head, h, memory_order_seq_cst, memory_order_relaxed));
  /* A spinner takes it (or re-checks the inbox before it parks). */
  if (atomic_load(&p->sleepers) && !atomic_load(&p->spinning)) {
    pthread_mutex_lock(&p->lock);
    bool wake = !atomic_load_explicit(&p->spinning, memory_order_relaxed) &&
                claim_sleeper(p);
    pthread_mutex_unlock(&p->lock);
    if (wake) pthread_cond_signal(&p->cv);
  }
  atomic_fetch_sub_explicit(&p->posting, 1, memory_order_release);
  return 0;
}

static int pool_dispatch(const void *ex, iof_fiber *h) {
  iof_thread_pool *p = (iof_thread_pool *)ex;
  if (iof__refuse_after_shutdown(&p->ctx, h)) return -ESHUTDOWN;
  if (iof__thread_runs(&p->ctx)) return 1;
  return pool_post(ex, h);
}

static iof_execution_context *pool_context(const void *ex) {
  return &((iof_thread_pool *)ex)->ctx;
}

static void pool_work_started(const void *ex) {
  atomic_fetch_add_explicit(&((iof_thread_pool *)ex)->started, 1,
                            memory_order_relaxed);
}

/* Only a join waits for the work to end. It sets `joining` before it
 * reads the counters, and this reads `joining` after counting (both
 * sequentially consistent): the last finish is seen by one or the other. */
static void pool_work_finished(const void *ex) {
  iof_thread_pool *p = (iof_thread_pool *)ex;
  atomic_fetch_add(&p->finished, 1);
  if (atomic_load(&p->joining) && work_left(p) == 0) {
    pthread_mutex_lock(&p->lock);
    pthread_cond_broadcast(&p->cv);
    pthread_mutex_unlock(&p->lock);
  }
  atomic_fetch_add_explicit(&p->finish_left, 1, memory_order_release);
}

static const iof_executor_vtbl pool_vtbl = {
    pool_dispatch, pool_post,         NULL,
    pool_context,  pool_work_started, pool_work_finished};

__attribute__((constructor)) static void name_pool(void) {
  iof__debug_label(&pool_vtbl, "thread_pool", NULL);
}

iof_thread_pool *iof_thread_pool_create(size_t n) {
  if (n == 0 || n > 1024) {
    errno = EINVAL;
    return NULL;
  }
  iof_thread_pool *p = aligned_alloc(64, (sizeof *p + 63) & ~(size_t)63);
  pthread_t *t = calloc(n, sizeof *t);
  if (p) memset(p, 0, sizeof *p);
  if (!p || !t || iof_execution_context_init(&p->ctx) != 0) {
    free(p);
    free(t);
    errno = ENOMEM;
    return NULL;
  }
  p->threads = t;
  pthread_mutex_init(&p->lock, NULL);
  pthread_condattr_t ca;
  pthread_condattr_init(&ca);
  pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
  pthread_cond_init(&p->cv, &ca);
  pthread_cond_init(&p->gone, NULL);
  pthread_condattr_destroy(&ca);
  atomic_init(&p->inbox, NULL);
  atomic_init(&p->sleepers, 0);
  atomic_init(&p->spinning, 0);
  atomic_init(&p->posting, 0);
  atomic_init(&p->started, 0);
  atomic_init(&p->finished, 0);
  atomic_init(&p->finish_left, 0);
  atomic_init(&p->joining, false);
  atomic_init(&p->queued, 0);
  p->spin_policy.credit = 4;
  for (size_t i = 0; i < n; i++) {
    int r = iof__thread_create_quiet(&t[i], worker, p);
    if (r != 0) {
      p->n = i;
      iof_thread_pool_destroy(p);
      errno = r;
      return NULL;
    }
  }
  p->n = n;
  return p;
}

iof_executor_ref iof_thread_pool_executor(iof_thread_pool *p) {
  return iof_executor_make(p, p ? &pool_vtbl : NULL);
}

iof_execution_context *iof_thread_pool_context(iof_thread_pool *p) {
  return p ? &p->ctx : NULL;
}

void iof_thread_pool_stop(iof_thread_pool *p) {
  if (!p) return;
  pthread_mutex_lock(&p->lock);
  p->stop = true;
  pthread_cond_broadcast(&p->cv);
  pthread_mutex_unlock(&p->lock);
}

static bool nap_begin(void *op, iof__wait *w) {
  (void)op;
  return iof__wait_publish(w);
}

static size_t exited(iof_thread_pool *p) {
  pthread_mutex_lock(&p->lock);
  size_t n = p->exited;
  pthread_mutex_unlock(&p->lock);
  return n;
}

int iof_thread_pool_join(iof_thread_pool *p) {
  if (!p) return -EINVAL;
  /* The workers' fibers end by unregistering, which waits for the registry
   * an iof_fiber_walk callback on this thread holds. */
  if (iof__thread_runs(&p->ctx) || iof__debug_walking) return -EDEADLK;
  pthread_mutex_lock(&p->lock);
  atomic_store(&p->joining, true);
  bool joined = p->joined;
  p->joined = true;
  pthread_cond_broadcast(&p->cv);
  pthread_mutex_unlock(&p->lock);
  /* A launched fiber naps (1 ms, uncancellable) until the workers are
   * gone rather than block its thread: a pool chain may be waiting on that
   * thread's context (an iof_run hop to it, its sockets or timers), and
   * its work keeps the workers running. Not once that context shuts down:
   * its drain runs no timers (and its waits are being cancelled). */
  iof_fiber *self = iof__sync_fiber();
  iof_execution_context *home =
      self ? iof_executor_context(self->env->executor) : NULL;
  if (self)
    while (exited(p) < p->n && !iof_execution_context_stopping(home)) {
      iof__wait w;
      int r = iof__wait_block(NULL, nap_begin, &w,
                              iof__sat_add(iof__now_ns(), 1000000), 0);
      if (r != -ETIMEDOUT) iof_yield(); /* no timer: let the loop run */
    }
  if (!joined) {
    for (size_t i = 0; i < p->n; i++) pthread_join(p->threads[i], NULL);
    return 0;
  }
  /* Another join reaps the threads: this one still returns only once the
   * work is done and the workers are gone, as the first one does. */
  pthread_mutex_lock(&p->lock);
  while (p->exited < p->n) pthread_cond_wait(&p->gone, &p->lock);
  pthread_mutex_unlock(&p->lock);
  return 0;
}

int iof_thread_pool_destroy(iof_thread_pool *p) {
  if (!p) return -EINVAL;
  if (iof__thread_runs(&p->ctx) || iof__debug_walking) return -EDEADLK;
  iof_thread_pool_stop(p);
  iof_thread_pool_join(p);
  iof_execution_context_shutdown(&p->ctx);
  /* The threads are gone: this thread runs what is left to its end. */
  iof_run_mark mark;
  iof__run_mark_push(&mark, &p->ctx);
  /* Bounded: a fiber that re-queues itself forever cannot hang destroy.
   * (3) before (4): never-started fibers are set aside while any started
   * one is ready, then cancelled (a raw fiber is run). */
  iof_fiber_queue later = {NULL, NULL};
  for (long i = 0; i < 10000000; i++) {
    pthread_mutex_lock(&p->lock);
    iof_fiber *f = pop(p);
    pthread_mutex_unlock(&p->lock);
    if (f && f->state == IOF_FS_CREATED) {
      iof__q_push(&later, f);
      continue;
    }
    if (!f) f = iof__q_pop(&later);
    if (!f) break;
    iof__drain_one(f);
  }
  iof__run_mark_pop(&mark);
  /* A chain still counted is suspended on something outside the pool (or
   * a guard is held): its wake would post to freed memory. Keep the pool,
   * shut down and without threads; a later destroy drains it again. */
  long left = work_left(p);
  if (left > 0) {
    iof__report_stuck("thread pool", (size_t)left);
    return -EBUSY;
  }
  /* A post whose fiber already ran here, or the finish of a chain that
   * ended on another thread (after an iof_run hop back), may still be
   * reading the pool. */
  long finished = atomic_load(&p->finished);
  while (atomic_load_explicit(&p->posting, memory_order_acquire) ||
         atomic_load_explicit(&p->finish_left, memory_order_acquire) < finished)
    sched_yield();
  iof_execution_context_destroy(&p->ctx);
  pthread_cond_destroy(&p->cv);
  pthread_cond_destroy(&p->gone);
  pthread_mutex_destroy(&p->lock);
  free(p->threads);
  free(p);
  return 0;
}
