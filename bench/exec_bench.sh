#!/usr/bin/env bash
# Executor benchmarks; prints figures (goals in docs/executor.md). Run after building:
#   bench/exec_bench.sh [build-folder] [--out DIR]
#   PYTHON=.venv-torch/bin/python3 bench/exec_bench.sh build-torch2    # the LibTorch 2.x line
#   ROUNDS=N sets the interleaved rounds (default 5)
# (a) one DDP step (the undisturbed step, p20) of scenarios/mlp-fashion-mnist-ddp2.yaml in Parallax and in PyTorch's own
#     DistributedDataParallel, as a ratio: PyTorch from PYTHON (default Debian's python3-torch,
#     scripts/setup.sh --bench), which should be the torch the build's LibTorch came from, run under a
#     Parallax rank's conditions (bench/peer.py: core binding, threads per rank, Gloo's threads
#     SCHED_BATCH, data inside the timed step, the slowest rank's step), printed beside the ratio;
# (b) the host tracer's overhead: the same run with PARALLAX_TRACE=0 and with the tracer on;
# (c) measured bubble fraction of gpipe and 1f1b on 2 ranks against (p-1)/(m+p-1).
# Medians and p20 are bench/stats.py's (interpolated, as timeline/step_statistic.hpp's).
# The raw output goes to DIR (--out, else the environment's OUT, else a new
# bench/results/exec-cpu-DATE): each run's `parallax run --json` (a-parallax-R.json,
# b-trace-off-R.json, b-trace-on-R.json), PyTorch's step times (a-pytorch-R.json) and figure
# (a-pytorch-R.txt), (c)'s measured traces and simulations (c-SCHEDULE-mM.trace.json,
# .simulate.json); machine.txt (CPU, cores, commit, date); summary.txt, what this printed;
# log.txt, its stderr.
set -euo pipefail
args=("$@")
source "$(dirname "$0")/lib.sh"
cd "$(dirname "$0")/.."
bench_build_args "$0" "$@"
parallax="$build/parallax"
python=${PYTHON:-/usr/bin/python3}
scenario=scenarios/mlp-fashion-mnist-ddp2.yaml
steps=300
out=$(bench_out_dir exec "$out")
bench_machine "$out" "$0" "${args[@]}"
bench_tee "$out"
trap bench_tee_close EXIT

