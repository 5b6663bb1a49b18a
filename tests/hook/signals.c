/* Signals and blocking calls under iofiber-run, as a single-threaded or
 * signal-driven program expects them:
 * - a handler without SA_RESTART interrupts main's blocking read (EINTR:
 *   the alarm() timeout idiom); with SA_RESTART the read goes on, while
 *   poll, select and nanosleep are interrupted either way (rem written,
 *   select's sets left as given);
 * - a "thread" (another fiber) blocked in read is not interrupted: the
 *   kernel picks the main thread for a process-directed signal;
 * - pause and sigsuspend in main wait for a handler while the other
 *   threads keep running;
 * - pselect/ppoll/epoll_pwait whose mask lets in a signal the program
 *   blocks (make -j and SIGCHLD) end with EINTR when it arrives;
 * - sigwait and sigtimedwait in a thread leave the io thread to the
 *   others;
 * - each thread has its own signal mask (unbound: workers block what main
 *   handles): a signal a worker blocks still interrupts main; one every
 *   thread blocks stays pending until unblocked; new threads inherit the
 *   creator's mask; pthread_kill of a thread that blocks the signal waits
 *   for it to unblock it; a child (fork, posix_spawn) starts with the
 *   mask of the thread that made it;
 * - the alarm() + siglongjmp timeout idiom around a blocking read, while
 *   other threads run: the handler runs in main (as in the thread whose
 *   call it interrupts), so the jump lands in main's frames and main's
 *   later calls still suspend only main.
 * Exit 0: every step right; it prints what failed. */
#include <errno.h>
#include <poll.h>
#include <setjmp.h>
#include <spawn.h>
#include <stdlib.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/select.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define STEPS_NAME "signals"
#include "steps.h"

static volatile sig_atomic_t hits;
static void on_sig(int s) {
  (void)s;
  hits++;
}

static void handle(int sig, int flags) {
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_sig;
  sa.sa_flags = flags;
  sigaction(sig, &sa, NULL);
}

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

static int pfd[2];

/* A thread that writes one byte to pfd after ms. */
static void *late_writer(void *arg) {
  usleep((useconds_t)(long)arg * 1000);
  (void)!write(pfd[1], "x", 1);
  return NULL;
}

/* A thread that counts while main waits: proof the io thread is free. */
static atomic_int ticks;
static atomic_bool stop_ticking;
static void *ticker(void *arg) {
  (void)arg;
  while (!atomic_load(&stop_ticking)) {
    usleep(5000);
    atomic_fetch_add(&ticks, 1);
  }
  return NULL;
}

/* Sends sig to the process after ms. */
typedef struct {
  int sig, ms;
} later;
static void *kill_later(void *arg) {
  later *l = arg;
  usleep((useconds_t)l->ms * 1000);
  kill(getpid(), l->sig);
  return NULL;
}

static void read_interrupted(void) {
  handle(SIGALRM, 0);
  char c;
  int h = hits;
  double t0 = now();
  ualarm(50000, 0);
  ssize_t r = read(pfd[0], &c, 1);
  CHECK(r == -1 && errno == EINTR, "read, handler without SA_RESTART");
  CHECK(hits == h + 1 && now() - t0 < 2, "read: one handler run, at once");
}

static void read_restarted(void) {
  handle(SIGALRM, SA_RESTART);
  pthread_t t;
  pthread_create(&t, NULL, late_writer, (void *)150L);
  int h = hits;
  ualarm(50000, 0);
  char c = 0;
  ssize_t r = read(pfd[0], &c, 1);
  CHECK(r == 1 && c == 'x', "read goes on after an SA_RESTART handler");
  CHECK(hits == h + 1, "read restarted: the handler ran");
  pthread_join(t, NULL);
}

static void poll_and_sleep_interrupted(void) {
  handle(SIGALRM, SA_RESTART); /* never restarts these */
  struct pollfd p = {pfd[0], POLLIN, 0};
  ualarm(50000, 0);
  int r = poll(&p, 1, 5000);
  CHECK(r == -1 && errno == EINTR, "poll, SA_RESTART handler");
  /* select too, and it leaves its sets as they were given: a caller that
   * loops on EINTR (KWSys's process wait, in cmake --build) calls it again
   * with them, and an emptied set waited for ever. */
  fd_set rd;
  FD_ZERO(&rd);
  FD_SET(pfd[0], &rd);
  struct timeval tv = {5, 0};
  ualarm(50000, 0);
  r = select(pfd[0] + 1, &rd, NULL, NULL, &tv);
  CHECK(r == -1 && errno == EINTR, "select, SA_RESTART handler");
  CHECK(FD_ISSET(pfd[0], &rd), "select's sets as given after EINTR");
  struct timespec req = {5, 0}, rem = {0, 0};
  ualarm(50000, 0);
  r = nanosleep(&req, &rem);
  CHECK(r == -1 && errno == EINTR, "nanosleep");
  CHECK(rem.tv_sec >= 3 && rem.tv_sec <= 4, "nanosleep's rem");
  ualarm(50000, 0);
  CHECK(sleep(5) >= 3, "sleep returns the seconds left");
}

