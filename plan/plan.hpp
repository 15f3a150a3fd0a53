#pragma once
// A Plan is a scenario resolved into what runs where: the rank grid, the layers of each stage,
// the micro-batch size, the DDP buckets of each stage, the schedule, and a memory estimate per
// rank. Ranks are numbered tensor rank fastest, then as parallel.rank_order says: Megatron-LM's
// tp-dp-pp by default, rank = (pipeline_rank * data + replica) * tensor + tensor_rank
// (placement_of), so a tensor-parallel group sits on neighbouring devices of one node, and a
// stage's replicas next to each other.
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <tuple>
#include <vector>

#include "plan/cost.hpp"
#include "plan/scenario.hpp"
#include "schedule/schedule.hpp"

namespace parallax::plan {

/// A parameter by its place in the model: its layer and its index among that layer's params.
struct ParamRef {
  int layer = 0, index = 0;
};

struct Bucket {
  int stage = 0;
  int index = 0;  ///< in gradient-ready order (the order the all-reduces start)
  int64_t bytes = 0;
  /// In gradient-ready order, by place rather than name (param_names): the tuner resolves
  /// hundreds of thousands of plans, and copying each parameter's name was a sixth of that.
  std::vector<ParamRef> params;
  /// The layer whose backward produces the bucket's last gradient (its earliest layer).
  int ready_layer = 0;
};

struct Stage {
  int index = 0;
  int pipeline_rank = 0;
  int first_layer = 0;
  int layer_count = 0;
  int64_t param_count = 0;  ///< parameters on one tensor rank
  int64_t param_bytes = 0;  ///< their fp32 bytes (gradients, DDP buckets and the optimizer's sweep)
  std::vector<Bucket> buckets;  ///< empty without data parallelism
};

/// Bytes one rank holds at its peak.
struct MemoryEstimate {
  int64_t params = 0;
  int64_t gradients = 0;
  int64_t optimizer = 0;
  int64_t buckets = 0;      ///< DDP's flat bucket buffers (a copy of the gradients)
  int64_t activations = 0;  ///< kept for backward, at the schedule's peak of micro-batches in flight
  /// What the rank's fullest moment lacks of each part, each part being at its own fullest: where
  /// the optimizer step frees the gradients (zero_grad(set_to_none)), the step's first backward
  /// makes them, after GPipe's or a single micro-batch's most activations; a ZeRO-1 step's gradient
  /// slices come when the activations are gone; under sharded gradients the loss's gradients come
  /// before any layer's (plan/memory.cpp). The GUI's bars show what that moment holds; where its
  /// split is not known, the gradients come off first.
  struct Lacks {
    int64_t gradients = 0, activations = 0, transient = 0, gathered = 0;
  } lacks;
  /// What is never held at once, taken off the total: the parts' lacks together.
  int64_t not_at_once() const { return lacks.gradients + lacks.activations + lacks.transient + lacks.gathered; }
  int64_t recompute = 0;    ///< held for a moment: backward's (a recompute's, the loss's gradients: plan::recompute_bytes) or a ZeRO-1 step's gradient slices, the larger
  /// parallel.shard: what is held unsharded for a while (gathered layers, gradients before their
  /// reduce-scatter); 0 without sharding beyond the optimizer.
  int64_t gathered = 0;
  int64_t reserve = 0;      ///< CUDA context, workspaces and fragmentation (plan/memory.hpp)
  int peak_inflight = 0;    ///< micro-batches whose activations are held at that peak
  int64_t total() const { return allocated() + reserve; }
  /// What the tensors take, without the reserve: what a run measures (on a GPU the CUDA caching
  /// allocator's peak of allocated bytes, which counts neither the context nor the cached blocks).
  int64_t allocated() const {
    return params + gradients + optimizer + buckets + activations + recompute + gathered - not_at_once();
  }
};

struct RankPlan {
  int rank = 0;
  int replica = 0;
  int pipeline_rank = 0;
  int tensor_rank = 0;
  int node = 0;
  int local_rank = 0;  ///< device index inside its node
  std::vector<int> stages;
  MemoryEstimate memory;
};

/// Where a rank sits in the grid; rank_of is its inverse. Both follow parallel.rank_order.
/// Where a rank sits in the grid. `replica` counts data x context (ParallelSpec::replicas):
/// context index = replica % context, data index = replica / context, so the default order
/// tp-dp-pp is Megatron-core's tp-cp-dp-pp.
struct Placement {
  int replica = 0, pipeline_rank = 0, tensor_rank = 0;
};
Placement placement_of(const ParallelSpec& p, int rank);
int rank_of(const ParallelSpec& p, const Placement& where);
/// A tensor-parallel group's number, its first rank / tensor: the rank a timeline shows for the
/// group (one per group), and the global rank itself without tensor parallelism.
int group_of(const ParallelSpec& p, int replica, int pipeline_rank);
/// The inverse of group_of (tensor_rank 0).
Placement group_placement(const ParallelSpec& p, int group);

struct Plan {
  Scenario scenario;
  int world_size = 1;  ///< every GPU: data x pipeline x tensor
  int nodes = 1;
  int microbatch_size = 1;
  std::vector<int> partition;  ///< layers per stage
  std::vector<Stage> stages;
  std::vector<RankPlan> ranks;
  schedule::Schedule schedule;
  /// The model's own vocabulary where the trainer padded it (padded_vocabulary: the embedding and
  /// head hold the padded one); 0 where it did not.
  int64_t unpadded_vocab = 0;

