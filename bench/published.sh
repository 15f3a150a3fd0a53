#!/usr/bin/env bash
# Predictions against published measurements of Megatron-LM on DGX A100 80GB (bench/data/megatron_published.csv,
# sources in its header): for each row the predicted and published seconds per iteration and their error, and
# for Korthikanti et al.'s rows the predicted memory per GPU beside their Figure 1. Nothing here is fitted to
# these rows: the compute model's figures come from the hardware profile (scenarios/hardware/a100-nvlink-ib.yaml,
# with their sources), the network's from NCCL's tuning model.
#
#   bash bench/published.sh [PARALLAX] [--out DIR]      (default: build/parallax)
#
# The predictions are deterministic: the raw output is what this prints. It goes to DIR (--out,
# else the environment's OUT, else a new bench/results/published-cpu-DATE): summary.txt, what this
# printed; log.txt, its stderr; machine.txt (CPU, cores, commit, date), since "sim s" is this
# machine's wall time.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
here="$(cd "$(dirname "$0")" && pwd)"
command -v python3 >/dev/null || { echo "published.sh: needs python3" >&2; exit 2; }
bench_begin published "$0" "$@"
PYTHONPATH="$here" python3 - "$parallax" "$here/data/megatron_published.csv" "$here/data/megatron-gpt.yaml" <<'PY'
import csv, json, subprocess, sys, time

import published_check  # bench/published_check.py: the line each profile's `published_check:` quotes

parallax, table, scenario = sys.argv[1:4]
GIB = 2.0 ** 30
SEQ, VOCAB = 2048, 51200

def sets(r):
    t, p, v, gpus = int(r["tensor"]), int(r["pipeline"]), int(r["virtual"]), int(r["gpus"])
    d = gpus // (t * p)
    batch = int(r["global_batch"]) // d
    layers, stages = int(r["layers"]), p * v
    per = layers // stages
    # The embedding rides with the first stage and the head with the last, as in Megatron-LM.
    split = [per] * stages
    split[0] += 1
    split[-1] += 1
    out = {
        "model.layers": layers, "model.hidden": r["hidden"], "model.heads": r["heads"], "model.ffn": 4 * int(r["hidden"]),
        "model.seq_len": SEQ, "model.vocab": VOCAB,
        "parallel.data": d, "parallel.pipeline": p, "parallel.tensor": t, "parallel.virtual": v,
        "parallel.schedule": "interleaved-1f1b" if v > 1 else "1f1b",
        "parallel.chunks": batch // int(r["micro_batch"]), "data.batch_size": batch,
        "parallel.partition_len": "[" + ", ".join(map(str, split)) + "]" if stages > 1 else "balanced",
        "parallel.activation_checkpointing": "false" if r["recompute"] == "none" else r["recompute"],
        "parallel.sequence_parallel": "true" if r["recompute"] == "selective" else "false",
        # Megatron-LM of 2021-2022 split each pipeline send over the tensor ranks (its scatter-gather,
        # on by default from February 2021 until Megatron-core's pipeline of March 2023)
        "parallel.p2p_scatter_gather": "true",
    }
    if r["ddp"]:  # gradients reduced during (torch's DDP) or after (Megatron-LM's local DDP) the backward
        out["parallel.overlap_grad_reduce"] = "true" if r["ddp"] == "torch" else "false"
    if r["grads"] == "fp16":  # 16-bit gradients: the key's bf16 is fp16 under precision fp16
        out["parallel.grad_reduce_in_bf16"] = "true"
    out.update(backward(r["backward"]))
    return [a for k, val in out.items() for a in ("--set", f"{k}={val}")]

def backward(kind):
    """Megatron-LM of 2022 (K22's rows: `async` in the table) launches the column-parallel linears' backward
    collectives beside their GEMMs, the rule of `framework: megatron`; its other semantics the scenario already
    writes key by key, and its attention was the fused softmax of the time, not flash."""
    return {"framework": "megatron", "model.attention": "standard"} if kind == "async" else {}

