#pragma once
// The memory rule: what one rank holds at its peak, used by `plan`, the simulator's report and
// the tuner alike (docs/simulator.md, Memory).
//
// - Parameters, gradients and optimizer state per parameter as the precision regime keeps them:
//   torch.autocast (fp32 parameters and gradients, fp32 state, DDP's flat bucket copy) or
//   Megatron-LM's mixed precision (`master_weights`: 16-bit parameters, fp32 gradients that are
//   also DDP's buffer, fp32 master weights and state: 2 + 4 + 4 + 8 = 18 bytes with Adam); the
//   `parallel.shard` divides the optimizer state (optimizer), the gradients (gradients) and the
//   parameters (full) by the ranks a shard spans, and adds what is held unsharded for a while:
//   gradients before their reduce-scatter, and under full the gathered layers in flight.
// - Activations per layer from Korthikanti et al. 2022 ("Reducing Activation Recomputation in
//   Large Transformer Models", arXiv 2205.05198, section 4), split by tensor and sequence
//   parallelism as the paper splits them, kept or recomputed as `activation_checkpointing` says,
//   times the micro-batches the schedule holds at once on the rank. Where the profile's
//   calibration measured a layer's `kept_bytes` (on a GPU, from the CUDA allocator) the plan takes
//   those instead, on one tensor rank without selective recompute, and the loss's as well.
// - An allowance for what no tensor holds: the CUDA context and library workspaces, and the
//   caching allocator's fragmentation (MemoryEstimate::reserve).
#include <cstdint>
#include <string>

#include "plan/layers.hpp"
#include "plan/scenario.hpp"

namespace parallax::plan {

struct Plan;
struct Stage;

/// Bytes one sample's pass through `layer` keeps for backward on one tensor rank when nothing is
/// recomputed (the `selective` choice drops attention's scores from it).
double full_activation_bytes(const Layer& layer, const ParallelSpec& p);
/// Bytes of the layer's input per sample on one tensor rank: what layer and stage recompute keep.
double input_activation_bytes(const Layer& layer, const ParallelSpec& p);
/// Bytes the layer keeps per sample under the plan's recompute choice (for `stage`, the
/// stage's first layer keeps its input and the others nothing: see stage_activation_bytes).
double kept_activation_bytes(const Layer& layer, const ParallelSpec& p);

/// Activation bytes one micro-batch of a stage holds until its backward.
int64_t stage_activation_bytes(const Plan& plan, const Stage& stage);
/// One micro-batch's receive buffer at `stage`: its input (forward) or its output's gradient.
int64_t receive_buffer_bytes(const Plan& plan, bool forward, int stage);
/// Bytes backward holds for a moment on top of what is kept: a recompute's, while it runs (one
/// layer's full activations for `layer`, the whole stage's for `stage`, what `selective` and
/// `selective_op` re-run of one layer), or, on the last stage, the loss's gradients of the logits
/// (docs/simulator.md, Memory), whichever is larger; plus, where a backward adds into gradients
/// the step already holds, the stage's largest parameter's gradient made anew.
int64_t recompute_bytes(const Plan& plan, const Stage& stage);

/// Bytes of one parameter, its gradient, and its optimizer state (with master weights), as the
/// precision regime keeps them; the optimizer's figure before the distributed optimizer's split.
struct BytesPerParameter {
  int parameter = 4, gradient = 4, optimizer = 0, bucket = 0;
};
BytesPerParameter bytes_per_parameter(const Scenario& scenario);

/// What a rank keeps of `params` parameters' state under parallel.shard: each part whole, or its
/// 1 / shard_ranks (rounded up) where the level shards it; FSDP keeps no DDP bucket copy. Of them,
/// `expert_params` (a MoE model's experts on this rank) shard over shard_ranks / expert ranks;
/// `outside_blocks` (the embedding's and the output layer's) keep no fp8 copies under fp8.
/// The one rule for the memory estimate and the tuner's memory floor.
struct StateBytes {
  int64_t params = 0, gradients = 0, optimizer = 0, buckets = 0;
  int64_t total() const { return params + gradients + optimizer + buckets; }
};
StateBytes sharded_state_bytes(const Scenario& scenario, int64_t params, int64_t expert_params = 0, int64_t outside_blocks = 0);
/// The parameters of `layer` on one rank that Transformer Engine keeps no fp8 copies of: all of an
/// embedding's and an output layer's (Megatron-core's VocabParallelEmbedding and output
/// ColumnParallelLinear are not TE modules); none of a block's.
int64_t params_without_fp8_copies(const Layer& layer, int tensor, int expert, int expert_tensor);

/// Bytes of a parameter of `layer` as shard full's all-gather moves it and the gathered layer holds
/// it: the compute type (FSDP2's MixedPrecisionPolicy param_dtype, bf16 under fp8), fp32 at fp32;
/// 1 for a block's under parallel.fp8_param_gather.
int gathered_parameter_bytes(const ParallelSpec& p, const Layer& layer);

/// The allowance beyond tensors for a device of this kind holding `allocated` bytes.
int64_t reserve_bytes(const Device& device, int64_t allocated);
/// What reserve_bytes allows for on this device, in words (printed under `parallax plan`'s memory).
std::string reserve_rule(const Device& device);

/// Fills every rank's MemoryEstimate of a resolved plan.
void estimate_memory(Plan* plan);

}  // namespace parallax::plan
