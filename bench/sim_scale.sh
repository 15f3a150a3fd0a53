#!/usr/bin/env bash
# The simulator's own speed (docs/simulator.md, "Speed"): parallax_sim_bench's 1,024-rank 1F1B step
# (`--step --repeat 9`, three times in a row: this VM's speed moves between phases that last minutes,
# so one figure is not enough) and its scale cases (`--scale`: each case a first simulation in its own
# process, up to 131,072 ranks; the mixed step's 1,024 -> 8,192-rank ratio over five alternated
# processes each).
#
#   bash bench/sim_scale.sh [PARALLAX] [--out DIR]      (default: build/parallax; parallax_sim_bench
#                                                         is taken from beside it)
#
# Output goes to DIR (--out, else OUT, else a new bench/results/sim-scale-cpu-DATE): summary.txt (what
# the bench printed), log.txt, machine.txt. Takes about 15 s.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
bench_begin sim-scale "$0" "$@"
sim_bench="$(dirname "$parallax")/parallax_sim_bench"
[ -x "$sim_bench" ] || { echo "sim_scale.sh: no parallax_sim_bench beside $parallax" >&2; exit 2; }
for i in 1 2 3; do
  echo "== the 1,024-rank step, run $i of 3: parallax_sim_bench --step --repeat 9"
  "$sim_bench" --step --repeat 9
done
echo
echo "== parallax_sim_bench --scale"
"$sim_bench" --scale
