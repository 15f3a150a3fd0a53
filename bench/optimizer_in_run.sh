#!/usr/bin/env bash
# The optimizer step in a run against its time alone, stage by stage, on the two models
# bench/accuracy.sh's calibration probes its in-run factors on (scenarios/mlp-fashion-mnist-ddp2.yaml's
# MLP and bench/data/probe-transformer.yaml), each at calibrate's probe layout (pipeline 2, 1F1B,
# 4 micro-batches, data 1). Run after building:
#   bash bench/optimizer_in_run.sh [parallax] [--out DIR]
#   PROFILE=FILE takes a calibrated profile instead of calibrating first (as bench/accuracy.sh);
#   ROUNDS=N runs of each (default 5), alternating.
# Prints bench/accuracy_actions.py's rows: each stage's OPTIM alone (the profile without its in-run
# factors), predicted (with them) and measured (the 20th percentile over a run's steps after the
# first, the median over the rounds), and measured / alone. The in-run line calibrate fits is one
# factor and one offset for every stage; what the rows say of each stage is what that line has to
# carry (docs/accuracy.md). Then each round's F, B and OPTIM, stage by stage, with their spread
# over the rounds ((max - min) / median): how much each kind moves from one run to the next.
# The raw output goes to DIR (--out, else OUT, else a new bench/results/optimizer-in-run-cpu-DATE):
# the profile (here.yaml), the probe scenarios as run (scenarios/), each round's `validate` JSON;
# machine.txt; summary.txt, what this printed; log.txt, its stderr. The traces stay in DIR/traces
# (large: not for committing).
set -euo pipefail
source "$(dirname "$0")/lib.sh"
cd "$(dirname "$0")/.."
bench_begin optimizer-in-run "$0" "$@"
rounds="${ROUNDS:-5}"
rm -rf "$out/traces" "$out"/*.round*.json "$out/scenarios"
mkdir -p "$out/scenarios"

if [ -n "${PROFILE:-}" ]; then
  cp "$PROFILE" "$out/here.yaml"
else
  "$parallax" calibrate --precision bf16 scenarios/accuracy/*.yaml -o "$out/here.yaml" \
    --probe-with scenarios/mlp-fashion-mnist-ddp2.yaml --probe-with bench/data/probe-transformer.yaml 2>&1 |
    grep -E "wrote|in a real run" >&2
fi

# The probe layout (fit/in_run.cpp, probe_plans), written into each scenario.
python3 - "$out/scenarios" <<'PY'
import sys, yaml
for name, path in (("probe-mlp", "scenarios/mlp-fashion-mnist-ddp2.yaml"), ("probe-transformer", "bench/data/probe-transformer.yaml")):
    doc = yaml.safe_load(open(path))
    doc["name"] = name
    doc["parallel"] = {"data": 1, "pipeline": 2, "partition_len": "balanced", "chunks": 4, "schedule": "1f1b"}
    doc["data"]["steps"] = 400 if name == "probe-mlp" else 130  # about calibrate's probe steps
    with open("%s/%s.yaml" % (sys.argv[1], name), "w") as f:
        f.write("# %s at calibrate's probe layout (written by bench/optimizer_in_run.sh)\n" % path)
        yaml.safe_dump(doc, f, sort_keys=False)
PY

for r in $(seq 1 "$rounds"); do
  for name in probe-mlp probe-transformer; do
    "$parallax" validate "$out/scenarios/$name.yaml" --sweep parallel.grad_accumulation=1 --profile "$out/here.yaml" \
      --repeats 1 --keep-traces "$out/traces/$name.round$r" --json >"$out/$name.round$r.json"
  done
done
python3 bench/accuracy_actions.py "$out" --parallax "$parallax" --scenarios "$out/scenarios" --rows |
  grep -E "OPTIM|^per scenario"

echo
echo "each round's actions (us, the 20th percentile over the run's steps after the first), rounds 1 .. $rounds, and their spread"
python3 - "$out" "$rounds" <<'PY'
import os, sys
sys.path.insert(0, "bench")
from accuracy_actions import action_times
from stats import median, p20
out, rounds = sys.argv[1], int(sys.argv[2])
for name in ("probe-mlp", "probe-transformer"):
    per = {}
    for r in range(1, rounds + 1):
        times, _ = action_times(os.path.join(out, "traces", "%s.round%d" % (name, r), "0.run1.json"), skip_first=True)
        for k, v in times.items():
            per.setdefault(k, []).append(p20(v))
    for k in sorted(per, key=lambda k: (k[2], k[0], k[1])):
        v = per[k]
        print("  %-18s rank %d stage %d %-5s %s   spread %4.0f%%" % (
            name, k[0], k[1], k[2], "  ".join("%7.1f" % x for x in v), 100 * (max(v) - min(v)) / median(v)))
PY
