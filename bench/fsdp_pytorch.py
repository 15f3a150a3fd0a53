"""PyTorch's own FSDP2 (torch.distributed.fsdp.fully_shard) on the step Parallax runs for
scenarios/mlp-fashion-mnist-ddp2.yaml with parallel.shard: full: the same MLP (784-256-256-10),
each Linear its own unit and the root one more (as torchtitan shards each block, then the model),
reshard_after_forward True, fp32, SGD with momentum, Gloo on CPU, the per-rank batch and world size,
and a Parallax rank's conditions (bench/peer.py). The data path is Parallax's (exec/data.cpp, as
bench/ddp_pytorch.py), in file order on both sides (data.shuffle: false; Parallax's shuffle is
libstdc++'s std::shuffle, which torch cannot replay), so that both see the same samples each step.
The initial weights are Parallax's too: layer l of the model is built right
after torch.manual_seed(seed * 1000003 + l) (exec/model.cpp), so both sides start equal and their
losses can be compared step by step.
Writes the undisturbed step time in ms (p20 after a warm-up fifth) into OUT, and every rank's step
times and rank 0's loss per step into OUT with the extension .json. Needs a torch with FSDP2
(2.6 or later; pip's, scripts/setup.sh --torch).

    fsdp_pytorch.py WORLD BATCH STEPS SEED PORT OUT"""
import json
import os
import sys
import tempfile
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn as nn
from torch.distributed.fsdp import fully_shard

import peer
from fashion_mnist import training_set


def parallax_mlp(seed):
    """784 -> 256 -> 256 -> 10 with Parallax's per-layer seeds (exec/model.cpp)."""
    layers = []
    for l, (i, o) in enumerate([(784, 256), (256, 256), (256, 10)]):
        torch.manual_seed(seed * 1000003 + l)
        layers.append(nn.Linear(i, o))
        if l < 2:
            layers.append(nn.ReLU())
    return nn.Sequential(*layers)


def worker(rank, world, port, batch, steps, seed, out_dir):
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    before = peer.start_rank(rank, world)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    model = parallax_mlp(seed)
    mesh = dist.device_mesh.init_device_mesh("cpu", (world,))
    for layer in model:
        if isinstance(layer, nn.Linear):
            fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)
    peer.demote_helper_threads(before)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    images, labels = training_set()
    global_batch = batch * world
    per_epoch = (images.shape[0] // global_batch) * global_batch
    order = torch.arange(images.shape[0])  # file order: Parallax runs with data.shuffle false here
    loss_fn = nn.CrossEntropyLoss()
    times, losses = [], []
    for step in range(steps):
        t0 = time.perf_counter()
        first = step * global_batch + rank * batch
        index = order[first % per_epoch:first % per_epoch + batch]
        x, y = images.index_select(0, index), labels.index_select(0, index)
        opt.zero_grad()
        loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()
        times.append((time.perf_counter() - t0) * 1000)
        losses.append(loss.item())  # after the timed step, as Parallax reads its loss once a step
    dist.barrier()
    peer.save_rank(out_dir, rank, times, losses)
    dist.destroy_process_group()


def main():
    world, batch, steps, seed, port, out = sys.argv[1:7]
    world, steps = int(world), int(steps)
    peer.set_thread_environment(world)
    with tempfile.TemporaryDirectory() as out_dir:
        mp.spawn(worker, args=(world, int(port), int(batch), steps, int(seed), out_dir), nprocs=world)
        # rank 0's losses under "loss" too, as this bench has always written them
        loss = json.load(open(os.path.join(out_dir, "rank0.json")))["losses"]
        peer.write_figures(out, out_dir, world, steps, loss=loss)


if __name__ == "__main__":
    main()
