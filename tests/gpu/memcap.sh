#!/usr/bin/env bash
# GPU check of the memory cap of `shared` slices (libgpuslice-cuda.so, docs/memcap.md).
# Called by tests/gpu/run.sh when present; runs on a machine with an NVIDIA GPU.
#
#   1. A neighbour in slice B (its own cap) holds memory and runs checked kernels.
#   2. Meanwhile a hog in slice A allocates past A's cap with cudaMalloc and cudaMallocAsync:
#      it must get a clean cudaErrorMemoryAllocation at or below the cap, see cudaMemGetInfo
#      report the cap, and keep working after freeing.
#   3. The neighbour must finish with every result right.
#   4. With PyTorch importable and CUDA available: torch.cuda.mem_get_info() reports the cap and an
#      allocation past it raises torch.cuda.OutOfMemoryError, after which smaller ones succeed.
#
# Usage: tests/gpu/memcap.sh [build-dir]  (else $GPUSLICE_BUILD, else $BUILD, else build;
#        NVCC=/usr/local/cuda/bin/nvcc)
# Exit: 0 pass, 1 fail. Prints "SKIP ..." and exits 0 when there is no GPU or no nvcc.
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
BUILD=${1:-${GPUSLICE_BUILD:-${BUILD:-build}}}
NVCC=${NVCC:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}
CAP_A=$((1024 * 1024 * 1024))        # hog's slice: 1 GiB
CAP_B=$((4 * 1024 * 1024 * 1024))    # neighbour's slice: 4 GiB
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"; rm -f /dev/shm/gpuslice-memcap-gpucheck-*-$$' EXIT

if ! command -v nvidia-smi >/dev/null 2>&1 || ! nvidia-smi -L >/dev/null 2>&1; then
  echo "SKIP memcap: no NVIDIA GPU"; exit 0
fi
if [[ ! -x $NVCC ]]; then
  echo "SKIP memcap: nvcc not found (set NVCC)"; exit 0
fi

LIB=${GPUSLICE_CUDA_LIB:-$BUILD/lib/libgpuslice-cuda.so}
if [[ ! -f $LIB ]]; then
  cmake --build "$BUILD" --target gpuslice-cuda >/dev/null || { echo "FAIL memcap: cannot build gpuslice-cuda"; exit 1; }
fi
LIB=$(readlink -f "$LIB")

"$NVCC" -O2 -o "$WORK/cap_check" tests/gpu/memcap/cap_check.cu || { echo "FAIL memcap: nvcc"; exit 1; }

# The environment the executor gives a `shared` slice (memcap::SliceEnvironment).
slice_env() {  # slice cap
  echo "LD_PRELOAD=$LIB GPUSLICE_MEMCAP_BYTES=$2 GPUSLICE_SLICE=gpucheck-$1-$$"
}

fail=0
# shellcheck disable=SC2046
env $(slice_env b $CAP_B) "$WORK/cap_check" neighbour 20 1024 >"$WORK/neighbour.out" 2>&1 &
neighbour=$!
sleep 2

# shellcheck disable=SC2046
if env $(slice_env a $CAP_A) GPUSLICE_MEMCAP_LOG=1 "$WORK/cap_check" hog >"$WORK/hog.out" 2>&1; then
  cat "$WORK/hog.out"
  # The refusal must come from the interposer (its log line), not from the device running out.
  if ! grep -q "refused: slice 'gpucheck-a-$$'" "$WORK/hog.out"; then
    echo "FAIL memcap: no refusal logged by libgpuslice-cuda"; fail=1
  fi
else
  echo "FAIL memcap: hog"; cat "$WORK/hog.out"; fail=1
fi

# The neighbour ran through the hog's refusals; it must end with every result right.
if wait "$neighbour"; then
  cat "$WORK/neighbour.out"
else
  echo "FAIL memcap: the neighbour in another slice failed"; cat "$WORK/neighbour.out"; fail=1
fi

if python3 -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null; then
  # shellcheck disable=SC2046
  if env $(slice_env torch $CAP_A) PYTHONPATH="${PYTHONPATH:-}" python3 - <<'PY' 2>&1; then
import os, sys, torch
cap = int(os.environ["GPUSLICE_MEMCAP_BYTES"])
free, total = torch.cuda.mem_get_info()
assert total == cap, f"mem_get_info total {total} != cap {cap}"
try:
    torch.empty(2 * cap, dtype=torch.uint8, device="cuda")
    sys.exit("FAIL torch: allocation past the cap succeeded")
except torch.cuda.OutOfMemoryError:
    pass
x = torch.ones(64 << 20, dtype=torch.uint8, device="cuda")
assert int(x.sum().item()) == 64 << 20
print(f"OK torch: OutOfMemoryError past the cap, mem_get_info total={total}")
PY
    :
  else
    echo "FAIL memcap: torch"; fail=1
  fi
else
  echo "SKIP memcap torch: PyTorch with CUDA not importable"
fi

if [[ $fail == 0 ]]; then echo "PASS memcap"; else echo "FAIL memcap"; fi
exit $fail
