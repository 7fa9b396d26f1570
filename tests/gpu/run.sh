#!/usr/bin/env bash
# tests/gpu/run.sh — the one prepared check for a machine with an NVIDIA GPU and driver.
# Builds gpuslice's device/agent targets, runs the nvml contract tests, builds and runs a small
# CUDA program (tests/gpu/busy.cu) and checks that the agent attributes its utilisation and
# memory to the right slice, starts MPS through gpuslice with two limited clients, runs
# tests/gpu/memcap.sh if present, prints and checks the driver behaviours the code assumes
# (gpu_driver_probe: sample clock, per-process sample range, cuGetProcAddress pointers vs the
# exports with and without the interposer, two compute instances of one profile where MIG is
# on), and prints a summary. Exit status: 0 iff every step passed.
# Budget: < 8 minutes (most of it the build). Run from anywhere:
#   tests/gpu/run.sh [build-dir]        (default: build-gpu in the repo root)
# Environment: NVCC (default: nvcc on PATH, else /usr/local/cuda/bin/nvcc), JOBS (default nproc),
# GPU_INDEX (default 0), BUSY_SECONDS (default 25).

set -uo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
BUILD="${1:-$ROOT/build-gpu}"
JOBS="${JOBS:-$(nproc)}"
GPU_INDEX="${GPU_INDEX:-0}"
BUSY_SECONDS="${BUSY_SECONDS:-25}"
WORK="$(mktemp -d /tmp/gpuslice-gpu-check.XXXXXX)"
START=$(date +%s)

declare -a STEP_NAMES=()
declare -a STEP_RESULTS=()
record() {  # record <name> <PASS|FAIL|SKIP> [detail]
  STEP_NAMES+=("$1")
  STEP_RESULTS+=("$2${3:+ ($3)}")
  echo "== $1: $2${3:+ ($3)}"
}
log() { echo "-- $*"; }

PIDS_TO_KILL=()
MPS_PIPE=""
# shellcheck disable=SC2317  # invoked by the EXIT trap
cleanup() {
  for p in "${PIDS_TO_KILL[@]:-}"; do
    [ -n "$p" ] && kill "$p" 2>/dev/null
  done
  if [ -n "$MPS_PIPE" ] && command -v nvidia-cuda-mps-control >/dev/null 2>&1; then
    echo quit | CUDA_MPS_PIPE_DIRECTORY="$MPS_PIPE" timeout 10 nvidia-cuda-mps-control >/dev/null 2>&1
  fi
  wait 2>/dev/null
}
trap cleanup EXIT

# ---- 0. the machine ---------------------------------------------------------------------
echo "gpuslice GPU check — $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(hostname)"
echo "repo: $ROOT ($(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo '?'))"
if command -v nvidia-smi >/dev/null 2>&1; then
  nvidia-smi -L
  nvidia-smi --query-gpu=index,name,driver_version,memory.total,mig.mode.current,compute_mode \
    --format=csv 2>/dev/null
  DRIVER=$(nvidia-smi --query-gpu=driver_version --format=csv,noheader 2>/dev/null | head -1)
  record "driver present" PASS "driver ${DRIVER:-?}"
else
  record "driver present" FAIL "nvidia-smi not found"
fi

# ---- 1. build ---------------------------------------------------------------------------
log "configuring $BUILD"
BUILD_OK=1
if cmake -S "$ROOT" -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >"$WORK/configure.log" 2>&1 \
  && cmake --build "$BUILD" -j"$JOBS" --target devices_test agent_test gpu_agent_check gpu_driver_probe \
       gpuslice-cuda >"$WORK/build.log" 2>&1; then
  record "build (tests, gpu checks, libgpuslice-cuda)" PASS
else
  BUILD_OK=0
  tail -30 "$WORK/configure.log" "$WORK/build.log" 2>/dev/null
  record "build (tests, gpu checks, libgpuslice-cuda)" FAIL "see logs above"
fi
DEVICES_TEST="$BUILD/tests/devices/devices_test"
AGENT_TEST="$BUILD/tests/agent/agent_test"
CHECK="$BUILD/tests/gpu/gpu_agent_check"
PROBE="$BUILD/tests/gpu/gpu_driver_probe"
MEMCAP_LIB="$BUILD/lib/libgpuslice-cuda.so"

