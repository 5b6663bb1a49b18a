/* The resolver: "localhost" and numeric hosts
 * resolve on the io_context's worker thread while other fibers run;
 * getaddrinfo's failures map to -errno; a stop request from another
 * thread cancels a resolve promptly while getaddrinfo is still running
 * (and while it is still queued behind another), and the late result is
 * freed; destroying the context cancels pending resolves; a thread-pool
 * fiber resolves through an io_context and resumes on the pool; after a
 * burst of parallel lookups the spare workers leave once idle, the last
 * one stays and still serves.
 *
 * The resolver is limited to one worker thread here (it grows a pool of
 * them by default) so that a request can be queued behind a held one.
 * To hold getaddrinfo on the worker thread without any network, this
 * program defines getaddrinfo itself: names ending in ".gate.test" block
 * until the test opens the gate, then fail with EAI_NONAME; every other
 * name goes to the C library's getaddrinfo.
 *
 * IOF_TEST_THREADED */
#include "test_support.h"
#include "io_test.h"

#include <iofiber/iofiber.h>

#include "io/resolver_internal.h"

#include <arpa/inet.h>
#include <dlfcn.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define MS 1000000LL

/* ---- the gate ------------------------------------------------------------ */

typedef int (*gai_fn)(const char *, const char *, const struct addrinfo *,
                      struct addrinfo **);

static pthread_mutex_t gate_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t gate_cv = PTHREAD_COND_INITIALIZER;
static bool gate_open = true;
static atomic_int gate_inside;   /* calls blocked at the gate now */
static atomic_int gate_finished; /* gated calls that returned */

static bool gated(const char *host) {
  static const char suffix[] = ".gate.test";
  size_t n = host ? strlen(host) : 0;
  return n >= sizeof suffix - 1 &&
         strcmp(host + n - (sizeof suffix - 1), suffix) == 0;
}

int getaddrinfo(const char *host, const char *service,
                const struct addrinfo *hints, struct addrinfo **res) {
  if (gated(host)) {
    pthread_mutex_lock(&gate_lock);
    atomic_fetch_add(&gate_inside, 1);
    while (!gate_open) pthread_cond_wait(&gate_cv, &gate_lock);
    atomic_fetch_sub(&gate_inside, 1);
    pthread_mutex_unlock(&gate_lock);
    atomic_fetch_add(&gate_finished, 1);
    return EAI_NONAME;
  }
  static gai_fn real;
  if (!real) {
    gai_fn f;
    void *sym = dlsym(RTLD_NEXT, "getaddrinfo");
    memcpy(&f, &sym, sizeof f);
    real = f;
  }
  return real(host, service, hints, res);
}

static void gate_close(void) {
  pthread_mutex_lock(&gate_lock);
  gate_open = false;
  atomic_store(&gate_finished, 0);
  pthread_mutex_unlock(&gate_lock);
}

static void gate_release(void) {
  pthread_mutex_lock(&gate_lock);
  gate_open = true;
  pthread_cond_broadcast(&gate_cv);
  pthread_mutex_unlock(&gate_lock);
}

/* ---- helpers ------------------------------------------------------------- */

static void on_alarm(int sig) {
  (void)sig;
  static const char m[] = "test_resolver: watchdog: a test hung\n";
  ssize_t w = write(2, m, sizeof m - 1);
  (void)w;
  _exit(124);
}

static int arm_watchdog(void **state) {
  (void)state;
  signal(SIGALRM, on_alarm);
  alarm(30);
  return 0;
}

static int default_idle_ms;

static int disarm_watchdog(void **state) {
  (void)state;
  alarm(0);
  iof__resolver_max_threads = 1;
  iof__resolver_idle_ms = default_idle_ms;
  gate_release(); /* never leave a worker stuck */
  return 0;
}

static bool wait_count(atomic_int *v, int want) {
  for (int i = 0; i < 10000; i++) {
    if (atomic_load(v) == want) return true;
    sleep_ms(1);
  }
  return false;
}

/* ---- resolving ------------------------------------------------------------
 */

typedef struct lookup {
  iof_io_context *io;
  const char *host, *service;
  struct addrinfo hints;
  bool use_hints;
  int r;
  bool has_v4_loopback;
  int port;
  int ticks_during; /* another fiber's progress while this one resolved */
  atomic_int *ticks;
} lookup;

