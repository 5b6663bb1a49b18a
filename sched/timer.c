/* Timers (timer_internal.h): a context's own loop when the caller runs on
 * it, else the timer service.
 *
 * The service is a binary min-heap of timers (each knows its index, so a
 * cancel is O(log n) too) under one lock, and one thread sleeping on a
 * condition variable until the earliest deadline. The thread starts with
 * the first timer, leaves after IDLE_NS with nothing armed (the next arm
 * starts a new one) and is stopped and joined at exit, so that a program
 * that once slept on a thread pool does not keep a thread forever. */
#include "sched/timer_internal.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdlib.h>
#include <time.h>

#define IDLE_NS 50000000LL /* the thread leaves after 50 ms idle */
#define MAX_SLEEP_NS                                                           \
  3600000000000LL /* sleeps of at most an hour, rechecked                      \
                   */

static struct {
  pthread_mutex_t lock;
  pthread_cond_t wake;  /* new earliest deadline, or quit */
  pthread_cond_t fired; /* a fire finished */
  pthread_once_t once;
  iof__timer **heap;
  size_t n, cap;
  iof__timer *firing;
  pthread_t thread;
  bool running;  /* the thread is in its loop */
  bool joinable; /* a thread was started and not joined yet */
  bool quit;     /* exiting: no thread any more */
} svc = {.lock = PTHREAD_MUTEX_INITIALIZER,
         .fired = PTHREAD_COND_INITIALIZER,
         .once = PTHREAD_ONCE_INIT};

/* ---- the heap (under svc.lock) ---------------------------------------- */

static inline void put(size_t i, iof__timer *t) {
  svc.heap[i] = t;
  t->slot = i + 1;
}

static void sift_up(size_t i) {
  iof__timer *t = svc.heap[i];
  while (i > 0) {
    size_t p = (i - 1) / 2;
    if (svc.heap[p]->deadline <= t->deadline) break;
    put(i, svc.heap[p]);
    i = p;
  }
  put(i, t);
}

static void sift_down(size_t i) {
  iof__timer *t = svc.heap[i];
  for (;;) {
    size_t c = 2 * i + 1;
    if (c >= svc.n) break;
    if (c + 1 < svc.n && svc.heap[c + 1]->deadline < svc.heap[c]->deadline) c++;
    if (t->deadline <= svc.heap[c]->deadline) break;
    put(i, svc.heap[c]);
    i = c;
  }
  put(i, t);
}

static void heap_remove(iof__timer *t) {
  size_t i = t->slot - 1;
  t->slot = 0;
  iof__timer *last = svc.heap[--svc.n];
  if (last == t) return;
  put(i, last);
  if (i > 0 && svc.heap[(i - 1) / 2]->deadline > last->deadline)
    sift_up(i);
  else
    sift_down(i);
}

/* ---- the thread ------------------------------------------------------- */

static struct timespec abs_ts(int64_t ns) {
  struct timespec ts = {(time_t)(ns / 1000000000), (long)(ns % 1000000000)};
  return ts;
}

static void *service_main(void *arg) {
  (void)arg;
  pthread_mutex_lock(&svc.lock);
  while (!svc.quit) {
    int64_t now = iof__now_ns();
    if (svc.n == 0) {
      struct timespec ts = abs_ts(now + IDLE_NS);
      if (pthread_cond_timedwait(&svc.wake, &svc.lock, &ts) == ETIMEDOUT &&
          svc.n == 0)
        break; /* idle: leave; the next arm starts a thread again */
      continue;
    }
    iof__timer *t = svc.heap[0];
    if (t->deadline > now) {
      int64_t until = iof__sat_sub(t->deadline, now) > MAX_SLEEP_NS
                          ? now + MAX_SLEEP_NS
                          : t->deadline;
      struct timespec ts = abs_ts(until);
      pthread_cond_timedwait(&svc.wake, &svc.lock, &ts);
      continue;
    }
    heap_remove(t);
    svc.firing = t;
    pthread_mutex_unlock(&svc.lock);
    t->fire(t->arg);
    pthread_mutex_lock(&svc.lock);
    svc.firing = NULL;
    pthread_cond_broadcast(&svc.fired);
  }
  svc.running = false;
  if (svc.n == 0) { /* give the memory back while idle */
    free(svc.heap);
    svc.heap = NULL;
    svc.cap = 0;
  }
  pthread_mutex_unlock(&svc.lock);
  return NULL;
}

