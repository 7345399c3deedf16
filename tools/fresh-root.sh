#!/usr/bin/env bash
# tools/fresh-root.sh [--dir DIR] [--keep] [--quickstart-only]: the README's two commands on a
# machine that has nothing: a minimal Debian 12 root made by mmdebstrap (variant minbase: dpkg,
# apt, bash, coreutils; no compiler, no Python, no CUDA) from the Debian package registry, this
# checkout copied in (tracked files and untracked ones git does not ignore, as they are in the
# working tree), then, inside it with chroot and a clean environment,
#     bash tools/quickstart.sh      (installs what is missing, builds, trains the first recipe)
#     bash tools/test.sh            (builds, runs every test: the CPU build, so without `gpu`)
#     bash tools/multinode.sh test  (the label multinode over two test hosts made inside the root)
# printing how long each took. Run it whenever tools/setup.sh, CMakeLists.txt or a find_* changes;
# .ci/run runs it. Needs root (chroot, mounts), the network to Debian's registry and PyPI, ~3 GiB
# of disk. DIR (default /var/tmp/v100lua-fresh-root) is made anew each run and removed at the end
# unless --keep. Logs: DIR.log/{mmdebstrap,quickstart,test,multinode}.log; the last lines of a failing step
# are printed.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
DIR=/var/tmp/v100lua-fresh-root
KEEP=0 ONLY_QS=0
while [ $# -gt 0 ]; do
  case "$1" in
    --dir) DIR="$2"; shift 2 ;;
    --keep) KEEP=1; shift ;;
    --quickstart-only) ONLY_QS=1; shift ;;
    -h|--help) sed -n '2,14p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "fresh-root.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
