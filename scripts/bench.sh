#!/usr/bin/env bash
# Builds iofiber (Release, in build/) and runs iof-bench.
#   scripts/bench.sh              -> iof-bench --quick (prints the results table)
#   scripts/bench.sh ARGS...      -> iof-bench ARGS...
# Installs missing Debian packages first (root, or sudo). Works from any cwd.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"

scripts/install-deps.sh

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
exec "$bench" "$@"
