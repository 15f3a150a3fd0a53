#!/usr/bin/env bash
# Sharded data parallelism (parallel.shard) as the executor runs it; prints figures (goals in
# docs/executor.md). Run after building:
#   PYTHON=.venv-torch/bin/python3 bench/fsdp_bench.sh [parallax] [--out DIR]
#   ROUNDS=N sets the interleaved rounds of (b) and (d) (default 5 and 3)
# (a) losses: scenarios/mlp-fashion-mnist-ddp2.yaml with parallel.shard: full against PyTorch's
#     FSDP2 (bench/fsdp_pytorch.py: fully_shard on each Linear and the root, the same initial
#     weights, samples and SGD), 10 steps in fp32: the largest relative difference of a step's loss;
# (b) the step: the same two over 300 steps each, alternating, the undisturbed step (p20) of each
#     run under a Parallax rank's conditions (bench/peer.py, printed beside the ratio): best of
#     ROUNDS and the median of the round-by-round ratios;
# (c) memory: each shard level's measured peak of live tensors on rank 0 against the plan's, on the
#     MLP made parameter-heavy (hidden 2048) and on a small transformer (6 blocks, hidden 256);
# (d) prediction: calibrates this machine on scenarios/accuracy/mlp-ddp2.yaml's layers (probes on
#     the models calibrate's --probe-with names, as bench/accuracy.sh), then `parallax validate` runs
#     and predicts it at each shard level, the DDP row (none) beside the sharded ones.
# PyTorch comes from PYTHON (default .venv-torch/bin/python3, scripts/setup.sh --torch): FSDP2 needs
# torch 2.6 or later; without it (a) and (b) say so and the rest runs.
# The raw output goes to DIR (--out, else OUT, else a new bench/results/fsdp-cpu-DATE): each run's
# JSON (a-*, b-*, c-*, d-*), the calibrated profile (here.yaml); machine.txt; summary.txt, what this
# printed; log.txt, its stderr.
set -euo pipefail
args=("$@")
source "$(dirname "$0")/lib.sh"
cd "$(dirname "$0")/.."
bench_parallax_args "$0" "$@"
python=$(bench_python .venv-torch/bin/python3)
scenario=scenarios/mlp-fashion-mnist-ddp2.yaml
file_order=(--set data.shuffle=false)  # the order bench/fsdp_pytorch.py can replay
out=$(bench_out_dir fsdp "$out")
bench_machine "$out" "$0" "${args[@]}"
bench_tee "$out"
trap bench_tee_close EXIT

has_fsdp2() { "$python" -c "from torch.distributed.fsdp import fully_shard" 2>/dev/null; }
port() { echo $((20000 + RANDOM % 20000)); }

echo "(a) losses over 10 steps, fp32: Parallax parallel.shard full vs PyTorch FSDP2 (MLP 784-256-256-10, 2 ranks, batch 64 per rank)"
if has_fsdp2; then
  "$parallax" run "$scenario" --set parallel.shard=full "${file_order[@]}" --set data.steps=10 --json 2>/dev/null >"$out/a-parallax.json"
  (cd bench && "$python" fsdp_pytorch.py 2 64 10 0 "$(port)" "$out/a-pytorch.txt" 2>/dev/null)
  python3 - "$out/a-parallax.json" "$out/a-pytorch.json" <<'PY'
import json, sys
ours = [s["loss"] for s in json.load(open(sys.argv[1]))["steps"]]
torch_ranks = json.load(open(sys.argv[2]))["rank_loss"]
theirs = [sum(r) / len(r) for r in zip(*torch_ranks)]  # Parallax's step loss: the mean over its ranks
worst = max(abs(a - b) / abs(b) for a, b in zip(ours, theirs))
print("    parallax %s" % " ".join("%.6f" % x for x in ours))
print("    pytorch  %s" % " ".join("%.6f" % x for x in theirs))
print("    largest relative difference %.2e (goal <= 1e-5)" % worst)
PY
else
  echo "    $python has no FSDP2 (torch 2.6 or later: scripts/setup.sh --torch); skipped"
