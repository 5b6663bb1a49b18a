/* A fixed pool of threads sharing one run queue. */
#include <iofiber/thread_pool.h>

#include "sched/sched_internal.h"

#include <errno.h>
#include <stdlib.h>

struct iof_thread_pool {
  iof_execution_context ctx;
  pthread_mutex_t lock;
  pthread_cond_t cv;
  iof_fiber_queue q;
  atomic_long queued; /* fibers in q: what a spinning worker watches */
  int spinning;       /* workers spinning (lock): posts need not signal */
  iof_spin_policy spin_policy; /* (lock) */
  int sleeping;                /* workers in cond_wait (lock) */
  atomic_long work;
  bool stop;
  bool joining;
  bool joined;
  size_t n;
  pthread_t *threads;
};

static iof_fiber *pop(iof_thread_pool *p) {
  iof_fiber *f = iof__q_pop(&p->q);
  if (f) atomic_fetch_sub_explicit(&p->queued, 1, memory_order_relaxed);
  return f;
}

/* Called with the lock held, queue empty, after running fibers: watches the
 * queue without the lock for up to IOF_SPIN_NS. One spinner at a time (the
 * others sleep: on two cores a second spinner only steals the CPU). */
static void spin(iof_thread_pool *p) {
  if (p->spinning || !iof__spin_allowed(&p->spin_policy)) return;
  p->spinning++;
  pthread_mutex_unlock(&p->lock);
  int64_t start = iof__now_ns();
  /* Stop and join are seen under the lock once the spin ends. */
  for (int i = 1; !atomic_load_explicit(&p->queued, memory_order_relaxed) &&
                  iof__spin_step(start, i);
       i++) {
  }
  bool found = atomic_load_explicit(&p->queued, memory_order_relaxed) != 0;
  pthread_mutex_lock(&p->lock);
  p->spinning--;
  iof__spin_result(&p->spin_policy, found);
}

static void *worker(void *arg) {
  iof_thread_pool *p = arg;
  iof_run_mark mark;
  iof__run_mark_push(&mark, &p->ctx);
  pthread_mutex_lock(&p->lock);
  bool ran = false;
  for (;;) {
    iof_fiber *f = p->stop ? NULL : pop(p);
    if (f) {
      pthread_mutex_unlock(&p->lock);
      iof_fiber_resume(f);
      pthread_mutex_lock(&p->lock);
      ran = true;
      continue;
    }
    if (p->stop || (p->joining && atomic_load(&p->work) == 0)) break;
    if (ran) {
      /* Re-checked under the lock after the spin: a post made while the
       * spinner counted did not signal, and is found here. */
      ran = false;
      spin(p);
      continue;
    }
    p->sleeping++;
    pthread_cond_wait(&p->cv, &p->lock);
    p->sleeping--;
  }
  pthread_mutex_unlock(&p->lock);
  iof__run_mark_pop(&mark);
  return NULL;
}

static int pool_post(const void *ex, iof_fiber *h) {
  iof_thread_pool *p = (iof_thread_pool *)ex;
  if (iof__refuse_after_shutdown(&p->ctx, h)) return -ESHUTDOWN;
  pthread_mutex_lock(&p->lock);
  iof__q_push(&p->q, h);
  atomic_fetch_add_explicit(&p->queued, 1, memory_order_relaxed);
  /* A spinner takes it (or re-checks under the lock before sleeping). */
  if (p->sleeping && !p->spinning) pthread_cond_signal(&p->cv);
  pthread_mutex_unlock(&p->lock);
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
  atomic_fetch_add_explicit(&((iof_thread_pool *)ex)->work, 1,
                            memory_order_relaxed);
}

static void pool_work_finished(const void *ex) {
  iof_thread_pool *p = (iof_thread_pool *)ex;
  if (atomic_fetch_sub_explicit(&p->work, 1, memory_order_acq_rel) == 1) {
    pthread_mutex_lock(&p->lock);
    pthread_cond_broadcast(&p->cv);
    pthread_mutex_unlock(&p->lock);
  }
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
  iof_thread_pool *p = calloc(1, sizeof *p);
  pthread_t *t = calloc(n, sizeof *t);
  if (!p || !t || iof_execution_context_init(&p->ctx) != 0) {
    free(p);
    free(t);
    errno = ENOMEM;
    return NULL;
  }
  p->threads = t;
  pthread_mutex_init(&p->lock, NULL);
  pthread_cond_init(&p->cv, NULL);
  atomic_init(&p->work, 0);
  atomic_init(&p->queued, 0);
  p->spin_policy.credit = 4;
  for (size_t i = 0; i < n; i++) {
    int r = pthread_create(&t[i], NULL, worker, p);
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

int iof_thread_pool_join(iof_thread_pool *p) {
  if (!p) return -EINVAL;
  if (iof__thread_runs(&p->ctx)) return -EDEADLK;
  pthread_mutex_lock(&p->lock);
  p->joining = true;
  bool joined = p->joined;
  p->joined = true;
  pthread_cond_broadcast(&p->cv);
  pthread_mutex_unlock(&p->lock);
  if (!joined)
    for (size_t i = 0; i < p->n; i++) pthread_join(p->threads[i], NULL);
  return 0;
}

int iof_thread_pool_destroy(iof_thread_pool *p) {
  if (!p) return -EINVAL;
  if (iof__thread_runs(&p->ctx)) return -EDEADLK;
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
    iof_fiber *f = iof__q_pop(&p->q);
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
  long left = atomic_load(&p->work);
  if (left > 0) {
    iof__report_stuck("thread pool", (size_t)left);
    return -EBUSY;
  }
  iof_execution_context_destroy(&p->ctx);
  pthread_cond_destroy(&p->cv);
  pthread_mutex_destroy(&p->lock);
  free(p->threads);
  free(p);
  return 0;
}
