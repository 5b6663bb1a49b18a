/* The suite table: one line per suite, in the order `iof-bench` runs them.
 * BENCH_SUITE(name, description) needs `int bench_suite_name(bench_ctx *)`
 * defined in bench_name.c (bench/CMakeLists.txt picks up every bench_*.c).
 * No include guard: bench.h and main.c expand it with different macros. */
BENCH_SUITE(switch, "context switch: raw fcontext jump vs fiber "
                    "resume/suspend")
BENCH_SUITE(spawn, "fiber create+run+destroy with malloc, mmap and "
                   "stack-pool frames")
