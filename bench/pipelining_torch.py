#!/usr/bin/env python3
"""The torch.distributed.pipelining side of bench/pipelining_bench.sh: the same model (the mlp
or the transformer preset), data,
micro-batches and schedule as `parallax run`, trained with torch's own pipelining on CPU ranks
over Gloo, under a Parallax rank's conditions (bench/peer.py: core binding, intra-op threads, Gloo's
threads SCHED_BATCH, the step timed from before its data is loaded). Prints one JSON line: the
losses, each rank's step times (rank_step_ms) and per step the slowest rank's (step_ms), as
`parallax run --json` reports its steps.

  pipelining_torch.py PLAN_JSON SCHEDULE [--steps N] [--lr LR] [--momentum M] [--seed S] [--heads H]

PLAN_JSON is `parallax plan SCENARIO --json` of a scenario with `data.shuffle: false` (batches
in file order, which this script reads the same way: Fashion-MNIST's files, or exec/data.cpp's
synthetic tokens): its layers and their split into stages. Each layer starts from the weights
Parallax gives it: torch.manual_seed(seed * 1000003 + layer index), then the layer's modules
built in exec/model.cpp's order, LibTorch initialising each as torch does.
"""
import argparse
import json
import math
import os
import socket
import sys
import time
import warnings

warnings.filterwarnings("ignore")
import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.multiprocessing as mp  # noqa: E402
from torch.distributed.pipelining import PipelineStage  # noqa: E402
from torch.distributed.pipelining.schedules import get_schedule_class  # noqa: E402

from fashion_mnist import training_set  # noqa: E402
import peer  # noqa: E402

NAMES = {"gpipe": "GPipe", "1f1b": "1F1B", "interleaved-1f1b": "Interleaved1F1B", "looped-bfs": "LoopedBFS",
         "interleaved-zero-bubble": "InterleavedZeroBubble", "zbv-zero-bubble": "ZBVZeroBubble",
         "dualpipev": "DualPipeV"}
class Embed(torch.nn.Module):
    """exec/model.cpp's EmbedImpl: tokens plus learned positions (none with rotary positions),
    out as [seq, batch, hidden]."""

    def __init__(self, vocab, hidden, position_rows, positions=True):
        super().__init__()
        self.tok = torch.nn.Embedding(vocab, hidden)
        self.pos = torch.nn.Embedding(position_rows, hidden) if positions else None

    def forward(self, ids):
        x = self.tok(ids)
        if self.pos is not None:
            x = x + self.pos(torch.arange(ids.shape[1], device=ids.device)).unsqueeze(0)
        return x.transpose(0, 1).contiguous()


class RMSNorm(torch.nn.Module):
    """exec/model.cpp's RMSNormImpl (Hugging Face's LlamaRMSNorm: in fp32, eps 1e-5)."""

    def __init__(self, hidden):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.ones(hidden))

    def forward(self, x):
        x32 = x.float()
        return self.weight * (x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + 1e-5)).to(x.dtype)


def make_norm(kind, hidden):
    return RMSNorm(hidden) if kind == "rmsnorm" else torch.nn.LayerNorm(hidden)


def rotate(x):
    """Rotary positions, rotate-half form, base 10000, on [batch, heads, seq, head_dim]."""
    s, d = x.shape[2], x.shape[3]
    inv_freq = 1.0 / torch.pow(10000.0, torch.arange(0, d, 2, dtype=torch.float32, device=x.device) / d)
    freqs = torch.outer(torch.arange(s, dtype=torch.float32, device=x.device), inv_freq)
    angles = torch.cat([freqs, freqs], -1)
    cos, sin = angles.cos().to(x.dtype), angles.sin().to(x.dtype)
    x1, x2 = x.chunk(2, -1)
    return x * cos + torch.cat([-x2, x1], -1) * sin


