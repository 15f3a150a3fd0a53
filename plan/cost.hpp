#pragma once
// Cost of a layer on a device, in this order of preference:
// 1. the profile's calibration (`parallax calibrate`), by layer signature: measured forward,
//    backward with or without the input gradient, and forward under no_grad;
// 2. the profile's older measured_layers (by layer name, then by kind);
// 3. the cost a synthetic layer states;
// 4. with the device's shape-aware model (`device.compute`), the layer's own kernels: each GEMM
//    (m, n, k) on one tensor rank at the larger of its FLOP time (peak x the efficiency of its
//    size) and its memory time, and the memory-bound kernels (norms, softmax, dropout,
//    activation functions, residual adds) at their bytes over memory bandwidth x efficiency;
// 5. otherwise a roofline: the larger of the FLOP time (peak x efficiency) and the memory-traffic
//    time (parameters and activations read and written at the device's memory bandwidth), plus a
//    per-call overhead. Backward is costed on its own FLOPs and bytes: input and weight gradients
//    (weight gradients only for the model's first layer), not as a fixed ratio of forward.
// A profile's `fitted:` factors (`parallax calibrate --from-trace`), by layer signature, multiply
// whichever of these gave the cost.
// Tensor parallelism divides a layer's work as Megatron-LM splits it; its collectives are counted
// here (tensor_traffic) and timed by the simulator's NCCL model. Context parallelism divides the
// tokens a rank computes (and attention's queries, each against every key); its ring of keys and
// values is counted here (context_traffic) and timed by the simulator.
// Shared by "balanced" partitioning and the simulator.
#include "plan/hardware.hpp"
#include "plan/layers.hpp"
#include "plan/scenario.hpp"
#include "plan/time.hpp"

