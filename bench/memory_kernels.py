#!/usr/bin/env python3
"""Memory-bound kernels on a GPU, timed two ways: eagerly between CUDA events (as a training step
launches them) and as a CUDA graph of back-to-back calls (as `parallax calibrate --tables` times
them), each as GB/s of bytes read and written once. Does the graph change what they reach?

    python3 bench/memory_kernels.py [--mib 512] [-o OUT.json]
"""
import argparse
import json

import torch


def rate(fn, nbytes, graph, calls=40, repeats=5):
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(s)
    torch.cuda.synchronize()
    if graph:
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            for _ in range(calls):
                fn()
        run = g.replay
    else:
        def run():
            for _ in range(calls):
                fn()
    best = []
    for _ in range(repeats):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.cuda.synchronize()
        a.record()
        run()
        b.record()
        b.synchronize()
        best.append(a.elapsed_time(b) * 1e-3 / calls)
    best.sort()
    return nbytes / best[len(best) // 2] / 1e9


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--mib", type=int, default=512)
    ap.add_argument("-o", "--output")
    args = ap.parse_args()
    row = 4096
    rows = args.mib * 2**20 // 2 // row
    x = torch.randn(rows, row, device="cuda", dtype=torch.bfloat16)
    y = torch.empty_like(x)
    w = torch.ones(row, device="cuda", dtype=torch.bfloat16)
    b = torch.zeros(row, device="cuda", dtype=torch.bfloat16)
    gate = torch.randn_like(x)
    n = x.numel() * x.element_size()
    kernels = {
        "copy": (lambda: y.copy_(x), 2 * n),
        "add": (lambda: torch.add(x, gate, out=y), 3 * n),
        "gelu": (lambda: torch.nn.functional.gelu(x), 2 * n),
        "silu_mul": (lambda: torch.mul(torch.nn.functional.silu(gate), x, out=y), 3 * n),
        "softmax": (lambda: torch.softmax(x, -1), 2 * n),
        "layer_norm": (lambda: torch.nn.functional.layer_norm(x, (row,), w, b), 2 * n),
        "rms_norm": (lambda: torch.nn.functional.rms_norm(x, (row,), w), 2 * n),
    }
    # The GPU idles at a low clock: a second of copies first.
    for _ in range(400):
        y.copy_(x)
    torch.cuda.synchronize()
    out = {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "mib": args.mib, "kernels": {}}
    for name, (fn, nbytes) in kernels.items():
        eager, graphed = rate(fn, nbytes, False), rate(fn, nbytes, True)
        out["kernels"][name] = {"eager_gb_per_s": round(eager, 1), "graph_gb_per_s": round(graphed, 1)}
        print("%-10s eager %7.1f GB/s   graph %7.1f GB/s" % (name, eager, graphed), flush=True)
    if args.output:
        json.dump(out, open(args.output, "w"), indent=1)


if __name__ == "__main__":
    main()
