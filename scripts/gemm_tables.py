#!/usr/bin/env python3
"""Prints a hardware profile's `compute.gemm.<precision>` grid from a measured GEMM table in bench/data.

    python3 scripts/gemm_tables.py bench/data/gemm_xla_sm90.csv bf16_tflops [--times R] [--indent N]

The CSV has m, n, k and one TFLOP/s column per precision (bench/data/gemm_xla_*.csv, OpenXLA's
measurements). --times multiplies every figure by R: how scenarios/hardware/h100-nvlink-ib.yaml
derives its fp8 grid from the bf16 one (the profile says why). Rows may come in any order; every
(m, n, k) of the three axes must be there once.
"""
import argparse
import csv
import sys


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("table")
    ap.add_argument("column")
    ap.add_argument("--times", type=float, default=1.0)
    ap.add_argument("--indent", type=int, default=6)
    a = ap.parse_args()
    rows = list(csv.DictReader(line for line in open(a.table) if not line.startswith("#")))
    if not rows or a.column not in rows[0]:
        sys.exit(f"gemm_tables.py: {a.table} has no column {a.column!r}")
    grid = {(int(r["m"]), int(r["n"]), int(r["k"])): float(r[a.column]) * a.times for r in rows}
    ms, ns, ks = (sorted({key[i] for key in grid}) for i in range(3))
    missing = [(m, n, k) for m in ms for n in ns for k in ks if (m, n, k) not in grid]
    if missing:
        sys.exit(f"gemm_tables.py: {a.table} is not a full grid: no row for (m, n, k) = {missing[0]}")
    pad = " " * a.indent
    print(f"{pad}m: {ms}")
    print(f"{pad}n: {ns}")
    print(f"{pad}k: {ks}")
    print(f"{pad}tflops:   # one line per (m, n), k across")
    for m in ms:
        for n in ns:
            figures = ", ".join(f"{grid[(m, n, k)]:.1f}" for k in ks)
            print(f"{pad}  - [{figures}]   # m {m}, n {n}")


if __name__ == "__main__":
    try:
        main()
    except BrokenPipeError:
        pass
