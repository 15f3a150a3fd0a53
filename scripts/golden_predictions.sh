#!/usr/bin/env bash
# The simulator's predictions on the shipped and accuracy scenarios, as one golden file: for each
# case, the step time and a SHA-256 of `simulate --json` and of the predicted trace (each read as
# JSON, its wall time and the profile's `published_check` left out). A refactoring of the simulator or the plan must leave every line as it was; a
# change of the model changes lines, and the reviewer sees which.
#
#   scripts/golden_predictions.sh PARALLAX --write tests/golden/predictions.txt   # after a model change
#   scripts/golden_predictions.sh PARALLAX --check tests/golden/predictions.txt   # ctest runs this
#
# Run from anywhere; paths in the traces are relative to the repository root.
set -euo pipefail
if [[ $# -ne 3 || ( "$2" != --write && "$2" != --check ) ]]; then
  echo "usage: $0 PARALLAX --write|--check GOLDEN_FILE" >&2
  exit 2
fi
parallax=$(realpath "$1")
mode=$2
golden=$(realpath -m "$3")
cd "$(dirname "$0")/.."
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# name | scenario | --set overrides (space-separated)
cases=(
  "default||"
  "default-1f1b||parallel.schedule=1f1b"
  "default-ckpt-fp16||parallel.activation_checkpointing=true parallel.precision=fp16"
  "gpipe-1b-4xA100|scenarios/gpipe-1b-4xA100.yaml|"
  "gpipe-1b-16xA100-ddp|scenarios/gpipe-1b-4xA100.yaml|parallel.data=4 parallel.schedule=1f1b"
  "gpipe-1b-interleaved|scenarios/gpipe-1b-4xA100.yaml|parallel.schedule=interleaved-1f1b parallel.virtual=2"
  "ddp-transformer-accum|scenarios/ddp-transformer-accum-4xA100.yaml|"
  "ddp-transformer-buckets|scenarios/ddp-transformer-accum-4xA100.yaml|parallel.bucket_cap_mb=5 parallel.first_bucket_mb=4"
  "interleaved-synthetic|scenarios/interleaved-synthetic-ideal.yaml|"
  "mlp-ddp2|scenarios/mlp-fashion-mnist-ddp2.yaml|"
  "mlp-ddp4|scenarios/mlp-fashion-mnist-ddp4.yaml|"
  "mlp-pipeline2|scenarios/mlp-fashion-mnist-pipeline2.yaml|"
  "pipelining-split4|scenarios/pipelining-example-split4.yaml|"
  "accuracy-mlp-ddp2|scenarios/accuracy/mlp-ddp2.yaml|"
  "accuracy-mlp-interleaved|scenarios/accuracy/mlp-interleaved.yaml|"
  "accuracy-mlp-pipeline2|scenarios/accuracy/mlp-pipeline2.yaml|"
  "accuracy-transformer-pipeline2|scenarios/accuracy/transformer-pipeline2.yaml|"
  "gpu-transformer|bench/data/gpu-transformer.yaml|"
  "gpu-transformer-a100|bench/data/gpu-transformer.yaml|hardware=a100-nvlink-ib"
  "probe-transformer|bench/data/probe-transformer.yaml|"
  "t4-default-v100|scenarios/gpipe-transformer-2xT4.yaml|hardware=v100-nvlink parallel.data=2"
)

out="$work/predictions.txt"
echo "# scripts/golden_predictions.sh: name step_ms sha256(simulate --json) sha256(trace)" > "$out"
for c in "${cases[@]}"; do
  IFS='|' read -r name scenario sets <<< "$c"
  args=(simulate --json -o "$work/trace.json")
  [[ -n "$scenario" ]] && args+=("$scenario")
  for s in $sets; do args+=(--set "$s"); done
  if ! "$parallax" "${args[@]}" > "$work/out.json" 2> "$work/err.txt"; then
    echo "golden: case $name failed: $(cat "$work/err.txt")" >&2
    exit 1
  fi
  step=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["step_time_ms"])' "$work/out.json")
  read -r json_sum trace_sum < <(python3 - "$work/out.json" "$work/trace.json" <<'PY'
import hashlib, json, sys
# What is not a prediction is left out: the simulation's wall time, and the profile's errors on
# published runs (`published_check`, which a rerun of a published bench updates).
def strip(x):
    if isinstance(x, dict):
        return {k: strip(v) for k, v in x.items() if k not in ("wall_ms", "published_check")}
    return [strip(v) for v in x] if isinstance(x, list) else x
print(*(hashlib.sha256(json.dumps(strip(json.load(open(f))), sort_keys=True).encode()).hexdigest()[:16] for f in sys.argv[1:]))
PY
)
  echo "$name $step $json_sum $trace_sum" >> "$out"
done

if [[ "$mode" == --write ]]; then
  cp "$out" "$golden"
  echo "wrote $golden (${#cases[@]} cases)"
elif diff -u "$golden" "$out"; then
  echo "golden: all ${#cases[@]} predictions as before"
else
  echo "golden: predictions changed (above: - before, + now). If the model changed on purpose, rerun with --write and say why in the commit." >&2
  exit 1
fi
