#!/usr/bin/env bash
# tools/gpu-check.sh OUTDIR [BUILDDIR]: the whole GPU check on one machine (an H200, sm_90):
#   1. build (sm_90 only, into build-gpu/) unless BUILDDIR is given, then use that one
#   2. ctest -L gpu, then ctest -LE gpu (the rest)
#   3. a subset of the GPU tests under compute-sanitizer --tool memcheck
#   4. the first recipe on the GPU
#   5. the benchmarks: ours (bench_ops.lua, bench_alloc) and PyTorch's (bench_ops.py, bench_alloc.py)
# Full logs go under OUTDIR; a step that fails is reported and the others still run. Printed last:
# the step results and a table benchmark / ours / PyTorch / ratio (ours / PyTorch; every
# benchmark is higher-is-better). Exit status 1 when any step failed.
# Environment: PYTHON (default python3), SANITIZE_TESTS (space-separated test files to run under
# memcheck; default: the first 4 tests/lua/gpu_*.lua and every built tests/c/gpu_* program),
# JOBS, COMPUTE_SANITIZER (default /usr/local/cuda/bin/compute-sanitizer, else from PATH),
# FASHION_MNIST_ROOT (the data set's folder when it is not in /usr/share/datasets/fashion-mnist).
set -uo pipefail

