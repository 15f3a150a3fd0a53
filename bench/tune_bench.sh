#!/usr/bin/env bash
# The tuner's figures (issue 11), on this machine:
#  1. speed: build/parallax_tune_bench (a 1,024-rank job's default space, exhaustive and pruned;
#     every shipped scenario's full default space, and its pick against PyTorch's defaults);
#  2. the pick against reality for 2-rank jobs: calibrates this machine, measures an exhaustive
#     grid (every configuration of the space below, REPEATS runs each, round-robin), then runs
#     `parallax tune --validate 3` and prints where its pick lands in the measured grid.
#
# Usage: bench/tune_bench.sh [BUILD_DIR] [--out DIR]   (environment: STEPS=200 REPEATS=3 SCENARIOS="...")
# The grid's space: data x pipeline of 2 ranks, gpipe and 1f1b, chunks 1-16, the balanced split,
# the scenario's precision, checkpointing and buckets (as `parallax tune` searches with the flags
# in $space below). The grid's measured step is the median over the runs (bench/stats.py's,
# interpolated as timeline/step_statistic.hpp's) of each run's undisturbed step.
# The raw output goes to DIR (--out, else the environment's OUT, else a new
# bench/results/tune-cpu-DATE): the calibrated profile (here.yaml); per scenario, tune's whole
# space (NAME-all.json), the grid (NAME-grid.txt), each grid run's validate JSON
# (NAME-validate-REPEAT-I.json) and its figures (NAME-measured.txt), tune --validate's JSON
# (NAME-tune.json); machine.txt (CPU, cores, commit, date); summary.txt, what this printed;
# log.txt, its stderr.
set -euo pipefail
args=("$@")
source "$(dirname "$0")/lib.sh"
cd "$(dirname "$0")/.."
bench_build_args "$0" "$@"
bin="$build/parallax"
steps="${STEPS:-200}"
repeats="${REPEATS:-3}"
scenarios="${SCENARIOS:-scenarios/mlp-fashion-mnist-pipeline2.yaml scenarios/accuracy/transformer-pipeline2.yaml}"
out=$(bench_out_dir tune "$out")
rm -f "$out"/*-measured.txt "$out"/*-validate-*.json  # an earlier run's, when --out names a folder again
bench_machine "$out" "$0" "${args[@]}"
bench_tee "$out"
trap bench_tee_close EXIT

"$build/parallax_tune_bench"

echo
echo "calibrating this machine ($(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs))" >&2
# The default set (every shipped CPU scenario and the accuracy set), as the main job calibrates:
# its models of different sizes let calibrate fit compute in a run by size.
"$bin" calibrate --quick -o "$out/here.yaml" 2>&1 | grep -E "wrote" >&2
space=(--search parallel.chunks=1,2,4,8,16 --search parallel.schedule=gpipe,1f1b --search parallel.partition_len=balanced
       --fix parallel.precision --fix parallel.activation_checkpointing --fix parallel.bucket_cap_mb
       --fix parallel.first_bucket_mb)

for scenario in $scenarios; do
  name="$(basename "$scenario" .yaml)"
  # Every configuration of the space, as --set flags (a top K as large as the space prunes nothing).
  "$bin" tune "$scenario" --set hardware="$out/here.yaml" "${space[@]}" --top 100000 --json 2>/dev/null >"$out/$name-all.json"
  python3 - "$out/$name-all.json" >"$out/$name-grid.txt" <<'PY'
import json, sys
for r in json.load(open(sys.argv[1]))["ranked"]:
    # Values without spaces ("[2,2]"): the shell splits the line into --set flags at spaces.
    print(" ".join("%s=%s" % (k, v.replace(" ", "")) for k, v in sorted(r["overrides"].items())) or "-")
PY
  count=$(wc -l <"$out/$name-grid.txt")
  echo "$name: measuring the grid of $count configurations, $repeats x $steps steps each" >&2
  for rep in $(seq "$repeats"); do
    i=0
    while read -r line; do
      i=$((i + 1))
      sets=(--set "data.steps=$steps")
      [ "$line" != "-" ] && for kv in $line; do sets+=(--set "$kv"); done
      "$bin" validate "$scenario" "${sets[@]}" --profile "$out/here.yaml" --steps "$steps" --json 2>/dev/null |
        tee "$out/$name-validate-$rep-$i.json" | python3 -c "import json,sys; c=json.load(sys.stdin)['configurations'][0]; print('$i', c['predicted_ms'], c['measured_ms'])" \
        >>"$out/$name-measured.txt"
      printf "  [%d/%d] %s\n" "$(( (rep - 1) * count + i ))" "$(( repeats * count ))" "$line" >&2
    done <"$out/$name-grid.txt"
  done
  "$bin" tune "$scenario" --set hardware="$out/here.yaml" "${space[@]}" --validate 3 --validate-steps "$steps" --json \
    2>/dev/null >"$out/$name-tune.json"
  python3 - "$name" "$out/$name-grid.txt" "$out/$name-measured.txt" "$out/$name-tune.json" <<'PY'
import json, sys
sys.path.insert(0, "bench")
import stats
name, grid_f, measured_f, tune_f = sys.argv[1:]
grid = [l.strip() for l in open(grid_f)]
runs = {}
for l in open(measured_f):
    i, p, m = l.split()
    runs.setdefault(int(i) - 1, []).append((float(p), float(m)))
rows = []
for i, line in enumerate(grid):
    ms = [m for _, m in runs[i]]
    med = stats.median(ms)
    rows.append((line, runs[i][0][0], med, (max(ms) - min(ms)) / med))
best = min(rows, key=lambda r: r[2])
t = json.load(open(tune_f))
def flags(overrides):
    return " ".join("%s=%s" % (k, v.replace(" ", "")) for k, v in sorted(overrides.items())) or "-"
pick = flags(t["best"]["overrides"])
print("\n%s: the measured grid (median of the runs; spread = (max - min) / median)" % name)
print("| configuration | predicted ms | measured ms | spread |")
print("|---|---:|---:|---:|")
for line, p, m, s in sorted(rows, key=lambda r: r[2]):
    mark = " **tune's pick**" if line == pick else ""
    print("| %s%s | %.3f | %.3f | %.0f%% |" % (line, mark, p, m, 100 * s))
picked = [r for r in rows if r[0] == pick]
print("\ntune --validate 3 ran:")
for v in t["validated"]:
    print("  %-70s predicted %.3f ms, measured %.3f ms" % (flags(v["overrides"]), v["predicted_step_ms"], v["measured_step_ms"]))
if picked:
    print("pick %s: %.3f ms in the grid, %+.1f%% from the grid's best (%s, %.3f ms)" % (
        pick, picked[0][2], 100 * (picked[0][2] - best[2]) / best[2], best[0], best[2]))
print("pick's step against PyTorch's defaults (predicted): %.2fx" % (t["speedup_vs_pytorch_defaults"] or float("nan")))
PY
done
