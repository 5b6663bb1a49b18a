/* Name resolution in fibers: the lookup runs as a job on the resolver
 * threads of the fiber's io_context (io/resolver.c); the fiber waits. A
 * job owns copies of its inputs and its own result buffers, so a fiber
 * that leaves early (stop token) leaves nothing dangling: the resolver
 * frees the job when the lookup ends. */
#include <iofiber/compat_io.h>

#include "compat/fd_table.h"
#include "io/resolver_internal.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* ---- getaddrinfo -----------------------------------------------------------
 */

typedef struct gai_job {
  const char *host, *service; /* point into strs */
  struct addrinfo hints;
  bool has_hints;
  struct addrinfo *res;
  int gai, err;
  char strs[];
} gai_job;

static void gai_run(void *arg) {
  gai_job *j = arg;
  errno = 0;
  j->gai = iof__libc.getaddrinfo(j->host, j->service,
                                 j->has_hints ? &j->hints : NULL, &j->res);
  j->err = errno;
}

static void gai_release(void *arg) {
  gai_job *j = arg;
  if (j->res) iof__libc.freeaddrinfo(j->res);
  free(j);
}

/* A job failure as getaddrinfo's answer. */
static int gai_fail(int r) {
  if (r == -ENOMEM) return EAI_MEMORY;
  if (r == -EAGAIN) return EAI_AGAIN;
  errno = -r;
  return EAI_SYSTEM;
}

/* Whether libc answers without any lookup: a numeric host (or none, or
 * AI_NUMERICHOST) and a numeric service (or none, or AI_NUMERICSERV). A
 * trip to the resolver's thread costs ~25 us; parsing costs ~0.1. */
static bool answered_locally(const char *host, const char *service,
                             const struct addrinfo *hints) {
  int fl = hints ? hints->ai_flags : 0;
  if (service && !(fl & AI_NUMERICSERV)) {
    if (!*service) return false;
    for (const char *c = service; *c; c++)
      if (*c < '0' || *c > '9') return false;
  }
  if (!host || (fl & AI_NUMERICHOST)) return true;
  unsigned char a[sizeof(struct in6_addr)];
  return inet_pton(AF_INET, host, a) == 1 || inet_pton(AF_INET6, host, a) == 1;
}

int iof_compat_getaddrinfo(const char *host, const char *service,
                           const struct addrinfo *hints,
                           struct addrinfo **res) {
  iof_fiber *f = iof__compat_fiber();
  if (!f) return iof__libc.getaddrinfo(host, service, hints, res);
  if (answered_locally(host, service, hints)) {
    int saved = errno;
    int gai = iof__libc.getaddrinfo(host, service, hints, res);
    if (gai != EAI_SYSTEM) errno = saved;
    return gai;
  }
  size_t hl = host ? strlen(host) + 1 : 0,
         sl = service ? strlen(service) + 1 : 0;
  gai_job *j = calloc(1, sizeof *j + hl + sl);
  if (!j) return EAI_MEMORY;
  if (host) j->host = memcpy(j->strs, host, hl);
  if (service) j->service = memcpy(j->strs + hl, service, sl);
  if (hints) {
    j->hints = *hints;
    j->hints.ai_addr = NULL;
    j->hints.ai_canonname = NULL;
    j->hints.ai_next = NULL;
    j->has_hints = true;
  }
  int saved = errno;
  int r = iof__resolver_run(iof__compat_io(f), gai_run, j, gai_release);
  if (r < 0) return gai_fail(r); /* j is the resolver's to free */
  int gai = j->gai;
  if (gai == 0) {
    *res = j->res;
    j->res = NULL;
    errno = saved;
  } else {
    errno = gai == EAI_SYSTEM ? j->err : saved;
  }
  gai_release(j);
  return gai;
}

void iof_compat_freeaddrinfo(struct addrinfo *res) {
  iof__libc.freeaddrinfo(res);
}

/* ---- gethostbyname(_r) -----------------------------------------------------
 */

/* What a hostent lookup asks for: a name (gethostbyname) or an address
 * of a family (gethostbyaddr). */
typedef struct hb_key {
  const void *p;
  size_t n; /* bytes at p: the name with its NUL, or the address */
  int type; /* the address's family; -1: p is a name */
} hb_key;

typedef struct hb_job {
  void *key; /* a copy of the key's bytes, in mem */
  socklen_t klen;
  int type;
  struct hostent he, *result;
  int h_err, rc, err; /* err: errno the call left on the resolver, or 0 */
  char *buf;          /* inside mem, aligned like the caller's buffer */
  size_t len;
  char mem[];
} hb_job;

