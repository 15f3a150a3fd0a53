// The bytes a step moves besides its layers' compute: tensor and context parallelism's
// collectives, and the optimizer's sweep over its states (plan/cost.hpp).
#include <algorithm>
#include <cmath>

#include "plan/cost.hpp"
#include "plan/memory.hpp"

namespace parallax::plan {

TensorTraffic tensor_traffic(const Layer& l, const ParallelSpec& p, int mb) {
  TensorTraffic t;
  if (p.tensor == 1) return t;
  t.bytes = static_cast<double>(mb) * static_cast<double>(l.shape.seq_len) / p.context * static_cast<double>(l.shape.hidden) *
            activation_bytes(p.precision);
  const bool sp = p.sequence_parallel;
  // With sequence parallelism a MoE block's router takes its own split of the tokens: no
  // all-gather before its MLP, the routed tokens' (expert_traffic) instead.
  const int mlp = sp && l.shape.moe.on() ? 0 : 1;
  switch (l.kind) {
    case LayerKind::encoder:
      (sp ? t.forward_all_gather : t.forward_all_reduce) = 1 + mlp;
      if (sp) t.forward_reduce_scatter = 1 + mlp;
      (sp ? t.backward_all_gather : t.backward_all_reduce) = 1 + mlp;
      if (sp) t.backward_reduce_scatter = 1 + mlp;
      if (const Mla& m = l.shape.form.mla; m.on()) {
        // The attention's input side moves its latents: with sequence parallelism the gather
        // before the up projections (again in backward) and the reduce-scatter of their input's
        // gradient; without it, the all-reduce of that gradient. Its output side (after the
        // output projection) stays hidden-wide.
        const double width = static_cast<double>(m.latent_width()) + (m.q_lora_rank > 0 ? 0.0 : static_cast<double>(l.shape.hidden));
        t.latent_bytes = t.bytes / static_cast<double>(l.shape.hidden) * width;
        if (sp) {
          --t.forward_all_gather, --t.backward_all_gather, --t.backward_reduce_scatter;
          t.latent.forward_all_gather = t.latent.backward_all_gather = t.latent.backward_reduce_scatter = 1;
        } else {
          --t.backward_all_reduce;
          t.latent.backward_all_reduce = 1;
        }
      }
      break;
    case LayerKind::embedding:
      // Under sequence parallelism its output is reduce-scattered, so the output's gradient is
      // all-gathered in backward (Megatron-core's VocabParallelEmbedding with
      // reduce_scatter_embeddings; torch's RowwiseParallel to Shard(1)).
      (sp ? t.forward_reduce_scatter : t.forward_all_reduce) = 1;
      if (sp) t.backward_all_gather = 1;
      break;
    case LayerKind::head:
      if (sp) t.forward_all_gather = 1;
      (sp ? t.backward_reduce_scatter : t.backward_all_reduce) = 1;
      break;
    default: break;
  }
  return t;
}

ContextTraffic context_traffic(const Layer& l, const ParallelSpec& p, int mb) {
  ContextTraffic c;
  if (p.context == 1 || l.kind != LayerKind::encoder) return c;
  const double t = p.tensor, kv = static_cast<double>(l.shape.kv_heads());
  const double kv_width = static_cast<double>(l.shape.k_width() + l.shape.v_width()) / std::min(t, kv);  // K and V per tensor rank
  c.steps = p.context - 1;
  c.step_bytes = mb * static_cast<double>(l.shape.seq_len) / p.context * kv_width * activation_bytes(p.precision);
  return c;
}

double expert_rank_tokens(const Layer& l, const ParallelSpec& p, int mb) {
  const double tokens = static_cast<double>(mb) * static_cast<double>(l.shape.seq_len) / p.context;  // a tensor group's
  return tokens * p.expert_tensor_ways() / p.tensor;
}

double expert_load_imbalance(const Layer& l, const ParallelSpec& p, int mb) {
  const MoeShape& moe = l.shape.moe;
  if (!moe.on()) return 1;
  double f = moe.imbalance;
  if (f <= 0) {
    const double ep = p.expert;
    const double n = expert_rank_tokens(l, p, mb) * static_cast<double>(moe.top_k);
    f = ep <= 1 ? 1.0 : 1.0 + std::sqrt(2.0 * std::log(ep) * (1.0 - 1.0 / ep) / n);
  }
  return moe.capacity_factor > 0 ? std::min(f, moe.capacity_factor) : f;
}

ExpertTraffic expert_traffic(const Layer& l, const ParallelSpec& p, int mb) {
  ExpertTraffic x;
  if (!l.shape.moe.on()) return x;
  x.imbalance = expert_load_imbalance(l, p, mb);
  x.experts = l.shape.moe.experts;
  x.top_k = l.shape.moe.top_k;
  const double e = activation_bytes(p.precision), k = static_cast<double>(l.shape.moe.top_k), h = static_cast<double>(l.shape.hidden);
  const double tokens = static_cast<double>(mb) * static_cast<double>(l.shape.seq_len) / p.context;  // a tensor group's
  if (p.expert > 1) {
    const double own = p.sequence_parallel ? tokens / p.tensor : tokens;
    x.all_to_all_bytes = own * k * h * e * (p.expert - 1.0) / p.expert;
    x.forward = 2;
    x.backward = p.recomputes(kRecomputeMoe) ? 4 : 2;
  }
  // Experts split over the tensor group compute its tokens together; whole experts (expert_tensor
  // 1), each rank its own.
  if (p.expert_tensor_ways() > 1 && p.sequence_parallel) x.tensor_bytes = tokens * k * h * e;
  return x;
}

OptimizerTraffic optimizer_traffic(const Scenario& s) {
  const ParallelSpec& p = s.parallel;
  const int state = s.optimizer.state_per_param();
  OptimizerTraffic t;
  if (!p.master_weights) {
    // torch's optimizer: read parameter, gradient and each state, write parameter and each state.
    t.per_shard = 4.0 * (3 + 2 * state) + (p.precision == Precision::fp16 ? 8.0 : 0.0);
    return t;
  }
  const double gradient = bytes_per_parameter(s).gradient, w = s.optimizer.state_bytes();
  // The gradient the update reads: fp32 main gradients, or the 16-bit ones as they are under a
  // bf16 state (Apex's DistributedFusedAdam steps on its reduced buffer).
  const double main_grad = s.optimizer.state_bf16 ? gradient : 4.0;
  const double to_main = main_grad > gradient ? gradient + main_grad : 0.0;  // .float() of fp32 is a no-op
  const double unscale = p.precision == Precision::fp16 ? 2 * main_grad : 0.0;  // in place, with the non-finite check
  const double norm = main_grad;                                              // --clip-grad's norm
  const double adam = main_grad + w * (2 + 2 * state);  // read the gradient; read and write master and states
  const double copy_back = w + 2.0;                     // masters to the 16-bit parameters (bf16 under fp8)
  t.per_shard = to_main + unscale + norm + adam + copy_back;
  t.per_param = gradient;  // zero_grad_buffer
  return t;
}

}  // namespace parallax::plan
