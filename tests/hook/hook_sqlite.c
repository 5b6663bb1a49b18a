/* A real library that waits without sockets (SQLite: fcntl byte-range
 * locks on the database file, and a busy handler that sleeps with usleep
 * between tries) called from 50 fibers at once, each with its own
 * connection to one database file in a temporary directory.
 *
 * - Another process (forked first, no fibers) holds an exclusive lock on
 *   the file for 400 ms while the fibers start: their BEGIN IMMEDIATE gets
 *   SQLITE_BUSY from the kernel's lock and SQLite's busy handler
 *   (sqlite3_busy_timeout, 10 s) sleeps and tries again. A 51st fiber ticks
 * every 5 ms meanwhile: on fibers it keeps ticking while the others wait; if
 * the busy handler's sleeps held the thread it would not tick at all.
 * - Then each fiber makes 10 transactions that increment one shared
 *   counter and insert a row, and yields in the middle of each (a 1 ms
 *   sleep holding the write lock): the others find the database locked by
 *   a fiber of their own thread and wait in the busy handler until it
 *   commits. A sleep that held the thread would never let the lock holder
 *   run again; the waiter would time out.
 * At the end the counter is 50 x 10 and the table holds every (fiber, k)
 * once. IOF_HOOK_VERBOSE=1: the sleeps went to the fiber layer.
 *
 * The same binary runs two ways, like hook_libpq:
 * - hook linked, main on its thread: it launches the clients as fibers;
 * - under iofiber-run (main is already a fiber): it makes pthreads, which
 *   the hook turns into fibers.
 * Exit 0: pass; 1: failure. The directory is removed on every exit,
 * including the watchdog's. */
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <pthread.h>
#include <signal.h>
#include <sqlite3.h>
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

#define N 50
#define M 10
#define HOLD_MS 400
#define TICK_MS 5
/* The workers and the ticker. */
#define FIBERS (N + 1)
#define WATCHDOG_S 60

static char dir[64]; /* the temporary directory; "" when removed */
static char db_path[96];
static volatile pid_t child;

static atomic_int ok_count;
static atomic_int done_count; /* workers finished, ok or not */
static pid_t tids[FIBERS];
static int64_t t_start;          /* the fibers start */
static _Atomic int64_t first_tx; /* the first BEGIN IMMEDIATE that got in */
static int64_t ticks_at[100000]; /* the ticker's wake-ups */
static int ticks;

static int64_t now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void cleanup(void) {
  pid_t pid = child;
  if (pid) {
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    child = 0;
  }
  hook_remove_tree(dir);
}

static void on_watchdog(int sig) {
  (void)sig;
  static const char msg[] = "hook_sqlite: watchdog: the test hung\n";
  ssize_t w = write(2, msg, sizeof msg - 1);
  (void)w;
  if (child) kill(child, SIGKILL);
  char *argv[] = {"sh", "-c", "rm -rf -- \"$0\"; exit 1", dir, NULL};
  char *envp[] = {"PATH=/usr/bin:/bin", NULL};
  if (dir[0]) execve("/bin/sh", argv, envp);
  _exit(1);
}

static bool exec_sql(sqlite3 *db, const char *sql, const char *who) {
  char *err = NULL;
  if (sqlite3_exec(db, sql, NULL, NULL, &err) == SQLITE_OK) return true;
  fprintf(stderr, "hook_sqlite: %s: %s: %s\n", who, sql,
          err ? err : sqlite3_errmsg(db));
  sqlite3_free(err);
  return false;
}

static sqlite3 *open_db(const char *who) {
  sqlite3 *db = NULL;
  if (sqlite3_open_v2(db_path, &db, SQLITE_OPEN_READWRITE, NULL) != SQLITE_OK) {
    fprintf(stderr, "hook_sqlite: %s: open: %s\n", who,
            db ? sqlite3_errmsg(db) : "no memory");
    sqlite3_close(db);
    return NULL;
  }
  /* SQLite's own busy handler: sleeps of 1 to 100 ms (usleep), up to 10 s
   * in all, until the lock frees. No fsync: the test is about the locks,
   * not the disk. */
  if (sqlite3_busy_timeout(db, 10000) != SQLITE_OK ||
      !exec_sql(db, "PRAGMA synchronous=OFF", who)) {
    sqlite3_close(db);
    return NULL;
  }
  return db;
}

