#!/usr/bin/env python3
"""GEMMs in short bursts and without pause: how much of a burst's rate a GPU keeps when it multiplies
for seconds on end, and at what clock and power. The GPU profiles' GEMM tables are short
measurements (OpenXLA's generator times a handful of calls, xla/tools/matmul_perf_table_gen.cc);
a training step multiplies for seconds, at the clock the power limit leaves. The ratio is what a
profile's `device.compute.clock_fraction` says (docs/simulator.md), measured instead of taken from
a paper.

    python3 bench/gemm_clock.py [--device cuda|cpu] [--seconds S] [--shapes MxNxK,...] [--dtype bf16|fp32] [-o OUT.json]

For each shape (C[m, n] = A[m, k] B[k, n]):
- burst: after 2 s idle, the median of 10 calls alternating two sets of random inputs, each timed
  alone (CUDA events), as the tables were measured;
- sustained: random inputs (torch.randn), calls back to back for S seconds; the rate over the last
  half, with the SM clock, the board power and the clock event reasons nvidia-smi sampled meanwhile;
- zeros (the first shape only): the same with all-zero inputs, which switch fewer transistors and
  draw less power (H. He, 'Strangely, Matrix Multiplications on GPUs Run Faster When Given
  "Predictable" Data!', thonking.ai, 2024): how much of the loss is the power limit's.
On the CPU (--device cpu: bench/gpu_check.sh --dry-run) the same steps run, with no clocks to read.
Prints one line per measurement and writes the figures as JSON (-o).
"""
import argparse
import json
import statistics
import subprocess
import sys
import threading
import time

import torch

# Torch's bf16 GEMMs of a Llama 3.1 8B step at 16k tokens (w1/w3, w2), and the square one every
# GEMM benchmark quotes.
DEFAULT_SHAPES = "8192x8192x8192,16384x14336x4096,16384x4096x14336"


