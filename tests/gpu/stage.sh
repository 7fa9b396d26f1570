#!/bin/sh
# tests/gpu/stage.sh DIR — builds, on a machine like the development one, everything the GPU
# check needs into DIR, so that DIR/check.sh runs on a machine that has only the NVIDIA driver and
# a POSIX shell with coreutils (no compiler, cmake, -dev packages or network): see docs/gpu-check.md.
#
#   DIR/check.sh                      the check itself (tests/gpu/check.sh)
#   DIR/bin/gpuslice, gpuslice-exec   the daemon/CLI and the exec stub (next to it, as installed)
#   DIR/bin/gpu_driver_probe, gpu_agent_check   driver-behaviour probes (NVML by dlopen)
#   DIR/bin/devices_test              the device tests, for their contract on the real NVML backend
#   DIR/lib/gpuslice/libgpuslice-cuda.so        the memory-cap interposer (where gpuslice looks)
#   DIR/lib/deps/                     the shared libraries those need beyond libc (libstdc++, fmt,
#                                     spdlog, sqlite, ...), for LD_LIBRARY_PATH
#   DIR/cuda/busy, cap_probe, cap_probe_ptsz    CUDA test programs (nvcc, sm_80 + sm_90 + PTX,
#                                     static cudart and libstdc++: they need only libc and the
#                                     driver); absent when there is no nvcc here
#   DIR/manifest                      what was staged: versions, the toolkit, the glibc needed
#
# Binaries are stripped; the whole must stay under 64 MiB (the limit of what travels to a lent
# machine). Environment: GPUSLICE_BUILD (build directory, default <repo>/build; configured and
# built here when needed; GPUSLICE_STAGE_NO_BUILD=1: use it as built), NVCC (default: nvcc on
# PATH, else /usr/local/cuda/bin/nvcc; NVCC=none stages without CUDA programs), JOBS. Exit 0 when
# staged.
set -eu

usage() { echo "usage: tests/gpu/stage.sh DIR" >&2; exit 2; }
[ $# -eq 1 ] || usage
DIR=$1
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=${GPUSLICE_BUILD:-$ROOT/build}
JOBS=${JOBS:-$(nproc 2>/dev/null || echo 2)}
if [ -z "${NVCC:-}" ]; then
  NVCC=$(command -v nvcc 2>/dev/null || echo /usr/local/cuda/bin/nvcc)
fi

say() { echo "stage: $*"; }
die() { echo "stage: $*" >&2; exit 1; }

# ---- 1. the gpuslice binaries -------------------------------------------------------------------
TARGETS="gpuslice gpuslice-exec gpuslice-cuda gpu_driver_probe gpu_agent_check devices_test"
if [ ! -f "$BUILD/build.ninja" ] && [ ! -f "$BUILD/Makefile" ]; then
  say "configuring $BUILD"
  cmake -S "$ROOT" -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null || die "cmake configure failed"
fi
if [ "${GPUSLICE_STAGE_NO_BUILD:-0}" = 1 ]; then
  # The CTest run: the build is done (every target is in `all`); building again from inside a
  # test would race the build tree.
  for f in apps/gpuslice/gpuslice apps/gpuslice/gpuslice-exec lib/libgpuslice-cuda.so tests/gpu/gpu_driver_probe \
           tests/gpu/gpu_agent_check tests/devices/devices_test; do
    [ -f "$BUILD/$f" ] || die "$BUILD/$f is not built"
  done
else
  say "building $TARGETS in $BUILD"
  # shellcheck disable=SC2086  # the targets are words
  cmake --build "$BUILD" -j "$JOBS" --target $TARGETS >"$BUILD/stage-build.log" 2>&1 ||
    { tail -30 "$BUILD/stage-build.log" >&2; die "build failed (log: $BUILD/stage-build.log)"; }
fi

mkdir -p "$DIR/bin" "$DIR/lib/gpuslice" "$DIR/lib/deps" "$DIR/cuda"
copy_stripped() {  # copy_stripped SRC DEST
  cp -f "$1" "$2"
  chmod u+w "$2"
  if command -v strip >/dev/null 2>&1; then strip --strip-debug "$2" 2>/dev/null || true; fi
}
copy_stripped "$BUILD/apps/gpuslice/gpuslice" "$DIR/bin/gpuslice"
copy_stripped "$BUILD/apps/gpuslice/gpuslice-exec" "$DIR/bin/gpuslice-exec"
copy_stripped "$BUILD/tests/gpu/gpu_driver_probe" "$DIR/bin/gpu_driver_probe"
copy_stripped "$BUILD/tests/gpu/gpu_agent_check" "$DIR/bin/gpu_agent_check"
copy_stripped "$BUILD/tests/devices/devices_test" "$DIR/bin/devices_test"  # its nvml contract
copy_stripped "$BUILD/lib/libgpuslice-cuda.so" "$DIR/lib/gpuslice/libgpuslice-cuda.so"

# Shared libraries beyond the C library and the driver: a bare GPU machine may lack them (or have
# older ones). The C library itself is the machine's.
system_lib() {
  case "$(basename "$1")" in
    libc.so.*|libm.so.*|libdl.so.*|libpthread.so.*|librt.so.*|ld-linux*|libresolv.so.*|libutil.so.*) return 0 ;;
    libnvidia*|libcuda.so*) return 0 ;;
  esac
  return 1
}
for bin in "$DIR/bin/gpuslice" "$DIR/bin/gpu_driver_probe" "$DIR/bin/gpu_agent_check" "$DIR/bin/devices_test"; do
  ldd "$bin" 2>/dev/null | sed -n 's/.*=> \(\/[^ ]*\) .*/\1/p' | while read -r lib; do
    system_lib "$lib" && continue
    [ -f "$DIR/lib/deps/$(basename "$lib")" ] || cp -fL "$lib" "$DIR/lib/deps/"
  done
