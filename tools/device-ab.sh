#!/usr/bin/env bash
# tools/device-ab.sh OUTDIR ROUNDS -- ARGS...: bench/train_step.lua ARGS with two builds of
# v100lua on one GPU machine, alternating A, B, A, B (ROUNDS times each), so that a change's
# effect on a step is measured in one call against its own baseline (docs/PERFORMANCE.md).
#   A: .dev/before/v100lua.gz, built from the baseline commit by tools/device-pack.sh in another
#      worktree; its Lua library travels as .dev/before-scripts (the binary looks for it at the
#      absolute path it was built in, $AB_BEFORE_ROOT/scripts, linked here);
#   B: .dev/bin/v100lua.gz, this tree's (tools/device-run.sh unpacks it into .dev/run).
# Prints `AB <A|B> <round> <BENCH line>` lines and writes OUTDIR/ab.log.
set -uo pipefail
OUT="${1:?usage: tools/device-ab.sh OUTDIR ROUNDS -- ARGS...}"
ROUNDS="${2:?rounds}"
shift 2
[ "${1:-}" = "--" ] && shift
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
mkdir -p "$OUT" .dev/runb
gzip -dc .dev/before/v100lua.gz >.dev/runb/v100lua && chmod +x .dev/runb/v100lua
B_ROOT="${AB_BEFORE_ROOT:-/work/wt-before}"
mkdir -p "$B_ROOT" && [ -e "$B_ROOT/scripts" ] || ln -s "$ROOT/.dev/before-scripts" "$B_ROOT/scripts"
[ -d .dev/lib ] && export LD_LIBRARY_PATH="$ROOT/.dev/lib:${LD_LIBRARY_PATH:-}"
[ -d /usr/local/cuda/lib64 ] && export LD_LIBRARY_PATH="${LD_LIBRARY_PATH:+$LD_LIBRARY_PATH:}/usr/local/cuda/lib64"
for r in $(seq "$ROUNDS"); do
  for w in A B; do
    bin=.dev/runb/v100lua
    [ "$w" = B ] && bin=.dev/run/v100lua
    "$bin" bench/train_step.lua "$@" >"$OUT/ab_${w}_$r.log" 2>&1
    grep -E '^BENCH ' "$OUT/ab_${w}_$r.log" | sed "s/^/AB $w $r /" | tee -a "$OUT/ab.log"
  done
done
