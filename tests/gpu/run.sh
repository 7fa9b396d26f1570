#!/bin/sh
# tests/gpu/run.sh [DIR] — stage and run the GPU check on this machine in one go (a GPU machine
# that can also build): tests/gpu/stage.sh DIR (default <repo>/build-gpu-stage), then DIR/check.sh.
# On a GPU machine without build tools, stage elsewhere and carry the folder (docs/gpu-check.md).
set -eu
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
DIR=${1:-$ROOT/build-gpu-stage}
sh "$ROOT/tests/gpu/stage.sh" "$DIR"
exec "$DIR/check.sh"