done
for lib in "$DIR"/lib/deps/*; do
  [ -f "$lib" ] || continue
  chmod u+w "$lib"
  if command -v strip >/dev/null 2>&1; then strip --strip-debug "$lib" 2>/dev/null || true; fi
done

# ---- 2. the CUDA test programs ----------------------------------------------------------------
# Machine code for Ampere (sm_80) and Hopper (sm_90), PTX for newer GPUs; the runtime and C++
# library linked in, so only libc and the driver are needed where they run. Compiled once per
# source and toolkit: the results are kept under the build directory.
GENCODE="-gencode arch=compute_80,code=sm_80 -gencode arch=compute_90,code=sm_90 -gencode arch=compute_90,code=compute_90"
CUDA_VERSION=""
rm -f "$DIR/cuda/busy" "$DIR/cuda/cap_probe" "$DIR/cuda/cap_probe_ptsz"
if [ "$NVCC" != none ] && [ -x "$NVCC" ]; then
  CUDA_VERSION=$("$NVCC" --version | sed -n 's/.*release \([0-9][0-9.]*\),.*/\1/p')
  CACHE="$BUILD/gpu-stage-cache"
  mkdir -p "$CACHE"
  compile() {  # compile NAME SOURCE EXTRA_FLAGS
    key=$( { cat "$ROOT/tests/gpu/$2"; "$NVCC" --version; echo "$GENCODE $3"; } | sha256sum | cut -c1-16)
    if [ ! -x "$CACHE/$1-$key" ]; then
      say "nvcc $2 -> $1 ($CUDA_VERSION; sm_80, sm_90, PTX)"
      # shellcheck disable=SC2086  # flag lists
      "$NVCC" -O2 $GENCODE $3 -Xcompiler -static-libstdc++,-static-libgcc -o "$CACHE/$1-$key.tmp" \
        "$ROOT/tests/gpu/$2" || die "nvcc $2 failed"
      mv -f "$CACHE/$1-$key.tmp" "$CACHE/$1-$key"
    fi
    cp -f "$CACHE/$1-$key" "$DIR/cuda/$1"
  }
  compile busy busy.cu ""
  compile cap_probe cap_probe.cu ""
  compile cap_probe_ptsz cap_probe.cu "--default-stream per-thread"
else
  say "no nvcc ($NVCC): staging without CUDA programs (their steps of the check will SKIP)"
fi

# ---- 3. the check and what was staged ---------------------------------------------------------
cp -f "$ROOT/tests/gpu/check.sh" "$DIR/check.sh"
chmod 755 "$DIR/check.sh"
glibc_needed() {  # the newest GLIBC_ version an ELF file asks for
  if command -v objdump >/dev/null 2>&1; then
    objdump -T "$1" 2>/dev/null | grep -o 'GLIBC_[0-9][0-9.]*' | sed 's/GLIBC_//' | sort -t. -k1,1n -k2,2n -k3,3n | tail -1
  fi
}
{
  echo "staged_at=$(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "gpuslice_commit=$(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo unknown)"
  echo "cuda_toolkit=${CUDA_VERSION:-none}"
  echo "cuda_gencode=sm_80,sm_90,compute_90"
  echo "build_glibc=$(getconf GNU_LIBC_VERSION 2>/dev/null | sed 's/glibc //')"
  echo "glibc_gpuslice=$(glibc_needed "$DIR/bin/gpuslice")"
  echo "glibc_interposer=$(glibc_needed "$DIR/lib/gpuslice/libgpuslice-cuda.so")"
  [ -z "$CUDA_VERSION" ] || echo "glibc_cuda_programs=$(glibc_needed "$DIR/cuda/cap_probe")"
} >"$DIR/manifest"
chmod -R a+rX "$DIR"
chmod 755 "$DIR"

KIB=$(du -sk "$DIR" | cut -f1)
say "staged $DIR: $((KIB / 1024)) MiB ($KIB KiB)"
[ "$KIB" -le 65536 ] || die "$DIR is $KIB KiB: over the 64 MiB that may travel to a GPU machine"
