/* A real blocking client library (MariaDB Connector/C, libmariadb: connect,
 * poll, recv, send inside libmariadb.so, and OpenSSL's read/write under
 * it) called from 100 fibers at once against a MariaDB server this program
 * starts in a temporary directory on 127.0.0.1. Each client logs in with a
 * password (mysql_native_password), checks a prepared statement's values
 * (binary protocol), inserts its row, waits until every client is
 * connected, then runs `SELECT SLEEP(0.2)`. On fibers the 100 sleeps are
 * all in progress at one instant (about 0.2 to 0.3 s from the first start
 * to the last end, on one OS thread); a blocked thread would need 100 x
 * 200 ms. The odd clients connect over TLS with a certificate the test
 * makes. Client 0 also has a query ended by max_statement_time, and client
 * 1 one ended by `KILL QUERY` from a 101st client while it waits for the
 * result. At the end the table holds the 100 rows.
 *
 * The same binary runs two ways, like hook_libpq:
 * - hook linked, main on its thread: it launches the clients as fibers;
 * - under iofiber-run (main is already a fiber): it makes pthreads, which
 *   the hook turns into fibers.
 * As root the server runs as the `mysql` user the Debian package creates,
 * or as root where there is none. Exit 0: pass; 77: the MariaDB server is
 * not installed; 1: failure. The server is stopped and its directory removed on
 * every exit, including the watchdog's. */
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <grp.h>
#include <mysql.h>
#include <pwd.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
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
/* Client N kills client 1's query; it counts among the clients. */
#define CLIENTS (N + 1)
#define WATCHDOG_S 60
#define USER "iof"
#define PASSWORD "iof-secret"
/* MariaDB's error codes for a query ended by KILL QUERY and by
 * max_statement_time. */
#define ER_INTERRUPTED 1317
#define ER_STATEMENT_TIMEOUT 1969

static char dir[64];      /* the temporary directory; "" when removed */
static char data_dir[96]; /* the server's data, inside dir */
static char sock_path[96];
static char log_path[96];
static const char *server_exe, *install_exe;
/* The install script or server running, for the cleanup; 0 when none. */
static volatile pid_t child;
static int port;
static uid_t run_uid;
static gid_t run_gid;
static bool switch_user;
static const char *root_opt; /* "--user=root" when run as root */
static bool tls;             /* the server has a certificate */

static atomic_int ok_count;
static atomic_int tls_count; /* clients ok over TLS */
static atomic_int arrived;   /* clients past their connect (ok or not) */
static pid_t tids[CLIENTS];
static int64_t sleep_start[N], sleep_end[N];
static atomic_ulong id_of_1; /* client 1's connection id, 0 until known */
static atomic_bool query_1_done, canceller_done;

static int64_t now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* ---- the server --------------------------------------------------------- */

static const char *first_exe(const char *const *c, size_t n) {
  for (size_t i = 0; i < n; i++)
    if (access(c[i], X_OK) == 0) return c[i];
  return NULL;
}

static bool find_server(void) {
  static const char *const servers[] = {"/usr/sbin/mariadbd",
                                        "/usr/sbin/mysqld"};
  static const char *const installers[] = {"/usr/bin/mariadb-install-db",
                                           "/usr/bin/mysql_install_db"};
  server_exe = first_exe(servers, 2);
  install_exe = first_exe(installers, 2);
  return server_exe && install_exe;
}

