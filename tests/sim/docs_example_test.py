"""The `sim replay` example of docs/sim.md on the bundled openb trace gives meaningful results:
jobs queue under at least one policy (a delay or mean wait above 0) and every policy starts
every job. Run: docs_example_test.py GPUSLICE_BINARY SOURCE_DIR"""

import re
import shlex
import subprocess
import sys


def main():
    binary, src = sys.argv[1], sys.argv[2]
    doc = open(f"{src}/docs/sim.md").read()
    m = re.search(r"^(gpuslice sim replay --trace data/alibaba-gpu-v2023/openb_pod_list_default\.csv \\\n"
                  r"\s+--cluster \S+ --policy \S+)$", doc, re.M)
    if not m:
        print("FAIL: docs/sim.md has no openb `sim replay --cluster` example")
        return 1
    args = shlex.split(m.group(1).replace("\\\n", " "))[1:]
    r = subprocess.run([binary] + args, cwd=src, capture_output=True, text=True, timeout=300)
    print(r.stdout)
    if r.returncode != 0:
        print(f"FAIL: exit {r.returncode}: {r.stderr[-500:]}")
        return 1
    rows = [line.split() for line in r.stdout.splitlines() if re.match(r"^[a-z-]+\s+\d+\s+\d+", line)]
    if not rows:
        print("FAIL: no result rows")
        return 1
    waited = False
    for row in rows:
        name, started, rejected, waiting = row[0], int(row[1]), int(row[2]), int(row[3])
        if started == 0 or rejected or waiting:
            print(f"FAIL: {name}: started {started}, rejected {rejected}, still waiting {waiting}")
            return 1
        delays = [int(x.rstrip("s")) for x in row[6:10]]
        waited = waited or any(d > 0 for d in delays)
    if not waited:
        print("FAIL: nobody waited: the example says nothing about queueing")
        return 1
    # The table in the doc is the output of this run.
    for row in rows:
        if " ".join(row[:10]) not in " ".join(doc.split()):
            print(f"FAIL: docs/sim.md's table differs from this run for {row[0]}: {' '.join(row[:10])}")
            return 1
    print("ok: the example shows waits, and the doc's table is this run's")
    return 0


if __name__ == "__main__":
    sys.exit(main())