if [ $# -lt 1 ]; then
  echo "usage: $0 OUTDIR [BUILDDIR]" >&2
  exit 2
fi
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
mkdir -p "$1"
OUT="$(cd "$1" && pwd)"
BUILD="${2:-}"
PYTHON="${PYTHON:-python3}"
JOBS="${JOBS:-$(nproc 2>/dev/null || echo 8)}"
# NVLink SHARP (multicast) must stay off on the lent machines.
export NCCL_NVLS_ENABLE=0

declare -a STEPS=()
record() { # name status(0 = pass) log
  local verdict=PASS
  [ "$2" -ne 0 ] && verdict="FAIL (rc $2)"
  STEPS+=("$(printf '%-28s %-12s %s' "$1" "$verdict" "$3")")
}
run_step() { # name log command...
  local name="$1" log="$2"
  shift 2
  echo "== $name: $*" | tee -a "$OUT/gpu-check.log"
  local t0=$SECONDS
  ( cd "$ROOT" && "$@" ) >"$log" 2>&1
  local rc=$?
  echo "   rc $rc in $((SECONDS - t0))s, log $log" | tee -a "$OUT/gpu-check.log"
  record "$name" "$rc" "$(basename "$log")"
  return $rc
}

{ date -u; uname -a; nvidia-smi; } >"$OUT/machine.txt" 2>&1
(cd "$ROOT" && git rev-parse HEAD && git status --short) >"$OUT/git.txt" 2>&1

# 1. build
if [ -z "$BUILD" ]; then
  BUILD="$ROOT/build-gpu"
  JOBS="$JOBS" CUDA_ARCHS="${CUDA_ARCHS:-90}" V100LUA_CUDA=ON \
    run_step build "$OUT/build.log" bash tools/build.sh "$BUILD" || true
else
  BUILD="$(cd "$BUILD" && pwd)"
  record build 0 "(given: $BUILD)"
fi
"$BUILD/v100lua" --version >"$OUT/versions.txt" 2>&1

# 2. tests
run_step "ctest -L gpu" "$OUT/ctest-gpu.log" ctest --test-dir "$BUILD" -L gpu --no-tests=error --output-on-failure -j 4 --timeout 600
run_step "ctest -LE gpu" "$OUT/ctest-rest.log" ctest --test-dir "$BUILD" -LE "gpu|multinode" --output-on-failure -j "$JOBS" --timeout 900

# 3. compute-sanitizer memcheck on a subset of the GPU tests
SAN="${COMPUTE_SANITIZER:-/usr/local/cuda/bin/compute-sanitizer}"
[ -x "$SAN" ] || SAN="$(command -v compute-sanitizer || true)"
if [ -z "$SAN" ]; then
  record "memcheck" 1 "compute-sanitizer not found"
else
  if [ -n "${SANITIZE_TESTS:-}" ]; then
    read -r -a san_tests <<<"$SANITIZE_TESTS"
  else
    san_tests=()
    for f in "$ROOT"/tests/lua/gpu_*.lua; do
      [ -f "$f" ] && san_tests+=("$f")
      [ ${#san_tests[@]} -ge 4 ] && break
    done
    for exe in "$BUILD"/gpu_*; do [ -x "$exe" ] && [ -f "$exe" ] && san_tests+=("$exe"); done
  fi
  for t in "${san_tests[@]}"; do
    name="memcheck $(basename "$t")"
    log="$OUT/memcheck-$(basename "$t").log"
    if [[ "$t" == *.lua ]]; then
      LUA_PATH="$ROOT/tests/lua/?.lua;;" run_step "$name" "$log" \
        "$SAN" --tool memcheck --error-exitcode 99 --target-processes application-only "$BUILD/v100lua" "$t"
    else
      run_step "$name" "$log" "$SAN" --tool memcheck --error-exitcode 99 --target-processes application-only "$t"
    fi
  done
fi

# 4. the recipe on the GPU
recipe_args=()
[ -n "${FASHION_MNIST_ROOT:-}" ] && recipe_args=(--root "$FASHION_MNIST_ROOT")
run_step "recipe" "$OUT/recipe.log" "$BUILD/v100lua" recipes/resnet50.lua "${recipe_args[@]}"

# 5. benchmarks
run_step "bench_ops.lua" "$OUT/bench_ops.log" "$BUILD/v100lua" bench/bench_ops.lua
if [ -x "$BUILD/bench_alloc" ]; then
  run_step "bench_alloc" "$OUT/bench_alloc.log" "$BUILD/bench_alloc"
else
  record "bench_alloc" 1 "not built ($BUILD/bench_alloc)"
fi
if "$PYTHON" -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' >/dev/null 2>&1; then
  "$PYTHON" -c 'import torch; print("torch", torch.__version__, "CUDA", torch.version.cuda)' >>"$OUT/versions.txt" 2>&1
  run_step "bench_ops.py" "$OUT/bench_ops_torch.log" "$PYTHON" bench/bench_ops.py
  run_step "bench_alloc.py" "$OUT/bench_pool_torch.log" "$PYTHON" bench/bench_alloc.py
else
  record "PyTorch benchmarks" 1 "$PYTHON cannot import torch with CUDA"
fi

# Summary: steps, then the table (ours vs PyTorch by BENCH name; cudamalloc_* has no PyTorch
# counterpart and is shown for reference).
{
  echo
  echo "== steps"
  printf '%s\n' "${STEPS[@]}"
  echo
  echo "== benchmarks (ours / PyTorch; higher is better)"
  cat "$OUT"/bench_ops.log "$OUT"/bench_alloc.log 2>/dev/null | awk '$1 == "BENCH" {print "O", $2, $3, $4}' >"$OUT/.ours"
  cat "$OUT"/bench_ops_torch.log "$OUT"/bench_pool_torch.log 2>/dev/null | awk '$1 == "BENCH" {print "T", $2, $3, $4}' >"$OUT/.torch"
  awk '
    $1 == "O" { if (!($2 in ours)) order[n++] = $2; ours[$2] = $3; unit[$2] = $4 }
    $1 == "T" { if (!($2 in ours) && !($2 in torch)) order[n++] = $2; torch[$2] = $3; unit[$2] = $4 }
    END {
      printf "%-26s %14s %14s %8s  %s\n", "benchmark", "ours", "PyTorch", "ratio", "unit"
      for (i = 0; i < n; i++) {
        k = order[i]
        o = (k in ours) ? sprintf("%.4g", ours[k]) : "-"
        t = (k in torch) ? sprintf("%.4g", torch[k]) : "-"
        r = ((k in ours) && (k in torch) && torch[k] > 0) ? sprintf("%.3f", ours[k] / torch[k]) : "-"
        printf "%-26s %14s %14s %8s  %s\n", k, o, t, r, unit[k]
      }
    }' "$OUT/.ours" "$OUT/.torch"
  rm -f "$OUT/.ours" "$OUT/.torch"
} | tee "$OUT/summary.txt"

for s in "${STEPS[@]}"; do
  [[ "$s" == *"FAIL"* ]] && exit 1
done
exit 0
