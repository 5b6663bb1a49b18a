/* The resolver service: one worker thread per io_context, started on first
 * use, running getaddrinfo for suspended fibers. A request lives on the
 * heap with two references (fiber and worker), so a fiber cancelled while
 * getaddrinfo runs can leave; whoever drops the last reference frees it. */
#include <iofiber/resolver.h>

#include "io/socket_internal.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

typedef struct request {
  struct request *next;
  char *host, *service;
  struct addrinfo hints;
  bool has_hints;
  struct addrinfo *res;
  int gai;
  int sys_errno;
  int refs;      /* under the service lock */
  iof_io_op *op; /* NULL once the fiber left */
  bool queued;
} request;

typedef struct resolver {
  iof_service base;
  pthread_mutex_t lock;
  pthread_cond_t cv;
  request *head, *tail;
  bool stop;
  bool started;
  pthread_t thread;
} resolver;

static void drop(request *r) {
  if (--r->refs) return;
  if (r->res) freeaddrinfo(r->res);
  free(r->host);
  free(r->service);
  free(r);
}

static void *worker(void *arg) {
  resolver *rs = arg;
  pthread_mutex_lock(&rs->lock);
  for (;;) {
    while (!rs->head && !rs->stop) pthread_cond_wait(&rs->cv, &rs->lock);
    if (rs->stop) break;
    request *r = rs->head;
    rs->head = r->next;
    if (!rs->head) rs->tail = NULL;
    r->queued = false;
    pthread_mutex_unlock(&rs->lock);
    struct addrinfo *res = NULL;
    errno = 0;
    int gai =
        getaddrinfo(r->host, r->service, r->has_hints ? &r->hints : NULL, &res);
    int e = errno;
    pthread_mutex_lock(&rs->lock);
    r->res = res;
    r->gai = gai;
    r->sys_errno = e;
    /* The fiber may have been cancelled: then the claim fails, the result
     * stays ours and drop() frees it. A result that comes in once the
     * service is shutting down is dropped: the wait ends -ECANCELED. */
    if (r->op) {
      iof__io_complete(r->op, rs->stop ? -ECANCELED : 0);
      r->op = NULL;
    }
    drop(r);
  }
  pthread_mutex_unlock(&rs->lock);
  return NULL;
}

static iof_service *create(iof_execution_context *ctx) {
  (void)ctx;
  resolver *rs = calloc(1, sizeof *rs);
  if (!rs) return NULL;
  pthread_mutex_init(&rs->lock, NULL);
  pthread_cond_init(&rs->cv, NULL);
  return &rs->base;
}

static void shutdown_rs(iof_service *svc) {
  resolver *rs = (resolver *)svc;
  pthread_mutex_lock(&rs->lock);
  rs->stop = true;
  pthread_cond_broadcast(&rs->cv);
  bool started = rs->started;
  pthread_mutex_unlock(&rs->lock);
  if (started) pthread_join(rs->thread, NULL);
  rs->started = false;
}

static void destroy_rs(iof_service *svc) {
  resolver *rs = (resolver *)svc;
  shutdown_rs(svc);
  pthread_cond_destroy(&rs->cv);
  pthread_mutex_destroy(&rs->lock);
  free(rs);
}

static const iof_service_key resolver_key = {"iofiber.resolver", create,
                                             shutdown_rs, destroy_rs};

typedef struct resolve_wait {
  iof_io_op op;
  resolver *rs;
  request *r;
} resolve_wait;

static int arm(iof_io_op *op) {
  resolve_wait *rw = (resolve_wait *)op;
  resolver *rs = rw->rs;
  request *r = rw->r;
  pthread_mutex_lock(&rs->lock);
  if (rs->stop) {
    pthread_mutex_unlock(&rs->lock);
    return -ECANCELED;
  }
  if (!rs->started) {
    if (pthread_create(&rs->thread, NULL, worker, rs) != 0) {
      pthread_mutex_unlock(&rs->lock);
      return -EAGAIN;
    }
    rs->started = true;
  }
  r->op = op;
  r->refs++; /* the worker's */
  r->queued = true;
  if (rs->tail)
    rs->tail->next = r;
  else
    rs->head = r;
  rs->tail = r;
  pthread_cond_signal(&rs->cv);
  pthread_mutex_unlock(&rs->lock);
  return 0;
}

static void disarm(iof_io_op *op) {
  resolve_wait *rw = (resolve_wait *)op;
  resolver *rs = rw->rs;
  request *r = rw->r;
  pthread_mutex_lock(&rs->lock);
  r->op = NULL;
  if (r->queued) { /* never started: take it out */
    request **pp = &rs->head, *prev = NULL;
    while (*pp != r) prev = *pp, pp = &(*pp)->next;
    *pp = r->next;
    if (rs->tail == r) rs->tail = prev;
    r->queued = false;
    drop(r);
  }
  pthread_mutex_unlock(&rs->lock);
}

int iof__gai_errno(int gai) {
  switch (gai) {
  case EAI_NONAME:
#ifdef EAI_NODATA
  case EAI_NODATA:
#endif
  case EAI_FAIL:
    return -EHOSTUNREACH;
  case EAI_AGAIN:
    return -EAGAIN;
  case EAI_MEMORY:
    return -ENOMEM;
  case EAI_SERVICE:
  case EAI_BADFLAGS:
  case EAI_SOCKTYPE:
    return -EINVAL;
  case EAI_FAMILY:
    return -EAFNOSUPPORT;
  default:
    return -EIO;
  }
}

int iof_resolve(iof_io_context *io, const char *host, const char *service,
                const struct addrinfo *hints, struct addrinfo **res) {
  if (!io || !res || (!host && !service)) return -EINVAL;
  *res = NULL;
  iof_fiber *self = iof_fiber_current();
  if (!self || !self->env) return -EPERM;
  if (iof_stop_requested(self->env->stop_token)) return -ECANCELED;
  resolver *rs = (resolver *)iof_use_service(&io->ctx, &resolver_key);
  if (!rs) return errno == ESHUTDOWN ? -ECANCELED : -ENOMEM;
  request *r = calloc(1, sizeof *r);
  if (!r) return -ENOMEM;
  r->refs = 1;
  r->host = host ? strdup(host) : NULL;
  r->service = service ? strdup(service) : NULL;
  if ((host && !r->host) || (service && !r->service)) {
    drop(r);
    return -ENOMEM;
  }
  if (hints) {
    r->hints = *hints;
    r->hints.ai_addr = NULL;
    r->hints.ai_canonname = NULL;
    r->hints.ai_next = NULL;
    r->has_hints = true;
  }
  resolve_wait rw;
  iof__io_op_init(&rw.op, io, arm, disarm, NULL);
  rw.rs = rs;
  rw.r = r;
  int ret = iof__io_wait(&rw.op, -1);
  pthread_mutex_lock(&rs->lock);
  if (ret == 0) {
    if (r->gai == 0) {
      *res = r->res;
      r->res = NULL;
    } else {
      ret = r->gai == EAI_SYSTEM && r->sys_errno ? -r->sys_errno
                                                 : iof__gai_errno(r->gai);
    }
  }
  drop(r);
  pthread_mutex_unlock(&rs->lock);
  return ret;
}
