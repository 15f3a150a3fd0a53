#!/usr/bin/env bash
# Prediction accuracy on this machine, over the accuracy set (scenarios/accuracy/, 28
# configurations): calibrates first, then `parallax validate` runs each configuration for real
# and simulates it with the fresh profile, and this prints one table with the mean absolute error,
# the worst error and Kendall's tau within each sweep.
#
# Calibration measures the layer tables of the accuracy set at fp32 and, for the set's bf16 row,
# bf16 (--precision bf16). Its in-run probes (--probe-with) run on two models outside the set:
# scenarios/mlp-fashion-mnist-ddp2.yaml's MLP (2 hidden layers of 256) and, as the larger of the two
# models the in-run line is fitted through, bench/data/probe-transformer.yaml (hidden 128 where the
# set's transformer has 64). No configuration of the set, nor its models, runs during calibration:
# its layers are timed alone, and every run of the set is held out.
#
# Usage: bench/accuracy.sh [BUILD_DIR]   (environment: STEPS=100 REPEATS=3, OUT=DIR keeps the
# profile and validate's JSON there instead of in a temporary directory)
# Each configuration runs REPEATS times, in rounds over the whole set; the measured step is the
# median of the runs' medians (after the warm-up step), and the spread is (max - min) / median of
# those.
set -euo pipefail
cd "$(dirname "$0")/.."
bin="${1:-build}/parallax"
steps="${STEPS:-100}"
repeats="${REPEATS:-3}"
if [ -n "${OUT:-}" ]; then
  out="$OUT"
  mkdir -p "$out"
else
  out="$(mktemp -d)"
  trap 'rm -rf "$out"' EXIT
