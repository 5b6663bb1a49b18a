/* The resolver service: worker threads per io_context, started on demand
 * (one more whenever a request finds none idle, up to MAX_WORKERS), running
 * getaddrinfo (or a job, iof__resolver_run) for suspended fibers. A worker
 * idle for iof__resolver_idle_ms leaves, except the last one, so a burst of
 * lookups does not leave its threads behind for good. A request
 * lives on the heap with two references (fiber and worker), so a fiber
 * cancelled while getaddrinfo runs can leave; whoever drops the last reference
 * frees it. */
#include <iofiber/error.h>
#include <iofiber/resolver.h>

#include "io/socket_internal.h"

#include "fiber/libc.h"
#include "io/resolver_internal.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

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
  void (*fn)(void *); /* a job instead of getaddrinfo */
  void *arg;          /* the job's; released by drop unless taken */
  void (*release)(void *);
} request;

/* Lookups block for as long as DNS takes: parallel requests get parallel
 * threads, up to this many per io_context. */
#define MAX_WORKERS 64

int iof__resolver_max_threads = MAX_WORKERS;

/* A worker waiting this long for a request leaves (the last one stays):
 * long enough for a steady stream of lookups to keep its threads. */
#define IDLE_MS 2000

int iof__resolver_idle_ms = IDLE_MS;

typedef struct resolver {
  iof_service base;
  pthread_mutex_t lock;
  pthread_cond_t cv;
  request *head, *tail;
  bool stop;
  int started; /* threads[0..started): running, joined at shutdown */
  int idle;    /* workers waiting for a request */
  pthread_t threads[MAX_WORKERS];
  bool monotonic; /* cv waits on CLOCK_MONOTONIC */
} resolver;

static void drop(request *r) {
  if (--r->refs) return;
  if (r->res) freeaddrinfo(r->res);
  if (r->arg && r->release) r->release(r->arg);
  free(r->host);
  free(r->service);
  free(r);
}

/* The deadline of an idle wait that started now, on the cv's clock. */
static struct timespec idle_deadline(const resolver *rs) {
  struct timespec ts;
  clock_gettime(rs->monotonic ? CLOCK_MONOTONIC : CLOCK_REALTIME, &ts);
  int ms = iof__resolver_idle_ms > 0 ? iof__resolver_idle_ms : IDLE_MS;
  ts.tv_sec += ms / 1000;
  ts.tv_nsec += (long)(ms % 1000) * 1000000L;
  if (ts.tv_nsec >= 1000000000L) {
    ts.tv_sec++;
    ts.tv_nsec -= 1000000000L;
  }
  return ts;
}

/* Under the lock: a worker whose idle wait timed out with nothing queued
 * takes itself out of threads[] (the last one stays) and detaches; true if
 * it did, and must then unlock and return without touching rs again. */
static bool retire(resolver *rs) {
  if (rs->head || rs->stop || rs->started <= 1) return false;
  pthread_t self = pthread_self();
  for (int i = 0; i < rs->started; i++) {
    if (!pthread_equal(rs->threads[i], self)) continue;
    rs->threads[i] = rs->threads[--rs->started];
    pthread_detach(self);
    return true;
  }
  return false; /* not found: cannot happen; stay */
}

