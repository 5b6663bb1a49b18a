#!/usr/bin/env bash
# Builds iofiber (Release, in build/) and runs iof-bench.
#   scripts/bench.sh              -> iof-bench --quick (prints the results table)
#   scripts/bench.sh --report     -> the full suite with --callgrind: writes
#        build/bench.csv, docs/bench-results.md (every row, with the machine
#        and the date), docs/img/echo-throughput.png and
#        docs/img/echo-instructions.png, and the README's table; ~10 minutes
#   scripts/bench.sh --render     -> the same files from the last build/bench.csv
#        (no new measurement; the date and machine are those of now)
#   scripts/bench.sh ARGS...      -> iof-bench ARGS...
# Installs missing Debian packages first (root, or sudo), including the
# benchmark's peers (libuv, State Threads) and tools (wrk, valgrind,
# gnuplot). Works from any cwd.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"

scripts/install-deps.sh --bench

cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DIOF_SANITIZE= -DIOF_BUILD_BENCH=ON
cmake --build build -j"$(nproc)"

bench=build/bench/iof-bench
if [[ ! -x "$bench" ]]; then
  echo "bench.sh: $bench was not built (is bench/CMakeLists.txt in place?)" >&2
  exit 1
fi

if (($# == 0)); then
  set -- --quick
fi
if [[ "$1" != "--report" && "$1" != "--render" ]]; then
  exec "$bench" "$@"
fi

# ---- --report / --render ------------------------------------------------------
csv=build/bench.csv
if [[ "$1" == "--report" ]]; then
  "$bench" --callgrind --csv >"$csv.tmp" || echo "bench.sh: some rows failed (see above)" >&2
  mv "$csv.tmp" "$csv"
elif [[ ! -s "$csv" ]]; then
  echo "bench.sh: --render needs $csv from an earlier --report" >&2
  exit 1
fi

cpu=$(awk -F': ' '/^model name/ {print $2; exit}' /proc/cpuinfo)
machine="$(nproc) CPUs ($cpu), $(uname -sr), $(cc --version | head -1), load average $(cut -d' ' -f1-3 /proc/loadavg) at the end"
when=$(date -u '+%Y-%m-%d %H:%M UTC')
cmd='scripts/bench.sh --report'

# Markdown table of the CSV rows accepted by the awk condition $1.
md_table() {
  awk -F, -v cond="$1" '
    function num(v) { return (v >= 1000 || v == int(v)) ? sprintf("%.0f", v) : sprintf("%.3g", v) }
    function keep() {
      if (cond == "all" || $11 != "") return 1
      if ($1 == "echo") return $2 ~ /^(iofiber\.|ir\.)/
      if ($1 == "http") return $2 ~ /^(iofiber\.|wrk\.iofiber)/
      return $1 == "idle" || $1 == "timers" || $1 == "legacy"
    }
    NR == 1 { print "| bench | case | median | unit | baseline | ratio | spread | target | notes |"
              print "|---|---|---|---|---|---|---|---|---|"; next }
    keep() {
      if ($12 != "ok") { printf "| %s | %s | %s | | | | | | %s |\n", $1, $2, $12, $13; next }
      tgt = ""
      if ($11 != "") tgt = sprintf("<= %.2f %s", $11, ($8 <= $11 ? "met" : "MISSED"))
      noisy = ($10 == "1") ? " noisy" : ""
      notes = ""
      n = split($13, kv, ";")
      for (i = 1; i <= n; i++) {
        split(kv[i], p, "=")
        notes = notes (i > 1 ? " " : "") p[1] "=" num(p[2] + 0)
      }
      printf "| %s | %s | %s | %s | %s | %.2f | %.2f%s | %s | %s |\n", \
             $1, $2, num($4 + 0), $3, ($7 == "" ? "-" : $7), $8, $9, noisy, tgt, notes
    }' "$csv"
}

{
  echo "# iof-bench results"
  echo
  echo "Produced by \`$cmd\` on $when: $machine."
  echo "Each ratio is the median of per-pair (case / baseline) ratios; lower is"
  echo "better; spread is max/min of those ratios (over 1.2: noisy). See"
  echo "docs/bench.md for what every row measures."
  echo
  md_table all
} >docs/bench-results.md

mkdir -p docs/img
if command -v gnuplot >/dev/null 2>&1; then
  gnuplot -e "csv='$csv'; outdir='docs/img'; subtitle=' - $when'" bench/plot.gp
else
  echo "bench.sh: gnuplot not installed, no pictures" >&2
fi

# The README's table: between the bench-table markers.
table=$(md_table readme)
{
  echo "<!-- bench-table -->"
  echo "Measured on $when: $machine. Reproduce with \`$cmd\`."
  echo
  echo "$table"
  echo "<!-- /bench-table -->"
} >build/bench-readme.md
awk -v f=build/bench-readme.md '
  /<!-- bench-table -->/ { while ((getline l < f) > 0) print l; skip = 1; next }
  /<!-- \/bench-table -->/ { skip = 0; next }
  !skip' README.md >README.md.tmp && mv README.md.tmp README.md
echo "bench.sh: wrote $csv, docs/bench-results.md, docs/img/*.png and README.md's table"
