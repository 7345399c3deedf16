#!/usr/bin/env bash
# tools/check-deps.sh [--build DIR] [--setup FILE] [--requirements FILE]: prove that a fresh
# machine gets everything the build and the tests use from tools/setup.sh and
# tools/requirements-ci.txt. CI runs it after the build (.ci/run), because CI runs on a machine
# where packages installed by hand stay installed: a green CI alone cannot show a missing step.
#
# 1. Debian side. Every file the configured build found under /usr (the absolute paths in
#    DIR/CMakeCache.txt: libraries, headers, programs, compilers; /usr/local is the optional CUDA
#    toolkit, not Debian's) must belong, by `dpkg -S`, to a package in the closure of setup.sh's
#    PACKAGES list (`apt-cache depends --recurse`, Depends and PreDepends). An include directory
#    shared by many packages (/usr/include) is checked through the header that find_path looked
#    for (read from CMakeLists.txt), not through the directory.
# 2. Python side. Every module imported by a Python file that a test runs (tests/**/*.py and the
#    tools/*.py that tests/lua/*.lua name) is in the standard library, in requirements-ci.txt
#    (the venv of tools/setup-python.sh maps import names to distributions), in a Debian package
#    of the closure, or in OPTIONAL_PY below (tests that skip, naming the module, without it).
#
# Exit status 1 with one line per missing package (and the file or module that needs it).
# tests/tools/test_check_deps.sh plants the defect (a package dropped from a copy of the list)
# and checks that this script names it.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD="${BUILD_DIR:-$ROOT/build}"
SETUP="$ROOT/tools/setup.sh"
REQ="$ROOT/tools/requirements-ci.txt"
VENV="${V100LUA_VENV:-$HOME/.cache/v100lua/venv}"
while [ $# -gt 0 ]; do
  case "$1" in
    --build) BUILD="$2"; shift 2 ;;
    --setup) SETUP="$2"; shift 2 ;;
    --requirements) REQ="$2"; shift 2 ;;
    -h|--help) sed -n '2,20p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "check-deps.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
CACHE="$BUILD/CMakeCache.txt"
[ -f "$CACHE" ] || { echo "check-deps.sh: no $CACHE (build first: bash tools/build.sh $BUILD)" >&2; exit 2; }
[ -f "$SETUP" ] || { echo "check-deps.sh: no $SETUP" >&2; exit 2; }
command -v dpkg >/dev/null && command -v apt-cache >/dev/null ||
  { echo "check-deps.sh: needs dpkg and apt-cache (a Debian-based system)" >&2; exit 2; }

# Modules whose tests skip (printing the module) when they are absent: torch + transformers are
# gigabytes of wheels, tensorboard is TensorBoard's own reader; CI runs without them.
OPTIONAL_PY="torch transformers safetensors tensorboard"

# setup.sh's list: the PACKAGES=( ... ) array and the PACKAGES+=( ... ) lines, as written.
want=$(sed -n '/^PACKAGES=(/,/)/p; /^PACKAGES+=(/p' "$SETUP" | sed 's/#.*//' | tr -d '()"' |
       sed 's/PACKAGES+\{0,1\}=//' | tr ' \t' '\n\n' | grep -E '^[a-z0-9][a-z0-9.+-]+$' | sort -u)
[ -n "$want" ] || { echo "check-deps.sh: no PACKAGES list found in $SETUP" >&2; exit 2; }
# The packages a fresh machine gets from that list: the names apt-cache prints at the start of a
# line (virtual names are printed as <name> and followed to their providers).
closure=$(apt-cache depends --recurse --no-recommends --no-suggests --no-conflicts --no-breaks \
            --no-replaces --no-enhances $want 2>/dev/null | grep -E '^[a-z0-9]' | sed 's/:.*//' | sort -u)
[ -n "$closure" ] || { echo "check-deps.sh: apt-cache depends printed nothing for setup.sh's list" >&2; exit 2; }

# The header each find_path looked for: "VAR header" pairs from CMakeLists.txt, plus the find
# modules' variables that CMake itself sets.
headers=$( { tr '\n' ' ' < "$ROOT/CMakeLists.txt" | grep -oE 'find_path\([A-Za-z0-9_]+ +[^ )]+' |
             sed 's/find_path(//'; echo "ZLIB_INCLUDE_DIR zlib.h"; echo "MPI_C_HEADER_DIR mpi.h"; } )