def run(cmd, args):
    out = subprocess.run([parallax, cmd, scenario, *args, "--json"], capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit(f"published.sh: parallax {cmd} failed:\n{out.stderr}")
    return json.loads(out.stdout)

def flops(r):  # Narayanan et al. eq. 3, with recompute
    B, s, l, h, V = int(r["global_batch"]), SEQ, int(r["layers"]), int(r["hidden"]), VOCAB
    return 96 * B * s * l * h * h * (1 + s / (6 * h) + V / (16 * l * h))

print(f"{'source':6} {'model':7} {'TPxPPxDP':>11} {'recompute':10} {'predicted s':>12} {'published s':>12} {'error':>7}"
      f" {'params GiB':>16} {'activations GiB':>18} {'sim s':>6}")
errors, signed, mem_errors, no_fit = [], [], [], []
by_profile = {}  # hardware profile -> signed errors
for r in csv.DictReader(row for row in open(table) if not row.startswith("#")):
    args = sets(r)
    plan = run("plan", args)
    # Figure 1 counts a GPU's share of the transformer layers (18 x 12 L h^2 / (t p)): with a pipeline, a middle
    # stage's (pipeline rank 1, no embedding or head); without, the one rank's. Its activations are those kept
    # for backward at the first stage, the most of any (recompute's working memory is apart, in "recompute").
    ranks = plan["ranks"]
    pick = 1 if int(r["pipeline"]) > 1 else 0
    mem = next(m for m, rk in zip(plan["memory"], ranks) if rk["pipeline_rank"] == pick and rk["tensor_rank"] == 0)
    params = (mem["params"] + mem["gradients"] + mem["optimizer"] + mem["buckets"]) / GIB
    acts = max(m["activations"] for m in plan["memory"]) / GIB
    published = float(r["published_s"]) if r["published_s"] else (
        flops(r) / (float(r["published_tflops"]) * 1e12 * int(r["gpus"])) if r["published_tflops"] else None)
    t, p = int(r["tensor"]), int(r["pipeline"])
    layout = f"{t}x{p}x{int(r['gpus']) // (t * p)}"
    line = f"{r['source']:6} {r['model']:7} {layout:>11} {r['recompute']:10}"
    if published is not None:
        t0 = time.time()
        sim = run("simulate", args)
        wall = time.time() - t0
        predicted = sim["step_time_ms"] / 1e3
        err = predicted / published - 1
        errors.append(abs(err))
        signed.append(err)
        by_profile.setdefault(plan["hardware"], []).append(err)
        if not all(m["fits"] for m in plan["memory"]):
            no_fit.append(f"{r['model']} {r['recompute']}")
        line += f" {predicted:12.2f} {published:12.2f} {100 * err:+6.1f}%"
    else:
        wall = None
        line += f" {'':>12} {'':>12} {'':>7}"
    if r["params_gib"]:
        pe = params / float(r["params_gib"]) - 1
        mem_errors.append(abs(pe))
        cell = f"{params:.2f} / {float(r['params_gib']):.2f}"
    else:
        cell = ""
    line += f" {cell:>16}"
    if r["activations_gib"]:
        ae = acts / float(r["activations_gib"]) - 1
        mem_errors.append(abs(ae))
        line += f" {f'{acts:.2f} / ' + r['activations_gib']:>18}"
    else:
        line += f" {'':>18}"
    line += f" {wall:6.2f}" if wall is not None else ""
    print(line, flush=True)

mean = lambda xs: sum(xs) / len(xs)
print(f"\nstep time: {len(errors)} rows, mean absolute error {100 * mean(errors):.1f}%, worst {100 * max(errors):.1f}%,"
      f" mean signed {100 * mean(signed):+.1f}% (goals: mean <= 8%, worst <= 15%, signed within +-3%)")
print(f"memory (K22 Figure 1, predicted / published GiB): {len(mem_errors)} figures, mean absolute error "
      f"{100 * mean(mem_errors):.1f}%, worst {100 * max(mem_errors):.1f}% (goal: <= 5%)")
print("called 'does not fit' on the GPUs it ran on: " + (", ".join(no_fit) if no_fit else "none"))
# One line per hardware profile, as the profile's `published_check:` quotes it.
for profile, errs in by_profile.items():
    print(published_check.line(profile, "Megatron-LM", errs))

# Korthikanti et al.'s Table 4: forward and backward of one transformer layer of the 22B model (its Table 3
# layout: TP 8, micro-batch 4), in ms. A layer's predicted time is the difference between the step's F (or B)
# at 48 and at 24 layers, over 24: the embedding, head and optimizer cancel out.
import os, tempfile
# Beside Table 5's step of the same layout (full recompute 1.42 s; selective + sequence 1.10 s), what the step
# spends outside its 48 layers (embedding, head and loss, optimizer), published and predicted.
TABLE4 = [("no recompute", "false", "false", 7.7, 11.9, None), ("sequence parallel", "false", "true", 7.2, 11.8, None),
          ("full recompute", "layer", "false", 7.7, 19.5, 1.42), ("selective", "selective", "false", 7.7, 13.2, None),
          ("selective + sequence", "selective", "true", 7.2, 13.1, 1.10)]
def phase_ms(args, layers):
    with tempfile.TemporaryDirectory() as tmp:
        trace = os.path.join(tmp, "p.json")
        out = subprocess.run([parallax, "simulate", scenario, *args, "--set", f"model.layers={layers}", "-o", trace],
                             capture_output=True, text=True)
        if out.returncode != 0:
            sys.exit(f"published.sh: parallax simulate failed:\n{out.stderr}")
        events = json.load(open(trace))
    events = events["traceEvents"] if isinstance(events, dict) else events
    return {e["cat"]: e["dur"] / 1e3 for e in events if e.get("ph") == "X" and e["pid"] == 0 and e["cat"] in ("F", "B", "OPTIM")}
print("\nK22 Table 4, one layer of the 22B model (TP 8, micro-batch 4), ms:")
print(f"{'':22} {'forward':>16} {'backward':>16} {'combined':>16}   outside the layers, ms")
layer_errors = []
for name, recompute, sp, fwd, bwd, step in TABLE4:
    args = ["--set", f"parallel.activation_checkpointing={recompute}", "--set", f"parallel.sequence_parallel={sp}"]
    args += [a for k, val in backward("async").items() for a in ("--set", f"{k}={val}")]  # K22's code
    a, b = phase_ms(args, 48), phase_ms(args, 24)
    f, bw = (a["F"] - b["F"]) / 24, (a["B"] - b["B"]) / 24
    cells = [(f, fwd), (bw, bwd), (f + bw, fwd + bwd)]
    layer_errors.append(abs((f + bw) / (fwd + bwd) - 1))
    outside = ""
    if step:
        predicted_step = a["F"] + a["B"] + a["OPTIM"]  # one micro-batch, one rank's path
        outside = f"   {predicted_step - 48 * (f + bw):5.0f} / {1e3 * step - 48 * (fwd + bwd):5.0f}"
    print(f"{name:22} " + " ".join(f"{p:5.2f} / {q:4.1f} {100 * (p / q - 1):+5.1f}%" for p, q in cells) + outside)
print(f"layer (forward + backward): {len(layer_errors)} rows, mean absolute error {100 * mean(layer_errors):.1f}%, "
      f"worst {100 * max(layer_errors):.1f}%")
PY
