#!/usr/bin/env python3
"""The cell-by-cell median of several `parallax calibrate --tables` profiles of one GPU, as the
`compute:` keys a shipped profile carries, and each figure's spread over the runs.

    python3 bench/tables_median.py TABLES.yaml TABLES.yaml TABLES.yaml [--memory-from TABLES.yaml]... [--spread-only]

Prints the `compute:` block (two-space indent, as under `device:`) with the medians: every GEMM grid
cell, memory_efficiency, the flash figures and their by-sequence fractions; then, as comments, the
spread of each kind of figure over the runs ((largest - smallest) / median: mean and worst). The
profiles' sustained_tflops (the base's, not measured) and notes are left out: the caller writes
those. --memory-from (repeatable) takes memory_efficiency from those files alone (runs whose
memory figure was measured another way are left out of it). Needs PyYAML (Debian's python3-yaml).
"""
import statistics
import sys

import yaml


def median_of(values):
    return statistics.median(values)


def spread(values):
    m = median_of(values)
    return (max(values) - min(values)) / m if m else 0.0


def main():
    args, memory_from, rest = [], [], sys.argv[1:]
    while rest:
        a = rest.pop(0)
        if a == "--memory-from":
            memory_from.append(rest.pop(0))
        elif not a.startswith("--"):
            args.append(a)
    if len(args) < 2:
        sys.exit("usage: tables_median.py TABLES.yaml TABLES.yaml [...] [--memory-from TABLES.yaml]...")
    computes = [yaml.safe_load(open(p))["device"]["compute"] for p in args]
    memory = [yaml.safe_load(open(p))["device"]["compute"] for p in memory_from] or computes
    first = computes[0]
    spreads = {}
    out = ["  compute:", "    precisions: [%s]" % ", ".join(first["precisions"]), "    gemm:"]
    for p, grid in first["gemm"].items():
        cells = [[v for row in c["gemm"][p]["tflops"] for v in row] for c in computes]
        med = [median_of(vs) for vs in zip(*cells)]
        spreads["gemm " + p] = [spread(vs) for vs in zip(*cells)]
        out += ["      %s:" % p] + ["        %s: [%s]" % (a, ", ".join(str(x) for x in grid[a])) for a in ("m", "n", "k")]
        out.append("        tflops:   # one line per (m, n), k across")
        k = len(grid["k"])
        for i, m in enumerate(grid["m"]):
            for j, n in enumerate(grid["n"]):
                at = (i * len(grid["n"]) + j) * k
                out.append("          - [%s]   # m %d, n %d" % (", ".join("%.1f" % v for v in med[at:at + k]), m, n))
    for key in ("memory_efficiency", "flash_forward_efficiency", "flash_backward_efficiency",
                "flash2_forward_efficiency", "flash2_backward_efficiency"):
        if key in first:
            values = [c[key] for c in (memory if key == "memory_efficiency" else computes)]
            spreads[key] = [spread(values)]
            out.append("    %s: %.3g" % (key, median_of(values)))
    for key in ("flash_by_sequence", "flash2_by_sequence"):
        if key not in first:
            continue
        out.append("    %s:" % key)
        for mask in ("full", "causal"):
            points = [c[key][mask] for c in computes]
            fractions = [median_of([pts[i][1] for pts in points]) for i in range(len(points[0]))]
            spreads[key + "." + mask] = [spread([pts[i][1] for pts in points]) for i in range(len(points[0]))]
            out.append("      %s: [%s]" % (mask, ", ".join("[%d, %.3g]" % (pt[0], f) for pt, f in zip(points[0], fractions))))
    if "--spread-only" not in sys.argv:
        print("\n".join(out))
    print("    # spread over %d runs (memory_efficiency: %d) ((largest - smallest) / median), mean and worst of each kind:"
          % (len(computes), len(memory)))
    for key, s in spreads.items():
        print("    #   %s: %.1f%%, %.1f%%" % (key, 100 * sum(s) / len(s), 100 * max(s)))


if __name__ == "__main__":
    main()
