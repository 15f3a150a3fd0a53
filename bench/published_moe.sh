#!/usr/bin/env bash
# Predictions against published mixture-of-experts training runs (bench/data/moe_published.csv, sources in its
# header): Qwen3-30B-A3B and Qwen3-235B-A22B from NVIDIA's Megatron-Bridge (NeMo) performance summary on H100 and
# B200, Qwen3-235B-A22B (4k tokens, and 16k-128k with context parallelism) and Mixtral 8x22B from NVIDIA's
# Megatron-MoE-ModelZoo on H100, and DeepSeek-V3 from the NeMo performance summary on H100. For each row the predicted and published seconds per step, their error, and
# whether the plan fits the GPUs it ran on; then, for each layout a source ran twice (routing forced balanced and as
# trained), the load imbalance that makes the simulator's ratio of the two the published one. Nothing here is fitted
# to these rows: the compute figures are the hardware profiles' (scenarios/hardware/*.yaml, with their sources), the
# network's NCCL's tuning model and the profiles' links. Each run is written as its trainer ran it
# (bench/data/moe.yaml: Megatron-core's semantics and distributed optimizer); a row's load imbalance is 1 where
# its source forced balanced routing, else Parallax's default (a balanced router's floor).
#
#   bash bench/published_moe.sh [PARALLAX] [--out DIR]      (default: build/parallax)
#
# Output goes to DIR (--out, else OUT, else a new bench/results/published-moe-cpu-DATE): summary.txt, log.txt,
# machine.txt.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
here="$(cd "$(dirname "$0")" && pwd)"
command -v python3 >/dev/null || { echo "published_moe.sh: needs python3" >&2; exit 2; }
bench_begin published-moe "$0" "$@"
PYTHONPATH="$here" python3 - "$parallax" "$here/data" <<'PY'
import csv, json, subprocess, sys, time

import published_check  # bench/published_check.py: the line each profile's `published_check:` quotes

parallax, data = sys.argv[1:3]
MODELS_DIR = f"{data}/../../scenarios/models"

# The models as their Hugging Face configs give them (Qwen3-30B-A3B: scenarios/models/qwen3-30b-a3b.json; the
# others' values as the sources' Megatron arguments state them, bench/data/moe_published.csv's header; Qwen3-235B's
# --qk-layernorm from the ModelZoo's model_configs/benchmarking/Qwen3-235B-A22B.yaml).
MODELS = {
    "qwen3-30b-a3b": {"model.hf_config": f"{MODELS_DIR}/qwen3-30b-a3b.json"},
    "qwen3-235b-a22b": {"model.layers": 94, "model.hidden": 4096, "model.heads": 64, "model.kv_heads": 4, "model.head_dim": 128,
                        "model.qk_norm": "true", "model.ffn": 12288, "model.vocab": 151936, "model.experts": 128, "model.experts_per_token": 8,
                        "model.expert_ffn": 1536},
    "deepseek-v3": {"model.hf_config": f"{MODELS_DIR}/deepseek-v3.json"},
    "mixtral-8x22b": {"model.layers": 56, "model.hidden": 6144, "model.heads": 48, "model.kv_heads": 8, "model.ffn": 16384,
                      "model.vocab": 32000, "model.experts": 8, "model.experts_per_token": 2},
}
BLOCKS = {"qwen3-30b-a3b": 48, "qwen3-235b-a22b": 94, "mixtral-8x22b": 56, "deepseek-v3": 61}
# Megatron-core's --pipeline-model-parallel-layout where a recipe gives one, over Parallax's layer list (embed, the
# blocks, mtp.0, head): DeepSeek-V3's "Et|(tt|)*30mL" (the embedding and one block, 30 stages of two blocks, then
# the multi-token prediction module and the loss), 32 stages.
LAYOUTS = {("deepseek-v3", 32): "[" + ", ".join(["2"] * 32) + "]"}

def rows():
    return list(csv.DictReader(row for row in open(f"{data}/moe_published.csv") if not row.startswith("#")))

