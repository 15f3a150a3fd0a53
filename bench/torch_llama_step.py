#!/usr/bin/env python3
"""Llama 3.1 blocks trained on one GPU as torchtitan trains them, for seconds on end, then profiled:
what a real step's kernels take, kind by kind, once the GPU has run long enough to sit at its power
limit, and again after it idled (a burst, as the profiles' tables were measured).

    python3 bench/torch_llama_step.py SCENARIO.json --trace OUT.json [--burst-trace OUT.json]
        [--compile] [--device cuda|cpu] [--warmup-seconds S] [--idle-seconds S] [--profile-steps N]
        [--sdpa flash|cudnn|math] [-o FIGURES.json]

SCENARIO.json is `parallax plan SCENARIO --json` of the job to run (bench/data/gpu-titan.yaml): the
model's shape (its first decoder block: hidden, heads, key/value heads, MLP width; the vocabulary;
the number of blocks), the sequence and the batch come from it, so the trace matches the plan that
`parallax calibrate --from-trace TRACE SCENARIO` sets it against.

The model is torchtitan's Llama 3 (pytorch/torchtitan, torchtitan/models/llama/model.py, as of its
December 2024 benchmarks): RMSNorm in fp32 then cast back, rotary positions through fp32 complex
numbers, keys and values repeated to the query heads (repeat_kv) before
scaled_dot_product_attention(is_causal=True), SwiGLU as w2(silu(w1 x) * w3 x), no biases, the loss
as cross_entropy over the logits cast to fp32. Parameters are bf16 on a GPU (fp32 on the CPU),
AdamW. With --compile each block is compiled on its own, as torchtitan's `compile = true` does;
eager runs each op as its own kernel (`model.kernels: eager` in the scenario, `fused` compiled).

Each step is annotated with the phases `parallax calibrate --from-trace` reads from a PyTorch
profiler trace (## forward ##, ## backward ##, ## optimizer ##). The steps after --warmup-seconds
of training are profiled into --trace; with --burst-trace the GPU then idles --idle-seconds and the
next steps are profiled into it. Prints the step times and writes them with the device's name (-o).
"""
import argparse
import json
import math
import statistics
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.profiler import ProfilerActivity, profile, record_function


class RMSNorm(nn.Module):
    def __init__(self, dim, eps):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        y = x.float()
        y = y * torch.rsqrt(y.pow(2).mean(-1, keepdim=True) + self.eps)
        return y.type_as(x) * self.weight


def rope(x, freqs):
    """torchtitan's apply_rotary_emb: pairs of features as complex numbers, turned in fp32."""
    z = torch.view_as_complex(x.float().reshape(*x.shape[:-1], -1, 2))
    return torch.view_as_real(z * freqs).flatten(3).type_as(x)


class Block(nn.Module):
    def __init__(self, hidden, heads, kv_heads, ffn, eps):
        super().__init__()
        self.heads, self.kv_heads, self.head_dim = heads, kv_heads, hidden // heads
        self.attention_norm = RMSNorm(hidden, eps)
        self.wq = nn.Linear(hidden, heads * self.head_dim, bias=False)
        self.wk = nn.Linear(hidden, kv_heads * self.head_dim, bias=False)
        self.wv = nn.Linear(hidden, kv_heads * self.head_dim, bias=False)
        self.wo = nn.Linear(heads * self.head_dim, hidden, bias=False)
        self.ffn_norm = RMSNorm(hidden, eps)
        self.w1 = nn.Linear(hidden, ffn, bias=False)
        self.w2 = nn.Linear(ffn, hidden, bias=False)
        self.w3 = nn.Linear(hidden, ffn, bias=False)

    def forward(self, x, freqs):
        b, s, _ = x.shape
        h = self.attention_norm(x)
        q = rope(self.wq(h).view(b, s, self.heads, self.head_dim), freqs)
        k = rope(self.wk(h).view(b, s, self.kv_heads, self.head_dim), freqs)
        v = self.wv(h).view(b, s, self.kv_heads, self.head_dim)
        rep = self.heads // self.kv_heads  # torchtitan's repeat_kv: a copy of K and V per query head
        k = k[:, :, :, None, :].expand(b, s, self.kv_heads, rep, self.head_dim).reshape(b, s, self.heads, self.head_dim)
        v = v[:, :, :, None, :].expand(b, s, self.kv_heads, rep, self.head_dim).reshape(b, s, self.heads, self.head_dim)
        o = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=True)
        x = x + self.wo(o.transpose(1, 2).reshape(b, s, -1))
        h = self.ffn_norm(x)
        return x + self.w2(F.silu(self.w1(h)) * self.w3(h))


