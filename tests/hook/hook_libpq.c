/* A real blocking client library (libpq: connect, poll, recv, send inside
 * libpq.so) called from 100 fibers at once against a PostgreSQL server this
 * program starts in a temporary directory on 127.0.0.1. Each client opens
 * its own connection with PQconnectdb, checks a parameterized query's
 * values, waits until every client is connected, then runs
 * `SELECT pg_sleep(0.2)`. On fibers the 100 sleeps are all in progress at
 * one instant (0.3 to 0.4 s from the first start to the last end, on one
 * OS thread); a blocked thread would need 100 x 200 ms. The odd clients
 * connect over TLS (OpenSSL inside libpq) with a certificate the test
 * makes. Client 0 also has a query cancelled by the server's
 * statement_timeout, and client 1 one cancelled by PQcancel from a 101st
 * client while it waits for the result.
 *
 * The same binary runs two ways, like hook_hiredis:
 * - hook linked, main on its thread: it launches the clients as fibers;
 * - under iofiber-run (main is already a fiber): it makes pthreads, which
 *   the hook turns into fibers.
 * postgres refuses to run as root: as root the server runs as the
 * `postgres` user the Debian package creates.
 * Exit 0: pass; 77: PostgreSQL's server is not installed (or no user to run
 * it as); 1: failure. The server is stopped and its directory removed on
 * every exit, including the watchdog's. */
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <glob.h>
#include <grp.h>
#include <libpq-fe.h>
#include <pwd.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <iofiber/env.h>

#include "hook_support.h"

#define N 100
#define SLEEP_MS 200
/* Client N cancels client 1's query; it counts among the clients. */
#define CLIENTS (N + 1)
#define WATCHDOG_S 60

static char dir[64];      /* the temporary directory; "" when removed */
static char data_dir[96]; /* the cluster, inside dir */
static char log_path[96];
static char bin_dir[256];
/* The initdb or postgres running, for the cleanup; 0 when none. */
static volatile pid_t child;
static int port;
static uid_t run_uid;
static gid_t run_gid;
static bool switch_user;
static bool tls; /* the server has a certificate */

static atomic_int ok_count;
static atomic_int tls_count; /* clients ok over TLS */
static atomic_int arrived;   /* clients past their connect (ok or not) */
static pid_t tids[CLIENTS];
static int64_t sleep_start[N], sleep_end[N];
static _Atomic(PGcancel *) cancel_for_1;
static atomic_bool query_1_done, canceller_done;

static int64_t now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* ---- the server --------------------------------------------------------- */

/* The newest /usr/lib/postgresql/<version>/bin holding both programs. */
static bool find_bin_dir(void) {
  glob_t g;
  if (glob("/usr/lib/postgresql/*/bin/postgres", 0, NULL, &g) != 0)
    return false;
  long best = -1;
  for (size_t i = 0; i < g.gl_pathc; i++) {
    const char *p = g.gl_pathv[i];
    long v = strtol(p + strlen("/usr/lib/postgresql/"), NULL, 10);
    char initdb[256];
    int n = snprintf(initdb, sizeof initdb, "%.*s/initdb",
                     (int)(strrchr(p, '/') - p), p);
    if (n <= 0 || (size_t)n >= sizeof initdb || v <= best ||
        access(p, X_OK) != 0 || access(initdb, X_OK) != 0)
      continue;
    best = v;
    snprintf(bin_dir, sizeof bin_dir, "%.*s", (int)(strrchr(p, '/') - p), p);
  }
  globfree(&g);
  return best >= 0;
}

/* fork + exec of exe as the server's user in dir, output appended to the
 * log. The parent death signal is set after the user change (which
 * clears it): a test killed from outside takes the server down with it
 * (SIGQUIT: postgres' immediate shutdown, which releases its shared
 * memory). */
