#!/bin/sh
# The GPU check staged and run on a machine without a GPU (CTest gpu_check_staged): stage.sh must
# stage everything into a temporary folder (CUDA programs only where nvcc is present) and check.sh
# must run every step that needs no GPU, fail none, and exit 3 (no GPU). Prints the staged size and
# how long the check took. A GPU machine running it exits 0 instead, also accepted.
set -u
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
DIR=$(mktemp -d /tmp/gpuslice-stage.XXXXXX) || exit 1
trap 'rm -rf "$DIR"' EXIT
GPUSLICE_STAGE_NO_BUILD=1 sh "$ROOT/tests/gpu/stage.sh" "$DIR/stage" || { echo "FAIL: stage.sh"; exit 1; }
echo "staged: $(du -sh "$DIR/stage" | cut -f1) ($(du -sk "$DIR/stage" | cut -f1) KiB); manifest:"
sed 's/^/  /' "$DIR/stage/manifest"
start=$(date +%s)
timeout -k 5 300 "$DIR/stage/check.sh" >"$DIR/check.out" 2>&1
rc=$?
cat "$DIR/check.out"
echo "check.sh: exit $rc in $(($(date +%s) - start)) s"
if grep -q '^FAIL' "$DIR/check.out"; then echo "FAIL: a step failed"; exit 1; fi
if [ $rc -ne 3 ] && [ $rc -ne 0 ]; then echo "FAIL: check.sh exited $rc (want 3 without a GPU)"; exit 1; fi
grep -q '^[0-9]* passed, 0 failed, [0-9]* skipped' "$DIR/check.out" || { echo "FAIL: no summary line"; exit 1; }
grep -q '^PASS staged binaries run here' "$DIR/check.out" || { echo "FAIL: the staged binaries did not run"; exit 1; }
exit 0