static atomic_int thread_read;
static void *blocked_reader(void *arg) {
  (void)arg;
  char c = 0;
  ssize_t r = read(pfd[0], &c, 1);
  atomic_store(&thread_read, r == 1 && c == 'y' ? 1 : -errno);
  return NULL;
}

static void thread_not_interrupted(void) {
  handle(SIGUSR1, 0);
  pthread_t t;
  atomic_store(&thread_read, 0);
  pthread_create(&t, NULL, blocked_reader, NULL);
  usleep(30000); /* the thread is parked in read */
  int h = hits;
  kill(getpid(), SIGUSR1);
  usleep(30000);
  CHECK(hits == h + 1, "SIGUSR1 handled");
  CHECK(atomic_load(&thread_read) == 0, "another thread's read not cut");
  (void)!write(pfd[1], "y", 1);
  pthread_join(t, NULL);
  CHECK(atomic_load(&thread_read) == 1, "the thread's read got its byte");
}

static void pause_and_sigsuspend(void) {
  pthread_t tk;
  atomic_store(&ticks, 0);
  atomic_store(&stop_ticking, false);
  pthread_create(&tk, NULL, ticker, NULL);
  handle(SIGALRM, SA_RESTART);
  ualarm(100000, 0);
  int r = pause();
  CHECK(r == -1 && errno == EINTR, "pause");
  CHECK(atomic_load(&ticks) >= 3, "other threads ran during pause");
  /* SIGUSR1 blocked, let in by sigsuspend's mask only. */
  handle(SIGUSR1, SA_RESTART);
  sigset_t b, old;
  sigemptyset(&b);
  sigaddset(&b, SIGUSR1);
  pthread_sigmask(SIG_BLOCK, &b, &old);
  later l = {SIGUSR1, 80};
  pthread_t k;
  pthread_create(&k, NULL, kill_later, &l);
  int h = hits, t0 = atomic_load(&ticks);
  r = sigsuspend(&old);
  CHECK(r == -1 && errno == EINTR && hits == h + 1, "sigsuspend");
  CHECK(atomic_load(&ticks) >= t0 + 3, "other threads ran in sigsuspend");
  pthread_join(k, NULL);
  pthread_sigmask(SIG_SETMASK, &old, NULL);
  atomic_store(&stop_ticking, true);
  pthread_join(tk, NULL);
}

/* make -j: SIGCHLD blocked, let in only while it waits in pselect. */
static void masked_waits(void) {
  handle(SIGCHLD, SA_RESTART);
  sigset_t b, old;
  sigemptyset(&b);
  sigaddset(&b, SIGCHLD);
  sigaddset(&b, SIGUSR2);
  pthread_sigmask(SIG_BLOCK, &b, &old);
  pid_t pid = fork();
  if (pid == 0) {
    usleep(50000);
    _exit(0);
  }
  fd_set rd;
  FD_ZERO(&rd);
  FD_SET(pfd[0], &rd);
  int h = hits;
  struct timespec ten = {10, 0};
  int r = pselect(pfd[0] + 1, &rd, NULL, NULL, &ten, &old);
  CHECK(r == -1 && errno == EINTR && hits == h + 1, "pselect lets SIGCHLD in");
  CHECK(waitpid(pid, NULL, 0) == pid, "child reaped");

  handle(SIGUSR2, 0);
  later l = {SIGUSR2, 50};
  pthread_t k;
  pthread_create(&k, NULL, kill_later, &l);
  struct pollfd p = {pfd[0], POLLIN, 0};
  h = hits;
  r = ppoll(&p, 1, &ten, &old);
  CHECK(r == -1 && errno == EINTR && hits == h + 1, "ppoll lets SIGUSR2 in");
  pthread_join(k, NULL);

  int ep = epoll_create1(0);
  struct epoll_event e = {.events = EPOLLIN, .data.fd = pfd[0]};
  epoll_ctl(ep, EPOLL_CTL_ADD, pfd[0], &e);
  pthread_create(&k, NULL, kill_later, &l);
  h = hits;
  r = epoll_pwait(ep, &e, 1, 10000, &old);
  CHECK(r == -1 && errno == EINTR && hits == h + 1, "epoll_pwait");
  pthread_join(k, NULL);
  close(ep);
  pthread_sigmask(SIG_SETMASK, &old, NULL);
}

