#!/usr/bin/env bash
# tools/setup.sh [extra packages or groups...]: install the build and test dependencies of v100lua
# on Debian 12 / Ubuntu (and the extra packages named, e.g. clang for tools/fuzz.sh, as CI does;
# the group multinode for tools/multinode.sh).
# Idempotent: only missing packages are installed, and `apt-get update` runs only when something
# is missing. Needs root (or sudo). The CUDA toolkit is not installed here: CUDA is used when
# nvcc exists (e.g. /usr/local/cuda/bin/nvcc), see docs/BUILDING.md.
set -euo pipefail

PACKAGES=(build-essential cmake ninja-build pkg-config liblua5.4-dev libopenblas-dev zlib1g-dev
          libopenmpi-dev openmpi-bin libreadline-dev libcjson-dev libutf8proc-dev lua-argparse
          libturbojpeg0-dev libisal-dev libprotobuf-c-dev protobuf-c-compiler
          dataset-fashion-mnist wordnet-base)
# tests/lua/test_prometheus.lua parses the metrics with the reference Python client's parser.
PACKAGES+=(python3-prometheus-client)
# tests/tools/test_repl.sh types at the interactive prompt through a terminal multiplexer.
PACKAGES+=(tmux)
# Groups named on the command line: multinode = the test hosts of tools/multinode.sh (network
# namespaces, an sshd in each, ssh between them; procps for the tests' pkill). Not in the
# default list: installing openssh-server starts an sshd on port 22 on most machines.
for a in "$@"; do
  case "$a" in
    multinode) PACKAGES+=(openssh-server openssh-client iproute2 util-linux procps) ;;
    *) PACKAGES+=("$a") ;;
  esac
done

if ! command -v dpkg-query >/dev/null 2>&1; then
  echo "setup.sh: not a Debian-based system; install the equivalents of: ${PACKAGES[*]}" >&2
  exit 1
fi

missing=()
for p in "${PACKAGES[@]}"; do
  if [ "$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null)" != "install ok installed" ]; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "setup.sh: all ${#PACKAGES[@]} packages are installed"
  exit 0
fi

SUDO=()
if [ "$(id -u)" -ne 0 ]; then
  if command -v sudo >/dev/null 2>&1; then SUDO=(sudo); else
    echo "setup.sh: missing ${missing[*]}; run as root (or install sudo)" >&2
    exit 1
  fi
fi
echo "setup.sh: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
"${SUDO[@]}" apt-get update
"${SUDO[@]}" apt-get install -y --no-install-recommends "${missing[@]}"
