#!/usr/bin/env bash
# tests/tools/test_check_deps.sh BUILD_DIR: tools/check-deps.sh passes on the project's own lists,
# and fails, naming what is missing, when a package is dropped from a copy of tools/setup.sh's
# list or a module from a copy of tools/requirements-ci.txt (the defects it exists to catch: the
# ONNX writer's protoc-c, issue 26).
set -uo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
BUILD="${1:?usage: test_check_deps.sh BUILD_DIR}"
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
pass=0 failed=0
check() { # name, expected exit status, pattern that must be in the output, check-deps arguments...
  local name="$1" want="$2" pat="$3"; shift 3
  local out rc
  out=$(bash "$ROOT/tools/check-deps.sh" --build "$BUILD" "$@" 2>&1); rc=$?
  if [ "$rc" -eq "$want" ] && grep -qF -- "$pat" <<<"$out"; then
    pass=$((pass + 1)); echo "ok: $name"
  else
    failed=$((failed + 1)); printf 'FAIL: %s (exit %s, want %s; output must contain "%s"):\n%s\n' "$name" "$rc" "$want" "$pat" "$out"
  fi
}

check 'the project lists provide everything' 0 'check-deps: ok'

# Drop one package from a copy of the list, wherever it stands in it.
drop() { sed -E "s/(^|[ (])$1([ )]|\$)/\\1\\2/" "$ROOT/tools/setup.sh" > "$tmp/setup-$1.sh"
         ! grep -qE "(^|[ (])$1([ )]|\$)" "$tmp/setup-$1.sh" || { echo "FAIL: could not drop $1"; exit 1; }; }
drop protobuf-c-compiler
check 'protoc-c without protobuf-c-compiler' 1 'MISSING Debian package protobuf-c-compiler: the build uses /usr/bin/protoc-c' \
  --setup "$tmp/setup-protobuf-c-compiler.sh"
drop libcjson-dev
check 'cJSON without libcjson-dev' 1 'MISSING Debian package libcjson-dev' --setup "$tmp/setup-libcjson-dev.sh"
drop python3-prometheus-client
check 'prom_parse.py without python3-prometheus-client' 1 "MISSING Python module 'prometheus_client'" \
  --setup "$tmp/setup-python3-prometheus-client.sh"

grep -v '^onnxruntime' "$ROOT/tools/requirements-ci.txt" > "$tmp/req.txt"
check 'check_ort.py without onnxruntime in requirements-ci.txt' 1 "MISSING Python module 'onnxruntime'" --requirements "$tmp/req.txt"

echo "$pass passed, $failed failed"
[ "$failed" -eq 0 ]
