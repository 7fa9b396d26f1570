#!/bin/sh
# check.sh — gpuslice's check on a GPU machine, from a folder made by tests/gpu/stage.sh. Needs
# only the NVIDIA driver and a POSIX shell with coreutils (root for the two-user and MIG steps).
# Every step is bounded by `timeout` and can fail; a step that cannot run here says SKIP and why.
# Without a GPU it runs the steps that need none (the staged binaries, the interposer loading
# under this glibc, the daemon's rules on simulated GPUs) and exits 3. docs/gpu-check.md.
#
#   DIR/check.sh                 GPU_INDEX=0 (the GPU to use), CHECK_OUT=<dir> (copy logs there)
#   GPUSLICE_CHECK_MIG=1         also change the GPU's MIG mode (creates and destroys instances
#                                through gpuslice, restores the mode): only on a machine you own
# Exit: 0 nothing failed; 1 something failed; 3 nothing failed but there was no GPU.
set -u

HERE=$(cd "$(dirname "$0")" && pwd)
GPU=${GPU_INDEX:-0}
START=$(date +%s)
WORK=$(mktemp -d /tmp/gpuslice-check.XXXXXX) || exit 1
chmod 755 "$WORK"
PASSED=0
FAILED=0
SKIPPED=0
PIDS=""
SERVE_PIDS=""
MIG_RESTORE=""

pass() { PASSED=$((PASSED + 1)); echo "PASS $1${2:+: $2}"; echo "PASS $1${2:+: $2}" >>"$WORK/results.txt"; }
fail() { FAILED=$((FAILED + 1)); echo "FAIL $1${2:+: $2}"; echo "FAIL $1${2:+: $2}" >>"$WORK/results.txt"; }
skip() { SKIPPED=$((SKIPPED + 1)); echo "SKIP $1${2:+: $2}"; echo "SKIP $1${2:+: $2}" >>"$WORK/results.txt"; }
note() { echo "  $*"; }
# tmo SECONDS CMD...: the command, killed after SECONDS (and SIGKILLed 5 s later).
tmo() { t_secs=$1; shift; timeout -k 5 "$t_secs" "$@"; }
# The staged gpuslice and probes with their bundled libraries, as commands (timeout runs programs,
# not shell functions): small wrappers in $WORK/bin.
DEPS="$HERE/lib/deps"
mkdir -p "$WORK/bin"
for tool in gpuslice gpu_driver_probe gpu_agent_check devices_test; do
  # shellcheck disable=SC2016  # the $ are for the wrapper
  printf '#!/bin/sh\nLD_LIBRARY_PATH="%s${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" exec "%s" "$@"\n' "$DEPS" "$HERE/bin/$tool" \
    >"$WORK/bin/$tool"
  chmod 755 "$WORK/bin/$tool"
done
GS="$WORK/bin/gpuslice"
PROBE="$WORK/bin/gpu_driver_probe"
AGENT="$WORK/bin/gpu_agent_check"
gs() { "$GS" "$@"; }
LIB="$HERE/lib/gpuslice/libgpuslice-cuda.so"
CUDA="$HERE/cuda"
manifest() { sed -n "s/^$1=//p" "$HERE/manifest" 2>/dev/null | head -1; }

