#!/usr/bin/env bash
# Fuzzes Parallax's input parsers with libFuzzer under ASan and UBSan: scenarios with --set
# overrides, hardware profiles, schedule CSVs, traces (Parallax, Kineto, legacy PyTorch, any
# Chrome trace) and gzipped traces. Configures a separate build (build-fuzz, clang, only the
# LibTorch-free parsers), seeds each target from the shipped files, runs each for RUNS executions
# (or FUZZ_SECONDS seconds, whichever ends first) and prints executions, exec/s, wall time and
# crashes per target. An InputError is the parser rejecting bad input; a crash, a sanitizer
# report, a timeout or any other exception is a finding, kept under WORK/crashes.
#
#   scripts/setup.sh --fuzz              # once: clang and libFuzzer
#   bench/fuzz.sh                        # 10 M runs per target, one target at a time
#   RUNS=100000 bench/fuzz.sh            # a quick pass
#   JOBS=2 TARGETS="trace trace_gzip" bench/fuzz.sh
#
# Environment: RUNS (10000000), FUZZ_SECONDS (0 = no limit), MAX_LEN (8192 bytes per input),
# TIMEOUT (10: seconds on one input that count as a hang; libFuzzer measures wall time, so raise
# it when the fuzzers may be paused, e.g. with SIGSTOP while timing runs share the machine),
# JOBS (targets run at once, 1), TARGETS, BUILD (build-fuzz), WORK (a new temporary folder:
# corpora, logs, crashes; kept; an existing WORK's corpora are fuzzed further), OUT (unset: a
# folder, e.g. bench/results/fuzz-cpu-DATE, that gets what this prints, summary.txt, with the
# machine it ran on, machine.txt, as the other benches keep theirs; the corpora stay in WORK).
set -euo pipefail
source "$(dirname "$0")/lib.sh"
cd "$(dirname "$0")/.."
if [ -n "${OUT:-}" ]; then
  out=$(bench_out_dir fuzz "$OUT")
  bench_machine "$out" "FUZZ_SECONDS=${FUZZ_SECONDS:-0} RUNS=${RUNS:-10000000}" bench/fuzz.sh "$@"
  bench_tee "$out"
  trap bench_tee_close EXIT
fi

RUNS=${RUNS:-10000000}
FUZZ_SECONDS=${FUZZ_SECONDS:-0}
MAX_LEN=${MAX_LEN:-8192}
TIMEOUT=${TIMEOUT:-10}
JOBS=${JOBS:-1}
TARGETS=${TARGETS:-"scenario hardware schedule_csv trace trace_gzip"}
BUILD=${BUILD:-build-fuzz}
WORK=${WORK:-$(mktemp -d -t parallax-fuzz.XXXXXX)}
FIXTURES=../shared/fixtures

cmake -S . -B "$BUILD" -DPARALLAX_FUZZ=ON -DCMAKE_CXX_COMPILER=clang++ -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
for t in $TARGETS; do nice -n 10 cmake --build "$BUILD" -j2 --target "fuzz_$t" >/dev/null; done

# Seeds: copies of the shipped files and the small hand-written ones in tests/fuzz/seeds.
seed() {  # seed TARGET FILE...
  mkdir -p "$WORK/corpus/$1"
  local target=$1
  shift
  for f in "$@"; do [ -f "$f" ] && cp "$f" "$WORK/corpus/$target/$(echo "$f" | tr / _)"; done
  return 0
}
seed scenario scenarios/*.yaml scenarios/accuracy/*.yaml tests/fuzz/seeds/scenario/*
seed hardware scenarios/hardware/*.yaml tests/fuzz/seeds/hardware/*
seed schedule_csv tests/fuzz/seeds/schedule_csv/*
seed trace tests/fuzz/seeds/trace/*
if [ -d "$FIXTURES/kineto" ]; then
  # The real Kineto traces are 120 kB gzipped; their header and first events make small seeds.
  for f in "$FIXTURES"/kineto/*.json.gz; do
    python3 - "$f" "$WORK/corpus/trace/$(basename "$f" .json.gz)" <<'EOF'
import gzip, json, sys
root = json.load(gzip.open(sys.argv[1]))
events = root.pop("traceEvents")
for n, cut in ((12, 0), (40, 200)):
    root["traceEvents"] = events[cut:cut + n]
    open(f"{sys.argv[2]}-{cut}.json", "w").write(json.dumps(root))
EOF
  done
fi
mkdir -p "$WORK/corpus/trace_gzip"
for f in "$WORK"/corpus/trace/*; do gzip -c "$f" > "$WORK/corpus/trace_gzip/$(basename "$f").gz"; done

run() {  # run TARGET: prints "target execs exec/s seconds crashes"
  local t=$1 start end
  mkdir -p "$WORK/crashes/$t"
  start=$(date +%s.%N)
  # -timeout: an input taking over TIMEOUT s is a hang. Exit status is non-zero on a finding.
  nice -n 10 "$BUILD/fuzz_$t" -runs="$RUNS" -max_total_time="$FUZZ_SECONDS" -max_len="$MAX_LEN" -timeout="$TIMEOUT" \
    -rss_limit_mb=2048 -print_final_stats=1 -artifact_prefix="$WORK/crashes/$t/" "$WORK/corpus/$t" \
    >"$WORK/$t.log" 2>&1 || true
  end=$(date +%s.%N)
  local execs rate crashes
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$WORK/$t.log" | tail -1)
  rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$WORK/$t.log" | tail -1)
  # slow-unit-* files are inputs over 10 s of wall time (a paused fuzzer writes them too), not findings.
  crashes=$(find "$WORK/crashes/$t" -type f ! -name 'slow-unit-*' | wc -l)
  printf '%-14s %12s %9s %8.0f %8s\n' "$t" "${execs:-?}" "${rate:-?}" "$(echo "$end - $start" | bc)" "$crashes"
}

# ASan records an allocation stack for every malloc, which took a quarter of each run here; a
# finding is re-run by hand (build-fuzz/fuzz_TARGET CRASH_FILE) with full stacks. A smaller
# quarantine keeps each fuzzer's memory near 100 MB instead of 500 MB. Your ASAN_OPTIONS win.
export ASAN_OPTIONS=${ASAN_OPTIONS:-malloc_context_size=0:quarantine_size_mb=16}

echo "work folder: $WORK"
printf '%-14s %12s %9s %8s %8s\n' target execs exec/s seconds crashes
export -f run
export WORK BUILD RUNS FUZZ_SECONDS MAX_LEN TIMEOUT ASAN_OPTIONS
printf '%s\n' $TARGETS | xargs -P "$JOBS" -I{} bash -c 'run {}'
# A target that ran no input (it did not start, or died before libFuzzer's statistics) found nothing
# because it tested nothing: that fails too.
silent=0
for t in $TARGETS; do
  if ! grep -q '^stat::number_of_executed_units: *[1-9]' "$WORK/$t.log" 2>/dev/null; then
    echo "fuzz_$t ran no input: see $WORK/$t.log"
    silent=1
  fi
done
if [ -n "$(find "$WORK/crashes" -type f ! -name 'slow-unit-*')" ]; then
  echo "findings (reproduce with $BUILD/fuzz_TARGET FILE):"
  find "$WORK/crashes" -type f ! -name 'slow-unit-*'
  exit 1
fi
exit $silent
