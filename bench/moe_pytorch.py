"""PyTorch's side of bench/moe_bench.sh: the expert-parallel MoE job `parallax run` runs for a
plan, written in plain PyTorch on CPU ranks over Gloo, under a Parallax rank's conditions
(bench/peer.py). The model is bench/pipelining_torch.py's (exec/model.cpp's layers, the same
initial weights: every rank draws the whole model, then keeps its experts), its MoE blocks' routed
experts split over the ranks as exec/moe.cpp splits them (rank r holds experts [r E/n, (r+1) E/n))
and reached with torch.distributed.nn.functional.all_to_all_single (autograd's all-to-all): the
counts first, then the token copies, then the results back. The dense parameters are reduced by
torch's DistributedDataParallel (its default buckets; the experts' left out of it, as each expert
lives on one rank here: expert = data, and divided by the ranks, as Megatron-core and Parallax
scale them), AdamW steps. The data is exec/data.cpp's synthetic tokens
(rank r takes samples step x global + r x batch ...), made inside the timed step as Parallax makes
its own (in Python: about a millisecond of a step of hundreds). One micro-batch a step (chunks 1).

Writes the undisturbed step time in ms (p20 of the slowest rank's steps after a warm-up fifth)
into OUT, and every rank's step times and losses into OUT with the extension .json.

    moe_pytorch.py PLAN_JSON WORLD STEPS SEED LR PORT OUT"""
import json
import os
import sys
import tempfile
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn as nn
from torch.distributed.nn.functional import all_to_all_single
from torch.nn.parallel import DistributedDataParallel

import peer
from pipelining_torch import Moe, stage_module, token_batch, token_dims


class ExpertParallel(nn.Module):
    """A Moe's routed experts, this rank's share of them, reached by all-to-all."""

    def __init__(self, experts, rank, world):
        super().__init__()
        self.world = world
        self.local = experts.up_proj.shape[0] // world
        for name in ("gate_proj", "up_proj", "down_proj"):
            if hasattr(experts, name):
                whole = getattr(experts, name).data
                setattr(experts, name, nn.Parameter(whole[rank * self.local:(rank + 1) * self.local].clone()))
        self.experts = experts

    def forward(self, x, counts):
        """x: this rank's routed copies sorted by expert; counts[e] of them for expert e."""
        n, local = self.world, self.local
        mine = torch.tensor(counts, dtype=torch.long)
        arrived_counts = torch.empty_like(mine)
        dist.all_to_all_single(arrived_counts, mine)
        frm = arrived_counts.view(n, local).tolist()
        send, recv = mine.view(n, local).sum(1).tolist(), [sum(row) for row in frm]
        arrived = all_to_all_single(x.new_empty(sum(recv), x.shape[1]), x.contiguous(), recv, send)
        # Regroup by local expert (each expert's rows from rank 0, then rank 1, ...), and back after.
        start, order = [sum(recv[:j]) for j in range(n)], []
        for e in range(local):
            for j in range(n):
                order.extend(range(start[j], start[j] + frm[j][e]))
                start[j] += frm[j][e]
        grouping = torch.tensor(order, dtype=torch.long)
        per_expert = [sum(frm[j][e] for j in range(n)) for e in range(local)]
        done = self.experts(arrived.index_select(0, grouping), per_expert).index_select(0, torch.argsort(grouping))
        return all_to_all_single(x.new_empty(sum(send), x.shape[1]), done.contiguous(), send, recv)


def worker(rank, world, port, plan, steps, seed, lr, out_dir):
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    before = peer.start_rank(rank, world)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    model = stage_module(plan, 0, seed, 0)
    for m in model.modules():
        if isinstance(m, Moe):
            m.experts = ExpertParallel(m.experts, rank, world)
    expert_params = [p for m in model.modules() if isinstance(m, ExpertParallel) for p in m.parameters()]
    experts = {id(p) for p in expert_params}
    DistributedDataParallel._set_params_and_buffers_to_ignore_for_model(
        model, [name for name, p in model.named_parameters() if id(p) in experts])
    ddp = DistributedDataParallel(model)
    peer.demote_helper_threads(before)
    opt = torch.optim.AdamW(model.parameters(), lr=lr)
    batch = plan["global_batch"] // world
    vocab, _, seq, classes = token_dims(plan)
    times, losses = [], []
    for step in range(steps):
        t0 = time.perf_counter()
        ids, target = token_batch(step * plan["global_batch"] + rank * batch, batch, seq, vocab, classes, seed)
        opt.zero_grad()
        out = ddp(ids)  # [seq, batch, vocab], as exec/model.cpp's head gives it
        loss = nn.functional.cross_entropy(out.transpose(0, 1).reshape(-1, out.shape[-1]).float(), target.reshape(-1))
        loss.backward()
        for p in expert_params:  # summed over the ranks' tokens by the all-to-all: the mean, as Parallax's
            p.grad.div_(world)
        opt.step()
        times.append((time.perf_counter() - t0) * 1000)
        losses.append(loss.item())  # after the timed step, as Parallax reads its loss once a step
    dist.barrier()
    peer.save_rank(out_dir, rank, times, losses)
    dist.destroy_process_group()


def main():
    plan_json, world, steps, seed, lr, port, out = sys.argv[1:8]
    world, steps = int(world), int(steps)
    with open(plan_json) as f:
        plan = json.load(f)
    if len(plan["stages"]) != 1 or plan["chunks"] != 1:
        sys.exit("moe_pytorch.py: needs a one-stage plan with chunks 1")
    peer.set_thread_environment(world)
    with tempfile.TemporaryDirectory() as out_dir:
        mp.spawn(worker, args=(world, int(port), plan, steps, int(seed), float(lr), out_dir), nprocs=world)
        peer.write_figures(out, out_dir, world, steps)


if __name__ == "__main__":
    main()
