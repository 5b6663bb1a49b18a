/* The default timer provider of the sync primitives' timed waits: one
 * process-wide thread sleeping on a condition variable until the earliest
 * deadline. It can be armed and cancelled from any thread, which a libev
 * timer cannot, and cancel can wait for a fire in progress. Timed waits
 * are rare next to plain ones, so a sorted list is enough. */
#include "sched/timer_hook.h"

#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <time.h>

typedef struct node {
  struct node *next, *prev;
  int64_t deadline;
  bool queued;
} node;

_Static_assert(sizeof(node) <= IOF__TIMER_IMPL, "timer node fits in impl");

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t wake;  /* new earliest deadline */
static pthread_cond_t fired; /* a fire finished */
static node *head;
static iof__timer *firing;
static pthread_once_t once = PTHREAD_ONCE_INIT;
static bool running;

static node *node_of(iof__timer *t) {
  return (node *)(void *)t->impl;
}

static iof__timer *timer_of(node *n) {
  return (iof__timer *)(void *)((char *)n - offsetof(iof__timer, impl));
}

static void *timer_main(void *arg) {
  (void)arg;
  pthread_mutex_lock(&lock);
  for (;;) {
    if (!head) {
      pthread_cond_wait(&wake, &lock);
      continue;
    }
    int64_t now = iof__now_ns();
    if (head->deadline > now) {
      struct timespec ts = {(time_t)(head->deadline / 1000000000),
                            (long)(head->deadline % 1000000000)};
      pthread_cond_timedwait(&wake, &lock, &ts);
      continue;
    }
    node *n = head;
    head = n->next;
    if (head) head->prev = NULL;
    n->queued = false;
    iof__timer *t = timer_of(n);
    firing = t;
    pthread_mutex_unlock(&lock);
    t->fire(t->arg);
    pthread_mutex_lock(&lock);
    firing = NULL;
    pthread_cond_broadcast(&fired);
  }
  return NULL;
}

static void start(void) {
  pthread_condattr_t a;
  pthread_condattr_init(&a);
  pthread_condattr_setclock(&a, CLOCK_MONOTONIC);
  pthread_cond_init(&wake, &a);
  pthread_condattr_destroy(&a);
  pthread_cond_init(&fired, NULL);
  pthread_t th;
  if (pthread_create(&th, NULL, timer_main, NULL) == 0) {
    pthread_detach(th);
    running = true;
  }
}

static int arm(iof__timer *t, const iof_env *env, int64_t deadline_ns) {
  (void)env;
  pthread_once(&once, start);
  if (!running) return -EAGAIN;
  node *n = node_of(t);
  n->deadline = deadline_ns;
  pthread_mutex_lock(&lock);
  node **pp = &head, *prev = NULL;
  while (*pp && (*pp)->deadline <= deadline_ns) prev = *pp, pp = &(*pp)->next;
  n->next = *pp;
  n->prev = prev;
  if (*pp) (*pp)->prev = n;
  *pp = n;
  n->queued = true;
  if (head == n) pthread_cond_signal(&wake);
  pthread_mutex_unlock(&lock);
  return 0;
}

static void cancel(iof__timer *t) {
  node *n = node_of(t);
  pthread_mutex_lock(&lock);
  if (n->queued) {
    if (n->prev)
      n->prev->next = n->next;
    else
      head = n->next;
    if (n->next) n->next->prev = n->prev;
    n->queued = false;
  }
  while (firing == t) pthread_cond_wait(&fired, &lock);
  pthread_mutex_unlock(&lock);
}

const iof__timer_provider iof__timer_thread_provider = {arm, cancel};
