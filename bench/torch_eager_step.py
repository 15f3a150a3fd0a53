#!/usr/bin/env python3
"""Plain PyTorch eager on one device, the other side of bench/gpu_check.sh's "executor against
torch" rows: the same model, weights, data and optimizer as `parallax run` of a one-rank,
one-stage plan, trained by an ordinary PyTorch loop. Prints one JSON line: the losses and the
step times (ms) of every step.

  torch_eager_step.py PLAN_JSON [--device cuda|cpu] [--precision fp32|bf16|fp16] [--steps N]
                      [--lr LR] [--weight-decay WD] [--sgd-momentum M] [--seed S] [--heads H]

PLAN_JSON is `parallax plan SCENARIO --json` of a scenario with synthetic tokens, data.shuffle
false, pipeline 1 and AdamW (the check's bench/data/gpu-transformer.yaml), or SGD with
--sgd-momentum (optimizer.kind sgd). The layers are built
as bench/pipelining_torch.py builds them (exec/model.cpp's order of random draws), so the losses
equal Parallax's in fp32.

Like for like: a step is timed from zero_grad to the optimizer step's end with the device
synchronised at both ends, as Parallax's step is. The micro-batches are made before the loop
(Parallax makes them in C++ inside its step, a few microseconds for these token batches). fp16
trains with torch.amp.GradScaler at PyTorch's defaults, as Parallax's own scaler does.
"""
import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch  # noqa: E402

from pipelining_torch import stage_module, token_batch, token_dims  # noqa: E402

DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("plan_json")
    ap.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    ap.add_argument("--precision", default="fp32", choices=["fp32", "bf16", "fp16"])
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--lr", type=float, default=1e-4)
    ap.add_argument("--weight-decay", type=float, default=0.01)
    ap.add_argument("--sgd-momentum", type=float, default=None, help="SGD with this momentum instead of AdamW")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--heads", type=int, default=16)
    args = ap.parse_args()
    with open(args.plan_json) as f:
        plan = json.load(f)
    if len(plan["stages"]) != 1 or plan["layers"][0]["kind"] != "embedding":
        sys.exit("torch_eager_step.py: needs a one-stage plan of a token model (the transformer preset)")
    if args.device == "cuda" and not torch.cuda.is_available():
        sys.exit("torch_eager_step.py: --device cuda, but this torch sees no GPU")
    device = torch.device(args.device)
    torch.set_num_threads(max(1, (os.cpu_count() or 2) // 2))  # as a one-rank `parallax run`

    model = stage_module(plan, 0, args.seed, args.heads).to(device)
    if args.sgd_momentum is None:
        optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=args.weight_decay)
    else:
        optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=args.sgd_momentum, weight_decay=args.weight_decay)
    scaler = torch.amp.GradScaler(args.device) if args.precision == "fp16" else None
    batch, chunks = plan["global_batch"], plan["chunks"]
    mb = batch // chunks
    vocab, _, seq, classes = token_dims(plan)
    batches = []
    for step in range(args.steps):
        ids, target = token_batch(step * batch, batch, seq, vocab, classes, args.seed)
        batches.append([(ids[i * mb:(i + 1) * mb].to(device), target[i * mb:(i + 1) * mb].to(device))
                        for i in range(chunks)])

    def sync():
        if device.type == "cuda":
            torch.cuda.synchronize()

    losses, times = [], []
    for step in range(args.steps):
        sync()
        t0 = time.perf_counter()
        optimizer.zero_grad()
        total = 0.0
        for ids, target in batches[step]:
            with torch.autocast(device.type, dtype=DTYPES.get(args.precision, torch.float32),
                                enabled=args.precision != "fp32"):
                out = model(ids)  # [seq, batch, vocab], as exec/model.cpp's head gives it
                loss = torch.nn.functional.cross_entropy(
                    out.transpose(0, 1).reshape(-1, out.shape[-1]).float(), target.reshape(-1)) / chunks
            (scaler.scale(loss) if scaler else loss).backward()
            total += loss.detach()
        if scaler:
            scaler.step(optimizer)
            scaler.update()
        else:
            optimizer.step()
        sync()
        times.append((time.perf_counter() - t0) * 1e3)
        losses.append(float(total))
    print(json.dumps({"precision": args.precision, "device": str(device), "losses": losses, "step_ms": times}))


if __name__ == "__main__":
    sys.exit(main())