static void hb_run(void *arg) {
  hb_job *j = arg;
  errno = 0;
  if (j->type < 0)
    j->rc = iof__libc.gethostbyname_r(j->key, &j->he, j->buf, j->len,
                                      &j->result, &j->h_err);
  else
    j->rc = iof__libc.gethostbyaddr_r(j->key, j->klen, j->type, &j->he, j->buf,
                                      j->len, &j->result, &j->h_err);
  j->err = errno;
}

/* Frees a job with nothing of its own to release (hostent, nameinfo). */
static void hb_release(void *arg) {
  free(arg);
}

/* Runs the lookup on the resolver with a private buffer of len bytes
 * placed at the same alignment as `like`. NULL with *rc an error number
 * when the job could not run. */
#define HB_BUF_MAX (1u << 20)

static hb_job *hb_lookup(const hb_key *k, size_t len, const void *like,
                         int *rc) {
  /* glibc fills the buffer from its start, and no answer needs more than
   * this: a larger one (however large) is used up to here. */
  if (len > HB_BUF_MAX) len = HB_BUF_MAX;
  hb_job *j = malloc(sizeof *j + k->n + len + 16);
  if (!j) {
    *rc = ENOMEM;
    return NULL;
  }
  memset(j, 0, sizeof *j);
  j->key = memcpy(j->mem, k->p, k->n);
  j->klen = (socklen_t)k->n;
  j->type = k->type;
  /* glibc pads its pointer arrays by the buffer's address: keep the same
   * offset modulo 16 so that the copy stays aligned. */
  uintptr_t base = (uintptr_t)(j->mem + k->n);
  uintptr_t want = (uintptr_t)like & 15;
  j->buf = (char *)(base + ((want - base) & 15));
  j->len = len;
  int r = iof__resolver_run(iof__compat_io(iof__compat_fiber()), hb_run, j,
                            hb_release);
  if (r < 0) { /* j is the resolver's to free */
    *rc = -r;
    return NULL;
  }
  return j;
}

static char *rebase(char *p, const hb_job *j, char *to) {
  if (p >= j->buf && p < j->buf + j->len) return to + (p - j->buf);
  return p;
}

/* One more byte range of the result inside the job's buffer. */
static void extent(const hb_job *j, const void *p, size_t n, size_t *end) {
  const char *c = p;
  if (c >= j->buf && c < j->buf + j->len && (size_t)(c - j->buf) + n > *end)
    *end = (size_t)(c - j->buf) + n;
}

/* The bytes of the job's buffer glibc used: only they are copied, so a
 * caller whose buflen says more than its buffer holds (glibc never
 * notices) is not written past what glibc itself would write. */
static size_t used_bytes(const hb_job *j) {
  const struct hostent *h = &j->he;
  size_t end = 0;
  if (h->h_name) extent(j, h->h_name, strlen(h->h_name) + 1, &end);
  size_t n = 0;
  if (h->h_aliases) {
    for (; h->h_aliases[n]; n++)
      extent(j, h->h_aliases[n], strlen(h->h_aliases[n]) + 1, &end);
    extent(j, h->h_aliases, (n + 1) * sizeof(char *), &end);
  }
  if (h->h_addr_list) {
    for (n = 0; h->h_addr_list[n]; n++)
      extent(j, h->h_addr_list[n], (size_t)h->h_length, &end);
    extent(j, h->h_addr_list, (n + 1) * sizeof(char *), &end);
  }
  return end;
}

/* Moves a successful result into the caller's hostent and buffer. */
static void hb_copy(const hb_job *j, struct hostent *ret, char *buf) {
  memcpy(buf, j->buf, used_bytes(j));
  *ret = j->he;
  ret->h_name = rebase(j->he.h_name, j, buf);
  ret->h_aliases = (char **)rebase((char *)j->he.h_aliases, j, buf);
  ret->h_addr_list = (char **)rebase((char *)j->he.h_addr_list, j, buf);
  if (ret->h_aliases != j->he.h_aliases)
    for (char **a = ret->h_aliases; *a; a++) *a = rebase(*a, j, buf);
  if (ret->h_addr_list != j->he.h_addr_list)
    for (char **a = ret->h_addr_list; *a; a++) *a = rebase(*a, j, buf);
}