def split(r, stages):
    """Megatron's split over stages: the blocks evenly, the embedding with the first stage and the head with the last;
    with account_for_embedding/loss_in_pipeline_split (the 235B recipes) the two count as a block each."""
    blocks = BLOCKS[r["model"]]
    if (r["model"], stages) in LAYOUTS:
        return LAYOUTS[(r["model"], stages)]
    if stages == 1:
        return "balanced"
    if r["model"] == "qwen3-235b-a22b" and (blocks + 2) % stages == 0:
        return "[" + ", ".join([str((blocks + 2) // stages)] * stages) + "]"
    lens = [blocks // stages] * stages
    for i in range(blocks % stages):
        lens[i] += 1
    lens[0] += 1
    lens[-1] += 1
    return "[" + ", ".join(map(str, lens)) + "]"

def sets(r):
    n = {k: int(r[k]) for k in ("gpus", "seq", "global_batch", "micro_batch", "tensor", "pipeline", "virtual", "context", "expert",
                                "expert_tensor")}
    t, p, v, c = n["tensor"], n["pipeline"], n["virtual"], n["context"]
    d = n["gpus"] // (t * p * c)
    batch = n["global_batch"] // d
    out = dict(MODELS[r["model"]])
    out |= {"model.seq_len": n["seq"], "hardware": r["hardware"], "parallel.precision": r["precision"],
            "parallel.data": d, "parallel.tensor": t, "parallel.pipeline": p, "parallel.virtual": v, "parallel.context": c,
            "parallel.schedule": "interleaved-1f1b" if v > 1 else "1f1b",
            "parallel.expert": n["expert"], "parallel.expert_tensor": n["expert_tensor"] or "tensor",
            "parallel.sequence_parallel": "true" if t > 1 else "false",
            "parallel.shard": r["shard"],
            "parallel.overlap_moe_expert_parallel_comm": r["a2a_overlap"],
            "parallel.moe_token_dispatcher": r["dispatcher"],
            "parallel.partition_len": split(r, p * v),
            "data.batch_size": batch, "parallel.chunks": batch // n["micro_batch"]}
    if r["recompute"] in ("false", "true"):
        out["parallel.activation_checkpointing"] = r["recompute"]
    else:  # Megatron-core's selective recompute of these modules
        out |= {"parallel.activation_checkpointing": "selective", "parallel.recompute_modules": "[" + ", ".join(r["recompute"].split()) + "]"}
    if float(r["imbalance"]) > 0:
        out["model.expert_imbalance"] = r["imbalance"]
    if r["source"].startswith("nemo"):
        out["parallel.grad_reduce_in_bf16"] = "true"  # the recipes: grad_reduce_in_fp32 False
    # Both overlap the gradients' reduce-scatter and the parameters' all-gather: ModelZoo's
    # --overlap-grad-reduce --overlap-param-gather; Megatron-Bridge's CommOverlapConfig
    # (_get_optimizer_overlap_cfgs) turns both on wherever data parallelism is > 1.
    out["parallel.overlap_grad_reduce"] = "true"
    out["parallel.overlap_param_gather"] = "true"
    return f"{t}x{p}x{v}/ep{n['expert']}" + (f"/cp{c}" if c > 1 else "") + ("+ov" if r["a2a_overlap"] == "true" else ""), out

def run(cmd, args):
    flags = [a for k, v in args.items() for a in ("--set", f"{k}={v}")]
    t0 = time.perf_counter()
    res = subprocess.run([parallax, cmd, f"{data}/moe.yaml", *flags, "--json"], capture_output=True, text=True)
    if res.returncode != 0:
        sys.exit(f"published_moe.sh: parallax {cmd} failed:\n{res.stderr}")
    return json.loads(res.stdout), time.perf_counter() - t0

# routing: "balanced" where the source forced balanced routing (imbalance 1), "router" where its router ran as trained.
print(f"{'model':16} {'source':19} {'GPUs':>5} {'prec':5} {'seq':>6} {'TPxPPxVP/EP':>16} {'shard':9} {'dispatch':8} {'routing':8} "
      f"{'predicted s':>12} {'published s':>12} {'error':>7}  fits  sim s")
errors, no_fit, by_hw, by_routing, predicted_ms = [], [], {}, {}, {}
splits = {}  # hardware profile -> (the step's F and B kernels, the rest of the predicted step, the published step), seconds
for r in rows():
    grid, args = sets(r)
    plan, _ = run("plan", args)
    sim, seconds = run("simulate", args)
    predicted = sim["step_time_ms"] / 1e3
    predicted_ms[tuple(r.items())] = sim["step_time_ms"]
    published = float(r["published_s"])
    kernels = (sim["kernels"]["gemm_ms"] + sim["kernels"]["flash_ms"] + sim["kernels"]["memory_ms"]) / 1e3
    splits.setdefault(r["hardware"], []).append((kernels, predicted - kernels, published))
    err = predicted / published - 1
    errors.append(err)
    by_hw.setdefault(r["hardware"], []).append(err)
    fits = all(m["fits"] for m in plan["memory"])
    if not fits:
        no_fit.append(f"{r['model']} on {r['gpus']} {r['hardware']}")
    routing = "balanced" if float(r["imbalance"]) == 1 else "router"
    by_routing.setdefault(routing, []).append(err)
    print(f"{r['model']:16} {r['source']:19} {r['gpus']:>5} {r['precision']:5} {r['seq']:>6} {grid:>16} {r['shard']:9} {r['dispatcher']:8} "
          f"{routing:8} {predicted:12.3f} {published:12.3f} "
          f"{100 * err:+6.1f}%  {'yes' if fits else 'NO ':4} {seconds:6.2f}", flush=True)
print()
mae = sum(abs(e) for e in errors) / len(errors)
print(f"step time: {len(errors)} rows, mean error {100 * sum(errors) / len(errors):+.1f}%, mean absolute error {100 * mae:.1f}%, "
      f"worst {100 * max(errors, key=abs):+.1f}% (goal: every row within 15%)")
for group, errs in list(by_hw.items()) + [(f"routing {k}", v) for k, v in by_routing.items()]:
    print(f"  {group}: mean error {100 * sum(errs) / len(errs):+.1f}% over {len(errs)} rows, "
          f"{sum(abs(e) <= 0.15 for e in errs)} within 15%")
print("called 'does not fit' on the GPUs it ran on: " + (", ".join(no_fit) if no_fit else "none"))
for profile, errs in by_hw.items():  # one line each, as the profiles' `published_check:` quote them
    print(published_check.line(profile, "Megatron-core MoE", errs))
# Where the error lies (published_check.split_line): a diagnostic fitted to these rows, not a prediction; a profile
# with three rows or more.
print("\n" + published_check.SPLIT_TITLE)
for profile, parts in splits.items():
    if len(parts) >= 3:
        print(published_check.split_line(f"{profile}, Megatron-core MoE", parts))

# Where a source ran one layout twice, routing forced balanced and as trained, their ratio is what its router's
# imbalance cost. The load imbalance (model.expert_imbalance) that gives the same ratio in the simulator, by bisection:
# a reading of the pair, not a prediction of it.
def layout_key(r):
    return tuple(v for k, v in r.items() if k not in ("imbalance", "published_s"))
forced = {layout_key(r): r for r in rows() if float(r["imbalance"]) == 1}
pairs = [(forced[layout_key(r)], r) for r in rows() if float(r["imbalance"]) == 0 and layout_key(r) in forced]
if pairs:
    print("\nforced balance against the router as trained, the same layout:")
    print(f"{'model':16} {'source':19} {'seq':>6} {'TPxPPxVP/EP':>16} {'published ratio':>16} {'imbalance that gives it':>24}")
for f, d in pairs:
    grid, args = sets(f)
    base = predicted_ms[tuple(f.items())]
    want = float(d["published_s"]) / float(f["published_s"])
    lo, hi = 1.0, 4.0
    for _ in range(12):
        mid = (lo + hi) / 2
        ratio = run("simulate", args | {"model.expert_imbalance": mid})[0]["step_time_ms"] / base
        lo, hi = (mid, hi) if ratio < want else (lo, mid)
    print(f"{f['model']:16} {f['source']:19} {f['seq']:>6} {grid:>16} {want:16.3f} {(lo + hi) / 2:24.2f}", flush=True)
PY