median_step_ms() {  # the undisturbed step (p20, timeline/step_statistic.hpp) after a warm-up fifth, from parallax run --json
  python3 -c '
import json, sys
sys.path.insert(0, "bench")
import stats
steps = json.load(sys.stdin)["steps"]
print("%.4f" % stats.undisturbed([s["step_time_ms"] for s in steps[len(steps) // 5:]]))'
}

best() { python3 -c "import sys; print(min(float(x) for x in sys.argv[1:]))" "$@"; }
rounds=${ROUNDS:-5}  # alternate the contenders and keep each one's best median: the machine is shared

echo "(a) DDP step, 2 ranks, Gloo, MLP 784-256-256-10, batch 64 per rank, 1 MiB buckets: each run's undisturbed step (p20), best of $rounds"
ours=() theirs=()
for r in $(seq $rounds); do
  ours+=("$("$parallax" run "$scenario" --set data.steps=$steps --json 2>/dev/null | tee "$out/a-parallax-$r.json" | median_step_ms)")
  if "$python" -c "import torch" 2>/dev/null; then
    "$python" bench/ddp_pytorch.py 2 64 $steps 1 0.25 $((20000 + RANDOM % 20000)) \
      "$out/a-pytorch-$r.txt" 2>/dev/null
    theirs+=("$(cat "$out/a-pytorch-$r.txt")")
  fi
done
if [ ${#theirs[@]} -gt 0 ]; then
  echo "    PyTorch $("$python" -c 'import torch; print(torch.__version__)'), Parallax's LibTorch from $build"
  echo "    $(cd bench && python3 -c 'import peer; print(peer.conditions(2))')"
  python3 -c "print('    parallax %.3f ms, pytorch DDP %.3f ms, ratio %.3f (goal <= 1.0)' % ($(best "${ours[@]}"), $(best "${theirs[@]}"), $(best "${ours[@]}") / $(best "${theirs[@]}")))"
  python3 - "${ours[*]}" "${theirs[*]}" <<'PY'
import sys
sys.path.insert(0, "bench")
import stats
ours, theirs = [float(x) for x in sys.argv[1].split()], [float(x) for x in sys.argv[2].split()]
ratios = sorted(o / t for o, t in zip(ours, theirs))
print("    round by round (interleaved): " + ", ".join("%.3f" % r for r in ratios) + "; median %.3f" % stats.median(ratios))
PY
else
  echo "    parallax $(best "${ours[@]}") ms; PyTorch is not installed (scripts/setup.sh --bench installs python3-torch)"
fi

echo "(b) tracer overhead on the same run (best of $rounds)"
off=() on=()
for r in $(seq $rounds); do
  off+=("$(PARALLAX_TRACE=0 "$parallax" run "$scenario" --set data.steps=$steps --json 2>/dev/null |
           tee "$out/b-trace-off-$r.json" | median_step_ms)")
  # -o: a run without it records no spans
  on+=("$("$parallax" run "$scenario" --set data.steps=$steps --json -o "$out/b-trace-on-$r.trace.json" 2>/dev/null |
          tee "$out/b-trace-on-$r.json" | median_step_ms)")
done
python3 -c "o, n = $(best "${off[@]}"), $(best "${on[@]}"); print('    tracer off %.3f ms, on %.3f ms: %+.2f%% (goal under 1%%)' % (o, n, 100 * (n - o) / o))"
"$build/parallax_tracer_bench" | sed 's/^/    /'  # the cost of one span, without the noise of a run

echo "(c) measured bubble of 2-stage pipelines with equal stages vs (p-1)/(m+p-1) and the simulator (cpu-host)"
for schedule in gpipe 1f1b; do
  for m in 2 4 8; do
    sets=(--set "model={layers: [{kind: linear, in: 2048, out: 2048}, {kind: linear, in: 2048, out: 2048}]}"
          --set data.source=synthetic --set data.batch_size=$((m * 64)) --set data.steps=12 --set hardware=cpu-host
          --set parallel.partition_len=1 --set parallel.chunks=$m --set parallel.schedule=$schedule)
    trace="$out/c-$schedule-m$m.trace.json"
    "$parallax" run "${sets[@]}" -o "$trace" >/dev/null 2>&1
    simulated=$("$parallax" simulate "${sets[@]}" --json | tee "$out/c-$schedule-m$m.simulate.json" |
                python3 -c 'import json,sys; print(json.load(sys.stdin)["bubble_fraction"])')
    python3 - "$trace" $m $schedule "$simulated" <<'PY'
import json, sys
from collections import defaultdict
trace, m, schedule, simulated = json.load(open(sys.argv[1])), int(sys.argv[2]), sys.argv[3], float(sys.argv[4])
p = 2
fractions = []
by_step = defaultdict(list)
for e in trace["traceEvents"]:
    if e["ph"] == "X":
        by_step[e["args"]["step"]].append(e)
for step, events in by_step.items():
    if step < 4:
        continue  # warm-up
    start = min(e["ts"] for e in events)
    end = max(e["ts"] + e["dur"] for e in events)
    for rank in range(p):
        busy = sum(e["dur"] for e in events if e["pid"] == rank and e["tid"] == 0)
        fractions.append(1 - busy / (end - start))
measured = sum(fractions) / len(fractions)
print("    %-5s m=%d: measured %.3f, formula %.3f, simulated %.3f" % (schedule, m, measured, (p - 1) / (m + p - 1), simulated))
PY
  done
done