static bool create_db(void) {
  sqlite3 *db = NULL;
  bool ok = sqlite3_open(db_path, &db) == SQLITE_OK &&
            exec_sql(db,
                     "CREATE TABLE counter (id INTEGER PRIMARY KEY, n "
                     "INTEGER NOT NULL);"
                     "INSERT INTO counter VALUES (0, 0);"
                     "CREATE TABLE rows (fiber INTEGER, k INTEGER, "
                     "PRIMARY KEY (fiber, k));",
                     "create");
  sqlite3_close(db);
  return ok;
}

/* The other process: an exclusive lock on the file for HOLD_MS, told to
 * the parent through the pipe once taken. Forked before the parent opens
 * a connection (SQLite's lock records must not cross a fork). */
static pid_t lock_holder(int *ready_fd) {
  int p[2];
  if (pipe2(p, O_CLOEXEC) != 0) return -errno;
  pid_t parent = getpid();
  pid_t pid = fork();
  if (pid == 0) {
    close(p[0]);
    if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0 || getppid() != parent)
      _exit(125);
    sqlite3 *db = open_db("lock holder");
    if (!db || !exec_sql(db, "BEGIN EXCLUSIVE", "lock holder")) _exit(1);
    if (write(p[1], "L", 1) != 1) _exit(1);
    usleep(HOLD_MS * 1000);
    bool ok = exec_sql(db, "UPDATE counter SET n = n WHERE id = 0; COMMIT",
                       "lock holder");
    sqlite3_close(db);
    _exit(ok ? 0 : 1);
  }
  int e = errno;
  close(p[1]);
  if (pid < 0) {
    close(p[0]);
    return -e;
  }
  *ready_fd = p[0];
  return pid;
}

static bool transaction(sqlite3 *db, int i, int k) {
  if (!exec_sql(db, "BEGIN IMMEDIATE", "worker")) return false;
  int64_t zero = 0;
  atomic_compare_exchange_strong(&first_tx, &zero, now_ms());
  char sql[128];
  snprintf(sql, sizeof sql, "INSERT INTO rows VALUES (%d, %d)", i, k);
  bool ok = exec_sql(db, "UPDATE counter SET n = n + 1 WHERE id = 0", "worker");
  /* Work that waits, holding the write lock: the other fibers run and
   * find the database locked. */
  usleep(1000);
  ok = ok && exec_sql(db, sql, "worker");
  if (ok) return exec_sql(db, "COMMIT", "worker");
  exec_sql(db, "ROLLBACK", "worker");
  return false;
}

static void worker(int i) {
  sqlite3 *db = open_db("worker");
  bool ok = db != NULL;
  for (int k = 0; ok && k < M; k++) ok = transaction(db, i, k);
  sqlite3_close(db);
  if (ok) atomic_fetch_add(&ok_count, 1);
  atomic_fetch_add(&done_count, 1);
}

/* Ticks every TICK_MS until the workers are done. */
static void ticker(void) {
  while (atomic_load(&done_count) < N && ticks < 100000) {
    usleep(TICK_MS * 1000);
    ticks_at[ticks++] = now_ms();
  }
}

static void run_one(int i) {
  tids[i] = (pid_t)syscall(SYS_gettid);
  if (i == N)
    ticker();
  else
    worker(i);
}

/* The counter and the rows the workers wrote. */
static bool final_state_ok(void) {
  sqlite3 *db = open_db("check");
  if (!db) return false;
  sqlite3_stmt *st = NULL;
  bool ok = sqlite3_prepare_v2(db,
                               "SELECT (SELECT n FROM counter WHERE id = 0), "
                               "COUNT(*), COUNT(DISTINCT fiber), MAX(k) FROM "
                               "rows",
                               -1, &st, NULL) == SQLITE_OK &&
            sqlite3_step(st) == SQLITE_ROW;
  if (ok) {
    int n = sqlite3_column_int(st, 0), rows = sqlite3_column_int(st, 1);
    int fibers = sqlite3_column_int(st, 2), max_k = sqlite3_column_int(st, 3);
    ok = n == N * M && rows == N * M && fibers == N && max_k == M - 1;
    if (!ok)
      fprintf(stderr,
              "hook_sqlite: counter %d, %d rows from %d fibers, max k %d\n", n,
              rows, fibers, max_k);
  }
  sqlite3_finalize(st);
  sqlite3_close(db);
  return ok;
}