fi

rounds=${ROUNDS:-5}
echo "(b) step, 2 ranks, Gloo, the same job over 300 steps: each run's undisturbed step (p20), $rounds interleaved rounds"
if has_fsdp2; then
  ours=() theirs=()
  for r in $(seq "$rounds"); do
    ours+=("$("$parallax" run "$scenario" --set parallel.shard=full "${file_order[@]}" --set data.steps=300 --json 2>/dev/null |
             tee "$out/b-parallax-$r.json" | bench_undisturbed_ms)")
    (cd bench && "$python" fsdp_pytorch.py 2 64 300 0 "$(port)" "$out/b-pytorch-$r.txt" 2>/dev/null)
    theirs+=("$(cat "$out/b-pytorch-$r.txt")")
  done
  echo "    PyTorch $("$python" -c 'import torch; print(torch.__version__)'), Parallax $("$parallax" --version 2>/dev/null || echo "$parallax")"
  echo "    $(cd bench && python3 -c 'import peer; print(peer.conditions(2))')"
  bench_ratios "pytorch FSDP2" 1.0 "${ours[*]}" "${theirs[*]}"
else
  echo "    skipped (no FSDP2)"
fi

echo "(c) memory: rank 0's measured peak of live tensors against the plan's (goal: within 5%)"
transformer=(--set "model={preset: transformer, layers: 6, hidden: 256, heads: 4, ffn: 1024, seq_len: 64, vocab: 8000}"
             --set data.source=synthetic --set data.batch_size=8 --set 'optimizer={kind: adamw, lr: 0.001}')
for model in mlp transformer; do
  for shard in none optimizer gradients full; do
    if [ $model = mlp ]; then sets=(--set model.hidden=2048); else sets=("${transformer[@]}"); fi
    "$parallax" run "$scenario" "${sets[@]}" --set parallel.shard=$shard --set data.steps=6 --json 2>/dev/null >"$out/c-$model-$shard.json"
    python3 - "$out/c-$model-$shard.json" $model $shard <<'PY'
import json, sys
m = json.load(open(sys.argv[1]))["memory"][0]
print("    %-11s shard %-9s measured %7.2f MiB, plan %7.2f MiB: %+5.1f%%" % (
    sys.argv[2], sys.argv[3], m["measured_mb"], m["predicted_mb"], 100 * (m["predicted_mb"] / m["measured_mb"] - 1)))
PY
  done
done

echo "(d) predicted vs measured step on this machine: scenarios/accuracy/mlp-ddp2.yaml at each shard level"
"$parallax" calibrate scenarios/accuracy/mlp-ddp2.yaml -o "$out/here.yaml" \
  --probe-with scenarios/mlp-fashion-mnist-ddp2.yaml --probe-with bench/data/probe-transformer.yaml 2>&1 |
  grep -E "wrote|in a real run|host speed" >&2
for r in $(seq "${ROUNDS_D:-3}"); do
  "$parallax" validate scenarios/accuracy/mlp-ddp2.yaml --sweep parallel.shard=none,optimizer,gradients,full \
    --profile "$out/here.yaml" --repeats 1 --json 2>/dev/null >"$out/d-round$r.json"
done
python3 - "$out"/d-round*.json <<'PY'
import json, sys
sys.path.insert(0, "bench")
from stats import median
runs, predicted = {}, {}
for f in sys.argv[1:]:
    for c in json.load(open(f))["configurations"]:
        name = " ".join(c["overrides"]) or "parallel.shard=none"
        runs.setdefault(name, []).extend(c["runs_ms"])
        predicted[name] = c["predicted_ms"]
print("    %d runs each, minutes apart; measured: each run's undisturbed step, the median over runs" % max(len(r) for r in runs.values()))
for name, r in runs.items():
    m = median(r)
    print("    %-26s predicted %7.3f ms, measured %7.3f ms: %+5.1f%% (spread %.1f%%)" % (
        name, predicted[name], m, 100 * (predicted[name] - m) / m, 100 * (max(r) - min(r)) / m))
PY