  const std::vector<Layer>& layers() const { return scenario.layers; }
  int chunks() const { return scenario.parallel.chunks; }
};

/// Each stage's layers' kernels by kind for one micro-batch, on one tensor rank, as the device's
/// compute model costs them (kernel_class_times): forward, and backward with what it recomputes
/// (the whole forward under activation_checkpointing layer or stage, what selective and
/// selective_op re-run by kind under those). nullopt when the device has no
/// compute model at the plan's precision (a CPU, a calibrated profile) or a layer is synthetic.
std::optional<std::vector<LayerKernelClasses>> stage_kernel_classes(const Plan& plan);

/// The busiest pipeline rank's F and B kernels over one step, by kind, as the device's compute
/// model costs them (stage_kernel_classes x the step's micro-batches), without the collectives and
/// slowdowns inside F and B: what bounds the step's compute. With a profile fitted to a run
/// (`calibrate --from-trace`), each kind times its fitted factor, as the step's costs take it.
/// nullopt without a compute model. `parallax simulate`, the report and the GUI show it.
struct StepKernels {
  int pipeline_rank = 0;
  KernelClassTimes us;  ///< microseconds of each kind over the step
  double total_us() const { return us.gemm + us.flash + us.memory; }
};
/// `pipeline_rank` >= 0: that pipeline rank's instead of the busiest.
std::optional<StepKernels> step_kernels(const Plan& plan, int pipeline_rank = -1);
/// "GEMMs 519.7 ms (88%), flash attention 40.4 ms (7%), memory-bound 30.7 ms (5%)"
std::string describe(const StepKernels& kernels);
/// Whose kernels they are: "pipeline rank 3", or "a rank" without a pipeline.
std::string whose(const Plan& plan, const StepKernels& kernels);

/// What a step trains, as trainers count it for their MFU (model FLOPs utilisation): torchtitan's
/// and Megatron-LM's convention, from PaLM (Chowdhery et al. 2022, appendix B). Per token, 6 x the
/// parameters a token passes through (each MoE block's top-k of its routed experts; the output
/// layer's, tied to the embedding or not; not the embedding table, a lookup) plus, per attention
/// block, 12 x its query width (heads x head dimension) x the sequence length, counted unmasked as
/// those trainers count it. Recompute is not counted: the model's FLOPs, not the hardware's.
struct ModelWork {
  double samples = 0;          ///< a step's global batch (sequences, for a language model)
  double tokens = 0;           ///< samples x sequence length; 0 for a model without a sequence
  double flops = 0;            ///< the step's model FLOPs (per token x tokens, or per sample x samples)
  double peak_flops = 0;       ///< the device's dense 16-bit peak (bf16, else fp16), as MFU is quoted; 0 without one
  int gpus = 0;                ///< the plan's devices
};
ModelWork model_work(const Plan& plan);
/// The parameters a token passes through (each MoE block's top-k of its routed experts).
int64_t active_param_count(const std::vector<Layer>& layers);

/// A bucket's parameters' full names, in gradient-ready order.
std::vector<std::string> param_names(const std::vector<Layer>& layers, const Bucket& bucket);
/// A parameter's bytes on one rank in a data-parallel collective of bytes_per_element an element
/// (a bucket's gradient reduction, the parameters' gather after a sharded step); an expert's
/// scaled to the same ring traffic over all replicas (plan/plan.cpp).
int64_t data_parallel_bytes(const ParallelSpec& p, const ParamSpec& param, int bytes_per_element);

/// The compute order of a scenario's schedule: generated, or read from its CSV (a bad CSV is an
/// InputError at the CSV's line and column).
schedule::ComputeOrder schedule_order(const Scenario& scenario);
/// Generated schedules as lowered, kept by everything lowering reads (the schedule and its stages,
/// chunks, accumulation and point-to-point rules), for a caller that resolves many plans: the
/// tuner's configurations share few schedules, and lowering a 64-stage, 512-chunk one was half of
/// resolving its plan. Kept bare (schedule::lower_bare): the all-reduces are added for each plan's
/// buckets, which partitions and bucket sizes vary, so one lowering serves them all. Holds at
/// most kMaxActions actions (about 100 MB), dropping the oldest first. Safe to use from several threads.
class LoweredSchedules {
 public:
  static constexpr size_t kMaxActions = size_t{4} << 20;
  /// The schedule lowered with these inputs: the one kept, or `lower()`'s (then kept), with the
  /// all-reduces of buckets_per_stage.
  schedule::Schedule get(const ParallelSpec& p, const std::vector<int>& buckets_per_stage, schedule::Collectives collectives,
                         const std::function<schedule::BareSchedule()>& lower);

