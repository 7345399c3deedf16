#!/usr/bin/env bash
# tools/device-pack.sh [BUILDDIR]: builds v100lua and bench_alloc for sm_90 (readline off: the GPU
# machine has none) and leaves them stripped and gzip'ed in .dev/bin for tools/device-run.sh,
# plus shared libraries the GPU machine lacks in .dev/lib and the pure-Lua modules it lacks
# (Debian's lua-argparse, which the recipes need) in .dev/lua: the host adds <binary's folder>/../lua
# to package.path, and device-run.sh runs the binary from .dev/run. .dev/ is ignored by git; the
# device tool carries it when asked (carry: [".dev"]).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
B="${1:-$ROOT/build-dev}"
cmake -S "$ROOT" -B "$B" -G Ninja -DV100LUA_CUDA=ON -DV100LUA_READLINE=OFF -DCMAKE_CUDA_ARCHITECTURES=90 \
  -DCMAKE_BUILD_TYPE=Release >/dev/null
ninja -C "$B" -j2 v100lua bench_alloc
rm -rf "$ROOT/.dev/bin" "$ROOT/.dev/lib" "$ROOT/.dev/lua"
mkdir -p "$ROOT/.dev/bin" "$ROOT/.dev/lib" "$ROOT/.dev/lua"
for b in v100lua bench_alloc; do
  strip -o "$ROOT/.dev/bin/$b" "$B/$b"
  gzip -9f "$ROOT/.dev/bin/$b"
done
# Libraries outside the CUDA toolkit and Open MPI that the GPU image may not have.
for lib in $(ldd "$B/v100lua" | awk '/libcjson|libturbojpeg|libisal|libutf8proc/ {print $3}'); do cp -L "$lib" "$ROOT/.dev/lib/"; done
# Lua modules from the system Lua path (the same folders the host searches, first match wins).
for mod in argparse; do
  src=""
  for d in /usr/local/share/lua/5.4 /usr/share/lua/5.4; do
    [ -f "$d/$mod.lua" ] && { src="$d/$mod.lua"; break; }
  done
  [ -n "$src" ] || { echo "device-pack.sh: no $mod.lua in the system Lua path (apt-get install lua-$mod)" >&2; exit 1; }
  cp "$src" "$ROOT/.dev/lua/"
done
du -sh "$ROOT/.dev"/*
