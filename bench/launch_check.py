#!/usr/bin/env python3
"""Launch-bound steps, checked on the recorded H200 traces (issue 56, item 3).

    python3 bench/launch_check.py [RESULTS]   (default bench/results/gpu-h200-2026-11-27)

The simulator's rule (docs/simulator.md, "Launch-bound steps"): the host launches each action's
kernels after the previous action's, without waiting for the device; the device runs an action's
kernels after the previous action's and ends it no sooner than the host's last launch. This applies
the rule to one rank's F, B and OPTIM with figures taken from the CUPTI-traced run (RESULTS/check/,
07:54 UTC) and predicts the untraced run of the same binary (RESULTS/untraced/, 08:31 UTC), whose
CUDA-event spans are what `parallax compare` checked (docs/gpu.md):

- device time of an action: the sum of its kernels (CUPTI) plus one back-to-back gap per kernel,
  the gap measured on the traced fp32 OPTIM (device-paced: its launches were queued during B);
- host launch time of an action: its kernel count x the host's time per kernel for that kind of
  action, measured where the action is launch-bound (the traced bf16 run, every action): its span
  over its kernels. CUPTI's own callbacks lengthen each launch, so these are upper bounds.

It prints, per precision and action, the untraced run's span, "alone" (each action from an idle
device: the larger of device and host time, as calibrate measures today) and "host ahead" (the
rule along the step). Figures are medians over the steps after the first two.
"""
import gzip
import json
import statistics
import sys
from pathlib import Path


def events(path):
    with gzip.open(path) as f:
        d = json.load(f)
    return d["traceEvents"] if isinstance(d, dict) else d


def actions_with_kernels(path):
    """{kind: [(span_us, kernel_busy_us, kernels), ...]} over the recorded steps after the first two."""
    ev = events(path)
    spans = [e for e in ev if e.get("cat") in ("F", "B", "OPTIM")]
    # Kernels and memsets; the GPU lane's spans named after their action are summaries, not kernels.
    kernels = sorted((e for e in ev if e.get("cat") == "gpu" and e["name"] != e["args"].get("action")), key=lambda e: e["ts"])
    out = {}
    for a in spans:
        if a["args"].get("step", 0) < 2:
            continue
        inside = [k for k in kernels if a["ts"] <= k["ts"] < a["ts"] + a["dur"]]
        if inside:
            out.setdefault(a["cat"], []).append((a["dur"], sum(k["dur"] for k in inside), len(inside)))
    return out


def spans(path):
    out = {}
    for a in events(path):
        if a.get("cat") in ("F", "B", "OPTIM") and a["args"].get("step", 0) >= 2:
            out.setdefault(a["cat"], []).append(a["dur"])
    return {k: statistics.median(v) for k, v in out.items()}


def median(rows, i):
    return statistics.median(r[i] for r in rows)


def main():
    results = Path(sys.argv[1] if len(sys.argv) > 1 else "bench/results/gpu-h200-2026-11-27")
    traced = {p: actions_with_kernels(results / "check" / f"trace-{p}.json.gz") for p in ("fp32", "bf16")}
    # The host's time per kernel launch, by kind of action, where every action is launch-bound.
    host_per_kernel = {k: median(rows, 0) / median(rows, 2) for k, rows in traced["bf16"].items()}
    # The device's gap between back-to-back kernels, where the launches were queued ahead.
    opt = traced["fp32"]["OPTIM"]
    gap = (median(opt, 0) - median(opt, 1)) / median(opt, 2)
    print(f"host time per kernel launch (traced bf16, launch-bound): "
          + ", ".join(f"{k} {v:.1f} us" for k, v in host_per_kernel.items()))
    print(f"device gap between back-to-back kernels (traced fp32 OPTIM): {gap:.2f} us\n")
    print(f"{'precision':9} {'action':6} {'kernels':>7} {'device ms':>9} {'host ms':>8} {'untraced ms':>11} "
          f"{'alone ms':>9} {'error':>7} {'host ahead ms':>13} {'error':>7}")
    for p in ("fp32", "bf16"):
        measured = spans(results / "untraced" / f"untraced-{p}.json.gz")
        host_free = device_free = 0.0
        for kind in ("F", "B", "OPTIM"):
            rows = traced[p][kind]
            n = median(rows, 2)
            device = median(rows, 1) + n * gap
            host = n * host_per_kernel[kind]
            alone = max(device, host)
            host_free += host
            start = device_free
            device_free = max(start + device, host_free)
            ahead = device_free - start
            m = measured[kind]
            print(f"{p:9} {kind:6} {n:7.0f} {device / 1e3:9.2f} {host / 1e3:8.2f} {m / 1e3:11.2f} {alone / 1e3:9.2f} "
                  f"{100 * (alone / m - 1):+6.1f}% {ahead / 1e3:13.2f} {100 * (ahead / m - 1):+6.1f}%")


if __name__ == "__main__":
    main()