class Attention(torch.nn.Module):
    """Causal self-attention with grouped key/value heads, as exec/model.cpp's AttentionImpl: heads
    of head_dim, with qk_norm each head's query and key normed before the rotary positions, and
    with a window each query attending to its `window` most recent tokens."""

    def __init__(self, hidden, form):
        super().__init__()
        self.heads, self.kv_heads, self.rope = form["heads"], form["kv_heads"], form["rope"]
        self.d = form.get("head_dim", hidden // self.heads)
        self.q_proj = torch.nn.Linear(hidden, self.heads * self.d, bias=form["qkv_bias"])
        self.k_proj = torch.nn.Linear(hidden, self.kv_heads * self.d, bias=form["qkv_bias"])
        self.v_proj = torch.nn.Linear(hidden, self.kv_heads * self.d, bias=form["qkv_bias"])
        self.o_proj = torch.nn.Linear(self.heads * self.d, hidden, bias=form["bias"])
        self.window = form.get("window", 0)
        self.q_norm = make_norm(form["norm"], self.d) if form.get("qk_norm") else None
        self.k_norm = make_norm(form["norm"], self.d) if form.get("qk_norm") else None

    def forward(self, x):  # [seq, batch, hidden]
        s, b, _ = x.shape
        d = self.d

        def split(t, n):
            return t.view(s, b, n, d).permute(1, 2, 0, 3)

        q, k, v = split(self.q_proj(x), self.heads), split(self.k_proj(x), self.kv_heads), split(self.v_proj(x), self.kv_heads)
        if self.q_norm is not None:
            q, k = self.q_norm(q), self.k_norm(k)
        if self.rope:
            q, k = rotate(q), rotate(k)
        if self.kv_heads < self.heads:
            k = k.repeat_interleave(self.heads // self.kv_heads, 1)
            v = v.repeat_interleave(self.heads // self.kv_heads, 1)
        scores = torch.matmul(q, k.transpose(-2, -1)) / math.sqrt(d)
        masked = torch.ones(s, s, dtype=torch.bool, device=x.device).triu(1)
        if self.window:  # a sliding window: keys window or more tokens back masked too
            masked |= torch.ones(s, s, dtype=torch.bool, device=x.device).tril(-self.window)
        out = torch.matmul(torch.softmax(scores.masked_fill(masked, float("-inf")), -1), v)
        return self.o_proj(out.permute(2, 0, 1, 3).reshape(s, b, self.heads * d))


class LatentAttention(torch.nn.Module):
    """Multi-head latent attention, as exec/model.cpp's LatentAttentionImpl (Hugging Face's
    DeepseekV3Attention names and order; rotate-half rotary, softmax scale 1/sqrt(nope + rope))."""

    def __init__(self, hidden, form):
        super().__init__()
        m, bias = form["mla"], form["qkv_bias"]
        self.heads, self.nope, self.rope, self.v = form["heads"], m["qk_nope_head_dim"], m["qk_rope_head_dim"], m["v_head_dim"]
        self.rank = m["kv_lora_rank"]
        q_width = self.heads * (self.nope + self.rope)
        if m["q_lora_rank"] > 0:
            self.q_a_proj = torch.nn.Linear(hidden, m["q_lora_rank"], bias=bias)
            self.q_a_layernorm = RMSNorm(m["q_lora_rank"])
            self.q_b_proj = torch.nn.Linear(m["q_lora_rank"], q_width, bias=False)
        else:
            self.q_proj = torch.nn.Linear(hidden, q_width, bias=False)
        self.kv_a_proj_with_mqa = torch.nn.Linear(hidden, self.rank + self.rope, bias=bias)
        self.kv_a_layernorm = RMSNorm(self.rank)
        self.kv_b_proj = torch.nn.Linear(self.rank, self.heads * (self.nope + self.v), bias=False)
        self.o_proj = torch.nn.Linear(self.heads * self.v, hidden, bias=form["bias"])

    def forward(self, x):  # [seq, batch, hidden]
        s, b, _ = x.shape

        def heads(t, n):
            return t.reshape(s, b, n, -1).permute(1, 2, 0, 3)

        q = self.q_proj(x) if hasattr(self, "q_proj") else self.q_b_proj(self.q_a_layernorm(self.q_a_proj(x)))
        q_nope, q_rope = heads(q, self.heads).split([self.nope, self.rope], -1)
        latent, k_rope = self.kv_a_proj_with_mqa(x).split([self.rank, self.rope], -1)
        k_nope, v = heads(self.kv_b_proj(self.kv_a_layernorm(latent)), self.heads).split([self.nope, self.v], -1)
        k_rope = rotate(heads(k_rope, 1)).expand(b, self.heads, s, self.rope)
        q, k = torch.cat([q_nope, rotate(q_rope)], -1), torch.cat([k_nope, k_rope], -1)
        scores = torch.matmul(q, k.transpose(-2, -1)) / math.sqrt(self.nope + self.rope)
        future = torch.ones(s, s, dtype=torch.bool, device=x.device).triu(1)
        out = torch.matmul(torch.softmax(scores.masked_fill(future, float("-inf")), -1), v)
        return self.o_proj(out.permute(2, 0, 1, 3).reshape(s, b, self.heads * self.v))


class Mlp(torch.nn.Module):
    def __init__(self, hidden, ffn, form):
        super().__init__()
        self.kind = form["mlp"]
        if self.kind == "swiglu":
            self.gate_proj = torch.nn.Linear(hidden, ffn, bias=form["bias"])
        self.up_proj = torch.nn.Linear(hidden, ffn, bias=form["bias"])
        self.down_proj = torch.nn.Linear(ffn, hidden, bias=form["bias"])

    def forward(self, x):
        if self.kind == "swiglu":
            return self.down_proj(torch.nn.functional.silu(self.gate_proj(x)) * self.up_proj(x))
        if self.kind == "gelu":
            return self.down_proj(torch.nn.functional.gelu(self.up_proj(x)))
        if self.kind == "relu2":
            return self.down_proj(torch.relu(self.up_proj(x)).square())
        return self.down_proj(torch.relu(self.up_proj(x)))


class Experts(torch.nn.Module):
    """A MoE block's routed experts as grouped weights (experts x out x in), each drawn whole as a
    Linear of that shape is initialised (exec/moe.cpp's grouped_weight)."""

    def __init__(self, experts, hidden, ffn, kind):
        super().__init__()

        def grouped(out, inp):
            bound = 1.0 / math.sqrt(inp)
            return torch.nn.Parameter(torch.empty(experts, out, inp).uniform_(-bound, bound))

        self.kind = kind
        if kind == "swiglu":
            self.gate_proj = grouped(ffn, hidden)
        self.up_proj = grouped(ffn, hidden)
        self.down_proj = grouped(hidden, ffn)

    def forward(self, x, counts):
        """x: the routed copies sorted by expert, counts[e] rows for expert e."""
        outs, at = [], 0
        for e, n in enumerate(counts):
            xe = x[at:at + n]
            at += n
            up = xe @ self.up_proj[e].t()
            if self.kind == "swiglu":
                act = torch.nn.functional.silu(xe @ self.gate_proj[e].t()) * up
            elif self.kind == "gelu":
                act = torch.nn.functional.gelu(up)
            elif self.kind == "relu2":
                act = torch.relu(up).square()
            else:
                act = torch.relu(up)
            outs.append(act @ self.down_proj[e].t())
        return torch.cat(outs, 0)


class Moe(torch.nn.Module):
    """exec/moe.cpp's MoE MLP on one rank, every expert local: a bias-free gate, softmax in fp32,
    top_k renormalised (Mixtral's and Qwen3-MoE's router; top-1 keeps its probability), dropless,
    plus the shared experts."""

    def __init__(self, hidden, form):
        super().__init__()
        moe = form["moe"]
        self.experts_count, self.top_k = moe["experts"], moe["top_k"]
        self.router = torch.nn.Module()
        self.router.gate = torch.nn.Linear(hidden, self.experts_count, bias=False)
        self.experts = Experts(self.experts_count, hidden, moe["ffn"], form["mlp"])
        if moe["shared"]:
            self.shared_experts = Mlp(hidden, moe["shared"] * moe["ffn"], form)

    def forward(self, x):
        flat = x.reshape(-1, x.shape[-1])
        probs = torch.softmax(self.router.gate(flat).float(), -1)
        weights, chosen = probs.topk(self.top_k, -1)
        if self.top_k > 1:  # top-1 keeps its probability (Switch Transformer)
            weights = weights / weights.sum(-1, keepdim=True)
        expert_of = chosen.reshape(-1)
        order = torch.sort(expert_of, stable=True).indices
        token = torch.div(order, self.top_k, rounding_mode="floor")
        counts = torch.bincount(expert_of, minlength=self.experts_count).tolist()
        y = self.experts(flat.index_select(0, token), counts)
        y = (y * weights.reshape(-1).index_select(0, order).unsqueeze(1).to(y.dtype)).to(flat.dtype)
        out = torch.zeros_like(flat).index_add(0, token, y)
        if hasattr(self, "shared_experts"):
            out = out + self.shared_experts(flat)
        return out.view_as(x)


class Decoder(torch.nn.Module):
    """The pre-norm decoder block of exec/model.cpp's DecoderImpl (Hugging Face's module order)."""

    def __init__(self, hidden, ffn, form):
        super().__init__()
        self.self_attn = LatentAttention(hidden, form) if form.get("mla") else Attention(hidden, form)
        self.mlp = Moe(hidden, form) if form.get("moe") else Mlp(hidden, ffn, form)
        self.input_layernorm = make_norm(form["norm"], hidden)
        self.post_attention_layernorm = make_norm(form["norm"], hidden)

    def forward(self, x):
        x = x + self.self_attn(self.input_layernorm(x))
        return x + self.mlp(self.post_attention_layernorm(x))


class Head(torch.nn.Module):
    """The final norm and the projection to the vocabulary: its own Linear, or with tied
    embeddings the embedding's matrix (`tied`, an Embed of the same stage)."""

    def __init__(self, hidden, vocab, norm="layernorm", bias=True, tied=None):
        super().__init__()
        self.norm = make_norm(norm, hidden)
        self.tied = [tied] if tied is not None else None  # a list: not registered as a child
        if tied is None:
            self.output = torch.nn.Linear(hidden, vocab, bias=bias)

    def forward(self, x):
        y = self.norm(x)
        return torch.nn.functional.linear(y, self.tied[0].tok.weight) if self.tied else self.output(y)


def shape(layer, suffix):
    return next(p["shape"] for p in layer["params"] if p["name"].endswith(suffix))


def token_dims(plan):
    """(vocab, hidden, seq_len, classes) of a token model's plan."""
    first, last = plan["layers"][0], plan["layers"][-1]
    vocab, hidden = shape(first, "tok.weight")
    seq = int(first["output_elems_per_sample"]) // hidden
    classes = last["output_elems_per_sample"] // seq if last["kind"] == "head" else vocab
    return vocab, hidden, seq, int(classes)


def make_layer(layer, heads, built=()):
    """One layer as exec/model.cpp builds it, in the same order of random draws. `built`: the
    stage's modules so far (a tied head takes the embedding's matrix from there)."""
    kind, name = layer["kind"], layer["name"]
    form = layer.get("form")
    if kind == "embedding":
        vocab, hidden = shape(layer, "tok.weight")
        rope = bool(form and form["rope"])
        rows = 0 if rope else shape(layer, "pos.weight")[0]  # model.max_positions: may pass seq_len
        return [Embed(vocab, hidden, rows, positions=not rope)]
    if kind == "encoder" and form:
        hidden = shape(layer, "o_proj.weight")[0]
        ffn = 0 if form.get("moe") else shape(layer, "mlp.up_proj.weight")[0]
        return [Decoder(hidden, ffn, form)]
    if kind == "encoder":
        hidden = shape(layer, "in_proj_weight")[1]
        return [torch.nn.TransformerEncoderLayer(hidden, heads, dim_feedforward=shape(layer, "linear1.weight")[0], dropout=0.0)]
    if kind == "head":
        hidden = shape(layer, "norm.weight")[0]
        if form and form["tie_embeddings"]:
            embed = next(m for m in built if isinstance(m, Embed))
            return [Head(hidden, embed.tok.num_embeddings, form["norm"], tied=embed)]
        vocab, _ = shape(layer, "output.weight")
        return [Head(hidden, vocab, form["norm"] if form else "layernorm", bias=not form)]
    out_f, in_f = shape(layer, "weight")
    linear = [torch.nn.Linear(in_f, out_f, bias=any(p["name"].endswith("bias") for p in layer["params"]))]
    return linear if name == "out" else linear + [torch.nn.ReLU()]  # the mlp preset: ReLU but after the output


def stage_module(plan, stage, seed, heads):
    layers = []
    by_name = {l["name"]: (i, l) for i, l in enumerate(plan["layers"])}
    for name in plan["stages"][stage]["layers"]:
        index, layer = by_name[name]
        torch.manual_seed(seed * 1000003 + index)
        layers += make_layer(layer, heads, layers)
    return torch.nn.Sequential(*layers)


def splitmix(x):
    m = (1 << 64) - 1
    x = (x + 0x9E3779B97F4A7C15) & m
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & m
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & m
    return x ^ (x >> 31)


def token_batch(first, n, seq, vocab, classes, seed):
    """exec/data.cpp's synthetic tokens for samples first .. first+n-1 (data.shuffle false)."""
    m = (1 << 64) - 1
    toks = [[splitmix(seed ^ (((first + i) * 4096 + t) & m)) % vocab for t in range(seq)] for i in range(n)]
    ids = torch.tensor(toks, dtype=torch.long)
    return ids, (ids * 31 + 7) % classes


def stages_of(rank, p, stages, v_shape):
    if v_shape:
        return [s for s in range(stages) if (s % p if (s // p) % 2 == 0 else p - 1 - s % p) == rank]
    return list(range(rank, stages, p))


def worker(rank, args, port, queue):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    before = peer.start_rank(rank, args.pipeline)
    dist.init_process_group("gloo", rank=rank, world_size=args.pipeline)
    peer.demote_helper_threads(before)
    plan = args.plan
    n_stages, chunks = len(plan["stages"]), plan["chunks"]
    seed, batch = args.seed, plan["global_batch"]
    v_shape = args.schedule in ("zbv-zero-bubble", "dualpipev")
    mine = stages_of(rank, args.pipeline, n_stages, v_shape)
    modules = [stage_module(plan, s, seed, args.heads) for s in mine]
    # Shapes given, so torch need not infer them (its inference exchanges pickled objects).
    mb = batch // chunks
    first_layer = plan["layers"][0]
    tokens = first_layer["kind"] == "embedding"
    if tokens:
        vocab, hidden, seq, classes = token_dims(plan)

    def io(m, s):  # a micro-batch's input and output for stage s
        x = torch.zeros(mb, seq, dtype=torch.long) if (tokens and s == 0) else None
        with torch.no_grad():
            if x is None:
                x = torch.zeros(seq, mb, hidden) if tokens else torch.zeros(mb, m[0].in_features)
            return x, m(x)

    pipe = []
    for m, s in zip(modules, mine):
        x, y = io(m, s)
        pipe.append(PipelineStage(m, s, n_stages, torch.device("cpu"), input_args=(x,), output_args=(y,)))
    params = [q for m in modules for q in m.parameters()]
    optimizer = torch.optim.SGD(params, lr=args.lr, momentum=args.momentum)
    cls = get_schedule_class(NAMES[args.schedule])
    multi = args.schedule not in ("gpipe", "1f1b")
    def loss_fn(out, target):  # exec/model.cpp's model_loss
        if tokens:  # [seq, batch, vocab] against [batch, seq]
            return torch.nn.functional.cross_entropy(out.transpose(0, 1).reshape(-1, out.shape[-1]).float(), target.reshape(-1))
        return torch.nn.functional.cross_entropy(out.float(), target)
    schedule = cls(pipe if multi else pipe[0], chunks, loss_fn=loss_fn, scale_grads=True)
    if not tokens:
        images, labels = training_set()
        per_epoch = (images.shape[0] // batch) * batch
    has_first, has_last = 0 in mine, (n_stages - 1) in mine
    losses, times = [], []
    for step in range(args.steps):
        t0 = time.perf_counter()  # before the data, as a Parallax rank times its step
        if tokens:
            x, y = token_batch(step * batch, batch, seq, vocab, classes, seed)
        else:
            first = (step * batch) % per_epoch
            x, y = images[first:first + batch], labels[first:first + batch]
        optimizer.zero_grad()
        step_losses = []
        kwargs = {}
        if has_last:
            kwargs.update(target=y, losses=step_losses)
        schedule.step(x, **kwargs) if has_first else schedule.step(**kwargs)
        optimizer.step()
        times.append((time.perf_counter() - t0) * 1e3)
        if has_last:
            losses.append(sum(float(l) for l in step_losses) / len(step_losses))
    if has_last:
        queue.put({"losses": losses})
    queue.put({"rank": rank, "step_ms": times})
    dist.barrier()
    dist.destroy_process_group()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("plan_json")
    ap.add_argument("schedule", choices=sorted(NAMES))
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--lr", type=float, default=0.05)
    ap.add_argument("--momentum", type=float, default=0.9)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--heads", type=int, default=1, help="attention heads of a transformer's encoder layers")
    args = ap.parse_args()
    with open(args.plan_json) as f:
        args.plan = json.load(f)
    args.pipeline = args.plan["grid"]["pipeline"]
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    peer.set_thread_environment(args.pipeline)
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    mp.spawn(worker, args=(args, port, queue), nprocs=args.pipeline, join=True)
    out, per_rank = {}, {}
    while not queue.empty():
        item = queue.get()
        if "rank" in item:
            per_rank[item["rank"]] = item["step_ms"]
        else:
            out.update(item)
    out["rank_step_ms"] = [per_rank[r] for r in sorted(per_rank)]
    out["step_ms"] = peer.slowest_rank_steps(out["rank_step_ms"])
    out["conditions"] = peer.conditions(args.pipeline)
    print(json.dumps(out))


if __name__ == "__main__":
    sys.exit(main())