[ "$(id -u)" -eq 0 ] || { echo "fresh-root.sh: needs root (mmdebstrap, chroot and mounts)" >&2; exit 1; }
case "$DIR" in /|/usr|/var|/tmp|/var/tmp|/root|"$ROOT"|"$ROOT"/*) echo "fresh-root.sh: refusing --dir $DIR" >&2; exit 2 ;; esac
LOGS="$DIR.log"
command -v mmdebstrap >/dev/null || bash "$ROOT/tools/setup.sh" mmdebstrap

mounted=()
cleanup() {
  local i p m
  # what runs in the root still (the multinode step's sshds when it was cut short), then what
  # was mounted inside it (its network namespaces' handles under run/netns) and ours
  for p in /proc/[0-9]*; do
    if [ "$(readlink "$p/root" 2>/dev/null)" = "$DIR" ]; then kill -9 "${p#/proc/}" 2>/dev/null || true; fi
  done
  for m in $(awk -v d="$DIR/run/netns/" 'index($2, d) == 1 { print $2 }' /proc/self/mounts); do umount -l "$m" || true; done
  for ((i = ${#mounted[@]} - 1; i >= 0; i--)); do umount -l "${mounted[$i]}" 2>/dev/null || true; done
  # Only a root this script made (its marker inside) is removed.
  if [ "$KEEP" -eq 0 ] && [ -f "$DIR/.v100lua-fresh-root" ]; then rm -rf --one-file-system "$DIR"; fi
}
trap cleanup EXIT
if [ -e "$DIR" ]; then
  [ -f "$DIR/.v100lua-fresh-root" ] || { echo "fresh-root.sh: $DIR exists and was not made by this script" >&2; exit 2; }
  rm -rf --one-file-system "$DIR"
fi
mkdir -p "$LOGS"

# The same Debian release and mirrors as this machine's apt (its deb822 or one-line sources), so
# the root reaches whatever registry this machine reaches; deb.debian.org where there are none.
sources=()
for f in /etc/apt/sources.list.d/debian.sources /etc/apt/sources.list; do
  [ -s "$f" ] && grep -qE '^(deb |Types:)' "$f" && sources+=("$f")
done
[ ${#sources[@]} -gt 0 ] || sources=("deb http://deb.debian.org/debian bookworm main")

# A step's wall time, its log, and its log's tail on failure.
step() { # name, log, command...
  local name="$1" log="$2"; shift 2
  local t0=$SECONDS rc=0
  echo "fresh-root: $name ..."
  "$@" >"$log" 2>&1 || rc=$?
  local dt=$((SECONDS - t0))
  printf 'fresh-root: %-12s %s in %dm%02ds (log: %s)\n' "$name" "$([ $rc -eq 0 ] && echo ok || echo FAILED)" $((dt / 60)) $((dt % 60)) "$log"
  if [ $rc -ne 0 ]; then tail -n 40 "$log" | sed 's/^/  | /'; exit $rc; fi
  times+=("$name $dt")
}
times=()

# Check-Valid-Until off: this machine's registry may serve a dated snapshot of the archive.
step mmdebstrap "$LOGS/mmdebstrap.log" mmdebstrap --variant=minbase --aptopt='Acquire::Check-Valid-Until "false"' \
  bookworm "$DIR" "${sources[@]}"
touch "$DIR/.v100lua-fresh-root"
echo "fresh-root: $(du -sh --one-file-system "$DIR" | cut -f1) root, $(chroot "$DIR" dpkg-query -W | wc -l) packages"

# The checkout, without build folders or anything git ignores.
mkdir -p "$DIR/src/v100lua"
(cd "$ROOT" && git ls-files -z --cached --others --exclude-standard |
   while IFS= read -r -d '' f; do [ -e "$f" ] && printf '%s\0' "$f"; done |
   tar --null -T - -cf -) | tar -C "$DIR/src/v100lua" -xf -

cp -L /etc/resolv.conf "$DIR/etc/resolv.conf" 2>/dev/null || true
# This site's own trust anchors (a proxy's CA in /usr/local/share/ca-certificates), which any
# machine here has: ca-certificates, once setup installs it, adds them to the root's bundle.
if compgen -G '/usr/local/share/ca-certificates/*.crt' >/dev/null; then
  mkdir -p "$DIR/usr/local/share/ca-certificates"
  cp /usr/local/share/ca-certificates/*.crt "$DIR/usr/local/share/ca-certificates/"
fi
# The root a mount point of its own: `ip netns exec` (tools/multinode.sh) makes / a slave mount,
# which fails on a plain folder. First, so that the mounts below stay visible on top of it.
mount --bind "$DIR" "$DIR"
mounted+=("$DIR")
for m in proc sys dev dev/pts; do
  mkdir -p "$DIR/$m"
  case "$m" in
    proc) mount -t proc proc "$DIR/proc" ;;
    sys) mount -t sysfs sysfs "$DIR/sys" ;;
    *) mount --bind "/$m" "$DIR/$m" ;;
  esac
  mounted+=("$DIR/$m")
done
mkdir -p "$DIR/dev/shm"
mount -t tmpfs -o mode=1777 tmpfs "$DIR/dev/shm"; mounted+=("$DIR/dev/shm")

# A clean environment: nothing of this machine's (its Python, pip settings, PATH) leaks in.
in_root() {
  chroot "$DIR" /usr/bin/env -i HOME=/root LANG=C.UTF-8 TERM=dumb CI="${CI:-}" \
    PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    /bin/bash -c "cd /src/v100lua && $1"
}
step quickstart "$LOGS/quickstart.log" in_root 'bash tools/quickstart.sh'
grep -E 'accuracy' "$LOGS/quickstart.log" | tail -n 2 | sed 's/^/fresh-root:   /'
if [ "$ONLY_QS" -eq 0 ]; then
  step test "$LOGS/test.log" in_root 'bash tools/test.sh'
  grep -E 'tests passed|tests failed' "$LOGS/test.log" | tail -n 1 | sed 's/^/fresh-root:   /'
  # the two test hosts inside the root (its own sshd and packages: setup.sh multinode)
  step multinode "$LOGS/multinode.log" in_root 'bash tools/multinode.sh test'
  grep -E 'tests passed|tests failed' "$LOGS/multinode.log" | tail -n 1 | sed 's/^/fresh-root:   /'
fi
printf 'fresh-root: done on %s:' "$(date -u +%Y-%m-%d)"
printf ' %ss;' "${times[@]}"; echo
