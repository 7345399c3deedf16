#!/usr/bin/env bash
# tools/device-run.sh: the GPU check on a lent H200 machine that has no build tools for us (no Lua,
# no OpenBLAS): binaries built elsewhere for sm_90 arrive gzip'ed in .dev/bin (made by
# tools/device-pack.sh; the host finds the Lua modules packed in .dev/lua, argparse for the
# recipes, from .dev/run/../lua). Runs every tests/lua/gpu_*.lua (in parallel), a subset under
# compute-sanitizer memcheck, the benchmarks (ours and PyTorch's), and optional extra commands.
# Usage: tools/device-run.sh OUTDIR [step...]; steps: tests memcheck sanitize bench recipe:<args...> py:<args...>
# train:<args...> (bench/train_step.lua and .py side by side) prof:<args...> (one step of each under
# ncu / torch.profiler, kernels by time) mpi:<test file> (under mpirun -np 1:
# the NCCL path at world size 1) cpu:<threads> (the CPU backend against PyTorch's CPU with the same
# thread count: bench/cpu_ops.lua/.py and a BERT-Tiny training step, f32)
# (arguments joined by commas). Environment: GPU_TESTS, MEMCHECK_TESTS (files), MEMCHECK_TIMEOUT (s),
# DEADLINE_S (skip the steps that would start later than this), TEST_TIMEOUT (s per GPU test; 0 = none).
set -uo pipefail
FINAL="${1:?usage: tools/device-run.sh OUTDIR [steps]}"
shift
# The device tool returns at most 8 files: logs go to a folder that is packed into one archive.
OUT="$FINAL/logs"
mkdir -p "$OUT"
steps="${*:-tests memcheck bench}"
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
export NCCL_NVLS_ENABLE=0
# The GPU machine has no dataset-fashion-mnist package: the tests that need it read this.
[ -d "$ROOT/.dev/data/fashion-mnist" ] && export FASHION_MNIST_ROOT="$ROOT/.dev/data/fashion-mnist"
# The build tree's binary looks for its Lua library at the absolute path it was built in.
mkdir -p /work && [ -e /work/main ] || ln -s "$ROOT" /work/main
BIN="$ROOT/.dev/run"
mkdir -p "$BIN"
for z in .dev/bin/*.gz; do
  [ -f "$z" ] || continue
  b="$BIN/$(basename "$z" .gz)"
  # Two runs of this script may share the tree (memcheck beside the tests): never rewrite a binary
  # that may be executing (ETXTBSY); unpack only when the archive is newer.
  [ "$b" -nt "$z" ] || { gzip -dc "$z" >"$b.tmp" && chmod +x "$b.tmp" && mv -f "$b.tmp" "$b"; }
done
[ -f .dev/lua/argparse.lua ] ||
  echo "device-run.sh: no .dev/lua/argparse.lua (re-run tools/device-pack.sh): recipes will fail" >&2
[ -d .dev/lib ] && export LD_LIBRARY_PATH="$ROOT/.dev/lib:${LD_LIBRARY_PATH:-}"
# cuBLAS and NVRTC (v100.kernel) of the toolkit there.
[ -d /usr/local/cuda/lib64 ] && export LD_LIBRARY_PATH="${LD_LIBRARY_PATH:+$LD_LIBRARY_PATH:}/usr/local/cuda/lib64"
V="$BIN/v100lua"
"$V" --version 2>&1 | tee "$OUT/versions.txt"
nvidia-smi --query-gpu=name,memory.total,clocks.sm,driver_version --format=csv >>"$OUT/versions.txt" 2>&1
export LUA_PATH="$ROOT/tests/lua/?.lua;;"
summary=()
nrecipe=0
for step in $steps; do
  # DEADLINE_S: steps that would start after this many seconds are skipped, so that a call with a
  # tight device budget still returns its logs.
  if [ -n "${DEADLINE_S:-}" ] && [ "$SECONDS" -ge "$DEADLINE_S" ]; then
    summary+=("$step skipped (DEADLINE_S=$DEADLINE_S reached at ${SECONDS}s)")
    continue
  fi
  case "$step" in
    tests)
      pids=()
      for f in ${GPU_TESTS:-tests/lua/gpu_*.lua}; do
        n=$(basename "$f" .lua)
        ( t0=$SECONDS; timeout "${TEST_TIMEOUT:-0}" "$V" "$f" >"$OUT/$n.log" 2>&1; echo "rc=$? ${n} $((SECONDS - t0))s" >>"$OUT/$n.log" ) &
        pids+=($!)
      done
      wait "${pids[@]}"
      for f in ${GPU_TESTS:-tests/lua/gpu_*.lua}; do
        n=$(basename "$f" .lua)
        summary+=("$(tail -1 "$OUT/$n.log") | $(grep -E '^[0-9]+ passed, [0-9]+ failed' "$OUT/$n.log" | tail -1)")
        grep -q '^rc=0 ' <(tail -1 "$OUT/$n.log") || { echo "--- $n"; grep -E '^FAIL|^\[|error|Error' "$OUT/$n.log" | head -12; } >>"$FINAL/failures.txt"
      done
      ;;
    memcheck)
      # In parallel: each file under memcheck runs 10-100x slower than alone, and the GPU has room.
      pids=()
      api_flag=""
      /usr/local/cuda/bin/compute-sanitizer --help 2>&1 | grep -q -- '--report-api-errors' && api_flag="--report-api-errors no"
      echo "memcheck flags: ${api_flag:-(none)}" >>"$OUT/versions.txt"
      for f in ${MEMCHECK_TESTS:-tests/lua/gpu_rng.lua tests/lua/gpu_optim.lua}; do
        n=$(basename "$f" .lua)
        # --report-api-errors no: memcheck is for device memory errors; every CUDA API return code is
        # checked by our code already, and some tests provoke API errors on purpose (bad launch
        # configurations, v100.kernel's parameter probing), which would count as errors here.
        # --target-processes application-only: a test's own child jobs (gpu_dist's watchdog job
        # under mpirun) run as they would for a user. V100_UNDER_MEMCHECK=1 lets a test leave out
        # what cannot run under the sanitizer (the watchdog's child job hung for 60 s either way).
        ( V100_UNDER_MEMCHECK=1 timeout "${MEMCHECK_TIMEOUT:-300}" /usr/local/cuda/bin/compute-sanitizer --tool memcheck --error-exitcode 99 \
            --target-processes application-only $api_flag \
            "$V" "$f" >"$OUT/memcheck_$n.log" 2>&1; echo "rc=$?" >>"$OUT/memcheck_$n.log" ) &
        pids+=($!)
      done
      wait "${pids[@]}"
      for f in ${MEMCHECK_TESTS:-tests/lua/gpu_rng.lua tests/lua/gpu_optim.lua}; do
        n=$(basename "$f" .lua)
        summary+=("memcheck $n $(tail -1 "$OUT/memcheck_$n.log") $(grep -E 'ERROR SUMMARY' "$OUT/memcheck_$n.log" | tail -1) | $(grep -E '^[0-9]+ passed, [0-9]+ failed' "$OUT/memcheck_$n.log" | tail -1)")
      done
      ;;
    sanitize)
      # compute-sanitizer memcheck over two steps of each recipe under each AMP policy, eager and
      # graphed; racecheck, synccheck and initcheck on our own kernels (tools/device-sanitize.sh)
      t0=$SECONDS
      V="$V" bash tools/device-sanitize.sh "$OUT/sanitize" >"$OUT/sanitize.txt" 2>&1
      cp "$OUT/sanitize.txt" "$FINAL/sanitize.txt"
      summary+=("sanitize $((SECONDS - t0))s: $(grep -c 'rc=0 ' "$OUT/sanitize.txt") of $(grep -c 'rc=' "$OUT/sanitize.txt") runs rc=0 (table in sanitize.txt)")
      ;;
    bench)
      { "$V" bench/bench_ops.lua; [ -x "$BIN/bench_alloc" ] && "$BIN/bench_alloc";
        python3 bench/bench_ops.py; python3 bench/bench_alloc.py; } >"$OUT/bench.log" 2>&1
      summary+=("bench rc=$?")
      ;;
    recipe:*)
      args="${step#recipe:}"
      t0=$SECONDS
      nrecipe=$((nrecipe + 1))
      log="$OUT/recipe${nrecipe}_$(basename "${args%%,*}" .lua).log"
      "$V" ${args//,/ } >"$log" 2>&1
      summary+=("recipe ${args} rc=$? $((SECONDS - t0))s: $(grep -E '^test accuracy' "$log" | tail -1)")
      ;;
    train:*)
      # bench/train_step.lua and bench/train_step.py with the same arguments, e.g.
      # train:--model,resnet50,--amp,O1,--dtype,bf16,--graph,on: ours and PyTorch's samples/s.
      args="${step#train:}"
      t0=$SECONDS
      nrecipe=$((nrecipe + 1))
      log="$OUT/train${nrecipe}.log"
      { "$V" bench/train_step.lua ${args//,/ }; echo "rc=$?"; PYTHONUNBUFFERED=1 python3 bench/train_step.py ${args//,/ };
        echo "rc=$?"; } >"$log" 2>&1
      summary+=("train ${args} $((SECONDS - t0))s: $(grep -E '^BENCH [a-z_0-9A-Z]+ [0-9.]+ samples' "$log" | awk '{printf "%s=%s ", $2, $3}') $(grep -c '^rc=0' "$log")/2 ok")
      ;;
    mpi:*)
      f="${step#mpi:}"
      n=$(basename "$f" .lua)
      t0=$SECONDS
      OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 timeout "${TEST_TIMEOUT:-0}" \
        mpirun -np 1 -x LD_LIBRARY_PATH -x LUA_PATH -x NCCL_NVLS_ENABLE "$V" "$f" >"$OUT/mpi_$n.log" 2>&1
      rc=$?
      echo "rc=$rc mpi ${n} $((SECONDS - t0))s" >>"$OUT/mpi_$n.log"
      summary+=("rc=$rc mpirun -np 1 ${n} $((SECONDS - t0))s | $(grep -E '^[0-9]+ passed, [0-9]+ failed' "$OUT/mpi_$n.log" | tail -1)")
      [ "$rc" = 0 ] || { echo "--- mpi $n"; grep -E '^FAIL|^\[|error|Error' "$OUT/mpi_$n.log" | head -12; } >>"$FINAL/failures.txt"
      ;;
    cpu:*)
      # ours and PyTorch's CPU side by side, both with the same number of threads
      th="${step#cpu:}"
      t0=$SECONDS
      log="$OUT/cpu_${th}.log"
      { V100LUA_NUM_THREADS="$th" "$V" bench/cpu_ops.lua; python3 bench/cpu_ops.py --threads "$th";
        V100LUA_NUM_THREADS="$th" "$V" bench/train_step.lua --model bert-tiny --device cpu --amp O0 --batch 32 --steps 10 --warmup 2;
        PYTHONUNBUFFERED=1 python3 bench/train_step.py --model bert-tiny --device cpu --amp O0 --batch 32 --steps 10 --warmup 2 --threads "$th";
      } >"$log" 2>&1
      summary+=("cpu threads=$th $((SECONDS - t0))s: $(grep -E '^BENCH [a-z_0-9A-Z]+ [0-9.]+ samples' "$log" | awk '{printf "%s=%s ", $2, $3}')")
      ;;
    prof:*)
      # One step of bench/train_step.lua under ncu (kernel durations at the GPU's own clocks) and
      # the same step of bench/train_step.py under torch.profiler: where each side's time goes.
      args="${step#prof:}"
      t0=$SECONDS
      nrecipe=$((nrecipe + 1))
      log="$OUT/prof${nrecipe}.log"
      NCU=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
      { timeout 400 "$NCU" --clock-control none --profile-from-start off --metrics gpu__time_duration.sum --csv \
          --print-units base "$V" bench/train_step.lua ${args//,/ } --steps 3 --warmup 3 --profile on >"$OUT/prof${nrecipe}.csv" 2>"$OUT/prof${nrecipe}.err"
        echo "ncu rc=$?"; python3 tools/ncu_summary.py "$OUT/prof${nrecipe}.csv"
        PYTHONUNBUFFERED=1 python3 bench/train_step.py ${args//,/ } --steps 5 --warmup 3 --profile on; echo "rc=$?"; } >"$log" 2>&1
      cp "$log" "$FINAL/prof${nrecipe}.txt"
      summary+=("prof ${args} $((SECONDS - t0))s: $(grep -E '^# PROFILE (ours|torch) one step' "$log" | tr '\n' ' ')")
      ;;
    py:*)
      # A Python (PyTorch) script with arguments, e.g. py:bench/fashion_resnet.py,--epochs,3: the other
      # side of a side-by-side figure, in the same call.
      args="${step#py:}"
      t0=$SECONDS
      nrecipe=$((nrecipe + 1))
      log="$OUT/py${nrecipe}_$(basename "${args%%,*}" .py).log"
      PYTHONUNBUFFERED=1 python3 ${args//,/ } >"$log" 2>&1
      summary+=("py ${args} rc=$? $((SECONDS - t0))s: $(grep -E '^BENCH' "$log" | tail -1)")
      ;;
  esac
done
tar -C "$FINAL" -czf "$FINAL/logs.tgz" logs && rm -rf "$OUT"
[ -f "$FINAL/failures.txt" ] && { echo "== failures"; cut -c1-300 "$FINAL/failures.txt" | head -80; }
echo "== summary"
printf '%s\n' "${summary[@]}"
tar -xzOf "$FINAL/logs.tgz" logs/bench.log 2>/dev/null | grep '^BENCH' 
exit 0
