"""PyTorch's own DistributedDataParallel on the step Parallax runs for
scenarios/mlp-fashion-mnist-ddp2.yaml: the same MLP (784-256-256-10), per-rank batch, world size,
bucket_cap_mb, first bucket, SGD with momentum, Gloo on CPU, one thread per rank, each rank bound
to its own cores as Parallax's launcher binds them (bench/rank_cores.py), and, as the
executor does (exec/threads.hpp), the helper threads (Gloo's) SCHED_BATCH unless
PARALLAX_HELPER_THREADS=normal. The data path is Parallax's too (exec/data.cpp): Fashion-MNIST's
images as floats in memory, a shuffled order per epoch, and each step this rank's samples taken
with index_select inside the timed step.
Writes the undisturbed step time in ms (the 20th percentile after a warm-up fifth, as Parallax's
step statistic, bench/stats.py) into OUT, and rank 0's step times, the warm-up included, beside it
(OUT with the extension .json), as the raw output the figure comes from. Used by
bench/exec_bench.sh; needs a python with torch."""
import json
import os
import sys
import threading
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn as nn

import stats
from fashion_mnist import training_set
from rank_cores import bind_rank_cores


def thread_ids():
    return {int(tid) for tid in os.listdir("/proc/self/task")}


def demote_helper_threads(before):
    """The threads started since `before` SCHED_BATCH, as exec/threads.cpp does for a Parallax rank."""
    if os.environ.get("PARALLAX_HELPER_THREADS") == "normal":
        return
    for tid in thread_ids() - before:
        if tid != threading.get_native_id():
            try:
                os.sched_setscheduler(tid, os.SCHED_BATCH, os.sched_param(0))
            except OSError:
                pass  # a thread that ended meanwhile


def worker(rank, world, port, batch, steps, bucket_cap_mb, first_bucket_mb, out):
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    bind_rank_cores(rank, world)
    torch.set_num_threads(1)
    before = thread_ids()
    dist.init_process_group("gloo", rank=rank, world_size=world)
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, 10))
    # DDP reads the first bucket's size when it is built (and keeps it for its rebuild).
    dist._DEFAULT_FIRST_BUCKET_BYTES = int(first_bucket_mb * 1024 * 1024)
    ddp = nn.parallel.DistributedDataParallel(model, bucket_cap_mb=bucket_cap_mb)
    demote_helper_threads(before)
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
    if rank == 0:
        with open(out, "w") as f:
            f.write("%f\n" % stats.undisturbed(times[steps // 5:]))
        raw = os.path.splitext(out)[0] + ".json"
        with open(raw if raw != out else out + ".steps.json", "w") as f:
            json.dump({"rank": 0, "warm_up_steps": steps // 5, "step_ms": times}, f)
            f.write("\n")
    dist.destroy_process_group()


if __name__ == "__main__":
    world, batch, steps, cap, first, port, out = sys.argv[1:8]
    mp.spawn(worker, args=(int(world), int(port), int(batch), int(steps), float(cap), float(first), out),
             nprocs=int(world))
