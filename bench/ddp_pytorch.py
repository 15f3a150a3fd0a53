"""PyTorch's own DistributedDataParallel on the step Parallax runs for
scenarios/mlp-fashion-mnist-ddp2.yaml: the same MLP (784-256-256-10), per-rank batch, world size,
bucket_cap_mb, first bucket, SGD with momentum, Gloo on CPU, and a Parallax rank's conditions
(bench/peer.py: core binding, intra-op threads, Gloo's threads SCHED_BATCH, data loaded inside the
timed step, the slowest rank's step). The data path is Parallax's too (exec/data.cpp):
Fashion-MNIST's images as floats in memory, a shuffled order per epoch, and each step this rank's
samples taken with index_select.
Writes the undisturbed step time in ms (peer.step_statistic: p20 after a warm-up fifth, as
Parallax's step statistic) into OUT, and every rank's step times, the warm-up included, with the
slowest rank's per step beside it (OUT with the extension .json), as the raw output the figure
comes from. Used by bench/exec_bench.sh; needs a python with torch.

    ddp_pytorch.py WORLD BATCH STEPS BUCKET_CAP_MB FIRST_BUCKET_MB PORT OUT"""
import json
import os
import sys
import tempfile
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn as nn

import peer
from fashion_mnist import training_set


def worker(rank, world, port, batch, steps, bucket_cap_mb, first_bucket_mb, times_dir):
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    before = peer.start_rank(rank, world)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, 10))
    # DDP reads the first bucket's size when it is built (and keeps it for its rebuild).
    dist._DEFAULT_FIRST_BUCKET_BYTES = int(first_bucket_mb * 1024 * 1024)
    ddp = nn.parallel.DistributedDataParallel(model, bucket_cap_mb=bucket_cap_mb)
    peer.demote_helper_threads(before)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.05, momentum=0.9)
    images, labels = training_set()
    global_batch = batch * world
    per_epoch = (images.shape[0] // global_batch) * global_batch
    order, epoch_of_order = None, -1
    loss_fn = nn.CrossEntropyLoss()
    times = []
    for step in range(steps):
        t0 = time.perf_counter()
        first = step * global_batch + rank * batch
        if first // per_epoch != epoch_of_order:  # as exec/data.cpp: a new order each epoch
            epoch_of_order = first // per_epoch
            order = torch.randperm(images.shape[0], generator=torch.Generator().manual_seed(7919 + epoch_of_order))
        index = order[first % per_epoch:first % per_epoch + batch]
        x, y = images.index_select(0, index), labels.index_select(0, index)
        opt.zero_grad()
        loss_fn(ddp(x), y).backward()
        opt.step()
        times.append((time.perf_counter() - t0) * 1000)
    dist.barrier()
    with open(os.path.join(times_dir, "rank%d.json" % rank), "w") as f:
        json.dump(times, f)
    dist.destroy_process_group()


def main():
    world, batch, steps, cap, first, port, out = sys.argv[1:8]
    world, steps = int(world), int(steps)
    peer.set_thread_environment(world)
    with tempfile.TemporaryDirectory() as times_dir:
        mp.spawn(worker, args=(world, int(port), int(batch), steps, float(cap), float(first), times_dir), nprocs=world)
        per_rank = [json.load(open(os.path.join(times_dir, "rank%d.json" % r))) for r in range(world)]
    slowest = peer.slowest_rank_steps(per_rank)
    with open(out, "w") as f:
        f.write("%f\n" % peer.step_statistic(slowest))
    raw = os.path.splitext(out)[0] + ".json"
    with open(raw if raw != out else out + ".steps.json", "w") as f:
        json.dump({"warm_up_steps": steps // peer.WARM_UP_SHARE, "conditions": peer.conditions(world),
                   "step_ms": slowest, "rank_step_ms": per_rank}, f)
        f.write("\n")


if __name__ == "__main__":
    main()
