/* compat sleep family, sched_yield, name resolution and cancellation
 * (compat_io.h): the same results in and out of fibers; fibers sleeping
 * while others run; clock_nanosleep with TIMER_ABSTIME on both clocks;
 * getaddrinfo / gethostbyname(_r) / gethostbyaddr(_r) / getnameinfo in
 * fibers; 100 fibers resolving at once
 * on one io_context; a stopped chain ending a blocked read with
 * ECANCELED.
 *
 * IOF_TEST_THREADED */
#include "compat_io_test.h"

#include "io/resolver_internal.h"

#include <arpa/inet.h>
#include <stdlib.h>
#include <string.h>

IOF_TEST_CHECK_FIXTURES(setup, teardown, 60)

/* ---- sleeping --------------------------------------------------------------
 */

static int64_t clock_ns(clockid_t c) {
  struct timespec ts;
  clock_gettime(c, &ts);
  return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static int sc_sleeps(void *arg) {
  (void)arg;
  errno = 31;
  uint64_t t0 = iof_test_now_ns();
  CHECK(iof_compat_usleep(20 * 1000) == 0);
  CHECK(ms_since(t0) >= 19);
  struct timespec req = {0, 20 * MS}, rem = {7, 7};
  t0 = iof_test_now_ns();
  CHECK(iof_compat_nanosleep(&req, &rem) == 0);
  CHECK(ms_since(t0) >= 19);
  CHECK(rem.tv_sec == 7 && rem.tv_nsec == 7); /* never interrupted */
  CHECK(errno == 31);
  struct timespec bad = {0, 1000000000};
  errno = 0;
  CHECK(iof_compat_nanosleep(&bad, NULL) == -1 && errno == EINVAL);
  CHECK(iof_compat_clock_nanosleep(CLOCK_MONOTONIC, 0, &bad, NULL) == EINVAL);
  /* Absolute deadlines on both clocks: never early. */
  clockid_t clocks[2] = {CLOCK_MONOTONIC, CLOCK_REALTIME};
  for (int i = 0; i < 2; i++) {
    int64_t target = clock_ns(clocks[i]) + 30 * MS;
    struct timespec ts = {target / 1000000000, target % 1000000000};
    CHECK(iof_compat_clock_nanosleep(clocks[i], TIMER_ABSTIME, &ts, NULL) == 0);
    CHECK(clock_ns(clocks[i]) >= target);
    /* A past deadline returns at once. */
    t0 = iof_test_now_ns();
    CHECK(iof_compat_clock_nanosleep(clocks[i], TIMER_ABSTIME, &ts, NULL) == 0);
    CHECK(ms_since(t0) < 1000);
  }
  t0 = iof_test_now_ns();
  CHECK(iof_compat_clock_nanosleep(CLOCK_MONOTONIC, 0, &req, NULL) == 0);
  CHECK(ms_since(t0) >= 19);
  errno = 31;
  CHECK(iof_compat_sleep(0) == 0);
  CHECK(iof_compat_sched_yield() == 0);
  CHECK(errno == 31);
  return 0;
}

static void test_sleeps(void **s) {
  (void)s;
  both_ways(sc_sleeps, NULL);
}

/* A fiber in sleep(1) while another fiber ticks on the same thread. */
typedef struct nap_ctx {
  atomic_int done;
  atomic_int ticks;
  unsigned left;
} nap_ctx;

static int napper(void *arg) {
  nap_ctx *c = arg;
  c->left = iof_compat_sleep(1);
  atomic_store(&c->done, 1);
  return 0;
}

static int nap_ticker(void *arg) {
  nap_ctx *c = arg;
  while (!atomic_load(&c->done)) {
    atomic_fetch_add(&c->ticks, 1);
    struct timespec ts = {0, 5 * MS};
    iof_compat_nanosleep(&ts, NULL);
  }
  return 0;
}

static void test_sleep_only_fiber(void **s) {
  (void)s;
  nap_ctx c = {0};
  iof_io_context *io = new_io();
  uint64_t t0 = iof_test_now_ns();
  launch(io, napper, &c);
  launch(io, nap_ticker, &c);
  run_all(io);
  assert_int_equal(iof_io_context_destroy(io), 0);
  assert_true(ms_since(t0) >= 990);
  assert_int_equal(c.left, 0);
  assert_true(atomic_load(&c.ticks) >= 20);
}

/* sched_yield lets the other ready fiber run: strict alternation. */
typedef struct yield_ctx {
  char log[16];
  atomic_int n;
} yield_ctx;

typedef struct yarg {
  yield_ctx *c;
  char me;
} yarg;

static int yield_loop(void *arg) {
  yarg *y = arg;
  for (int i = 0; i < 4; i++) {
    y->c->log[atomic_fetch_add(&y->c->n, 1)] = y->me;
    CHECK(iof_compat_sched_yield() == 0);
  }
  return 0;
}

static void test_sched_yield(void **s) {
  (void)s;
  yield_ctx c = {0};
  yarg a = {&c, 'a'}, b = {&c, 'b'};
  iof_io_context *io = new_io();
  launch(io, yield_loop, &a);
  launch(io, yield_loop, &b);
  run_all(io);
  assert_int_equal(iof_io_context_destroy(io), 0);
  assert_no_failures();
  assert_string_equal(c.log, "abababab");
}

/* ---- resolution ------------------------------------------------------------
 */

static bool has_loopback(const struct addrinfo *res) {
  for (const struct addrinfo *a = res; a; a = a->ai_next)
    if (a->ai_family == AF_INET &&
        ((const struct sockaddr_in *)a->ai_addr)->sin_addr.s_addr ==
            htonl(INADDR_LOOPBACK))
      return true;
  return false;
}

static int sc_resolve(void *arg) {
  (void)arg;
  struct addrinfo hints = {0};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_STREAM;
  struct addrinfo *res = NULL;
  errno = 12;
  CHECK(iof_compat_getaddrinfo("localhost", "80", &hints, &res) == 0);
  CHECK(res && has_loopback(res));
  CHECK(res && ntohs(((struct sockaddr_in *)res->ai_addr)->sin_port) == 80);
  iof_compat_freeaddrinfo(res);
  if (iof_env_current()) CHECK(errno == 12); /* libc may change it */
  res = NULL;
  CHECK(iof_compat_getaddrinfo("127.0.0.1", NULL, &hints, &res) == 0);
  CHECK(res && has_loopback(res));
  iof_compat_freeaddrinfo(res);
  hints.ai_flags = AI_NUMERICHOST;
  CHECK(iof_compat_getaddrinfo("not-a-number", NULL, &hints, &res) ==
        EAI_NONAME);
  hints.ai_flags = 0;
  CHECK(iof_compat_getaddrinfo("localhost", "no-such-service-xyz", &hints,
                               &res) == EAI_SERVICE);
  /* gethostbyname_r with a roomy buffer, and one far too small. */
  struct hostent he, *out = NULL;
  char buf[2048];
  int herr = 0;
  CHECK(iof_compat_gethostbyname_r("localhost", &he, buf, sizeof buf, &out,
                                   &herr) == 0);
  CHECK(out == &he && he.h_addrtype == AF_INET && he.h_length == 4);
  CHECK(out && he.h_name && he.h_name >= buf && he.h_name < buf + sizeof buf);
  CHECK(out && he.h_addr_list[0] &&
        !memcmp(he.h_addr_list[0], "\x7f\0\0\x01", 4));
  char tiny[8];
  errno = 0;
  CHECK(iof_compat_gethostbyname_r("localhost", &he, tiny, sizeof tiny, &out,
                                   &herr) == ERANGE);
  CHECK(errno == ERANGE); /* as glibc's own call sets it */
  CHECK(out == NULL);
  struct hostent *h = iof_compat_gethostbyname("localhost");
  CHECK(h && h->h_addrtype == AF_INET && h->h_addr_list[0] &&
        !memcmp(h->h_addr_list[0], "\x7f\0\0\x01", 4));
  /* Reverse lookups of 127.0.0.1 (/etc/hosts names it "localhost"). */
  struct in_addr lo = {htonl(INADDR_LOOPBACK)};
  out = NULL;
  CHECK(iof_compat_gethostbyaddr_r(&lo, sizeof lo, AF_INET, &he, buf,
                                   sizeof buf, &out, &herr) == 0);
  CHECK(out == &he && he.h_name && !strcmp(he.h_name, "localhost"));
  CHECK(out && he.h_name >= buf && he.h_name < buf + sizeof buf);
  errno = 0;
  CHECK(iof_compat_gethostbyaddr_r(&lo, sizeof lo, AF_INET, &he, tiny,
                                   sizeof tiny, &out, &herr) == ERANGE);
  CHECK(out == NULL);
  h = iof_compat_gethostbyaddr(&lo, sizeof lo, AF_INET);
  CHECK(h && h->h_name && !strcmp(h->h_name, "localhost"));
  struct sockaddr_in sin = {0};
  sin.sin_family = AF_INET;
  sin.sin_addr = lo;
  sin.sin_port = htons(80);
  char host[NI_MAXHOST], serv[NI_MAXSERV];
  CHECK(iof_compat_getnameinfo((struct sockaddr *)&sin, sizeof sin, host,
                               sizeof host, serv, sizeof serv, 0) == 0);
  CHECK(!strcmp(host, "localhost") && !strcmp(serv, "http"));
  CHECK(iof_compat_getnameinfo((struct sockaddr *)&sin, sizeof sin, host,
                               sizeof host, serv, sizeof serv,
                               NI_NUMERICSERV) == 0);
  CHECK(!strcmp(host, "localhost") && !strcmp(serv, "80"));
  /* A host buffer too small for the name: libc's own answer. */
  CHECK(iof_compat_getnameinfo((struct sockaddr *)&sin, sizeof sin, host, 4,
                               NULL, 0, NI_NAMEREQD) == EAI_OVERFLOW);
  return 0;
}

static void test_resolve(void **s) {
  (void)s;
  both_ways(sc_resolve, NULL);
}

#define NRES 100

typedef struct par_ctx {
  atomic_int ok;
  atomic_int left;
  atomic_int ticks;
} par_ctx;

static int one_lookup(void *arg) {
  par_ctx *c = arg;
  struct addrinfo hints = {0}, *res = NULL;
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_STREAM;
  if (iof_compat_getaddrinfo("localhost", "http", &hints, &res) == 0 &&
      has_loopback(res))
    atomic_fetch_add(&c->ok, 1);
  iof_compat_freeaddrinfo(res);
  atomic_fetch_sub(&c->left, 1);
  return 0;
}

static int lookup_ticker(void *arg) {
  par_ctx *c = arg;
  while (atomic_load(&c->left) > 0) {
    atomic_fetch_add(&c->ticks, 1);
    iof_compat_usleep(500);
  }
  return 0;
}

/* The time of n lookups launched together on one io_context, in ns. */
static uint64_t lookups(iof_io_context *io, par_ctx *c, int n, bool tick) {
  atomic_store(&c->ok, 0);
  atomic_store(&c->left, n);
  atomic_store(&c->ticks, 0);
  uint64_t t0 = iof_test_now_ns();
  for (int i = 0; i < n; i++) launch(io, one_lookup, c);
  if (tick) launch(io, lookup_ticker, c);
  run_all(io);
  uint64_t t = iof_test_now_ns() - t0;
  assert_int_equal(atomic_load(&c->ok), n);
  return t;
}

/* 100 fibers resolve "localhost" at once on one io_context: all succeed,
 * the io thread keeps running other fibers meanwhile, and the batch costs
 * about what 100 lookups cost anyway (a local lookup is CPU work, so
 * this cannot show overlap; test_resolver_overlap does). */
static void test_resolve_parallel(void **s) {
  (void)s;
  par_ctx c = {0};
  iof_io_context *io = new_io();
  lookups(io, &c, 1, false); /* warm up: the first thread, nss modules */
  uint64_t one = UINT64_MAX;
  for (int i = 0; i < 5; i++) {
    uint64_t t = lookups(io, &c, 1, false);
    if (t < one) one = t;
  }
  uint64_t all = lookups(io, &c, NRES, true);
  assert_int_equal(iof_io_context_destroy(io), 0);
  print_message("one lookup %.3f ms, %d at once %.3f ms\n", one / 1e6, NRES,
                all / 1e6);
  assert_true(all < (uint64_t)NRES * one * 10 + 2000 * MS);
  assert_true(atomic_load(&c.ticks) > 0);
}

/* Lookups that block (a slow DNS server) overlap: 100 resolver jobs that
 * each take 100 ms finish in far less than the 10 s they would take one
 * after another (64 threads at most: two rounds). */
static void slow_job(void *arg) {
  (void)arg;
  sleep_ms(100);
}

typedef struct slow_ctx {
  iof_io_context *io;
  atomic_int ok;
} slow_ctx;

static int slow_lookup(void *arg) {
  slow_ctx *c = arg;
  if (iof__resolver_run(c->io, slow_job, NULL, NULL) == 0)
    atomic_fetch_add(&c->ok, 1);
  return 0;
}

static void test_resolver_overlap(void **s) {
  (void)s;
  slow_ctx c = {0};
  iof_io_context *io = new_io();
  c.io = io;
  uint64_t t0 = iof_test_now_ns();
  for (int i = 0; i < 100; i++) launch(io, slow_lookup, &c);
  run_all(io);
  int64_t ms = ms_since(t0);
  assert_int_equal(iof_io_context_destroy(io), 0);
  print_message("100 x 100 ms jobs: %lld ms\n", (long long)ms);
  assert_int_equal(atomic_load(&c.ok), 100);
  assert_true(ms < 3000);
}

/* ---- cancellation
 * ------------------------------------------------------------ */

typedef struct stop_ctx {
  int fd;
  ssize_t r;
  int err;
} stop_ctx;

static int stopped_reader(void *arg) {
  stop_ctx *c = arg;
  char b[4];
  c->r = iof_compat_read(c->fd, b, sizeof b);
  c->err = errno;
  return 0;
}

static int stopper(void *arg) {
  iof_stop_source *src = arg;
  iof_compat_usleep(30 * 1000);
  iof_stop_source_request(src);
  return 0;
}

static void test_stop_ends_read(void **s) {
  (void)s;
  int p[2];
  assert_int_equal(pipe(p), 0);
  stop_ctx c = {p[0], 0, 0};
  iof_stop_source srcv;
  assert_int_equal(iof_stop_source_init(&srcv), 0);
  iof_stop_source *src = &srcv;
  iof_io_context *io = new_io();
  iof_launch_opts o = {0};
  o.stop_token = iof_stop_source_token(src);
  assert_int_equal(
      iof_run_async(iof_io_context_executor(io), &o, stopped_reader, &c), 0);
  launch(io, stopper, src);
  run_all(io);
  assert_int_equal(iof_io_context_destroy(io), 0);
  iof_stop_source_destroy(src);
  assert_int_equal(c.r, -1);
  assert_int_equal(c.err, ECANCELED);
  close(p[0]);
  close(p[1]);
}

/* Numeric hosts and services are parsed in place (no trip to the
 * resolver's thread): the fiber does not suspend, so a fiber queued behind
 * it has not run yet; a name does go there (it has run after). */
static atomic_int side_ran;

static int side_fn(void *arg) {
  (void)arg;
  atomic_store(&side_ran, 1);
  return 0;
}

static int sc_numeric(void *arg) {
  (void)arg;
  atomic_store(&side_ran, 0);
  CHECK(iof_launch(iof_env_current()->executor, side_fn, NULL) == 0);
  struct addrinfo hints = {0};
  hints.ai_socktype = SOCK_STREAM;
  struct addrinfo *res = NULL;
  errno = 12;
  CHECK(iof_compat_getaddrinfo("127.0.0.1", "8080", &hints, &res) == 0);
  CHECK(res && has_loopback(res));
  CHECK(res && ntohs(((struct sockaddr_in *)res->ai_addr)->sin_port) == 8080);
  iof_compat_freeaddrinfo(res);
  CHECK(errno == 12);
  res = NULL;
  CHECK(iof_compat_getaddrinfo("::1", NULL, &hints, &res) == 0);
  CHECK(res && res->ai_family == AF_INET6);
  iof_compat_freeaddrinfo(res);
  res = NULL;
  hints.ai_flags = AI_PASSIVE;
  CHECK(iof_compat_getaddrinfo(NULL, "80", &hints, &res) == 0);
  iof_compat_freeaddrinfo(res);
  hints.ai_flags = AI_NUMERICHOST;
  CHECK(iof_compat_getaddrinfo("not-a-number", NULL, &hints, &res) ==
        EAI_NONAME);
  struct sockaddr_in sin = {0};
  sin.sin_family = AF_INET;
  sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  sin.sin_port = htons(8080);
  char host[64], serv[16];
  CHECK(iof_compat_getnameinfo((struct sockaddr *)&sin, sizeof sin, host,
                               sizeof host, serv, sizeof serv,
                               NI_NUMERICHOST | NI_NUMERICSERV) == 0);
  CHECK(!strcmp(host, "127.0.0.1") && !strcmp(serv, "8080"));
  CHECK(iof_compat_getnameinfo((struct sockaddr *)&sin, sizeof sin, NULL, 0,
                               serv, sizeof serv, NI_NUMERICSERV) == 0);
  CHECK(atomic_load(&side_ran) == 0); /* never suspended */
  CHECK(iof_compat_getnameinfo((struct sockaddr *)&sin, sizeof sin, host,
                               sizeof host, NULL, 0, 0) == 0);
  CHECK(!strcmp(host, "localhost"));
  CHECK(atomic_load(&side_ran) == 1); /* a reverse lookup: the resolver's */
  atomic_store(&side_ran, 0);
  CHECK(iof_launch(iof_env_current()->executor, side_fn, NULL) == 0);
  hints.ai_flags = 0;
  res = NULL;
  CHECK(iof_compat_getaddrinfo("localhost", "80", &hints, &res) == 0);
  iof_compat_freeaddrinfo(res);
  CHECK(atomic_load(&side_ran) == 1); /* a name: the resolver's thread */
  atomic_store(&side_ran, 0);
  CHECK(iof_launch(iof_env_current()->executor, side_fn, NULL) == 0);
  struct in_addr lo = {htonl(INADDR_LOOPBACK)};
  CHECK(iof_compat_gethostbyaddr(&lo, sizeof lo, AF_INET) != NULL);
  CHECK(atomic_load(&side_ran) == 1); /* an address: the resolver's too */
  return 0;
}

static void test_resolve_numeric_in_place(void **s) {
  (void)s;
  assert_int_equal(in_fiber(sc_numeric, NULL), 0);
  assert_no_failures();
}

/* gethostbyname's result belongs to the thread the fiber runs on after
 * the lookup: fibers of a 4-thread pool, which resume on any of them,
 * each read their own answer (numeric names: no network). The runtime
 * once kept the thread-local's address from before the wait, and a fiber
 * back on another thread got a result in the first thread's buffer,
 * which that thread's fibers then overwrote. */
#define MIGRANTS 16
#define LOOKUPS 60

static atomic_int wrong_answers, answers;

static int own_answer(void *arg) {
  int id = (int)(intptr_t)arg;
  for (int i = 0; i < LOOKUPS; i++) {
    char name[32];
    snprintf(name, sizeof name, "10.%d.0.%d", id, i);
    struct hostent *h = iof_compat_gethostbyname(name);
    if (!h) {
      atomic_fetch_add(&wrong_answers, 1);
      continue;
    }
    /* Read it for a while: the other threads' fibers run meanwhile. */
    bool ok = true;
    for (int k = 0; k < 500 && ok; k++) ok = strcmp(h->h_name, name) == 0;
    atomic_fetch_add(ok ? &answers : &wrong_answers, 1);
  }
  return 0;
}

static void test_gethostbyname_across_threads(void **s) {
  (void)s;
  atomic_store(&wrong_answers, 0);
  atomic_store(&answers, 0);
  iof_thread_pool *p = iof_thread_pool_create(4);
  assert_non_null(p);
  iof_executor_ref ex = iof_thread_pool_executor(p);
  for (int i = 0; i < MIGRANTS; i++)
    assert_int_equal(iof_run_async(ex, NULL, own_answer, (void *)(intptr_t)i),
                     0);
  assert_int_equal(iof_thread_pool_join(p), 0);
  assert_int_equal(iof_thread_pool_destroy(p), 0);
  assert_int_equal(atomic_load(&wrong_answers), 0);
  assert_int_equal(atomic_load(&answers), MIGRANTS * LOOKUPS);
}

#define T(f) cmocka_unit_test_setup_teardown(f, setup, teardown)

int main(void) {
  const struct CMUnitTest tests[] = {
      T(test_sleeps),
      T(test_sleep_only_fiber),
      T(test_sched_yield),
      T(test_resolve),
      T(test_resolve_parallel),
      T(test_resolver_overlap),
      T(test_stop_ends_read),
      T(test_resolve_numeric_in_place),
      T(test_gethostbyname_across_threads),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