# probe <step name> <log> <args...>: runs gpu_driver_probe (bounded), shows its lines, records
# SKIP when it says so, PASS on exit 0, FAIL otherwise.
probe() {
  local name="$1" out="$2"
  shift 2
  timeout 60 "$@" >"$out" 2>&1
  local rc=$?
  sed 's/^/  /' "$out" | head -60
  if grep -q '^SKIP' "$out"; then record "$name" SKIP "$(grep -m1 '^SKIP' "$out")"
  elif [ $rc -eq 0 ]; then record "$name" PASS "$(grep -m1 '^ok' "$out")"
  else record "$name" FAIL "$(grep -m1 '^FAIL' "$out" || echo "exit $rc")"; fi
}

# ---- 2. unit tests, including the nvml contract --------------------------------------------
if [ "$BUILD_OK" = 1 ]; then
  "$DEVICES_TEST" --gtest_brief=1 >"$WORK/devices_test.log" 2>&1
  rc=$?
  grep -E "^\[  (PASSED|FAILED|SKIPPED) \]" "$WORK/devices_test.log"
  # With a driver present the nvml contract must run, not skip.
  # (the contract's nvml factory prints "no NVIDIA GPU here (...)" when it cannot open NVML)
  if grep -q "no NVIDIA GPU here" "$WORK/devices_test.log"; then
    grep -m1 "no NVIDIA GPU here" "$WORK/devices_test.log"
    record "nvml contract tests" FAIL "skipped although a driver is present"
  elif [ $rc -eq 0 ]; then
    record "nvml contract tests (devices_test)" PASS
  else
    grep -B2 -A8 "Failure" "$WORK/devices_test.log" | head -60
    record "nvml contract tests (devices_test)" FAIL "exit $rc"
  fi
  if "$AGENT_TEST" --gtest_brief=1 >"$WORK/agent_test.log" 2>&1; then
    record "agent tests (fake backend)" PASS
  else
    grep -B2 -A8 "Failure" "$WORK/agent_test.log" | head -40
    record "agent tests (fake backend)" FAIL
  fi
fi

# ---- 2b. driver behaviours the code assumes (reference/nvml-cuda-abi-review.md) -----------
if [ "$BUILD_OK" = 1 ]; then
  # GetSamples timestamps beside the wall, boot and monotonic clocks; reads from 0 then from
  # the newest sample must work (gpuslice never compares them with the wall clock).
  probe "NVML sample clock (GetSamples from 0, then newest)" "$WORK/probe-samples.log" \
    "$PROBE" samples --device "$GPU_INDEX"
  # cuGetProcAddress pointers vs the exports: informative; the same ABI must give one pointer
  # at every version (the interposer's check for requests above CUDA 13.0).
  probe "cuGetProcAddress pointers vs exports" "$WORK/probe-procaddress.log" \
    "$PROBE" procaddress
  # Under the interposer every hooked entry point must resolve to it, whatever the pointers.
  probe "cuGetProcAddress under libgpuslice-cuda gives the hooks" "$WORK/probe-procaddress-hooked.log" \
    env LD_PRELOAD="$MEMCAP_LIB" GPUSLICE_MEMCAP_BYTES=$((1 << 30)) GPUSLICE_SLICE="gpucheck-probe-$$" \
    "$PROBE" procaddress --expect-hooks
  rm -f "/dev/shm/gpuslice-memcap-gpucheck-probe-$$"
  # Two compute instances of one profile in one GPU instance (skips without MIG mode or root;
  # MIG mode itself is never changed here).
  probe "MIG: two compute instances of one profile" "$WORK/probe-mig.log" \
    "$PROBE" mig-two-ci --device "$GPU_INDEX"
fi

# ---- 3. the CUDA program ------------------------------------------------------------------
NVCC="${NVCC:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}"
BUSY="$WORK/busy"
if [ -x "$NVCC" ] && "$NVCC" -O2 -o "$BUSY" "$ROOT/tests/gpu/busy.cu" >"$WORK/nvcc.log" 2>&1; then
  record "nvcc busy.cu" PASS "$("$NVCC" --version | tail -1)"
else
  tail -10 "$WORK/nvcc.log" 2>/dev/null
  record "nvcc busy.cu" FAIL "nvcc=$NVCC"
  BUSY=""