 private:
  using Key = std::tuple<schedule::ScheduleKind, bool, int, int, int, int, schedule::Collectives>;
  std::mutex mutex_;
  std::map<Key, std::shared_ptr<const schedule::BareSchedule>> kept_;
  std::deque<Key> order_;  // oldest first
  size_t actions_ = 0;
};

/// Sets the stages' DDP buckets and the schedule's all-reduces for the plan's scenario as it now
/// is: after a change of parallel.bucket_cap_mb or first_bucket_mb, the plan resolve_plan gives
/// with them (nothing else in a plan depends on them: memory counts the buckets as one flat copy
/// of the gradients). The tuner's bucket variants share one plan this way.
void rebucket(Plan* plan, LoweredSchedules* lowered = nullptr);

/// What resolve_plan fills in. `bound`: what the tuner's memory fit and lower bound read, for
/// about half the cost: the stages without DDP buckets and the schedule without their all-reduces
/// (rebucket adds both; neither changes memory), and one RankPlan per pipeline rank, replica 0's
/// first tensor rank (every rank of a pipeline rank has its memory). Not a plan to simulate.
enum class PlanDetail { whole, bound };

/// Sets the embedding's and head's vocabulary to what the scenario's trainer builds at its tensor
/// degree (padded_vocabulary of Scenario::model_vocab), copying the layers where it changes them;
/// whether the trainer pads it. resolve_plan does; the tuner's evaluator keeps a padded copy per
/// tensor degree, so that its plans share them.
bool pad_vocabulary(Scenario* scenario);

/// Resolves a scenario; an imported schedule that fails validation is an InputError. A generated
/// schedule is checked too (a logic_error when a generator is wrong) unless `check_generated` is
/// off: the tuner resolves tens of thousands of plans, and the check costs more than the rest.
/// `lowered`, when given, keeps generated schedules for the next plans that need them.
Plan resolve_plan(Scenario scenario, bool check_generated = true, LoweredSchedules* lowered = nullptr,
                  PlanDetail detail = PlanDetail::whole);


}  // namespace parallax::plan
