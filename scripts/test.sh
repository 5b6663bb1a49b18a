#!/usr/bin/env bash
# Builds iofiber (Release, warnings as errors, in build/) and runs every test
# with ctest. Installs missing Debian packages first (root, or sudo).
# Works from any cwd. Extra arguments are passed to ctest (e.g. -R fiber).
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"

scripts/install-deps.sh

cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DIOF_WERROR=ON -DIOF_SANITIZE= \
  -DIOF_BUILD_TESTS=ON
cmake --build build -j"$(nproc)"

ctest --test-dir build --output-on-failure --no-tests=error -j2 "$@"
