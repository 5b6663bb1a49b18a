/* Unmodified third-party programs under iofiber-run, driven by this
 * program (which runs plain):
 * - python3 -m http.server (ThreadingHTTPServer: a thread per request,
 *   which become fibers) serves 200 requests from 10 concurrent clients on
 *   one OS thread, then exits on SIGINT;
 * - python3 threads: 50 socket clients of an echo server (itself a thread
 *   per connection), each then sleeping 200 ms, overlap on fibers;
 * - redis-cli (linked with jemalloc, which creates pthread keys from
 *   another library's constructor) against a redis-server started here;
 * - nc (netcat-openbsd) as a server and as a client;
 * - python3 passing its connected socket to this process in an
 *   SCM_RIGHTS message: it arrives blocking, as Python sees it;
 * - unbound with two threads (each blocks the signals the main one
 *   handles) answers a query from its local zone, then exits on SIGTERM;
 * - LMDB's mdb_load and mdb_dump (robust process-shared mutexes in the
 *   environment's lock file) write and read back an environment.
 * A program that is not installed is skipped (scripts/install-deps.sh
 * installs them all). */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "driver_support.h"
#include "test_support.h"

#define PYTHON "/usr/bin/python3"
#define REDIS_SERVER "/usr/bin/redis-server"
#define REDIS_CLI "/usr/bin/redis-cli"
#define NC "/usr/bin/nc"
#define REDIS_BENCH "/usr/bin/redis-benchmark"
#define UNBOUND "/usr/sbin/unbound"
#define MDB_LOAD "/usr/bin/mdb_load"
#define MDB_DUMP "/usr/bin/mdb_dump"

static char tmpdir[] = "/tmp/iof-realprogs-XXXXXX";

static void tmp_path(char *out, size_t cap, const char *name) {
  snprintf(out, cap, "%s/%s", tmpdir, name);
}

/* ---- python3 -m http.server ------------------------------------------- */

#define HTTP_CLIENTS 10
#define HTTP_PER_CLIENT 20
static const char body_text[] = "served by python on fibers\n";
static int http_port;

static bool http_get_ok(void) {
  int s = drv_connect(http_port);
  if (s < 0) return false;
  static const char req[] = "GET /f.txt HTTP/1.0\r\nHost: x\r\n\r\n";
  bool ok = write(s, req, sizeof req - 1) == (ssize_t)(sizeof req - 1);
  char buf[2048];
  size_t n = 0;
  ssize_t r;
  while (ok && n < sizeof buf - 1 &&
         (r = read(s, buf + n, sizeof buf - 1 - n)) > 0)
    n += (size_t)r;
  buf[n] = '\0';
  close(s);
  return ok && !strncmp(buf, "HTTP/1.0 200", 12) && n > sizeof body_text - 1 &&
         !strcmp(buf + n - (sizeof body_text - 1), body_text);
}

static void *http_client(void *arg) {
  intptr_t ok = 0;
  for (int i = 0; i < HTTP_PER_CLIENT; i++) ok += http_get_ok();
  (void)arg;
  return (void *)ok;
}

static void test_python_http_server(void **state) {
  (void)state;
  if (access(PYTHON, X_OK) != 0) skip();
  char f[128], err[128], buf[8192];
  tmp_path(f, sizeof f, "f.txt");
  FILE *fp = fopen(f, "w");
  assert_non_null(fp);
  fputs(body_text, fp);
  fclose(fp);
  tmp_path(err, sizeof err, "http.err");
  http_port = drv_free_port();
  char ps[16];
  snprintf(ps, sizeof ps, "%d", http_port);
  pid_t pid = drv_spawn(
      (const char *const[]){IOF_RUN_PATH, PYTHON, "-m", "http.server", ps,
                            "--bind", "127.0.0.1", "--directory", tmpdir, NULL},
      -1, NULL, err);
  if (!drv_wait_listening(http_port, pid)) {
    drv_slurp(err, buf, sizeof buf);
    fail_msg("http.server did not start: %s", buf);
  }
  pthread_t t[HTTP_CLIENTS];
  for (int i = 0; i < HTTP_CLIENTS; i++)
    assert_int_equal(pthread_create(&t[i], NULL, http_client, NULL), 0);
  intptr_t ok = 0;
  for (int i = 0; i < HTTP_CLIENTS; i++) {
    void *r;
    pthread_join(t[i], &r);
    ok += (intptr_t)r;
  }
  /* Every request thread was a fiber: one io thread (plus, at most, the
   * resolver's worker, started by http.server's getaddrinfo of its bind
   * address), where plain Python would have run up to 10 at once. */
  int threads = drv_os_threads(pid);
  kill(pid, SIGINT);
  int st = drv_wait_exit(pid, 10);
  drv_slurp(err, buf, sizeof buf);
  print_message("python http.server under iofiber-run: %d/%d requests ok, "
                "%d OS thread(s), exit %d\n",
                (int)ok, HTTP_CLIENTS * HTTP_PER_CLIENT, threads, st);
  assert_int_equal(ok, HTTP_CLIENTS * HTTP_PER_CLIENT);
  assert_true(threads >= 1 && threads <= 2);
  assert_int_equal(st, 0);
  assert_non_null(strstr(buf, "GET /f.txt"));
}

