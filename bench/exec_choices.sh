#!/usr/bin/env bash
# The figures behind the executor's design choices (docs/executor.md), measured on this machine:
#   bench/exec_choices.sh [build-folder] [--out DIR]      ROUNDS=N (default 4), STEPS=N (default 200),
#                                                         PARTS="d e f g" (the parts to run, default all)
# (d) ranks bound to cores or not: the accuracy set's transformer pipeline (2 chunks), MLP pipeline
#     (4 chunks) and DDP MLP (batch 32), each run's undisturbed step (p20 after a warm-up fifth),
#     bound and with PARALLAX_CPU_AFFINITY=off, alternated over ROUNDS rounds;
# (e) what a rank's memory figures measure: the last stage of a 2-stage MLP (the accuracy set's, hidden
#     2048, micro-batch 128) under 1F1B at 4 and 32 micro-batches: its live-tensor peak
#     (`measured_mb`, what `run` reports) beside the plan's estimate and the process's peak
#     resident size (`peak_rss_mb`);
# (f) recompute's memory: one CPU stage of 12 transformer blocks (hidden 256, sequence 128, batch
#     16, 4 micro-batches), the live-tensor peak with `activation_checkpointing: layer`, `stage` and
#     none, beside the plan's estimate;
# (g) a lost rank under an external launcher: four ranks of a data 2 x pipeline 2 job started by
#     hand (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT, --timeout 5), rank 2 killed with SIGKILL or
#     stopped with SIGSTOP once it trains; seconds until every other rank has exited, and their
#     exit codes (3 times each).
# The raw output goes to DIR (--out, else the environment's OUT, else a new
# bench/results/exec-choices-cpu-DATE): each run's `parallax run --json` (d-*.json, e-*.json,
# f-*.json), (g)'s ranks' stderr (g-*/rank-R.err); machine.txt; summary.txt, what this printed;
# log.txt, its stderr.
set -euo pipefail
args=("$@")
source "$(dirname "$0")/lib.sh"
cd "$(dirname "$0")/.."
bench_build_args "$0" "$@"
parallax="$build/parallax"
rounds=${ROUNDS:-4}
steps=${STEPS:-200}
parts=" ${PARTS:-d e f g} "
part() { [[ $parts == *" $1 "* ]]; }
for p in $parts; do
  [[ " d e f g " == *" $p "* ]] || { echo "exec_choices.sh: PARTS names d, e, f or g (got '$p')" >&2; exit 2; }
done
out=$(bench_out_dir exec-choices "$out")
bench_machine "$out" "$0" "${args[@]}"
bench_tee "$out"
trap bench_tee_close EXIT
[[ $parts == " d e f g " ]] || echo "PARTS: only${parts% }"

# field RANK KEY < run --json: that rank's memory figure.
field() { python3 -c 'import json,sys; print("%.1f" % next(m[sys.argv[2]] for m in json.load(sys.stdin)["memory"] if m["rank"] == int(sys.argv[1])))' "$@"; }
range() { python3 -c 'import sys; v = sorted(float(x) for x in sys.argv[1:]); print("%.2f-%.2f ms (median %.2f)" % (v[0], v[-1], v[len(v) // 2]))' "$@"; }

if part d; then
echo "(d) ranks bound to cores or not: each run's undisturbed step, $rounds alternated rounds of $steps steps"
declare -A cases=(
  [transformer-pipeline2]="scenarios/accuracy/transformer-pipeline2.yaml --set parallel.chunks=2"
  [mlp-pipeline2]="scenarios/accuracy/mlp-pipeline2.yaml --set parallel.chunks=4"
  [mlp-ddp2]="scenarios/accuracy/mlp-ddp2.yaml --set data.batch_size=32"
)
for name in transformer-pipeline2 mlp-pipeline2 mlp-ddp2; do
  bound=() unbound=()
  for r in $(seq "$rounds"); do
    # shellcheck disable=SC2086 # the case's words are the scenario and its --set flags
    bound+=("$("$parallax" run ${cases[$name]} --set data.steps=$steps --json 2>>"$out/log.txt" |
              tee "$out/d-$name-bound-$r.json" | bench_undisturbed_ms)")
    # shellcheck disable=SC2086
    unbound+=("$(PARALLAX_CPU_AFFINITY=off "$parallax" run ${cases[$name]} --set data.steps=$steps --json 2>>"$out/log.txt" |
                tee "$out/d-$name-unbound-$r.json" | bench_undisturbed_ms)")
  done
  printf '    %-22s bound %s, unbound %s\n' "$name" "$(range "${bound[@]}")" "$(range "${unbound[@]}")"
