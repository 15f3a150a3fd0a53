#!/usr/bin/env bash
# The tuner and the simulator at scale, issue 55's and 59's scale goals on a 2-core machine:
#  1. `parallax tune` on two large jobs and what it got through (simulated, pruned by the lower bound,
#     over memory) and picked: >= 10,000 configurations of a 3,072-GPU Llama 3.1 405B job, context
#     parallelism included, in <= 60 s (scenarios/llama-3.1-405b-3072xH100.yaml, --time-limit 60); the
#     same of a DeepSeek-V3-sized mixture-of-experts job, expert degrees included, in <= 120 s
#     (scenarios/moe-671b-2048xH100.yaml, --time-limit 120);
#  2. the 405B search's phases on fixed work (parallax_tune_bench --phases: listing, planning 2,000,
#     simulating 200, one thread), to set one build against another;
#  3. the 1,024-rank job of parallax_tune_bench (data 128 x pipeline 8), its whole default space in
#     <= 60 s (parallax_tune_bench --big: the exhaustive and pruned searches of a smaller space first);
#  4. a 16,384-rank 1F1B step in < 1 s (parallax_sim_bench --step --replicas 2048: the whole simulation with
#     its timeline, every rank played, in one process; plan and metrics timed apart).
#
#   bash bench/tune_scale.sh [PARALLAX] [--out DIR]      (default: build/parallax; the two benches
#                                                          are taken from beside it)
#
# Output goes to DIR (--out, else OUT, else a new bench/results/tune-scale-cpu-DATE): tune.json and
# tune-moe.json (tune's --json), summary.txt, log.txt (tune's progress), machine.txt.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
here="$(cd "$(dirname "$0")" && pwd)"
bench_begin tune-scale "$0" "$@"
# run NAME SCENARIO LIMIT TITLE [TUNE FLAGS...]: `parallax tune` with --time-limit LIMIT into NAME.json, and
# what it got through.
run() {
  local name="$1" scenario="$2" limit="$3" title="$4" start end
  shift 4
  start=$(date +%s.%N)
  "$parallax" tune "$scenario" --time-limit "$limit" --json "$@" >"$out/$name.json"
  end=$(date +%s.%N)
  python3 - "$out/$name.json" "$start" "$end" "$limit" "$title" <<'PY'
import json, sys
j = json.load(open(sys.argv[1]))
total, limit, title = float(sys.argv[3]) - float(sys.argv[2]), sys.argv[4], sys.argv[5]
sampled = j.get("configs_sampled_one_in", 1)
rules = "every trainer's plans" if j["trainer"] in ("none", "pytorch") else f"what {j['trainer']} runs"
print(f"{title}, default space ({rules}): {j['configs_total']:,} configurations ({j['configs_invalid']:,} invalid besides)"
      + (f", a uniform sample of one combination in {sampled} of the space" if sampled > 1 else ""))
print(f"in the search's {j['wall_s']:.1f} s (--time-limit {limit}): simulated {j['configs_evaluated']:,}, pruned by their bound "
      f"{j['configs_pruned']:,}, over memory {j['configs_over_memory']:,}; stopped: {j.get('stopped') or 'no'}")
print(f"the process, with the full simulations of the ranked rows after the search: {total:.1f} s")
print(f"pick: {j['best']['predicted_step_ms'] / 1e3:.3f} s a step ({j['speedup_vs_given']:.2f}x the scenario as given): "
      + ", ".join(f"{k}={v}" for k, v in sorted(j['best']['overrides'].items())))
print()
PY
}
run tune "$here/../scenarios/llama-3.1-405b-3072xH100.yaml" 60 "Llama 3.1 405B on 3,072 H100s"
# Issue 59's goal: >= 10,000 configurations of a DeepSeek-V3-sized job (2,048 GPUs, pipeline 16 x expert 64),
# the expert degree searched beside the rest, in <= 120 s. Every schedule (--any-trainer): DeepSeek's own trainer
# ran DualPipe, which Megatron-LM, whose semantics the scenario takes, does not.
run tune-moe "$here/../scenarios/moe-671b-2048xH100.yaml" 120 "A DeepSeek-V3-sized MoE job (671B, 256 experts) on 2,048 H100s" --any-trainer

bin_dir="$(dirname "$parallax")"
echo "The 405B search's phases on fixed work (one thread):"
"$bin_dir/parallax_tune_bench" --phases "$here/../scenarios/llama-3.1-405b-3072xH100.yaml"
echo
echo "The 1,024-rank job (goal: its whole default space in <= 60 s):"
"$bin_dir/parallax_tune_bench" --big
echo
echo "A 16,384-rank 1F1B step, every rank played with its timeline (goal: < 1 s):"
"$bin_dir/parallax_sim_bench" --step --replicas 2048 --repeat 5
