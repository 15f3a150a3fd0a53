#pragma once
// Inside one rank of a real run (exec/runtime.hpp is the outside): the Runtime that owns the
// rank's stages, data, communicator and tracer. Its loop (steps, actions, checkpoints) is in
// runtime.cpp; the micro-batch passes it performs (forward, backward with its recompute and split
// forms, the loss scaler's overflow check) in runtime_passes.cpp. Included by those two only.
#include <cstdio>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "exec/checkpoint.hpp"
#include "exec/data.hpp"
#include "exec/ddp.hpp"
#include "exec/fsdp.hpp"
#include "exec/gpu.hpp"
#include "exec/gpu_activity.hpp"
#include "exec/grad_scaler.hpp"
#include "exec/model.hpp"
#include "exec/moe.hpp"
#include "exec/peer_messages.hpp"
#include "exec/runtime.hpp"
#include "exec/split_backward.hpp"
#include "exec/threads.hpp"
#include "profiler/host_tracer.hpp"

namespace parallax::exec {

using schedule::Action;
using schedule::ActionKind;

// What a micro-batch leaves behind on a stage between its forward and its backward.
struct Slot {
  torch::Tensor input, output, loss, target, grad_out, grad_in;
  /// Layer recompute: each layer's input, kept without autograd for a block that backward
  /// recomputes; with it, and the layer's output beside it in `layer_outputs`, for the embedding
  /// and the head, which keep their graph (plan::ParallelSpec::recomputes_forward; the last
  /// stage's head keeps no output, its backward starting from the loss).
  std::vector<torch::Tensor> layer_inputs, layer_outputs;
  SplitGraph split;  ///< a stage whose backward the schedule splits (I, W): its graph by layer
};

class Runtime {
 public:
  Runtime(const plan::Plan& plan, const LaunchInfo& launch, const RunOptions& options);
  RankResult run();
  Communicator& comm() { return comm_; }

 private:
  static constexpr int kClockRoundTrips = 8;

  struct StageState {
    std::unique_ptr<ExpertExchange> experts;  // parallel.expert > 1: what its MoE blocks exchange over
    Stage module{nullptr};
    std::unique_ptr<torch::optim::Optimizer> optimizer;
    std::unique_ptr<BucketReducer> reducer;
    std::unique_ptr<ShardedStage> sharded;  // parallel.shard with data parallelism
    int backwards = 0;
    bool split = false;  // the schedule splits its backwards (an I of it on this rank)
  };

  // The loop (runtime.cpp).
  void build_stage(int s);
  /// The stage's expert group and where its expert gradients reduce (parallel.expert > 1).
  std::unique_ptr<ExpertExchange> expert_exchange(int s);
  ExpertReduction expert_reduction(int s) const;
  StepRecord run_step(int64_t step);
  void perform(const Action& a, int64_t step);
  std::vector<timeline::DeviceSpan> collect_gpu_times(int64_t step);
  void report(const StepRecord& rec, int64_t steps);
  void progress(const std::string& text) { std::fprintf(stderr, "[rank %d] %s\n", launch_.rank, text.c_str()); }
  std::vector<StageShard> shards();
  void checkpoint(int64_t step);
  int64_t resume();

  // The passes (runtime_passes.cpp).
  void forward(const Action& a, Slot& slot, int64_t step);
  void backward(const Action& a, Slot& slot);
  void backward_input(const Action& a, Slot& slot);
  void backward_weight(const Action& a, Slot& slot);
  torch::Tensor backward_by_layer(const Action& a, Slot& slot, double scale);
  void check_overflow();
  /// Counts a backward of the stage; before its last of the step, arms the gradient reduction.
  void arm_if_last(StageState& st);
  /// What the stage's optimizer steps: its parameters, or this rank's shards of them.
  static std::vector<torch::Tensor> stepped_parameters(const StageState& st) {
    return st.sharded ? st.sharded->shard_parameters() : st.module->parameters();
  }
  /// Each micro-batch's loss is divided by the micro-batches of the step and multiplied by the
  /// loss scaler's scale, if any.
  double loss_scale() const { return (scaler_ ? scaler_->scale() : 1.0) / plan_.schedule.microbatches(); }

  bool is_last(int stage) const { return stage == static_cast<int>(plan_.stages.size()) - 1; }
  const plan::Layer& last_layer(int stage) const { return stage_layer(stage, plan_.stages[stage].layer_count - 1); }
  const plan::Layer& stage_layer(int stage, int index) const { return plan_.layers()[plan_.stages[stage].first_layer + index]; }

  const plan::Plan& plan_;
  LaunchInfo launch_;
  RunOptions options_;
  const plan::ParallelSpec& p_;
  int pipeline_rank_, replica_;
  const std::vector<Action>& actions_;
  torch::Device train_device_;  // before comm_: a GPU rank selects its GPU before NCCL starts
  profiler::HostTracer tracer_;
  DataSource data_;
  std::set<long> threads_before_comm_ = thread_ids();  // the helpers are the threads started after
  Communicator comm_;
  torch::ScalarType dtype_;
  PeerMessages messages_;
  std::map<int, StageState> stages_;
  std::vector<std::vector<Slot>> slots_;
  Slot dummy_;
  std::unique_ptr<GpuActivity> gpu_activity_;  // null without CUPTI or a GPU
  std::vector<timeline::DeviceSpan> device_;
  std::unique_ptr<gpu::ComputeTimer> gpu_timer_;  // on a GPU: compute actions timed with CUDA events
  std::vector<Action> timed_;                      // this step's timed actions, in order
  std::optional<GradScaler> scaler_;  // fp16 (or PARALLAX_LOSS_SCALER)
  bool overflow_checked_ = false;     // this step's check_overflow has run
  bool scaled_step_ok_ = true;        // its answer: no overflow anywhere, the optimizers step
  int64_t step_ = 0;
  // The forward, backward or OPTIM running: its MoE exchanges and parameter gathers are traced as
  // its; none outside a step (a resume's or the test set's gathers are not).
  std::optional<Action> computing_;
  // ALL_TO_ALL and ALL_GATHER actions so far this step, by (kind, stage, mb)
  std::map<std::tuple<ActionKind, int, int>, int> places_;
  /// Traces a collective measured inside the action computing, at its next place (schedule.hpp).
  void trace_inside(ActionKind kind, timeline::Lane lane, int64_t begin, int64_t end, int64_t bytes);
  torch::Tensor loss_total_;  // the step's last-stage losses so far, on the rank's device
  int loss_count_ = 0;
  timeline::RankMemory memory_;
  int64_t last_report_ns_ = 0;
};

}  // namespace parallax::exec