namespace parallax::plan {

struct LayerCost {
  Time forward;
  Time backward;         ///< without recomputation; activation checkpointing adds a forward
  /// The part of backward that computes the weight gradients (a zero-bubble schedule's W); the
  /// rest is the input gradient's (its I). Zero for a layer without parameters.
  Time backward_weight;
  Time forward_no_grad;  ///< forward without recording for backward (checkpointed F)
  bool measured = false; ///< from a calibration
  /// Roofline estimates: the memory-traffic term won over the FLOP term (the layer saturates the
  /// device's memory bandwidth, which slows communication on the device; docs/simulator.md).
  bool forward_memory_bound = false, backward_memory_bound = false;
  /// What backward adds to recompute this layer under the plan's activation_checkpointing:
  /// its forward (layer, stage), attention's scores and softmax (selective), nothing (false).
  Time recompute;
  /// Attention's core (the scores with the keys, the softmax and the weighted values) in forward
  /// and in backward: what a context-parallel ring of keys and values hides its sends behind.
  /// Zero for layers without attention and for costs that were measured or stated.
  Time attention_forward, attention_backward;
  /// The linear layers' GEMMs in forward and in backward: what tensor parallelism's collectives
  /// hide behind under parallel.tp_comm_overlap. Zero for costs that were measured or stated.
  Time linear_forward, linear_backward;
  /// Of the linear backward, a block's column-parallel linears' (Q, K and V; the MLP's up, or gate
  /// and up) input-gradient GEMMs and weight-gradient GEMMs: what Megatron-LM's and Transformer
  /// Engine's backward collectives run beside (the all-gather and reduce-scatter under sequence
  /// parallelism, the all-reduce without). Zero for costs that were measured or stated.
  Time column_input_gradient, column_weight_gradient;
  /// A MoE block's experts (the routed experts' grouped GEMMs with their permutes, and the shared
  /// experts) in forward and in backward: the piece of one micro-batch's compute that another's
  /// dispatch runs beside when two are paired (combined 1F1B, DualPipeV). Zero for dense layers and
  /// for costs that were measured or stated.
  Time expert_forward, expert_backward;
  /// The host's time to launch the forward's and the backward's kernels where a GPU calibration
  /// measured it apart (then forward and backward are the device's); zero otherwise.
  Time forward_launch, backward_launch;
};

/// A layer's kernels on one tensor rank by kind, in microseconds, as the device's shape-aware
/// model (`device.compute`) costs them: GEMMs (standard attention's batched ones included),
/// flash attention, and the memory-bound kernels (standard attention's softmax and dropout
/// included). What a GPU trace's kernels are set against (calibrate --from-trace).
struct KernelClassTimes {
  double gemm = 0, flash = 0, memory = 0;
};
struct LayerKernelClasses {
  KernelClassTimes forward, backward;
  KernelClassTimes selective_recompute;  ///< what selective recompute re-runs in backward (not in `backward`)
};
/// Without fitted factors; nullopt when the device has no compute model for the precision.
std::optional<LayerKernelClasses> kernel_class_times(const Layer& layer, const HardwareProfile& hardware,
                                                     const ParallelSpec& parallel, int microbatch_size, bool input_gradient);

/// Bytes of memory traffic a cross entropy moves per logit (of a rank's vocab / tensor), forward and
/// backward, at e bytes an element of the logits (the compute type): each kernel's reads and writes
/// as the trainer's code runs it (plan/cost.cpp; docs/simulator.md).
struct LossBytes {
  double forward = 0, backward = 0;
};
LossBytes loss_bytes(Loss loss, double e);

/// `input_gradient`: whether backward must also compute the gradient of the layer's input; the
/// model's first layer has none to compute (its input is data).
LayerCost estimate_layer_cost(const Layer& layer, const HardwareProfile& hardware, const ParallelSpec& parallel,
                              int microbatch_size, bool input_gradient = true);
/// The same for a plan without tensor parallelism or recompute, at `precision`.
LayerCost estimate_layer_cost(const Layer& layer, const HardwareProfile& hardware, Precision precision,
                              int microbatch_size, bool input_gradient = true);

/// The collectives one tensor-parallel group runs in a layer per micro-batch (Megatron-LM;
/// Korthikanti et al. 2022, section 4.2.2), each of `bytes` (the whole buffer: the micro-batch's
/// tokens x hidden in the compute type). Without sequence parallelism an encoder block
/// all-reduces twice in forward (after attention and after the MLP) and twice in backward; with
/// it, each all-reduce becomes an all-gather before and a reduce-scatter after the split part. The
/// vocabulary-parallel embedding reduces its output; the head gathers its input (with sequence
/// parallelism) and reduces its input's gradient. A recompute repeats the forward's.
/// Latent attention (Megatron-core's MLASelfAttention) projects each rank's tokens down before any
/// collective: the attention's all-gather (and its backward's re-gather and reduce-scatter, or
/// without sequence parallelism its backward all-reduce) moves the latents, `latent` of
/// `latent_bytes` (the micro-batch's tokens x Mla::latent_width), not the hidden-wide input.
struct TensorCollectives {
  int forward_all_reduce = 0, backward_all_reduce = 0;
  int forward_all_gather = 0, forward_reduce_scatter = 0;
  int backward_all_gather = 0, backward_reduce_scatter = 0;
};
struct TensorTraffic : TensorCollectives {
  double bytes = 0;
  double latent_bytes = 0;
  TensorCollectives latent;
};
TensorTraffic tensor_traffic(const Layer& layer, const ParallelSpec& parallel, int microbatch_size);

/// Context parallelism's ring, as Megatron-core runs it (Liu et al. 2023's ring attention with the
/// sequence cut into 2 x context chunks, rank i holding chunks i and 2c - 1 - i so that causal
/// attention gives each the same work): in each of an attention block's context - 1 steps, every
/// rank sends the keys and values it holds (`step_bytes`: its tensor rank's heads of its 1 / context
/// of the micro-batch) to the next rank of its context group while it computes attention with the
/// ones it has. Backward sends keys, values and their gradients (twice the bytes) the same way.
struct ContextTraffic {
  double step_bytes = 0;
  int steps = 0;
};
ContextTraffic context_traffic(const Layer& layer, const ParallelSpec& parallel, int microbatch_size);

/// The tokens a rank's experts work on per micro-batch before routing: the tensor group's with
/// experts split over it, a rank's own 1 / tensor with whole experts (expert_tensor 1).
double expert_rank_tokens(const Layer& layer, const ParallelSpec& parallel, int microbatch_size);
/// The busiest expert-parallel rank's routed tokens over the average rank's in a MoE block: the
/// layer's stated model.expert_imbalance, else the least a balanced router gives. Each token picks
/// its experts at random, so a rank's count of the group's tokens is about binomial with mean
/// n = tokens x top_k per rank and variance n (1 - 1/expert); the largest of `expert` such counts
/// is about n + sqrt(2 ln(expert) x variance) above it (the Gaussian maximum). A real router is
/// balanced less well: this is a floor, stated as one. A capacity factor caps it (the rest are
/// dropped). 1 for dense layers and one expert rank.
double expert_load_imbalance(const Layer& layer, const ParallelSpec& parallel, int microbatch_size);

/// A MoE block's token traffic per micro-batch, as Megatron-core's all-to-all dispatcher moves it
/// with expert tensor parallelism equal to tensor: each rank sends the top_k copies of its tokens
/// (its 1 / tensor of them under sequence parallelism) to the expert ranks that hold their experts,
/// all-to-all in the expert group (dispatch), and takes the experts' outputs back the same way
/// (combine); backward moves their gradients the same two ways. With experts split over a tensor
/// group (expert_tensor > 1) the tokens a rank received are all-gathered over it before the
/// experts and reduce-scattered after (each tensor rank computes its share of every expert's width).
struct ExpertTraffic {
  /// Bytes one rank sends to the other ranks of its expert group in one all-to-all, with a
  /// balanced router: the (expert - 1) / expert of its copies bound for other ranks.
  double all_to_all_bytes = 0;
  /// All-to-alls: dispatch and combine, then their gradients (and, where backward recomputes the
  /// MoE layer, dispatch and combine again before them).
  int forward = 0, backward = 0;
  /// The routed tokens of a tensor group (whole buffer) its all-gather and reduce-scatter move.
  double tensor_bytes = 0;
  double imbalance = 1;  ///< expert_load_imbalance: the busiest rank receives this much more
  int64_t experts = 0, top_k = 0;  ///< the block's routed experts, and those each token picks
};
ExpertTraffic expert_traffic(const Layer& layer, const ParallelSpec& parallel, int microbatch_size);

/// The bytes an optimizer step moves through device memory, per parameter, as its trainer runs it.
/// `per_shard` counts on the parameters this rank updates (1 / replicas of them under the
/// distributed optimizer), `per_param` on all of its stage's (zeroing the gradient buffer). The
/// kernels are memory-bound: the step takes these bytes at the device's memory-bound rate.
/// - torch.autocast (`master_weights: false`): fp32 parameters; torch's Adam reads parameter,
///   gradient and both moments and writes parameter and moments (4 x (3 + 2 x state) bytes);
///   fp16's GradScaler unscales the gradients in place first (read and write, 8 bytes);
///   `zero_grad` sets gradients to None (nothing moved).
/// - Megatron-LM's mixed precision (`master_weights: true`, Float16OptimizerWithFloat16Params):
///   16-bit gradients are copied to fp32 main gradients (read 2, write 4); fp16's loss scale is
///   taken off them in place with the non-finite check (8); the gradient norm for --clip-grad
///   reads them (4); fused Adam on the fp32 masters as above; the masters are copied back to the
///   16-bit parameters (read 4, write 2); the gradient buffer is zeroed for the next step.
///   Clipping's rescale (only when the norm exceeds the bound) is not counted. With
///   `optimizer.state_dtype: bf16` (Apex's DistributedFusedAdam) masters and states are 2 bytes and
///   the update reads the 16-bit reduced gradients as they are.
struct OptimizerTraffic {
  double per_shard = 0, per_param = 0;
};
OptimizerTraffic optimizer_traffic(const Scenario& scenario);

}  // namespace parallax::plan
