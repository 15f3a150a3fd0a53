#pragma once
// DDP's gradient buckets for one stage, after PyTorch's Reducer: each bucket is one flat buffer
// holding its parameters' gradients in the plan's bucket order. Hooks on the parameters fire as
// autograd produces each gradient; during the stage's last backward of an optimizer step (armed)
// a hook copies the fully accumulated gradient into its slot, and the moment a bucket's last slot
// is filled its all-reduce starts on the stage's DDP group, overlapping the rest of backward.
// Earlier backwards only accumulate (no_sync). The optimizer step waits for every bucket and
// writes the averaged gradients back. (PyTorch's own Reducer needs headers Debian's
// libtorch-dev 1.13 lacks; Tensor::register_hook fires in gradient-ready order and is enough.)
#include <torch/torch.h>

#include <atomic>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "exec/comm.hpp"
#include "exec/model.hpp"
#include "profiler/host_tracer.hpp"

namespace parallax::exec {

/// One traced collective: a gradient all-reduce (a DDP bucket, a sharded layer) or a sharded layer's
/// all-gather, launched as one or several works. Its span runs from the first launch to the last
/// work's completion (a callback on its future, run by the process group's worker thread), not to
/// when the rank next looks. A bucket holding expert gradients launches twice (its dense part on
/// the stage's group, its experts' on their expert-data-parallel group): one span covers both.
class TracedCollective {
 public:
  /// All-reduces `flat` (summed) over `group`, as a piece of this collective.
  void launch(Group& group, const torch::Tensor& flat);
  /// Takes a work launched just now as a piece of this collective.
  void add(Communicator::Work work);
  bool launched() const { return !works_.empty(); }
  struct Span {
    int64_t begin = 0, end = 0;  ///< profiler::now_ns() times
  };
  /// Waits for it (a failure names `what` and the `peers`), lets the works go (they hold their
  /// tensors) and returns when it ran.
  Span wait(const Communicator& comm, const std::string& what, const std::vector<int>& peers);
  /// wait(), then records the span on the all-reduce lane as action `a` moving `bytes` in `step`.
  void finish(const Communicator& comm, const std::string& what, const std::vector<int>& peers,
              profiler::HostTracer& tracer, const schedule::Action& a, int64_t bytes, int32_t step);
  void reset() {
    works_.clear();
    completed_ns_.clear();
  }

 private:
  std::vector<Communicator::Work> works_;
  int64_t launched_ns_ = 0;  // the first launch's
  // Set by the completion callbacks; fresh ones per launch, so that a late callback of one step
  // cannot write into the next.
  std::vector<std::shared_ptr<std::atomic<int64_t>>> completed_ns_;
};

/// Where a stage's expert parameters' gradients go (parallel.expert > 1): summed only over the
/// ranks holding the same experts (Megatron-core's expert-data-parallel group; none when each
/// expert is on one rank), then divided by all the stage's replicas, as the dense ones.
struct ExpertReduction {
  Group* group = nullptr;
  std::set<std::string> params;  ///< the plan's expert parameters (ParamSpec::expert) of the stage
};

class BucketReducer {
 public:
  BucketReducer(const plan::Stage& stage, const std::vector<plan::Layer>& layers, Stage& module, Group* group, int replicas,
                profiler::HostTracer& tracer, ExpertReduction experts = {});

  /// The next backward of this stage is its last of the optimizer step.
  void arm(int32_t step);
  /// Waits for every bucket's all-reduce and records its span.
  void wait(const Communicator& comm);
  /// Replaces each gradient by the replicas' mean (after wait()).
  void apply();

 private:
  struct Bucket {
    int index = 0;
    torch::Tensor flat, expert_flat;  // the dense and the expert gradients, each in bucket order
    std::vector<int> params;          // positions in params_
    int pending = 0;
    bool filled = false;
    int64_t filled_ns = 0;  // when its last gradient came (the span of a bucket with nothing to reduce)
    TracedCollective reduce;
  };
  void on_grad(int param, const torch::Tensor& grad);
  /// Where parameter `i`'s gradient sits in its bucket.
  torch::Tensor slot_of(int i) const;

  int stage_;
  Group* group_;
  int replicas_;
  profiler::HostTracer& tracer_;
  std::vector<torch::Tensor> params_;
  std::vector<int> bucket_of_, offset_of_;  // offset in the bucket's flat or expert_flat
  std::vector<bool> expert_;
  ExpertReduction experts_;
  std::vector<Bucket> buckets_;
  bool armed_ = false;
  int32_t step_ = 0;
};

}  // namespace parallax::exec
