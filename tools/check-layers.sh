#!/usr/bin/env bash
# tools/check-layers.sh [ROOT]: the include rules of the runtime's layers (docs/ARCHITECTURE.md,
# "Layers"), checked on the tree at ROOT (default: this repository).
#   1. runtime/core/ is the bottom layer: its files include nothing from the runtime's other
#      folders ("runtime/ops/...", "runtime/alloc/...", ...), nothing under kernels/, and no
#      path that climbs out with "..". What core needs from above it comes through the hooks
#      in runtime/core/context.h (vl_core_hooks), installed by the layers above.
#   2. No file under runtime/ includes a kernel header ("kernels/..."): kernels implement the
#      interface of runtime/backend/, the runtime never reaches into them.
#   3. No file under runtime/ or kernels/ includes an extension's header ("ext/..."): extensions
#      (ext/text, ext/data, ext/telemetry, ext/onnx; issue 29) are built over the core's C API as
#      libraries of their own, so the core builds and links without them. (Rules 1 and 2 are the
#      runtime's only: kernels include kernel headers.)
# Only the include lines are read (a path named in a comment is no dependency). Prints one
# "file:line: ..." per broken rule and exits 1; exits 0 with "check-layers: ok" otherwise.
# CI runs it (.ci/run); tests/tools/test_check_layers.sh plants a bad include in a copy of the
# tree and checks that it is named.
set -euo pipefail
ROOT="${1:-$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)}"
cd "$ROOT"
if [ ! -d runtime/core ]; then
  echo "check-layers: no runtime/core under $ROOT" >&2
  exit 2
fi

include_re='^[[:space:]]*#[[:space:]]*include[[:space:]]*[<"]([^">]*)[">]'
bad=0 files=0
report() { echo "$1: $2"; bad=$((bad + 1)); }

while IFS= read -r -d '' f; do
  files=$((files + 1))
  core=false kern=false
  [[ $f == runtime/core/* ]] && core=true
  [[ $f == kernels/* ]] && kern=true
  n=0
  while IFS= read -r line || [ -n "$line" ]; do
    n=$((n + 1))
    [[ $line =~ $include_re ]] || continue
    path=${BASH_REMATCH[1]}
    if $kern; then
      if [[ $path =~ ^(\.\./)*ext/ ]]; then
        report "$f:$n" "includes \"$path\": the kernels include no extension header (ext/ sits on top of the core)"
      fi
    elif [[ $path =~ ^(\.\./)*kernels/ ]]; then
      report "$f:$n" "includes \"$path\": the runtime includes no kernel header (kernels implement runtime/backend/'s interface)"
    elif [[ $path =~ ^(\.\./)*ext/ ]]; then
      report "$f:$n" "includes \"$path\": the runtime includes no extension header (ext/ sits on top of the core)"
    elif $core && [[ $path == runtime/* && $path != runtime/core/* ]]; then
      report "$f:$n" "includes \"$path\": runtime/core/ includes nothing from the runtime's other folders (use a hook, runtime/core/context.h)"
    elif $core && [[ $path =~ (^|/)\.\.(/|$) ]]; then
      report "$f:$n" "includes \"$path\": a path climbing out of runtime/core/ (includes are relative to the repository root)"
    fi
  done < "$f"
done < <(find runtime $([ -d kernels ] && echo kernels) -type f \( -name '*.c' -o -name '*.h' -o -name '*.cu' -o -name '*.cuh' -o -name '*.inc' \) -print0 | sort -z)

if [ "$bad" -gt 0 ]; then
  echo "check-layers: $bad include(s) break the layer rules (docs/ARCHITECTURE.md)"
  exit 1
fi
echo "check-layers: ok ($files files under runtime/ and kernels/)"