static int fail(const char *what, int err) {
  fprintf(stderr, "hook_sqlite: %s: %s\n", what, strerror(err));
  cleanup();
  return 1;
}

int main(void) {
  bool under_run = iof_env_current() != NULL;
  snprintf(dir, sizeof dir, "/tmp/iof-sqlite-XXXXXX");
  if (!mkdtemp(dir)) {
    dir[0] = '\0';
    return fail("mkdtemp", errno);
  }
  signal(SIGALRM, on_watchdog);
  alarm(WATCHDOG_S);
  snprintf(db_path, sizeof db_path, "%s/test.db", dir);
  if (!create_db()) return fail("create", EIO);
  int ready = -1;
  pid_t pid = lock_holder(&ready);
  if (pid < 0) return fail("fork", (int)-pid);
  child = pid;
  char c;
  if (read(ready, &c, 1) != 1) return fail("lock holder", EIO);
  close(ready);

  t_start = now_ms();
  int r = hook_run_clients(FIBERS, under_run, run_one);
  int64_t elapsed = now_ms() - t_start;
  if (r < 0) return fail("fibers", -r);
  int st = 0;
  waitpid(pid, &st, 0);
  child = 0;
  bool holder_ok = WIFEXITED(st) && WEXITSTATUS(st) == 0;
  bool state_ok = final_state_ok();
  cleanup();
  alarm(0);

  /* While the other process held the lock (until the first transaction got
   * in), the ticker ran next to the waiting workers. */
  int64_t locked_ms = atomic_load(&first_tx) - t_start;
  int ticks_locked = 0;
  int64_t max_gap = 0, prev = t_start;
  for (int k = 0; k < ticks; k++) {
    if (ticks_at[k] < atomic_load(&first_tx)) ticks_locked++;
    if (ticks_at[k] - prev > max_gap) max_gap = ticks_at[k] - prev;
    prev = ticks_at[k];
  }
  int distinct = 0;
  for (int i = 0; i < FIBERS; i++) {
    bool seen = false;
    for (int j = 0; j < i; j++) seen |= tids[j] == tids[i];
    distinct += !seen;
  }
  /* SQLite's sleeps went to the fiber layer (the counters count only under
   * IOF_HOOK_VERBOSE). */
  unsigned long in_fiber = hook_count("usleep", 0);
  unsigned long blocked = 0;
  static const char *const calls[] = {"usleep", "sleep", "nanosleep"};
  for (size_t k = 0; k < sizeof calls / sizeof *calls; k++) {
    unsigned long b = hook_count(calls[k], 1);
    blocked += b == ~0ul ? 0 : b;
  }
  int ok = atomic_load(&ok_count);
  printf("hook_sqlite: %s: %d/%d workers ok (%d transactions) in %lld ms, "
         "final state %s; the other process's lock held them %lld ms, the "
         "ticker ticked %d times meanwhile (longest gap %lld ms); %d distinct "
         "OS thread(s), %lu usleep(s) in fibers, "
         "%lu blocking sleep(s)\n",
         under_run ? "iofiber-run" : "hook linked", ok, N, N * M,
         (long long)elapsed, state_ok ? "right" : "WRONG", (long long)locked_ms,
         ticks_locked, (long long)max_gap, distinct, in_fiber, blocked);
  const char *th = getenv("IOF_TEST_IO_THREADS");
  int io_threads = under_run && th && atoi(th) > 0 ? atoi(th) : 1;
  bool pass = ok == N && holder_ok && state_ok && locked_ms >= HOLD_MS - 50 &&
              ticks_locked >= HOLD_MS / TICK_MS / 4 && distinct <= io_threads &&
              blocked == 0 && elapsed < 30000;
  return pass ? 0 : 1;
}
