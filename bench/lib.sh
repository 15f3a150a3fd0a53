# Shared by the bench scripts: where a run's raw output goes, and what it was measured on.
# Every figure in README.md and docs/ names the folder under bench/results/ it comes from
# (scripts/check_doc_results.py checks that the folder exists), so a bench keeps its per-run files
# there, the machine it ran on and what it printed, instead of in a temporary folder.
#
# Source it before the script changes directory, so that a relative --out or OUT is taken from
# where the user ran the script:
#   source "$(dirname "$0")/lib.sh"
#   cd "$(dirname "$0")/.."
#   out=$(bench_out_dir pipelining "$out_flag")   # --out DIR, else OUT, else bench/results/...
#   bench_machine "$out" "$0" "$@"
#   bench_tee "$out"                               # stdout to summary.txt, stderr to log.txt
#   trap bench_tee_close EXIT

bench_caller_pwd=${bench_caller_pwd:-$PWD}
bench_root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)

# bench_out_dir NAME [DIR]: makes and prints the folder a run writes into. DIR (from --out) wins,
# then the environment's OUT; a relative one is taken from where the script was run. Without
# either, bench/results/NAME-cpu-DATE (the UTC date), with -2, -3, ... added when that folder
# exists: a run never writes into committed results unless told to.
bench_out_dir() {
  local name="$1" dir="${2:-${OUT:-}}"
  if [ -n "$dir" ]; then
    case "$dir" in /*) ;; *) dir="$bench_caller_pwd/$dir" ;; esac
  else
    local base
    base="$bench_root/bench/results/$name-cpu-$(date -u +%F)"
    dir="$base"
    local n=2
    while [ -e "$dir" ]; do
      dir="$base-$n"
      n=$((n + 1))
    done
  fi
  mkdir -p "$dir" || return 1
  (cd "$dir" && pwd)
}

# bench_args SCRIPT ARGS...: reads `SCRIPT [PATH...] [--out DIR]` into the globals `bench_paths`
# (the PATHs, an array) and `out` (the --out value, or empty); --help prints the script's header.
# Bad arguments exit 2 naming the script.
bench_args() {
  local script="$1" name
  name=$(basename "$script")
  shift
  bench_paths=() out=""
  while [ $# -gt 0 ]; do
    case "$1" in
      --out) [ $# -ge 2 ] || { echo "$name: --out needs a folder" >&2; exit 2; }; out=$2; shift 2 ;;
      -h|--help) bench_help "$script"; exit 0 ;;
      -*) echo "$name: unknown flag $1" >&2; exit 2 ;;
      *) bench_paths+=("$1"); shift ;;
    esac
  done
}

# bench_parallax_args SCRIPT ARGS...: for a bench that runs one parallax binary, `SCRIPT
# [PARALLAX] [--out DIR]`: the globals `parallax` (default build/parallax, which must be
# executable) and `out`.
bench_parallax_args() {
  bench_args "$@"
  parallax="${bench_paths[0]:-$bench_root/build/parallax}"
  [[ -x "$parallax" ]] || { echo "$(basename "$1"): no parallax binary at $parallax (build first, or pass its path)" >&2; exit 2; }
}

# bench_build_args SCRIPT ARGS...: for a bench that runs several binaries of one build, `SCRIPT
# [BUILD_DIR] [--out DIR]`: the globals `build` (default build, relative to where the script has
# changed to; it must hold an executable parallax) and `out`.
bench_build_args() {
  bench_args "$@"
  build="${bench_paths[0]:-build}"
  [[ -x "$build/parallax" ]] || { echo "$(basename "$1"): no $build/parallax (build first, or pass the build folder)" >&2; exit 2; }
}

# bench_machine DIR [COMMAND...]: writes DIR/machine.txt: the CPU (model name, family, model),
# its cores, the commit and whether the tree had uncommitted changes, the date in UTC, the kernel,
# and the command that made the folder.
bench_machine() {
  local dir="$1"
  shift
  local commit="unknown" tree="unknown"
  if commit=$(git -C "$bench_root" rev-parse --short HEAD 2>/dev/null); then
    # Untracked files do not count: the results folder being written is one.
    if [ -z "$(git -C "$bench_root" status --porcelain --untracked-files=no 2>/dev/null)" ]; then
      tree="clean"
    else
      tree="dirty (uncommitted changes to tracked files)"
    fi
  else
    commit="unknown (not a git checkout)"
  fi
  cpuinfo() { grep -m1 "^$1[[:space:]]*:" /proc/cpuinfo 2>/dev/null | cut -d: -f2- | sed 's/^ *//'; }
  {
    echo "date: $(date -u '+%F %T') UTC"
    echo "commit: $commit"
    echo "tree: $tree"
    echo "cpu: $(cpuinfo 'model name')"
    echo "cpu family: $(cpuinfo 'cpu family')"
    echo "model: $(cpuinfo 'model')"
    echo "cores: $(nproc) usable, $(grep -c '^processor' /proc/cpuinfo 2>/dev/null) online"
    echo "kernel: $(uname -srm)"
    [ $# -eq 0 ] || echo "command: $*"
  } >"$dir/machine.txt"
}

# bench_tee DIR: from here on, what the script prints goes to the terminal as before and also to
# DIR/summary.txt (stdout, exactly) and DIR/log.txt (stderr). Call bench_tee_close on exit, so
# that both files are complete when the script returns.
bench_tee() {
  exec 3>&1 4>&2
  exec > >(tee "$1/summary.txt" >&3)
  bench_tee_out_pid=$!
  exec 2> >(tee "$1/log.txt" >&4)
  bench_tee_err_pid=$!
}

bench_tee_close() {
  [ -n "${bench_tee_out_pid:-}" ] || return 0
  exec 1>&3 2>&4
  wait "$bench_tee_out_pid" "$bench_tee_err_pid" 2>/dev/null || true
  bench_tee_out_pid=""
}

# bench_begin NAME SCRIPT ARGS...: the start of a bench that runs one parallax binary: its arguments
# (bench_parallax_args), its output folder (bench_out_dir NAME, into the global `out`), machine.txt,
# and what it prints teed into summary.txt and log.txt until it exits.
bench_begin() {
  local name="$1" script="$2"
  shift 2
  bench_parallax_args "$script" "$@"
  out=$(bench_out_dir "$name" "$out")
  bench_machine "$out" "$script" "$@"
  bench_tee "$out"
  trap bench_tee_close EXIT
}

# bench_python DEFAULT: the Python a bench's PyTorch side runs, as a path that holds after the
# bench changes folder (they run their Python scripts from bench/): PYTHON from the environment,
# taken from where the user ran the bench when relative, else DEFAULT, relative to the repository
# root. A bare command name (python3) is left to PATH.
bench_python() {
  local python="${PYTHON:-}" base="$bench_caller_pwd"
  [ -n "$python" ] || { python=$1; base=$bench_root; }
  case "$python" in
    /*) ;;
    */*) python="$base/$python" ;;
  esac
  echo "$python"
}