static int lookup_fn(void *arg) {
  lookup *l = arg;
  struct addrinfo *res = NULL;
  int t0 = l->ticks ? atomic_load(l->ticks) : 0;
  l->r = iof_resolve(l->io, l->host, l->service,
                     l->use_hints ? &l->hints : NULL, &res);
  if (l->ticks) l->ticks_during = atomic_load(l->ticks) - t0;
  for (struct addrinfo *a = res; a; a = a->ai_next) {
    if (a->ai_family == AF_INET) {
      struct sockaddr_in *in = (struct sockaddr_in *)a->ai_addr;
      if (ntohl(in->sin_addr.s_addr) == INADDR_LOOPBACK) {
        l->has_v4_loopback = true;
        l->port = ntohs(in->sin_port);
      }
    }
  }
  if (l->r == 0 && !res) l->r = -12345; /* success must give results */
  if (res) freeaddrinfo(res);
  return 0;
}

static int tick_fn(void *arg) {
  atomic_int *ticks = arg;
  for (int i = 0; i < 5; i++) {
    atomic_fetch_add(ticks, 1);
    iof_yield();
  }
  return 0;
}

static void resolve_localhost_gives_the_loopback_address(void **state) {
  (void)state;
  iof_io_context *io = iof_io_context_create();
  assert_non_null(io);
  lookup l = {0};
  l.io = io;
  l.host = "localhost";
  l.service = "8080";
  l.use_hints = true;
  l.hints.ai_family = AF_INET;
  l.hints.ai_socktype = SOCK_STREAM;
  lookup n = {0}; /* no hints at all */
  n.io = io;
  n.host = "127.0.0.1";
  n.service = "80";
  launch(io, lookup_fn, &l);
  launch(io, lookup_fn, &n);
  run_all(io);
  assert_int_equal(l.r, 0);
  assert_true(l.has_v4_loopback);
  assert_int_equal(l.port, 8080);
  assert_int_equal(n.r, 0);
  assert_true(n.has_v4_loopback);
  assert_int_equal(n.port, 80);
  assert_int_equal(iof_io_context_destroy(io), 0);
}

static void the_fiber_is_suspended_while_getaddrinfo_runs(void **state) {
  (void)state;
  iof_io_context *io = iof_io_context_create();
  assert_non_null(io);
  atomic_int ticks = 0;
  lookup l = {0};
  l.io = io;
  l.host = "slow.gate.test";
  l.ticks = &ticks;
  gate_close();
  launch(io, lookup_fn, &l);
  launch(io, tick_fn, &ticks);
  /* Run the loop in slices until the tick fiber is done; the resolve is
   * still held at the gate meanwhile. */
  for (int i = 0; i < 100 && atomic_load(&ticks) < 5; i++)
    iof_io_context_run_for(io, MS);
  assert_int_equal(atomic_load(&ticks), 5);
  assert_true(wait_count(&gate_inside, 1));
  gate_release();
  run_all(io);
  assert_int_equal(l.r, IOF_EAI_NONAME); /* EAI_NONAME */
  assert_int_equal(l.ticks_during, 5);
  assert_int_equal(iof_io_context_destroy(io), 0);
}

typedef struct errs {
  iof_io_context *io;
  int r_numeric_bad, r_numserv_bad, r_null_both, r_null_res, r_family;
  int r_null_io;
} errs;

static int errs_fn(void *arg) {
  errs *e = arg;
  struct addrinfo h, *res = NULL;
  memset(&h, 0, sizeof h);
  h.ai_flags = AI_NUMERICHOST;
  e->r_numeric_bad = iof_resolve(e->io, "not-a-number", NULL, &h, &res);
  memset(&h, 0, sizeof h);
  h.ai_flags = AI_NUMERICHOST | AI_NUMERICSERV;
  e->r_numserv_bad = iof_resolve(e->io, "127.0.0.1", "http", &h, &res);
  e->r_null_both = iof_resolve(e->io, NULL, NULL, NULL, &res);
  e->r_null_res = iof_resolve(e->io, "localhost", NULL, NULL, NULL);
  e->r_null_io = iof_resolve(NULL, "localhost", NULL, NULL, &res);
  memset(&h, 0, sizeof h);
  h.ai_flags = AI_NUMERICHOST;
  h.ai_family = 12345;
  e->r_family = iof_resolve(e->io, "127.0.0.1", NULL, &h, &res);
  return 0;
}

