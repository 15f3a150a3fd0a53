#!/usr/bin/env python3
"""Action by action: what bench/accuracy.sh measured against what the calibrated profile predicts.

    python3 bench/accuracy_actions.py OUT [--parallax build/parallax] [--rows] [--scenarios DIR]

OUT is the folder bench/accuracy.sh wrote (its here.yaml, SCENARIO.roundR.json and traces/). For
each configuration of each sweep, each rank's F, B and OPTIM: the time alone (the profile with its
in-run factors taken out), the prediction (with them) and the measured time (the 20th percentile
of the action over a run's steps after the first, the median over the rounds). Prints, per
scenario and kind, the prediction's mean absolute and mean signed error against the measured
actions; with --rows, every (configuration, rank, stage, kind) row as well, with measured / alone.
Also the step's first micro-batch against its others: how much more its F and B take.
Each NAME.round1.json's scenario is DIR/NAME.yaml (--scenarios, default scenarios/accuracy).

Needs PyYAML. The figures are the run's: read them beside bench/accuracy.sh's spreads.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

import yaml

from stats import median, p20

KINDS = ("F", "B", "OPTIM")


def action_times(trace_path, skip_first):
    """(rank, stage, kind) -> durations in us; and (rank, stage, kind) -> [(step, mb, us)]."""
    events = json.load(open(trace_path))["traceEvents"]
    out, by_step = {}, {}
    for e in events:
        if e.get("ph") != "X" or e.get("cat") not in KINDS:
            continue
        a = e["args"]
        if skip_first and a["step"] == 0:
            continue
        key = (e["pid"], a["stage"], e["cat"])
        out.setdefault(key, []).append(e["dur"])
        by_step.setdefault(key, []).append((a["step"], a["mb"], e["dur"]))
    return out, by_step


def simulate(parallax, scenario, sets, profile, work):
    path = os.path.join(work, "predicted.json")
    r = subprocess.run([parallax, "simulate", scenario, "--set", "hardware=" + profile, *sets, "--set", "data.steps=3",
                        "-o", path], capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit("accuracy_actions: simulate failed: " + r.stderr.strip())
    return {k: statistics.mean(v) for k, v in action_times(path, skip_first=False)[0].items()}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out")
    ap.add_argument("--parallax", default="build/parallax")
    ap.add_argument("--rows", action="store_true")
    ap.add_argument("--scenarios", default="scenarios/accuracy")
    args = ap.parse_args()
    profile = os.path.join(args.out, "here.yaml")
    if not os.path.exists(profile):
        sys.exit("accuracy_actions: no %s: give the folder bench/accuracy.sh wrote (bench/results/accuracy-cpu-DATE "
                 "unless its --out named another)" % profile)
    work = tempfile.mkdtemp()
    doc = yaml.safe_load(open(profile))
    doc["calibration"].pop("in_run", None)
    doc["calibration"].pop("in_run_data", None)
    alone_profile = os.path.join(work, "alone.yaml")
    yaml.safe_dump(doc, open(alone_profile, "w"), sort_keys=False)

    summary, first_extra = {}, {}
    for name in sorted(f[:-len(".round1.json")] for f in os.listdir(args.out) if f.endswith(".round1.json")):
        scenario = os.path.join(args.scenarios, name + ".yaml")
        for i, c in enumerate(json.load(open(os.path.join(args.out, name + ".round1.json")))["configurations"]):
            sets = [x for o in c["overrides"] for x in ("--set", o)]
            alone = simulate(args.parallax, scenario, sets, alone_profile, work)
            model = simulate(args.parallax, scenario, sets, profile, work)
            measured, firsts = {}, {}
            for r in range(1, 10):
                path = os.path.join(args.out, "traces", "%s.round%d" % (name, r), "%d.run1.json" % i)
                if not os.path.exists(path):
                    break
                times, by_step = action_times(path, skip_first=True)
                for k, v in times.items():
                    measured.setdefault(k, []).append(p20(v))
                for k, rows in by_step.items():
                    if k[2] == "OPTIM":
                        continue
                    steps = {}
                    for s, mb, us in rows:
                        steps.setdefault(s, []).append((mb, us))
                    first = [min(v)[1] for v in steps.values()]
                    rest = [us for v in steps.values() for _, us in sorted(v)[1:]]
                    if rest:
                        firsts.setdefault(k, []).append(p20(first) - p20(rest))
            for k in sorted(alone):
                if k not in measured:
                    continue
                m = median(measured[k])
                err = model[k] / m - 1
                summary.setdefault((name, k[2]), []).append(err)
                if k in firsts:
                    first_extra.setdefault((name, k[2]), []).append(median(firsts[k]))
                if args.rows:
                    print("%-22s %-40s rank %d stage %d %-5s alone %8.1f  predicted %8.1f  measured %8.1f us"
                          "  measured/alone %.2f  error %+.0f%%" % (name, " ".join(c["overrides"]), k[0], k[1], k[2],
                                                                     alone[k], model[k], m, m / alone[k], 100 * err))
    print("\nper scenario and kind: the prediction against the measured actions")
    for (name, kind), errs in sorted(summary.items()):
        print("  %-22s %-5s %3d actions  mean |error| %3.0f%%  mean signed %+4.0f%%" % (
            name, kind, len(errs), 100 * statistics.mean(abs(e) for e in errs), 100 * statistics.mean(errs)))
    print("\nthe step's first micro-batch of a stage against its others (us more, median over the configurations)")
    for (name, kind), extra in sorted(first_extra.items()):
        print("  %-22s %-5s %+6.0f us (%+.0f .. %+.0f)" % (name, kind, median(extra), min(extra), max(extra)))


if __name__ == "__main__":
    main()
