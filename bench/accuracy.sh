#!/usr/bin/env bash
# Prediction accuracy on this machine: calibrates on the shipped MLP scenarios (its probe runs
# take the DDP scenario's model, as a 2-stage 1F1B pipeline of 4 chunks and as the DDP scenario
# itself, so neither is in the list), then runs and simulates other configurations (chunks,
# schedules, partitions, checkpointing, accumulation, buckets, batch sizes) and prints predicted
# against measured step time. Each configuration runs STEPS steps, REPEATS times;
# the measured figure is the median of the per-run medians (after the first step), and the
# spread is (max - min) / median of those per-run medians.
# Usage: bench/accuracy.sh [BUILD_DIR]   (environment: STEPS=60 REPEATS=2)
set -euo pipefail
cd "$(dirname "$0")/.."
bin="${1:-build}/parallax"
steps="${STEPS:-60}"
repeats="${REPEATS:-2}"
out="$(mktemp -d)"
trap 'rm -rf "$out"' EXIT

"$bin" calibrate scenarios/mlp-fashion-mnist-pipeline2.yaml scenarios/mlp-fashion-mnist-ddp2.yaml \
  -o "$out/here.yaml" 2>&1 | grep -E "wrote|in a real run|Gloo" >&2

pipe=scenarios/mlp-fashion-mnist-pipeline2.yaml
ddp=scenarios/mlp-fashion-mnist-ddp2.yaml
configs=(
  "$pipe|parallel.chunks=2"
  "$pipe|parallel.chunks=8"
  "$pipe|parallel.chunks=16"
  "$pipe|parallel.schedule=gpipe"
  "$pipe|parallel.partition_len=[1,3]"
  "$pipe|parallel.schedule=interleaved-1f1b parallel.virtual=2 parallel.partition_len=balanced"
  "$pipe|parallel.activation_checkpointing=true"
  "$pipe|parallel.grad_accumulation=2"
  "$ddp|parallel.bucket_cap_mb=0.25"
  "$ddp|parallel.bucket_cap_mb=25"
  "$ddp|data.batch_size=128"
  "$ddp|data.batch_size=32"
)
printf "%-58s %12s %12s %8s %8s\n" configuration predicted_ms measured_ms error spread
sum=0; n=0
for c in "${configs[@]}"; do
  scenario="${c%%|*}"; set_flag="${c#*|}"
  sets=(); for kv in $set_flag; do sets+=(--set "$kv"); done
  pred=$("$bin" simulate "$scenario" "${sets[@]}" --set hardware="$out/here.yaml" --json 2>/dev/null |
    python3 -c 'import json,sys; print(json.load(sys.stdin)["step_time_ms"])')
  meds=()
  for r in $(seq "$repeats"); do
    m=$("$bin" run "$scenario" "${sets[@]}" --set data.steps="$steps" --json 2>/dev/null |
      python3 -c 'import json,sys,statistics as s; d=json.load(sys.stdin)["steps"][1:]; print(s.median(x["step_time_ms"] for x in d))')
    meds+=("$m")
  done
  read -r med spread err < <(python3 -c "
import statistics as s; m=[$(IFS=,; echo "${meds[*]}")]; p=$pred; md=s.median(m)
print(md, (max(m)-min(m))/md, (p-md)/md)")
  printf "%-58s %12.3f %12.3f %+7.1f%% %7.1f%%\n" "$(basename "$scenario" .yaml) $set_flag" "$pred" "$med" \
    "$(python3 -c "print($err*100)")" "$(python3 -c "print($spread*100)")"
  sum=$(python3 -c "print($sum + abs($err))"); n=$((n + 1))
done
python3 -c "print('MAPE %.1f%% over %d configurations' % ($sum / $n * 100, $n))"
