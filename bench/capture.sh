#!/usr/bin/env bash
# Runs one command that prints figures and keeps its raw output as the other benches do, for the
# figures that come from one binary's own bench mode rather than from a script:
#   bench/capture.sh NAME [--out DIR] -- COMMAND [ARGS...]      (COMMAND runs from the repository root)
# e.g. bench/capture.sh gui -- env QT_QPA_PLATFORM=offscreen build/parallax_gui_bench --chunks 512
#      bench/capture.sh kineto -- build/parallax_sim_bench --kineto
# The output goes to DIR (--out, else the environment's OUT, else a new bench/results/NAME-cpu-DATE):
# machine.txt (CPU, cores, commit, date, the command), summary.txt (its stdout), log.txt (its
# stderr). Exits with the command's status.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
name="" dir=""
while [ $# -gt 0 ] && [ "$1" != "--" ]; do
  case "$1" in
    --out) [ $# -ge 2 ] || { echo "capture.sh: --out needs a folder" >&2; exit 2; }; dir=$2; shift 2 ;;
    -h|--help) bench_help "$0"; exit 0 ;;
    -*) echo "capture.sh: unknown flag $1" >&2; exit 2 ;;
    *) [ -z "$name" ] || { echo "capture.sh: one NAME only (got $name and $1)" >&2; exit 2; }; name=$1; shift ;;
  esac
done
[ -n "$name" ] || { echo "capture.sh: give a NAME for the results folder (bench/capture.sh --help)" >&2; exit 2; }
[ $# -ge 2 ] || { echo "capture.sh: give the command after -- (bench/capture.sh --help)" >&2; exit 2; }
shift
cd "$(dirname "$0")/.."
out=$(bench_out_dir "$name" "$dir")
bench_machine "$out" "$0" "$name" -- "$@"
status=0
"$@" >"$out/summary.txt" 2>"$out/log.txt" || status=$?
cat "$out/summary.txt"
echo "capture.sh: the command's output is in $out (exit $status)" >&2
exit $status