static void resolver_failures_map_to_negative_errno(void **state) {
  (void)state;
  iof_io_context *io = iof_io_context_create();
  assert_non_null(io);
  errs e = {0};
  e.io = io;
  launch(io, errs_fn, &e);
  run_all(io);
  assert_int_equal(e.r_numeric_bad, IOF_EAI_NONAME); /* EAI_NONAME */
  assert_int_equal(e.r_numserv_bad, IOF_EAI_NONAME); /* EAI_NONAME */
  assert_int_equal(e.r_null_both, -EINVAL);
  assert_int_equal(e.r_null_res, -EINVAL);
  assert_int_equal(e.r_null_io, -EINVAL);
  assert_int_equal(e.r_family, IOF_EAI_FAMILY);
  struct addrinfo *res;
  assert_int_equal(iof_resolve(io, "localhost", NULL, NULL, &res), -EPERM);
  assert_int_equal(iof_io_context_destroy(io), 0);
}

/* ---- cancellation ----------------------------------------------------------
 */

typedef struct cancel_resolve {
  iof_io_context *io;
  const char *host;
  atomic_int started;
  int r;
  int64_t t_done;
  struct addrinfo *res;
} cancel_resolve;

static int cancel_resolve_fn(void *arg) {
  cancel_resolve *c = arg;
  atomic_store(&c->started, 1);
  c->r = iof_resolve(c->io, c->host, "80", NULL, &c->res);
  c->t_done = iof_now_ns();
  return 0;
}

typedef struct stopper {
  iof_stop_source *src;
  int inside_wanted;
  int64_t t_request;
  bool ok;
} stopper;

static void *stop_when_at_gate(void *arg) {
  stopper *s = arg;
  s->ok = wait_count(&gate_inside, s->inside_wanted);
  sleep_ms(10);
  s->t_request = iof_now_ns();
  iof_stop_source_request(s->src);
  return NULL;
}

static void
stop_from_another_thread_cancels_a_resolve_in_progress(void **state) {
  (void)state;
  iof_io_context *io = iof_io_context_create();
  assert_non_null(io);
  gate_close();
  cancel_resolve c = {0};
  c.io = io;
  c.host = "held.gate.test";
  iof_stop_source src;
  assert_int_equal(iof_stop_source_init(&src), 0);
  iof_launch_opts o = {0};
  o.stop_token = iof_stop_source_token(&src);
  assert_int_equal(
      iof_run_async(iof_io_context_executor(io), &o, cancel_resolve_fn, &c), 0);
  stopper s = {&src, 1, 0, false};
  pthread_t t;
  assert_int_equal(pthread_create(&t, NULL, stop_when_at_gate, &s), 0);
  run_all(io); /* returns once the cancelled fiber is done */
  pthread_join(t, NULL);
  assert_true(s.ok);
  assert_int_equal(c.r, -ECANCELED);
  assert_null(c.res);
  assert_true(c.t_done - s.t_request < 1000 * MS);
  /* getaddrinfo is still held: the fiber did not wait for it. */
  assert_int_equal(atomic_load(&gate_inside), 1);
  assert_int_equal(atomic_load(&gate_finished), 0);
  /* Let it finish: the worker frees the orphaned request (ASan checks). */
  gate_release();
  assert_true(wait_count(&gate_finished, 1));
  /* The resolver still works afterwards. */
  lookup l = {0};
  l.io = io;
  l.host = "localhost";
  launch(io, lookup_fn, &l);
  run_all(io);
  assert_int_equal(l.r, 0);
  assert_true(l.has_v4_loopback);
  iof_stop_source_destroy(&src);
  assert_int_equal(iof_io_context_destroy(io), 0);
}

