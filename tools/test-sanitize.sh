#!/usr/bin/env bash
# tools/test-sanitize.sh [BUILD_DIR]: the CPU test suite under AddressSanitizer, LeakSanitizer and
# UndefinedBehaviorSanitizer. Builds CPU-only with -DV100LUA_SANITIZE=ON into BUILD_DIR (default
# build-asan/ in the repository; a directory of its own, never the normal build), then runs
# `ctest -LE 'gpu|mpi|multinode|recipe'`. Every finding is fatal (the test fails with the sanitizer's report).
# The `mpi` tests (mpirun jobs) are left out: Open MPI's MPI_Init/MPI_Finalize leave allocations
# that LSan reports as leaks. tests/lua/test_dist.lua (world size 1, no MPI_Init) still runs.
# Environment: JOBS (default: the number of cores), CTEST_TIMEOUT (seconds per test, default 900),
# CMAKE_BUILD_TYPE (default RelWithDebInfo). Extra ASAN_OPTIONS/UBSAN_OPTIONS are appended.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD="${1:-$ROOT/build-asan}"
JOBS="${JOBS:-$(nproc 2>/dev/null || echo 2)}"

V100LUA_CUDA=OFF JOBS="$JOBS" bash "$ROOT/tools/build.sh" "$BUILD" -DV100LUA_SANITIZE=ON

# detect_leaks: LSan at exit (a leak fails the test). stack-use-after-return and init-order
# checks are cheap here and off by default.
# halt_on_error: UBSan's first report ends the test (the build also uses -fno-sanitize-recover).
# No LSan suppressions are needed: the statically linked Lua, OpenBLAS, zlib and cJSON leak
# nothing at exit in this suite (pass LSAN_OPTIONS=suppressions=FILE to add some).
export ASAN_OPTIONS="detect_leaks=1:strict_string_checks=1:detect_stack_use_after_return=1:check_initialization_order=1${ASAN_OPTIONS:+:$ASAN_OPTIONS}"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1${UBSAN_OPTIONS:+:$UBSAN_OPTIONS}"
cd "$BUILD"
ctest --output-on-failure -j "$JOBS" --timeout "${CTEST_TIMEOUT:-900}" -LE 'gpu|mpi|multinode|recipe'
