#include "plan/cost.hpp"

#include <algorithm>
#include <cmath>

#include "plan/memory.hpp"

namespace parallax::plan {

namespace {

const MeasuredLayerCost* find_measured(const Layer& layer, const HardwareProfile& hw) {
  for (const auto& m : hw.measured_layers)
    if (m.layer == layer.name) return &m;
  for (const auto& m : hw.measured_layers)
    if (!m.kind.empty() && m.kind == name(layer.kind)) return &m;
  return nullptr;
}

std::optional<LayerCost> calibrated(const std::string& signature, const HardwareProfile& hw, int mb, bool input_gradient) {
  if (!hw.calibration) return std::nullopt;
  const SignatureCost* c = hw.calibration->layer(signature);
  if (!c) return std::nullopt;
  LayerCost out;
  out.measured = true;
  out.forward = Time::us(c->forward.at(mb));
  out.forward_no_grad = c->forward_no_grad.empty() ? out.forward : Time::us(c->forward_no_grad.at(mb));
  const CostCurve& b = !input_gradient && !c->backward_no_input.empty() ? c->backward_no_input : c->backward;
  out.backward = Time::us(b.at(mb));
  // The backward without the input gradient was measured: that is the weight-gradient part.
  out.backward_weight = !input_gradient                 ? out.backward
                        : !c->backward_no_input.empty() ? Time::us(c->backward_no_input.at(mb))
                                                        : out.backward.scaled(0.5);
  if (!c->forward_launch.empty()) out.forward_launch = Time::us(c->forward_launch.at(mb));
  if (!c->backward_launch.empty()) out.backward_launch = Time::us(c->backward_launch.at(mb));
  return out;
}

// Bytes a layer moves per call: its parameters once (the copy autocast makes in the compute type,
// elements as wide as an activation's), plus its activations per sample.
// On one tensor rank: the layer's parameters split over the tensor group, and of a MoE block's
// experts only the rank's (1 / expert of them, split as expert_tensor says).
double parameter_bytes(const Layer& layer, const ParallelSpec& p) {
  const double experts = static_cast<double>(layer.expert_param_count(1, p.expert));
  const double dense = static_cast<double>(layer.param_count(1, p.expert)) - experts;
  const double rank_experts = static_cast<double>(layer.expert_param_count(p.tensor, p.expert, p.expert_tensor_ways()));
  return (dense / p.tensor + rank_experts) * activation_bytes(p.precision);
}

double peak_tflops(const Device& device, Precision precision) {
  const auto peak = device.peak_tflops.find(precision);
  return peak != device.peak_tflops.end() ? peak->second : device.peak_tflops.at(Precision::fp32);
}

// A block's attention core per sample: its scores and attention-weighted values (4 s^2 h).
double attention_flops_per_sample(const Layer& l) { return l.kind == LayerKind::encoder ? attention_core_flops_per_sample(l.shape) : 0.0; }

// The FLOPs per sample that fp8 leaves in bf16, as Megatron-core applies Transformer Engine's fp8 to
// the transformer blocks' linear layers only: a block's attention core, and all of the embedding
// and the output layer.
double flops_outside_fp8_per_sample(const Layer& l) {
  if (l.kind == LayerKind::embedding || l.kind == LayerKind::head) return l.flops_per_sample;
  return attention_flops_per_sample(l);
}

// Without a finer model, weight and input gradients take one forward's FLOPs each.
LayerCost half_weight(LayerCost c, bool input_gradient) {
  c.backward_weight = input_gradient ? c.backward.scaled(0.5) : c.backward;
  return c;
}

// What was measured of the layer: calibrate's table (by `signature`), else the profile's stated
// costs. Measurements ran whole sequences: context parallelism's shorter ones are estimated.
std::optional<LayerCost> measured_cost(const std::string& signature, const Layer& layer, const HardwareProfile& hw,
                                       const ParallelSpec& parallel, int mb, bool input_gradient) {
  if (parallel.context != 1) return std::nullopt;
  if (auto c = calibrated(signature, hw, mb, input_gradient)) return c;
  const MeasuredLayerCost* m = find_measured(layer, hw);
  if (!m) return std::nullopt;
  LayerCost c;
  c.forward = c.forward_no_grad = Time::us(m->fwd_us_fixed + m->fwd_us_per_sample * mb);
  c.backward = Time::us(m->bwd_us_fixed + m->bwd_us_per_sample * mb);
  c.measured = true;
  return half_weight(c, input_gradient);
}

// The plain roofline; tensor parallelism divides the FLOPs and the parameters.
LayerCost roofline_cost(const Layer& layer, const HardwareProfile& hardware, const ParallelSpec& parallel,
                        int microbatch_size, bool input_gradient) {
  const Precision precision = parallel.precision;
  const Device& device = hardware.device;
  if (layer.kind == LayerKind::synthetic) {
    const double fwd_us = layer.synthetic.fwd_us_fixed + layer.synthetic.fwd_us_per_sample * microbatch_size;
    LayerCost c;
    c.forward = c.forward_no_grad = Time::us(fwd_us);
    c.backward = Time::us(fwd_us * layer.synthetic.bwd_ratio);
    return half_weight(c, input_gradient);
  }
  // The FLOPs at the precision's peak, but what fp8 leaves in bf16 (the same peak otherwise).
  const double tflops = peak_tflops(device, precision) * device.efficiency;
  const double rest_tflops = peak_tflops(device, outside_fp8(precision)) * device.efficiency;
  const double mb = microbatch_size;
  const double elem = activation_bytes(precision);
  const double rest = precision == Precision::fp8 ? flops_outside_fp8_per_sample(layer) : 0.0;
  // Context parallelism gives a rank 1 / context of each sample's tokens (and of its queries).
  const double ways = static_cast<double>(parallel.tensor) * parallel.context;
  const double flop_us = ((layer.flops_per_sample - rest) / tflops + rest / rest_tflops) * mb / 1e6 / ways;
  const double bw = device.memory_bandwidth_gb_per_s;  // may be +inf: no memory term
  auto memory_us = [&](double bytes) { return std::isinf(bw) || bw <= 0 ? 0.0 : bytes / (bw * 1e3); };
  const double params = parameter_bytes(layer, parallel);
  const double share = mb * elem / parallel.context;  // a rank's tokens of the micro-batch
  const double in = layer.input_elems_per_sample * share, out_bytes = layer.output_elems_per_sample * share;
  const double saved = layer.activation_elems_per_sample * share;
  // Forward reads the weights and its input, writes its output and what backward keeps.
  const double fwd_us = std::max(flop_us, memory_us(params + in + out_bytes + saved));
  const double fwd_no_grad_us = std::max(flop_us, memory_us(params + in + out_bytes));
  // Backward: weight gradients (one forward's FLOPs) and, unless first, input gradients (another).
  // It reads the weights, the saved activations and the output gradient, and writes the weight
  // gradients and the input gradient.
  const double bwd_flop_us = (input_gradient ? 2.0 : 1.0) * flop_us;
  const double bwd_bytes = 2 * params + saved + out_bytes + (input_gradient ? in : 0.0);
  const double bwd_us = std::max(bwd_flop_us, memory_us(bwd_bytes));
  const double call = device.layer_overhead_us;
  LayerCost out;
  out.forward = Time::us(call + fwd_us);
  out.backward = Time::us(call + bwd_us);
  out.forward_no_grad = Time::us(call + fwd_no_grad_us);
  out.forward_memory_bound = memory_us(params + in + out_bytes + saved) > flop_us;
  out.backward_memory_bound = memory_us(bwd_bytes) > bwd_flop_us;
  // The attention core's share of the FLOP time (backward: twice, as the layer's).
  out.attention_forward = Time::us(attention_flops_per_sample(layer) / rest_tflops * mb / 1e6 / ways);
  out.attention_backward = out.attention_forward * 2;
  // The rest of the FLOP time is the linear layers'.
  out.linear_forward = std::max(Time(), Time::us(flop_us) - out.attention_forward);
  out.linear_backward = std::max(Time(), Time::us(bwd_flop_us) - out.attention_backward);
  // A MoE block's experts: their FLOPs' share of the FLOP time (top_k routed and the shared ones).
  if (layer.kind == LayerKind::encoder && layer.shape.moe.on() && layer.flops_per_sample > 0) {
    const MoeShape& moe = layer.shape.moe;
    const double matrices = layer.shape.form.mlp == Mlp::swiglu ? 3.0 : 2.0;
    const double expert_flops = static_cast<double>(layer.shape.seq_len) * 2.0 * matrices * static_cast<double>(layer.shape.hidden) *
                                static_cast<double>((moe.top_k + moe.shared) * moe.ffn);
    out.expert_forward = Time::us(flop_us).scaled(expert_flops / layer.flops_per_sample);
    out.expert_backward = Time::us(bwd_flop_us).scaled(expert_flops / layer.flops_per_sample);
  }
  return half_weight(out, input_gradient);
}

// A layer's kernels on one tensor rank with the device's shape-aware model (`device.compute`).
class ShapeModel {
 public:
  /// `fitted`: a fit's factors by kind of kernel (plan/fitted.hpp), applied to each GEMM, flash
  /// attention and memory-bound kernel; none: the model as the profile gives it.
  ShapeModel(const Device& d, Precision precision, const FittedCosts::Kernels& fitted = {})
      : c_(*d.compute),
        f_(fitted),
        precision_(precision),
        rest_precision_(outside_fp8(precision)),
        peak_(peak_tflops(d, precision)),
        rest_peak_(peak_tflops(d, outside_fp8(precision))),
        fp8_(precision == Precision::fp8),
        byte_per_us_(std::isinf(d.memory_bandwidth_gb_per_s) ? 0.0 : d.memory_bandwidth_gb_per_s * 1e3 * c_.memory_efficiency),
        e_(activation_bytes(precision)) {}

