/* pthread_kill between threads, as glibc and the kernel do it:
 * - signal numbers: 0 checks the thread, glibc's internal 32 and 33 and
 *   numbers out of range are EINVAL (nothing is sent);
 * - the disposition at the time counts: after SIG_IGN (or a SIG_DFL that
 *   ignores) nothing runs, after SIG_DFL the default action ends the
 *   process, and SA_RESETHAND runs the handler once (through pthread_kill
 *   or the kernel), then the default action applies;
 * - to main from another thread: the handler runs in main and main's
 *   blocking read returns EINTR (goes on under SA_RESTART); main busy
 *   elsewhere (pthread_join) runs it by its next call;
 * - to a thread that blocks the signal and waits for it in sigwait or
 *   sigtimedwait: pending for that thread alone, those return it, with or
 *   without a handler, whether or not the other threads block it;
 * - sigtimedwait with no fd left (EMFILE) still lets the other threads
 *   run: one of them sends the signal it waits for.
 * Run under iofiber-run, plainly and with the header swap; cases that end
 * the process run in a copy of this program (argv[1] names the case).
 * Exit 0: every step right; it prints what failed. */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define STEPS_NAME "thread_kill"
#include "steps.h"

static volatile sig_atomic_t hits;
static void on_sig(int s) {
  (void)s;
  hits++;
}

static int pfd[2];

/* Waits in a blocking read of pfd until a byte comes. */
static void *reader(void *arg) {
  (void)arg;
  char c;
  while (read(pfd[0], &c, 1) < 0 && errno == EINTR) {
  }
  return NULL;
}

static void bad_numbers(void) {
  pthread_t t;
  pthread_create(&t, NULL, reader, NULL);
  usleep(20000);
  CHECK(pthread_kill(t, 0) == 0, "signal 0: the thread exists");
  CHECK(pthread_kill(t, 32) == EINVAL, "glibc's SIGCANCEL");
  CHECK(pthread_kill(t, 33) == EINVAL, "glibc's SIGSETXID");
  CHECK(pthread_kill(t, -1) == EINVAL, "negative");
  CHECK(pthread_kill(t, NSIG) == EINVAL, "NSIG");
  CHECK(pthread_kill(pthread_self(), 32) == EINVAL, "SIGCANCEL to self");
  (void)!write(pfd[1], "x", 1);
  pthread_join(t, NULL);
}

static void stale_handlers(void) {
  pthread_t t;
  pthread_create(&t, NULL, reader, NULL);
  usleep(20000);
  int h = hits;
  signal(SIGUSR1, on_sig);
  CHECK(signal(SIGUSR1, SIG_IGN) == on_sig, "signal returns the handler");
  CHECK(pthread_kill(t, SIGUSR1) == 0, "pthread_kill, SIG_IGN");
  CHECK(pthread_kill(pthread_self(), SIGUSR1) == 0, "to self, SIG_IGN");
  signal(SIGWINCH, on_sig);
  signal(SIGWINCH, SIG_DFL); /* whose action is to ignore it */
  CHECK(pthread_kill(t, SIGWINCH) == 0, "pthread_kill, SIGWINCH SIG_DFL");
  CHECK(pthread_kill(pthread_self(), SIGWINCH) == 0, "to self, SIG_DFL");
  usleep(30000);
  CHECK(hits == h, "no handler ran after SIG_IGN or SIG_DFL");
  (void)!write(pfd[1], "x", 1);
  pthread_join(t, NULL);
}

static pthread_t main_id;
static int mp[2];
static atomic_bool main_done;

/* pthread_kill(main) after 50 ms; a byte for main's read at ms (arg), or
 * at 2 s if main is still waiting (so a lost signal fails, not hangs). */
static void *kill_main(void *arg) {
  long ms = (long)arg;
  usleep(50000);
  CHECK(pthread_kill(main_id, SIGUSR1) == 0, "pthread_kill(main)");
  for (long t = 50; t < (ms ? ms : 2000) && !atomic_load(&main_done); t += 10)
    usleep(10000);
  if (!atomic_load(&main_done)) (void)!write(mp[1], "z", 1);
  return NULL;
}

