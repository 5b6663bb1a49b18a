/* Helpers of the network suites (echo, http, idle, legacy): peer server
 * processes, a built-in load generator, and per-process figures read from
 * /proc. Not a suite. */
#ifndef IOF_BENCH_NET_H
#define IOF_BENCH_NET_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* ---- peer servers -------------------------------------------------------
 * A peer is a server process: iof-bench-NAME next to iof-bench (see
 * bench/baselines/peer.h), or any program given by path. */

typedef struct bench_peer {
  pid_t pid; /* 0: not running */
  int port;
} bench_peer;

/* Writes the path of iof-bench-NAME into out. 0, or -ENOENT when it was not
 * built (e.g. libuv missing). */
int bench_peer_path(const char *name, char *out, size_t n);

/* Looks for `name` in the directories iof-bench knows (its own, ../examples,
 * ../compat, ../tools, ..) then $PATH. 0 or -ENOENT. */
int bench_find_program(const char *name, char *out, size_t n);

/* Starts argv (argv[0] a path) pinned to the server CPU (when there are 2+
 * CPUs). With port 0 the program must print "port N" on stdout (the
 * iof-bench peers do); otherwise it was told to listen on `port` and is
 * ready once a connection succeeds. timeout_s bounds the wait. 0 or a
 * negative errno (the process is then gone). */
int bench_peer_start(bench_peer *p, char *const argv[], int port,
                     double timeout_s);

/* SIGTERM, then SIGKILL after 5 s; waits for the exit. Safe when not
 * running. Returns the exit status (or 128 + signal). */
int bench_peer_stop(bench_peer *p);

/* A free loopback port (bound then closed: a tiny race, fine here). */
int bench_free_port(void);

/* ---- /proc figures ---------------------------------------------------- */

typedef struct bench_proc {
  uint64_t syscalls;     /* read-type + write-type system calls (/proc/PID/io
                            syscr + syscw): read, write, readv, writev... */
  uint64_t utime, stime; /* clock ticks (/proc/PID/stat) */
  uint64_t cpu_ns;       /* on-CPU time of the main thread in ns
                            (/proc/PID/schedstat) */
  long threads;          /* threads in the process */
} bench_proc;

int bench_proc_read(pid_t pid, bench_proc *out);
/* A counter of every system call entered by pid and the threads it
 * creates from now on (perf tracepoint raw_syscalls/sys_enter; needs root
 * or perf_event_paranoid <= -1, and tracefs mounted). fd or -1. */
int bench_syscall_counter_open(pid_t pid);
/* Its count (0 for -1). */
uint64_t bench_syscall_counter_read(int fd);

/* Resident set size of pid in KiB, or a negative errno. */
long bench_proc_rss_kib(pid_t pid);
/* Clock ticks per second. */
double bench_ticks_per_s(void);

/* ---- load generator ----------------------------------------------------
 * K non-blocking connections on one epoll set, one request in flight on
 * each (ping-pong); runs on its own thread, pinned away from the server
 * CPU when there are 2+ CPUs. Latency is kept in a log histogram (1/16
 * octave buckets). */

#define BENCH_HIST_BUCKETS (64 * 16)

typedef struct bench_gen {
  int k;
  int ep;
  int *fds;
  size_t *got;       /* response bytes received on the current request */
  uint64_t *sent_at; /* ns */
  const char *req;
  size_t req_len, resp_len;
  uint64_t target, issued, done;
  int error;
  int timeout_ms; /* no answer for this long fails a run; 0: 10 s */
  uint64_t hist[BENCH_HIST_BUCKETS];
  uint64_t nlat;
} bench_gen;

/* Connects k clients to 127.0.0.1:port. Each round trip sends req[0..
 * req_len) and waits for resp_len bytes. 0 or a negative errno (then
 * closed). */
int bench_gen_open(bench_gen *g, int port, int k, const char *req,
                   size_t req_len, size_t resp_len);
/* Performs n round trips over the connections; 0, or -ETIMEDOUT when no
 * answer came for timeout_ms, -ECONNRESET, ... */
int bench_gen_run(bench_gen *g, uint64_t n);
void bench_gen_close(bench_gen *g);
/* Latency percentile (0..100) in ns over every run so far; NAN if none. */
double bench_gen_percentile(const bench_gen *g, double pct);

/* The CPU peers are pinned to, and the generator's; -1: no pinning. */
int bench_server_cpu(void);
int bench_client_cpu(void);

/* Pins the calling process (a forked peer or tool) to cpu; cpu < 0: no
 * pinning. */
void bench_pin_process(int cpu);

/* The perf tracepoint id of `event` ("raw_syscalls/sys_enter"), from
 * tracefs or debugfs; -1 when neither has it. */
long bench_tracepoint_id(const char *event);

#endif

/* ---- a network case ------------------------------------------------------
 * One peer process + one generator as a bench_case: setup starts the peer
 * and connects k clients, the body does `iters` round trips (ns per round
 * trip), teardown stops both. The peer's /proc figures and the latency
 * histogram accumulate over every body, for bench_net_notes. */

#include "bench.h"
#include "baselines/peer.h"

#define BENCH_NET_ARGS 12

typedef struct bench_net_case {
  char name[64];
  char path[4096];            /* argv[0] usually points here */
  char *argv[BENCH_NET_ARGS]; /* NULL-terminated */
  int port_arg;               /* >= 0: argv index to receive a free port
                                 (programs that do not print "port N") */
  char port_buf[16];
  int k;
  const char *req;
  size_t req_len, resp_len;
  double start_timeout_s; /* 0: 10 s */
  /* running */
  bench_peer peer;
  bench_gen gen;
  /* accumulated */
  uint64_t hist[BENCH_HIST_BUCKETS], nlat;
  uint64_t syscalls, utime, stime, rts;
  uint64_t cpu_ns, cpu_rts; /* single-threaded servers only */
  bool proc_ok;
  int sc_fd; /* bench_syscall_counter_open, or -1 */
  uint64_t all_syscalls, sc_rts;
} bench_net_case;

/* A bench_case measuring nc (name nc->name, unit ns/roundtrip). */
bench_case bench_net_case_make(bench_net_case *nc, const char *baseline,
                               double target, unsigned run_ms);

/* Notes on nc's row: rt_s, p50_us, p99_us, sys_rt (every server system
 * call per round trip, when perf tracepoints are readable), rw_rt (its
 * read/write-type calls: read, write, readv, writev, not send/recv or
 * epoll_wait), cpu_us_rt (server CPU, ns-precise, single-threaded
 * servers), user_us_rt and sys_us_rt (its split, in 10 ms ticks). */
void bench_net_notes(bench_ctx *ctx, const bench_net_case *nc);

/* Latency percentile from a histogram (see bench_gen). */
double bench_hist_percentile(const uint64_t *hist, uint64_t n, double pct);
