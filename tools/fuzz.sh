#!/usr/bin/env bash
# tools/fuzz.sh [--short | --runs N | --seconds S] [target...]: builds the libFuzzer targets
# (tests/fuzz/fuzz_*.c: Clang, ASan + UBSan, CPU-only, into build-fuzz/) and runs each on its seed
# corpus (tests/fuzz/corpus/<target>, read-only: what the fuzzer finds goes to
# build-fuzz/corpus/<target>). --short (what CI runs): 20000 executions each. --runs N: N
# executions each (docs/RELIABILITY.md reports the 10^6 runs). --seconds S: S seconds each.
# A crash, leak, UB report or timeout (-timeout=10 s per input) fails the run, and the input
# that caused it is left as build-fuzz/crash-* for a regression test.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
B="${FUZZ_BUILD_DIR:-$ROOT/build-fuzz}"
runs=20000 secs=0
targets=()
while [ $# -gt 0 ]; do
  case "$1" in
    --short) runs=20000 ;;
    --runs) runs="$2"; shift ;;
    --seconds) secs="$2"; runs=0; shift ;;
    -h|--help) sed -n 2,8p "$0"; exit 0 ;;
    *) targets+=("$1") ;;
  esac
  shift
done
command -v clang >/dev/null || { echo "tools/fuzz.sh: needs clang (apt-get install clang)" >&2; exit 1; }
if [ ${#targets[@]} -eq 0 ]; then
  for f in "$ROOT"/tests/fuzz/fuzz_*.c "$ROOT"/tests/fuzz/host/fuzz_*.c; do targets+=("$(basename "$f" .c)"); done
fi
CC=clang V100LUA_CUDA=OFF JOBS="${JOBS:-$(nproc)}" bash "$ROOT/tools/build.sh" "$B" -DV100LUA_FUZZ=ON \
  -DV100LUA_READLINE=OFF >/dev/null
cmake --build "$B" -j "${JOBS:-$(nproc)}" --target "${targets[@]}" >/dev/null
export ASAN_OPTIONS="detect_leaks=1:allocator_may_return_null=1${ASAN_OPTIONS:+:$ASAN_OPTIONS}"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1${UBSAN_OPTIONS:+:$UBSAN_OPTIONS}"
status=0
for t in "${targets[@]}"; do
  seeds="$ROOT/tests/fuzz/corpus/$t"
  work="$B/corpus/$t"
  mkdir -p "$work"
  lim=(-runs="$runs")
  [ "$secs" != 0 ] && lim=(-max_total_time="$secs")
  dict=()
  [ -f "$ROOT/tests/fuzz/$t.dict" ] && dict=(-dict="$ROOT/tests/fuzz/$t.dict")
  log="$B/$t.log"
  if (cd "$B" && "./$t" "${lim[@]}" "${dict[@]}" -timeout=10 -rss_limit_mb=2048 -max_len=65536 \
        -print_final_stats=1 "$work" "$seeds" >"$log" 2>&1); then
    echo "$t: $(grep -E '^stat::number_of_executed_units' "$log" | awk '{print $2}') executions, \
$(grep -E '^stat::peak_rss_mb' "$log" | awk '{print $2}') MB peak, corpus $(ls "$work" | wc -l) + $(ls "$seeds" | wc -l) seeds: ok"
  else
    echo "$t: FAILED (log $log)"
    grep -E 'ERROR|SUMMARY|runtime error' "$log" | head -5
    status=1
  fi
done
exit $status