/* fork: the child has no service thread (and only the forking thread, so
 * no timers of its own pending): it starts afresh. */
static void fork_prepare(void) {
  pthread_mutex_lock(&svc.lock);
}

static void fork_parent(void) {
  pthread_mutex_unlock(&svc.lock);
}

static void fork_child(void) {
  svc.n = 0;
  svc.firing = NULL;
  svc.running = false;
  svc.joinable = false;
  pthread_mutex_unlock(&svc.lock);
}

static void init_once(void) {
  pthread_condattr_t a;
  pthread_condattr_init(&a);
  pthread_condattr_setclock(&a, CLOCK_MONOTONIC);
  pthread_cond_init(&svc.wake, &a);
  pthread_condattr_destroy(&a);
  pthread_atfork(fork_prepare, fork_parent, fork_child);
}

/* Under the lock: makes sure a thread serves the heap. */
static int ensure_thread(void) {
  if (svc.running || svc.quit) return 0;
  if (svc.joinable) { /* the last one left while idle: reap it */
    pthread_join(svc.thread, NULL);
    svc.joinable = false;
  }
  int r = iof__thread_create_quiet(&svc.thread, service_main, NULL);
  if (r != 0) return -EAGAIN;
  svc.running = true;
  svc.joinable = true;
  return 0;
}

__attribute__((destructor)) static void service_stop_at_exit(void) {
  pthread_mutex_lock(&svc.lock);
  bool join = svc.joinable;
  svc.quit = true;
  svc.joinable = false;
  if (join) pthread_cond_signal(&svc.wake);
  pthread_mutex_unlock(&svc.lock);
  if (join && !pthread_equal(svc.thread, pthread_self()))
    pthread_join(svc.thread, NULL);
}

static int service_arm(iof__timer *t) {
  pthread_once(&svc.once, init_once);
  pthread_mutex_lock(&svc.lock);
  if (svc.n == svc.cap) {
    size_t cap = svc.cap ? svc.cap * 2 : 64;
    iof__timer **h = realloc(svc.heap, cap * sizeof *h);
    if (!h) {
      pthread_mutex_unlock(&svc.lock);
      return -ENOMEM;
    }
    svc.heap = h;
    svc.cap = cap;
  }
  int r = ensure_thread();
  if (r < 0) {
    pthread_mutex_unlock(&svc.lock);
    return r;
  }
  put(svc.n++, t);
  sift_up(svc.n - 1);
  if (svc.heap[0] == t) pthread_cond_signal(&svc.wake);
  pthread_mutex_unlock(&svc.lock);
  return 0;
}

static void service_cancel(iof__timer *t) {
  pthread_mutex_lock(&svc.lock);
  if (t->slot) heap_remove(t);
  while (svc.firing == t) pthread_cond_wait(&svc.fired, &svc.lock);
  pthread_mutex_unlock(&svc.lock);
}

bool iof__timer_service_running(void) {
  pthread_mutex_lock(&svc.lock);
  bool r = svc.running;
  pthread_mutex_unlock(&svc.lock);
  return r;
}

/* ---- the choice ------------------------------------------------------- */

int iof__timer_arm(iof__timer *t, iof_executor_ref ex, int64_t deadline_ns,
                   void (*fire)(void *), void *arg) {
  t->fire = fire;
  t->arg = arg;
  t->deadline = deadline_ns;
  t->slot = 0;
  t->loop = NULL;
  iof_execution_context *ctx = ex.vt ? iof_executor_context(ex) : NULL;
  const iof__ctx_kind *kind = ctx ? ctx->kind : NULL;
  if (kind && kind->timer_arm && iof__thread_runs(ctx)) {
    int r = kind->timer_arm(ctx, t);
    if (r == 0) t->loop = ctx;
    return r;
  }
  return service_arm(t);
}

void iof__timer_cancel(iof__timer *t) {
  if (t->loop) {
    const iof__ctx_kind *kind = t->loop->kind;
    kind->timer_cancel(t->loop, t);
    t->loop = NULL;
    return;
  }
  service_cancel(t);
}
