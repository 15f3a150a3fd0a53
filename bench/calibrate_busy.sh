#!/usr/bin/env bash
# What calibrate measures with other programs busy on the cores, against the same calibration on an
# idle machine: `parallax calibrate --quick` of one small scenario (scenarios/accuracy/mlp-pipeline2.yaml,
# quick to probe), first idle, then with BUSY threads of another program spinning (`yes`, in its own
# process group; default: as many as the cores). Run after building, on an otherwise idle machine:
#   bash bench/calibrate_busy.sh [parallax] [--out DIR]
# Prints each calibration's busy-machine warnings, Gloo line and in-run lines, and its seconds.
# The raw output goes to DIR (--out, else OUT, else a new bench/results/calibrate-busy-cpu-DATE):
# idle.yaml and busy.yaml (the profiles), idle.log and busy.log (calibrate's stderr); machine.txt;
# summary.txt, what this printed; log.txt, its stderr.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
cd "$(dirname "$0")/.."
bench_begin calibrate-busy "$0" "$@"
busy="${BUSY:-$(nproc)}"
scenario=scenarios/accuracy/mlp-pipeline2.yaml
spinners=()
stop_spinners() {
  [ ${#spinners[@]} -eq 0 ] || kill "${spinners[@]}" 2>/dev/null || true
  spinners=()
}
trap 'stop_spinners; bench_tee_close' EXIT

calibrate() {  # NAME
  local t0=$SECONDS
  "$parallax" calibrate --quick "$scenario" -o "$out/$1.yaml" 2>"$out/$1.log"
  echo "== $1: $((SECONDS - t0)) s"
  grep -E "warning: this machine is busy|Gloo send call|in a real run|a message \(" "$out/$1.log" | sed 's/^calibrate: /  /'
}

calibrate idle
for _ in $(seq "$busy"); do
  setsid yes >/dev/null &
  spinners+=($!)
done
echo "($busy spinning yes loops started)"
calibrate busy
stop_spinners