/* gethostbyname_r and gethostbyaddr_r in a fiber. */
static int hb_lookup_r(const hb_key *k, struct hostent *ret, char *buf,
                       size_t buflen, struct hostent **result, int *h_errnop) {
  int saved = errno, rc = 0;
  hb_job *j = hb_lookup(k, buflen, buf, &rc);
  if (!j) {
    *result = NULL;
    *h_errnop = rc == ECANCELED ? TRY_AGAIN : NETDB_INTERNAL;
    return rc;
  }
  rc = j->rc;
  *h_errnop = j->h_err;
  *result = NULL;
  if (rc == 0 && j->result) {
    hb_copy(j, ret, buf);
    *result = ret;
  }
  /* As the plain call: errno is what glibc set (ERANGE for a short
   * buffer), else the caller's. */
  int err = j->err ? j->err : saved;
  free(j);
  errno = err;
  return rc;
}

/* glibc dereferences every pointer of these calls unchecked: a NULL is
 * EINVAL here, in fibers or not. */
static int r_args_bad(const void *key, const struct hostent *ret,
                      const char *buf, struct hostent **result, int *h_errnop) {
  if (key && ret && buf && result && h_errnop) return 0;
  if (result) *result = NULL;
  if (h_errnop) *h_errnop = NETDB_INTERNAL;
  errno = EINVAL;
  return EINVAL;
}

static struct hostent *null_key(void) {
  h_errno = NETDB_INTERNAL;
  errno = EINVAL;
  return NULL;
}

int iof_compat_gethostbyname_r(const char *name, struct hostent *ret, char *buf,
                               size_t buflen, struct hostent **result,
                               int *h_errnop) {
  if (r_args_bad(name, ret, buf, result, h_errnop)) return EINVAL;
  if (!iof__compat_fiber())
    return iof__libc.gethostbyname_r(name, ret, buf, buflen, result, h_errnop);
  hb_key k = {name, strlen(name) + 1, -1};
  return hb_lookup_r(&k, ret, buf, buflen, result, h_errnop);
}

/* Whether an address lookup may need the network: a valid length for an
 * IPv4 or IPv6 address. Anything else fails at once in libc. */
static bool addr_lookup(socklen_t len, int type) {
  return (type == AF_INET && len == sizeof(struct in_addr)) ||
         (type == AF_INET6 && len == sizeof(struct in6_addr));
}

int iof_compat_gethostbyaddr_r(const void *addr, socklen_t len, int type,
                               struct hostent *ret, char *buf, size_t buflen,
                               struct hostent **result, int *h_errnop) {
  if (r_args_bad(addr, ret, buf, result, h_errnop)) return EINVAL;
  if (!iof__compat_fiber() || !addr_lookup(len, type))
    return iof__libc.gethostbyaddr_r(addr, len, type, ret, buf, buflen, result,
                                     h_errnop);
  hb_key k = {addr, len, type};
  return hb_lookup_r(&k, ret, buf, buflen, result, h_errnop);
}

/* gethostbyname's result: one per thread, read by the fiber before it
 * next suspends (glibc's own is one per process). The buffer grows on
 * ERANGE, stays for the thread's life and is freed at its exit. */
typedef struct hb_static {
  struct hostent he;
  char *buf;
  size_t len;
} hb_static;

static __thread hb_static tls_hb;

/* The calling thread's tls_hb and h_errno, computed anew at each call: a
 * fiber may resume on another thread after a lookup, and the compiler
 * would reuse a thread-local address (or __h_errno_location's, declared
 * const) computed before the wait. The volatile asm keeps the compiler
 * from finding them const (GCC's and clang's attributes for that differ). */
static __attribute__((noinline)) hb_static *hb_here(void) {
  hb_static *p = &tls_hb;
  __asm__ volatile("" : "+r"(p));
  return p;
}

static __attribute__((noinline)) void set_h_errno(int v) {
  __asm__ volatile("" : : : "memory");
  h_errno = v;
}

static pthread_key_t hb_buf_key;
static pthread_once_t hb_once = PTHREAD_ONCE_INIT;
static bool hb_key_ok;

static void hb_free(void *buf) {
  free(buf);
}

static void hb_key_make(void) {
  hb_key_ok = iof__libc.pthread_key_create(&hb_buf_key, hb_free) == 0;
}

