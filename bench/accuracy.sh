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
# Each configuration runs REPEATS times; the measured step is the median of the runs' medians
# (after the warm-up step), and the spread is (max - min) / median of those.
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

"$bin" calibrate --precision bf16 scenarios/accuracy/*.yaml -o "$out/here.yaml" \
  --probe-with scenarios/mlp-fashion-mnist-ddp2.yaml --probe-with bench/data/probe-transformer.yaml 2>&1 |
  grep -E "wrote|in a real run|message whose|host speed|differ by|again" >&2

validate() {  # SCENARIO SWEEP...
  local scenario="$1"; shift
  local sweeps=()
  for s in "$@"; do sweeps+=(--sweep "$s"); done
  "$bin" validate "$scenario" "${sweeps[@]}" --profile "$out/here.yaml" --steps "$steps" --repeats "$repeats" \
    --json 2>&1 >"$out/$(basename "$scenario" .yaml).json" | grep -E "^validate: \[" >&2
}

validate scenarios/accuracy/mlp-pipeline2.yaml parallel.chunks=1,2,4,8,16,32 "parallel.partition_len=[1,3],[3,1]" \
  parallel.schedule=gpipe,1f1b parallel.grad_accumulation=2,4,8 parallel.activation_checkpointing=true \
  parallel.precision=bf16
validate scenarios/accuracy/mlp-interleaved.yaml parallel.chunks=2,4,8
validate scenarios/accuracy/mlp-ddp2.yaml parallel.bucket_cap_mb=0.25,5,100 data.batch_size=32,128,256
validate scenarios/accuracy/transformer-pipeline2.yaml parallel.chunks=1,2,4,8

python3 - "$out"/*.json <<'EOF'
import json, sys
rows, sweeps = [], []
for f in sys.argv[1:]:
    d = json.load(open(f))
    for c in d["configurations"]:
        name = c["scenario"].split("/")[-1][:-5] + " " + " ".join(c["overrides"])
        rows.append((name, c))
    sweeps += [s for s in d["sweeps"] if s["configurations"] > 1]
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
for s in sweeps:
    print("Kendall tau %+.2f over the %d configurations of sweep %s" % (s["kendall_tau"], s["configurations"], s["sweep"]))
EOF
