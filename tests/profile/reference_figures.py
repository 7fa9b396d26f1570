#!/usr/bin/env python3
"""Independent reference figures for tests/profile/trace_test.cc.

Computed with the Python standard library only, straight from the raw Chrome-trace events,
without any of gpuslice's code. Definitions (same as /work/shared/traces/pytorch-profiler/SOURCE.md):
- steps: CPU-side `ProfilerStep#N` complete events (not `gpu_user_annotation`).
- GPU busy %: union of kernel/memcpy/memset intervals clipped to the step, / step duration.
- DL %: summed `enumerate(DataLoader)*` durations starting inside the step, / step duration.
- nccl %: union of kernel intervals whose name contains "nccl", clipped to the step.
Medians over steps. Run: python3 tests/profile/reference_figures.py data/pytorch-profiler/*.gz
"""
import gzip, json, statistics, sys

GPU_CATS = {"kernel", "Kernel", "gpu_memcpy", "Memcpy", "gpu_memset", "Memset"}


def union_len(ivs, lo, hi):
    ivs = sorted((max(a, lo), min(b, hi)) for a, b in ivs if b > lo and a < hi)
    total, cur_a, cur_b = 0.0, None, None
    for a, b in ivs:
        if cur_b is None or a > cur_b:
            if cur_b is not None:
                total += cur_b - cur_a
            cur_a, cur_b = a, b
        else:
            cur_b = max(cur_b, b)
    if cur_b is not None:
        total += cur_b - cur_a
    return total


def main(paths):
    for p in paths:
        d = json.load(gzip.open(p) if p.endswith(".gz") else open(p))
        ev = [e for e in d["traceEvents"] if e.get("ph") == "X"]
        steps = sorted((e["ts"], e["ts"] + e["dur"]) for e in ev
                       if e["name"].startswith("ProfilerStep#") and e.get("cat") != "gpu_user_annotation")
        gpu = [(e["ts"], e["ts"] + e["dur"]) for e in ev if e.get("cat") in GPU_CATS]
        nccl = [(e["ts"], e["ts"] + e["dur"]) for e in ev
                if e.get("cat") in ("kernel", "Kernel") and "nccl" in e["name"].lower()]
        dl = [(e["ts"], e["dur"]) for e in ev if e["name"].startswith("enumerate(DataLoader)")]
        busy, dlp, ncp, durs = [], [], [], []
        for a, b in steps:
            durs.append((b - a) / 1000)
            busy.append(100 * union_len(gpu, a, b) / (b - a))
            ncp.append(100 * union_len(nccl, a, b) / (b - a))
            dlp.append(100 * sum(du for t, du in dl if a <= t < b) / (b - a))
        tot = sum(b - a for a, b in steps)
        print(f"{p}: steps={len(steps)} step_ms_median={statistics.median(durs):.3f} "
              f"busy_median={statistics.median(busy):.2f}% dl_median={statistics.median(dlp):.2f}% "
              f"nccl_median={statistics.median(ncp):.2f}% total_step_ms={tot/1000:.3f} "
              f"busy_total={100*sum(union_len(gpu,a,b) for a,b in steps)/tot:.2f}%")


if __name__ == "__main__":
    main(sys.argv[1:])
