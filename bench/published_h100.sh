#!/usr/bin/env bash
# Predictions against three published tables of H100 training runs, sources in their CSVs' headers and in
# bench/data/h100_published.md: Megatron-LM's README weak-scaling runs (bench/data/megatron_h100_published.csv),
# NVIDIA NeMo 24.07's pretraining table (bench/data/nemo_h100_published.csv, its models from
# bench/data/nemo_models_notes.md) and torchtitan's published runs (bench/data/torchtitan_published.csv).
# For each row the predicted and the published seconds per iteration and
# their error. Nothing here is fitted to these rows: the compute figures are the h100-nvlink-ib profile's
# (datasheet peaks, GEMM grids and attention figures from published measurements, cited there), the
# network's NCCL's tuning model; each run's overlap flags are its trainer's, as its source states them.
#
#   bash bench/published_h100.sh [PARALLAX] [--out DIR]      (default: build/parallax)
#
# How each table's throughput becomes a step time, and what is assumed where a table is silent: the
# comments above megatron() and nemo() below.
# Output goes to DIR (--out, else OUT, else a new bench/results/published-h100-cpu-DATE): summary.txt,
# log.txt, machine.txt.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
here="$(cd "$(dirname "$0")" && pwd)"
bench_begin published-h100 "$0" "$@"
PYTHONPATH="$here" python3 - "$parallax" "$here/data" <<'PY'
import csv, json, subprocess, sys

import published_check  # bench/published_check.py: the line each profile's `published_check:` quotes

parallax, data = sys.argv[1:3]

def rows(name):
    return list(csv.DictReader(row for row in open(f"{data}/{name}") if not row.startswith("#")))

