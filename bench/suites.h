/* The suite table: one line per suite, in the order `iof-bench` runs them.
 * BENCH_SUITE(name, description) needs `int bench_suite_name(bench_ctx *)`
 * defined in bench_name.c (bench/CMakeLists.txt picks up every bench_*.c).
 * No include guard: bench.h and main.c expand it with different macros. */
BENCH_SUITE(switch, "context switch: raw fcontext jump vs fiber "
                    "resume/suspend")
BENCH_SUITE(spawn, "fiber create+run+destroy with malloc, mmap and "
                   "stack-pool frames")
BENCH_SUITE(sync, "mutex, channel and when_all against a raw switch, a "
                  "pthread mutex and plain launches")
BENCH_SUITE(io, "echo round trips over loopback TCP: hand-written libev "
                "server vs fiber-per-connection server")
BENCH_SUITE(post, "io_context post+resume (iof_yield) vs a raw switch; "
                  "cross-thread post vs same-thread")
BENCH_SUITE(strand, "fibers yielding through a strand vs on the io_context "
                    "itself")
BENCH_SUITE(pool, "thread pool (1 and 2 threads): iof_run hops and launches "
                  "vs the same on an io_context")
BENCH_SUITE(launch, "iof_run_async to completion on an io_context vs fiber "
                    "create+resume+destroy; 150 ns goal")
BENCH_SUITE(echo, "echo ping-pong against server processes (iofiber, raw "
                  "libev, libuv, State Threads, thread per connection); "
                  "--callgrind: instructions per round trip")
BENCH_SUITE(http, "HTTP/1.1 keep-alive hello servers driven by the built-in "
                  "generator (and wrk when installed)")
BENCH_SUITE(timers, "timed waits (channel deadline, cond timed wait, "
                    "iof_timer) with 1,000 to 100,000 fibers parked in "
                    "timed waits")
BENCH_SUITE(idle, "server memory (RSS) per idle connection, 10,000 "
                  "connections to each server")
BENCH_SUITE(legacy, "the unmodified blocking legacy-echo server: thread per "
                    "connection vs compat-layer fibers vs iofiber-run")
BENCH_SUITE(wait, "timed waits arm+cancel with 1,000 to 100,000 waiters: "
                  "sem_timedwait vs sleep_for")