  // `batch` GEMMs of m x n x k (one batched call): the larger of the FLOP time at the efficiency of
  // the call's shape and the time to read both operands and write the result once. A block's
  // linear layer runs at the precision's peak; attention and the output layer at the peak of what
  // fp8 leaves in bf16 (flops_outside_fp8_per_sample).
  double gemm(double batch, double m, double n, double k) const { return gemm_at(precision_, peak_, batch, m, n, k); }
  double gemm_outside_fp8(double batch, double m, double n, double k) const {
    return gemm_at(rest_precision_, rest_peak_, batch, m, n, k);
  }
  // The two GEMMs of a linear layer's backward, whose forward is m x n x k (Y = X W, X of m x k):
  // the input gradient dX = dY W^T (m x k x n) and the weight gradient dW = X^T dY (k x n x m),
  // each at its own shape's efficiency.
  double input_gradient(double m, double n, double k) const { return gemm(1, m, k, n); }
  double weight_gradient(double m, double n, double k) const { return gemm(1, k, n, m); }
  double input_gradient_outside_fp8(double m, double n, double k) const { return gemm_outside_fp8(1, m, k, n); }
  double weight_gradient_outside_fp8(double m, double n, double k) const { return gemm_outside_fp8(1, k, n, m); }
  // fp8's per-tensor scaling: a linear layer's input cast to fp8 (read e bytes, write 1) with its
  // amax taken on the way, per element; 0 in other precisions.
  double fp8_cast(double elements) const { return fp8_ ? memory(elements * (e_ + 1)) : 0.0; }
  double memory(double bytes) const { return f_.memory * raw_memory(bytes); }
  // Flash attention at `fraction` (flash_fraction) of the profile's figure for a long sequence
  // without a mask.
  double flash(double flops, bool backward, bool flash2, double fraction) const {
    double efficiency = backward ? c_.flash_backward_efficiency : c_.flash_forward_efficiency;
    if (flash2) efficiency = (backward ? c_.flash2_backward_efficiency : c_.flash2_forward_efficiency).value_or(efficiency);
    return f_.flash * flops / (rest_peak_ * 1e6 * efficiency * fraction);
  }
  // The fraction of that figure a rank's attention over q of a sequence's tokens reaches, by the
  // length and mask of its calls. Without context parallelism, one call over the whole sequence,
  // causal in a decoder. With it, a ring of `context` steps of equal FLOPs: a decoder's sequence is
  // cut in 2 x context chunks (rank i holds chunks i and 2c - 1 - i), so its first step is causal
  // over the rank's q tokens and each other is unmasked between q and q / 2 of them; an encoder's
  // steps are unmasked q x q blocks.
  double flash_fraction(bool flash2, bool decoder, double q, double context) const {
    if (!decoder) return c_.flash_sequence_fraction(flash2, false, q);
    const double causal = c_.flash_sequence_fraction(flash2, true, q);
    if (context == 1) return causal;
    const double rest = c_.flash_sequence_fraction(flash2, false, q / 2);
    return context / (1 / causal + (context - 1) / rest);
  }
  double e() const { return e_; }