class Llama(nn.Module):
    def __init__(self, shape, compile_blocks):
        super().__init__()
        self.embedding = nn.Embedding(shape["vocab"], shape["hidden"])
        blocks = [Block(shape["hidden"], shape["heads"], shape["kv_heads"], shape["ffn"], 1e-5) for _ in range(shape["blocks"])]
        self.blocks = nn.ModuleList([torch.compile(b) if compile_blocks else b for b in blocks])
        self.norm = RMSNorm(shape["hidden"], 1e-5)
        self.output = nn.Linear(shape["hidden"], shape["vocab"], bias=False)

    def forward(self, tokens, labels, freqs):
        x = self.embedding(tokens)
        for b in self.blocks:
            x = b(x, freqs)
        logits = self.output(self.norm(x))
        return F.cross_entropy(logits.flatten(0, 1).float(), labels.flatten(0, 1))


def bad_input(why):
    """Bad input exits 2 with where and why, as Parallax's own commands do."""
    print(f"torch_llama_step.py: {why}", file=sys.stderr)
    sys.exit(2)


def rotary_frequencies(shape, device):
    """torchtitan's precompute_freqs_cis (theta 500,000, without Llama 3.1's long-context scaling,
    which changes no kernel): one unit complex number per position and pair of features."""
    head_dim = shape["hidden"] // shape["heads"]
    inv = 1.0 / (500000.0 ** (torch.arange(0, head_dim, 2, device=device).float() / head_dim))
    angles = torch.outer(torch.arange(shape["seq"], device=device).float(), inv)
    return torch.polar(torch.ones_like(angles), angles)[None, :, None, :]


