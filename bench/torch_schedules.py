#!/usr/bin/env python3
"""Dumps torch.distributed.pipelining's own action lists, as its _dump_csv writes them
(compute_only: one row per pipeline rank, one cell per action), for Parallax to compare with.

  torch_schedules.py OUT_DIR [--set NAME:P:V:M ...]

Each file is OUT_DIR/<parallax name>-p<P>-v<V>-m<M>.csv. torch builds each schedule with mock
stages (its own _schedule_visualizer.get_schedule_ops), so no process group or GPU is needed.
The idle cells torch pads with (None) are dropped: Parallax's lists have no time steps.
"""
import argparse
import os
import sys
import warnings

warnings.filterwarnings("ignore")
import torch  # noqa: E402
from torch.distributed.pipelining._schedule_visualizer import get_schedule_ops  # noqa: E402

# Parallax's schedule name -> torch's class name (get_schedule_class).
NAMES = {
    "gpipe": "GPipe",
    "1f1b": "1F1B",
    "interleaved-1f1b": "Interleaved1F1B",
    "looped-bfs": "LoopedBFS",
    "interleaved-zero-bubble": "InterleavedZeroBubble",
    "zbv-zero-bubble": "ZBVZeroBubble",
    "dualpipev": "DualPipeV",
}

# (name, pipeline, stages per rank, micro-batches): every schedule at a few shapes, including
# micro-batch counts below, at and above the pipeline size, and odd ones.
DEFAULT = [
    (n, p, v, m)
    for n, vs in [("gpipe", [1]), ("1f1b", [1]), ("interleaved-1f1b", [2, 3]), ("looped-bfs", [2, 3]),
                  ("interleaved-zero-bubble", [2, 3]), ("zbv-zero-bubble", [2]), ("dualpipev", [2])]
    for p in (2, 4)
    for v in vs
    for m in (1, 2, 3, 4, 6, 8, 12, 16)
]


def dump(name, p, v, m, out_dir):
    try:
        ops = get_schedule_ops(NAMES[name], p, m, num_stages_per_rank=v)
    except Exception as e:  # torch refuses some shapes (e.g. DualPipeV with m < 2p): say so, go on
        return f"{name} p{p} v{v} m{m}: torch refuses: {str(e).splitlines()[0]}"
    path = os.path.join(out_dir, f"{name}-p{p}-v{v}-m{m}.csv")
    with open(path, "w") as f:
        for rank in ops:
            f.write(",".join(str(a) for a in rank if a is not None) + "\n")
    return None


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out_dir")
    ap.add_argument("--set", action="append", default=[], metavar="NAME:P:V:M",
                    help="one shape (repeatable); default: every schedule at p 2 and 4, several m")
    args = ap.parse_args()
    os.makedirs(args.out_dir, exist_ok=True)
    shapes = DEFAULT
    if args.set:
        shapes = []
        for s in args.set:
            n, p, v, m = s.split(":")
            if n not in NAMES:
                sys.exit(f"torch_schedules: unknown schedule {n!r} (known: {', '.join(NAMES)})")
            shapes.append((n, int(p), int(v), int(m)))
    refused = [r for r in (dump(*s, args.out_dir) for s in shapes) if r]
    with open(os.path.join(args.out_dir, "TORCH_VERSION"), "w") as f:
        f.write(torch.__version__ + "\n")
    for r in refused:
        print(r)
    print(f"torch {torch.__version__}: {len(shapes) - len(refused)} schedules in {args.out_dir}, {len(refused)} refused")


if __name__ == "__main__":
    main()
