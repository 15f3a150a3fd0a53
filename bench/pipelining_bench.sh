#!/usr/bin/env bash
# Parallax side by side with torch.distributed.pipelining, on CPU ranks over Gloo: the accuracy
# set's MLP (scenarios/accuracy/mlp-pipeline2.yaml: 784-384-384-384-10 on Fashion-MNIST, batch
# 64) and transformer (transformer-pipeline2.yaml: 2 encoder blocks of hidden 64 on synthetic
# tokens, batch 16), the same micro-batches, data order (data.shuffle false), initial weights,
# optimizer and schedule on both sides, and the same conditions (bench/peer.py, printed first:
# core binding, threads per rank, Gloo's threads SCHED_BATCH, data loaded inside the timed step,
# the slowest rank's step). Prints, per schedule, the largest loss difference over the steps, and
# the step times: each run's undisturbed step (p20 after a warm-up fifth, as Parallax's step
# statistic), runs interleaved (torch, Parallax, torch, ...), the median over runs and the range,
# and the ratio Parallax / torch of the medians; where torch cannot run a schedule, its error.
#   bench/pipelining_bench.sh [build-folder] [--runs N] [--steps N] [--chunks N] [--model mlp|transformer]
#                             [--out DIR]
# torch comes from .venv-torch (scripts/setup.sh --bench or --torch; PYTHON overrides it).
# The raw output goes to DIR (--out, else the environment's OUT, else a new
# bench/results/pipelining-cpu-DATE): per model and schedule, the plan and each run's JSON and
# stderr (MODEL/SCHEDULE/{plan.json,torch-R.json,parallax-R.json,*.err}); machine.txt (CPU,
# cores, commit, date); summary.txt, what this printed; log.txt, its stderr.
set -euo pipefail
args=("$@")
source "$(dirname "$0")/lib.sh"
cd "$(dirname "$0")/.."
build="" runs=5 steps=40 chunks=8 only="" out=""
while [ $# -gt 0 ]; do
  case "$1" in
    --runs) runs=$2; shift 2 ;;
    --steps) steps=$2; shift 2 ;;
    --chunks) chunks=$2; shift 2 ;;
    --model) only=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    -h|--help) bench_help "$0"; exit 0 ;;
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
out=$(bench_out_dir pipelining "$out")
bench_machine "$out" "$0" "${args[@]}"
bench_tee "$out"
trap bench_tee_close EXIT

stats() {  # FILE...: each run's step statistic (bench/peer.py); prints the median of those and their range
  python3 - "$@" <<'PY'
import json, sys
sys.path.insert(0, "bench")
import peer, stats
figures = []
for path in sys.argv[1:]:
    t = json.load(open(path))
    t = t["step_ms"] if "step_ms" in t else [s["step_time_ms"] for s in t["steps"]]
    figures.append(peer.step_statistic(t))
print("%.3f %.3f %.3f" % (stats.median(figures), min(figures), max(figures)))
PY
}

echo "torch $("$python" -c 'import torch; print(torch.__version__)' 2>/dev/null), Parallax $("$parallax" --version 2>/dev/null | head -1) ($build)," \
     "$(nproc) cores; pipeline 2, $chunks micro-batches, $steps steps, $runs interleaved runs each"
echo "$(cd bench && python3 -c 'import peer; print(peer.conditions(2))')"
# model: scenario, optimizer (both sides), encoder heads
models=("mlp scenarios/accuracy/mlp-pipeline2.yaml 0.05 0.9 1"
        "transformer scenarios/accuracy/transformer-pipeline2.yaml 0.01 0.9 4")
for model in "${models[@]}"; do
read -r name scenario lr momentum heads <<< "$model"
[ -z "$only" ] || [ "$only" = "$name" ] || continue
echo
echo "$name ($scenario)"
printf "%-24s %10s %22s %22s %8s\n" schedule "max |dloss|" "torch ms (p20, range)" "Parallax ms (p20, range)" ratio
for schedule in gpipe 1f1b interleaved-1f1b looped-bfs interleaved-zero-bubble zbv-zero-bubble dualpipev; do
  sets=(--set data.shuffle=false --set data.steps="$steps" --set parallel.chunks="$chunks"
        --set parallel.schedule="$schedule" --set optimizer.lr="$lr" --set optimizer.momentum="$momentum")
  case $schedule in
    gpipe|1f1b) sets+=(--set parallel.virtual=1 --set parallel.partition_len=balanced) ;;
    *) sets+=(--set parallel.virtual=2 --set parallel.partition_len=1) ;;
  esac
  dir="$out/$name/$schedule"
  mkdir -p "$dir"
  rm -f "$dir"/*.json "$dir"/*.err  # an earlier run's, when --out names a folder again
  "$parallax" plan "$scenario" "${sets[@]}" --json > "$dir/plan.json"
  torch_ok=1
  for r in $(seq "$runs"); do
    if [ $torch_ok = 1 ] &&
       ! "$python" bench/pipelining_torch.py "$dir/plan.json" "$schedule" --steps "$steps" --lr "$lr" \
           --momentum "$momentum" --heads "$heads" > "$dir/torch-$r.json" 2>"$dir/torch-$r.err"; then
      torch_ok=0  # said below; Parallax still runs. Its partial JSON stays out of the statistics.
      mv "$dir/torch-$r.json" "$dir/torch-failed-$r.json"
      torch_err="$dir/torch-$r.err"
    fi
    "$parallax" run "$scenario" "${sets[@]}" --json > "$dir/parallax-$r.json" 2>"$dir/parallax-$r.err" ||
      { cat "$dir/parallax-$r.err" >&2; exit 1; }
  done
  if [ $torch_ok = 0 ]; then
    read -r pmed plo phi < <(stats "$dir"/parallax-*.json)
    printf "%-24s %10s %22s %8s (%s-%s)\n" "$schedule" "-" "torch fails" "$pmed" "$plo" "$phi"
    echo "    torch: $(grep -E '^[A-Za-z]*Error' "$torch_err" | tail -1 | cut -c1-160)"
    continue
  fi
  dloss=$(python3 -c '
import json, sys
t = json.load(open(sys.argv[1]))["losses"]
p = [s["loss"] for s in json.load(open(sys.argv[2]))["steps"]]
print("%.2e" % max(abs(a - b) for a, b in zip(t, p)))' "$dir/torch-1.json" "$dir/parallax-1.json")
  read -r tmed tlo thi < <(stats "$dir"/torch-[0-9]*.json)
  read -r pmed plo phi < <(stats "$dir"/parallax-*.json)
  printf "%-24s %10s %8s (%s-%s) %8s (%s-%s) %8.2f\n" "$schedule" "$dloss" "$tmed" "$tlo" "$thi" "$pmed" "$plo" "$phi" \
    "$(python3 -c "print($pmed / $tmed)")"
done
done
