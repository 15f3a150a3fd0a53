#pragma once
// What each action of a plan costs on its hardware: forward and backward time per stage (from
// plan::estimate_layer_cost, so measured costs win when the profile has them), when each DDP bucket
// becomes ready inside the last backward, the bytes each pipeline send moves, and the optimizer
// step. Precision enters through the device's peak per precision and the activation element size.
// With a calibrated profile (`parallax calibrate`) a stage's forward also holds its data loading
// (first stage: inputs and targets, last stage: targets) and the loss, its backward one autograd
// call overhead and the loss gradient, and the optimizer step its measured cost per parameter.
#include <vector>

#include "plan/cost.hpp"
#include "plan/plan.hpp"
#include "plan/time.hpp"

namespace parallax::sim {

using plan::Time;

struct StageCost {
  Time forward;
  Time backward;  ///< includes the recomputed forward with activation checkpointing
  /// The part of backward that computes the weight gradients: a split backward's W (its I is
  /// the rest, recompute included).
  Time backward_weight;
  /// Offset from the start of a backward at which each bucket's last gradient is produced
  /// (backward runs from the stage's last layer to its first), and the same within a W.
  std::vector<Time> bucket_ready, bucket_ready_in_weight;
  int64_t send_forward_bytes = 0;   ///< the stage's output for one micro-batch
  int64_t send_backward_bytes = 0;  ///< the gradient of the stage's input for one micro-batch
  /// The sender's time inside the send call (calibrated hosts): it cannot compute meanwhile.
  /// The receive is posted (Gloo: ahead of it; NCCL: the send waits for it), so the call
  /// writes the payload.
  Time send_forward_call, send_backward_call;
  Time optimizer;
  /// Extra time of the step's last backward of the stage: DDP hooks copy gradients into buckets.
  Time bucket_copy_in;
  /// And, in a calibrated run, the all-reduces' work on the shared cores meanwhile
  /// (plan::InRunFactors::sync_backward_extra_us_per_mb).
  Time sync_backward_extra;
  /// Extra time of every other backward of the stage when sharded gradients are reduce-scattered
  /// every micro-batch (plan::ParallelSpec::reduces_every_microbatch): their reduce-scatters'
  /// exposed part, the step's last backward's being its buckets.
  Time reduce_scatter_between;
  /// With parallel.overlap_param_gather, the all-gathers of the parameters a sharded optimizer
  /// step updated: the stage's first bucket's (in forward order), started with the step, which
  /// its first forward waits for; and the exposed part of the later buckets', run beside that
  /// forward bucket by bucket, with the slowdown of the compute they hide behind, added to it.
  Time first_gather, first_forward_extra;
  /// The stage's whole all-gather as one collective: what an interleaved schedule's
  /// param_sync_func starts for a model chunk ahead of its forward (Simulation's chunk_prefetch_).
  Time chunk_gather;
  /// A MoE model's all-to-alls (dispatch and combine) inside forward and backward above, exposed
  /// there: what DualPipe's OVERLAP_F_B hides behind the other micro-batch's compute.
  Time all_to_all_forward, all_to_all_backward;
  /// The MoE blocks' experts inside forward and backward (plan::LayerCost::expert_forward): what
  /// the other micro-batch's dispatch runs beside in an OVERLAP_F_B.
  Time expert_forward, expert_backward;
  /// Whether each action saturates the device's memory bandwidth: memory-bound layers (roofline)
  /// take most of its time. The optimizer step always does (it is costed at memory bandwidth).
  bool forward_memory_bound = false, backward_memory_bound = false, optimizer_memory_bound = true;
  /// On a GPU calibrated with launch figures: the host's time to launch each action's kernels
  /// (forward, backward and optimizer above are then the device's). Zero: launches are not
  /// modelled apart, and the times above hold them.
  Time forward_launch, backward_launch, optimizer_launch;
};

/// DeepEP's share of NCCL's all-to-all bytes to the other `groups` (nodes, or ranks) that a
/// balanced router spreads `experts` over, each token picking `top_k` of them: the token's distinct
/// other groups over its copies bound for them (1 for one group). DeepEP sends a token once to each
/// node (over the NICs) and once to each rank (over NVLink) holding any of its experts; NCCL's
/// all-to-all sends a copy per expert.
double remote_copies_per_group(int64_t experts, int64_t top_k, int groups);

/// `layer_costs`: each layer's cost for the plan's precision and micro-batch size, when cached.
std::vector<StageCost> stage_costs(const plan::Plan& plan, const std::vector<plan::LayerCost>* layer_costs = nullptr);

/// The in-run costs a calibrated plan's compute and all-reduces take: the data-parallel probe's
/// when the plan has data > 1 and the profile has them, else the pipeline probe's.
const plan::InRunFactors& in_run_factors(const plan::Plan& plan, const plan::Calibration& cal);

/// This host's calibrated ring all-reduce (parallax calibrate measured it for allreduce_ranks
/// ranks) scaled to `ranks`: a ring of n ranks scales the latency by (n-1) and the bytes per rank
/// by 2(n-1)/n; in a run it takes the in-run factor longer (it shares the cores with backward).
/// Its time is latency_us + bytes x us_per_byte. Needs cal.allreduce measured.
struct RingCost {
  double latency_us = 0, us_per_byte = 0;
};
RingCost calibrated_allreduce(const plan::Plan& plan, const plan::Calibration& cal, int ranks);

/// An uncalibrated optimizer step of a stage of `stage_params` parameters: the bytes its trainer's
/// kernels move (plan::optimizer_traffic) at the device's memory-bound rate, plus one call overhead.
Time optimizer_time(const plan::Scenario& scenario, int64_t stage_params);

}  // namespace parallax::sim