/* ---- python3 threads --------------------------------------------------- */

static const char py_threads[] =
    "import socket, threading, time, queue\n"
    "srv = socket.socket(); srv.bind(('127.0.0.1', 0)); srv.listen(128)\n"
    "def handle(c):\n"
    "    with c:\n"
    "        while d := c.recv(65536): c.sendall(d.upper())\n"
    "def acceptor():\n"
    "    while True:\n"
    "        c, _ = srv.accept()\n"
    "        threading.Thread(target=handle, args=(c,), daemon=True).start()\n"
    "threading.Thread(target=acceptor, daemon=True).start()\n"
    "res = queue.Queue()\n"
    "def client(i):\n"
    "    s = socket.create_connection(srv.getsockname(), timeout=5)\n"
    "    msg = (f'msg-{i}-' * 500).encode()\n"
    "    s.sendall(msg); s.shutdown(socket.SHUT_WR)\n"
    "    got = b''\n"
    "    while d := s.recv(65536): got += d\n"
    "    s.close(); time.sleep(0.2); res.put(got == msg.upper())\n"
    "t0 = time.monotonic()\n"
    "ts = [threading.Thread(target=client, args=(i,)) for i in range(50)]\n"
    "[t.start() for t in ts]; [t.join() for t in ts]\n"
    "el = time.monotonic() - t0\n"
    "a, b = socket.socketpair(); a.settimeout(0.1)\n"
    "try: a.recv(1); to = 'none'\n"
    "except socket.timeout: to = 'timeout'\n"
    "print(sum(res.get() for _ in range(50)), 'fast' if el < 2 else el, to)\n";

static void test_python_threads(void **state) {
  (void)state;
  if (access(PYTHON, X_OK) != 0) skip();
  char out[128], err[128], buf[4096];
  tmp_path(out, sizeof out, "py.out");
  tmp_path(err, sizeof err, "py.err");
  pid_t pid = drv_spawn(
      (const char *const[]){IOF_RUN_PATH, PYTHON, "-c", py_threads, NULL}, -1,
      out, err);
  int st = drv_wait_exit(pid, 15);
  drv_slurp(err, buf, sizeof buf);
  if (st != 0) fail_msg("python exit %d: %s", st, buf);
  drv_slurp(out, buf, sizeof buf);
  assert_string_equal(buf, "50 fast timeout\n");
}

/* ---- python3 multiprocessing ------------------------------------------- */

/* Worker processes forked by a fiber, named semaphores (sem_open) as
 * locks, pipes shared with the children, and a pool thread that polls
 * with a zero timeout while another thread reads the results. */
static const char py_mp[] =
    "import multiprocessing as m, threading\n"
    "def sq(x): return x * x\n"
    "with m.Pool(3) as p: print(sum(p.map(sq, range(1000))))\n"
    "q = m.Queue(); ps = [m.Process(target=q.put, args=(i,)) for i in "
    "range(5)]\n"
    "[x.start() for x in ps]; print(sorted(q.get() for _ in ps))\n"
    "[x.join() for x in ps]\n"
    "lk = m.Lock(); n = [0]\n"
    "def w():\n"
    "    for _ in range(200):\n"
    "        with lk: n[0] += 1\n"
    "ts = [threading.Thread(target=w) for _ in range(5)]\n"
    "[t.start() for t in ts]; [t.join() for t in ts]; print(n[0])\n";

