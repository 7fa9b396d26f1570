#!/bin/bash
# End-to-end test of JupyterHub on gpuslice (docs/notebooks.md): a real JupyterHub 3.0 with
# configurable-http-proxy and Debian's classic notebook, `gpuslice serve --simulate`, two
# throwaway Unix users (created here, removed by the trap), and headless Chromium for the
# warning banner. Usage: run.sh GPUSLICE_BINARY ARTIFACT_DIR [INSTALLED_PREFIX]
# Exit 77 (ctest: skipped) when not root or when the hub / chromium are missing.
set -euo pipefail
SRC=$(cd "$(dirname "$0")/../.." && pwd)
BIN=$(readlink -f "$1")
PY=$SRC/python
mkdir -p "$2"
ART=$(readlink -f "$2")
if [ "$(id -u)" != 0 ]; then echo "SKIP: needs root (useradd, users' servers)"; exit 77; fi
# The users run gpuslice and import its Python packages: from the copy installed for tests
# (tests/install/) when this clone is out of their reach (e.g. under /root).
if [ -n "${3:-}" ] && ! runuser -u nobody -- test -x "$BIN" -a -r "$PY/gpuslice_steps.py"; then
  BIN=$3/bin/gpuslice
  PY=$3/lib/python3/dist-packages
fi
for x in jupyterhub jupyterhub-singleuser configurable-http-proxy useradd; do
  command -v "$x" >/dev/null || { echo "SKIP: $x not installed (scripts/install-deps)"; exit 77; }
done
D=$(mktemp -d /tmp/gs-hubtest.XXXXXX)
chmod 755 "$D"   # the users reach their homes and the daemon's socket under it
mkdir -p "$D/home"
U1=gsnb$$a
U2=gsnb$$b
cleanup() {
  set +e
  # The test's own processes (hub, proxy, daemon) by the pids it recorded.
  if [ -f "$D/pids" ]; then
    while read -r p; do kill -TERM "$p" 2>/dev/null; done < "$D/pids"
    sleep 1
    while read -r p; do kill -KILL "$p" 2>/dev/null; done < "$D/pids"
  fi
  [ -f "$D/chp.pid" ] && kill -TERM "$(cat "$D/chp.pid")" 2>/dev/null
  for u in "$U1" "$U2"; do
    if id -u "$u" >/dev/null 2>&1; then
      pkill -KILL -U "$(id -u "$u")" 2>/dev/null   # only the throwaway users made above
      userdel "$u" 2>/dev/null
    fi
  done
  # gpuslice-exec stubs of jobs still running stay as root children of nothing we own: they
  # end with their job (killed above).
  rm -rf "$D"
}
trap cleanup EXIT INT TERM
for u in "$U1" "$U2"; do
  useradd -M -d "$D/home/$u" -s /bin/sh "$u"
  mkdir -p "$D/home/$u"
  chown "$u:" "$D/home/$u"
  chmod 700 "$D/home/$u"
done
export GS_TEST_DIR=$D GS_BIN=$BIN GS_SRC=$SRC GS_PY=$PY GS_ART=$ART GS_USERS="$U1 $U2"
/usr/bin/python3 "$SRC/tests/jupyterhub/hub_test.py" 2>&1 | tee "$ART/hub_test.log"
