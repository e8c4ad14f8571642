#!/usr/bin/env python3
"""tests/ncu_step.py CSV [--bandwidth GB/s] — where one decode step's time goes.

CSV: Nsight Compute's output (`ncu --csv --metrics
gpu__time_duration.sum,dram__bytes_read.sum,launch__grid_size`, as
tests/gpu_kit.sh profile runs it) over a generation of a few tokens. The
last step is the kernels after the next-to-last sampling launch (k_sample_top
or k_sample); its kernels are grouped by name and grid and printed with their
time (each kernel alone: ncu serializes them), the bytes they read from
device memory and the rate, slowest first, then the step's totals against
the bandwidth given (the time its bytes would take at that rate)."""
import argparse
import collections
import csv
import sys

SCALE = {"ns": 1e-3, "nsecond": 1e-3, "us": 1.0, "usecond": 1.0, "ms": 1e3, "msecond": 1e3,
         "byte": 1, "Kbyte": 1e3, "KB": 1e3, "Mbyte": 1e6, "MB": 1e6, "Gbyte": 1e9, "GB": 1e9}


def kernels(path):
    with open(path, newline="") as f:
        rows = csv.DictReader(line for line in f if line.startswith('"'))
        out = collections.OrderedDict()
        for r in rows:
            k = out.setdefault(r["ID"], {"name": r["Kernel Name"], "grid": r.get("Grid Size", ""), "us": 0.0,
                                         "bytes": 0.0})
            v = float(r["Metric Value"].replace(",", "") or 0) * SCALE.get(r["Metric Unit"], 1)
            if r["Metric Name"] == "gpu__time_duration.sum":
                k["us"] = v
            elif r["Metric Name"] == "dram__bytes_read.sum":
                k["bytes"] = v
    return list(out.values())


def short(name):
    name = name.split("(")[0].strip()
    if name.startswith("void "):
        name = name[5:]
    return name


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("csv")
    ap.add_argument("--bandwidth", type=float, default=0, help="GB/s to compare the step with")
    a = ap.parse_args(argv)
    ks = kernels(a.csv)
    ends = [i for i, k in enumerate(ks) if short(k["name"]) in ("k_sample_top", "k_sample")]
    if len(ends) < 2:
        print(f"ncu_step: {a.csv}: fewer than two sampling launches, no whole step to show", file=sys.stderr)
        return 1
    step = ks[ends[-2] + 1:ends[-1] + 1]
    groups = collections.OrderedDict()
    for k in step:
        g = groups.setdefault((short(k["name"]), k["grid"]), [0, 0.0, 0.0])
        g[0] += 1
        g[1] += k["us"]
        g[2] += k["bytes"]
    print(f"{'kernel':<24} {'grid':>16} {'count':>5} {'us':>9} {'us each':>8} {'MB':>8} {'GB/s':>6}")
    for (name, grid), (n, us, by) in sorted(groups.items(), key=lambda kv: -kv[1][1]):
        print(f"{name[:24]:<24} {grid:>16} {n:>5} {us:>9.1f} {us / n:>8.2f} {by / 1e6:>8.1f} "
              f"{by / us / 1e3 if us else 0:>6.0f}")
    us = sum(k["us"] for k in step)
    by = sum(k["bytes"] for k in step)
    line = f"step: {len(step)} kernels, {us:.1f} us one after another, {by / 1e6:.1f} MB read, {by / us / 1e3:.0f} GB/s"
    if a.bandwidth > 0:
        line += f"; those bytes at {a.bandwidth:.0f} GB/s: {by / a.bandwidth / 1e3:.1f} us ({by / a.bandwidth / 1e3 / us:.0%})"
    print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
