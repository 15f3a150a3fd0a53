#!/usr/bin/env bash
# The HTML report's figures (issue 15), in headless Chromium on this machine: file size, and the
# load time the page measures itself (performance.now() when its script has drawn everything:
# navigation, HTML and JSON parsing, timeline, charts and tables), the median of RUNS loads; with
# Chromium's whole wall time (start-up included) beside it, and that of an empty page for scale.
# Goals: the main job's report under 1 s; a 1,024-rank report under 20 MB and 3 s.
#
# Usage: bench/report_bench.sh [BUILD_DIR] [MAIN_JOB_REPORT] [--out DIR]   (environment: RUNS=5)
#   MAIN_JOB_REPORT defaults to parallax-out/gpipe-transformer-2xT4/report.html (run ./build/parallax
#   first); the 1,024-rank report is made here: gpipe-1b-4xA100 with parallel.data=256.
# Medians are bench/stats.py's (interpolated, as timeline/step_statistic.hpp's).
# The raw output goes to DIR (--out, else the environment's OUT, else a new
# bench/results/report-cpu-DATE): every load's figures (loads.txt: page, load ms, timeline draw
# ms, Chromium's wall s); machine.txt (CPU, cores, commit, date); summary.txt, what this printed
# (each page's size among it); log.txt, its stderr. The pages it makes (an empty one, the 1,024-rank
# report, a few MB) are remade by running it again, so they go with Chromium's profiles.
set -euo pipefail
args=("$@")
source "$(dirname "$0")/lib.sh"
cd "$(dirname "$0")/.."
bench_build_args "$0" "$@"
main_report="${bench_paths[1]:-parallax-out/gpipe-transformer-2xT4/report.html}"
runs="${RUNS:-5}"
command -v chromium >/dev/null || { echo "chromium is missing: scripts/setup.sh --browser" >&2; exit 1; }
out=$(bench_out_dir report "$out")
rm -f "$out/loads.txt"  # an earlier run's, when --out names a folder again
bench_machine "$out" "$0" "${args[@]}"
bench_tee "$out"
# Chromium's profiles and the pages it loads are not output: they go with the script.
profiles="$(mktemp -d)"
trap 'bench_tee_close; rm -rf "$profiles"' EXIT

# Prints "LOAD_MS DRAW_MS WALL_S" for one headless load of $1.
load_once() {
  local profile t0 t1 dom
  profile="$(mktemp -d -p "$profiles")"
  t0=$(date +%s.%N)
  dom=$(chromium --headless --no-sandbox --disable-gpu --disable-quic --no-first-run --disable-background-networking \
        --disable-component-update --disable-sync --user-data-dir="$profile" --window-size=1280,900 \
        --dump-dom "file://$(realpath "$1")" 2>/dev/null)
  t1=$(date +%s.%N)
  local load draw
  load=$(grep -o 'data-load-ms="[0-9]*"' <<<"$dom" | grep -o '[0-9]*' || echo "-")
  draw=$(grep -o 'data-draw-ms="[0-9.]*"' <<<"$dom" | grep -o '[0-9.]*' || echo "-")
  if grep -q 'id="errors"' <<<"$dom" && ! grep -q '<pre id="errors" hidden="">' <<<"$dom"; then echo "page errors in $1" >&2; fi
  echo "$load $draw $(echo "$t1 - $t0" | bc)"
}

median() {  # of the numbers on stdin; "-" when there are none (a page that did not say)
  python3 -c '
import sys
sys.path.insert(0, "bench")
import stats
v = []
for word in sys.stdin.read().split():
    try:
        v.append(float(word))
    except ValueError:
        pass
print("%g" % stats.median(v) if v else "-")'
}

report() {
  local name="$1" page="$2" loads=() draws=() walls=()
  for _ in $(seq "$runs"); do
    read -r l d w < <(load_once "$page")
    loads+=("$l"); draws+=("$d"); walls+=("$w")
    printf "%s\t%s\t%s\t%s\n" "$name" "$l" "$d" "$w" >>"$out/loads.txt"
  done
  printf "%-34s %9.2f MB   load %5s ms   timeline draw %6s ms   chromium wall %5.2f s   (median of %d)\n" "$name" \
    "$(echo "$(stat -c %s "$page") / 1048576" | bc -l)" "$(printf '%s\n' "${loads[@]}" | median)" \
    "$(printf '%s\n' "${draws[@]}" | median)" "$(printf '%s\n' "${walls[@]}" | median)" "$runs"
}

echo "<!doctype html><title>empty</title><body>empty" >"$profiles/empty.html"
"$build/parallax" report scenarios/gpipe-1b-4xA100.yaml --set parallel.data=256 -o "$profiles/1024.html" 2>/dev/null
echo "$(nproc) cores, $(chromium --version 2>/dev/null)"
report "empty page (Chromium start-up)" "$profiles/empty.html"
if [ -f "$main_report" ]; then report "main job ($main_report)" "$main_report"
else echo "no $main_report: run ./build/parallax first (the main job)"; fi
report "1,024 ranks (gpipe-1b-4xA100 x256)" "$profiles/1024.html"
