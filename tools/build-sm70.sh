#!/usr/bin/env bash
# tools/build-sm70.sh [BUILD_DIR]: build every target for the V100 (sm_70) with CUDA 12.9, on a
# machine that has no CUDA 12 toolkit. CUDA 13 (what /usr/local/cuda holds here) no longer targets
# sm_70, so this takes CUDA 12.9 from PyPI's NVIDIA wheels: the runtime, cuBLAS(Lt), NVRTC, CCCL,
# cuDNN 9 and NCCL (headers and libraries) and ptxas 12.9, the assembler that still knows sm_70.
# Those wheels carry no nvcc driver (nvidia-cuda-nvcc-cu12 holds only ptxas and libNVVM), so the
# CUDA compiler is Clang (Debian's clang-19, which compiles CUDA C++ for sm_70 itself and hands
# the PTX to ptxas 12.9); CMake drives it as CMAKE_CUDA_COMPILER. The fat binary is packed by the
# fatbinary of a CUDA 13 toolkit (/usr/local/cuda, or the nvidia-cuda-nvcc 13 wheel), through a
# small wrapper that writes Clang's image options in the form that fatbinary reads.
#
# A V100 user with NVIDIA's CUDA 12 toolkit installed builds with nvcc instead (docs/BUILDING.md).
# Environment: SM70_CACHE (wheels and the assembled CUDA 12.9 root; default
# ~/.cache/v100lua/sm70), JOBS. Prints each step's time; the last line names the targets built.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD="${1:-$ROOT/build-sm70}"
CACHE="${SM70_CACHE:-$HOME/.cache/v100lua/sm70}"
JOBS="${JOBS:-$(nproc 2>/dev/null || echo 2)}"
CUDA12="$CACHE/cuda-12.9"
t0=$SECONDS
say() { printf 'build-sm70: [%3ds] %s\n' $((SECONDS - t0)) "$*"; }

# The wheels, pinned to one CUDA release (12.9) and to cuDNN / NCCL builds for CUDA 12.
WHEELS=(nvidia-cuda-nvcc-cu12==12.9.86 nvidia-cuda-runtime-cu12==12.9.79 nvidia-cuda-cccl-cu12==12.9.27
        nvidia-cuda-nvrtc-cu12==12.9.86 nvidia-cublas-cu12==12.9.1.4 nvidia-cudnn-cu12==9.10.2.21
        nvidia-nccl-cu12==2.27.3 nvidia-nvjpeg-cu12==12.4.0.76)
FATBIN13=nvidia-cuda-nvcc==13.0.88

command -v clang++-19 >/dev/null || bash "$ROOT/tools/setup.sh" clang-19
PY="${PYTHON:-python3}"
# pip only downloads here (no install), so Debian's python3-pip serves under PEP 668 too.
"$PY" -m pip --version >/dev/null 2>&1 || bash "$ROOT/tools/setup.sh" python3-pip ca-certificates

