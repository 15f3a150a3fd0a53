#pragma once
// Sharded data parallelism (parallel.shard) on one stage, after FSDP2's fully_shard applied to each
// layer as torchtitan does: a layer is a unit. Each unit's parameters are views into one flat
// buffer, padded to a multiple of the shard's ranks; each rank keeps its 1/N slice of it (its
// shard), and the stage's optimizer steps over the shards only.
//   optimizer (ZeRO-1): DDP's buckets average the gradients (exec/ddp.hpp); each rank steps its
//     shards and all-gathers the updated parameters.
//   gradients (ZeRO-2): each unit's gradients are views of one flat buffer, which autograd
//     accumulates into over the step's micro-batches; in the step's last backward it is reduced to
//     this rank's shard once the unit's last gradient is in, and freed once its reduction is done
//     (as the next unit's first gradient arrives).
//   full (ZeRO-3): besides, a unit's flat buffer holds no memory outside its use: it is
//     all-gathered before its forward (the next unit prefetched meanwhile) and freed after it
//     (reshard_after_forward), gathered again before its backward (a hook on the unit's output
//     fires as its gradient arrives) and freed after.
// Gloo has no reduce-scatter in Debian's LibTorch 1.13: a unit's reduction is an all-reduce of which
// each rank keeps its slice (twice a reduce-scatter's bytes; the same sums, so the same losses).
// A unit's buffer is freed and restored through its storage, as FSDP1 does (storage resize), so
// the tensors autograd saved in forward see the gathered values again in backward.
// Under full at bf16 or fp16, as FSDP2's MixedPrecisionPolicy(param_dtype) that torchtitan sets:
// the shards stay fp32 (what the optimizer steps), each rank casts its shard into the gathered
// buffer, which is in the compute type, and the gathered parameters' gradients (of that type)
// are added into the unit's fp32 gradient buffer once the unit's last one is in (FSDP2 reduces in
// fp32, torchtitan's mixed_precision_reduce).
#include <torch/torch.h>

#include <functional>
#include <memory>
#include <vector>

#include "exec/comm.hpp"
#include "exec/ddp.hpp"
#include "exec/model.hpp"
#include "profiler/host_tracer.hpp"

namespace parallax::exec {

class ShardedStage {
 public:
  /// `group`: the stage's DDP group, whose `shards` ranks each hold one shard (`shard_rank`).
  ShardedStage(const plan::Plan& plan, const plan::Stage& stage, Stage& module, Group* group, int shard_rank, int shards,
               const Communicator& comm, profiler::HostTracer& tracer);

  /// What the optimizer steps and the checkpoint saves: this rank's shards, a parameter per unit.
  torch::nn::Module& shards() { return *shards_; }
  std::vector<torch::Tensor> shard_parameters() const { return shards_->parameters(); }
  /// This rank's place in the shard (its checkpoint file).
  int shard_rank() const { return shard_rank_; }

  /// The stage's forward (full: layer by layer, each gathered as it runs).
  torch::Tensor forward(const torch::Tensor& x);
  /// Around a backward of the stage (full: gathers the last unit; afterwards frees what is left).
  void before_backward();
  void after_backward();
  /// The next backward is the step's last: its gradients are reduced (gradients, full).
  void arm(int32_t step);
  /// Waits for the step's reductions (gradients, full), leaving each shard's averaged gradient in
  /// its .grad; throws if a unit was never reduced.
  void wait_reductions();
  /// Under `optimizer`: each shard's gradient from the whole ones DDP's buckets averaged.
  void gradients_to_shards();
  /// After the optimizer's step: the parameters from the updated shards (optimizer, gradients;
  /// under full the next forward gathers them). Also after loading a checkpoint.
  void shards_to_parameters();
  /// Every unit gathered (full: before evaluating the test set).
  void gather_all();

  /// Called as each all-gather of a unit's parameters completes (when it began and ended, in
  /// profiler::now_ns() time, and the unit's bytes); the runtime traces it as an ALL_GATHER.
  std::function<void(int64_t begin, int64_t end, int64_t bytes)> traced;

 private:
  struct Unit {
    int bucket = -1;  // the plan's bucket of this layer (one per layer when gradients are sharded)
    std::vector<torch::Tensor> params;
    int64_t numel = 0, padded = 0;
    torch::Tensor flat;   // the whole parameters; params are views of it
    torch::Tensor shard;  // this rank's slice of flat (full: of its values, fp32): what the optimizer steps
    bool gathered = true;
    TracedCollective gather;  // a gather in flight (a broadcast from each rank)
    // The gradient reduction of the step's last backward.
    torch::Tensor grads;  // flat, fp32; the parameters' .grad are views of it unless they are 16-bit
    int pending = 0;      // parameters still to come in the step's last backward
    int arrived = 0;      // parameters whose gradient this backward has added
    TracedCollective reduce;
    std::vector<std::shared_ptr<torch::autograd::Node>> accumulators;  // its parameters', kept with their hooks
  };
  bool full() const;
  bool casts(const Unit& u) const { return u.flat.scalar_type() != u.shard.scalar_type(); }
  void add_cast_gradients(Unit& u);
  void launch_gather(Unit& u);
  void ensure_gathered(int unit);
  void prefetch(int unit);
  void release(Unit& u);
  void on_grad(int unit, int param, const torch::Tensor& grad);
  void after_accumulation(int unit);
  void count_after_accumulation(Unit& u, int unit, int param);
  void finish_reduce(Unit& u);
  int64_t shard_numel(const Unit& u) const { return u.padded / shards_count_; }

  const plan::Plan& plan_;
  int stage_;
  Stage module_;
  Group* group_;
  int shard_rank_, shards_count_;
  const Communicator& comm_;
  profiler::HostTracer& tracer_;
  std::shared_ptr<torch::nn::Module> shards_;
  std::vector<Unit> units_;  // by layer of the stage
  std::vector<int> reducing_;  // units whose reduction is in flight, in launch order
  bool armed_ = false;
  int32_t step_ = 0;
};

}  // namespace parallax::exec
