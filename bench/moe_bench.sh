#!/usr/bin/env bash
# The executor's expert-parallel MoE against plain PyTorch (issue 59's goals); prints figures.
# Run after building:
#   PYTHON=.venv-torch/bin/python3 bench/moe_bench.sh [parallax] [--out DIR]
#   ROUNDS=N sets the interleaved rounds of (b) (default 5), STEPS the steps of each run (60)
# The job: bench/data/moe-cpu.yaml, 2 ranks over Gloo, expert 2 (each rank 4 of the 8 experts).
# PyTorch's side is bench/moe_pytorch.py: the same model, initial weights, tokens and AdamW, its
# experts reached with torch.distributed.nn.functional.all_to_all_single, its dense gradients
# reduced by DistributedDataParallel, under a Parallax rank's conditions (bench/peer.py).
# (a) losses: 10 steps in fp32 on both sides, the largest relative difference of a step's loss
#     (Parallax's step loss is the mean over its ranks; so is PyTorch's here);
# (b) the step: STEPS steps on each side, alternating, ROUNDS rounds; each run's undisturbed step
#     (p20 of the slowest rank's steps after a warm-up fifth): best of each, and the median of the
#     round-by-round ratios.
# PyTorch comes from PYTHON (default .venv-torch/bin/python3, scripts/setup.sh --torch).
# The raw output goes to DIR (--out, else OUT, else a new bench/results/moe-cpu-DATE): each run's
# JSON (a-*, b-*); machine.txt; summary.txt, what this printed; log.txt, its stderr.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
cd "$(dirname "$0")/.."
python=$(bench_python .venv-torch/bin/python3)
scenario=bench/data/moe-cpu.yaml
steps=${STEPS:-60} rounds=${ROUNDS:-5}
"$python" -c 'import torch.distributed.nn.functional' 2>/dev/null ||
  { echo "moe_bench: $python has no torch with torch.distributed (scripts/setup.sh --torch)" >&2; exit 1; }
bench_begin moe "$0" "$@"
port() { echo $((20000 + RANDOM % 20000)); }
"$parallax" plan "$scenario" --json >"$out/plan.json"

echo "(a) losses over 10 steps, fp32: Parallax vs PyTorch, expert parallel over 2 ranks ($scenario)"
"$parallax" run "$scenario" --set data.steps=10 --json 2>/dev/null >"$out/a-parallax.json"
(cd bench && "$python" moe_pytorch.py "$out/plan.json" 2 10 1 0.0005 "$(port)" "$out/a-pytorch.txt" 2>/dev/null)
python3 - "$out/a-parallax.json" "$out/a-pytorch.json" <<'PY'
import json, sys
ours = [s["loss"] for s in json.load(open(sys.argv[1]))["steps"]]
ranks = json.load(open(sys.argv[2]))["rank_loss"]
theirs = [sum(r) / len(r) for r in zip(*ranks)]
worst = max(abs(a - b) / abs(b) for a, b in zip(ours, theirs))
print("    parallax %s" % " ".join("%.6f" % x for x in ours))
print("    pytorch  %s" % " ".join("%.6f" % x for x in theirs))
print("    largest relative difference %.2e (goal <= 1e-5)" % worst)
PY

echo "(b) step, 2 ranks, Gloo, $steps steps a run: each run's undisturbed step (p20), $rounds interleaved rounds"
ours=() theirs=()
for r in $(seq "$rounds"); do
  ours+=("$("$parallax" run "$scenario" --set data.steps="$steps" --json 2>/dev/null | tee "$out/b-parallax-$r.json" | bench_undisturbed_ms)")
  (cd bench && "$python" moe_pytorch.py "$out/plan.json" 2 "$steps" 1 0.0005 "$(port)" "$out/b-pytorch-$r.txt" 2>/dev/null)
  theirs+=("$(cat "$out/b-pytorch-$r.txt")")
done
echo "    PyTorch $("$python" -c 'import torch; print(torch.__version__)'), Parallax $("$parallax" --version 2>/dev/null || echo "$parallax")"
echo "    $(cd bench && python3 -c 'import peer; print(peer.conditions(2))')"
bench_ratios "pytorch" 1.1 "${ours[*]}" "${theirs[*]}"
