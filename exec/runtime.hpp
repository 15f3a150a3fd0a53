#pragma once
// One rank of a real run: builds its stages, then performs its schedule's actions, in order, for
// every optimizer step — exactly the lists the simulator plays. F and B run the stage module,
// SEND/RECV move activations and gradients with c10d point-to-point (sends are asynchronous and
// waited at the end of the step; receives wait), ALLREDUCE is the DDP bucket all-reduce started
// from the gradient hooks, OPTIM steps the stage's optimizer. Every action is a span in the host
// tracer with the schedule's action id.
#include <string>
#include <vector>

#include "exec/comm.hpp"
#include "plan/plan.hpp"
#include "profiler/clock_sync.hpp"
#include "timeline/timeline.hpp"

namespace parallax::exec {

struct RunOptions {
  std::string checkpoint_dir;  ///< empty: no checkpoints
  int checkpoint_every = 0;    ///< optimizer steps between checkpoints
  bool resume = false;         ///< continue from the latest complete checkpoint
  bool trace = true;           ///< record every span; off (`run` without -o): nothing to keep, so no buffer for it
};

// The lanes of a GPU rank's compute actions: as the device ran them, and as the host launched them.
using timeline::kCudaEventLane;
using timeline::kHostLaunchLane;

struct StepRecord {
  int64_t step = 0;
  double loss_sum = 0;  ///< over this rank's last-stage micro-batches (each a mean over its samples)
  int loss_count = 0;
  plan::Time step_time;  ///< the rank's wall time of the step, on its host
  double loss_scale = 0;  ///< the loss scale this step used (0: no loss scaler)
  bool skipped = false;   ///< a gradient overflowed somewhere: no optimizer stepped
};

struct RankResult {
  int rank = 0;
  std::vector<StepRecord> steps;
  int64_t correct = 0, tested = 0;  ///< test-set accuracy (Fashion-MNIST), on last-stage ranks
  std::vector<timeline::TimelineEvent> events;  ///< on rank 0's clock
  std::vector<timeline::Instant> instants;      ///< step starts, on rank 0's clock
  /// The host's speed before each step (step, exec::host_probe_us).
  std::vector<std::pair<int32_t, double>> host_probe;
  std::vector<timeline::DeviceSpan> device;     ///< GPU activity (CUPTI), on rank 0's clock
  timeline::ClockAlignment clock;              ///< how this rank's clock was mapped to rank 0's
  timeline::RankMemory memory;                 ///< the host memory its training took
  uint64_t dropped = 0;  ///< spans the tracer could not hold
};

/// Spans each of a rank's threads can record: every action of every step, plus slack, at most
/// 4M (256 MB); none when the run keeps no trace.
size_t tracer_capacity(const plan::Plan& plan, const RunOptions& options);

/// Runs this rank to the end of data.steps; throws on failure (the message names rank and action).
/// Rank 0 returns every rank's result (gathered through the c10d store); the others their own.
std::vector<RankResult> run_rank(const plan::Plan& plan, const LaunchInfo& launch, const RunOptions& options);

/// Appends to `spans` the compute actions `timed` of one step as the GPU ran them (`times`: each
/// action's device start and end, ns on the host clock), as kCudaEventLane spans.
void append_timed_actions(const std::vector<std::pair<int64_t, int64_t>>& times, const std::vector<schedule::Action>& timed,
                          int rank, int64_t step, std::vector<timeline::DeviceSpan>* spans);

/// Puts a rank's spans on rank 0's clock, drift corrected between the estimates from the round
/// trips at its start and at its end (none: rank 0 itself, the reference).
void align_to_rank0(const std::vector<profiler::RoundTrip>& start, const std::vector<profiler::RoundTrip>& end,
                    RankResult* result);

std::string result_to_json(const RankResult& r);
/// Every rank's spans in one measured timeline, its clock starting at the earliest of them. A
/// compute action timed on a GPU (kCudaEventLane) takes its device times; its host span moves to
/// kHostLaunchLane.
timeline::Timeline measured_timeline(const std::vector<RankResult>& results, const std::string& scenario, int world_size);
RankResult result_from_json(const std::string& text);

}  // namespace parallax::exec
