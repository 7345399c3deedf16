#!/usr/bin/env bash
# tools/build.sh [BUILD_DIR] [extra cmake -D options...]: configure (once) and build v100lua.
#   BUILD_DIR defaults to $BUILD_DIR or build/ in the repository.
#   CUDA is on AUTO: used when nvcc is found (PATH, CUDACXX or /usr/local/cuda/bin/nvcc).
#   Environment: JOBS (parallel jobs, default: the number of cores), V100LUA_CUDA (ON/OFF/AUTO),
#   CMAKE_BUILD_TYPE (default RelWithDebInfo), CUDA_ARCHS (CMAKE_CUDA_ARCHITECTURES, default 80;90).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD="${1:-${BUILD_DIR:-$ROOT/build}}"
[ $# -gt 0 ] && shift
JOBS="${JOBS:-$(nproc 2>/dev/null || echo 2)}"

# Options are passed only when set, so an existing build directory keeps its configuration
# (V100LUA_CUDA defaults to AUTO in CMakeLists.txt).
args=(-S "$ROOT" -B "$BUILD")
[ -n "${V100LUA_CUDA:-}" ] && args+=(-DV100LUA_CUDA="$V100LUA_CUDA")
[ -n "${CMAKE_BUILD_TYPE:-}" ] && args+=(-DCMAKE_BUILD_TYPE="$CMAKE_BUILD_TYPE")
[ -n "${CUDA_ARCHS:-}" ] && args+=(-DCMAKE_CUDA_ARCHITECTURES="$CUDA_ARCHS")
# Keep the generator of an existing build directory; prefer Ninja for a new one.
if [ ! -f "$BUILD/CMakeCache.txt" ] && command -v ninja >/dev/null 2>&1; then
  args+=(-G Ninja)
fi
cmake "${args[@]}" "$@"
cmake --build "$BUILD" -j "$JOBS"
