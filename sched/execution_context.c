/* Execution contexts: services, shutdown/destroy order, frame allocator. */
#include "sched/sched_internal.h"

#include <errno.h>
#include <stdlib.h>

int iof_execution_context_init(iof_execution_context *ctx) {
  if (!ctx) return -EINVAL;
  if (pthread_mutex_init(&ctx->lock, NULL) != 0) return -ENOMEM;
  if (pthread_cond_init(&ctx->created, NULL) != 0) {
    pthread_mutex_destroy(&ctx->lock);
    return -ENOMEM;
  }
  ctx->services = NULL;
  ctx->kind = NULL;
  atomic_init(&ctx->state, 0);
  atomic_init(&ctx->frame_allocator, NULL);
  atomic_init(&ctx->away, 0);
  return 0;
}

bool iof_execution_context_stopping(const iof_execution_context *ctx) {
  return ctx && atomic_load_explicit(&ctx->state, memory_order_acquire) != 0;
}

typedef struct placeholder {
  iof_service svc;
  pthread_t creator;
} placeholder;

static bool creation_pending(iof_execution_context *ctx);

void iof_execution_context_shutdown(iof_execution_context *ctx) {
  if (!ctx) return;
  pthread_mutex_lock(&ctx->lock);
  int expect = 0;
  if (!atomic_compare_exchange_strong(&ctx->state, &expect, 1)) {
    pthread_mutex_unlock(&ctx->lock);
    return;
  }
  /* No creation can begin now (obtain checks the state under the lock);
   * wait for those under way, then the list is fixed for the walk. */
  while (creation_pending(ctx)) pthread_cond_wait(&ctx->created, &ctx->lock);
  iof_service *list = ctx->services;
  pthread_mutex_unlock(&ctx->lock);
  for (iof_service *s = list; s; s = s->next)
    if (s->key->shutdown) (s->key->shutdown)(s);
  /* Walk done (state 3): a destroy waits for it before it frees the
   * services, also when another thread started the shutdown. */
  pthread_mutex_lock(&ctx->lock);
  atomic_store(&ctx->state, 3);
  pthread_cond_broadcast(&ctx->created);
  pthread_mutex_unlock(&ctx->lock);
}

void iof_execution_context_destroy(iof_execution_context *ctx) {
  if (!ctx) return;
  iof_execution_context_shutdown(ctx);
  pthread_mutex_lock(&ctx->lock);
  while (atomic_load(&ctx->state) == 1)
    pthread_cond_wait(&ctx->created, &ctx->lock);
  pthread_mutex_unlock(&ctx->lock);
  atomic_store(&ctx->state, 2);
  while (ctx->services) {
    iof_service *s = ctx->services;
    ctx->services = s->next;
    if (s->key->destroy) s->key->destroy(s);
  }
  pthread_cond_destroy(&ctx->created);
  pthread_mutex_destroy(&ctx->lock);
}

static iof_service *find_locked(iof_execution_context *ctx,
                                const iof_service_key *key) {
  for (iof_service *s = ctx->services; s; s = s->next)
    if (s->key == key) return s;
  return NULL;
}

/* True while another thread runs a create (the caller holds the lock). A
 * create that itself shuts the context down is not waited for. */
static bool creation_pending(iof_execution_context *ctx) {
  for (iof_service *s = ctx->services; s; s = s->next)
    if (s->creating &&
        !pthread_equal(((placeholder *)s)->creator, pthread_self()))
      return true;
  return false;
}

/* A placeholder stands in the list while create runs without the lock, so
 * racing threads wait for the one creation instead of making their own. */

static iof_service *obtain(iof_execution_context *ctx,
                           const iof_service_key *key, bool must_be_new) {
  if (!ctx || !key || !key->create) {
    errno = EINVAL;
    return NULL;
  }
  pthread_mutex_lock(&ctx->lock);
  for (;;) {
    iof_service *s = find_locked(ctx, key);
    if (!s) break;
    if (must_be_new) {
      pthread_mutex_unlock(&ctx->lock);
      errno = EEXIST;
      return NULL;
    }
    if (!s->creating) {
      pthread_mutex_unlock(&ctx->lock);
      return s;
    }
    if (pthread_equal(((placeholder *)s)->creator, pthread_self())) {
      pthread_mutex_unlock(&ctx->lock);
      errno = EDEADLK;
      return NULL;
    }
    pthread_cond_wait(&ctx->created, &ctx->lock);
  }
  if (atomic_load(&ctx->state) != 0) {
    pthread_mutex_unlock(&ctx->lock);
    errno = ESHUTDOWN;
    return NULL;
  }
  placeholder ph = {{key, ctx->services, ctx, 1}, pthread_self()};
  ctx->services = &ph.svc;
  pthread_mutex_unlock(&ctx->lock);

  iof_service *made = key->create(ctx);

  pthread_mutex_lock(&ctx->lock);
  iof_service **pp = &ctx->services;
  while (*pp != &ph.svc) pp = &(*pp)->next;
  *pp = ph.svc.next;
  if (made) {
    /* Added (newest) when its create returns, as asio does: a service whose
     * create obtained other services is added after them, so it is shut
     * down and destroyed before the services it depends on. */
    made->key = key;
    made->ctx = ctx;
    made->creating = 0;
    made->next = ctx->services;
    ctx->services = made;
  }
  pthread_cond_broadcast(&ctx->created);
  pthread_mutex_unlock(&ctx->lock);
  if (!made) errno = ENOMEM;
  return made;
}

iof_service *iof_use_service(iof_execution_context *ctx,
                             const iof_service_key *key) {
  return obtain(ctx, key, false);
}

iof_service *iof_make_service(iof_execution_context *ctx,
                              const iof_service_key *key) {
  return obtain(ctx, key, true);
}

iof_service *iof_find_service(iof_execution_context *ctx,
                              const iof_service_key *key) {
  if (!ctx || !key) return NULL;
  pthread_mutex_lock(&ctx->lock);
  iof_service *s = find_locked(ctx, key);
  if (s && s->creating) s = NULL;
  pthread_mutex_unlock(&ctx->lock);
  return s;
}

bool iof_has_service(iof_execution_context *ctx, const iof_service_key *key) {
  return iof_find_service(ctx, key) != NULL;
}

iof_frame_allocator *iof_context_frame_allocator(iof_execution_context *ctx) {
  iof_frame_allocator *a = ctx ? atomic_load(&ctx->frame_allocator) : NULL;
  return a ? a : iof_default_frame_allocator();
}

int iof_context_set_frame_allocator(iof_execution_context *ctx,
                                    iof_frame_allocator *a) {
  /* Refused here rather than at every later launch on ctx. */
  if (!ctx || (a && (!a->vtbl || !a->vtbl->allocate || !a->vtbl->deallocate)))
    return -EINVAL;
  atomic_store(&ctx->frame_allocator, a);
  return 0;
}