static pid_t spawn(const char *exe, char *const argv[]) {
  int logfd = open(log_path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (logfd < 0) return -errno;
  pid_t parent = getpid();
  pid_t pid = fork();
  if (pid == 0) {
    int in = open("/dev/null", O_RDONLY);
    if (in < 0 || dup2(in, 0) < 0 || dup2(logfd, 1) < 0 || dup2(logfd, 2) < 0)
      _exit(127);
    if (switch_user && (setgroups(0, NULL) != 0 || setgid(run_gid) != 0 ||
                        setuid(run_uid) != 0))
      _exit(126);
    if (chdir(dir) != 0 || prctl(PR_SET_PDEATHSIG, SIGQUIT) != 0 ||
        getppid() != parent)
      _exit(125);
    execv(exe, argv);
    _exit(127);
  }
  int e = errno;
  close(logfd);
  return pid < 0 ? -e : pid;
}

static void print_log(void) {
  FILE *f = fopen(log_path, "r");
  if (!f) return;
  char line[512];
  fprintf(stderr, "hook_libpq: --- %s ---\n", log_path);
  while (fgets(line, sizeof line, f)) fputs(line, stderr);
  fclose(f);
}

static void bin_path(char *buf, size_t len, const char *name) {
  snprintf(buf, len, "%s/%s", bin_dir, name);
}

/* Runs exe to its end (bounded); 0 if it succeeded, or -errno. */
static int run_to_end(const char *exe, char *const argv[]) {
  pid_t pid = spawn(exe, argv);
  if (pid < 0) return (int)pid;
  child = pid;
  int st = 0;
  if (!hook_wait_for(pid, 30000, &st)) {
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    st = -1;
  }
  child = 0;
  if (st == -1) return -ETIMEDOUT;
  return WIFEXITED(st) && WEXITSTATUS(st) == 0 ? 0 : -EIO;
}

static int init_cluster(void) {
  char exe[320];
  bin_path(exe, sizeof exe, "initdb");
  char *argv[] = {"initdb", "-D", data_dir, "-U",   "postgres",   "-A",
                  "trust",  "-N", "-E",     "UTF8", "--locale=C", NULL};
  return run_to_end(exe, argv);
}

/* A self-signed certificate for the server's TLS (openssl comes with the
 * postgresql package, through ssl-cert); without it the test runs
 * without TLS and says so. The key is the server user's, mode 0600, as
 * postgres demands. */
static bool make_certificate(void) {
  static const char openssl[] = "/usr/bin/openssl";
  if (access(openssl, X_OK) != 0) return false;
  char *argv[] = {"openssl",
                  "req",
                  "-x509",
                  "-newkey",
                  "ec",
                  "-pkeyopt",
                  "ec_paramgen_curve:prime256v1",
                  "-nodes",
                  "-keyout",
                  "server.key",
                  "-out",
                  "server.crt",
                  "-days",
                  "2",
                  "-subj",
                  "/CN=127.0.0.1",
                  NULL};
  return run_to_end(openssl, argv) == 0;
}

static void conninfo(char *buf, size_t len, int p, bool with_tls) {
  /* The server's statement_timeout bounds every query of the test. */
  snprintf(buf, len,
           "host=127.0.0.1 port=%d dbname=postgres user=postgres "
           "connect_timeout=10 sslmode=%s "
           "options='-c statement_timeout=20000'",
           p, with_tls ? "require" : "disable");
}

/* Starts postgres on a free port; waits (bounded) until it accepts
 * connections. 0 or -errno. */
static int start_server(void) {
  for (int attempt = 0; attempt < 5; attempt++) {
    int p = hook_free_port();
    if (p < 0) return p;
    char ps[16], cert_opt[128], key_opt[128];
    snprintf(ps, sizeof ps, "%d", p);
    /* Relative paths would be the data directory's. */
    snprintf(cert_opt, sizeof cert_opt, "ssl_cert_file=%s/server.crt", dir);
    snprintf(key_opt, sizeof key_opt, "ssl_key_file=%s/server.key", dir);
    /* Room for the clients, the readiness checks and the cancel request;
     * no fsync, no autovacuum: a throwaway cluster. */
    char *argv[] = {"postgres",
                    "-D",
                    data_dir,
                    "-k",
                    dir,
                    "-p",
                    ps,
                    "-c",
                    "listen_addresses=127.0.0.1",
                    "-c",
                    "max_connections=130",
                    "-c",
                    "shared_buffers=16MB",
                    "-c",
                    "dynamic_shared_memory_type=mmap",
                    "-c",
                    "fsync=off",
                    "-c",
                    "autovacuum=off",
                    "-c",
                    tls ? "ssl=on" : "ssl=off",
                    "-c",
                    cert_opt,
                    "-c",
                    key_opt,
                    NULL};
    char exe[320];
    bin_path(exe, sizeof exe, "postgres");
    pid_t pid = spawn(exe, argv);
    if (pid < 0) return (int)pid;
    child = pid;
    char ci[256];
    conninfo(ci, sizeof ci, p, false);
    for (int64_t end = now_ms() + 20000; now_ms() < end;) {
      if (PQping(ci) == PQPING_OK) {
        port = p;
        return 0;
      }
      int st;
      if (waitpid(pid, &st, WNOHANG) == pid) { /* port taken, or broken */
        child = 0;
        break;
      }
      usleep(50000);
    }
    if (child) return -ETIMEDOUT;
  }
  return -EADDRINUSE;
}

/* Fast shutdown (SIGINT: clients are disconnected), then SIGKILL. */
static void stop_server(void) {
  pid_t pid = child;
  if (!pid) return;
  kill(pid, SIGINT);
  if (!hook_wait_for(pid, 10000, NULL)) {
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
  }
  child = 0;
}

static void cleanup(void) {
  stop_server();
  hook_remove_tree(dir);
}

/* A hang anywhere: only async-signal-safe calls, then the shell removes the
 * directory (nftw is not safe here) and reports the failure. */
static void on_watchdog(int sig) {
  (void)sig;
  static const char msg[] = "hook_libpq: watchdog: the test hung\n";
  ssize_t w = write(2, msg, sizeof msg - 1);
  (void)w;
  /* SIGQUIT: initdb removes its cluster, postgres shuts down at once. */
  pid_t pid = child;
  if (pid) {
    kill(pid, SIGQUIT);
    struct timespec ts = {0, 50000000};
    int i = 0;
    while (waitpid(pid, NULL, WNOHANG) == 0 && i++ < 200) nanosleep(&ts, NULL);
    kill(pid, SIGKILL);
  }
  char *argv[] = {"sh", "-c", "rm -rf -- \"$0\"; exit 1", dir, NULL};
  char *envp[] = {"PATH=/usr/bin:/bin", NULL};
  if (dir[0]) execve("/bin/sh", argv, envp);
  _exit(1);
}

/* ---- the clients -------------------------------------------------------- */

static PGresult *expect(PGconn *c, PGresult *r, ExecStatusType want,
                        const char *what, int i) {
  if (r && PQresultStatus(r) == want) return r;
  fprintf(stderr, "hook_libpq: client %d: %s: %s %s", i, what,
          r ? PQresStatus(PQresultStatus(r)) : "(no result)",
          PQerrorMessage(c));
  PQclear(r);
  return NULL;
}

/* A query the server cancels: SQLSTATE 57014 (query_canceled), then the
 * connection still serves queries. */
static bool expect_cancelled(PGconn *c, PGresult *r, int64_t t0, int i) {
  int64_t ms = now_ms() - t0;
  const char *state = r ? PQresultErrorField(r, PG_DIAG_SQLSTATE) : NULL;
  bool ok = r && PQresultStatus(r) == PGRES_FATAL_ERROR && state &&
            !strcmp(state, "57014") && ms < 5000;
  if (!ok)
    fprintf(stderr,
            "hook_libpq: client %d: expected a cancelled query, got %s "
            "(SQLSTATE %s) after %lld ms\n",
            i, r ? PQresStatus(PQresultStatus(r)) : "(no result)",
            state ? state : "none", (long long)ms);
  PQclear(r);
  if (!ok) return false;
  r = expect(c, PQexec(c, "SELECT 41 + 1"), PGRES_TUPLES_OK, "after cancel", i);
  ok = r && !strcmp(PQgetvalue(r, 0, 0), "42");
  PQclear(r);
  return ok;
}

static bool statement_timeout_case(PGconn *c, int i) {
  PGresult *r = expect(c, PQexec(c, "SET statement_timeout = 100"),
                       PGRES_COMMAND_OK, "SET", i);
  if (!r) return false;
  PQclear(r);
  int64_t t0 = now_ms();
  return expect_cancelled(c, PQexec(c, "SELECT pg_sleep(10)"), t0, i);
}

/* Client 1 waits in PQgetResult while client N cancels its query. */
static bool pqcancel_case(PGconn *c, int i) {
  PGcancel *cancel = PQgetCancel(c);
  if (!cancel || !PQsendQuery(c, "SELECT pg_sleep(10)")) {
    fprintf(stderr, "hook_libpq: client %d: send: %s", i, PQerrorMessage(c));
    return false;
  }
  int64_t t0 = now_ms();
  atomic_store(&cancel_for_1, cancel);
  PGresult *r = PQgetResult(c);
  atomic_store(&query_1_done, true);
  bool ok = expect_cancelled(c, r, t0, i);
  while ((r = PQgetResult(c)) != NULL) PQclear(r);
  /* The canceller may still be in PQcancel: a leak beats a use after
   * free if it never finishes. */
  for (int64_t end = now_ms() + 10000;
       !atomic_load(&canceller_done) && now_ms() < end;)
    usleep(2000);
  if (atomic_load(&canceller_done)) PQfreeCancel(cancel);
  return ok;
}

static bool cancel_query_1(void) {
  PGcancel *cancel;
  for (int64_t end = now_ms() + 10000;
       !(cancel = atomic_load(&cancel_for_1));) {
    if (now_ms() >= end) return false;
    usleep(5000);
  }
  /* A cancel request the backend gets before the query cancels nothing
   * (a loaded machine): sent again until the query ends. */
  for (int k = 0; k < 40; k++) {
    usleep(100000);
    if (atomic_load(&query_1_done)) return true;
    char err[256];
    if (!PQcancel(cancel, err, sizeof err)) {
      fprintf(stderr, "hook_libpq: PQcancel: %s\n", err);
      return false;
    }
  }
  return atomic_load(&query_1_done);
}

static bool canceller(void) {
  bool ok = cancel_query_1();
  atomic_store(&canceller_done, true);
  return ok;
}

static bool run_client(PGconn *c, int i) {
  char a[16], b[32];
  snprintf(a, sizeof a, "%d", i * 7);
  snprintf(b, sizeof b, "client-%d", i);
  const char *values[2] = {a, b};
  PGresult *r = expect(c,
                       PQexecParams(c, "SELECT $1::int + 1, $2::text || '!'", 2,
                                    NULL, values, NULL, NULL, 0),
                       PGRES_TUPLES_OK, "SELECT $1", i);
  if (!r) return false;
  char want[40];
  snprintf(want, sizeof want, "%s!", b);
  bool ok = PQntuples(r) == 1 && PQnfields(r) == 2 &&
            atoi(PQgetvalue(r, 0, 0)) == i * 7 + 1 &&
            !strcmp(PQgetvalue(r, 0, 1), want);
  PQclear(r);
  if (!ok) {
    fprintf(stderr, "hook_libpq: client %d: wrong values\n", i);
    return false;
  }
  return true;
}

/* Every client connects first, so the sleeps start together. */
static void wait_for_all(void) {
  atomic_fetch_add(&arrived, 1);
  for (int64_t end = now_ms() + 20000;
       atomic_load(&arrived) < CLIENTS && now_ms() < end;)
    usleep(2000);
}

static void client(int i) {
  tids[i] = (pid_t)syscall(SYS_gettid);
  if (i == N) {
    wait_for_all();
    if (canceller()) atomic_fetch_add(&ok_count, 1);
    return;
  }
  /* The odd clients' traffic goes through OpenSSL. */
  bool with_tls = tls && i % 2;
  char ci[256];
  conninfo(ci, sizeof ci, port, with_tls);
  PGconn *c = PQconnectdb(ci);
  if (PQstatus(c) != CONNECTION_OK) {
    fprintf(stderr, "hook_libpq: client %d: connect: %s", i, PQerrorMessage(c));
    PQfinish(c);
    wait_for_all();
    return;
  }
  bool ok = PQsslInUse(c) == with_tls;
  if (!ok) fprintf(stderr, "hook_libpq: client %d: TLS is not as asked\n", i);
  ok = ok && run_client(c, i);
  wait_for_all();
  if (ok) {
    sleep_start[i] = now_ms();
    PGresult *r = expect(c, PQexec(c, "SELECT pg_sleep(0.2)"), PGRES_TUPLES_OK,
                         "pg_sleep", i);
    sleep_end[i] = now_ms();
    ok = r && sleep_end[i] - sleep_start[i] >= SLEEP_MS - 10;
    PQclear(r);
  }
  if (ok && i == 0) ok = statement_timeout_case(c, i);
  if (ok && i == 1) ok = pqcancel_case(c, i);
  if (ok) atomic_fetch_add(&ok_count, 1);
  if (ok && with_tls) atomic_fetch_add(&tls_count, 1);
  PQfinish(c);
}

/* Sets up the user to run the server as: ourselves, or as root the
 * package's `postgres` user. */
static bool pick_user(void) {
  if (geteuid() != 0) return true;
  struct passwd *pw = getpwnam("postgres");
  if (!pw) return false;
  run_uid = pw->pw_uid;
  run_gid = pw->pw_gid;
  switch_user = true;
  return true;
}

static int fail(const char *what, int err) {
  fprintf(stderr, "hook_libpq: %s: %s\n", what, strerror(err));
  print_log();
  cleanup();
  return 1;
}

int main(void) {
  if (!find_bin_dir()) {
    printf("hook_libpq: SKIP: PostgreSQL's server is not installed "
           "(scripts/install-deps.sh installs postgresql)\n");
    return 77;
  }
  if (!pick_user()) {
    printf("hook_libpq: SKIP: running as root and there is no postgres "
           "user to run the server as\n");
    return 77;
  }
  bool under_run = iof_env_current() != NULL;
  snprintf(dir, sizeof dir, "/tmp/iof-pg-XXXXXX");
  if (!mkdtemp(dir)) {
    dir[0] = '\0';
    return fail("mkdtemp", errno);
  }
  signal(SIGALRM, on_watchdog);
  alarm(WATCHDOG_S);
  snprintf(data_dir, sizeof data_dir, "%s/data", dir);
  snprintf(log_path, sizeof log_path, "%s/log", dir);
  if (switch_user && chown(dir, run_uid, run_gid) != 0)
    return fail("chown", errno);
  int64_t t_init = now_ms();
  int r = init_cluster();
  if (r < 0) return fail("initdb", -r);
  tls = make_certificate();
  int64_t t_start = now_ms();
  r = start_server();
  if (r < 0) return fail("postgres", -r);
  int64_t t0 = now_ms();
  r = hook_run_clients(CLIENTS, under_run, client);
  int64_t elapsed = now_ms() - t0;
  if (r < 0) return fail("clients", -r);
  int64_t t_stop = now_ms();
  cleanup();
  int64_t stop_ms = now_ms() - t_stop;
  alarm(0);

  /* The sleeps overlap when the last one started before the first ended. */
  int64_t last_start = 0, first_end = INT64_MAX, first_start = INT64_MAX,
          last_end = 0;
  for (int i = 0; i < N; i++) {
    if (!sleep_end[i]) continue;
    if (sleep_start[i] > last_start) last_start = sleep_start[i];
    if (sleep_start[i] < first_start) first_start = sleep_start[i];
    if (sleep_end[i] < first_end) first_end = sleep_end[i];
    if (sleep_end[i] > last_end) last_end = sleep_end[i];
  }
  bool overlap = last_start < first_end;
  int64_t sleeps_ms = last_end - first_start;
  int distinct = 0;
  for (int i = 0; i < CLIENTS; i++) {
    bool seen = false;
    for (int j = 0; j < i; j++) seen |= tids[j] == tids[i];
    distinct += !seen;
  }
  /* libpq's waits went to the fiber layer, none blocked the thread (the
   * counters count only under IOF_HOOK_VERBOSE). */
  static const char *const calls[] = {"poll", "connect", "recv", "send"};
  unsigned long blocked = 0;
  for (size_t k = 0; k < sizeof calls / sizeof *calls; k++) {
    unsigned long b = hook_count(calls[k], 1);
    blocked += b == ~0ul ? 0 : b;
  }
  int ok = atomic_load(&ok_count);
  printf("hook_libpq: %s: %d/%d clients ok (%d over TLS%s) in %lld ms; the "
         "%d pg_sleep(0.2) %s, in %lld ms; %d distinct OS thread(s), %lu "
         "blocking call(s); initdb %lld ms, server start %lld ms, stop %lld "
         "ms\n",
         under_run ? "iofiber-run" : "hook linked", ok, CLIENTS,
         atomic_load(&tls_count),
         tls ? "" : ": no openssl to make a certificate", (long long)elapsed, N,
         overlap ? "overlapped" : "did NOT overlap", (long long)sleeps_ms,
         distinct, blocked, (long long)(t_start - t_init),
         (long long)(t0 - t_start), (long long)stop_ms);
  /* iofiber-run --threads K spreads the "threads" over K io threads; the
   * hook takes IOF_THREADS out of main's environment, so the test is told
   * K by a variable of its own. */
  const char *th = getenv("IOF_TEST_IO_THREADS");
  int io_threads = under_run && th && atoi(th) > 0 ? atoi(th) : 1;
  bool pass = ok == CLIENTS && atomic_load(&tls_count) == (tls ? N / 2 : 0) &&
              overlap && sleeps_ms >= SLEEP_MS - 10 && sleeps_ms < 5000 &&
              elapsed < 20000 && distinct <= io_threads && blocked == 0;
  return pass ? 0 : 1;
}