static atomic_int waited_sig;
static void *sig_waiter(void *arg) {
  sigset_t *set = arg;
  int sig = 0;
  if (sigwait(set, &sig) == 0) atomic_store(&waited_sig, sig);
  return NULL;
}

static void sigwait_in_thread(void) {
  sigset_t b, old;
  sigemptyset(&b);
  sigaddset(&b, SIGUSR2);
  pthread_sigmask(SIG_BLOCK, &b, &old);
  pthread_t t;
  atomic_store(&waited_sig, 0);
  pthread_create(&t, NULL, sig_waiter, &b);
  usleep(30000); /* main runs while the thread waits */
  kill(getpid(), SIGUSR2);
  pthread_join(t, NULL);
  CHECK(atomic_load(&waited_sig) == SIGUSR2, "sigwait in a thread");
  struct timespec t100 = {0, 100000000};
  double t0 = now();
  int r = sigtimedwait(&b, NULL, &t100);
  CHECK(r == -1 && errno == EAGAIN && now() - t0 >= 0.09,
        "sigtimedwait times out");
  kill(getpid(), SIGUSR2);
  siginfo_t si;
  CHECK(sigwaitinfo(&b, &si) == SIGUSR2 && si.si_pid == getpid(),
        "sigwaitinfo takes a pending signal");
  pthread_sigmask(SIG_SETMASK, &old, NULL);
}

static int wp[2];
static atomic_int worker_stage;
static sigset_t worker_seen;
static int worker_hits;

/* Blocks SIGUSR1 for itself, waits for a byte, then unblocks it. */
static void *masked_worker(void *arg) {
  (void)arg;
  sigset_t b;
  sigemptyset(&b);
  sigaddset(&b, SIGUSR1);
  pthread_sigmask(SIG_BLOCK, &b, NULL);
  pthread_sigmask(SIG_BLOCK, NULL, &worker_seen);
  atomic_store(&worker_stage, 1);
  char c;
  (void)!read(wp[0], &c, 1);
  int h = hits;
  pthread_sigmask(SIG_UNBLOCK, &b, NULL); /* the pending one runs here */
  worker_hits = hits - h;
  return NULL;
}

static void *mask_probe(void *arg) {
  pthread_sigmask(SIG_BLOCK, NULL, (sigset_t *)arg);
  return NULL;
}

static void thread_masks(void) {
  handle(SIGUSR1, 0);
  if (pipe(wp) != 0) return;
  atomic_store(&worker_stage, 0);
  pthread_t w;
  pthread_create(&w, NULL, masked_worker, NULL);
  for (int i = 0; i < 5000 && !atomic_load(&worker_stage); i++) usleep(1000);
  CHECK(sigismember(&worker_seen, SIGUSR1) == 1, "the worker's own mask");
  sigset_t mine;
  pthread_sigmask(SIG_BLOCK, NULL, &mine);
  CHECK(sigismember(&mine, SIGUSR1) == 0, "main's mask is not the worker's");

  /* Delivered although the worker blocks it: main leaves it open. */
  later l = {SIGUSR1, 50};
  pthread_t k;
  pthread_create(&k, NULL, kill_later, &l);
  int h = hits;
  char c;
  double t0 = now();
  ssize_t r = read(pfd[0], &c, 1);
  CHECK(r == -1 && errno == EINTR && hits == h + 1 && now() - t0 < 5,
        "a signal the worker blocks interrupts main");
  pthread_join(k, NULL);

  /* Every thread blocks it: pending until main unblocks it. */
  sigset_t b, old, pend;
  sigemptyset(&b);
  sigaddset(&b, SIGUSR1);
  pthread_sigmask(SIG_BLOCK, &b, &old);
  h = hits;
  kill(getpid(), SIGUSR1);
  usleep(20000);
  sigpending(&pend);
  CHECK(hits == h && sigismember(&pend, SIGUSR1) == 1,
        "blocked by every thread: pending");
  sigset_t seen;
  pthread_t p;
  pthread_create(&p, NULL, mask_probe, &seen);
  pthread_join(p, NULL);
  CHECK(sigismember(&seen, SIGUSR1) == 1, "a new thread inherits the mask");
  pthread_sigmask(SIG_SETMASK, &old, NULL);
  CHECK(hits == h + 1, "delivered when unblocked");

  /* To the worker, which blocks it: held until it unblocks it. */
  h = hits;
  CHECK(pthread_kill(w, SIGUSR1) == 0, "pthread_kill");
  usleep(30000);
  CHECK(hits == h, "pthread_kill waits while the worker blocks it");
  (void)!write(wp[1], "g", 1);
  pthread_join(w, NULL);
  CHECK(worker_hits == 1 && hits == h + 1, "run when the worker unblocked");
  close(wp[0]);
  close(wp[1]);
}