static void test_python_multiprocessing(void **state) {
  (void)state;
  if (access(PYTHON, X_OK) != 0) skip();
  char out[128], err[128], buf[4096];
  tmp_path(out, sizeof out, "mp.out");
  tmp_path(err, sizeof err, "mp.err");
  pid_t pid =
      drv_spawn((const char *const[]){IOF_RUN_PATH, PYTHON, "-c", py_mp, NULL},
                -1, out, err);
  int st = drv_wait_exit(pid, 15);
  drv_slurp(err, buf, sizeof buf);
  if (st != 0) fail_msg("python exit %d: %s", st, buf);
  drv_slurp(out, buf, sizeof buf);
  assert_string_equal(buf, "332833500\n[0, 1, 2, 3, 4]\n1000\n");
}

/* ---- node -------------------------------------------------------------- */

/* libuv's thread pool (fs, crypto) runs on fibers; at exit libuv's
 * destructor joins those "threads", which needs them still running. */
static const char node_js[] =
    "const http = require('http');\n"
    "const srv = http.createServer((q, s) => s.end('hi ' + q.url));\n"
    "srv.listen(0, '127.0.0.1', () => {\n"
    "  const port = srv.address().port; let n = 0;\n"
    "  for (let i = 0; i < 20; i++)\n"
    "    http.get(`http://127.0.0.1:${port}/${i}`, r => {\n"
    "      let d = ''; r.on('data', c => d += c);\n"
    "      r.on('end', () => { if (d === 'hi /' + i) n++;\n"
    "        if (n === 20) { console.log('http 20'); srv.close(); } });\n"
    "    });\n"
    "});\n"
    "require('fs').readFile('/proc/self/status', (e, d) => console.log('fs',"
    " !e));\n"
    "require('crypto').pbkdf2('a', 'b', 1000, 32, 'sha256', (e, k) =>\n"
    "  console.log('crypto', k.length));\n";

static void test_node(void **state) {
  (void)state;
  const char *node = access("/usr/bin/node", X_OK) == 0     ? "/usr/bin/node"
                     : access("/usr/bin/nodejs", X_OK) == 0 ? "/usr/bin/nodejs"
                                                            : NULL;
  if (!node) skip();
  char out[128], err[128], buf[4096];
  tmp_path(out, sizeof out, "node.out");
  tmp_path(err, sizeof err, "node.err");
  pid_t pid =
      drv_spawn((const char *const[]){IOF_RUN_PATH, node, "-e", node_js, NULL},
                -1, out, err);
  int st = drv_wait_exit(pid, 15);
  drv_slurp(err, buf, sizeof buf);
  if (st != 0) fail_msg("node exit %d: %s", st, buf);
  drv_slurp(out, buf, sizeof buf);
  assert_non_null(strstr(buf, "http 20\n"));
  assert_non_null(strstr(buf, "fs true\n"));
  assert_non_null(strstr(buf, "crypto 32\n"));
}

/* ---- redis-cli --------------------------------------------------------- */

static void redis_cli(int port, const char *const *args, char *buf,
                      size_t cap) {
  char ps[16], out[128];
  snprintf(ps, sizeof ps, "%d", port);
  const char *argv[16] = {IOF_RUN_PATH, REDIS_CLI, "-p", ps};
  int n = 4;
  while (*args && n < 15) argv[n++] = *args++;
  argv[n] = NULL;
  tmp_path(out, sizeof out, "redis.out");
  pid_t pid = drv_spawn(argv, -1, out, NULL);
  assert_int_equal(drv_wait_exit(pid, 10), 0);
  drv_slurp(out, buf, cap);
}