 private:
  double gemm_at(Precision p, double peak, double batch, double m, double n, double k) const {
    const double flops = 2 * batch * m * n * k;
    // A batched call fills the device as one GEMM with its batch stacked along m would.
    const double flop_us = flops / (peak * 1e6 * c_.gemm_fraction(p, batch * m, n, k, peak));
    return f_.gemm * std::max(flop_us, raw_memory(batch * (m * k + k * n + m * n) * e_));
  }
  double raw_memory(double bytes) const { return byte_per_us_ > 0 ? bytes / byte_per_us_ : 0.0; }

  const ComputeModel& c_;
  FittedCosts::Kernels f_;
  Precision precision_, rest_precision_;
  double peak_, rest_peak_;
  bool fp8_;
  double byte_per_us_, e_;
};

// A piece of a layer's forward that selective recompute may re-run: its GEMMs and its
// memory-bound kernels, in microseconds.
struct Part {
  double gemm = 0, memory = 0;
  double total() const { return gemm + memory; }
};

// Microseconds of a layer's forward (GEMMs and memory-bound kernels apart), its backward, and
// what selective recompute re-runs.
struct Kernels {
  double gemm = 0, memory = 0;           // forward
  double backward_gemm = 0, backward_memory = 0;
  double weight_gradient = 0;            // the part of backward that makes weight gradients
  Part attention_core;                   // forward of the scores, softmax and dropout (standard attention)
  double attention_forward = 0, attention_backward = 0;  // attention's core, flash or not
  double linear = 0, backward_linear = 0;  // the linear layers' GEMMs, forward and backward
  double expert = 0, backward_expert = 0;  // a MoE block's experts (LayerCost::expert_forward), forward and backward
  double norm_memory = 0, expert_act_memory = 0;  // forward's norms, and a MoE block's experts' activation function
  Part moe_layer;    // forward of a MoE block's whole MoE layer: the router's gate and scores, and the experts
  Part mla_up_proj;  // forward of latent attention's up projections and rotary kernels
  Part dense_mlp;    // forward of a dense block's MLP: its GEMMs and activation function
  double attention_gemm = 0, attention_memory = 0;  // standard attention's forward: its two GEMMs, its softmax and dropout
  Part op_recompute;  // what torchtitan's per-op checkpointing re-runs: every second matmul and the memory-bound kernels
  double eager_backward = 0;  // what eager kernels' backward moves beyond twice their forward (encoder_eager_bytes)
  // Backward of a block's column-parallel linears (Q, K and V; the MLP's up, or gate and up), its
  // input gradients' GEMMs and its weight gradients': what Megatron's backward collectives run beside
  double column_input_gradient = 0, column_weight_gradient = 0;
  bool flash = false;                               // attention_forward and _backward are flash attention's
};

// A MoE block's MLP on one tensor rank, in place of the dense one's up and down linears: the
// router's gate on the rank's tokens with its fp32 softmax and top-k; the shared experts as one
// dense gated MLP of shared x ffn; the routed experts as grouped GEMMs (one batched call per
// matrix over the rank's experts / expert experts, each with its share of the busiest rank's
// routed tokens: imbalance x tokens x top_k, expert_load_imbalance), the tokens permuted into
// expert order before them and back after (each copy read and written both times). Experts split
// over the tensor group (expert_tensor = tensor) compute 1 / tensor of their width over the group's
// `tokens`; whole ones (expert_tensor 1) all of it over the rank's own (expert_rank_tokens).
void moe_kernels(const Layer& l, const ParallelSpec& p, const ShapeModel& m, double mb, double tokens, Kernels* k) {
  const MoeShape& moe = l.shape.moe;
  const double t = p.tensor, e = m.e(), h = static_cast<double>(l.shape.hidden), sp = p.sequence_parallel ? t : 1.0;
  const double gates = l.shape.form.mlp == Mlp::swiglu ? 2 : 1, act = gates == 2 ? 3 : 2;
  const double et = p.expert_tensor_ways();
  const double experts = static_cast<double>(moe.experts), local = experts / p.expert, width = static_cast<double>(moe.ffn) / et;
  const double routed = expert_rank_tokens(l, p, static_cast<int>(mb)) * static_cast<double>(moe.top_k) * expert_load_imbalance(l, p, static_cast<int>(mb));
  const double rows = routed / local;  // each local expert's tokens
  auto linear = [&](double batch, double rows_each, double n, double in) {
    k->gemm += m.gemm(batch, rows_each, n, in);
    const double weight = m.gemm(batch, in, n, rows_each);
    k->weight_gradient += weight;
    k->backward_gemm += m.gemm(batch, rows_each, in, n) + weight;
  };
  const double router_gemm_before = k->gemm;
  linear(1, tokens / sp, experts, h);  // the router's gate
  const double gemm_before = k->gemm, backward_before = k->backward_gemm;
  linear(local, rows, gates * width, h);
  linear(local, rows, h, width);
  const double shared = static_cast<double>(moe.shared * moe.ffn) / t;  // a dense MLP, split as one
  if (shared > 0) {
    linear(1, tokens, gates * shared, h);
    linear(1, tokens, h, shared);
  }
  // The router's fp32 scores (the last term) stay with attention's piece; the rest is the experts'.
  k->expert_act_memory = m.memory(act * e * routed * width);
  const double expert_memory = m.memory(act * e * (routed * width + tokens * shared) + 4.0 * e * routed * h) +
                               m.fp8_cast(routed * (h + width) + tokens * (shared > 0 ? h + shared : 0.0));
  const double router_memory = m.memory(2 * 4.0 * tokens / sp * experts);
  k->memory += expert_memory + router_memory;
  k->expert = k->gemm - gemm_before + expert_memory;
  k->moe_layer = {k->gemm - router_gemm_before, expert_memory + router_memory};
  k->backward_expert = k->backward_gemm - backward_before + 2 * expert_memory;  // backward moves the bytes twice
}

// What rotary positions rotate per token on one of t tensor ranks: Q and K (K's heads split at
// most kv_heads ways), or latent attention's rotary parts (its query heads' and the one key all
// heads share).
double rotary_width(const LayerShape& sh, double t) {
  if (const Mla& m = sh.form.mla; m.on()) return (static_cast<double>(sh.heads) / t + 1) * static_cast<double>(m.qk_rope_head_dim);
  const double kv = static_cast<double>(sh.kv_heads());
  return static_cast<double>(sh.q_width()) / t + static_cast<double>(sh.k_width()) / std::min(t, kv);
}

// Eager PyTorch (`model.kernels: eager`) runs torchtitan's Llama ops one kernel each where fused
// kernels run one: its RMSNorm (torchtitan/models/norms.py) casts to fp32, squares, takes the mean,
// multiplies and casts back before the weight, each op reading and writing the whole tensor: 4e + 28
// bytes an element forward and 8e + 76 backward (autograd's kernel for each op, and the sum of the
// two paths into x), against a fused norm's 2e and 4e; rotary positions go through fp32 complex
// numbers (cast in, multiply, cast out: 2e + 16 bytes each way, against 2e and 4e); SwiGLU's SiLU and
// product are two kernels (5e forward, 9e backward, against 3e and 6e). LayerNorm is one kernel in
// eager PyTorch as well. The bytes beyond the fused count, per block on one tensor rank.
struct EagerBytes {
  double forward = 0, backward = 0, norm_forward = 0;
};
EagerBytes encoder_eager_bytes(const Layer& l, double e, double tokens, double t, double sp) {
  const BlockForm& form = l.shape.form;
  const double h = static_cast<double>(l.shape.hidden);
  EagerBytes b;
  if (form.norm == Norm::rmsnorm) {
    const double elems = 2 * tokens * h / sp;  // two norms
    b.norm_forward = (2 * e + 28) * elems;
    b.backward += (4 * e + 76) * elems;
  }
  b.forward += b.norm_forward;
  if (form.qk_norm && form.norm == Norm::rmsnorm) {  // the query and key norms, the same ops per head
    const double elems = tokens * rotary_width(l.shape, t);
    b.forward += (2 * e + 28) * elems;
    b.backward += (4 * e + 76) * elems;
  }
  if (form.rope) {
    const double elems = tokens * rotary_width(l.shape, t);
    b.forward += 16 * elems;
    b.backward += (16 - 2 * e) * elems;
  }
  if (form.mlp == Mlp::swiglu && !l.shape.moe.on()) {
    const double elems = tokens * static_cast<double>(l.shape.ffn) / t;
    b.forward += 2 * e * elems;
    b.backward += 3 * e * elems;
  }
  return b;
}

// The memory-bound work torch's context_parallel adds to one attention call on the busiest rank
// (torch/distributed/tensor/experimental/_attention.py, as torchtitan trains with it), in bytes
// moved at e bytes an activation: each of the c steps' outputs cast to fp32 and merged into the
// running one (out - sigmoid(lse_i - lse) x (out - out_i): 32 bytes an element), the result cast
// back, and the keys and values concatenated to be passed on; in backward, fp32 accumulators for
// the query, key and value gradients, each step's gradients added in (a half step's through a
// concatenation of the two halves), the key and value gradients concatenated in fp32 to be passed
// round, and all cast back. The busiest rank (the last) takes the whole query at every step. The
// log-sum-exp's own bytes (1 / head_dim of the output's) are left out. Megatron-core's Transformer
// Engine corrects the output inside its kernels: nothing apart.
struct TorchRingBytes {
  double forward = 0, backward = 0;
};
TorchRingBytes torch_ring_bytes(const Layer& l, const ParallelSpec& p, double e, double tokens) {
  if (p.context == 1 || p.context_attention != ContextAttention::torch) return {};
  const double c = p.context, t = p.tensor, heads = static_cast<double>(l.shape.heads) / t;
  const double out = tokens * heads * static_cast<double>(l.shape.v_head_dim());
  const double query = tokens * heads * static_cast<double>(l.shape.qk_head_dim());
  const double kv = tokens * static_cast<double>(l.shape.k_width() + l.shape.v_width()) / std::min(t, static_cast<double>(l.shape.kv_heads()));
  TorchRingBytes b;
  b.forward = out * ((e + 4) * c + 32 * (c - 1) + (4 + e)) + kv * 2 * e * (c - 1);
  b.backward = 4 * (query + kv) + query * (8 + e) * c + kv * ((8 + e) + (c - 1) * ((8 + e) / 2 + 8)) + kv * 8 * c +
               kv * 2 * e * (c - 1) + (4 + e) * (query + kv);
  return b;
}

// A transformer block as Megatron-LM runs it on one of t tensor ranks: Q, K and V, the per-head
// scores and weighted values, the output projection and the MLP's linears (three for SwiGLU);
// norms, the fused scale-mask-softmax, the residual adds (each with its dropout under
// model.dropout: Megatron-LM's fused bias-dropout-add), rotary positions and the activation
// function in between. Grouped-query attention's K and V hold kv_heads heads, split at most that
// many ways. Backward runs each linear's two GEMMs (input and weight gradients, each at its own
// shape) and moves each memory-bound kernel's bytes twice (its saved input and the incoming
// gradient in, the gradient out). Under context parallelism a rank holds q = s / context tokens of
// each sequence and computes their scores against all s keys, a (q x q) block per ring step.
Kernels encoder_kernels(const Layer& l, const ParallelSpec& p, const ShapeModel& m, double mb) {
  const BlockForm& form = l.shape.form;
  const double s = static_cast<double>(l.shape.seq_len), h = static_cast<double>(l.shape.hidden);
  const double ffn = static_cast<double>(l.shape.ffn), t = p.tensor, e = m.e(), c = p.context, q = s / c;
  const double heads = static_cast<double>(l.shape.heads) / t;
  const double dqk = static_cast<double>(l.shape.qk_head_dim()), dv = static_cast<double>(l.shape.v_head_dim());
  const double qw = static_cast<double>(l.shape.q_width());  // the query heads' width: hidden unless head_dim says
  const double aw = static_cast<double>(l.shape.attention_width());  // the output projection's input
  const double tokens = mb * q, sp = p.sequence_parallel ? t : 1.0;
  const double up_width = (form.mlp == Mlp::swiglu ? 2 : 1) * ffn / t;  // gate and up as one GEMM
  // The block's linear layers as forward GEMMs (tokens, n = outputs, k = inputs), each also
  // counted where a recompute module re-runs it (`also`); a MoE block's MLP is its own (moe_kernels).
  Kernels k;
  struct Gemm {
    double tokens, n, k;
    double* also = nullptr;
    bool column = false;  // split by its outputs over the tensor group, its input gathered (LayerCost::column_*)
  };
  std::vector<Gemm> linears;
  double latent_memory = 0, up_inputs = h;  // latent attention's norms; what the Q, K and V projections read
  if (const Mla& mla = form.mla; mla.on()) {
    // Down projections whole on each tensor rank, over its own tokens under sequence parallelism
    // (Megatron-core's duplicated linears: every rank's whole sequence without it); up
    // projections split by heads over the gathered tokens.
    const double q_rank = static_cast<double>(mla.q_lora_rank), kv_rank = static_cast<double>(mla.kv_lora_rank);
    if (mla.q_lora_rank > 0) linears.insert(linears.end(), {{tokens / sp, q_rank, h}, {tokens, qw / t, q_rank, &k.mla_up_proj.gemm}});
    else linears.push_back({tokens, qw / t, h});
    linears.insert(linears.end(), {{tokens / sp, kv_rank + static_cast<double>(mla.qk_rope_head_dim), h},
                                   {tokens, heads * static_cast<double>(mla.qk_nope_head_dim + mla.v_head_dim), kv_rank, &k.mla_up_proj.gemm}});
    latent_memory = 2 * e * tokens / sp * (q_rank + kv_rank);  // the latent norms, read and written
    up_inputs = (mla.q_lora_rank > 0 ? 0.0 : h) + q_rank + kv_rank;
  } else {
    const double kv = static_cast<double>(l.shape.kv_heads()), kv_width = static_cast<double>(l.shape.k_width()) / std::min(t, kv);
    linears.push_back({tokens, qw / t + 2 * kv_width, h, nullptr, true});
  }
  const bool moe = l.shape.moe.on();
  if (l.shape.mtp) linears.insert(linears.begin(), Gemm{tokens, h / t, 2 * h});  // eh_proj, before the block
  linears.push_back({tokens, h, aw / t});
  if (!moe) linears.insert(linears.end(), {{tokens, up_width, h, &k.dense_mlp.gemm, true}, {tokens, h, ffn / t, &k.dense_mlp.gemm}});
  for (const auto& [m_tokens, n, in, also, column] : linears) {
    const double forward = m.gemm(1, m_tokens, n, in);
    k.gemm += forward;
    if (also) *also += forward;
    const double input_gradient = m.input_gradient(m_tokens, n, in), weight_gradient = m.weight_gradient(m_tokens, n, in);
    k.weight_gradient += weight_gradient;  // the attention core has no weights
    k.backward_gemm += input_gradient + weight_gradient;
    if (column) k.column_input_gradient += input_gradient, k.column_weight_gradient += weight_gradient;
  }
  // Norms (read, write); two residual adds (read two, write one), each writing a dropout mask
  // under model.dropout; the activation function (read, write; SwiGLU reads gate and up); the query
  // and key norms (read, write); rotary positions on Q and K (read, write; latent attention's
  // fused kernels also assemble Q, K and V from the up projections' outputs and the shared rotary
  // key).
  // At p = 0 PyTorch's dropout returns its input: no kernel. Megatron-LM fuses each residual's
  // dropout with its add (bias_dropout_add: read two, write the sum and a mask); LibTorch's encoder
  // layer runs them apart (the dropout reads, writes and masks, then the add) and drops inside its
  // MLP too.
  const bool dropout = form.dropout > 0;
  const double residual = !dropout ? 3 * e : form.decoder ? 3 * e + 1 : 5 * e + 1;
  const double ffn_dropout = dropout && !form.decoder && !moe ? (2 * e + 1) * tokens * ffn / t : 0.0;
  const double activation = moe ? 0.0 : (form.mlp == Mlp::swiglu ? 3 : 2) * e * tokens * ffn / t + ffn_dropout;
  const double rope = !form.rope          ? 0.0
                      : form.mla.on()     ? 2 * e * tokens * static_cast<double>(l.shape.q_width() + l.shape.k_width() + l.shape.v_width()) / t
                                          : 2 * e * tokens * rotary_width(l.shape, t);
  const double mtp_memory = l.shape.mtp ? 2 * 2 * e * tokens * h / sp + 2 * e * tokens * 2 * h : 0.0;  // enorm, hnorm; the concatenation
  const double qk_norm = form.qk_norm ? 2 * e * tokens * rotary_width(l.shape, t) : 0.0;  // each head's query and key normed (read, write)
  k.memory = m.memory((2 * 2 * e + 2 * residual) * tokens * h / sp + activation + rope + qk_norm + latent_memory + mtp_memory) +
             m.fp8_cast(tokens * (up_inputs + aw / t + (moe ? 0.0 : h + ffn / t)));  // the inputs of QKV, the output projection, up, down
  k.norm_memory = m.memory(2 * 2 * e * tokens * h / sp);  // two norms, each read and written
  if (form.mla.on()) k.mla_up_proj.memory = m.memory(rope);
  k.dense_mlp.memory = m.memory(activation);
  if (l.shape.eager) {
    const EagerBytes extra = encoder_eager_bytes(l, e, tokens, t, sp);
    k.memory += m.memory(extra.forward);
    k.norm_memory += m.memory(extra.norm_forward);
    k.eager_backward = m.memory(extra.backward - 2 * extra.forward);
  }
  if (moe) moe_kernels(l, p, m, mb, tokens, &k);
  // torchtitan's per-op checkpointing re-runs the matmuls it does not keep (the second, fourth...
  // in forward order) and every memory-bound kernel; attention's output is kept.
  const std::vector<Matmul> matmuls = block_matmuls(l.shape, t);
  for (size_t i = 1; i < matmuls.size(); i += 2) k.op_recompute.gemm += m.gemm(1, tokens, matmuls[i].out, matmuls[i].in);
  k.op_recompute.memory = k.memory;
  if (l.shape.flash_attention) {
    // A decoder block's attention is causal: flash attention skips the score blocks the mask
    // removes, half of them (FlashAttention-2 and -3 count a causal pass as half the FLOPs), and
    // under a sliding window all but the window's band. A windowed pass is taken at the causal
    // figure of a W-token sequence (an assumption: the profiles state no windowed measurement;
    // docs/simulator.md).
    const double flops = 2 * mb * heads * q * (form.decoder ? l.shape.keys_per_query() : s) * (dqk + dv);
    const bool windowed = l.shape.window > 0 && l.shape.window < l.shape.seq_len;
    const double fraction = m.flash_fraction(l.shape.flash2, form.decoder, windowed ? static_cast<double>(l.shape.window) : q, c);
    k.attention_forward = m.flash(flops, false, l.shape.flash2, fraction);
    k.attention_backward = m.flash(2.5 * flops, true, l.shape.flash2, fraction);  // FlashAttention-2 counts backward as 2.5 forwards
    k.flash = true;
  } else {
    const double scores = mb * heads * q * s, blocks = mb * heads * c;
    // The softmax, then its dropout (read, write the output and the mask).
    k.attention_gemm = m.gemm_outside_fp8(blocks, q, q, dqk) + m.gemm_outside_fp8(blocks, q, dv, q);
    k.attention_memory = m.memory(2 * e * scores + (dropout ? (2 * e + 1) * scores : 0.0));
    const double core = k.attention_gemm + k.attention_memory;
    k.attention_core = {k.attention_gemm, k.attention_memory};
    k.attention_forward = core;
    k.attention_backward = 2 * core;
  }
  const TorchRingBytes ring = torch_ring_bytes(l, p, e, tokens);
  k.attention_forward += m.memory(ring.forward);
  k.attention_backward += m.memory(ring.backward);
  k.linear = k.gemm;
  k.backward_linear = k.backward_gemm;
  k.gemm += k.attention_forward;
  k.backward_gemm += k.attention_backward;
  k.backward_memory = 2 * k.memory + k.eager_backward;
  return k;
}

// `input_gradient`: false for the model's first layer, whose backward computes weight gradients only.
Kernels layer_kernels(const Layer& l, const ParallelSpec& p, const ShapeModel& m, double mb, bool input_gradient) {
  const double t = p.tensor, e = m.e(), sp = p.sequence_parallel ? t : 1.0;
  const double s = static_cast<double>(l.shape.seq_len) / p.context, h = static_cast<double>(l.shape.hidden);
  const double tokens = mb * s, vocab = static_cast<double>(l.shape.vocab);
  Kernels k;
  switch (l.kind) {
    case LayerKind::encoder: return encoder_kernels(l, p, m, mb);
    case LayerKind::head:
      k.gemm = m.gemm_outside_fp8(1, tokens, vocab / t, h);
      k.weight_gradient = m.weight_gradient_outside_fp8(tokens, vocab / t, h);
      k.backward_gemm = k.weight_gradient + m.input_gradient_outside_fp8(tokens, vocab / t, h);
      k.linear = k.gemm;
      k.backward_linear = k.backward_gemm;
      k.column_weight_gradient = k.weight_gradient;  // the vocabulary-parallel head is column-parallel
      k.column_input_gradient = k.backward_gemm - k.weight_gradient;
      // The norm (read, write; backward twice that), then the cross entropy over the rank's
      // vocab / t logits, as the trainer runs it (loss_bytes).
      {
        const LossBytes loss = loss_bytes(l.shape.loss, e);
        const double logits = tokens * vocab / t, norm = 2 * e * tokens * h / sp;
        k.memory = m.memory(norm + loss.forward * logits);
        k.backward_memory = m.memory(2 * norm + loss.backward * logits);
      }
      if (l.shape.predictions > 1) {  // multi-token prediction: the same norm, projection and loss per module
        const double n = l.shape.predictions;
        for (double* x : {&k.gemm, &k.weight_gradient, &k.backward_gemm, &k.linear, &k.backward_linear, &k.column_input_gradient, &k.column_weight_gradient,
                          &k.memory, &k.backward_memory}) *x *= n;
      }
      return k;
    case LayerKind::embedding: {
      // Rows gathered and the positions added; backward accumulates fp32 gradient rows. Under
      // model.dropout, Megatron-LM's embedding dropout after them (on the rank's sequence share
      // under sequence parallelism): read, write the output and its mask; backward reads the
      // gradient and the mask and writes the gradient.
      const double dropout = l.shape.form.dropout > 0 ? (2 * e + 1) * tokens * h / sp : 0.0;
      k.memory = m.memory(3 * e * tokens * h + dropout);
      k.backward_memory = m.memory((e + 2 * 4) * tokens * h + dropout);
      k.weight_gradient = k.backward_memory;  // all of it: the input is token ids
      return k;
    }
    case LayerKind::linear: {
      const double out = static_cast<double>(l.shape.out), in = static_cast<double>(l.shape.in);
      k.gemm = m.gemm(1, mb, out, in);
      k.weight_gradient = m.weight_gradient(mb, out, in);
      k.backward_gemm = k.weight_gradient + (input_gradient ? m.input_gradient(mb, out, in) : 0.0);
      k.linear = k.gemm;
      k.backward_linear = k.backward_gemm;
      if (l.shape.relu) k.memory = m.memory(2 * e * mb * static_cast<double>(l.shape.out));
      k.backward_memory = 2 * k.memory;
      return k;
    }
    case LayerKind::synthetic: break;
  }
  return k;
}

// What selective recompute re-runs of a layer's forward: the modules it names (attention's core,
// the norms, the experts' activation function or the whole MoE layer, which holds the activation
// function and whose all-to-alls are plan::expert_traffic's; latent attention's up projections,
// a dense block's MLP), or torchtitan's per-op checkpointing's matmuls and memory-bound kernels.
// Flash attention is never re-run (its output is kept).
Part selective_recompute(const Kernels& k, const ParallelSpec& p) {
  if (p.activation_checkpointing == Recompute::selective_op) return k.op_recompute;
  Part out;
  const auto add = [&](bool named, const Part& part) {
    if (named) out.gemm += part.gemm, out.memory += part.memory;
  };
  add(p.recomputes(kRecomputeCoreAttn), k.attention_core);
  add(p.recomputes(kRecomputeLayernorm), {0, k.norm_memory});
  if (p.recomputes(kRecomputeMoe)) add(true, k.moe_layer);
  else add(p.recomputes(kRecomputeMoeAct), {0, k.expert_act_memory});
  add(p.recomputes(kRecomputeMlaUpProj), k.mla_up_proj);
  add(p.recomputes(kRecomputeMlp), k.dense_mlp);
  return out;
}

LayerCost shape_aware_cost(const Layer& l, const HardwareProfile& hw, const ParallelSpec& p, int mb, bool input_gradient) {
  const Device& d = hw.device;
  const Kernels k = layer_kernels(l, p, ShapeModel(d, p.precision, hw.fitted ? hw.fitted->kernels : FittedCosts::Kernels{}), mb,
                                  input_gradient);
  const Time call = Time::us(d.layer_overhead_us);
  LayerCost out;
  out.forward = call + Time::us(k.gemm + k.memory);
  out.forward_no_grad = out.forward;
  out.backward = call + Time::us(k.backward_gemm + k.backward_memory);
  out.backward_weight = Time::us(k.weight_gradient);
  out.forward_memory_bound = k.memory > k.gemm;
  out.backward_memory_bound = k.backward_memory > k.backward_gemm;
  out.recompute = Time::us(selective_recompute(k, p).total());
  out.attention_forward = Time::us(k.attention_forward);
  out.attention_backward = Time::us(k.attention_backward);
  out.linear_forward = Time::us(k.linear);
  out.linear_backward = Time::us(k.backward_linear);
  out.column_input_gradient = Time::us(k.column_input_gradient);
  out.column_weight_gradient = Time::us(k.column_weight_gradient);
  out.expert_forward = Time::us(k.expert);
  out.expert_backward = Time::us(k.backward_expert);
  return out;
}

// What backward adds to recompute a layer whose costs came from elsewhere.
Time recompute_time(const Layer& l, const LayerCost& c, const ParallelSpec& p) {
  switch (p.activation_checkpointing) {
    case Recompute::none: return Time();
    case Recompute::layer:
    case Recompute::stage: return p.recomputes_forward(l.kind) ? c.forward : Time();
    case Recompute::selective: {
      // The scores' share of the layer's FLOPs (4 s^2 h of them per sample); the norms' and the
      // experts' activation's memory-bound kernels have no figure here.
      if (!p.recomputes(kRecomputeCoreAttn) || l.kind != LayerKind::encoder || l.shape.flash_attention || l.flops_per_sample <= 0) return Time();
      return c.forward.scaled(attention_core_flops_per_sample(l.shape) / l.flops_per_sample);
    }
    case Recompute::selective_op: {
      // The re-run matmuls' share of the layer's FLOPs; the memory-bound kernels have no figure here.
      if (l.kind != LayerKind::encoder || l.flops_per_sample <= 0) return Time();
      const std::vector<Matmul> matmuls = block_matmuls(l.shape, 1);
      double flops = 0;
      for (size_t i = 1; i < matmuls.size(); i += 2) flops += 2 * static_cast<double>(l.shape.seq_len) * matmuls[i].out * matmuls[i].in;
      return c.forward.scaled(flops / l.flops_per_sample);
    }
  }
  return Time();
}

}  // namespace

LossBytes loss_bytes(Loss loss, double e) {
  // Casting the logits to fp32 and the gradient back: nothing at fp32 (.float() returns the tensor).
  // A kernel that passes over a row more than once (a softmax's max, sum and output) is counted
  // reading it from memory once: the row's later passes are taken as L2 hits, which holds while the
  // rows in flight fit the L2 cache (a vocabulary-parallel rank's rows of 16k fp32 logits, 64 KB,
  // do; a whole 128k vocabulary's, 512 KB a row, does not, and is undercounted by up to two reads).
  const double cast = e < 4 ? e + 4 : 0.0;
  switch (loss) {
    case Loss::eager:
      // torch's cross_entropy(logits.float(), target): log_softmax reads the fp32 logits and writes
      // its output; nll_loss reads one a row. Backward: nll_loss's gradient (zeros, then one a row),
      // log_softmax's (the incoming gradient and its output read, its gradient written), the cast back.
      return {cast + 8, 4 + 12 + cast};
    case Loss::megatron:
      // Megatron-core's _VocabParallelCrossEntropy (tensor_parallel/cross_entropy.py), one kernel
      // a step over the whole tensor: .float(), max, subtract in place, exp in place, sum, divide in
      // place (the softmax it saves); backward subtracts one at the targets, multiplies by the
      // loss's gradient in place, and autograd casts it back to the logits' type.
      return {cast + 4 + 8 + 8 + 4 + 8, 8 + cast};
    case Loss::fused:
      // One compiled kernel each way (torch.compile's): the logits read once forward (max and
      // log-sum-exp); backward reads them and writes their gradient, at the compute type.
      return {e, 2 * e};
  }
  return {};
}

LayerCost estimate_layer_cost(const Layer& layer, const HardwareProfile& hardware, Precision precision,
                              int microbatch_size, bool input_gradient) {
  ParallelSpec p;
  p.precision = precision;
  return estimate_layer_cost(layer, hardware, p, microbatch_size, input_gradient);
}

LayerCost estimate_layer_cost(const Layer& layer, const HardwareProfile& hardware, const ParallelSpec& parallel,
                              int microbatch_size, bool input_gradient) {
  // The key of the layer's calibrated and fitted costs; built once, as each layer is estimated for
  // every configuration the tuner tries.
  const std::string signature = hardware.calibration || hardware.fitted ? layer_signature(layer, parallel.precision) : "";
  LayerCost c = [&] {
    if (auto m = measured_cost(signature, layer, hardware, parallel, microbatch_size, input_gradient)) return *m;
    if (hardware.device.compute && hardware.device.compute->covers(parallel.precision) && layer.kind != LayerKind::synthetic)
      return shape_aware_cost(layer, hardware, parallel, microbatch_size, input_gradient);
    return roofline_cost(layer, hardware, parallel, microbatch_size, input_gradient);
  }();
  // The shape-aware model costs what selective and selective_op re-run kernel by kind
  // (selective_recompute); costs from elsewhere take recompute_time's share of the forward.
  const bool selective = parallel.activation_checkpointing == Recompute::selective || parallel.activation_checkpointing == Recompute::selective_op;
  if (!selective || c.recompute == Time()) c.recompute = recompute_time(layer, c, parallel);
  c.backward_weight = layer.param_count() == 0 ? Time() : std::min(c.backward_weight, c.backward);
  if (hardware.fitted) {  // a job's measured runs, over all of the above (plan/fitted.hpp)
    const FittedCosts::Layer f = hardware.fitted->layer(signature);
    c.forward = c.forward.scaled(f.forward);
    c.forward_no_grad = c.forward_no_grad.scaled(f.forward);
    c.recompute = c.recompute.scaled(f.forward);
    c.backward = c.backward.scaled(f.backward);
    c.backward_weight = c.backward_weight.scaled(f.backward);
  }
  return c;
}

std::optional<LayerKernelClasses> kernel_class_times(const Layer& l, const HardwareProfile& hw, const ParallelSpec& p, int mb,
                                                     bool input_gradient) {
  if (!hw.device.compute || !hw.device.compute->covers(p.precision) || l.kind == LayerKind::synthetic) return std::nullopt;
  const Kernels k = layer_kernels(l, p, ShapeModel(hw.device, p.precision), mb, input_gradient);
  // The layer's GEMMs are its linears and standard attention's; flash attention is its own kind.
  // Standard attention's backward is twice its forward, in each kind (encoder_kernels).
  LayerKernelClasses c;
  c.forward = {k.linear + k.attention_gemm, k.flash ? k.attention_forward : 0.0, k.memory + k.attention_memory};
  c.backward = {k.backward_linear + 2 * k.attention_gemm, k.flash ? k.attention_backward : 0.0,
                k.backward_memory + 2 * k.attention_memory};
  const Part again = selective_recompute(k, p);
  c.selective_recompute = {again.gemm, 0.0, again.memory};
  return c;
}

}  // namespace parallax::plan