static void stop_cancels_a_resolve_queued_behind_another(void **state) {
  (void)state;
  iof_io_context *io = iof_io_context_create();
  assert_non_null(io);
  gate_close();
  /* First a resolve that holds the worker, then one queued behind it. */
  cancel_resolve first = {0};
  first.io = io;
  first.host = "first.gate.test";
  launch(io, cancel_resolve_fn, &first);
  cancel_resolve queued = {0};
  queued.io = io;
  queued.host = "localhost";
  iof_stop_source src;
  assert_int_equal(iof_stop_source_init(&src), 0);
  iof_launch_opts o = {0};
  o.stop_token = iof_stop_source_token(&src);
  assert_int_equal(iof_run_async(iof_io_context_executor(io), &o,
                                 cancel_resolve_fn, &queued),
                   0);
  stopper s = {&src, 1, 0, false};
  pthread_t t;
  assert_int_equal(pthread_create(&t, NULL, stop_when_at_gate, &s), 0);
  /* Run until the queued one is cancelled, then open the gate. */
  for (int i = 0; i < 5000 && queued.t_done == 0; i++)
    iof_io_context_run_for(io, MS);
  pthread_join(t, NULL);
  assert_true(s.ok);
  assert_int_equal(queued.r, -ECANCELED);
  assert_null(queued.res);
  assert_int_equal(first.t_done, 0); /* still held */
  gate_release();
  run_all(io);
  assert_int_equal(first.r, IOF_EAI_NONAME);
  iof_stop_source_destroy(&src);
  assert_int_equal(iof_io_context_destroy(io), 0);
}

static void *release_gate_later(void *arg) {
  (void)arg;
  sleep_ms(50);
  gate_release();
  return NULL;
}

static void destroying_the_context_cancels_pending_resolves(void **state) {
  (void)state;
  iof_io_context *io = iof_io_context_create();
  assert_non_null(io);
  gate_close();
  cancel_resolve held = {0}, queued = {0};
  held.io = io;
  held.host = "held.gate.test";
  queued.io = io;
  queued.host = "localhost";
  launch(io, cancel_resolve_fn, &held);
  launch(io, cancel_resolve_fn, &queued);
  for (int i = 0; i < 5000 && atomic_load(&gate_inside) < 1; i++)
    iof_io_context_run_for(io, MS);
  assert_int_equal(atomic_load(&gate_inside), 1);
  /* Destroy joins the worker, which is held at the gate until a helper
   * opens it. */
  pthread_t t;
  assert_int_equal(pthread_create(&t, NULL, release_gate_later, NULL), 0);
  assert_int_equal(iof_io_context_destroy(io), 0);
  pthread_join(t, NULL);
  assert_int_equal(held.r, -ECANCELED);
  assert_int_equal(queued.r, -ECANCELED);
  assert_null(held.res);
  assert_null(queued.res);
}

static void
resolve_with_an_already_stopped_token_is_ecanceled_at_once(void **state) {
  (void)state;
  iof_io_context *io = iof_io_context_create();
  assert_non_null(io);
  gate_close(); /* would hang if it reached getaddrinfo */
  iof_stop_source src;
  assert_int_equal(iof_stop_source_init(&src), 0);
  iof_stop_source_request(&src);
  cancel_resolve c = {0};
  c.io = io;
  c.host = "never.gate.test";
  iof_launch_opts o = {0};
  o.stop_token = iof_stop_source_token(&src);
  assert_int_equal(
      iof_run_async(iof_io_context_executor(io), &o, cancel_resolve_fn, &c), 0);
  run_all(io);
  assert_int_equal(c.r, -ECANCELED);
  assert_int_equal(atomic_load(&gate_inside), 0);
  gate_release();
  iof_stop_source_destroy(&src);
  assert_int_equal(iof_io_context_destroy(io), 0);
}

/* ---- from a thread pool ----------------------------------------------------
 */

typedef struct pool_lookup {
  lookup l;
  iof_executor_ref pool_ex;
  pthread_t io_thread;
  bool back_on_pool;
  atomic_int done;
} pool_lookup;

static int pool_lookup_fn(void *arg) {
  pool_lookup *p = arg;
  lookup_fn(&p->l);
  p->back_on_pool =
      iof_executor_equal(iof_env_current()->executor, p->pool_ex) &&
      !pthread_equal(pthread_self(), p->io_thread);
  return 0;
}

static void pool_done(void *user, int status) {
  (void)status;
  atomic_store(&((pool_lookup *)user)->done, 1);
}

static void *run_until_flag(void *arg) {
  pool_lookup *p = arg;
  iof_work_guard g;
  iof_work_guard_init(&g, iof_io_context_executor(p->l.io));
  while (!atomic_load(&p->done)) iof_io_context_run_for(p->l.io, 5 * MS);
  iof_work_guard_reset(&g);
  return NULL;
}

