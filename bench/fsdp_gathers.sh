#!/usr/bin/env bash
# Where shard full's step goes on this machine, action by action: scenarios/accuracy/mlp-ddp2.yaml
# at parallel.shard none and full, traced (`parallax run -o`) and predicted (`simulate -o`) with a
# profile calibrated here, ROUNDS runs of each (default 3), alternating. Run after building:
#   bash bench/fsdp_gathers.sh [parallax] [--out DIR]
#   PROFILE=FILE takes a calibrated profile instead of calibrating first (as bench/fsdp_bench.sh's (d)).
# Prints, per run: `parallax compare`'s step line and its error by kind; then over the runs'
# steps after the first fifth, the median duration of F, B and OPTIM at each level and of each
# all-gather by its place in the step (forward's gathers 0-3, backward's 4-7) with its bytes: what
# the gathers beside the compute cost the compute, which docs/simulator.md's Gloo rule models.
# The raw output goes to DIR (--out, else OUT, else a new bench/results/fsdp-gathers-cpu-DATE): the
# profile (here.yaml), each compare's JSON, the predicted traces; machine.txt; summary.txt, what this
# printed; log.txt, its stderr. The measured traces stay in DIR/traces (not for committing).
set -euo pipefail
source "$(dirname "$0")/lib.sh"
cd "$(dirname "$0")/.."
bench_begin fsdp-gathers "$0" "$@"
rounds="${ROUNDS:-3}"
scenario=scenarios/accuracy/mlp-ddp2.yaml
mkdir -p "$out/traces"

if [ -n "${PROFILE:-}" ]; then
  cp "$PROFILE" "$out/here.yaml"
else
  "$parallax" calibrate "$scenario" -o "$out/here.yaml" \
    --probe-with scenarios/mlp-fashion-mnist-ddp2.yaml --probe-with bench/data/probe-transformer.yaml 2>&1 |
    grep -E "wrote|in a real run" >&2
fi

for level in none full; do
  "$parallax" simulate "$scenario" --set parallel.shard=$level --set hardware="$out/here.yaml" -o "$out/predicted-$level.json" >/dev/null
done
for r in $(seq 1 "$rounds"); do
  for level in none full; do
    "$parallax" run "$scenario" --set parallel.shard=$level --set hardware="$out/here.yaml" \
      -o "$out/traces/measured-$level-$r.json" >/dev/null 2>&1
    echo "round $r, shard $level:"
    "$parallax" compare "$out/predicted-$level.json" "$out/traces/measured-$level-$r.json" --json >"$out/compare-$level-$r.json"
    "$parallax" compare "$out/predicted-$level.json" "$out/traces/measured-$level-$r.json" |
      grep -E "^step time|^  (F|B|OPTIM) " | sed 's/^/    /'
  done
done

echo
echo "rank 0's actions, median over each run's steps after the first fifth, then the median over the runs (us);"
echo "predicted: the same actions in the simulated step"
python3 - "$out" "$rounds" <<'PY'
import json, statistics, sys
out, rounds = sys.argv[1], int(sys.argv[2])
def actions(path):
    t = json.load(open(path))
    events = [e for e in (t["traceEvents"] if isinstance(t, dict) else t) if e.get("ph") == "X" and e.get("pid") == 0]
    steps = sorted({e["args"]["step"] for e in events if "step" in e.get("args", {})})
    kept = set(steps[len(steps) // 5:]) if steps else {None}  # a predicted trace: one step, unnumbered
    by = {}
    for e in events:
        if e.get("args", {}).get("step") not in kept: continue
        name = e["name"][1:]  # without the stage digit
        key = name if name.startswith("ALL_GATHER") else e["cat"]
        by.setdefault(key, []).append((e["dur"], e["args"].get("bytes", 0)))
    return {k: (statistics.median(d for d, _ in v), v[0][1]) for k, v in by.items()}
per_level = {}
for level in ("none", "full"):
    runs = [actions("%s/traces/measured-%s-%d.json" % (out, level, r)) for r in range(1, rounds + 1)]
    per_level[level] = {k: (statistics.median(run[k][0] for run in runs if k in run), runs[0][k][1]) for k in runs[0]}
predicted = {level: actions("%s/predicted-%s.json" % (out, level)) for level in ("none", "full")}
for kind in ("F", "B", "OPTIM"):
    n, f = per_level["none"].get(kind, (0, 0))[0], per_level["full"].get(kind, (0, 0))[0]
    pn, pf = predicted["none"].get(kind, (0, 0))[0], predicted["full"].get(kind, (0, 0))[0]
    print("    %-6s none %7.0f   full %7.0f   full - none %+7.0f   (predicted %+7.0f)" % (kind, n, f, f - n, pf - pn))
# A gather's action is ALL_GATHER<micro-batch>.<its place in the step>: the forward's first, then the backward's.
place = lambda k: int(k.split(".")[-1])
gathers = sorted((k for k in per_level["full"] if k.startswith("ALL_GATHER")), key=place)
for k in gathers:
    d, b = per_level["full"][k]
    print("    %-14s %7.0f   %8d bytes  (%s)" % (k, d, b, "forward" if place(k) < len(gathers) // 2 else "backward"))
PY
