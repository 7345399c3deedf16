#!/usr/bin/env bash
# tests/tools/test_check_layers.sh BUILD_DIR: tools/check-layers.sh passes on the project's own
# tree, and fails, naming file:line, when a bad include is planted in a copy of runtime/: core
# reaching up to ops (issue 29: core as the bottom layer), core reaching the allocator's old
# folder, core climbing out with "..", a runtime file including a kernel header, and a runtime
# file including an extension's header (ext/ sits on top of the core), and a kernel including one.
set -uo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
: "${1:?usage: test_check_layers.sh BUILD_DIR}" # the checker reads sources only
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
pass=0 failed=0
check() { # name, expected exit status, pattern that must be in the output, tree root
  local name="$1" want="$2" pat="$3" root="$4"
  local out rc
  out=$(bash "$ROOT/tools/check-layers.sh" "$root" 2>&1); rc=$?
  if [ "$rc" -eq "$want" ] && grep -qF -- "$pat" <<<"$out"; then
    pass=$((pass + 1)); echo "ok: $name"
  else
    failed=$((failed + 1)); printf 'FAIL: %s (exit %s, want %s; output must contain "%s"):\n%s\n' "$name" "$rc" "$want" "$pat" "$out"
  fi
}

check 'the project tree keeps the layer rules' 0 'check-layers: ok' "$ROOT"

# A fresh copy of runtime/ per case, with one line appended to one file: the checker must name
# that file and line.
plant() { # case name, file under runtime/, line to append
  rm -rf "$tmp/$1"; mkdir -p "$tmp/$1"; cp -R "$ROOT/runtime" "$tmp/$1/"
  printf '%s\n' "$3" >> "$tmp/$1/$2"
  echo "$2:$(wc -l < "$tmp/$1/$2")"
}
where=$(plant core-up runtime/core/tensor.c '#include "runtime/ops/ops_internal.h"')
check 'core including ops' 1 "$where: includes \"runtime/ops/ops_internal.h\"" "$tmp/core-up"
where=$(plant core-alloc runtime/core/context.h '#  include "runtime/alloc/alloc.h"')
check 'core including another folder (spaces after #)' 1 "$where: includes \"runtime/alloc/alloc.h\"" "$tmp/core-alloc"
where=$(plant core-climb runtime/core/cuda.c '#include "../io/replace.h"')
check 'core climbing out with ..' 1 "$where: includes \"../io/replace.h\"" "$tmp/core-climb"
where=$(plant kernel runtime/nn/conv.c '#include "kernels/cpu/cpu_vmath.h"')
check 'the runtime including a kernel header' 1 "$where: includes \"kernels/cpu/cpu_vmath.h\"" "$tmp/kernel"
where=$(plant ext runtime/io/tfevents.c '#include "ext/text/shard.h"')
check 'the runtime including an extension header' 1 "$where: includes \"ext/text/shard.h\"" "$tmp/ext"
# A kernel including an extension's header (kernels/ copied beside runtime/).
where=$(plant kernel-ext runtime/core/tensor.c '/* unchanged */')
cp -R "$ROOT/kernels" "$tmp/kernel-ext/"
printf '%s\n' '#include "ext/data/nvjpeg.h"' >> "$tmp/kernel-ext/kernels/cuda/cuda_copy.cu"
check 'a kernel including an extension header' 1 \
  "kernels/cuda/cuda_copy.cu:$(wc -l < "$tmp/kernel-ext/kernels/cuda/cuda_copy.cu"): includes \"ext/data/nvjpeg.h\"" "$tmp/kernel-ext"
# What stays allowed: core including core, a folder above core including another, comments.
plant fine runtime/core/tensor.c '#include "runtime/core/status.h"' >/dev/null
printf '%s\n' '#include "runtime/ops/ops.h"' >> "$tmp/fine/runtime/nn/conv.c"
printf '%s\n' '/* not an include: #include "runtime/ops/ops.h" */' >> "$tmp/fine/runtime/core/layout.c"
check 'allowed includes and comments' 0 'check-layers: ok' "$tmp/fine"

echo "$pass passed, $failed failed"
[ "$failed" -eq 0 ]