fi
rm -f "$out"/*.round*.json  # an earlier run's rounds, when OUT is reused

"$bin" calibrate --precision bf16 scenarios/accuracy/*.yaml -o "$out/here.yaml" \
  --probe-with scenarios/mlp-fashion-mnist-ddp2.yaml --probe-with bench/data/probe-transformer.yaml 2>&1 |
  grep -E "wrote|in a real run|message whose|host speed|differ by|again" >&2

# validate SCENARIO ROUND SWEEP...: one run of each configuration of the scenario's sweeps.
validate() {
  local scenario="$1" round="$2"; shift 2
  local sweeps=()
  for s in "$@"; do sweeps+=(--sweep "$s"); done
  "$bin" validate "$scenario" "${sweeps[@]}" --profile "$out/here.yaml" --steps "$steps" --repeats 1 \
    --json 2>&1 >"$out/$(basename "$scenario" .yaml).round$round.json" | grep -E "^validate: \[" >&2
}

# The repeats go round the whole set, so that a configuration's runs are minutes apart: this
# kind of machine changes speed for seconds to minutes at a time (docs/accuracy.md), and repeats
# taken within one minute can all land in one slow or fast spell.
for round in $(seq "$repeats"); do
  echo "round $round of $repeats" >&2
  validate scenarios/accuracy/mlp-pipeline2.yaml "$round" parallel.chunks=1,2,4,8,16,32 \
    "parallel.partition_len=[1,3],[3,1]" parallel.schedule=gpipe,1f1b parallel.grad_accumulation=2,4,8 \
    parallel.activation_checkpointing=true parallel.precision=bf16
  validate scenarios/accuracy/mlp-interleaved.yaml "$round" parallel.chunks=2,4,8
  validate scenarios/accuracy/mlp-ddp2.yaml "$round" parallel.bucket_cap_mb=0.25,5,100 data.batch_size=32,128,256
  validate scenarios/accuracy/transformer-pipeline2.yaml "$round" parallel.chunks=1,2,4,8
done

python3 - "$out"/*.round*.json <<'EOF'
import json, sys
# Each round's validate output, merged per configuration as `validate --repeats N` would: the
# measured step is the median of the runs' medians, the spread (max - min) / median, the error
# against that median; the steps at the calibrated host speed add up; bubbles are the first run's.
def median(v):
    v = sorted(v)
    n = len(v)
    return v[n // 2] if n % 2 else (v[n // 2 - 1] + v[n // 2]) / 2
def kendall_tau(a, b):  # as fit/measure.cpp's
    n, score = len(a), 0
    if n < 2:
        return 1.0
    for i in range(n):
        for j in range(i + 1, n):
            s = (a[i] - a[j]) * (b[i] - b[j])
            score += 1 if s > 0 else -1 if s < 0 else 0
    return score / (n * (n - 1) / 2)
configs = {}  # (name, sweep) -> merged
for f in sys.argv[1:]:
    for c in json.load(open(f))["configurations"]:
        short = c["scenario"].split("/")[-1][:-5]
        name = short + " " + " ".join(c["overrides"])
        sweep = short + " " + c["overrides"][0].split("=")[0] if c["overrides"] else ""
        m = configs.setdefault(name, {"sweep": sweep, "predicted_step_ms": c["predicted_step_ms"], "runs": [],
                                      "at_speed_runs": [], "steps_at_speed": 0, "steps_probed": 0,
                                      "ranks": c["ranks"]})
        m["runs"] += c["measured_runs_ms"]
        m["at_speed_runs"] += c["measured_at_speed_runs_ms"]
        m["steps_at_speed"] += c["steps_at_speed"]
        m["steps_probed"] += c["steps_probed"]
rows = []
for name, m in configs.items():
    measured = median(m["runs"])
    m["measured_step_ms"] = measured
    m["spread"] = (max(m["runs"]) - min(m["runs"])) / measured
    m["error"] = (m["predicted_step_ms"] - measured) / measured
    m["error_at_speed"] = None
    if m["at_speed_runs"]:
        at = median(m["at_speed_runs"])
        m["error_at_speed"] = (m["predicted_step_ms"] - at) / at
    rows.append((name, m))
print("%d runs of each configuration, minutes apart" % max(len(m["runs"]) for _, m in rows))
print("| configuration | predicted ms | measured ms | error | spread | steps at calibrated host speed | error over those | bubble per rank, predicted/measured |")
print("|---|---:|---:|---:|---:|---:|---:|---|")
for name, c in rows:
    bubbles = "  ".join("%d: %.0f/%.0f%%" % (r["rank"], 100 * r["predicted_bubble_fraction"],
                                              100 * r["measured_bubble_fraction"]) for r in c["ranks"])
    share = "%.0f%%" % (100 * c["steps_at_speed"] / c["steps_probed"]) if c["steps_probed"] else "-"
    at_speed = "-" if c["error_at_speed"] is None else "%+.1f%%" % (100 * c["error_at_speed"])
    print("| %s | %.3f | %.3f | %+.1f%% | %.1f%% | %s | %s | %s |" % (name, c["predicted_step_ms"], c["measured_step_ms"],
                                                          100 * c["error"], 100 * c["spread"], share, at_speed, bubbles))
errors = [c["error"] for _, c in rows]
worst = max(rows, key=lambda r: abs(r[1]["error"]))
print()
print("mean absolute error %.1f%% over %d configurations; worst %+.1f%% (%s)" %
      (100 * sum(abs(e) for e in errors) / len(errors), len(errors), 100 * worst[1]["error"], worst[0]))
print("median spread of the measured step between runs %.1f%%" % (100 * sorted(c["spread"] for _, c in rows)[len(rows) // 2]))
probed = sum(c["steps_probed"] for _, c in rows)
if probed:
    print("steps the host ran at the calibrated speed in: %.0f%% of %d" % (100 * sum(c["steps_at_speed"] for _, c in rows) / probed, probed))
matched = [c["error_at_speed"] for _, c in rows if c["error_at_speed"] is not None]
if matched:
    print("over those steps only, where a run had enough (%d configurations): mean absolute error %.1f%%" %
          (len(matched), 100 * sum(abs(e) for e in matched) / len(matched)))
sweeps = {}
for name, c in rows:
    if c["sweep"]:
        sweeps.setdefault(c["sweep"], []).append(c)
for sweep, cs in sorted(sweeps.items()):
    if len(cs) > 1:
        print("Kendall tau %+.2f over the %d configurations of sweep %s" %
              (kendall_tau([c["predicted_step_ms"] for c in cs], [c["measured_step_ms"] for c in cs]), len(cs), sweep))
EOF
