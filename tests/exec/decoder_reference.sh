#!/usr/bin/env bash
# The Llama-family blocks on the executor against plain PyTorch (issue 55's check): for each block
# form, `parallax run` of a one-rank plan and the same model built in PyTorch from `parallax plan
# --json` (bench/pipelining_torch.py's Decoder, bench/torch_eager_step.py's loop: the same initial
# weights, drawn in exec/model.cpp's order, the same synthetic tokens, AdamW) train 10 steps in
# fp32; every step's loss must agree to 1e-5 relative. The Llama form runs a second time as two
# pipeline stages, against the same one-stage reference; Qwen3's attention (wide heads, query and
# key norms) on one rank; a sliding window in every other block over two stages; latent
# attention (DeepSeek's) on one rank and two stages, and without a query rank. A
# mixture-of-experts form (issue 59) runs on one rank, then with its experts split
# over 2 ranks (c10d's all-to-all over Gloo), over 2 of 4 data-parallel ranks (expert gradients
# averaged over their expert-data-parallel pairs), over 2 ranks of each of 2 pipeline stages, under DualPipeV (split backwards, F and B overlapped), and
# under Megatron-core's combined 1F1B (one stage, and interleaved over 2 ranks x 2 stages each),
# each against the same one-rank PyTorch reference MoE: the global batch (batch_size x data) is
# the same 8 samples a step. Top-1 routing (no renormalisation) runs with 4 experts on 4 ranks.
# The MoE checks train with SGD (momentum 0.9), whose steps scale with the gradient: AdamW's do not,
# and would hide expert gradients scaled wrongly.
#   decoder_reference.sh PARALLAX PYTHON SOURCE_DIR
set -euo pipefail
parallax=$1 python=$2 src=$3
"$python" -c 'import torch' || { echo "decoder_reference: $python has no torch"; exit 1; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

optimizer=adamw  # or sgd: SGD with momentum 0.9, which a wrongly scaled gradient cannot hide from (AdamW's steps do not scale)
check() {  # NAME FORM [--set ...]: runs both sides and compares
  local name=$1 form=$2 opt=(--lr 0.001) yaml_opt="{kind: adamw, lr: 0.001, weight_decay: 0.01}"
  shift 2
  if [ $optimizer = sgd ]; then opt=(--lr 0.05 --sgd-momentum 0.9) yaml_opt="{kind: sgd, lr: 0.05, momentum: 0.9, weight_decay: 0.01}"; fi
  cat >"$work/$name.yaml" <<YAML
model: {preset: transformer, layers: 2, hidden: 64, heads: 8, ffn: 96, seq_len: 32, vocab: 256, $form}
data: {source: synthetic, batch_size: 8, steps: 10, seed: 1, shuffle: false}
parallel: {data: 1, pipeline: 1, chunks: 2, precision: fp32}
optimizer: $yaml_opt
hardware: cpu-host
YAML
  "$parallax" plan "$work/$name.yaml" --json >"$work/$name-plan.json"
  "$parallax" run "$work/$name.yaml" "$@" --json >"$work/$name-run.json"
  OMP_NUM_THREADS=1 "$python" "$src/bench/torch_eager_step.py" "$work/$name-plan.json" --device cpu --precision fp32 \
    --steps 10 --seed 1 "${opt[@]}" --weight-decay 0.01 >"$work/$name-torch.json"
  "$python" - "$name" "$work/$name-run.json" "$work/$name-torch.json" <<'PY'
import json, sys
name, ours, theirs = sys.argv[1], json.load(open(sys.argv[2])), json.load(open(sys.argv[3]))
a, b = [s["loss"] for s in ours["steps"]], theirs["losses"]
worst = max(abs(x / y - 1) for x, y in zip(a, b))
print(f"{name}: {len(a)} steps, Parallax {a[0]:.6f} .. {a[-1]:.6f}, PyTorch {b[0]:.6f} .. {b[-1]:.6f}, worst relative difference {worst:.2e}")
sys.exit(0 if len(a) == len(b) == 10 and worst <= 1e-5 and a[-1] < a[0] else 1)
PY
}

check llama "kv_heads: 2, mlp: swiglu, norm: rmsnorm, positions: rope, bias: false"
check llama-2-stages "kv_heads: 2, mlp: swiglu, norm: rmsnorm, positions: rope, bias: false" --set parallel.pipeline=2
check qwen2 "kv_heads: 4, mlp: swiglu, norm: rmsnorm, positions: rope, bias: false, qkv_bias: true"
check nemotron "kv_heads: 1, mlp: relu2, norm: layernorm, positions: rope, bias: false"
check gpt2 "mlp: gelu, tie_embeddings: true, max_positions: 48"  # a table longer than the sequence (32), rows 33-48 unused
# Qwen3's attention: heads wider than hidden / heads, each head's query and key RMS-normed.
check qwen3 "kv_heads: 2, head_dim: 16, qk_norm: true, mlp: swiglu, norm: rmsnorm, positions: rope, bias: false"
# A sliding window of 8 tokens (of 32) in every other block, over 2 pipeline stages.
check sliding-window "kv_heads: 2, mlp: swiglu, norm: rmsnorm, positions: rope, bias: false, sliding_window: 8, full_attention_every: 2" \
  --set parallel.pipeline=2
# Latent attention (DeepSeek-V3's form, then V2-Lite's without a query rank), over 2 pipeline stages too.
mla="mlp: swiglu, norm: rmsnorm, positions: rope, bias: false, mla: {q_lora_rank: 24, kv_lora_rank: 16, qk_nope_head_dim: 8, qk_rope_head_dim: 4, v_head_dim: 6}"
check mla "$mla"
check mla-2-stages "$mla" --set parallel.pipeline=2
check mla-no-query-rank "mlp: swiglu, norm: rmsnorm, positions: rope, bias: false, mla: {kv_lora_rank: 16, qk_nope_head_dim: 8, qk_rope_head_dim: 8, v_head_dim: 8}"
optimizer=sgd  # the MoE checks: expert gradients must be scaled as the dense ones
moe="kv_heads: 2, mlp: swiglu, norm: rmsnorm, positions: rope, bias: false, experts: 4, experts_per_token: 2, shared_experts: 1, expert_ffn: 32"
check moe "$moe"
check moe-expert-2 "$moe" --set parallel.data=2 --set parallel.expert=2 --set data.batch_size=4
check moe-expert-2-of-4 "$moe" --set parallel.data=4 --set parallel.expert=2 --set data.batch_size=2
check moe-expert-2-stages-2 "$moe" --set parallel.data=2 --set parallel.expert=2 --set data.batch_size=4 --set parallel.pipeline=2
check moe-expert-2-dualpipev "$moe" --set parallel.data=2 --set parallel.expert=2 --set data.batch_size=4 --set parallel.pipeline=2 \
  --set parallel.virtual=2 --set parallel.schedule=dualpipev --set parallel.chunks=4
check moe-combined-1f1b "$moe" --set parallel.data=2 --set parallel.expert=2 --set data.batch_size=4 --set parallel.chunks=4 \
  --set parallel.schedule=1f1b --set parallel.overlap_moe_expert_parallel_comm=true
check moe-combined-1f1b-interleaved "$moe" --set parallel.data=2 --set parallel.expert=2 --set data.batch_size=4 --set parallel.chunks=4 \
  --set parallel.pipeline=2 --set parallel.virtual=2 --set parallel.schedule=interleaved-1f1b --set parallel.overlap_moe_expert_parallel_comm=true
# DeepSeek-V3's block: latent attention, a dense first block, then MoE blocks with a shared expert,
# the experts split over 2 ranks.
check mla-moe-expert-2 "$mla, experts: 4, experts_per_token: 2, shared_experts: 1, expert_ffn: 32, moe_layers: {every: 1, first_dense: 1}" \
  --set parallel.data=2 --set parallel.expert=2 --set data.batch_size=4
check moe-relu2-top1 "kv_heads: 1, mlp: relu2, norm: layernorm, positions: rope, bias: false, experts: 4, experts_per_token: 1, expert_ffn: 24" \
  --set parallel.data=4 --set parallel.expert=4 --set data.batch_size=2
