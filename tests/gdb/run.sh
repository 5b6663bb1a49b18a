#!/usr/bin/env bash
# The gdb extension's test: runs gdb in batch mode on gdb_target, stops
# while two fibers are suspended, and checks `info iofibers` and
# `iofiber bt` (including that the thread's own backtrace is intact after).
#   run.sh GDB TARGET IOFIBER_PY
set -euo pipefail
gdb=$1 target=$2 py=$3
# LeakSanitizer cannot run under ptrace (ASan builds): no leak check here.
export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0"
out=$("$gdb" -nx -batch -q \
  -ex "set debuginfod enabled off" \
  -ex "set pagination off" \
  -ex "source $py" \
  -ex "break gdb_stop_here" \
  -ex "run" \
  -ex "info iofibers" \
  -ex "iofiber bt 1" \
  -ex "iofiber bt 2" \
  -ex "echo ---- own\n" \
  -ex "bt" \
  -ex "iofiber bt 3" \
  -ex "iofiber bt 99" \
  -ex "continue" \
  "$target" 2>&1) || true
printf '%s\n' "$out"

fail=0
expect() {
  if ! grep -Eq -- "$1" <<<"$out"; then
    echo "gdb test: expected /$1/" >&2
    fail=1
  fi
}
expect '^1 +suspended +alpha +io_context@0x[0-9a-f]+ +sync primitive'
expect '^2 +suspended +beta +io_context@0x[0-9a-f]+ +io \(0x'
expect '^3 +running +inspector +io_context@'
expect '^3 live fibers'
expect '^fiber #1 "alpha" \(suspended\):'
# alpha's stack: the event wait under four parked_in_alpha frames.
[[ $(sed -n '/^fiber #1/,/^fiber #2/p' <<<"$out" | grep -c 'parked_in_alpha') -eq 4 ]] ||
  { echo "gdb test: expected 4 parked_in_alpha frames in fiber #1" >&2; fail=1; }
sed -n '/^fiber #1/,/^fiber #2/p' <<<"$out" | grep -q ' alpha ' ||
  { echo "gdb test: expected alpha() in fiber #1's backtrace" >&2; fail=1; }
sed -n '/^fiber #2/,/^---- own/p' <<<"$out" | grep -q 'napping_in_beta' ||
  { echo "gdb test: expected napping_in_beta in fiber #2's backtrace" >&2; fail=1; }
# A fiber's backtrace ends at its entry frame, not in garbage beyond it.
sed -n '/^fiber #1/,/^---- own/p' <<<"$out" | grep -q '?? ()' &&
  { echo "gdb test: a fiber backtrace runs past fiber_entry" >&2; fail=1; }
# After the fiber backtraces the thread is back where it stopped.
sed -n '/^---- own/,$p' <<<"$out" | grep -Eq '^#0 .*gdb_stop_here' ||
  { echo "gdb test: the thread's registers were not restored" >&2; fail=1; }
expect 'fiber #3 is running on a thread'
expect 'no live fiber #99'
expect 'gdb_target: done'
expect 'exited normally'
exit "$fail"