cleanup() {
  for p in $PIDS; do kill "$p" 2>/dev/null; done
  for p in $SERVE_PIDS; do kill "$p" 2>/dev/null; done
  sleep 1
  for p in $PIDS $SERVE_PIDS; do kill -9 "$p" 2>/dev/null; done
  # MPS control daemons gpuslice started under our state directories, if any is left.
  if command -v nvidia-cuda-mps-control >/dev/null 2>&1; then
    for pipe in "$WORK"/*/mps/*/pipe; do
      [ -d "$pipe" ] && echo quit | tmo 10 env CUDA_MPS_PIPE_DIRECTORY="$pipe" nvidia-cuda-mps-control >/dev/null 2>&1
    done
  fi
  rm -f /dev/shm/gpuslice-memcap-gpucheck-* 2>/dev/null
  # The GPU was out of MIG mode before the MIG step (which requires that): its instances are
  # gpuslice's, and the mode goes back.
  if [ "$MIG_RESTORE" = Disabled ]; then
    tmo 60 nvidia-smi mig -i "$GPU" -dci >/dev/null 2>&1
    tmo 60 nvidia-smi mig -i "$GPU" -dgi >/dev/null 2>&1
    tmo 120 nvidia-smi -i "$GPU" -mig 0 >/dev/null 2>&1
  fi
  if [ -n "${CHECK_OUT:-}" ]; then mkdir -p "$CHECK_OUT" && cp -r "$WORK"/. "$CHECK_OUT"/ 2>/dev/null; fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# ---- serve: a daemon in a state directory of its own, on simulated or real GPUs -----------------
# start_serve NAME [serve flags...]: sets SOCK; waits until it answers (15 s).
start_serve() {
  ss_name=$1
  shift
  mkdir -p "$WORK/$ss_name"
  chmod 755 "$WORK/$ss_name"
  SOCK="$WORK/$ss_name/gpuslice.sock"
  # Not through gs(): $! must be the daemon's own pid (env execs it).
  env LD_LIBRARY_PATH="$DEPS${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" "$HERE/bin/gpuslice" serve \
    --state-dir "$WORK/$ss_name/state" --socket "$SOCK" --tick 200ms --sample-interval 500ms "$@" \
    >"$WORK/$ss_name/serve.log" 2>&1 &
  SERVE_PIDS="$SERVE_PIDS $!"
  ss_i=0
  while [ $ss_i -lt 75 ]; do
    if tmo 5 "$GS" devices --socket "$SOCK" >/dev/null 2>&1; then return 0; fi
    ss_i=$((ss_i + 1))
    sleep 0.2
  done
  tail -5 "$WORK/$ss_name/serve.log" | sed 's/^/  serve: /'
  return 1
}
stop_serve() {  # the last one started
  ss_pid=${SERVE_PIDS##* }
  kill "$ss_pid" 2>/dev/null
  tmo 15 sh -c "while kill -0 $ss_pid 2>/dev/null; do sleep 0.2; done"
  SERVE_PIDS=${SERVE_PIDS% *}
}
# submit [gpuslice submit flags...] -- CMD: prints the job id (empty on failure).
submit() { tmo 20 "$GS" submit --socket "$SOCK" "$@" 2>"$WORK/submit.err" | sed -n 's/^job \([0-9][0-9]*\) submitted.*/\1/p'; }
job_state() { tmo 10 "$GS" show --socket "$SOCK" "$1" 2>/dev/null | sed -n 's/^state: *\([a-z]*\).*/\1/p'; }
# wait_state ID "STATE|STATE" SECONDS: 0 once the job is in one of them.
wait_state() {
  ws_end=$(($(date +%s) + $3))
  while [ "$(date +%s)" -le $ws_end ]; do
    ws_s=$(job_state "$1")
    case "|$2|" in *"|$ws_s|"*) return 0 ;; esac
    sleep 0.3
  done
  return 1
}
# Runs a command as the unprivileged user `nobody` (coreutils' chroot), where we are root.
as_nobody() { chroot --userspec=65534:65534 / "$@"; }
can_be_nobody() { [ "$(id -u)" = 0 ] && chroot --userspec=65534:65534 / true 2>/dev/null; }
# The environment gpuslice gives a capped shared slice (memcap/env.h), for the cap programs.
slice_env() {  # slice_env NAME CAP_BYTES CONTEXT_BYTES
  echo "LD_PRELOAD=$LIB GPUSLICE_MEMCAP_BYTES=$2 GPUSLICE_SLICE=gpucheck-$1-$$ GPUSLICE_MEMCAP_CONTEXT_BYTES=$3"
}

echo "gpuslice GPU check: $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(uname -n); staged: $(manifest gpuslice_commit)," \
  "CUDA toolkit $(manifest cuda_toolkit), host glibc $(getconf GNU_LIBC_VERSION 2>/dev/null | sed 's/glibc //')"

# ==== steps that need no GPU ====================================================================
if out=$(tmo 20 "$GS" --help 2>&1); then
  pass "staged binaries run here"
else
  fail "staged binaries run here" "$(echo "$out" | head -2 | tr '\n' ' ') (built for glibc $(manifest glibc_gpuslice))"
fi

# The interposer must load under this host's glibc, or every capped job would fail to start.
if [ ! -f "$LIB" ]; then
  fail "interposer loads under this glibc" "$LIB missing"
elif out=$(tmo 10 env LD_PRELOAD="$LIB" GPUSLICE_MEMCAP_BYTES=1 sh -c 'echo loaded' 2>&1) && [ "$out" = loaded ]; then
  pass "interposer loads under this glibc" "needs glibc $(manifest glibc_interposer)"
else
  fail "interposer loads under this glibc" "$(echo "$out" | head -2 | tr '\n' ' ')"
fi

# The daemon's rules on simulated GPUs (its fake backend): memory set aside, the cap's environment,
# one MPS user per GPU (the second user's job waits with its reason and starts after the first's).
if start_serve sim --simulate 1xH200-141GB; then
  devs=$(tmo 10 "$GS" devices --socket "$SOCK" --json 2>/dev/null)
  ctx=$(echo "$devs" | tr -d ' \n' | sed -n 's/.*"context_reserve":\([0-9]*\).*/\1/p')
  reserved=$(echo "$devs" | tr -d ' \n' | sed -n 's/.*"reserved_memory":\([0-9]*\).*/\1/p')
  id=$(submit --queue interactive --kind shared --fraction 250m --mem 4GiB -- sh -c env)
  if [ -n "$id" ] && wait_state "$id" "succeeded|failed" 20; then
    log=$(tmo 10 "$GS" logs --socket "$SOCK" "$id" 2>/dev/null)
    want=$((4 * 1073741824 + ${ctx:-0}))
    if [ -n "$ctx" ] && [ "${reserved:-0}" -gt 0 ] && echo "$log" | grep -q "^LD_PRELOAD=$LIB" &&
       echo "$log" | grep -q "^GPUSLICE_MEMCAP_BYTES=$want\$" && echo "$log" | grep -q "^GPUSLICE_MEMCAP_CONTEXT_BYTES=$ctx\$"; then
      pass "simulated: memory set aside and a capped slice's environment" \
        "driver reserve $((reserved / 1048576)) MiB, context $((ctx / 1048576)) MiB, cap 4 GiB + context"
    else
      fail "simulated: memory set aside and a capped slice's environment" \
        "reserve='$reserved' context='$ctx'; job log: $(echo "$log" | grep -E 'LD_PRELOAD|MEMCAP|gpuslice:' | tr '\n' ' ')"
    fi
  else
    fail "simulated: memory set aside and a capped slice's environment" "job did not end: $(cat "$WORK/submit.err")"
  fi
  if can_be_nobody; then
    cp "$HERE/bin/gpuslice" "$WORK/gpuslice" && mkdir -p "$WORK/deps" && cp "$DEPS"/* "$WORK/deps/" 2>/dev/null
    chmod -R a+rX "$WORK/gpuslice" "$WORK/deps"
    a=$(submit --queue interactive --kind mps --fraction 250m -- sleep 60)
    b=$(as_nobody env LD_LIBRARY_PATH="$WORK/deps" timeout -k 5 20 "$WORK/gpuslice" submit --socket "$SOCK" --queue interactive \
          --kind mps --fraction 250m -- true 2>&1 | sed -n 's/^job \([0-9][0-9]*\) submitted.*/\1/p')
    sleep 1
    why=$(tmo 10 "$GS" show --socket "$SOCK" "${b:-0}" 2>/dev/null | sed -n 's/^waiting: *//p')
    state_b=$(job_state "${b:-0}")
    tmo 10 "$GS" cancel --socket "$SOCK" "${a:-0}" >/dev/null 2>&1
    if [ "$state_b" = pending ] && echo "$why" | grep -q "MPS server of user root" && wait_state "$b" succeeded 20; then
      pass "simulated: one MPS user per GPU" "nobody's job waited ('$why') and ran after root's ended"
    else
      fail "simulated: one MPS user per GPU" "nobody's job: state '$state_b', reason '$why', then '$(job_state "${b:-0}")'"
    fi
  else
    skip "simulated: one MPS user per GPU" "needs root (to submit as a second user)"
  fi
  stop_serve
else
  fail "simulated daemon starts" "see $WORK/sim/serve.log"
fi

# ==== the GPU ====================================================================================
HAVE_GPU=0
if ! command -v nvidia-smi >/dev/null 2>&1; then
  GPU_WHY="no NVIDIA driver here (nvidia-smi not found)"
elif ! out=$(tmo 30 nvidia-smi -L 2>&1) || ! echo "$out" | grep -q "^GPU $GPU:"; then
  GPU_WHY="no GPU $GPU (nvidia-smi -L: $(echo "$out" | head -1))"
else
  HAVE_GPU=1
  echo "$out" | sed 's/^/  /'
  tmo 30 nvidia-smi -i "$GPU" --query-gpu=name,driver_version,memory.total,mig.mode.current,compute_mode \
    --format=csv 2>/dev/null | sed 's/^/  /'
  pass "driver present" "$(echo "$out" | sed -n "s/^GPU $GPU: \([^(]*\).*/\1/p")driver $(tmo 20 nvidia-smi -i "$GPU" --query-gpu=driver_version --format=csv,noheader 2>/dev/null)"
fi

# gpu_step NAME: true when the step can run (else it is skipped for want of a GPU or programs).
gpu_step() {
  if [ "$HAVE_GPU" = 0 ]; then skip "$1" "$GPU_WHY"; return 1; fi
  return 0
}
cuda_step() {
  gpu_step "$1" || return 1
  if [ -n "${CUDA_WHY:-}" ]; then skip "$1" "$CUDA_WHY"; return 1; fi
  return 0
}

# The driver against the toolkit the programs were built with: an older driver major cannot run
# them (cudaErrorInsufficientDriver), an older minor can (minor version compatibility) but not JIT
# their PTX.
CUDA_WHY=""
TOOLKIT=$(manifest cuda_toolkit)
if [ ! -x "$CUDA/cap_probe" ]; then
  CUDA_WHY="no CUDA test programs staged (no nvcc where stage.sh ran)"
fi
if gpu_step "driver against the toolkit"; then
  if [ -n "$CUDA_WHY" ]; then
    skip "driver against the toolkit" "$CUDA_WHY"
  else
    tmo 60 "$CUDA/cap_probe" info >"$WORK/info.txt" 2>&1
    drv=$(sed -n 's/^driver_cuda=\([0-9]*\).*/\1/p' "$WORK/info.txt")
    drv_text="$((${drv:-0} / 1000)).$((${drv:-0} % 1000 / 10))"
    tk_major=${TOOLKIT%%.*}
    if [ -z "$drv" ] || [ "$drv" = 0 ]; then
      fail "driver against the toolkit" "the CUDA driver did not answer: $(head -2 "$WORK/info.txt" | tr '\n' ' ')"
      CUDA_WHY="the CUDA driver does not answer"
    elif [ $((drv / 1000)) -lt "$tk_major" ]; then
      fail "driver against the toolkit" "driver supports CUDA $drv_text, the programs were built with CUDA $TOOLKIT: stage with an older toolkit (NVCC=...) or update the driver"
      CUDA_WHY="driver (CUDA $drv_text) older than the toolkit (CUDA $TOOLKIT)"
    elif ! grep -q '^ok info' "$WORK/info.txt"; then
      fail "driver against the toolkit" "$(grep -m1 FAIL "$WORK/info.txt")"
      CUDA_WHY="the test program cannot use the GPU"
    else
      compat=""
      [ "$drv_text" = "$TOOLKIT" ] || compat=" (an older minor runs them by minor version compatibility; PTX would not JIT)"
      pass "driver against the toolkit" "driver CUDA $drv_text, toolkit $TOOLKIT$compat"
    fi
  fi
fi

# NVML: the sample clock (GetSamples read from 0, then from the newest sample) and enumeration.
if gpu_step "NVML enumeration and sample clock"; then
  tmo 60 "$PROBE" samples --device "$GPU" >"$WORK/probe-samples.txt" 2>&1
  rc=$?
  sed 's/^/  /' "$WORK/probe-samples.txt" | head -12
  if grep -q '^SKIP' "$WORK/probe-samples.txt"; then skip "NVML enumeration and sample clock" "$(grep -m1 '^SKIP' "$WORK/probe-samples.txt")"
  elif [ $rc -eq 0 ]; then pass "NVML enumeration and sample clock" "$(grep -m1 '^ok' "$WORK/probe-samples.txt")"
  else fail "NVML enumeration and sample clock" "$(grep -m1 '^FAIL' "$WORK/probe-samples.txt" || echo "exit $rc")"; fi
fi
# The device backends' contract on the real NVML backend (tests/devices/contract_test.cc): it skips
# without a driver, so here it must run.
if gpu_step "NVML backend contract on the real driver"; then
  tmo 120 "$WORK/bin/devices_test" --gtest_filter='BackendContract/nvml.*' \
    >"$WORK/nvml-contract.txt" 2>&1
  rc=$?
  if grep -q "no NVIDIA GPU here" "$WORK/nvml-contract.txt"; then
    fail "NVML backend contract on the real driver" "skipped although a driver is present: $(grep -m1 'no NVIDIA GPU here' "$WORK/nvml-contract.txt")"
  elif [ $rc -eq 0 ]; then
    pass "NVML backend contract on the real driver" "$(grep -m1 'PASSED' "$WORK/nvml-contract.txt")"
  else
    fail "NVML backend contract on the real driver" "$(grep -m1 -A3 'Failure' "$WORK/nvml-contract.txt" | tr '\n' ' ')"
  fi
fi
# cuGetProcAddress: the driver's pointers against its exports (informative), and under the
# interposer every hooked entry point resolved to the hook.
if gpu_step "cuGetProcAddress gives the hooks under the interposer"; then
  tmo 60 "$PROBE" procaddress >"$WORK/probe-procaddress.txt" 2>&1
  sed 's/^/  /' "$WORK/probe-procaddress.txt" | head -30
  # shellcheck disable=SC2046  # the slice's variables are words
  tmo 60 env $(slice_env probe 1073741824 0) "$PROBE" procaddress --expect-hooks \
    >"$WORK/probe-hooks.txt" 2>&1
  rc=$?
  if [ $rc -eq 0 ]; then pass "cuGetProcAddress gives the hooks under the interposer" "$(grep -m1 '^ok' "$WORK/probe-hooks.txt")"
  else fail "cuGetProcAddress gives the hooks under the interposer" "$(grep -m1 '^FAIL' "$WORK/probe-hooks.txt" || echo "exit $rc")"; fi
fi

# The daemon on the real GPU (kept running for the memory, MPS and serve steps).
GPU_SOCK=""
USABLE=""
CTX=$((768 * 1048576))  # the catalogue's Hopper figure, until the daemon says
if gpu_step "serve on the GPU"; then
  if start_serve gpu; then
    GPU_SOCK=$SOCK
    devs=$(tmo 10 "$GS" devices --socket "$SOCK" --json 2>/dev/null | tr -d ' \n')
    USABLE=$(echo "$devs" | sed -n 's/.*"index":'"$GPU"',[^}]*"memory":\([0-9]*\).*/\1/p')
    [ -n "$USABLE" ] || USABLE=$(echo "$devs" | sed -n 's/.*"memory":\([0-9]*\).*/\1/p')
    c=$(echo "$devs" | sed -n 's/.*"context_reserve":\([0-9]*\).*/\1/p')
    [ -n "$c" ] && CTX=$c
    tmo 10 "$GS" devices --socket "$SOCK" 2>&1 | sed 's/^/  /'
    pass "serve on the GPU" "nvml backend; $((${USABLE:-0} / 1048576)) MiB usable, $((CTX / 1048576)) MiB per context set aside"
  else
    fail "serve on the GPU" "see $WORK/gpu/serve.log"
  fi
fi

# What the driver keeps and what one context takes, measured: the reserves must cover them or
# caps that fill up would not add up (a neighbour would get the driver's out-of-memory error).
if cuda_step "memory reserves measured"; then
  total_mib=$(tmo 20 nvidia-smi -i "$GPU" --query-gpu=memory.total --format=csv,noheader,nounits 2>/dev/null | tr -d ' ')
  nvml_reserved=$(tmo 20 nvidia-smi -i "$GPU" --query-gpu=memory.reserved --format=csv,noheader,nounits 2>/dev/null | tr -d ' ')
  cuda_total=$(sed -n 's/.*memgetinfo_total=\([0-9]*\).*/\1/p' "$WORK/info.txt")
  timeout -k 5 30 env CUDA_VISIBLE_DEVICES="$GPU" "$CUDA/cap_probe" context 8 >"$WORK/context.txt" 2>&1 &
  cpid=$!
  PIDS="$PIDS $cpid"
  i=0
  while [ $i -lt 50 ] && ! grep -q 'ready=1' "$WORK/context.txt" 2>/dev/null; do i=$((i + 1)); sleep 0.2; done
  sleep 1
  ctx_pid=$(sed -n 's/^pid=\([0-9]*\).*/\1/p' "$WORK/context.txt")
  ctx_mib=$(tmo 20 nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader,nounits 2>/dev/null |
            tr -d ' ' | sed -n "s/^${ctx_pid:-x},\([0-9]*\)$/\1/p")
  wait "$cpid" 2>/dev/null
  note "nvidia-smi total ${total_mib:-?} MiB, reserved (NVML) ${nvml_reserved:-?} MiB; CUDA sees $((${cuda_total:-0} / 1048576)) MiB; one context: ${ctx_mib:-?} MiB; gpuslice sets aside $((CTX / 1048576)) MiB per context and cuts shares from $((${USABLE:-0} / 1048576)) MiB"
  if [ -z "$ctx_mib" ]; then
    fail "memory reserves measured" "the context's memory was not readable (nvidia-smi --query-compute-apps)"
  elif [ "$ctx_mib" -gt $((CTX / 1048576)) ]; then
    fail "memory reserves measured" "a context takes $ctx_mib MiB, more than the $((CTX / 1048576)) MiB set aside: raise [memory] context_reserve"
  elif [ -n "$USABLE" ] && [ -n "$cuda_total" ] && [ "$USABLE" -gt "$cuda_total" ]; then
    fail "memory reserves measured" "shares are cut from $((USABLE / 1048576)) MiB but CUDA reports $((cuda_total / 1048576)) MiB: raise [memory] driver_reserved"
  else
    pass "memory reserves measured" "context ${ctx_mib} MiB <= $((CTX / 1048576)) MiB set aside; driver keeps $(( ${total_mib:-0} - ${cuda_total:-0} / 1048576 )) MiB"
  fi
fi

# The cap against every allocation path (a 1 GiB slice: its cap is that and one context, as the
# daemon sets it), on the default and per-thread builds.
CAP=$((1073741824 + CTX))
for api in malloc driver async pool vmm managed pitch graph; do
  if cuda_step "cap holds: $api"; then
    # shellcheck disable=SC2046
    tmo 60 env CUDA_VISIBLE_DEVICES="$GPU" env $(slice_env "$api" $CAP "$CTX") GPUSLICE_MEMCAP_LOG=1 "$CUDA/cap_probe" fill "$api" 64 \
      >"$WORK/fill-$api.txt" 2>&1
    rc=$?
    if [ $rc -eq 0 ]; then pass "cap holds: $api" "$(grep -m1 '^ok' "$WORK/fill-$api.txt" | sed 's/^ok //')"
    else fail "cap holds: $api" "$(grep -m1 '^FAIL' "$WORK/fill-$api.txt" || tail -1 "$WORK/fill-$api.txt") (exit $rc)"; fi
  fi
done
if cuda_step "cap holds: per-thread default stream build"; then
  # shellcheck disable=SC2046
  tmo 60 env CUDA_VISIBLE_DEVICES="$GPU" env $(slice_env ptsz $CAP "$CTX") "$CUDA/cap_probe_ptsz" fill async 64 >"$WORK/fill-ptsz.txt" 2>&1
  rc=$?
  if [ $rc -eq 0 ]; then pass "cap holds: per-thread default stream build" "$(grep -m1 '^ok' "$WORK/fill-ptsz.txt" | sed 's/^ok //')"
  else fail "cap holds: per-thread default stream build" "$(grep -m1 '^FAIL' "$WORK/fill-ptsz.txt") (exit $rc)"; fi
fi
if cuda_step "pools release what they keep"; then
  # shellcheck disable=SC2046
  tmo 60 env CUDA_VISIBLE_DEVICES="$GPU" env $(slice_env pool-release $CAP "$CTX") "$CUDA/cap_probe" pool-release >"$WORK/pool-release.txt" 2>&1
  rc=$?
  if [ $rc -eq 0 ]; then pass "pools release what they keep" "$(grep -m1 '^release_threshold' "$WORK/pool-release.txt")"
  else fail "pools release what they keep" "$(grep -m1 '^FAIL' "$WORK/pool-release.txt") (exit $rc)"; fi
fi
if cuda_step "exec starts a fresh charge"; then
  # shellcheck disable=SC2046
  tmo 60 env CUDA_VISIBLE_DEVICES="$GPU" env $(slice_env exec $CAP "$CTX") "$CUDA/cap_probe" exec 512 >"$WORK/exec.txt" 2>&1
  rc=$?
  if [ $rc -eq 0 ]; then pass "exec starts a fresh charge" "$(grep -m1 '^ok' "$WORK/exec.txt" | sed 's/^ok //')"
  else fail "exec starts a fresh charge" "$(grep -m1 '^FAIL' "$WORK/exec.txt") (exit $rc)"; fi
fi
if cuda_step "two processes share one cap"; then
  # shellcheck disable=SC2046
  # Each process in a slice is charged a context: a 1 GiB slice with room for a second context
  # holds the neighbour's 256 MiB and 768 MiB for the second process to fill.
  SHARE=$((CAP + CTX))
  timeout -k 5 60 env CUDA_VISIBLE_DEVICES="$GPU" $(slice_env share $SHARE "$CTX") "$CUDA/cap_probe" hold 256 12 >"$WORK/share-hold.txt" 2>&1 &
  hpid=$!
  PIDS="$PIDS $hpid"
  i=0
  while [ $i -lt 75 ] && ! grep -q 'ready=1' "$WORK/share-hold.txt" 2>/dev/null; do i=$((i + 1)); sleep 0.2; done
  # shellcheck disable=SC2046
  tmo 60 env CUDA_VISIBLE_DEVICES="$GPU" CAP_PROBE_OTHERS_BYTES=$((256 * 1048576 + CTX)) env $(slice_env share $SHARE "$CTX") \
    "$CUDA/cap_probe" fill malloc 64 >"$WORK/share-fill.txt" 2>&1
  rc=$?
  wait "$hpid"
  hrc=$?
  if [ $rc -eq 0 ] && [ $hrc -eq 0 ]; then pass "two processes share one cap" "$(grep -m1 '^ok' "$WORK/share-fill.txt" | sed 's/^ok //')"
  else fail "two processes share one cap" "$(grep -h -m1 '^FAIL' "$WORK/share-fill.txt" "$WORK/share-hold.txt") (exit $rc/$hrc)"; fi
fi

# A neighbour unharmed: a small slice hits its cap while a neighbour computes; then two slices of
# half the usable memory each fill their caps at the same time (both must be refused by their caps,
# neither by the driver: caps and reserves add up).
if cuda_step "a neighbour is unharmed when a slice fills its cap"; then
  # shellcheck disable=SC2046
  timeout -k 5 60 env CUDA_VISIBLE_DEVICES="$GPU" $(slice_env neighbour $((4 * CAP)) "$CTX") "$CUDA/cap_probe" hold 1024 12 >"$WORK/neighbour.txt" 2>&1 &
  npid=$!
  PIDS="$PIDS $npid"
  i=0
  while [ $i -lt 75 ] && ! grep -q 'ready=1' "$WORK/neighbour.txt" 2>/dev/null; do i=$((i + 1)); sleep 0.2; done
  # shellcheck disable=SC2046
  tmo 60 env CUDA_VISIBLE_DEVICES="$GPU" env $(slice_env hog $CAP "$CTX") "$CUDA/cap_probe" fill malloc 64 >"$WORK/hog.txt" 2>&1
  rc=$?
  wait "$npid"
  nrc=$?
  if [ $rc -eq 0 ] && [ $nrc -eq 0 ]; then
    pass "a neighbour is unharmed when a slice fills its cap" "$(grep -m1 '^ok hold' "$WORK/neighbour.txt" | sed 's/^ok //'); context overhead ${ctx_mib:-?} MiB"
  else
    fail "a neighbour is unharmed when a slice fills its cap" "$(grep -h -m1 '^FAIL' "$WORK/hog.txt" "$WORK/neighbour.txt") (exit $rc/$nrc)"
  fi
fi
if cuda_step "two half-GPU slices fill their caps at once"; then
  if [ -z "$USABLE" ]; then
    skip "two half-GPU slices fill their caps at once" "no usable memory figure from serve on the GPU"
  else
    half=$((USABLE / 2))
    # shellcheck disable=SC2046
    timeout -k 5 120 env CUDA_VISIBLE_DEVICES="$GPU" CAP_PROBE_HOLD_SECONDS=4 $(slice_env half-a $half "$CTX") "$CUDA/cap_probe" fill malloc 1024 \
      >"$WORK/half-a.txt" 2>&1 &
    apid=$!
    PIDS="$PIDS $apid"
    # shellcheck disable=SC2046
    tmo 120 env CUDA_VISIBLE_DEVICES="$GPU" CAP_PROBE_HOLD_SECONDS=4 env $(slice_env half-b $half "$CTX") "$CUDA/cap_probe" fill malloc 1024 \
      >"$WORK/half-b.txt" 2>&1
    brc=$?
    wait "$apid"
    arc=$?
    if [ $arc -eq 0 ] && [ $brc -eq 0 ]; then
      pass "two half-GPU slices fill their caps at once" "caps of $((half / 1048576)) MiB each; both refused by their caps"
    else
      fail "two half-GPU slices fill their caps at once" "$(grep -h -m1 '^FAIL' "$WORK/half-a.txt" "$WORK/half-b.txt") (exit $arc/$brc)"
    fi
  fi
fi

# PyTorch, where it is installed: its view of the slice and its out-of-memory error, with the
# default caching allocator, expandable segments (cuMemCreate/cuMemMap) and the cudaMallocAsync
# backend (which sets its pool's release threshold to keep everything).
if gpu_step "PyTorch under the cap"; then
  if ! tmo 120 python3 -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)' >/dev/null 2>&1; then
    skip "PyTorch under the cap" "PyTorch with CUDA not importable here"
  else
    cat >"$WORK/torch_cap.py" <<'PY'
import os, sys, torch
cap = int(os.environ["GPUSLICE_MEMCAP_BYTES"])
free, total = torch.cuda.mem_get_info()
if total != cap:
    sys.exit(f"FAIL torch: mem_get_info total {total} is not the cap {cap}")
held, n = [], 0
try:
    while n < 2 * cap:
        held.append(torch.ones(64 << 20, dtype=torch.uint8, device="cuda"))
        n += 64 << 20
    sys.exit(f"FAIL torch: {n} bytes allocated, past the cap {cap}")
except torch.cuda.OutOfMemoryError:
    pass
held.clear()
torch.cuda.empty_cache()
x = torch.ones(256 << 20, dtype=torch.uint8, device="cuda")
if not bool((x == 1).all()):  # x.sum() would make an int64 copy, 8x the tensor
    sys.exit("FAIL torch: a tensor written after the out-of-memory error reads back wrong")
# What the process holds beyond its tensors (context, modules, library handles), per NVML: the
# context reserve booked with the slice must cover it, or caps would not add up.
context = int(os.environ["GPUSLICE_MEMCAP_CONTEXT_BYTES"])
overhead = "unknown (no pynvml)"
try:
    import pynvml
    pynvml.nvmlInit()
    h = pynvml.nvmlDeviceGetHandleByIndex(int(os.environ.get("CUDA_VISIBLE_DEVICES", "0")))
    used = [p.usedGpuMemory for p in pynvml.nvmlDeviceGetComputeRunningProcesses(h) if p.pid == os.getpid()]
    if used and used[0]:
        o = used[0] - torch.cuda.memory_reserved()
        overhead = f"{o >> 20} MiB beyond its tensors (context reserve {context >> 20} MiB)"
        if not os.environ.get("PYTORCH_CUDA_ALLOC_CONF") and o > context:
            sys.exit(f"FAIL torch: the process holds {o >> 20} MiB beyond its tensors, more than the {context >> 20} MiB context reserve")
except ImportError:
    pass
print(f"ok torch ({os.environ.get('PYTORCH_CUDA_ALLOC_CONF') or 'default'}): OutOfMemoryError after {n} of {cap} bytes; {overhead}")
PY
    for conf in "" "expandable_segments:True" "backend:cudaMallocAsync"; do
      t="$WORK/torch-$(echo "${conf:-default}" | tr -c 'A-Za-z0-9\n' -).txt"
      # shellcheck disable=SC2046
      if tmo 180 env CUDA_VISIBLE_DEVICES="$GPU" PYTORCH_CUDA_ALLOC_CONF="$conf" $(slice_env "torch$conf" $((2 * CAP)) "$CTX") \
           python3 "$WORK/torch_cap.py" >"$t" 2>&1; then
        pass "PyTorch under the cap (${conf:-default allocator})" "$(grep -m1 '^ok' "$t" | sed 's/^ok //')"
      else
        fail "PyTorch under the cap (${conf:-default allocator})" "$(grep -m1 'FAIL\|Error' "$t" || tail -1 "$t")"
      fi
    done
  fi
fi

# Busy versus idle, and the agent's attribution of a process's memory and utilisation.
if cuda_step "busy versus idle processes"; then
  timeout -k 5 40 env CUDA_VISIBLE_DEVICES="$GPU" "$CUDA/busy" --seconds 14 --mem-mib 512 >"$WORK/two-busy.txt" 2>&1 &
  bpid=$!
  timeout -k 5 40 env CUDA_VISIBLE_DEVICES="$GPU" "$CUDA/busy" --seconds 14 --mem-mib 256 --duty 0 >"$WORK/two-idle.txt" 2>&1 &
  ipid=$!
  sleep 0.5 &
  decoy=$!
  PIDS="$PIDS $bpid $ipid"
  i=0
  while [ $i -lt 100 ] && ! { grep -q '^ready=1' "$WORK/two-busy.txt" 2>/dev/null && grep -q '^ready=1' "$WORK/two-idle.txt" 2>/dev/null; }; do
    i=$((i + 1))
    sleep 0.2
  done
  tmo 30 "$AGENT" two-slices --busy-pid "$bpid" --idle-pid "$ipid" --seconds 5 --device "$GPU" >"$WORK/two-slices.txt" 2>&1
  rc=$?
  if [ $rc -eq 0 ]; then pass "busy versus idle processes" "$(grep -m1 '^ok' "$WORK/two-slices.txt")"
  else fail "busy versus idle processes" "$(grep -m1 'FAIL' "$WORK/two-slices.txt" || echo "exit $rc")"; fi
  tmo 30 "$AGENT" attribute --pid "$bpid" --decoy-pid "$decoy" --expect-mib 512 --seconds 4 --device "$GPU" \
    >"$WORK/attribute.txt" 2>&1
  rc=$?
  if [ $rc -eq 0 ]; then pass "NVML device and per-process sampling, attributed to the slice" "$(grep -m1 '^ok' "$WORK/attribute.txt")"
  else fail "NVML device and per-process sampling, attributed to the slice" "$(grep -m1 'FAIL' "$WORK/attribute.txt" || echo "exit $rc")"; fi
  wait "$bpid" "$ipid" 2>/dev/null
fi

# Two users' MPS jobs through the daemon: the second waits with its reason, never hangs as running.
if cuda_step "MPS: one user per GPU through gpuslice"; then
  if [ -z "$GPU_SOCK" ]; then
    skip "MPS: one user per GPU through gpuslice" "serve on the GPU did not start"
  elif ! command -v nvidia-cuda-mps-control >/dev/null 2>&1; then
    skip "MPS: one user per GPU through gpuslice" "nvidia-cuda-mps-control not on PATH"
  elif ! can_be_nobody; then
    skip "MPS: one user per GPU through gpuslice" "needs root (to submit as a second user)"
  else
    SOCK=$GPU_SOCK
    cp "$CUDA/busy" "$WORK/busy" && chmod 755 "$WORK/busy"
    [ -x "$WORK/gpuslice" ] || { cp "$HERE/bin/gpuslice" "$WORK/gpuslice"; mkdir -p "$WORK/deps"; cp "$DEPS"/* "$WORK/deps/" 2>/dev/null; chmod -R a+rX "$WORK/gpuslice" "$WORK/deps"; }
    a=$(submit --queue interactive --kind mps --fraction 500m --mem 2GiB -- "$WORK/busy" --seconds 10 --mem-mib 256)
    wait_state "${a:-0}" running 20
    b=$(as_nobody env LD_LIBRARY_PATH="$WORK/deps" timeout -k 5 20 "$WORK/gpuslice" submit --socket "$SOCK" --queue interactive \
          --kind mps --fraction 250m --mem 1GiB -- "$WORK/busy" --seconds 2 --mem-mib 128 2>&1 |
        sed -n 's/^job \([0-9][0-9]*\) submitted.*/\1/p')
    sleep 1
    state_b=$(job_state "${b:-0}")
    why=$(tmo 10 "$GS" show --socket "$SOCK" "${b:-0}" 2>/dev/null | sed -n 's/^waiting: *//p')
    tmo 10 "$GS" show --socket "$SOCK" "${a:-0}" >"$WORK/mps-a-show.txt" 2>&1
    if wait_state "${a:-0}" "succeeded|failed" 40 && wait_state "${b:-0}" "succeeded|failed" 40 &&
       [ "$state_b" = pending ] && echo "$why" | grep -q "MPS server of user" &&
       [ "$(job_state "$a")" = succeeded ] && [ "$(job_state "$b")" = succeeded ]; then
      pass "MPS: one user per GPU through gpuslice" "the second user's job waited ('$why') and ran after the first's"
    else
      fail "MPS: one user per GPU through gpuslice" "jobs $a/$b: second was '$state_b' ('$why'), then $(job_state "${a:-0}")/$(job_state "${b:-0}"); logs: $(tmo 10 "$GS" logs --socket "$SOCK" "${b:-0}" 2>&1 | tail -2 | tr '\n' ' ')"
    fi
    sleep 1
    left=0
    for pipe in "$WORK"/gpu/mps/*/pipe; do
      [ -d "$pipe" ] || continue
      if echo get_server_list | tmo 10 env CUDA_MPS_PIPE_DIRECTORY="$pipe" nvidia-cuda-mps-control >/dev/null 2>&1; then left=1; fi
    done
    if [ $left = 0 ]; then pass "MPS: the server stops after its user's last job"
    else fail "MPS: the server stops after its user's last job" "a control daemon still answers in $WORK/gpu/mps"; fi
  fi
fi

# serve end to end on the GPU: a job per queue that the device allows, its environment, its
# utilisation as the daemon reports it.
if cuda_step "serve: an interactive job's environment and utilisation"; then
  if [ -z "$GPU_SOCK" ]; then
    skip "serve: an interactive job's environment and utilisation" "serve on the GPU did not start"
  else
    SOCK=$GPU_SOCK
    cp "$CUDA/busy" "$WORK/busy" 2>/dev/null && chmod 755 "$WORK/busy"
    id=$(submit --queue interactive --fraction 500m --mem 4GiB -- sh -c "env; exec '$WORK/busy' --seconds 8 --mem-mib 512")
    util=""
    if wait_state "${id:-0}" running 20; then
      sleep 4
      tmo 10 "$GS" show --socket "$SOCK" "$id" >"$WORK/e2e-show.txt" 2>&1
      util=$(sed -n 's/^activity: *//p' "$WORK/e2e-show.txt")
    fi
    wait_state "${id:-0}" "succeeded|failed" 30
    tmo 10 "$GS" logs --socket "$SOCK" "${id:-0}" >"$WORK/e2e-log.txt" 2>&1
    if [ "$(job_state "${id:-0}")" = succeeded ] && grep -q '^CUDA_VISIBLE_DEVICES=GPU-' "$WORK/e2e-log.txt" &&
       grep -q '^GPUSLICE_MEMCAP_BYTES=' "$WORK/e2e-log.txt" && grep -q '^done=1' "$WORK/e2e-log.txt" &&
       echo "$util" | grep -q '^active'; then
      pass "serve: an interactive job's environment and utilisation" "activity: $util"
    else
      fail "serve: an interactive job's environment and utilisation" "state $(job_state "${id:-0}"), activity '$util'; $(grep -E '^(CUDA_VISIBLE|GPUSLICE_MEMCAP_BYTES|error|gpuslice:)' "$WORK/e2e-log.txt" | tr '\n' ' ')"
    fi
    id=$(submit --queue training --gpus 1 -- sh -c "env; exec '$WORK/busy' --seconds 3 --mem-mib 256")
    wait_state "${id:-0}" "succeeded|failed" 40
    tmo 10 "$GS" logs --socket "$SOCK" "${id:-0}" >"$WORK/e2e-training.txt" 2>&1
    if [ "$(job_state "${id:-0}")" = succeeded ] && grep -q '^CUDA_VISIBLE_DEVICES=GPU-' "$WORK/e2e-training.txt" &&
       ! grep -q '^LD_PRELOAD=' "$WORK/e2e-training.txt"; then
      pass "serve: a training job gets the whole GPU, uncapped"
    else
      fail "serve: a training job gets the whole GPU, uncapped" "state $(job_state "${id:-0}")"
    fi
  fi
fi

# MIG through gpuslice: only where the check may change the GPU's MIG mode.
if cuda_step "MIG: a small and a medium instance through gpuslice"; then
  if [ "${GPUSLICE_CHECK_MIG:-0}" != 1 ]; then
    skip "MIG: a small and a medium instance through gpuslice" "changes the GPU's MIG mode: set GPUSLICE_CHECK_MIG=1 on a machine you own (lent machines forbid it)"
  elif [ "$(id -u)" != 0 ]; then
    skip "MIG: a small and a medium instance through gpuslice" "needs root"
  elif [ -n "$(tmo 20 nvidia-smi -i "$GPU" --query-compute-apps=pid --format=csv,noheader 2>/dev/null)" ]; then
    skip "MIG: a small and a medium instance through gpuslice" "other processes use the GPU"
  elif [ "$(tmo 20 nvidia-smi -i "$GPU" --query-gpu=mig.mode.current --format=csv,noheader 2>/dev/null | tr -d ' ')" != Disabled ]; then
    skip "MIG: a small and a medium instance through gpuslice" "the GPU is not out of MIG mode (its instances may be someone's)"
  else
    MIG_RESTORE=$(tmo 20 nvidia-smi -i "$GPU" --query-gpu=mig.mode.current --format=csv,noheader 2>/dev/null | tr -d ' ')
    [ -n "$GPU_SOCK" ] && stop_serve
    if start_serve mig; then
      s=$(submit --queue inference --kind mig --mem 10GiB -- sh -c "env; exec '$WORK/busy' --seconds 3 --mem-mib 256")
      m=$(submit --queue inference --kind mig --mem 30GiB -- sh -c "env; exec '$WORK/busy' --seconds 3 --mem-mib 256")
      wait_state "${s:-0}" "succeeded|failed" 120
      wait_state "${m:-0}" "succeeded|failed" 120
      if [ "$(job_state "${s:-0}")" = succeeded ] && [ "$(job_state "${m:-0}")" = succeeded ]; then
        pass "MIG: a small and a medium instance through gpuslice" "$(tmo 10 "$GS" devices --socket "$SOCK" 2>/dev/null | grep -m1 mig)"
      else
        fail "MIG: a small and a medium instance through gpuslice" "jobs $(job_state "${s:-0}")/$(job_state "${m:-0}"); $(tail -3 "$WORK/mig/serve.log" | tr '\n' ' ')"
      fi
      stop_serve
    else
      fail "MIG: a small and a medium instance through gpuslice" "serve did not start"
    fi
  fi
fi

# ---- summary -------------------------------------------------------------------------------
echo
echo "$PASSED passed, $FAILED failed, $SKIPPED skipped ($(($(date +%s) - START)) s; logs in $WORK)"
if [ "$FAILED" -gt 0 ]; then exit 1; fi
if [ "$HAVE_GPU" = 0 ]; then exit 3; fi
exit 0