/* The SigBlk line of a program's /proc/self/status, run by posix_spawn. */
static unsigned long long spawned_sigblk(void) {
  int p[2];
  if (pipe(p) != 0) return 0;
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, p[1], 1);
  char *argv[] = {"cat", "/proc/self/status", NULL};
  extern char **environ;
  pid_t pid;
  int r = posix_spawn(&pid, "/bin/cat", &fa, NULL, argv, environ);
  posix_spawn_file_actions_destroy(&fa);
  close(p[1]);
  char buf[4096];
  size_t n = 0;
  ssize_t k;
  while (r == 0 && n < sizeof buf - 1 &&
         (k = read(p[0], buf + n, sizeof buf - 1 - n)) > 0)
    n += (size_t)k;
  buf[n] = '\0';
  close(p[0]);
  if (r == 0) waitpid(pid, NULL, 0);
  char *line = strstr(buf, "SigBlk:");
  return line ? strtoull(line + 7, NULL, 16) : 0;
}

static void child_masks(void) {
  pthread_t tk;
  atomic_store(&stop_ticking, false);
  int t0 = atomic_load(&ticks);
  pthread_create(&tk, NULL, ticker, NULL); /* leaves SIGUSR2 open */
  for (int i = 0; i < 5000 && atomic_load(&ticks) == t0; i++) usleep(1000);
  sigset_t b, old;
  sigemptyset(&b);
  sigaddset(&b, SIGUSR2);
  pthread_sigmask(SIG_BLOCK, &b, &old);
  pid_t pid = fork();
  if (pid == 0) {
    sigset_t m;
    sigprocmask(SIG_BLOCK, NULL, &m);
    _exit(sigismember(&m, SIGUSR2) == 1 ? 7 : 8);
  }
  int st = 0;
  waitpid(pid, &st, 0);
  CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 7, "a forked child's mask");
  unsigned long long blk = spawned_sigblk();
  CHECK(blk & (1ull << (SIGUSR2 - 1)), "a spawned program's mask");
  pthread_sigmask(SIG_SETMASK, &old, NULL);
  blk = spawned_sigblk();
  CHECK(!(blk & (1ull << (SIGUSR2 - 1))), "unblocked: the program's too");
  atomic_store(&stop_ticking, true);
  pthread_join(tk, NULL);
}

static sigjmp_buf jump_env;
static void jump_out(int s) {
  (void)s;
  siglongjmp(jump_env, 1);
}

static void alarm_longjmp(void) {
  pthread_t tk;
  atomic_store(&ticks, 0);
  atomic_store(&stop_ticking, false);
  pthread_create(&tk, NULL, ticker, NULL);
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = jump_out;
  sigaction(SIGALRM, &sa, NULL);
  int timeouts = 0;
  for (int i = 0; i < 3; i++) {
    volatile int jumped = 0;
    if (sigsetjmp(jump_env, 1) == 0) {
      ualarm(30000, 0);
      char c;
      (void)!read(pfd[0], &c, 1);
    } else {
      jumped = 1;
    }
    timeouts += jumped;
  }
  CHECK(timeouts == 3, "three reads timed out through siglongjmp");
  int t0 = atomic_load(&ticks);
  usleep(50000); /* main sleeps on its fiber; the ticker goes on */
  CHECK(atomic_load(&ticks) >= t0 + 3, "the threads run after the jumps");
  atomic_store(&stop_ticking, true);
  pthread_join(tk, NULL);
  sigset_t none;
  sigemptyset(&none);
  sigset_t now;
  pthread_sigmask(SIG_BLOCK, NULL, &now);
  CHECK(sigismember(&now, SIGALRM) == 0, "SIGALRM unblocked after the jump");
}

int main(void) {
  if (pipe(pfd) != 0) return 1;
  read_interrupted();
  read_restarted();
  poll_and_sleep_interrupted();
  thread_not_interrupted();
  pause_and_sigsuspend();
  masked_waits();
  sigwait_in_thread();
  thread_masks();
  alarm_longjmp();
  child_masks(); /* last: a spawn puts pipes back in blocking mode */
  if (!failed) printf("signals: all steps right\n");
  return failed;
}
