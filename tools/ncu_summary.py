#!/usr/bin/env python3
"""tools/ncu_summary.py: where a step's GPU time goes, from an ncu CSV.

Reads `ncu --csv --print-units base --metrics gpu__time_duration.sum ...` output (one row per
kernel launch) and prints the kernels grouped by name, by total time, with counts and shares, so
that ours reads like torch.profiler's table printed by bench/train_step.py --profile on.

usage: python3 tools/ncu_summary.py FILE.csv [--top 45]
"""
import argparse
import csv
import re
import sys

SCALE = {"nsecond": 1e-6, "ns": 1e-6, "usecond": 1e-3, "us": 1e-3, "msecond": 1.0, "ms": 1.0, "second": 1e3, "s": 1e3}


def short(name):
    # template arguments and parameter lists make one kernel look like many
    n = re.sub(r"\(.*\)$", "", name)
    return n[:150]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("csv")
    ap.add_argument("--top", type=int, default=45)
    a = ap.parse_args()
    rows = {}
    with open(a.csv, newline="", errors="replace") as f:
        lines = [l for l in f if l.startswith('"')]
    rd = csv.DictReader(lines)
    n = 0
    for r in rd:
        if r.get("Metric Name") != "gpu__time_duration.sum":
            continue
        try:
            v = float(r["Metric Value"].replace(",", ""))
        except (KeyError, ValueError):
            continue
        ms = v * SCALE.get(r.get("Metric Unit", "nsecond"), 1e-6)
        k = short(r.get("Kernel Name", "?"))
        e = rows.setdefault(k, [0.0, 0])
        e[0] += ms
        e[1] += 1
        n += 1
    if not n:
        print("# PROFILE ours: no kernel rows in " + a.csv)
        return 1
    total = sum(e[0] for e in rows.values())
    print("# PROFILE ours one step: %.2f ms of kernel time, %d kernels" % (total, n))
    for k, (t, c) in sorted(rows.items(), key=lambda kv: -kv[1][0])[: a.top]:
        print("# PROFILE %8.3f ms %5.1f%% %5d  %s" % (t, 100 * t / total, c, k))
    return 0


if __name__ == "__main__":
    sys.exit(main())