/* gethostbyname and gethostbyaddr in a fiber: the result in tls_hb. */
static struct hostent *hb_lookup_static(const hb_key *k) {
  int saved = errno;
  for (size_t len = hb_here()->len ? hb_here()->len : 1024;; len *= 2) {
    int rc = 0;
    hb_job *j = hb_lookup(k, len, hb_here()->buf, &rc);
    hb_static *hb = hb_here(); /* the thread after the wait */
    if (!j) {
      set_h_errno(rc == ECANCELED ? TRY_AGAIN : NETDB_INTERNAL);
      errno = rc;
      return NULL;
    }
    if (j->rc == ERANGE && len < HB_BUF_MAX) {
      free(j);
      continue;
    }
    struct hostent *out = NULL;
    if (j->rc == 0 && j->result) {
      if (hb->len < len) {
        char *nb = realloc(hb->buf, len);
        if (!nb) {
          free(j);
          set_h_errno(NETDB_INTERNAL);
          errno = ENOMEM;
          return NULL;
        }
        hb->buf = nb;
        hb->len = len;
        iof__libc.pthread_once(&hb_once, hb_key_make);
        if (hb_key_ok) iof__libc.pthread_setspecific(hb_buf_key, nb);
      }
      hb_copy(j, &hb->he, hb->buf);
      out = &hb->he;
    }
    set_h_errno(out ? 0 : j->rc == 0 ? j->h_err : NETDB_INTERNAL);
    free(j);
    errno = saved;
    return out;
  }
}

struct hostent *iof_compat_gethostbyname(const char *name) {
  if (!name) return null_key();
  if (!iof__compat_fiber()) return iof__libc.gethostbyname(name);
  hb_key k = {name, strlen(name) + 1, -1};
  return hb_lookup_static(&k);
}

struct hostent *iof_compat_gethostbyaddr(const void *addr, socklen_t len,
                                         int type) {
  if (!addr) return null_key();
  if (!iof__compat_fiber() || !addr_lookup(len, type))
    return iof__libc.gethostbyaddr(addr, len, type);
  hb_key k = {addr, len, type};
  return hb_lookup_static(&k);
}

/* ---- getnameinfo -----------------------------------------------------------
 */

typedef struct ni_job {
  struct sockaddr_storage sa;
  socklen_t salen;
  int flags, rc, err;
  char *host, *serv; /* in mem, or NULL */
  socklen_t hostlen, servlen;
  char mem[];
} ni_job;

static void ni_run(void *arg) {
  ni_job *j = arg;
  errno = 0;
  j->rc = iof__libc.getnameinfo((struct sockaddr *)&j->sa, j->salen, j->host,
                                j->hostlen, j->serv, j->servlen, j->flags);
  j->err = errno;
}

int iof_compat_getnameinfo(const struct sockaddr *sa, socklen_t salen,
                           char *host, socklen_t hostlen, char *serv,
                           socklen_t servlen, int flags) {
  iof_fiber *f = iof__compat_fiber();
  /* Only a host name of an IP address may need the network; services
   * come from files, and libc rejects the rest at once. */
  if (!f || !sa || salen < sizeof(sa_family_t) || !host || !hostlen ||
      (flags & NI_NUMERICHOST) ||
      (sa->sa_family != AF_INET && sa->sa_family != AF_INET6))
    return iof__libc.getnameinfo(sa, salen, host, hostlen, serv, servlen,
                                 flags);
  /* The job's buffers: glibc writes only the answer into the caller's,
   * whatever length it claims, and no answer needs more than this. */
  if (hostlen > HB_BUF_MAX) hostlen = HB_BUF_MAX;
  if (servlen > HB_BUF_MAX) servlen = HB_BUF_MAX;
  size_t sl = serv ? servlen : 0;
  ni_job *j = calloc(1, sizeof *j + (size_t)hostlen + sl);
  if (!j) return EAI_MEMORY;
  /* libc reads the family's address and only checks that salen covers
   * it: no more is copied (a larger salen may not be readable). */
  socklen_t need = sa->sa_family == AF_INET ? sizeof(struct sockaddr_in)
                                            : sizeof(struct sockaddr_in6);
  if (salen > need) salen = need;
  memcpy(&j->sa, sa, salen);
  j->salen = salen;
  j->flags = flags;
  j->host = j->mem;
  j->hostlen = hostlen;
  if (serv) {
    j->serv = j->mem + hostlen;
    j->servlen = servlen;
  }
  int saved = errno;
  int r = iof__resolver_run(iof__compat_io(f), ni_run, j, hb_release);
  if (r < 0) return gai_fail(r); /* j is the resolver's to free */
  int rc = j->rc;
  if (rc == 0) { /* the strings with their NULs, nothing past them */
    memcpy(host, j->host, strnlen(j->host, hostlen - 1) + 1);
    if (serv && servlen)
      memcpy(serv, j->serv, strnlen(j->serv, servlen - 1) + 1);
    errno = saved;
  } else {
    errno = rc == EAI_SYSTEM ? j->err : saved;
  }
  free(j);
  return rc;
}