static void *worker(void *arg) {
  resolver *rs = arg;
  pthread_mutex_lock(&rs->lock);
  for (;;) {
    rs->idle++;
    bool retired = false;
    while (!rs->head && !rs->stop) {
      if (rs->started <= 1) { /* the last one: no reason to wake */
        pthread_cond_wait(&rs->cv, &rs->lock);
        continue;
      }
      struct timespec until = idle_deadline(rs);
      if (pthread_cond_timedwait(&rs->cv, &rs->lock, &until) == ETIMEDOUT &&
          (retired = retire(rs)))
        break;
    }
    rs->idle--;
    if (retired) {
      /* Only the unlock touches rs from here: destroy_rs may free it as
       * soon as it can take the lock. */
      pthread_mutex_unlock(&rs->lock);
      return NULL;
    }
    if (rs->stop) break;
    request *r = rs->head;
    rs->head = r->next;
    if (!rs->head) rs->tail = NULL;
    r->queued = false;
    pthread_mutex_unlock(&rs->lock);
    struct addrinfo *res = NULL;
    errno = 0;
    int gai = 0;
    if (r->fn)
      r->fn(r->arg);
    else
      gai = getaddrinfo(r->host, r->service, r->has_hints ? &r->hints : NULL,
                        &res);
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
  pthread_condattr_t ca;
  if (pthread_condattr_init(&ca) == 0) {
    rs->monotonic = pthread_condattr_setclock(&ca, CLOCK_MONOTONIC) == 0 &&
                    pthread_cond_init(&rs->cv, &ca) == 0;
    pthread_condattr_destroy(&ca);
  }
  if (!rs->monotonic) pthread_cond_init(&rs->cv, NULL);
  return &rs->base;
}

static void shutdown_rs(iof_service *svc) {
  resolver *rs = (resolver *)svc;
  pthread_mutex_lock(&rs->lock);
  rs->stop = true;
  pthread_cond_broadcast(&rs->cv);
  int started = rs->started;
  pthread_mutex_unlock(&rs->lock);
  for (int i = 0; i < started; i++) pthread_join(rs->threads[i], NULL);
  rs->started = 0;
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
  /* Requests queued but not yet picked up count against the idle ones. */
  int queued = 0;
  for (request *q = rs->head; q; q = q->next) queued++;
  int max = iof__resolver_max_threads;
  if (max < 1 || max > MAX_WORKERS) max = MAX_WORKERS;
  if (rs->idle <= queued && rs->started < max) {
    if (iof__thread_create_quiet(&rs->threads[rs->started], worker, rs) == 0)
      rs->started++;
    else if (!rs->started) {
      pthread_mutex_unlock(&rs->lock);
      return -EAGAIN;
    }
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

int iof__port_check(const char *service) {
  if (!service) return 0;
  const char *p = service;
  while (*p == ' ' || *p == '\t') p++;
  /* getaddrinfo reads any number (with sign) as a port and keeps its low
   * 16 bits: "98304" would bind 32768. A service that starts like a number
   * must be a plain decimal 0-65535; names ("http") are left to it. */
  if (!(*p >= '0' && *p <= '9') && *p != '-' && *p != '+') return 0;
  if (p != service) return -EINVAL;
  unsigned long v = 0;
  for (; *p; p++) {
    if (*p < '0' || *p > '9') return -EINVAL;
    v = v * 10 + (unsigned long)(*p - '0');
    if (v > 65535) return -EINVAL;
  }
  return 0;
}

int iof_resolve(iof_io_context *io, const char *host, const char *service,
                const struct addrinfo *hints, struct addrinfo **res) {
  return iof__resolve_until(io, host, service, hints, res, 0);
}

int iof__resolve_until(iof_io_context *io, const char *host,
                       const char *service, const struct addrinfo *hints,
                       struct addrinfo **res, int64_t deadline_ns) {
  if (!io || !res || (!host && !service)) return -EINVAL;
  *res = NULL;
  if (iof__port_check(service) < 0) return -EINVAL;
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
  int64_t deadline = -1;
  if (deadline_ns > 0) {
    if (deadline_ns <= iof__now_ns()) {
      drop(r);
      return -ETIMEDOUT;
    }
    deadline = deadline_ns;
  }
  resolve_wait rw;
  iof__io_op_init(&rw.op, io, arm, disarm, NULL);
  rw.rs = rs;
  rw.r = r;
  int ret = iof__io_wait(&rw.op, deadline);
  pthread_mutex_lock(&rs->lock);
  if (ret == 0) {
    if (r->gai == 0) {
      *res = r->res;
      r->res = NULL;
    } else {
      ret = iof_gai_error(r->gai, r->sys_errno);
    }
  }
  drop(r);
  pthread_mutex_unlock(&rs->lock);
  return ret;
}

int iof__resolver_run(iof_io_context *io, void (*fn)(void *), void *arg,
                      void (*release)(void *)) {
  if (!fn) return -EINVAL;
  int early = 0;
  iof_fiber *self = iof_fiber_current();
  resolver *rs = NULL;
  request *r = NULL;
  if (!io)
    early = -EINVAL;
  else if (!self || !self->env)
    early = -EPERM;
  else if (iof_stop_requested(self->env->stop_token))
    early = -ECANCELED;
  else if (!(rs = (resolver *)iof_use_service(&io->ctx, &resolver_key)))
    early = errno == ESHUTDOWN ? -ECANCELED : -ENOMEM;
  else if (!(r = calloc(1, sizeof *r)))
    early = -ENOMEM;
  if (early) {
    if (release) release(arg);
    return early;
  }
  r->refs = 1;
  r->fn = fn;
  r->arg = arg;
  r->release = release;
  resolve_wait rw;
  iof__io_op_init(&rw.op, io, arm, disarm, NULL);
  rw.rs = rs;
  rw.r = r;
  int ret = iof__io_wait(&rw.op, -1);
  pthread_mutex_lock(&rs->lock);
  if (ret == 0) r->arg = NULL; /* ran: the caller keeps it */
  drop(r);
  pthread_mutex_unlock(&rs->lock);
  return ret;
}
