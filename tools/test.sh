#!/usr/bin/env bash
# tools/test.sh [BUILD_DIR]: build (and the Python tools of the ONNX test, tools/setup-python.sh),
# then run every test with ctest. Tests labelled `gpu` run only
# when a GPU is present (nvidia-smi exists and lists one); otherwise they are excluded.
# Environment: as tools/build.sh; CTEST_TIMEOUT (seconds per test, default 900).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD="${1:-${BUILD_DIR:-$ROOT/build}}"
JOBS="${JOBS:-$(nproc 2>/dev/null || echo 2)}"

bash "$ROOT/tools/build.sh" "$BUILD"
# The Python side of the ONNX test (onnx, onnxruntime in a venv; PyPI). Without a package
# registry the test says SKIP and names this script, except under CI (.ci/run runs it first),
# where a missing package fails it.
bash "$ROOT/tools/setup-python.sh" >/dev/null ||
  echo "test.sh: tools/setup-python.sh failed: tests/lua/test_onnx.lua will skip its onnxruntime checks" >&2

# The label multinode needs the test hosts of tools/multinode.sh (root, network namespaces):
# `bash tools/multinode.sh test` runs it (.ci/run does).
label_args=()
if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L 2>/dev/null | grep -q '^GPU '; then
  echo "test.sh: GPU present: running all tests, gpu label included (multinode: tools/multinode.sh test)"
  label_args=(-LE multinode)
else
  echo "test.sh: no GPU (nvidia-smi absent or failing): excluding tests labelled gpu (and multinode: tools/multinode.sh test)"
  label_args=(-LE 'gpu|multinode')
fi
cd "$BUILD"
ctest --output-on-failure -j "$JOBS" --timeout "${CTEST_TIMEOUT:-900}" "${label_args[@]}"