def split(layers, p, v):
    """Megatron's even split: blocks / (p x v) a stage, the embedding with the first, the head with the last."""
    stages = p * v
    lens = [layers // stages] * stages
    lens[0] += 1
    lens[-1] += 1
    return "[" + ", ".join(map(str, lens)) + "]"

def layout(d, p, t, c, v, batch, chunks):
    out = {"parallel.data": d, "parallel.pipeline": p, "parallel.tensor": t, "parallel.context": c,
           "data.batch_size": batch, "parallel.chunks": chunks}
    if p > 1:
        out |= {"parallel.virtual": v, "parallel.schedule": "interleaved-1f1b" if v > 1 else "1f1b"}
    return out

# Megatron-LM's README table: GPT, sequence 4096, vocabulary 131,072; what it leaves out is assumed, the
# same for every row: bf16, micro-batch 1, selective recompute with sequence parallelism where tensor > 1,
# no virtual stages, Megatron-LM's default dropout of 0.1 (bench/data/megatron-gpt-h100.yaml). Its step time is the row's model FLOPs over its per-GPU TFLOP/s and GPUs, with
# Megatron-LM's count (Narayanan et al. 2021, eq. 3, without recompute, as MFU counts them):
# 72 B s l h^2 (1 + s/(6h) + V/(12 l h)).
def megatron(r):
    t, p, d, l, h = int(r["tensor"]), int(r["pipeline"]), int(r["data"]), int(r["layers"]), int(r["hidden"])
    B, s, V = int(r["global_batch"]), 4096, 131072
    batch = B // d
    sets = {"model.layers": l, "model.hidden": h, "model.heads": r["heads"], "model.ffn": 4 * h,
            "parallel.partition_len": split(l, p, 1) if p > 1 else "balanced",
            "parallel.sequence_parallel": "true" if t > 1 else "false", "parallel.activation_checkpointing": "selective",
            "parallel.tp_comm_overlap": "true" if t > 1 else "false",  # the README: '--tp-comm-overlap'
            "parallel.overlap_grad_reduce": "true",  # the README: '--overlap-grad-reduce --overlap-param-gather'
            "parallel.overlap_param_gather": "true"}

    sets |= layout(d, p, t, 1, 1, batch, batch)
    flops = 72 * B * s * l * h * h * (1 + s / (6 * h) + V / (12 * l * h))
    return f"{t}x{p}x1x{d}", sets, flops / (float(r["published_tflops"]) * 1e12 * int(r["gpus"]))

# NeMo 24.07's table: every row as the table and NeMo's launcher configs state it (the CSV's header). Its
# step time is the global batch's tokens over the row's tokens/s/GPU and GPUs.
def nemo(r):
    n = {k: int(r[k]) for k in ("gpus", "global_batch", "micro_batch", "seq", "tensor", "pipeline", "context", "virtual", "layers")}
    t, p, c, v = n["tensor"], n["pipeline"], n["context"], n["virtual"]
    d = n["gpus"] // (t * p * c)
    batch = n["global_batch"] // d
    sets = {"model.layers": n["layers"], "model.hidden": r["hidden"], "model.heads": r["heads"], "model.ffn": r["ffn"],
            "model.kv_heads": r["kv_heads"], "model.mlp": r["mlp"], "model.norm": r["norm"], "model.positions": r["positions"],
            "model.tie_embeddings": r["tied"], "model.bias": r["bias"], "model.vocab": r["vocab"], "model.seq_len": n["seq"],
            "model.dropout": r["dropout"],
            "parallel.partition_len": split(n["layers"], p, v) if p > 1 else "balanced",
            "parallel.sequence_parallel": r["sequence_parallel"], "parallel.activation_checkpointing": r["recompute"],
            "parallel.grad_reduce_in_bf16": r["grad_reduce_in_bf16"], "parallel.tp_comm_overlap": r["tp_comm_overlap"],
            "parallel.overlap_grad_reduce": "true",  # every config: distributed_fused_adam's overlap_grad_sync: True
            "parallel.overlap_param_gather": "true",  # and its overlap_param_sync: true
            "optimizer.state_dtype": r["optimizer_state"],
            # Apex's distributed_fused_adam buckets (the CSV's header), not Megatron-core's DDP
            "parallel.ddp_buckets": "pytorch", "parallel.bucket_cap_mb": r["bucket_cap_mb"], "parallel.first_bucket_mb": r["bucket_cap_mb"]}
    sets |= layout(d, p, t, c, v, batch, batch // n["micro_batch"])
    return f"{t}x{p}x{c}x{d}", sets, n["global_batch"] * n["seq"] / (float(r["tokens_per_s_per_gpu"]) * n["gpus"])

# torchtitan's published runs (bench/data/torchtitan_published.csv, its sources in its header): Llama 3.1 8B and
# 70B under FSDP2, alone or with tensor or context parallelism, eager or compiled, bf16 or Float8, as
# bench/data/torchtitan-h100.yaml writes torchtitan's job; each row sets its layout, hardware and techniques.
# Its step time is a rank's local batch of tokens over its TPS and its non-data-parallel degree (torchtitan's
# TPS); its memory is the allocator's reserved peak, set beside the plan's largest rank (tensors and reserve).
def torchtitan(r):
    gpus, t, c = int(r["gpus"]), int(r["tensor"]), int(r["context"])
    batch, seq = int(r["local_batch"]), int(r["seq"])
    sets = {"hardware": r["hardware"], "model.hf_config": f"{data}/../../scenarios/models/{r['model']}.json", "model.seq_len": seq,
            "model.kernels": "fused" if r["compile"] == "true" else "eager",
            "model.loss": "fused" if r["compiled_loss"] == "true" else "eager",
            "parallel.precision": "fp8" if r["float8"] == "true" else "bf16",
            "parallel.activation_checkpointing": r["checkpointing"],
            "parallel.sequence_parallel": "true" if t > 1 else "false",  # torchtitan's TP plan shards the norms (SequenceParallel)
            "parallel.tp_comm_overlap": r["async_tp"], "parallel.fp8_param_gather": r["float8_all_gather"]}
    sets |= layout(gpus // (t * c), 1, t, c, 1, batch, 1)
    return f"{t}x1x{c}x{gpus // (t * c)}", sets, batch * seq / (float(r["tokens_per_s_per_gpu"]) * t * c)

def run(cmd, scenario, sets):
    args = [a for k, v in sets.items() for a in ("--set", f"{k}={v}")]
    res = subprocess.run([parallax, cmd, f"{data}/{scenario}", *args, "--json"], capture_output=True, text=True)
    if res.returncode != 0:
        sys.exit(f"published_h100.sh: parallax {cmd} failed:\n{res.stderr}")
    return json.loads(res.stdout)

def summary(label, errors, no_fit):
    mae = sum(abs(e) for e in errors) / len(errors)
    print(f"{label}: {len(errors)} rows, mean error {100 * sum(errors) / len(errors):+.1f}%, mean absolute error {100 * mae:.1f}%, "
          f"worst {100 * max(errors, key=abs):+.1f}% (goal: mean absolute <= 10%, worst <= 20%)")
    print(f"{label}: called 'does not fit' on the GPUs it ran on: " + (", ".join(no_fit) if no_fit else "none"))

def relative(label, diffs):
    mae = sum(abs(d) for d in diffs) / len(diffs)
    print(f"{label}: {len(diffs)} rows against their table's first row, mean {100 * sum(diffs) / len(diffs):+.1f}%, "
          f"mean absolute {100 * mae:.1f}%, worst {100 * max(diffs, key=abs):+.1f}%")

every, every_no_fit = [], []
readme_steps = {}  # the Megatron-LM README rows' predicted steps at micro-batch 1, by model (its last section)
splits = {}  # whose runs -> (the step's F and B kernels, the rest of the predicted step, the published step), seconds
by_profile = {}  # (hardware profile, whose runs) -> errors; of steps, or of a change's ratio (predicted / published - 1)
for title, table, scenario, row_of in [
        ("Megatron-LM README, H100 weak scaling (bf16 assumed)", "megatron_h100_published.csv", "megatron-gpt-h100.yaml", megatron),
        ("NeMo 24.07, DGX-H100 pretraining (fp8)", "nemo_h100_published.csv", "nemo-h100.yaml", nemo),
        ("torchtitan's benchmarks: Llama 3.1 under FSDP2 (+ TP, CP), eager or compiled, bf16 or Float8",
         "torchtitan_published.csv", "torchtitan-h100.yaml", torchtitan)]:
    titan = row_of is torchtitan
    name = "source table: technique" if titan else "model"
    width = 38 if titan else 14
    print(f"\n{title}\n{name:{width}} {'GPUs':>5} {'TPxPPxCPxDP':>12} {'predicted s':>12} {'published s':>12} {'error':>7}  fits")
    errors, no_fit, firsts, diffs = [], [], {}, []
    h100, h100_no_fit = [], []  # torchtitan's rows on Grand Teton H100s
    for r in rows(table):
        grid, sets, published = row_of(r)
        plan = run("plan", scenario, sets)
        simulated = run("simulate", scenario, sets)
        predicted = simulated["step_time_ms"] / 1e3
        k = simulated["kernels"]
        kernels = (k["gemm_ms"] + k["flash_ms"] + k["memory_ms"]) / 1e3
        splits.setdefault("torchtitan" if titan else "Megatron-LM and NeMo", []).append((kernels, predicted - kernels, published))
        err = predicted / published - 1
        errors.append(err)
        if row_of is megatron:
            readme_steps[r["model"]] = predicted
        by_profile.setdefault((plan["hardware"], "torchtitan" if titan else "Megatron-LM and NeMo"), []).append(err)
        label = f"{r['source']} {r['table']}: {r['technique']}" if titan else r["model"]
        fits = all(m["fits"] for m in plan["memory"])
        if r.get("device_memory_gb"):  # the GPUs it ran on, where they hold more than the profile's (GB as GiB, as profiles)
            fits = max(m["total"] for m in plan["memory"]) <= float(r["device_memory_gb"]) * 2**30
        if not fits:
            no_fit.append(f"{label} ({r['gpus']} GPUs)")
        memory = ""
        if r.get("memory_gib"):  # the plan's largest rank against the published peak
            peak = max(m["total"] for m in plan["memory"]) / 2**30
            kind = "reserved" if titan else "published"
            memory = f"  peak {peak:.1f} GiB predicted, {float(r['memory_gib']):.1f} {kind} ({100 * (peak / float(r['memory_gib']) - 1):+.1f}%)"
        ratio = ""
        if titan:  # each row against its table's first: what the technique, the scale or the layout changes
            if r["hardware"] == "h100-hbm2e-500w-nvlink-roce":
                h100.append(err)
                h100_no_fit += [] if fits else [f"{label} ({r['gpus']} GPUs)"]
            first = firsts.setdefault((r["source"], r["table"]), (predicted, published))
            if first != (predicted, published):
                diff = (predicted / first[0]) / (published / first[1]) - 1
                diffs.append(diff)
                by_profile.setdefault((plan["hardware"], "torchtitan, a change against its table's first run"), []).append(diff)
                ratio = f"  x{predicted / first[0]:.3f} predicted, x{published / first[1]:.3f} published ({100 * diff:+.1f}%)"
        print(f"{label:{width}} {r['gpus']:>5} {grid:>12} {predicted:12.3f} {published:12.3f} {100 * err:+6.1f}%  {'yes' if fits else 'NO'}"
              f"{memory}{ratio}", flush=True)
    print()
    summary("step time", errors, no_fit)
    if titan:
        summary("step time, Grand Teton H100 rows (96 GB HBM2e, 500 W)", h100, h100_no_fit)
        relative("step time relative", diffs)
    else:
        every += errors
        every_no_fit += no_fit
# The README leaves the micro-batch out, and the rows above assume 1. At pipeline 1 that decides how much of the
# distributed optimizer's reduce-scatter and all-gather is exposed: Megatron-core reduces during the last
# micro-batch's backward and gathers during the next step's first forward. The same rows with a replica's whole
# batch as one micro-batch bound that assumption's effect (not counted in any summary: one figure per row is).
print("\nMegatron-LM README rows at pipeline 1, a replica's whole batch as one micro-batch (the table states no micro-batch)")
print(f"{'model':14} {'micro-batch':>11} {'predicted s':>12} {'published s':>12} {'error':>7}  fits  (micro-batch 1: error)")
for r in rows("megatron_h100_published.csv"):
    if int(r["pipeline"]) != 1:
        continue
    grid, sets, published = megatron(r)
    one = readme_steps[r["model"]]
    sets |= {"parallel.chunks": 1}
    plan = run("plan", "megatron-gpt-h100.yaml", sets)
    whole = run("simulate", "megatron-gpt-h100.yaml", sets)["step_time_ms"] / 1e3
    fits = all(m["fits"] for m in plan["memory"])
    print(f"{r['model']:14} {sets['data.batch_size']:>11} {whole:12.3f} {published:12.3f} {100 * (whole / published - 1):+6.1f}%  "
          f"{'yes' if fits else 'NO':4}  ({100 * (one / published - 1):+.1f}%)", flush=True)

print()
summary("Megatron-LM and NeMo tables", every, every_no_fit)
# Where the error lies (published_check.split_line): each step as its kernels and the rest, and the factor on each
# that fits these rows; a diagnostic, not a prediction.
print("\n" + published_check.SPLIT_TITLE)
for runs_of, parts in splits.items():
    print(published_check.split_line(runs_of, parts))

print()
for (profile, runs_of), errs in by_profile.items():  # one line each, as the profiles' `published_check:` quote them
    print(published_check.line(profile, runs_of, errs))
PY