done
fi

if part e; then
echo "(e) the last stage's memory, 2-stage MLP (hidden 2048, micro-batch 128), 1F1B: live tensors' peak, the plan's estimate, process peak resident size"
for m in 4 32; do
  json="$out/e-1f1b-m$m.json"
  "$parallax" run scenarios/accuracy/mlp-pipeline2.yaml --set model.hidden=2048 --set parallel.schedule=1f1b \
    --set parallel.chunks=$m --set data.batch_size=$((m * 128)) --set data.steps=20 --json >"$json" 2>>"$out/log.txt"
  printf '    %2d micro-batches: measured_mb %s, predicted_mb %s, peak_rss_mb %s\n' $m "$(field 1 measured_mb <"$json")" \
    "$(field 1 predicted_mb <"$json")" "$(field 1 peak_rss_mb <"$json")"
done
fi

if part f; then
echo "(f) one stage of 12 transformer blocks (hidden 256, sequence 128, batch 16 in 4 micro-batches): live tensors' peak, MB"
for recompute in layer stage false; do
  json="$out/f-$recompute.json"
  "$parallax" run scenarios/accuracy/transformer-pipeline2.yaml \
    --set "model={preset: transformer, layers: 12, hidden: 256, heads: 4, ffn: 1024, seq_len: 128, vocab: 1000}" \
    --set data.batch_size=16 --set data.steps=3 --set parallel.pipeline=1 --set parallel.partition_len=balanced \
    --set parallel.chunks=4 \
    --set parallel.activation_checkpointing=$recompute --json >"$json" 2>>"$out/log.txt"
  printf '    activation_checkpointing %-5s measured %7s MB, the plan %7s MB\n' $recompute "$(field 0 measured_mb <"$json")" "$(field 0 predicted_mb <"$json")"
done
fi

if part g; then
echo "(g) a lost rank under an external launcher (4 ranks by hand, --timeout 5): seconds until the others have exited"
# lost_rank SIGNAL TRY: starts the job, waits for replica 0's last stage (rank 2, ranks tp-dp-pp)
# to report a step, signals it, and prints the seconds until ranks 0, 1 and 3 have exited.
lost_rank() {
  local signal=$1 try=$2 dir="$out/g-$1-$2" port pids=() r
  mkdir -p "$dir"
  port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  for r in 0 1 2 3; do
    RANK=$r LOCAL_RANK=$r WORLD_SIZE=4 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port \
      "$parallax" run scenarios/mlp-fashion-mnist-ddp2.yaml --timeout 5 --set parallel.data=2 \
      --set parallel.pipeline=2 --set parallel.chunks=2 --set model.layers=3 --set model.hidden=32 \
      --set data.batch_size=32 --set data.steps=1000000 >/dev/null 2>"$dir/rank-$r.err" &
    pids+=($!)
  done
  for _ in $(seq 1200); do grep -q '] step ' "$dir/rank-2.err" 2>/dev/null && break; sleep 0.1; done
  kill -s "$signal" "${pids[2]}"
  local t0 codes=() code
  t0=$(date +%s%N)
  for r in 0 1 3; do
    code=0
    wait "${pids[$r]}" || code=$?
    codes+=("$code")
  done
  printf '    SIG%-4s try %d: %.1f s, exit codes %s\n' "$signal" "$try" "$(python3 -c 'import sys; print((int(sys.argv[2]) - int(sys.argv[1])) / 1e9)' "$t0" "$(date +%s%N)")" "${codes[*]}"
  kill -9 "${pids[2]}" 2>/dev/null || true
  wait "${pids[2]}" 2>/dev/null || true
}
for try in 1 2 3; do
  lost_rank KILL $try
  lost_rank STOP $try
done
fi
