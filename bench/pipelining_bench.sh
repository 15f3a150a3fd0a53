#!/usr/bin/env bash
# Parallax side by side with torch.distributed.pipelining, on CPU ranks over Gloo: the accuracy
# set's MLP (scenarios/accuracy/mlp-pipeline2.yaml: 784-384-384-384-10 on Fashion-MNIST, batch
# 64) and transformer (transformer-pipeline2.yaml: 2 encoder blocks of hidden 64 on synthetic
# tokens, batch 16), the same micro-batches, data order (data.shuffle false), initial weights,
# optimizer and schedule on both sides. Prints, per schedule, the largest loss difference over
# the steps, and the step times: the median of each run's steps after the first fifth, runs
# interleaved (torch, Parallax, torch, ...), and the ratio Parallax / torch of the medians over
# runs; where torch cannot run a schedule, its error.
#   bench/pipelining_bench.sh [build-folder] [--runs N] [--steps N] [--chunks N] [--model mlp|transformer]
# torch comes from .venv-torch (scripts/setup.sh --bench or --torch; PYTHON overrides it).
set -euo pipefail
cd "$(dirname "$0")/.."
build="" runs=5 steps=40 chunks=8 only=""
while [ $# -gt 0 ]; do
  case "$1" in
    --runs) runs=$2; shift 2 ;;
    --steps) steps=$2; shift 2 ;;
    --chunks) chunks=$2; shift 2 ;;
    --model) only=$2; shift 2 ;;
    -h|--help) sed -n '2,16p' "$0"; exit 0 ;;
    -*) echo "pipelining_bench: unknown flag $1" >&2; exit 2 ;;
    *) build=$1; shift ;;
  esac
done
if [ -z "$build" ]; then
  build=build
  [ -x build-torch2/parallax ] && build=build-torch2
fi
parallax="$build/parallax"
python=${PYTHON:-.venv-torch/bin/python3}
[ -x "$parallax" ] || { echo "pipelining_bench: no $parallax (build first)" >&2; exit 2; }
"$python" -c 'import torch.distributed.pipelining' 2>/dev/null ||
  { echo "pipelining_bench: $python has no torch.distributed.pipelining (scripts/setup.sh --torch)" >&2; exit 2; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

stats() {  # FILE...: each run's median after the first fifth; prints the median of those
  python3 - "$@" <<'PY'
import json, statistics, sys
meds = []
for path in sys.argv[1:]:
    t = json.load(open(path))
    t = t["step_ms"] if "step_ms" in t else [s["step_time_ms"] for s in t["steps"]]
    meds.append(statistics.median(t[len(t) // 5:]))
print("%.3f %.3f %.3f" % (statistics.median(meds), min(meds), max(meds)))
PY
}

echo "torch $("$python" -c 'import torch; print(torch.__version__)' 2>/dev/null), Parallax $("$parallax" --version 2>/dev/null | head -1) ($build)," \
     "$(nproc) cores; pipeline 2, $chunks micro-batches, $steps steps, $runs interleaved runs each"
# model: scenario, optimizer (both sides), encoder heads
models=("mlp scenarios/accuracy/mlp-pipeline2.yaml 0.05 0.9 1"
        "transformer scenarios/accuracy/transformer-pipeline2.yaml 0.01 0.9 4")
for model in "${models[@]}"; do
read -r name scenario lr momentum heads <<< "$model"
[ -z "$only" ] || [ "$only" = "$name" ] || continue
echo
echo "$name ($scenario)"
printf "%-24s %10s %22s %22s %8s\n" schedule "max |dloss|" "torch ms (med, range)" "Parallax ms (med, range)" ratio
for schedule in gpipe 1f1b interleaved-1f1b looped-bfs interleaved-zero-bubble zbv-zero-bubble dualpipev; do
  sets=(--set data.shuffle=false --set data.steps="$steps" --set parallel.chunks="$chunks"
        --set parallel.schedule="$schedule" --set optimizer.lr="$lr" --set optimizer.momentum="$momentum")
  case $schedule in
    gpipe|1f1b) sets+=(--set parallel.virtual=1 --set parallel.partition_len=balanced) ;;
    *) sets+=(--set parallel.virtual=2 --set parallel.partition_len=1) ;;
  esac
  "$parallax" plan "$scenario" "${sets[@]}" --json > "$tmp/plan.json"
  rm -f "$tmp"/torch-*.json "$tmp"/parallax-*.json
  torch_ok=1
  for r in $(seq "$runs"); do
    if [ $torch_ok = 1 ] &&
       ! "$python" bench/pipelining_torch.py "$tmp/plan.json" "$schedule" --steps "$steps" --lr "$lr" \
           --momentum "$momentum" --heads "$heads" > "$tmp/torch-$r.json" 2>"$tmp/torch.err"; then
      torch_ok=0  # said below; Parallax still runs
      rm -f "$tmp/torch-$r.json"
    fi
    "$parallax" run "$scenario" "${sets[@]}" --json > "$tmp/parallax-$r.json" 2>"$tmp/parallax.err" ||
      { cat "$tmp/parallax.err" >&2; exit 1; }
  done
  if [ $torch_ok = 0 ]; then
    read -r pmed plo phi < <(stats "$tmp"/parallax-*.json)
    printf "%-24s %10s %22s %8s (%s-%s)\n" "$schedule" "-" "torch fails" "$pmed" "$plo" "$phi"
    echo "    torch: $(grep -E '^[A-Za-z]*Error' "$tmp/torch.err" | tail -1 | cut -c1-160)"
    continue
  fi
  dloss=$(python3 -c '
import json, sys
t = json.load(open(sys.argv[1]))["losses"]
p = [s["loss"] for s in json.load(open(sys.argv[2]))["steps"]]
print("%.2e" % max(abs(a - b) for a, b in zip(t, p)))' "$tmp/torch-1.json" "$tmp/parallax-1.json")
  read -r tmed tlo thi < <(stats "$tmp"/torch-*.json)
  read -r pmed plo phi < <(stats "$tmp"/parallax-*.json)
  printf "%-24s %10s %8s (%s-%s) %8s (%s-%s) %8.2f\n" "$schedule" "$dloss" "$tmed" "$tlo" "$thi" "$pmed" "$plo" "$phi" \
    "$(python3 -c "print($pmed / $tmed)")"
done
done
