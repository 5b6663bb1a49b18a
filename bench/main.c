/* iof-bench command line: picks suites from the registry in suites.h, runs
 * them and prints the results. Exit status: 0 all cases ran, 1 a case
 * failed, 2 usage error. */
#include "bench.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct bench_suite {
  const char *name;
  const char *desc;
  int (*run)(bench_ctx *ctx);
} bench_suite;

static const bench_suite suites[] = {
#define BENCH_SUITE(name, desc) {#name, desc, bench_suite_##name},
#include "suites.h"
#undef BENCH_SUITE
};

#define NSUITES (sizeof suites / sizeof suites[0])
#define RUNS_MIN 5
#define RUNS_MAX 1000

static void usage(FILE *out) {
  fprintf(out,
          "usage: iof-bench [--quick] [--json|--csv] [--runs N] [--callgrind]\n"
          "                 [SUITE...]\n"
          "       iof-bench --list | --help\n"
          "\n"
          "Runs the given suites (default: all) and reports each case's\n"
          "median, min and max per operation over N runs, each run paired\n"
          "with a run of its baseline case (A B A B ...): the ratio is the\n"
          "median of the pair ratios, the spread their max/min.\n"
          "\n"
          "  --quick    shorter runs (5 runs by default), for smoke tests\n"
          "  --json     one JSON object per result line instead of a table\n"
          "  --csv      CSV (header line, one line per row) instead\n"
          "  --callgrind  echo: also count instructions per round trip\n"
          "             of each server under valgrind --tool=callgrind\n"
          "  --runs N   runs (pairs) per case, %d..%d (default 9; 5 with\n"
          "             --quick)\n"
          "  --list     list the suites and exit\n"
          "  --help     show this help and exit\n",
          RUNS_MIN, RUNS_MAX);
}

static const bench_suite *find_suite(const char *name) {
  for (size_t i = 0; i < NSUITES; i++)
    if (strcmp(suites[i].name, name) == 0) return &suites[i];
  return NULL;
}

static int parse_runs(const char *s, int *out) {
  char *end;
  errno = 0;
  long v = strtol(s, &end, 10);
  if (errno || end == s || *end || v < RUNS_MIN || v > RUNS_MAX) {
    fprintf(stderr, "iof-bench: --runs wants an integer in %d..%d, got '%s'\n",
            RUNS_MIN, RUNS_MAX, s);
    return -1;
  }
  *out = (int)v;
  return 0;
}

int main(int argc, char **argv) {
  bench_options opts = {0};
  bool selected[NSUITES] = {false};
  bool any = false, options_done = false;

  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    if (!options_done && a[0] == '-') {
      if (strcmp(a, "--") == 0) {
        options_done = true;
      } else if (strcmp(a, "--quick") == 0) {
        opts.quick = true;
      } else if (strcmp(a, "--json") == 0) {
        opts.format = BENCH_JSON;
      } else if (strcmp(a, "--csv") == 0) {
        opts.format = BENCH_CSV;
      } else if (strcmp(a, "--callgrind") == 0) {
        opts.callgrind = true;
      } else if (strcmp(a, "--runs") == 0) {
        if (i + 1 >= argc) {
          fprintf(stderr, "iof-bench: --runs needs a value\n");
          return 2;
        }
        if (parse_runs(argv[++i], &opts.runs) < 0) return 2;
      } else if (strncmp(a, "--runs=", 7) == 0) {
        if (parse_runs(a + 7, &opts.runs) < 0) return 2;
      } else if (strcmp(a, "--list") == 0) {
        for (size_t s = 0; s < NSUITES; s++)
          printf("%-10s %s\n", suites[s].name, suites[s].desc);
        return 0;
      } else if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
        usage(stdout);
        return 0;
      } else {
        fprintf(stderr, "iof-bench: unknown option '%s'\n", a);
        usage(stderr);
        return 2;
      }
      continue;
    }
    const bench_suite *s = find_suite(a);
    if (!s) {
      fprintf(stderr, "iof-bench: unknown suite '%s' (see --list)\n", a);
      return 2;
    }
    selected[s - suites] = true;
    any = true;
  }

  bench_ctx *ctx = bench_ctx_create(&opts);
  if (!ctx) {
    fprintf(stderr, "iof-bench: out of memory\n");
    return 1;
  }
  /* Suites run in table order whatever the command line order, so output
   * from different invocations lines up. */
  int status = 0;
  for (size_t i = 0; i < NSUITES; i++) {
    if (any && !selected[i]) continue;
    bench_begin_suite(ctx, suites[i].name);
    if (suites[i].run(ctx) < 0) status = 1;
  }
  if (bench_report(ctx) > 0) status = 1;
  bench_ctx_destroy(ctx);
  return status;
}
