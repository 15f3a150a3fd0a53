#!/usr/bin/env bash
# The tuner at scale (issue 55's goal: >= 10,000 configurations of a 3,072-GPU Llama 3.1 405B job,
# context parallelism included, in <= 60 s on a 2-core machine): `parallax tune` on
# scenarios/llama-3.1-405b-3072xH100.yaml with --time-limit 60, and what it got through: simulated,
# pruned by the lower bound, over memory, and the pick.
#
#   bash bench/tune_scale.sh [PARALLAX] [--out DIR]      (default: build/parallax)
#
# Output goes to DIR (--out, else OUT, else a new bench/results/tune-scale-cpu-DATE): tune.json (tune's
# --json), summary.txt, log.txt (tune's progress), machine.txt.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
here="$(cd "$(dirname "$0")" && pwd)"
bench_begin tune-scale "$0" "$@"
scenario="$here/../scenarios/llama-3.1-405b-3072xH100.yaml"
start=$(date +%s.%N)
"$parallax" tune "$scenario" --time-limit 60 --json >"$out/tune.json"
end=$(date +%s.%N)
python3 - "$out/tune.json" "$start" "$end" <<'PY'
import json, sys
j = json.load(open(sys.argv[1]))
total = float(sys.argv[3]) - float(sys.argv[2])
print(f"Llama 3.1 405B on 3,072 H100s, default space: {j['configs_total']:,} configurations "
      f"({j['configs_invalid']:,} invalid besides)")
print(f"in the search's {j['wall_s']:.1f} s (--time-limit 60): simulated {j['configs_evaluated']:,}, pruned by their bound "
      f"{j['configs_pruned']:,}, over memory {j['configs_over_memory']:,}; stopped: {j.get('stopped') or 'no'}")
print(f"the process, with the full simulations of the ranked rows after the search: {total:.1f} s")
print(f"pick: {j['best']['predicted_step_ms'] / 1e3:.3f} s a step ({j['speedup_vs_given']:.2f}x the scenario as given): "
      + ", ".join(f"{k}={v}" for k, v in sorted(j['best']['overrides'].items())))
PY
