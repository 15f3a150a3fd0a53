#!/usr/bin/env python3
"""How much of the run-to-run spread of bench/accuracy.sh the host probe explains.

    python3 bench/accuracy_noise.py OUT

OUT is the folder bench/accuracy.sh wrote (traces/SCENARIO.roundR/N.runR.json, and
SCENARIO.roundR.json naming configuration N). For each
configuration, over its runs (one a round): each run's undisturbed step (the 20th percentile of
the steps after the first, from rank 0's step marks) and its host probe's 20th percentile (the
reference workload each rank times at a step's start, the lower of the two ranks'). Prints per
configuration the spread over runs, (max - min) / median, of:
  raw      the undisturbed step, as bench/accuracy.sh's table has it;
  /probe   the undisturbed step divided by the run's probe: the run's host speed taken out;
  perstep  the 20th percentile of each step divided by the probe taken before it;
then the median spread of each and how many configurations are within 5%; and last, the clock
alignment of the ranks other than 0 over every run (docs/profiling.md, Clocks): on one host each
offset should come out within its error bound of zero.
"""
import collections
import glob
import json
import os
import sys

import stats


def p20(values):
    """bench/stats.py's p20; NaN for a run with no probe, which then shows as a NaN spread."""
    values = list(values)
    return stats.p20(values) if values else float("nan")


def spread(values):
    return (max(values) - min(values)) / stats.median(values)


def read_run(path):
    """(step times after the first, the probe before each; in us) and the clock alignment of the
    ranks other than 0 of one measured trace."""
    trace = json.load(open(path))
    events = trace["traceEvents"]
    clocks = [c for c in trace.get("parallax", {}).get("clock_alignment", []) if c["rank"] != 0]
    marks = sorted(e["ts"] for e in events if e.get("name") == "step" and e["pid"] == 0)
    probes = collections.defaultdict(dict)
    for e in events:
        if e.get("ph") == "C" and e["name"].startswith("host probe"):
            probes[e["name"]][e["ts"]] = e["args"]["value"]
    steps = [b - a for a, b in zip(marks, marks[1:])][1:]
    before = []
    for ts in marks[1:-1]:
        seen = [p[ts] for p in probes.values() if ts in p]
        before.append(min(seen) if seen else None)
    return steps, before, clocks


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    out = sys.argv[1]
    runs = collections.defaultdict(list)
    for path in sorted(glob.glob(os.path.join(out, "traces", "*", "*.json"))):
        folder = os.path.basename(os.path.dirname(path))  # SCENARIO.roundR
        scenario = folder.split(".round")[0]
        index = int(os.path.basename(path).split(".run")[0])  # the configuration's, in validate's order
        # Named by its overrides, from that round's validate JSON.
        validate = json.load(open(os.path.join(out, folder + ".json")))
        config = " ".join(validate["configurations"][index]["overrides"]) or "as given"
        runs[(scenario, config)].append(read_run(path))
    if not runs:
        sys.exit("no traces under %s/traces (give the folder bench/accuracy.sh wrote)" % out)
    columns = {"raw": [], "/probe": [], "perstep": []}
    print("| scenario | configuration | raw | /probe | perstep | runs' undisturbed step (ms) | runs' probe (us) |")
    print("|---|---|---:|---:|---:|---|---|")
    for (scenario, config), rr in sorted(runs.items()):
        raw = [p20(steps) for steps, _, _ in rr]
        probe = [p20([p for p in before if p]) for _, before, _ in rr]
        per_step = [p20([s / p for s, p in zip(steps, before) if p]) for steps, before, _ in rr]
        row = {"raw": spread(raw), "/probe": spread([s / p for s, p in zip(raw, probe)]), "perstep": spread(per_step)}
        for k, v in row.items():
            columns[k].append(v)
        print("| %s | %s | %.1f%% | %.1f%% | %.1f%% | %s | %s |" % (
            scenario, config, 100 * row["raw"], 100 * row["/probe"], 100 * row["perstep"],
            " ".join("%.2f" % (x / 1000) for x in raw), " ".join("%.1f" % x for x in probe)))
    for k, v in columns.items():
        print("%-8s median spread %.1f%%, <= 5%% on %d of %d" % (k, 100 * stats.median(v), sum(x <= 0.05 for x in v), len(v)))
    clocks = [c for rr in runs.values() for _, _, cc in rr for c in cc]
    if clocks:
        offsets = [c["offset_ns"] / 1000 for c in clocks]
        bounds = [c["error_bound_ns"] / 1000 for c in clocks]
        print("clock alignment of ranks 1.. in %d runs: offset %+.1f .. %+.1f us (median |offset| %.1f), error bound "
              "%.1f .. %.1f us (median %.1f); offset beyond its bound in %d" % (
                  len(clocks), min(offsets), max(offsets), stats.median([abs(o) for o in offsets]), min(bounds),
                  max(bounds), stats.median(bounds), sum(abs(c["offset_ns"]) > c["error_bound_ns"] for c in clocks)))


if __name__ == "__main__":
    main()