static void resolve_from_a_thread_pool_fiber_resumes_on_the_pool(void **state) {
  (void)state;
  pool_lookup p = {0};
  p.l.io = iof_io_context_create();
  assert_non_null(p.l.io);
  p.l.host = "localhost";
  p.l.service = "443";
  iof_thread_pool *pool = iof_thread_pool_create(2);
  assert_non_null(pool);
  p.pool_ex = iof_thread_pool_executor(pool);
  assert_int_equal(pthread_create(&p.io_thread, NULL, run_until_flag, &p), 0);
  iof_launch_opts o = {0};
  o.on_done = pool_done;
  o.user = &p;
  assert_int_equal(iof_run_async(p.pool_ex, &o, pool_lookup_fn, &p), 0);
  pthread_join(p.io_thread, NULL);
  assert_true(atomic_load(&p.done));
  assert_int_equal(p.l.r, 0);
  assert_true(p.l.has_v4_loopback);
  assert_int_equal(p.l.port, 443);
  assert_true(p.back_on_pool);
  assert_int_equal(iof_thread_pool_destroy(pool), 0);
  assert_int_equal(iof_io_context_destroy(p.l.io), 0);
}

/* ---- idle workers ----------------------------------------------------------
 */

static int os_threads(void) {
  FILE *f = fopen("/proc/self/status", "r");
  char line[256];
  int n = -1;
  while (f && fgets(line, sizeof line, f))
    if (strncmp(line, "Threads:", 8) == 0) n = atoi(line + 8);
  if (f) fclose(f);
  return n;
}

/* The thread count once no thread is leaving: the timer service's thread,
 * started by an earlier test, leaves 50 ms after its last timer, and a
 * count taken before that changes under the test. */
static int settled_threads(void) {
  int n = os_threads();
  for (int i = 0; i < 40; i++) {
    usleep(100 * 1000);
    int m = os_threads();
    if (m == n) break;
    n = m;
  }
  return n;
}

#define BURST 6

static void a_burst_of_lookups_leaves_one_worker_behind(void **state) {
  (void)state;
  iof_io_context *io = iof_io_context_create();
  assert_non_null(io);
  iof__resolver_max_threads = BURST;
  iof__resolver_idle_ms = 100;
  int base = settled_threads();
  gate_close();
  lookup l[BURST];
  memset(l, 0, sizeof l);
  for (int i = 0; i < BURST; i++) {
    l[i].io = io;
    l[i].host = "burst.gate.test";
    launch(io, lookup_fn, &l[i]);
  }
  /* Every lookup held at the gate has a worker of its own. */
  for (int i = 0; i < 5000 && atomic_load(&gate_inside) < BURST; i++)
    iof_io_context_run_for(io, MS);
  assert_int_equal(atomic_load(&gate_inside), BURST);
  assert_int_equal(os_threads(), base + BURST);
  gate_release();
  run_all(io);
  for (int i = 0; i < BURST; i++) assert_int_equal(l[i].r, IOF_EAI_NONAME);
  /* Idle for 100 ms, the spare workers leave; the last one stays. */
  int now = -1;
  for (int i = 0; i < 500 && (now = os_threads()) > base + 1; i++) sleep_ms(10);
  assert_int_equal(now, base + 1);
  sleep_ms(300);
  assert_int_equal(os_threads(), base + 1);
  /* It still serves, and a new burst grows the pool again. */
  lookup after = {0};
  after.io = io;
  after.host = "localhost";
  after.service = "80";
  launch(io, lookup_fn, &after);
  run_all(io);
  assert_int_equal(after.r, 0);
  assert_true(after.has_v4_loopback);
  assert_int_equal(os_threads(), base + 1);
  gate_close();
  for (int i = 0; i < 2; i++) launch(io, lookup_fn, &l[i]);
  for (int i = 0; i < 5000 && atomic_load(&gate_inside) < 2; i++)
    iof_io_context_run_for(io, MS);
  assert_int_equal(atomic_load(&gate_inside), 2);
  assert_int_equal(os_threads(), base + 2);
  gate_release();
  run_all(io);
  assert_int_equal(iof_io_context_destroy(io), 0);
  assert_int_equal(os_threads(), base); /* the rest joined */
}