class Sampler:
    """nvidia-smi's readings every 100 ms while a measurement runs: (time, SM MHz, W, reasons)."""

    # Newer drivers name the reasons clocks_event_reasons, older ones clocks_throttle_reasons.
    QUERIES = (("clocks.sm", "power.draw", "clocks_event_reasons.active"),
               ("clocks.sm", "power.draw", "clocks_throttle_reasons.active"), ("clocks.sm", "power.draw"))

    def __init__(self):
        self.samples, self.proc, self.thread = [], None, None

    def start(self):
        for fields in self.QUERIES:
            try:
                self.proc = subprocess.Popen(["nvidia-smi", "-i", "0", "--query-gpu=" + ",".join(fields),
                                              "--format=csv,noheader,nounits", "-lms", "100"],
                                             stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
            except OSError:
                return self  # no nvidia-smi: no readings
            first = self.proc.stdout.readline()
            if first and first.split(",")[0].strip().replace(".", "").isdigit():
                self._keep(first)
                break
            self.proc.kill()
            self.proc = None
        if self.proc:
            self.thread = threading.Thread(target=self._read, daemon=True)
            self.thread.start()
        return self

    def _keep(self, line):
        parts = [p.strip() for p in line.split(",")]
        try:
            self.samples.append((time.monotonic(), float(parts[0]), float(parts[1]), parts[2] if len(parts) > 2 else ""))
        except (ValueError, IndexError):
            pass

    def _read(self):
        for line in self.proc.stdout:
            self._keep(line)

    def stop(self):
        if self.proc:
            self.proc.kill()
            self.proc.wait()
        return self

    def between(self, t0, t1):
        """Median SM clock and power, and the clock event reasons seen, from t0 to t1."""
        s = [x for x in self.samples if t0 <= x[0] <= t1]
        if not s:
            return {}
        return {"sm_clock_mhz": statistics.median(x[1] for x in s), "power_w": statistics.median(x[2] for x in s),
                "clock_event_reasons": sorted({x[3] for x in s if x[3]}), "samples": len(s)}


def sync(device):
    if device == "cuda":
        torch.cuda.synchronize()


def call_seconds(device, fn):
    """One call's time: CUDA events on a GPU, the wall clock on the CPU."""
    if device == "cuda":
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        return a.elapsed_time(b) / 1e3
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def burst(device, m, n, k, dtype, idle_s):
    sets = [(torch.randn(m, k, device=device, dtype=dtype), torch.randn(k, n, device=device, dtype=dtype)) for _ in range(2)]
    torch.matmul(*sets[0])  # the kernel chosen and loaded
    sync(device)
    time.sleep(idle_s)
    times = [call_seconds(device, lambda i=i: torch.matmul(*sets[i % 2])) for i in range(10)]
    return 2.0 * m * n * k / statistics.median(times) / 1e12


def sustained(device, m, n, k, dtype, seconds, inputs, sampler):
    make = torch.randn if inputs == "randn" else torch.zeros
    a, b = make(m, k, device=device, dtype=dtype), make(k, n, device=device, dtype=dtype)
    out = torch.empty(m, n, device=device, dtype=dtype)
    torch.matmul(a, b, out=out)
    sync(device)
    begin = time.monotonic()
    half = begin + seconds / 2
    calls, t_half, calls_half = 0, None, 0
    while True:
        for _ in range(8):  # a few calls ahead of the device, not seconds of them
            torch.matmul(a, b, out=out)
        calls += 8
        sync(device)
        now = time.monotonic()
        if t_half is None and now >= half:
            t_half, calls_half = now, calls
        if now >= begin + seconds:
            break
    end = time.monotonic()
    if t_half is None or calls == calls_half:
        t_half, calls_half = begin, 0
    tflops = 2.0 * m * n * k * (calls - calls_half) / (end - t_half) / 1e12
    return {"tflops": tflops, "calls": calls, **sampler.between(t_half, end)}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    ap.add_argument("--seconds", type=float, default=15.0, help="each sustained measurement's length (default 15)")
    ap.add_argument("--shapes", default=DEFAULT_SHAPES, help="MxNxK,... (default %(default)s)")
    ap.add_argument("--dtype", default="bf16", choices=["bf16", "fp32"])
    ap.add_argument("--idle", type=float, default=2.0, help="seconds idle before each burst (default 2)")
    ap.add_argument("-o", "--out", help="write the figures here as JSON")
    args = ap.parse_args()
    if args.device == "cuda" and not torch.cuda.is_available():
        print("gemm_clock: --device cuda, but torch sees no CUDA device (--device cpu runs it here)", file=sys.stderr)
        sys.exit(2)
    try:
        shapes = [tuple(int(x) for x in s.lower().split("x")) for s in args.shapes.split(",")]
        if any(len(s) != 3 or min(s) <= 0 for s in shapes):
            raise ValueError
    except ValueError:
        ap.error("--shapes: give MxNxK,... with positive sizes, e.g. 8192x8192x8192")
    dtype = torch.bfloat16 if args.dtype == "bf16" else torch.float32
    torch.manual_seed(1)
    facts = {"device": torch.cuda.get_device_name(0) if args.device == "cuda" else "cpu", "torch": torch.__version__,
             "dtype": args.dtype, "sustained_seconds": args.seconds}
    print("gemm_clock: %(device)s, torch %(torch)s, %(dtype)s" % facts, flush=True)
    rows = []
    sampler = Sampler().start() if args.device == "cuda" else Sampler()
    try:
        for i, (m, n, k) in enumerate(shapes):
            row = {"m": m, "n": n, "k": k, "burst_tflops": burst(args.device, m, n, k, dtype, args.idle)}
            row["sustained"] = sustained(args.device, m, n, k, dtype, args.seconds, "randn", sampler)
            row["sustained_over_burst"] = row["sustained"]["tflops"] / row["burst_tflops"]
            if i == 0:
                row["zeros"] = sustained(args.device, m, n, k, dtype, args.seconds, "zeros", sampler)
            rows.append(row)
            line = "%dx%dx%d: burst %.4g TFLOP/s, sustained %.4g (x%.3f)" % (
                m, n, k, row["burst_tflops"], row["sustained"]["tflops"], row["sustained_over_burst"])
            for key in ("sustained", "zeros"):
                r = row.get(key, {})
                if key == "zeros" and r:
                    line += "; zeros %.4g" % r["tflops"]
                if "sm_clock_mhz" in r:
                    line += " at %.0f MHz, %.0f W" % (r["sm_clock_mhz"], r["power_w"])
            print(line, flush=True)
    finally:
        sampler.stop()
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"facts": facts, "shapes": rows}, f, indent=1)


if __name__ == "__main__":
    main()