# bench_help SCRIPT: prints the script's opening comment, its usage.
bench_help() {
  awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$1"
}

# bench_undisturbed_ms: from `parallax run --json` on stdin, the undisturbed step in ms (bench/stats.py's
# p20 of the steps after a warm-up fifth, as bench/peer.py takes PyTorch's).
bench_undisturbed_ms() {
  python3 -c '
import json, sys
sys.path.insert(0, sys.argv[1])
import stats
steps = json.load(sys.stdin)["steps"]
print("%.4f" % stats.undisturbed([s["step_time_ms"] for s in steps[len(steps) // 5:]]))' "$bench_root/bench"
}

# bench_ratios PEER GOAL "OURS..." "THEIRS...": prints the interleaved rounds' step times of Parallax
# (OURS) against PEER (THEIRS), ms each: the best of each with their ratio against GOAL, and the
# round-by-round ratios with their median.
bench_ratios() {
  python3 - "$bench_root/bench" "$@" <<'PY'
import sys
sys.path.insert(0, sys.argv[1])
import stats
peer, goal = sys.argv[2], sys.argv[3]
ours, theirs = [float(x) for x in sys.argv[4].split()], [float(x) for x in sys.argv[5].split()]
print("    parallax %.3f ms, %s %.3f ms, best of each: ratio %.3f (goal <= %s)" % (min(ours), peer, min(theirs), min(ours) / min(theirs), goal))
ratios = sorted(o / t for o, t in zip(ours, theirs))
print("    round by round: " + ", ".join("%.3f" % r for r in ratios) + "; median %.3f" % stats.median(ratios))
PY
}