/* No worker thread can start (the address space is capped just above
 * what the process maps): the resolve fails with -EAGAIN, as documented,
 * without waiting, and works again once threads can start. Sanitizers and
 * valgrind need the address space: skipped there. */
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define RESOLVER_SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define RESOLVER_SANITIZED 1
#endif
#endif
#if __has_include(<valgrind/valgrind.h>)
#include <valgrind/valgrind.h>
#endif
#ifndef RUNNING_ON_VALGRIND
#define RUNNING_ON_VALGRIND 0
#endif

#ifndef RESOLVER_SANITIZED
static long vm_size_kib(void) {
  FILE *f = fopen("/proc/self/status", "r");
  char line[256];
  long v = -1;
  while (f && fgets(line, sizeof line, f))
    if (sscanf(line, "VmSize: %ld", &v) == 1) break;
  if (f) fclose(f);
  return v;
}

typedef struct capped {
  iof_io_context *io;
  int capped_rc, connect_rc, after_rc;
} capped;

static int capped_fn(void *arg) {
  capped *c = arg;
  /* Room for small allocations, not for a thread's stack (half of the
   * default, at most 1 MiB). */
  pthread_attr_t attr;
  size_t stack = 0;
  if (pthread_getattr_default_np(&attr) == 0) {
    pthread_attr_getstacksize(&attr, &stack);
    pthread_attr_destroy(&attr);
  }
  size_t spare = stack / 2 < ((size_t)1 << 20) ? stack / 2 : (size_t)1 << 20;
  long vm = vm_size_kib();
  struct rlimit old, low;
  c->capped_rc = c->connect_rc = 1; /* not run */
  if (vm < 0 || spare < 65536 || getrlimit(RLIMIT_AS, &old) != 0) return -1;
  low = old;
  low.rlim_cur = (rlim_t)vm * 1024 + spare;
  if (setrlimit(RLIMIT_AS, &low) != 0) return -1;
  struct addrinfo *res = NULL;
  c->capped_rc = iof_resolve(c->io, "localhost", "80", NULL, &res);
  iof_socket *s = NULL;
  c->connect_rc = iof_tcp_connect(c->io, "localhost", "1", &s);
  setrlimit(RLIMIT_AS, &old);
  c->after_rc = iof_resolve(c->io, "localhost", "80", NULL, &res);
  if (c->after_rc == 0) freeaddrinfo(res);
  return 0;
}

#endif

static void resolve_without_a_worker_is_eagain(void **state) {
  (void)state;
#ifdef RESOLVER_SANITIZED
  skip();
#else
  if (RUNNING_ON_VALGRIND) skip();
  capped c = {0};
  c.io = iof_io_context_create();
  assert_non_null(c.io);
  launch(c.io, capped_fn, &c);
  run_all(c.io);
  assert_int_equal(c.capped_rc, -EAGAIN);
  assert_int_equal(c.connect_rc, -EAGAIN);
  assert_int_equal(c.after_rc, 0);
  assert_int_equal(iof_io_context_destroy(c.io), 0);
#endif
}

#define T(f) cmocka_unit_test_setup_teardown(f, arm_watchdog, disarm_watchdog)

int main(void) {
  const struct CMUnitTest tests[] = {
      /* First: glibc reuses the stacks of threads that ended, without
       * mapping, and the cap must stop the worker's stack. */
      T(resolve_without_a_worker_is_eagain),
      T(resolve_localhost_gives_the_loopback_address),
      T(the_fiber_is_suspended_while_getaddrinfo_runs),
      T(resolver_failures_map_to_negative_errno),
      T(stop_from_another_thread_cancels_a_resolve_in_progress),
      T(stop_cancels_a_resolve_queued_behind_another),
      T(destroying_the_context_cancels_pending_resolves),
      T(resolve_with_an_already_stopped_token_is_ecanceled_at_once),
      T(resolve_from_a_thread_pool_fiber_resumes_on_the_pool),
      T(a_burst_of_lookups_leaves_one_worker_behind),
  };
  /* "Queued behind another" needs a single worker to hold at the gate. */
  iof__resolver_max_threads = 1;
  default_idle_ms = iof__resolver_idle_ms;
  if (getenv("IOF_TEST_FILTER"))
    cmocka_set_test_filter(getenv("IOF_TEST_FILTER"));
  return cmocka_run_group_tests(tests, NULL, NULL);
}