def shape_of(plan):
    """The job's shape from `parallax plan --json`: its first decoder block's projections and form
    (Hugging Face's parameter names), the embedding's vocabulary, the block count, the sequence and
    the micro-batch."""
    layers = plan["layers"]
    block = next(l for l in layers if l["kind"] == "encoder")
    weight = {p["name"].split(".", 2)[-1]: p["shape"] for p in block["params"]}
    form = block["form"]
    if form["mlp"] != "swiglu" or form["norm"] != "rmsnorm" or not form["rope"] or form["bias"]:
        bad_input("the plan's blocks are not Llama's (SwiGLU, RMSNorm, rotary positions, no biases)")
    return {"vocab": next(l for l in layers if l["kind"] == "embedding")["params"][0]["shape"][0],
            "hidden": weight["self_attn.q_proj.weight"][1], "heads": form["heads"], "kv_heads": form["kv_heads"],
            "ffn": weight["mlp.gate_proj.weight"][0], "blocks": sum(1 for l in layers if l["kind"] == "encoder"),
            "seq": plan["seq_len"], "batch": plan["microbatch_size"]}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("plan", help="`parallax plan SCENARIO --json` of the job")
    ap.add_argument("--trace", required=True, help="the profiled steps after the warm-up (Kineto JSON)")
    ap.add_argument("--burst-trace", help="then, after --idle-seconds, the next steps profiled (Kineto JSON)")
    ap.add_argument("--compile", action="store_true", help="compile each block (torchtitan's compile = true)")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--warmup-seconds", type=float, default=15.0)
    ap.add_argument("--idle-seconds", type=float, default=5.0)
    ap.add_argument("--profile-steps", type=int, default=3)
    ap.add_argument("--sdpa", default="flash", choices=["flash", "cudnn", "math"],
                    help="scaled_dot_product_attention's backend (flash: FlashAttention-2, the scenario's attention: flash2)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("-o", "--out", help="the figures as JSON")
    args = ap.parse_args()

    try:
        with open(args.plan) as f:
            shape = shape_of(json.load(f))
    except (OSError, ValueError, KeyError, StopIteration) as e:
        bad_input(f"{args.plan}: not `parallax plan --json` of a decoder model ({type(e).__name__}: {e})")
    torch.manual_seed(args.seed)
    dev = torch.device(args.device)
    dtype = torch.bfloat16 if dev.type == "cuda" else torch.float32
    model = Llama(shape, args.compile).to(device=dev, dtype=dtype)
    freqs = rotary_frequencies(shape, dev)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.01)
    backend = {"flash": SDPBackend.FLASH_ATTENTION, "cudnn": SDPBackend.CUDNN_ATTENTION, "math": SDPBackend.MATH}[args.sdpa]
    if dev.type == "cpu":  # the CPU's scaled_dot_product_attention has no flash or cuDNN kernel
        backend, args.sdpa = SDPBackend.MATH, "math"
    tokens = torch.randint(0, shape["vocab"], (shape["batch"], shape["seq"] + 1), device=dev)
    sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)

    def step():
        with sdpa_kernel(backend):
            with record_function("## forward ##"):
                loss = model(tokens[:, :-1], tokens[:, 1:], freqs)
            with record_function("## backward ##"):
                loss.backward()
        with record_function("## optimizer ##"):
            opt.step()
            opt.zero_grad(set_to_none=True)
        return loss

    losses = []

    def timed(n):
        out = []
        for _ in range(n):
            sync()
            t0 = time.perf_counter()
            loss = step()
            sync()
            out.append((time.perf_counter() - t0) * 1e3)
        losses.append(loss.item())
        if not math.isfinite(losses[-1]):
            raise SystemExit("torch_llama_step.py: the loss is not finite")
        return out

    def profiled(path, n):
        with profile(activities=[ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if dev.type == "cuda" else [])) as p:
            ms = timed(n)
        p.export_chrome_trace(path)
        return ms

    first = timed(2)  # compiles, with --compile: the warm-up's seconds are training's, after it
    t0 = time.perf_counter()
    warm = []
    while time.perf_counter() - t0 < args.warmup_seconds:
        warm += timed(1)
    warmup_seconds = round(time.perf_counter() - t0, 1)
    sustained = profiled(args.trace, args.profile_steps)
    burst = None
    if args.burst_trace:
        time.sleep(args.idle_seconds)
        burst = profiled(args.burst_trace, args.profile_steps)
    figures = {"device": torch.cuda.get_device_name(dev) if dev.type == "cuda" else "cpu", "torch": torch.__version__,
               "shape": shape, "compile": args.compile, "sdpa": args.sdpa, "first_steps_ms": first,
               "warmup_seconds": warmup_seconds, "warmup_steps": len(warm),
               "sustained_ms": sustained, "burst_ms": burst, "first_loss": losses[0], "last_loss": losses[-1]}
    print(f"torch_llama_step: {figures['device']}, {shape['blocks']} blocks of hidden {shape['hidden']}, sequence {shape['seq']}, "
          f"batch {shape['batch']}, {'compiled' if args.compile else 'eager'}, sdpa {args.sdpa}")
    print(f"  first steps {', '.join(f'{m:.1f}' for m in first)} ms; {len(warm)} steps in the warm-up; loss {losses[0]:.3f} -> {losses[-1]:.3f}")
    print(f"  sustained (after {figures['warmup_seconds']} s): median {statistics.median(sustained):.2f} ms of {len(sustained)} profiled steps")
    if burst:
        print(f"  burst (after {args.idle_seconds} s idle): median {statistics.median(burst):.2f} ms; "
              f"sustained / burst {statistics.median(sustained) / statistics.median(burst):.3f}")
    if args.out:
        with open(args.out, "w") as f:
            json.dump(figures, f, indent=1)


if __name__ == "__main__":
    main()