fi

# ---- 4. agent attribution on the real GPU ----------------------------------------------------
if [ -n "$BUSY" ] && [ "$BUILD_OK" = 1 ]; then
  # A process tree like a job's: a shell (the slice's root) running the CUDA program.
  CUDA_VISIBLE_DEVICES="$GPU_INDEX" bash -c "exec \"$BUSY\" --seconds $BUSY_SECONDS --mem-mib 1024" \
    >"$WORK/busy.out" 2>&1 &
  BUSY_PID=$!
  PIDS_TO_KILL+=("$BUSY_PID")
  sleep 1 &
  DECOY_PID=$!
  for _ in $(seq 1 100); do grep -q '^ready=1' "$WORK/busy.out" && break; sleep 0.2; done
  cat "$WORK/busy.out"
  if grep -q '^ready=1' "$WORK/busy.out"; then
    # Per-process samples while busy.cu runs: their range, stale entries, the busy pid's.
    probe "NVML per-process samples (range, staleness)" "$WORK/probe-procutil.log" \
      "$PROBE" procutil --pid "$BUSY_PID" --device "$GPU_INDEX"
    # The root of the slice is the busy process itself here (bash exec'd it); the agent must
    # also find it through its parent chain when a wrapper stays (exercised in agent_test).
    "$CHECK" attribute --pid "$BUSY_PID" --decoy-pid "$DECOY_PID" --expect-mib 1024 \
      --seconds 10 --device "$GPU_INDEX" >"$WORK/attribute.log" 2>&1
    rc=$?
    grep -E "^(ok|FAIL|backend|round=9 )" "$WORK/attribute.log"
    if [ $rc -eq 0 ]; then record "agent attributes busy.cu to its slice" PASS
    else sed -n '1,60p' "$WORK/attribute.log"; record "agent attributes busy.cu to its slice" FAIL; fi
  else
    record "agent attributes busy.cu to its slice" FAIL "busy.cu did not start"
  fi
  wait "$BUSY_PID" 2>/dev/null
else
  record "agent attributes busy.cu to its slice" SKIP "no busy binary or build"
fi