# The paths to check: "VAR path" lines. A directory shared by many packages is replaced by the
# header that find_path looked for in it, or left out when none is known.
checks=$(grep -E '^[A-Za-z0-9_.+-]+:(FILEPATH|PATH|STRING)=/' "$CACHE" | while IFS='=' read -r key val; do
  var=${key%%:*}
  case "$var" in CMAKE_INSTALL_*|CMAKE_HOME_DIRECTORY|CMAKE_CACHEFILE_DIR|*_BINARY_DIR|*_SOURCE_DIR) continue ;; esac
  IFS=';' read -r -a paths <<<"$val"
  for f in "${paths[@]}"; do
    case "$f" in /usr/local/*) continue ;; /usr/*) ;; *) continue ;; esac
    [ -e "$f" ] || continue
    if [ -d "$f" ]; then
      h=$(awk -v v="$var" '$1 == v { print $2; exit }' <<<"$headers")
      if [ -n "$h" ] && [ -e "$f/$h" ]; then f="$f/$h"
      else
        case "$f" in /usr/include|/usr/lib|/usr/lib/x86_64-linux-gnu|/usr/include/x86_64-linux-gnu|/usr/bin) continue ;; esac
      fi
    fi
    echo "$var $f"
  done
done)

# Who owns each path, from one dpkg -S call (it reads its database once): the path as found (a
# -dev package's libfoo.so link), else its resolved target, else either without /usr (usrmerge:
# dpkg records /lib/... for files that live in /usr/lib/...).
candidates() { local r; r=$(readlink -f "$1"); printf '%s\n' "$1" "$r" "${1#/usr}" "${r#/usr}"; }
owners=$(while read -r _ f; do candidates "$f"; done <<<"$checks" | sort -u |
         xargs -d '\n' dpkg -S 2>/dev/null | grep -v '^diversion' || true)
owner() {
  local c
  while read -r c; do
    awk -v p="$c" 'index($0, ": " p) && substr($0, index($0, ": ") + 2) == p { sub(/: .*/, ""); print; exit }' <<<"$owners" |
      grep . && return 0
  done < <(candidates "$1")
  return 1
}

fail=0 n=0
declare -A seen_pkg=()
while read -r var what; do
  [ -n "$var" ] || continue
  n=$((n + 1))
  if ! pkgs=$(owner "$what"); then
    echo "check-deps: $var=$what belongs to no Debian package (installed by hand?): tools/setup.sh cannot provide it"
    fail=1; continue
  fi
  # dpkg -S names every owner of a shared directory ("a, b: /dir"): one in the closure is enough.
  ok=0
  for p in ${pkgs//,/ }; do
    p=${p%%:*}
    if grep -qxF "$p" <<<"$closure"; then ok=1; seen_pkg[$p]=1; break; fi
  done
  if [ $ok -eq 0 ]; then
    echo "check-deps: MISSING Debian package ${pkgs%%,*}: the build uses $what ($var); add it to PACKAGES in tools/setup.sh"
    fail=1
  fi
done <<<"$checks"
echo "check-deps: $n paths of the build checked, from ${#seen_pkg[@]} Debian packages"

# ---- Python: the modules the tests' Python files import ----
pyfiles=$(cd "$ROOT" && { find tests -name '*.py'
  # tools/*.py named on the tests' code lines (not in comments, nor in a printed hint to the user)
  cat tests/lua/*.lua tests/mpi/*.lua 2>/dev/null | sed 's/--.*//' | grep -v 'print(' |
    grep -ohE '(^|[^A-Za-z0-9_/])tools/[A-Za-z0-9_]+\.py' | sed 's/^[^t]*//'
  } | sort -u | while read -r f; do [ -f "$f" ] && echo "$f"; done)
venv_py=""
[ -x "$VENV/bin/python" ] && venv_py="$VENV/bin/python"
if ! py_out=$(cd "$ROOT" && CLOSURE="$closure" OPTIONAL_PY="$OPTIONAL_PY" VENV_PY="$venv_py" REQ="$REQ" \
    python3 - $pyfiles <<'EOF'
import ast, os, re, subprocess, sys

files = sys.argv[1:]
mods = {}  # top-level module -> first file importing it
for f in files:
    tree = ast.parse(open(f, encoding="utf-8").read(), f)
    for node in ast.walk(tree):
        names = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module]
        for n in names:
            mods.setdefault(n.split(".")[0], f)

local = {os.path.splitext(os.path.basename(f))[0] for f in files}
optional = set(os.environ["OPTIONAL_PY"].split())
closure = set(os.environ["CLOSURE"].split())
norm = lambda s: re.sub(r"[-_.]+", "-", s).lower()
reqs = set()
for line in open(os.environ["REQ"], encoding="utf-8"):
    m = re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)", line.split("#")[0])
    if m:
        reqs.add(norm(m.group(1)))
# import name -> distributions, from the venv setup-python.sh made (onnxruntime, yaml -> PyYAML)
dists = {}
if os.environ.get("VENV_PY"):
    code = "import importlib.metadata as m, json; print(json.dumps(m.packages_distributions()))"
    try:
        import json
        dists = json.loads(subprocess.run([os.environ["VENV_PY"], "-c", code], capture_output=True,
                                          text=True, check=True).stdout)
    except Exception:
        dists = {}

bad = 0
for mod, f in sorted(mods.items()):
    if mod in sys.stdlib_module_names or mod in local or mod in optional:
        continue
    if any(norm(d) in reqs for d in dists.get(mod, [mod])):
        continue
    deb = "python3-" + norm(mod)
    if deb in closure:
        continue
    print(f"check-deps: MISSING Python module '{mod}' (imported by {f}): neither tools/requirements-ci.txt "
          f"nor a package of tools/setup.sh's list ({deb}?) provides it")
    bad = 1
print(f"check-deps: {len(mods)} Python modules imported by {len(files)} files of the tests checked")
sys.exit(bad)
EOF
); then fail=1; fi
echo "$py_out"

if [ $fail -ne 0 ]; then
  echo "check-deps: FAILED: a fresh machine would lack what is named above" >&2
  exit 1
fi
echo "check-deps: ok: tools/setup.sh and tools/requirements-ci.txt provide everything the build and the tests use"
