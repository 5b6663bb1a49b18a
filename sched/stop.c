/* Stop tokens. One mutex per state guards the callback list; a request
 * runs callbacks one at a time without the lock, so a callback may
 * register, unregister (itself too) or request again without deadlock. */
#include "sched/sched_internal.h"

#include <errno.h>
#include <stdlib.h>

struct iof_stop_state {
  atomic_size_t refs;
  atomic_size_t sources;
  atomic_bool requested;
  pthread_mutex_t lock;
  pthread_cond_t done; /* a running callback finished */
  iof_stop_callback *head;
  iof_stop_callback *running;
  pthread_t requester;
};

/* A record's `linked` is a tag: 0 for none, else a hash of the record and
 * its state plus the phase. A record on the caller's stack may hold any
 * bytes before its first registration; only a matching tag (a 1 in 2^30
 * chance for garbage) lets register trust cb->state enough to look at it. */
enum { TAG_LINKED = 1, TAG_FIRED = 2 }; /* in s's list / ran, ref still held */

static int tag(const iof_stop_callback *cb, const iof_stop_state *s,
               int phase) {
  uint64_t x = ((uint64_t)(uintptr_t)cb * 0x9E3779B97F4A7C15u) ^
               ((uint64_t)(uintptr_t)s * 0xC2B2AE3D27D4EB4Fu);
  x ^= x >> 29;
  return (int)((uint32_t)(x >> 32) & 0x7ffffffcu) | phase;
}

static bool in_list(const iof_stop_callback *cb) {
  return cb->linked == tag(cb, cb->state, TAG_LINKED);
}

static void state_release(iof_stop_state *s) {
  if (atomic_fetch_sub_explicit(&s->refs, 1, memory_order_acq_rel) != 1) return;
  pthread_cond_destroy(&s->done);
  pthread_mutex_destroy(&s->lock);
  free(s);
}

int iof_stop_source_init(iof_stop_source *src) {
  if (!src) return -EINVAL;
  iof_stop_state *s = calloc(1, sizeof *s);
  if (!s) return -ENOMEM;
  atomic_init(&s->refs, 1);
  atomic_init(&s->sources, 1);
  pthread_mutex_init(&s->lock, NULL);
  pthread_cond_init(&s->done, NULL);
  src->state = s;
  return 0;
}

void iof_stop_source_destroy(iof_stop_source *src) {
  if (!src || !src->state) return;
  iof_stop_state *s = src->state;
  src->state = NULL;
  atomic_fetch_sub(&s->sources, 1);
  state_release(s);
}

iof_stop_token iof_stop_source_token(const iof_stop_source *src) {
  iof_stop_token t = {src ? src->state : NULL};
  return t;
}

bool iof_stop_source_request(iof_stop_source *src) {
  if (!src || !src->state) return false;
  iof_stop_state *s = src->state;
  pthread_mutex_lock(&s->lock);
  if (atomic_load(&s->requested)) {
    pthread_mutex_unlock(&s->lock);
    return false;
  }
  atomic_store(&s->requested, true);
  s->requester = pthread_self();
  while (s->head) {
    iof_stop_callback *cb = s->head;
    s->head = cb->next;
    if (s->head) s->head->prev = NULL;
    cb->linked = tag(cb, s, TAG_FIRED);
    s->running = cb;
    void (*fn)(void *) = cb->fn;
    void *arg = cb->arg;
    pthread_mutex_unlock(&s->lock);
    fn(arg); /* cb may be gone after this (it may unregister itself) */
    pthread_mutex_lock(&s->lock);
    s->running = NULL;
    pthread_cond_broadcast(&s->done);
  }
  pthread_mutex_unlock(&s->lock);
  return true;
}

bool iof_stop_requested(iof_stop_token tok) {
  return tok.state &&
         atomic_load_explicit(&tok.state->requested, memory_order_acquire);
}

bool iof_stop_possible(iof_stop_token tok) {
  return tok.state && (atomic_load(&tok.state->requested) ||
                       atomic_load(&tok.state->sources) > 0);
}

iof_stop_token iof_stop_token_retain(iof_stop_token tok) {
  if (tok.state)
    atomic_fetch_add_explicit(&tok.state->refs, 1, memory_order_relaxed);
  return tok;
}

void iof_stop_token_release(iof_stop_token tok) {
  if (tok.state) state_release(tok.state);
}

/* Whether cb is in s's list: only asked when cb looks registered on s
 * (a fresh or unregistered record never does), so the walk is off the
 * normal path. */
static bool linked_in(iof_stop_state *s, const iof_stop_callback *cb) {
  pthread_mutex_lock(&s->lock);
  const iof_stop_callback *c = s->head;
  while (c && c != cb) c = c->next;
  pthread_mutex_unlock(&s->lock);
  return c != NULL;
}

int iof_stop_callback_register(iof_stop_callback *cb, iof_stop_token tok,
                               void (*fn)(void *arg), void *arg) {
  if (!cb || !fn) return -EINVAL;
  iof_stop_state *old = cb->state;
  if (old && in_list(cb) && linked_in(old, cb))
    return -EBUSY; /* relinking would corrupt (or loop) the old list */
  /* Its callback ran but it was never unregistered: it still holds the
   * state, which a new registration would drop. */
  if (old && cb->linked == tag(cb, old, TAG_FIRED))
    iof_stop_callback_unregister(cb);
  return iof__stop_callback_register(cb, tok, fn, arg);
}

/* The runtime's own records are fresh (on the waiter's stack): no check of
 * what they held before, which would read uninitialized memory. */
int iof__stop_callback_register(iof_stop_callback *cb, iof_stop_token tok,
                                void (*fn)(void *arg), void *arg) {
  cb->fn = fn;
  cb->arg = arg;
  cb->prev = cb->next = NULL;
  cb->linked = 0;
  cb->state = tok.state;
  if (!tok.state) return 0;
  iof_stop_state *s = tok.state;
  pthread_mutex_lock(&s->lock);
  if (atomic_load(&s->requested)) {
    pthread_mutex_unlock(&s->lock);
    cb->state = NULL;
    fn(arg);
    return 1;
  }
  cb->next = s->head;
  if (s->head) s->head->prev = cb;
  s->head = cb;
  cb->linked = tag(cb, s, TAG_LINKED);
  /* A registration holds the state alive (as std::stop_callback does), so
   * unregistering after the source is gone is safe. */
  atomic_fetch_add_explicit(&s->refs, 1, memory_order_relaxed);
  pthread_mutex_unlock(&s->lock);
  return 0;
}

void iof_stop_callback_unregister(iof_stop_callback *cb) {
  if (!cb || !cb->state) return;
  iof_stop_state *s = cb->state;
  pthread_mutex_lock(&s->lock);
  if (in_list(cb)) {
    if (cb->prev)
      cb->prev->next = cb->next;
    else
      s->head = cb->next;
    if (cb->next) cb->next->prev = cb->prev;
    cb->linked = 0;
  } else if (s->running == cb && !pthread_equal(s->requester, pthread_self())) {
    while (s->running == cb) pthread_cond_wait(&s->done, &s->lock);
  }
  cb->state = NULL;
  cb->linked = 0;
  pthread_mutex_unlock(&s->lock);
  state_release(s);
}