stamp="$(printf '%s\n' "${WHEELS[@]}" "$FATBIN13" 3 | sha256sum | cut -c1-16)"
if [ "$(cat "$CUDA12/.stamp" 2>/dev/null)" != "$stamp" ]; then
  say "downloading ${#WHEELS[@]} CUDA 12.9 wheels from PyPI"
  rm -rf "$CACHE/wheels" "$CUDA12" "$CUDA12.tmp"
  mkdir -p "$CACHE/wheels" "$CUDA12.tmp"/{bin,include,lib64,nvvm}
  "$PY" -m pip download --no-deps -q -d "$CACHE/wheels" "${WHEELS[@]}"
  unpack="$CACHE/wheels/unpacked"
  for w in "$CACHE"/wheels/*.whl; do "$PY" -m zipfile -e "$w" "$unpack"; done
  # One CUDA root in the layout Clang and CMake look for (bin, include, lib64, nvvm/libdevice).
  for d in "$unpack"/nvidia/*/include; do cp -r "$d/." "$CUDA12.tmp/include/"; done
  for d in "$unpack"/nvidia/*/lib; do cp -a "$d/." "$CUDA12.tmp/lib64/"; done
  find "$CUDA12.tmp" -name '__init__.py' -delete
  cp -r "$unpack/nvidia/cuda_nvcc/nvvm/libdevice" "$CUDA12.tmp/nvvm/"
  install -m 755 "$unpack/nvidia/cuda_nvcc/bin/ptxas" "$CUDA12.tmp/bin/ptxas"
  # The wheels ship only versioned sonames (libcudart.so.12): the link-time names point at them.
  (cd "$CUDA12.tmp/lib64" && for f in lib*.so.[0-9]*; do
     base="${f%%.so.*}.so"; [ -e "$base" ] || ln -s "$f" "$base"; done)
  printf '{ "cuda" : { "name" : "CUDA SDK", "version" : "12.9.1" } }\n' > "$CUDA12.tmp/version.json"
  # fatbinary 13: only packs the sm_70 cubin and PTX that ptxas 12.9 / Clang made.
  if [ -x /usr/local/cuda/bin/fatbinary ]; then fatbin=/usr/local/cuda/bin/fatbinary
  else
    "$PY" -m pip download --no-deps -q -d "$CACHE/wheels/fb" "$FATBIN13"
    "$PY" -m zipfile -e "$CACHE"/wheels/fb/*.whl "$CACHE/wheels/fb/x"
    fatbin=$(find "$CACHE/wheels/fb/x" -name fatbinary -type f | head -1)
    [ -n "$fatbin" ] || { echo "build-sm70.sh: no fatbinary in $FATBIN13" >&2; exit 1; }
    install -m 755 "$fatbin" "$CUDA12.tmp/bin/fatbinary.13"; fatbin="$CUDA12/bin/fatbinary.13"
  fi
  # Clang passes --image=profile=sm_70,file=X (the form CUDA 12 still read); CUDA 13 reads
  # --image3=kind=elf|ptx,sm=70,file=X.
  cat > "$CUDA12.tmp/bin/fatbinary" <<EOF
#!/usr/bin/env bash
args=()
for a in "\$@"; do
  case "\$a" in
    --image=profile=sm_*,file=*) p="\${a#--image=profile=sm_}"; args+=("--image3=kind=elf,sm=\${p%%,*},file=\${a#*,file=}") ;;
    --image=profile=compute_*,file=*) p="\${a#--image=profile=compute_}"; args+=("--image3=kind=ptx,sm=\${p%%,*},file=\${a#*,file=}") ;;
    *) args+=("\$a") ;;
  esac
done
exec "$fatbin" "\${args[@]}"
EOF
  chmod 755 "$CUDA12.tmp/bin/fatbinary"
  # CMake drives Clang as a CUDA compiler only beside a toolkit it finds by its nvcc: it runs
  # `nvcc -v` (for the root and libdevice) and `nvcc --version` (for the release), nothing else.
  # The wheels have no nvcc, so this answers those two questions about this root and refuses
  # to compile anything.
  cat > "$CUDA12.tmp/bin/nvcc" <<EOF
#!/usr/bin/env bash
# Not nvcc: tools/build-sm70.sh's answer to CMake's two questions about this CUDA 12.9 root.
case "\$1" in
  --version) echo "Cuda compilation tools, release 12.9, V12.9.86 (CUDA 12.9 wheels; the compiler is clang++-19)" ;;
  -v) echo "#\$ TOP=$CUDA12"; echo "#\$ NVVMIR_LIBRARY_DIR=$CUDA12/nvvm/libdevice" ;;
  *) echo "nvcc: not available in this CUDA 12.9 root (PyPI's wheels carry no nvcc); compile with clang++-19" >&2; exit 1 ;;
esac
EOF
  chmod 755 "$CUDA12.tmp/bin/nvcc"
  rm -rf "$CACHE/wheels/unpacked"
  echo "$stamp" > "$CUDA12.tmp/.stamp"
  mv "$CUDA12.tmp" "$CUDA12"
fi
say "CUDA root $CUDA12: $("$CUDA12/bin/ptxas" --version | tail -1)"

# ptxas and fatbinary are found through PATH (Clang looks there before --cuda-path). The archives
# are binutils' (CMAKE_AR) either way; naming binutils for Clang's AR/RANLIB too keeps CMake from
# recording whichever llvm-ar the machine happens to have, which no package here installs.
export PATH="$CUDA12/bin:$PATH"
say "configure ($BUILD)"
cmake -S "$ROOT" -B "$BUILD" -G Ninja -DV100LUA_CUDA=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_CUDA_COMPILER=clang++-19 -DCMAKE_CUDA_ARCHITECTURES=70 -DCUDAToolkit_ROOT="$CUDA12" \
  -DCMAKE_CUDA_FLAGS="--cuda-path=$CUDA12" \
  -DCMAKE_CUDA_COMPILER_AR="$(command -v ar)" -DCMAKE_CUDA_COMPILER_RANLIB="$(command -v ranlib)" \
  >"$CACHE/configure.log" 2>&1 ||
  { tail -n 40 "$CACHE/configure.log"; exit 1; }
grep -E 'CUDA compiler|cuDNN|NCCL|nvJPEG' "$CACHE/configure.log" | sed 's/^/build-sm70:   /' || true
say "build (-j $JOBS)"
cmake --build "$BUILD" -j "$JOBS"
# Every CUDA object holds sm_70 code and nothing newer: the PTX targets packed into the binary.
targets=$(strings -a "$BUILD/v100lua" | grep -oE '^\.target sm_[0-9a-z]+' | sort | uniq -c | sed 's/^ *//' | tr '\n' ';')
say "PTX targets in v100lua: ${targets:-none}"
if [ -z "$targets" ] || tr ';' '\n' <<<"$targets" | grep -v '^$' | grep -qvE '^[0-9]+ \.target sm_70$'; then
  echo "build-sm70.sh: expected sm_70 code only in $BUILD/v100lua" >&2; exit 1
fi
say "built: $(cd "$BUILD" && ninja -t targets all | grep -cE '^[A-Za-z0-9_]+: (C|CUDA)_EXECUTABLE_LINKER') executables; v100lua links $(ldd "$BUILD/v100lua" | grep -oE 'lib(cublasLt|cudnn|nccl|nvrtc|nvjpeg)\.so\.[0-9]+' | sort -u | tr '\n' ' ')"