/* fork + exec of exe as the server's user in dir, output appended to the
 * log. The parent death signal is set after the user change (which
 * clears it): a test killed from outside takes the server down with it. */
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
    if (chdir(dir) != 0 || prctl(PR_SET_PDEATHSIG, SIGKILL) != 0 ||
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
  fprintf(stderr, "hook_mariadb: --- %s ---\n", log_path);
  while (fgets(line, sizeof line, f)) fputs(line, stderr);
  fclose(f);
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

/* The system tables, with root@localhost on the socket without password;
 * a small redo log and buffer pool: a throwaway server. Its own temporary
 * directory: two bootstraps at once in /tmp (ctest -j) collided on their
 * temporary tables' files. */
static int install_db(void) {
  char datadir_opt[128], tmpdir_opt[128];
  snprintf(datadir_opt, sizeof datadir_opt, "--datadir=%s", data_dir);
  snprintf(tmpdir_opt, sizeof tmpdir_opt, "--tmpdir=%s", dir);
  char *argv[] = {"mariadb-install-db",
                  "--no-defaults",
                  datadir_opt,
                  tmpdir_opt,
                  "--auth-root-authentication-method=normal",
                  "--skip-test-db",
                  "--skip-name-resolve",
                  "--innodb-log-file-size=4M",
                  "--innodb-buffer-pool-size=16M",
                  (char *)root_opt,
                  NULL};
  return run_to_end(install_exe, argv);
}

/* A self-signed certificate for the server's TLS; without openssl the test
 * runs without TLS and says so. */
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

/* root on the server's socket, for the setup and the final check. */
static MYSQL *admin_connect(void) {
  MYSQL *m = mysql_init(NULL);
  if (!m) return NULL;
  unsigned t = 2;
  mysql_options(m, MYSQL_OPT_CONNECT_TIMEOUT, &t);
  if (!mysql_real_connect(m, NULL, "root", "", NULL, 0, sock_path, 0)) {
    mysql_close(m);
    return NULL;
  }
  return m;
}

static bool admin_query(MYSQL *m, const char *q) {
  if (mysql_query(m, q) == 0) return true;
  fprintf(stderr, "hook_mariadb: %s: %s\n", q, mysql_error(m));
  return false;
}

/* The clients' user (a password: the login's scramble exchange) and the
 * table they fill. */
static bool set_up(MYSQL *m) {
  return admin_query(m, "CREATE USER " USER
                        "@'127.0.0.1' IDENTIFIED BY '" PASSWORD "'") &&
         admin_query(m, "GRANT ALL ON *.* TO " USER "@'127.0.0.1'") &&
         admin_query(m, "CREATE DATABASE iof") &&
         admin_query(m, "CREATE TABLE iof.t (id INT PRIMARY KEY, "
                        "v VARCHAR(64)) ENGINE=InnoDB");
}

/* Starts mariadbd on a free port; waits (bounded) until it accepts
 * connections, then sets up the user and the table. 0 or -errno. */
static int start_server(void) {
  for (int attempt = 0; attempt < 5; attempt++) {
    int p = hook_free_port();
    if (p < 0) return p;
    char port_opt[32], datadir_opt[128], sock_opt[128], pid_opt[128],
        log_opt[128], cert_opt[128], key_opt[128], tmpdir_opt[128];
    snprintf(tmpdir_opt, sizeof tmpdir_opt, "--tmpdir=%s", dir);
    snprintf(port_opt, sizeof port_opt, "--port=%d", p);
    snprintf(datadir_opt, sizeof datadir_opt, "--datadir=%s", data_dir);
    snprintf(sock_opt, sizeof sock_opt, "--socket=%s", sock_path);
    snprintf(pid_opt, sizeof pid_opt, "--pid-file=%s/pid", dir);
    snprintf(log_opt, sizeof log_opt, "--log-error=%s", log_path);
    snprintf(cert_opt, sizeof cert_opt, "--ssl-cert=%s/server.crt", dir);
    snprintf(key_opt, sizeof key_opt, "--ssl-key=%s/server.key", dir);
    /* Room for the clients and the setup; the log goes to the test's. */
    char *argv[] = {"mariadbd",
                    "--no-defaults",
                    datadir_opt,
                    sock_opt,
                    port_opt,
                    pid_opt,
                    log_opt,
                    tmpdir_opt,
                    "--bind-address=127.0.0.1",
                    "--skip-name-resolve",
                    "--max-connections=200",
                    "--innodb-log-file-size=4M",
                    "--innodb-buffer-pool-size=16M",
                    "--skip-log-bin",
                    NULL, /* the certificate and key, when made */
                    NULL,
                    NULL, /* --user=root */
                    NULL};
    int argc = 14;
    if (tls) {
      argv[argc++] = cert_opt;
      argv[argc++] = key_opt;
    }
    if (root_opt) argv[argc++] = (char *)root_opt;
    pid_t pid = spawn(server_exe, argv);
    if (pid < 0) return (int)pid;
    child = pid;
    for (int64_t end = now_ms() + 30000; now_ms() < end;) {
      MYSQL *m = admin_connect();
      if (m) {
        bool ok = set_up(m);
        mysql_close(m);
        if (!ok) return -EIO;
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

/* SIGTERM: a normal shutdown (clients are disconnected), then SIGKILL. */
static void stop_server(void) {
  pid_t pid = child;
  if (!pid) return;
  kill(pid, SIGTERM);
  if (!hook_wait_for(pid, 20000, NULL)) {
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
  static const char msg[] = "hook_mariadb: watchdog: the test hung\n";
  ssize_t w = write(2, msg, sizeof msg - 1);
  (void)w;
  pid_t pid = child;
  if (pid) {
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
  }
  char *argv[] = {"sh", "-c", "rm -rf -- \"$0\"; exit 1", dir, NULL};
  char *envp[] = {"PATH=/usr/bin:/bin", NULL};
  if (dir[0]) execve("/bin/sh", argv, envp);
  _exit(1);
}

/* ---- the clients -------------------------------------------------------- */

static bool failed(MYSQL *m, const char *what, int i) {
  fprintf(stderr, "hook_mariadb: client %d: %s: %s (%u)\n", i, what,
          mysql_error(m), mysql_errno(m));
  return false;
}

/* The single value of a one-row, one-column query, as text. */
static bool query_value(MYSQL *m, const char *q, char *out, size_t len, int i) {
  if (mysql_query(m, q) != 0) return failed(m, q, i);
  MYSQL_RES *res = mysql_store_result(m);
  if (!res) return failed(m, q, i);
  MYSQL_ROW row = mysql_fetch_row(res);
  bool ok = row && row[0] && mysql_num_fields(res) == 1;
  if (ok) snprintf(out, len, "%s", row[0]);
  mysql_free_result(res);
  if (!ok) fprintf(stderr, "hook_mariadb: client %d: %s: no value\n", i, q);
  return ok;
}

/* `SELECT ? + 1, CONCAT(?, '!')` through a prepared statement. */
static bool prepared_case(MYSQL *m, int i) {
  MYSQL_STMT *st = mysql_stmt_init(m);
  if (!st) return failed(m, "stmt_init", i);
  static const char q[] = "SELECT ? + 1, CONCAT(?, '!')";
  bool ok = false;
  if (mysql_stmt_prepare(st, q, sizeof q - 1) != 0) goto out;
  long long a = (long long)i * 7;
  char b[32];
  snprintf(b, sizeof b, "client-%d", i);
  unsigned long b_len = strlen(b);
  MYSQL_BIND in[2];
  memset(in, 0, sizeof in);
  in[0].buffer_type = MYSQL_TYPE_LONGLONG;
  in[0].buffer = &a;
  in[1].buffer_type = MYSQL_TYPE_STRING;
  in[1].buffer = b;
  in[1].buffer_length = b_len;
  in[1].length = &b_len;
  if (mysql_stmt_bind_param(st, in) != 0 || mysql_stmt_execute(st) != 0)
    goto out;
  long long sum = 0;
  char text[40] = "";
  unsigned long text_len = 0;
  MYSQL_BIND outb[2];
  memset(outb, 0, sizeof outb);
  outb[0].buffer_type = MYSQL_TYPE_LONGLONG;
  outb[0].buffer = &sum;
  outb[1].buffer_type = MYSQL_TYPE_STRING;
  outb[1].buffer = text;
  outb[1].buffer_length = sizeof text - 1;
  outb[1].length = &text_len;
  if (mysql_stmt_bind_result(st, outb) != 0 || mysql_stmt_fetch(st) != 0)
    goto out;
  text[text_len < sizeof text ? text_len : sizeof text - 1] = '\0';
  char want[40];
  snprintf(want, sizeof want, "%s!", b);
  ok = sum == a + 1 && !strcmp(text, want) &&
       mysql_stmt_fetch(st) == MYSQL_NO_DATA;
  if (!ok) fprintf(stderr, "hook_mariadb: client %d: wrong values\n", i);
out:
  if (!ok && mysql_stmt_errno(st))
    fprintf(stderr, "hook_mariadb: client %d: statement: %s\n", i,
            mysql_stmt_error(st));
  mysql_stmt_close(st);
  return ok;
}

static bool insert_row(MYSQL *m, int i) {
  char q[96];
  snprintf(q, sizeof q, "INSERT INTO t VALUES (%d, 'client-%d')", i, i);
  return mysql_query(m, q) == 0 || failed(m, "INSERT", i);
}

/* A query the server ended with error `code` quickly (the error comes
 * with the result, after the columns: mysql_query may have succeeded);
 * then the connection still serves queries. */
static bool expect_ended(MYSQL *m, int r, unsigned code, int64_t t0, int i) {
  MYSQL_RES *res = r == 0 ? mysql_store_result(m) : NULL;
  int64_t ms = now_ms() - t0;
  bool ok = !res && mysql_errno(m) == code && ms < 5000;
  if (!ok)
    fprintf(stderr,
            "hook_mariadb: client %d: expected error %u, got %s (%u) after "
            "%lld ms\n",
            i, code, res ? "a result" : mysql_error(m), mysql_errno(m),
            (long long)ms);
  if (res) mysql_free_result(res);
  return ok;
}

static bool after_end(MYSQL *m, int i) {
  char v[16];
  return query_value(m, "SELECT 41 + 1", v, sizeof v, i) && !strcmp(v, "42");
}

static bool statement_timeout_case(MYSQL *m, int i) {
  int64_t t0 = now_ms();
  int r = mysql_query(
      m, "SET STATEMENT max_statement_time=0.1 FOR SELECT SLEEP(10)");
  return expect_ended(m, r, ER_STATEMENT_TIMEOUT, t0, i) && after_end(m, i);
}

/* Client 1 waits for its result while client N kills the query. */
static bool kill_query_case(MYSQL *m, int i) {
  atomic_store(&id_of_1, mysql_thread_id(m));
  int64_t t0 = now_ms();
  int r = mysql_query(m, "SELECT SLEEP(10)");
  bool ok = expect_ended(m, r, ER_INTERRUPTED, t0, i);
  atomic_store(&query_1_done, true);
  /* A late KILL QUERY must not end the next query instead. */
  for (int64_t end = now_ms() + 10000;
       !atomic_load(&canceller_done) && now_ms() < end;)
    usleep(2000);
  return ok && after_end(m, i);
}

static MYSQL *connect_client(int i, bool with_tls) {
  MYSQL *m = mysql_init(NULL);
  if (!m) return NULL;
  /* Bounds on every wait of the test. */
  unsigned connect_s = 10, io_s = 30;
  mysql_options(m, MYSQL_OPT_CONNECT_TIMEOUT, &connect_s);
  mysql_options(m, MYSQL_OPT_READ_TIMEOUT, &io_s);
  mysql_options(m, MYSQL_OPT_WRITE_TIMEOUT, &io_s);
  if (with_tls) {
    my_bool yes = 1, no = 0;
    mysql_options(m, MYSQL_OPT_SSL_ENFORCE, &yes);
    mysql_options(m, MYSQL_OPT_SSL_VERIFY_SERVER_CERT, &no);
  }
  if (!mysql_real_connect(m, "127.0.0.1", USER, PASSWORD, "iof", (unsigned)port,
                          NULL, 0)) {
    failed(m, "connect", i);
    mysql_close(m);
    return NULL;
  }
  return m;
}

/* KILL QUERY for client 1's SLEEP(10), sent again until the query ends (one
 * that arrives before the query started may end nothing). */
static bool kill_query_1(int i) {
  unsigned long id;
  for (int64_t end = now_ms() + 10000; !(id = atomic_load(&id_of_1));) {
    if (now_ms() >= end) return false;
    usleep(5000);
  }
  MYSQL *m = connect_client(i, false);
  if (!m) return false;
  char q[48];
  snprintf(q, sizeof q, "KILL QUERY %lu", id);
  bool ok = false;
  for (int k = 0; k < 40; k++) {
    usleep(100000);
    if ((ok = atomic_load(&query_1_done))) break;
    if (mysql_query(m, q) != 0) {
      failed(m, q, i);
      break;
    }
  }
  mysql_close(m);
  return ok;
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
    bool ok = kill_query_1(i);
    atomic_store(&canceller_done, true);
    if (ok) atomic_fetch_add(&ok_count, 1);
    return;
  }
  /* The odd clients' traffic goes through OpenSSL. */
  bool with_tls = tls && i % 2;
  MYSQL *m = connect_client(i, with_tls);
  if (!m) {
    wait_for_all();
    return;
  }
  bool ok = (mysql_get_ssl_cipher(m) != NULL) == with_tls;
  if (!ok) fprintf(stderr, "hook_mariadb: client %d: TLS is not as asked\n", i);
  ok = ok && prepared_case(m, i) && insert_row(m, i);
  wait_for_all();
  if (ok) {
    char v[16] = "";
    sleep_start[i] = now_ms();
    ok = query_value(m, "SELECT SLEEP(0.2)", v, sizeof v, i);
    sleep_end[i] = now_ms();
    ok =
        ok && !strcmp(v, "0") && sleep_end[i] - sleep_start[i] >= SLEEP_MS - 10;
  }
  if (ok && i == 0) ok = statement_timeout_case(m, i);
  if (ok && i == 1) ok = kill_query_case(m, i);
  if (ok) atomic_fetch_add(&ok_count, 1);
  if (ok && with_tls) atomic_fetch_add(&tls_count, 1);
  mysql_close(m);
}

/* The rows the clients inserted: N of them, ids 0..N-1. */
static bool rows_ok(void) {
  MYSQL *m = admin_connect();
  if (!m) return false;
  char v[64] = "";
  bool ok = query_value(m, "SELECT CONCAT(COUNT(*), ' ', SUM(id)) FROM iof.t",
                        v, sizeof v, -1);
  mysql_close(m);
  char want[64];
  snprintf(want, sizeof want, "%d %d", N, N * (N - 1) / 2);
  if (ok && strcmp(v, want))
    fprintf(stderr, "hook_mariadb: rows: %s, expected %s\n", v, want);
  return ok && !strcmp(v, want);
}

/* Sets up the user to run the server as: ourselves; as root the `mysql`
 * user the server package creates, or, with the server's core package
 * alone (no such user), root, which mariadbd accepts when told so. */
static void pick_user(void) {
  if (geteuid() != 0) return;
  struct passwd *pw = getpwnam("mysql");
  if (!pw) {
    root_opt = "--user=root";
    return;
  }
  run_uid = pw->pw_uid;
  run_gid = pw->pw_gid;
  switch_user = true;
}

static int fail(const char *what, int err) {
  fprintf(stderr, "hook_mariadb: %s: %s\n", what, strerror(err));
  print_log();
  cleanup();
  return 1;
}

int main(void) {
  if (!find_server()) {
    printf("hook_mariadb: SKIP: the MariaDB server is not installed "
           "(scripts/install-deps.sh installs mariadb-server)\n");
    return 77;
  }
  pick_user();
  bool under_run = iof_env_current() != NULL;
  if (mysql_library_init(0, NULL, NULL) != 0) return fail("library", EIO);
  snprintf(dir, sizeof dir, "/tmp/iof-mdb-XXXXXX");
  if (!mkdtemp(dir)) {
    dir[0] = '\0';
    return fail("mkdtemp", errno);
  }
  signal(SIGALRM, on_watchdog);
  alarm(WATCHDOG_S);
  snprintf(data_dir, sizeof data_dir, "%s/data", dir);
  snprintf(sock_path, sizeof sock_path, "%s/sock", dir);
  snprintf(log_path, sizeof log_path, "%s/log", dir);
  if (switch_user && chown(dir, run_uid, run_gid) != 0)
    return fail("chown", errno);
  int64_t t_init = now_ms();
  int r = install_db();
  if (r < 0) return fail("mariadb-install-db", -r);
  tls = make_certificate();
  int64_t t_start = now_ms();
  r = start_server();
  if (r < 0) return fail("mariadbd", -r);
  int64_t t0 = now_ms();
  r = hook_run_clients(CLIENTS, under_run, client);
  int64_t elapsed = now_ms() - t0;
  if (r < 0) return fail("clients", -r);
  bool rows = rows_ok();
  int64_t t_stop = now_ms();
  cleanup();
  int64_t stop_ms = now_ms() - t_stop;
  alarm(0);
  mysql_library_end();

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
  /* libmariadb's and OpenSSL's waits went to the fiber layer, none blocked
   * the thread (the counters count only under IOF_HOOK_VERBOSE). */
  static const char *const calls[] = {"poll", "connect", "recv",
                                      "send", "read",    "write"};
  unsigned long blocked = 0;
  for (size_t k = 0; k < sizeof calls / sizeof *calls; k++) {
    unsigned long b = hook_count(calls[k], 1);
    blocked += b == ~0ul ? 0 : b;
  }
  int ok = atomic_load(&ok_count);
  printf("hook_mariadb: %s: %d/%d clients ok (%d over TLS%s) in %lld ms, "
         "rows %s; the %d SLEEP(0.2) %s, in %lld ms; %d distinct OS "
         "thread(s), %lu blocking call(s); install %lld ms, server start "
         "%lld ms, stop %lld ms\n",
         under_run ? "iofiber-run" : "hook linked", ok, CLIENTS,
         atomic_load(&tls_count),
         tls ? "" : ": no openssl to make a certificate", (long long)elapsed,
         rows ? "right" : "WRONG", N,
         overlap ? "overlapped" : "did NOT overlap", (long long)sleeps_ms,
         distinct, blocked, (long long)(t_start - t_init),
         (long long)(t0 - t_start), (long long)stop_ms);
  /* iofiber-run --threads K spreads the "threads" over K io threads; the
   * hook takes IOF_THREADS out of main's environment, so the test is told
   * K by a variable of its own. */
  const char *th = getenv("IOF_TEST_IO_THREADS");
  int io_threads = under_run && th && atoi(th) > 0 ? atoi(th) : 1;
  bool pass = ok == CLIENTS && rows &&
              atomic_load(&tls_count) == (tls ? N / 2 : 0) && overlap &&
              sleeps_ms >= SLEEP_MS - 10 && sleeps_ms < 5000 &&
              elapsed < 20000 && distinct <= io_threads && blocked == 0;
  return pass ? 0 : 1;
}