static void test_redis_cli(void **state) {
  (void)state;
  if (access(REDIS_SERVER, X_OK) != 0 || access(REDIS_CLI, X_OK) != 0) skip();
  int port = drv_free_port();
  char ps[16], buf[256];
  snprintf(ps, sizeof ps, "%d", port);
  pid_t srv = drv_spawn((const char *const[]){REDIS_SERVER, "--port", ps,
                                              "--bind", "127.0.0.1", "--save",
                                              "", "--appendonly", "no", NULL},
                        -1, NULL, NULL);
  assert_true(drv_wait_listening(port, srv));
  redis_cli(port, (const char *const[]){"PING", NULL}, buf, sizeof buf);
  assert_string_equal(buf, "PONG\n");
  redis_cli(port, (const char *const[]){"SET", "k", "41", NULL}, buf,
            sizeof buf);
  assert_string_equal(buf, "OK\n");
  redis_cli(port, (const char *const[]){"INCR", "k", NULL}, buf, sizeof buf);
  assert_string_equal(buf, "42\n");
  uint64_t t0 = iof_test_now_ns();
  redis_cli(port, (const char *const[]){"BLPOP", "none", "0.2", NULL}, buf,
            sizeof buf);
  assert_true(iof_test_now_ns() - t0 >= 190000000u);
  assert_string_equal(buf, "\n"); /* nil */
  /* redis-benchmark with 2 threads, each its own event loop: fibers. */
  if (access(REDIS_BENCH, X_OK) == 0) {
    char out[128];
    tmp_path(out, sizeof out, "redis.out");
    pid_t b = drv_spawn((const char *const[]){IOF_RUN_PATH, REDIS_BENCH, "-p",
                                              ps, "-n", "1000", "-c", "10",
                                              "-t", "set,get", "-q",
                                              "--threads", "2", NULL},
                        -1, out, NULL);
    assert_int_equal(drv_wait_exit(b, 15), 0);
    char rb[4096];
    drv_slurp(out, rb, sizeof rb);
    assert_non_null(strstr(rb, "SET: "));
    assert_non_null(strstr(rb, "GET: "));
  }
  kill(srv, SIGTERM);
  assert_true(drv_wait_exit(srv, 10) >= 0);
}

/* ---- nc ---------------------------------------------------------------- */