static void kill_to_main(void) {
  if (pipe(mp) != 0) return;
  main_id = pthread_self();
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_sig;
  sigaction(SIGUSR1, &sa, NULL);
  pthread_t t;
  atomic_store(&main_done, false);
  int h = hits;
  pthread_create(&t, NULL, kill_main, NULL);
  char c;
  ssize_t r = read(mp[0], &c, 1);
  atomic_store(&main_done, true);
  CHECK(r == -1 && errno == EINTR && hits == h + 1,
        "main's read cut by pthread_kill(main)");
  pthread_join(t, NULL);

  sa.sa_flags = SA_RESTART;
  sigaction(SIGUSR1, &sa, NULL);
  atomic_store(&main_done, false);
  h = hits;
  pthread_create(&t, NULL, kill_main, (void *)150L);
  r = read(mp[0], &c, 1);
  atomic_store(&main_done, true);
  CHECK(r == 1 && hits == h + 1, "SA_RESTART: main's read goes on");
  pthread_join(t, NULL);

  /* main in pthread_join, not in an interruptible call. */
  h = hits;
  pthread_create(&t, NULL, kill_main, (void *)60L);
  pthread_join(t, NULL);
  usleep(10000);
  CHECK(hits == h + 1, "pthread_kill(main) while main joins");
  close(mp[0]);
  close(mp[1]);
  signal(SIGUSR1, SIG_DFL);
}

static sigset_t waited;
static atomic_int waiter_got;

static void *sig_waiter(void *arg) {
  int sig = 0;
  pthread_sigmask(SIG_BLOCK, &waited, NULL);
  if (arg) {
    siginfo_t si;
    struct timespec two = {2, 0};
    sig = sigtimedwait(&waited, &si, &two);
    if (sig > 0 && si.si_signo != sig) sig = -2;
  } else if (sigwait(&waited, &sig) != 0) {
    sig = -1;
  }
  atomic_store(&waiter_got, sig);
  return NULL;
}

static void kill_to_sigwait(void) {
  /* No handler, main leaves it open: the process must not get it. */
  sigemptyset(&waited);
  sigaddset(&waited, SIGUSR2);
  pthread_t t;
  atomic_store(&waiter_got, 0);
  pthread_create(&t, NULL, sig_waiter, NULL);
  usleep(30000);
  CHECK(pthread_kill(t, SIGUSR2) == 0, "pthread_kill to sigwait");
  for (int i = 0; i < 200 && !atomic_load(&waiter_got); i++) usleep(10000);
  bool late = !atomic_load(&waiter_got);
  sigset_t old;
  pthread_sigmask(SIG_BLOCK, &waited, &old);
  if (late) kill(getpid(), SIGUSR2); /* a lost one fails, not hangs */
  pthread_join(t, NULL);
  pthread_sigmask(SIG_SETMASK, &old, NULL);
  CHECK(!late && atomic_load(&waiter_got) == SIGUSR2,
        "sigwait takes pthread_kill's");

  /* A handler, and every thread blocks it. */
  signal(SIGUSR1, on_sig);
  sigemptyset(&waited);
  sigaddset(&waited, SIGUSR1);
  pthread_sigmask(SIG_BLOCK, &waited, &old);
  int h = hits;
  atomic_store(&waiter_got, 0);
  pthread_create(&t, NULL, sig_waiter, (void *)1);
  usleep(30000);
  CHECK(pthread_kill(t, SIGUSR1) == 0, "pthread_kill to sigtimedwait");
  pthread_join(t, NULL);
  CHECK(atomic_load(&waiter_got) == SIGUSR1 && hits == h,
        "sigtimedwait takes it, no handler run");
  pthread_sigmask(SIG_SETMASK, &old, NULL);
  signal(SIGUSR1, SIG_DFL);
}

/* To main after 50 ms: pthread_kill (arg NULL), or kill. */
static void *signal_main_later(void *arg) {
  usleep(50000);
  if (arg)
    kill(getpid(), SIGUSR2);
  else
    pthread_kill(main_id, SIGUSR2);
  return NULL;
}

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

