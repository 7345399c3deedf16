#!/usr/bin/env bash
# tools/quickstart.sh: from a fresh Debian 12 machine (as root) to a first training run:
# install what is missing, configure (CUDA on AUTO), build into build/, run the first recipe.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD="${BUILD_DIR:-$ROOT/build}"
bash "$ROOT/tools/setup.sh"
bash "$ROOT/tools/build.sh" "$BUILD"
cd "$ROOT"
"$BUILD/v100lua" recipes/resnet50.lua "$@"
