#!/usr/bin/env bash
# Reading a large trace: the wall time and peak memory (GNU time's maximum resident set) of
# `parallax trace` and `parallax report --predicted` on the predicted trace of
# scenarios/llama-3.1-405b-3072xH100.yaml (384 tensor groups, 1.3M events, about 180 MB), and of
# `parallax trace` on a PyTorch profiler (Kineto) trace of about 106 MB (`kineto`: the shared
# fixture ../shared/fixtures/kineto/sampled_rank-0.json.gz, its 4,811 events repeated 60 times,
# each copy after the one before), RUNS times each (default 3). With BASE=ANOTHER_PARALLAX in the environment, that binary runs the same
# commands in turn with this one (interleaved, this one first in each round), and each round's
# ratios are printed; BASE_NAME (default "BASE") says what it is in the output (e.g. the commit it
# was built at).
#
#   bash bench/trace_read.sh [PARALLAX] [--out DIR]      (default: build/parallax)
#
# Output goes to DIR (--out, else OUT, else a new bench/results/trace-read-cpu-DATE): runs.txt (one
# line per command: round, this or base, command, wall s, peak MB), summary.txt (what the bench printed),
# log.txt, machine.txt. The traces are remade by each run and not kept. Takes about two minutes
# (with an old BASE whose Kineto reading was quadratic, 28 s a Kineto run more).
set -euo pipefail
source "$(dirname "$0")/lib.sh"
bench_begin trace-read "$0" "$@"
gnu_time=/usr/bin/time
[ -x "$gnu_time" ] || { echo "trace_read.sh: GNU time is missing (apt-get install time)" >&2; exit 2; }
base="${BASE:-}"
[ -z "$base" ] || [ -x "$base" ] || { echo "trace_read.sh: BASE=$base is not an executable" >&2; exit 2; }
runs="${RUNS:-3}"
work="$(mktemp -d)"
trap 'bench_tee_close; rm -rf "$work"' EXIT
cd "$bench_root"
"$parallax" simulate scenarios/llama-3.1-405b-3072xH100.yaml -o "$work/trace.json" > /dev/null 2> "$work/simulate.txt" || { cat "$work/simulate.txt" >&2; exit 1; }
echo "trace: scenarios/llama-3.1-405b-3072xH100.yaml predicted, $(( $(stat -c %s "$work/trace.json") / 1000000 )) MB"
fixture="$bench_root/../shared/fixtures/kineto/sampled_rank-0.json.gz"
[ -f "$fixture" ] || { echo "trace_read.sh: $fixture is missing (the shared fixtures)" >&2; exit 2; }
python3 - "$fixture" "$work/kineto.json" <<'PY'
import gzip, json, sys
trace = json.load(gzip.open(sys.argv[1]))
spans = [e for e in trace["traceEvents"] if e.get("ph") != "M"]
names = [e for e in trace["traceEvents"] if e.get("ph") == "M"]  # Kineto writes these last
first = min(e["ts"] for e in spans)
length = max(e["ts"] + e.get("dur", 0) for e in spans) - first + 1000
events = []
for copy in range(60):
    for e in spans:
        e = dict(e, ts=e["ts"] + copy * length)
        if e.get("name", "").startswith("ProfilerStep#"):
            e["name"] = "ProfilerStep#%d" % (copy * 1000 + int(e["name"][13:]))
        events.append(e)
trace["traceEvents"] = events + names
json.dump(trace, open(sys.argv[2], "w"))
PY
echo "kineto: ${fixture#"$bench_root"/}'s events 60 times over, $(( $(stat -c %s "$work/kineto.json") / 1000000 )) MB"
base_name="${BASE_NAME:-BASE}"
echo "this: ${parallax#"$bench_root"/}${base:+; $base_name beside it}"

# Prints "WALL_S PEAK_MB" of one command.
measure() {
  "$gnu_time" -f "%e %M" -o "$work/time.txt" "$@" > /dev/null 2> "$work/stderr.txt" || { cat "$work/stderr.txt" >&2; exit 1; }
  awk '{ printf "%s %.0f\n", $1, $2 / 1024 }' "$work/time.txt"
}
: > "$out/runs.txt"
for round in $(seq 1 "$runs"); do
  for what in trace report kineto; do
    for label in this ${base:+base}; do
      bin="$parallax"
      [ "$label" = this ] || bin="$base"
      case "$what" in
        trace) figures=$(measure "$bin" trace "$work/trace.json") ;;
        report) figures=$(measure "$bin" report --predicted "$work/trace.json" -o "$work/report.html") ;;
        kineto) figures=$(measure "$bin" trace "$work/kineto.json") ;;
      esac
      echo "$round $label $what $figures" | tee -a "$out/runs.txt"
    done
  done
done
echo
python3 - "$out/runs.txt" "${base:+$base_name}" <<'PY'
import sys, statistics
rows = [l.split() for l in open(sys.argv[1]) if l.strip()]
ours, base, name = "this", "base" if sys.argv[2] else "", sys.argv[2]
for what in ("trace", "report", "kineto"):
    def of(binary, col):
        return [float(r[3 + col]) for r in rows if r[1] == binary and r[2] == what]
    line = f"{what:6s} this: median {statistics.median(of(ours, 0)):.2f} s, {statistics.median(of(ours, 1)):.0f} MB peak"
    if base:
        line += f"; {name}: median {statistics.median(of(base, 0)):.2f} s, {statistics.median(of(base, 1)):.0f} MB"
        t = [a / b for a, b in zip(of(ours, 0), of(base, 0))]
        m = [a / b for a, b in zip(of(ours, 1), of(base, 1))]
        line += f"; this / {name} per round: time {', '.join('%.2f' % x for x in t)}, memory {', '.join('%.2f' % x for x in m)}"
    print(line)
PY
