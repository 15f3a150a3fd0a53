#!/usr/bin/env bash
# Predictions against Megatron-LM's published H100 weak-scaling runs (bench/data/megatron_h100_published.csv,
# sources in its header and in bench/data/h100_published.md): for each row the predicted and the published
# seconds per iteration and their error. Nothing here is fitted to these rows: the compute figures are the
# h100-nvlink-ib profile's (datasheet peaks, one efficiency), the network's NCCL's tuning model.
#
#   bash bench/published_h100.sh [PARALLAX] [--out DIR]      (default: build/parallax)
#
# The published step time is the row's model FLOPs over its per-GPU TFLOP/s and GPUs, with Megatron-LM's
# count (Narayanan et al. 2021, eq. 3, without recompute, as MFU counts them):
# 72 B s l h^2 (1 + s/(6h) + V/(12 l h)). What the table leaves out is assumed, the same for every row:
# bf16, micro-batch 1, selective recompute with sequence parallelism where tensor > 1, no virtual stages.
# Output goes to DIR (--out, else OUT, else a new bench/results/published-h100-cpu-DATE): summary.txt,
# log.txt, machine.txt.
set -euo pipefail
args=("$@")
source "$(dirname "$0")/lib.sh"
here="$(cd "$(dirname "$0")" && pwd)"
parallax="" out=""
while [ $# -gt 0 ]; do
  case "$1" in
    --out) out=$2; shift 2 ;;
    -h|--help) bench_help "$0"; exit 0 ;;
    -*) echo "published_h100.sh: unknown flag $1" >&2; exit 2 ;;
    *) parallax=$1; shift ;;
  esac
done
parallax="${parallax:-$here/../build/parallax}"
[[ -x "$parallax" ]] || { echo "published_h100.sh: no parallax binary at $parallax (build first, or pass its path)" >&2; exit 2; }
out=$(bench_out_dir published-h100 "$out")
bench_machine "$out" "$0" "${args[@]}"
bench_tee "$out"
trap bench_tee_close EXIT
python3 - "$parallax" "$here/data/megatron_h100_published.csv" "$here/data/megatron-gpt-h100.yaml" <<'PY'
import csv, json, subprocess, sys

parallax, table, scenario = sys.argv[1:4]
SEQ, VOCAB = 4096, 131072

def sets(r):
    t, p, d = int(r["tensor"]), int(r["pipeline"]), int(r["data"])
    batch = int(r["global_batch"]) // d
    layers = int(r["layers"])
    split = [layers // p] * p
    split[0] += 1   # the embedding rides with the first stage, the head with the last
    split[-1] += 1
    out = {"model.layers": layers, "model.hidden": r["hidden"], "model.heads": r["heads"], "model.ffn": 4 * int(r["hidden"]),
           "parallel.data": d, "parallel.pipeline": p, "parallel.tensor": t, "data.batch_size": batch, "parallel.chunks": batch,
           "parallel.partition_len": "[" + ", ".join(map(str, split)) + "]" if p > 1 else "balanced",
           "parallel.sequence_parallel": "true" if t > 1 else "false",
           "parallel.activation_checkpointing": "selective"}
    return [a for k, v in out.items() for a in ("--set", f"{k}={v}")]

def run(cmd, args):
    res = subprocess.run([parallax, cmd, scenario, *args, "--json"], capture_output=True, text=True)
    if res.returncode != 0:
        sys.exit(f"published_h100.sh: parallax {cmd} failed:\n{res.stderr}")
    return json.loads(res.stdout)

def flops(r):
    B, s, l, h, V = int(r["global_batch"]), SEQ, int(r["layers"]), int(r["hidden"]), VOCAB
    return 72 * B * s * l * h * h * (1 + s / (6 * h) + V / (12 * l * h))

print(f"{'model':6} {'TPxPPxDP':>10} {'predicted s':>12} {'published s':>12} {'error':>7}  fits")
errors, no_fit = [], []
for r in csv.DictReader(row for row in open(table) if not row.startswith("#")):
    args = sets(r)
    plan = run("plan", args)
    sim = run("simulate", args)
    published = flops(r) / (float(r["published_tflops"]) * 1e12 * int(r["gpus"]))
    predicted = sim["step_time_ms"] / 1e3
    err = predicted / published - 1
    errors.append(err)
    fits = all(m["fits"] for m in plan["memory"])
    if not fits:
        no_fit.append(r["model"])
    layout = f"{r['tensor']}x{r['pipeline']}x{r['data']}"
    print(f"{r['model']:6} {layout:>10} {predicted:12.3f} {published:12.3f} {100 * err:+6.1f}%  {'yes' if fits else 'NO'}", flush=True)

mae = sum(abs(e) for e in errors) / len(errors)
print(f"\nstep time: {len(errors)} rows, mean error {100 * sum(errors) / len(errors):+.1f}%, mean absolute error {100 * mae:.1f}%, "
      f"worst {100 * max(errors, key=abs):+.1f}% (goal: mean absolute <= 10%, worst <= 20%)")
print("called 'does not fit' on the GPUs it ran on: " + (", ".join(no_fit) if no_fit else "none"))
PY