static void sigwait_no_fd(void) {
  main_id = pthread_self();
  sigset_t b, old;
  sigemptyset(&b);
  sigaddset(&b, SIGUSR2);
  pthread_sigmask(SIG_BLOCK, &b, &old);
  for (long how = 0; how < 2; how++) {
    pthread_t t;
    pthread_create(&t, NULL, signal_main_later, (void *)how);
    static int fds[1 << 16];
    int n = 0, fd;
    while (n < (1 << 16) && (fd = open("/dev/null", O_RDONLY)) >= 0)
      fds[n++] = fd;
    struct timespec two = {2, 0};
    double t0 = now();
    errno = 0;
    int s = sigtimedwait(&b, NULL, &two);
    int e = errno;
    double took = now() - t0;
    while (n > 0) close(fds[--n]);
    CHECK(s == SIGUSR2 && took < 1, how ? "EMFILE: sigtimedwait gets kill's"
                                        : "EMFILE: gets pthread_kill's");
    CHECK(e == 0, "EMFILE: errno kept on success");
    pthread_join(t, NULL);
  }
  pthread_sigmask(SIG_SETMASK, &old, NULL);
}

/* ---- cases that end the process, each in a copy of this program ---- */

/* Sends SIGUSR1 to a thread (blocked in read) with pthread_kill. */
static void kill_reader(void) {
  pthread_t t;
  pthread_create(&t, NULL, reader, NULL);
  usleep(20000);
  pthread_kill(t, SIGUSR1);
  usleep(200000);
}

static int child_case(const char *c) {
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_sig;
  if (!strcmp(c, "dfl")) {
    signal(SIGUSR1, on_sig);
    signal(SIGUSR1, SIG_DFL);
    kill_reader();
    return 3; /* not reached: SIGUSR1's default action */
  }
  sa.sa_flags = SA_RESETHAND;
  sigaction(SIGUSR1, &sa, NULL);
  if (!strcmp(c, "resethand"))
    pthread_kill(pthread_self(), SIGUSR1);
  else
    raise(SIGUSR1);
  struct sigaction now;
  sigaction(SIGUSR1, NULL, &now);
  if (hits != 1 || now.sa_handler != SIG_DFL) return 4;
  kill_reader();
  return 3;
}

/* The hook's library in this process (the hook scrubs it from
 * LD_PRELOAD at start): given back to the copies, so they run on fibers
 * too. */
static char *hook_path(void) {
  static char path[4096];
  FILE *m = fopen("/proc/self/maps", "r");
  char line[4096 + 128];
  bool found = false;
  while (m && !found && fgets(line, sizeof line, m)) {
    char *p = strchr(line, '/');
    if (p && strstr(p, "libiofiber-hook")) {
      p[strcspn(p, "\n")] = '\0';
      snprintf(path, sizeof path, "%s", p);
      found = true;
    }
  }
  if (m) fclose(m);
  return found ? path : NULL;
}

/* Runs the case in a copy of this program: its wait status. */
static int run_case(const char *c) {
  extern char **environ;
  char *hook = hook_path();
  if (hook) {
    setenv("LD_PRELOAD", hook, 1);
    setenv("IOF_RUN", "1", 1);
  }
  pid_t pid = fork();
  if (pid == 0) {
    execle("/proc/self/exe", "thread_kill", c, (char *)NULL, environ);
    _exit(127);
  }
  if (hook) {
    unsetenv("LD_PRELOAD");
    unsetenv("IOF_RUN");
  }
  int st = 0;
  if (pid < 0 || waitpid(pid, &st, 0) != pid) return -1;
  return st;
}

static void process_ends(void) {
  static const char *cases[] = {"dfl", "resethand", "resethand_kernel"};
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    int st = run_case(cases[i]);
    if (!(WIFSIGNALED(st) && WTERMSIG(st) == SIGUSR1)) {
      fprintf(stderr, "thread_kill: case %s: status %#x, not SIGUSR1's end\n",
              cases[i], st);
      failed = 1;
    }
  }
}

int main(int argc, char **argv) {
  setvbuf(stdout, NULL, _IONBF, 0);
  if (pipe(pfd) != 0) return 1;
  if (argc > 1) return child_case(argv[1]);
  bad_numbers();
  stale_handlers();
  kill_to_main();
  kill_to_sigwait();
  sigwait_no_fd();
  process_ends();
  if (!failed) printf("thread_kill: all steps right\n");
  return failed;
}