# ---- 5. MPS with two limited clients ---------------------------------------------------------
if [ -n "$BUSY" ] && [ "$BUILD_OK" = 1 ] && command -v nvidia-cuda-mps-control >/dev/null 2>&1; then
  MPS_PIPE="$WORK/mps-pipe"
  MPS_LOG="$WORK/mps-log"
  FULL_SMS=$(CUDA_VISIBLE_DEVICES="$GPU_INDEX" "$BUSY" --seconds 0 --mem-mib 16 2>/dev/null | sed -n 's/^sms=//p')
  if "$CHECK" mps-start --device "$GPU_INDEX" --pipe "$MPS_PIPE" --log "$MPS_LOG" \
       --threads 50 --pinned-mib 4096 >"$WORK/mps-start.log" 2>&1; then
    cat "$WORK/mps-start.log"
    record "MPS daemon started by gpuslice (idempotent)" PASS
    # Client A: 50% threads from the daemon default, tries to exceed its own 1 GiB limit.
    # Client B: 25% threads and a 2 GiB limit from its environment (can only lower).
    # Clients leave CUDA_VISIBLE_DEVICES unset: the daemon already sees only $UUID, which is
    # ordinal 0 for its clients.
    env -u CUDA_VISIBLE_DEVICES CUDA_MPS_PIPE_DIRECTORY="$MPS_PIPE" \
      CUDA_MPS_PINNED_DEVICE_MEM_LIMIT="0=1G" \
      "$BUSY" --seconds 8 --mem-mib 512 --try-alloc-mib 2048 >"$WORK/mps-a.out" 2>&1 &
    A=$!
    env -u CUDA_VISIBLE_DEVICES CUDA_MPS_PIPE_DIRECTORY="$MPS_PIPE" \
      CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=25 CUDA_MPS_PINNED_DEVICE_MEM_LIMIT="0=2G" \
      "$BUSY" --seconds 8 --mem-mib 512 >"$WORK/mps-b.out" 2>&1 &
    B=$!
    PIDS_TO_KILL+=("$A" "$B")
    sleep 3
    echo "get_server_list" | CUDA_MPS_PIPE_DIRECTORY="$MPS_PIPE" timeout 10 nvidia-cuda-mps-control \
      >"$WORK/mps-servers.txt" 2>&1
    wait "$A"; RA=$?
    wait "$B"; RB=$?
    echo "client A:"; sed 's/^/  /' "$WORK/mps-a.out"
    echo "client B:"; sed 's/^/  /' "$WORK/mps-b.out"
    echo "servers: $(tr '\n' ' ' <"$WORK/mps-servers.txt")"
    SMS_A=$(sed -n 's/^sms=//p' "$WORK/mps-a.out")
    SMS_B=$(sed -n 's/^sms=//p' "$WORK/mps-b.out")
    OK=1
    [ $RA -eq 0 ] && [ $RB -eq 0 ] && grep -q '^done=1' "$WORK/mps-a.out" && grep -q '^done=1' "$WORK/mps-b.out" || OK=0
    [ -s "$WORK/mps-servers.txt" ] || OK=0
    DETAIL="full=$FULL_SMS SMs, A=$SMS_A, B=$SMS_B; A over-limit alloc: $(sed -n 's/^try_alloc=//p' "$WORK/mps-a.out")"
    # The thread limits show as fewer visible SMs; the 1 GiB pinned limit refuses 2 GiB.
    if [ -n "$FULL_SMS" ] && [ -n "$SMS_A" ] && [ -n "$SMS_B" ]; then
      [ "$SMS_A" -lt "$FULL_SMS" ] && [ "$SMS_B" -lt "$SMS_A" ] || OK=0
    else
      OK=0
    fi
    grep -q '^try_alloc=failed' "$WORK/mps-a.out" || OK=0
    if [ $OK = 1 ]; then record "MPS: two limited clients ran" PASS "$DETAIL"
    else record "MPS: two limited clients ran" FAIL "$DETAIL; exit A=$RA B=$RB"; fi
    "$CHECK" mps-stop --pipe "$MPS_PIPE" && "$CHECK" mps-status --pipe "$MPS_PIPE" >"$WORK/mps-status.txt"
    if grep -q '^stopped' "$WORK/mps-status.txt"; then record "MPS daemon stopped" PASS; MPS_PIPE=""
    else record "MPS daemon stopped" FAIL "$(cat "$WORK/mps-status.txt")"; fi
    tail -5 "$MPS_LOG/control.log" 2>/dev/null | sed 's/^/  control.log: /'
  else
    cat "$WORK/mps-start.log"
    record "MPS daemon started by gpuslice (idempotent)" FAIL
    MPS_PIPE="$WORK/mps-pipe"  # let cleanup try to stop whatever started
  fi
else
  record "MPS with two limited clients" SKIP "no nvidia-cuda-mps-control, busy binary or build"
fi

# ---- 6. memory cap (tests/gpu/memcap.sh, owned by the memcap helper; called with the build dir
# as $1 and GPUSLICE_BUILD, NVCC in its environment; exit 0 = pass) ----------------------------
if [ -x "$ROOT/tests/gpu/memcap.sh" ]; then
  if GPUSLICE_BUILD="$BUILD" NVCC="$NVCC" "$ROOT/tests/gpu/memcap.sh" "$BUILD" >"$WORK/memcap.log" 2>&1; then
    tail -15 "$WORK/memcap.log"
    if tail -1 "$WORK/memcap.log" | grep -q '^SKIP'; then record "memcap.sh (cudaMalloc past the cap, nvcc program)" SKIP "$(tail -1 "$WORK/memcap.log")"
    else record "memcap.sh (cudaMalloc past the cap, nvcc program)" PASS; fi
  else
    tail -40 "$WORK/memcap.log"; record "memcap.sh (cudaMalloc past the cap, nvcc program)" FAIL
  fi
elif [ -e "$ROOT/tests/gpu/memcap.sh" ]; then
  record "memcap.sh" FAIL "present but not executable"
fi