static void test_nc(void **state) {
  (void)state;
  if (access(NC, X_OK) != 0) skip();
  /* nc listening, under iofiber-run: what a plain client sends comes out. */
  int port = drv_free_port();
  char ps[16], out[128], buf[256];
  snprintf(ps, sizeof ps, "%d", port);
  tmp_path(out, sizeof out, "nc.out");
  pid_t pid = drv_spawn(
      (const char *const[]){IOF_RUN_PATH, NC, "-l", "127.0.0.1", ps, NULL}, -1,
      out, NULL);
  /* nc serves one client: the first connection that succeeds is it. */
  int s = -1;
  for (int i = 0; i < 250 && s < 0; i++) {
    s = drv_connect(port);
    if (s < 0) usleep(20000);
  }
  assert_true(s >= 0);
  assert_int_equal(write(s, "to nc\n", 6), 6);
  close(s);
  assert_int_equal(drv_wait_exit(pid, 10), 0);
  drv_slurp(out, buf, sizeof buf);
  assert_string_equal(buf, "to nc\n");

  /* nc as a client under iofiber-run, stdin a pipe, -N: shut down at EOF. */
  int l = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in a = {.sin_family = AF_INET};
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t al = sizeof a;
  assert_int_equal(bind(l, (struct sockaddr *)&a, sizeof a), 0);
  assert_int_equal(listen(l, 1), 0);
  assert_int_equal(getsockname(l, (struct sockaddr *)&a, &al), 0);
  snprintf(ps, sizeof ps, "%d", ntohs(a.sin_port));
  int p[2];
  assert_int_equal(pipe2(p, O_CLOEXEC), 0); /* nc must not hold p[1] */
  pid = drv_spawn(
      (const char *const[]){IOF_RUN_PATH, NC, "-N", "127.0.0.1", ps, NULL},
      p[0], out, NULL);
  close(p[0]);
  assert_int_equal(write(p[1], "from nc\n", 8), 8);
  close(p[1]);
  int c = accept(l, NULL, NULL);
  assert_true(c >= 0);
  struct timeval tv = {5, 0};
  setsockopt(c, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  size_t n = 0;
  ssize_t r;
  while (n < sizeof buf - 1 && (r = read(c, buf + n, sizeof buf - 1 - n)) > 0)
    n += (size_t)r;
  buf[n] = '\0';
  assert_string_equal(buf, "from nc\n");
  assert_int_equal(write(c, "reply\n", 6), 6);
  close(c);
  close(l);
  assert_int_equal(drv_wait_exit(pid, 10), 0);
  drv_slurp(out, buf, sizeof buf);
  assert_string_equal(buf, "reply\n");
}

/* python3 hands its connected socket to this process in an SCM_RIGHTS
 * message (socket.send_fds on its stdout, a unix socket). The socket
 * must arrive blocking, as Python left it: not with the O_NONBLOCK the
 * runtime set for its fiber's connect (a blocking read here failed with
 * EAGAIN). */
static const char py_send_fds[] =
    "import socket, sys\n"
    "s = socket.create_connection(('127.0.0.1', int(sys.argv[1])))\n"
    "socket.send_fds(socket.socket(fileno=1), [b'x'], [s.fileno()])\n";

static void test_python_send_fds(void **state) {
  (void)state;
  if (access(PYTHON, X_OK) != 0) skip();
  int l = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in a = {.sin_family = AF_INET};
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t al = sizeof a;
  assert_int_equal(bind(l, (struct sockaddr *)&a, sizeof a), 0);
  assert_int_equal(listen(l, 1), 0);
  assert_int_equal(getsockname(l, (struct sockaddr *)&a, &al), 0);
  char ps[16];
  snprintf(ps, sizeof ps, "%d", ntohs(a.sin_port));
  int sv[2];
  assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
  pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) {
    int i = open("/dev/null", O_RDWR);
    dup2(i, 0), dup2(sv[1], 1), dup2(i, 2);
    unsetenv("LD_PRELOAD");
    unsetenv("IOF_RUN");
    execl(IOF_RUN_PATH, IOF_RUN_PATH, PYTHON, "-c", py_send_fds, ps,
          (char *)NULL);
    _exit(99);
  }
  close(sv[1]);
  struct timeval tv = {5, 0};
  setsockopt(sv[0], SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  char one;
  struct iovec io = {&one, 1};
  union {
    char b[CMSG_SPACE(sizeof(int))];
    struct cmsghdr align;
  } cb;
  memset(&cb, 0, sizeof cb);
  struct msghdr m = {0};
  m.msg_iov = &io;
  m.msg_iovlen = 1;
  m.msg_control = cb.b;
  m.msg_controllen = sizeof cb.b;
  assert_true(recvmsg(sv[0], &m, MSG_CMSG_CLOEXEC) >= 1);
  struct cmsghdr *h = CMSG_FIRSTHDR(&m);
  assert_non_null(h);
  assert_int_equal(h->cmsg_type, SCM_RIGHTS);
  int fd;
  memcpy(&fd, CMSG_DATA(h), sizeof fd);
  assert_int_equal(drv_wait_exit(pid, 10), 0);
  close(sv[0]);
  int c = accept(l, NULL, NULL);
  assert_true(c >= 0);
  assert_int_equal(fcntl(fd, F_GETFL) & O_NONBLOCK, 0);
  /* The peer writes after a pause: a blocking read waits for it. */
  pid_t w = fork();
  assert_true(w >= 0);
  if (w == 0) {
    usleep(100000);
    _exit(write(c, "late\n", 5) == 5 ? 0 : 1);
  }
  char buf[16] = {0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  assert_int_equal(read(fd, buf, sizeof buf - 1), 5);
  assert_string_equal(buf, "late\n");
  assert_int_equal(drv_wait_exit(w, 5), 0);
  close(c);
  close(fd);
  close(l);
}

/* ---- unbound ---------------------------------------------------------- */

static void test_unbound(void **state) {
  (void)state;
  if (access(UNBOUND, X_OK) != 0) skip();
  int port = drv_free_port();
  char conf[128], out[128], buf[1024];
  tmp_path(conf, sizeof conf, "unbound.conf");
  tmp_path(out, sizeof out, "unbound.err");
  FILE *f = fopen(conf, "w");
  assert_non_null(f);
  fprintf(f,
          "server:\n  interface: 127.0.0.1\n  port: %d\n  do-ip6: no\n"
          "  do-daemonize: no\n  use-syslog: no\n  logfile: \"\"\n"
          "  chroot: \"\"\n  username: \"\"\n  pidfile: \"\"\n"
          "  directory: \"%s\"\n  num-threads: 2\n"
          "  local-zone: \"test.\" static\n"
          "  local-data: \"a.test. IN A 10.1.2.3\"\n"
          "remote-control:\n  control-enable: no\n",
          port, tmpdir);
  fclose(f);
  pid_t pid = drv_spawn(
      (const char *const[]){IOF_RUN_PATH, UNBOUND, "-d", "-c", conf, NULL}, -1,
      NULL, out);
  assert_true(drv_wait_listening(port, pid));
  /* A query for a.test, type A, over UDP. */
  static const unsigned char q[] = {0x12, 0x34, 1,   0, 0, 1,   0, 0,
                                    0,    0,    0,   0, 1, 'a', 4, 't',
                                    'e',  's',  't', 0, 0, 1,   0, 1};
  int u = socket(AF_INET, SOCK_DGRAM, 0);
  assert_true(u >= 0);
  struct timeval tv = {5, 0};
  setsockopt(u, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(port)};
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  assert_int_equal(sendto(u, q, sizeof q, 0, (struct sockaddr *)&a, sizeof a),
                   (ssize_t)sizeof q);
  ssize_t n = recv(u, buf, sizeof buf, 0);
  close(u);
  assert_true(n >= (ssize_t)sizeof q + 16);
  const unsigned char *r = (const unsigned char *)buf;
  assert_int_equal(r[0] << 8 | r[1], 0x1234);
  assert_int_equal(r[3] & 15, 0);        /* NOERROR */
  assert_int_equal(r[6] << 8 | r[7], 1); /* one answer */
  assert_memory_equal(r + n - 4, "\x0a\x01\x02\x03", 4);
  /* Its workers block SIGTERM for themselves; the main thread handles it. */
  kill(pid, SIGTERM);
  assert_int_equal(drv_wait_exit(pid, 10), 0);
  unlink(conf);
}

IOF_TEST_WATCHDOG(setup, teardown, 40)

/* ---- LMDB ------------------------------------------------------------- */

static void test_lmdb(void **state) {
  (void)state;
  if (access(MDB_LOAD, X_OK) != 0 || access(MDB_DUMP, X_OK) != 0) skip();
  static const char dump[] = "VERSION=3\nformat=print\ntype=btree\n"
                             "mapsize=1048576\nmaxreaders=126\n"
                             "db_pagesize=4096\nHEADER=END\n"
                             " a\n 1\n b\n 2\nDATA=END\n";
  char in[128], env[128], out[128], err[128], buf[4096];
  tmp_path(in, sizeof in, "lmdb.in");
  tmp_path(env, sizeof env, "lmdb");
  tmp_path(out, sizeof out, "lmdb.out");
  tmp_path(err, sizeof err, "lmdb.err");
  assert_int_equal(mkdir(env, 0700), 0);
  FILE *f = fopen(in, "w");
  assert_non_null(f);
  fputs("VERSION=3\nformat=print\ntype=btree\nHEADER=END\n"
        " a\n 1\n b\n 2\nDATA=END\n",
        f);
  assert_int_equal(fclose(f), 0);
  pid_t pid = drv_spawn(
      (const char *const[]){IOF_RUN_PATH, MDB_LOAD, "-f", in, env, NULL}, -1,
      out, err);
  int st = drv_wait_exit(pid, 15);
  drv_slurp(err, buf, sizeof buf);
  if (st != 0) fail_msg("mdb_load exit %d: %s", st, buf);
  pid =
      drv_spawn((const char *const[]){IOF_RUN_PATH, MDB_DUMP, "-p", env, NULL},
                -1, out, err);
  st = drv_wait_exit(pid, 15);
  drv_slurp(err, buf, sizeof buf);
  if (st != 0) fail_msg("mdb_dump exit %d: %s", st, buf);
  drv_slurp(out, buf, sizeof buf);
  assert_string_equal(buf, dump);
}

int main(void) {
  signal(SIGPIPE, SIG_IGN);
  if (!mkdtemp(tmpdir)) return 1;
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_python_http_server, setup, teardown),
      cmocka_unit_test_setup_teardown(test_python_threads, setup, teardown),
      cmocka_unit_test_setup_teardown(test_python_multiprocessing, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(test_node, setup, teardown),
      cmocka_unit_test_setup_teardown(test_redis_cli, setup, teardown),
      cmocka_unit_test_setup_teardown(test_nc, setup, teardown),
      cmocka_unit_test_setup_teardown(test_python_send_fds, setup, teardown),
      cmocka_unit_test_setup_teardown(test_unbound, setup, teardown),
      cmocka_unit_test_setup_teardown(test_lmdb, setup, teardown),
  };
  int r = cmocka_run_group_tests(tests, NULL, NULL);
  const char *names[] = {
      "f.txt",     "http.err", "py.out",        "py.err",
      "redis.out", "nc.out",   "mp.out",        "mp.err",
      "node.out",  "node.err", "unbound.err",   "lmdb.in",
      "lmdb.out",  "lmdb.err", "lmdb/data.mdb", "lmdb/lock.mdb"};
  for (size_t i = 0; i < sizeof names / sizeof *names; i++) {
    char p[128];
    tmp_path(p, sizeof p, names[i]);
    unlink(p);
  }
  char lmdb_dir[128];
  tmp_path(lmdb_dir, sizeof lmdb_dir, "lmdb");
  rmdir(lmdb_dir);
  rmdir(tmpdir);
  return r;
}