# ==== measurement checks (issue 13; owned by the measurement helper) ============================
# 7. Two slices on one GPU: a busy busy.cu and an idle one (memory, no kernels) as two shared
#    slices; the busy slice is never called idle (active with per-process figures, unmeasured
#    without), and above the idle one when both are measured.
if [ -n "$BUSY" ] && [ "$BUILD_OK" = 1 ]; then
  CUDA_VISIBLE_DEVICES="$GPU_INDEX" "$BUSY" --seconds 14 --mem-mib 512 >"$WORK/two-busy.out" 2>&1 &
  TWO_BUSY=$!
  CUDA_VISIBLE_DEVICES="$GPU_INDEX" "$BUSY" --seconds 14 --mem-mib 256 --duty 0 >"$WORK/two-idle.out" 2>&1 &
  TWO_IDLE=$!
  PIDS_TO_KILL+=("$TWO_BUSY" "$TWO_IDLE")
  for _ in $(seq 1 100); do
    grep -q '^ready=1' "$WORK/two-busy.out" && grep -q '^ready=1' "$WORK/two-idle.out" && break
    sleep 0.2
  done
  if "$CHECK" two-slices --busy-pid "$TWO_BUSY" --idle-pid "$TWO_IDLE" --seconds 8 --device "$GPU_INDEX" \
      >"$WORK/two-slices.log" 2>&1; then
    grep -E "^(ok|note)" "$WORK/two-slices.log"; record "two slices on one GPU: busy never idle" PASS
  else
    sed -n '1,40p' "$WORK/two-slices.log"; record "two slices on one GPU: busy never idle" FAIL
  fi
  wait "$TWO_BUSY" "$TWO_IDLE" 2>/dev/null
else
  record "two slices on one GPU: busy never idle" SKIP "no busy binary or build"
fi

# 8. MIG instance utilisation: only where MIG is already enabled (this script never changes
#    the GPU's MIG mode). busy.cu runs on the first MIG device; its figure must be > 0 or
#    Unsupported (never a failed read or a 0 for a busy instance).
MIG_MODE=$(nvidia-smi -i "$GPU_INDEX" --query-gpu=mig.mode.current --format=csv,noheader 2>/dev/null | tr -d ' ')
MIG_UUID=$(nvidia-smi -L 2>/dev/null | awk -v g="GPU $GPU_INDEX:" '$0 ~ "^"g {on=1; next} /^GPU /{on=0} on && /MIG-/ {
  match($0, /MIG-[0-9a-fA-F-]+/); print substr($0, RSTART, RLENGTH); exit }')
if [ "$MIG_MODE" = "Enabled" ] && [ -n "$MIG_UUID" ] && [ -n "$BUSY" ] && [ "$BUILD_OK" = 1 ]; then
  CUDA_VISIBLE_DEVICES="$MIG_UUID" "$BUSY" --seconds 10 --mem-mib 256 >"$WORK/mig-busy.out" 2>&1 &
  MIG_BUSY=$!
  PIDS_TO_KILL+=("$MIG_BUSY")
  for _ in $(seq 1 100); do grep -q '^ready=1' "$WORK/mig-busy.out" && break; sleep 0.2; done
  if "$CHECK" mig-util --device "$GPU_INDEX" --busy-uuid "$MIG_UUID" >"$WORK/mig-util.log" 2>&1; then
    grep -E "^(ok|round=4 )" "$WORK/mig-util.log"; record "MIG instance utilisation" PASS
  else
    sed -n '1,40p' "$WORK/mig-util.log"; record "MIG instance utilisation" FAIL
  fi
  wait "$MIG_BUSY" 2>/dev/null
else
  record "MIG instance utilisation" SKIP "MIG mode '${MIG_MODE:-?}' on GPU $GPU_INDEX (not changed by this script)"
fi
# ==== end of measurement checks ==================================================================

# ---- summary --------------------------------------------------------------------------------
echo
echo "================ gpuslice GPU check summary ($(( $(date +%s) - START )) s) ================"
FAILED=0
for i in "${!STEP_NAMES[@]}"; do
  printf '%-52s %s\n' "${STEP_NAMES[$i]}" "${STEP_RESULTS[$i]}"
  case "${STEP_RESULTS[$i]}" in FAIL*) FAILED=$((FAILED + 1)) ;; esac
done
echo "logs: $WORK"
if [ "$FAILED" -gt 0 ]; then
  echo "RESULT: FAIL ($FAILED step(s))"
  exit 1
fi
echo "RESULT: PASS"
exit 0
