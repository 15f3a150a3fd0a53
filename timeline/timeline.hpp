#pragma once
// A timeline: what each rank did when, as action-level events on named lanes. The simulator
// writes predicted ones and the profiler measured ones; both carry the schedule's action ids, which
// is what `parallax compare` and the GUI join on.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "plan/time.hpp"
#include "schedule/schedule.hpp"
#include "timeline/plan_summary.hpp"

namespace parallax::timeline {

// The words every timeline is written in.
using plan::Time;
using schedule::Action;
using schedule::ActionKind;

/// One row per rank and lane in every view.
/// all_to_all: a MoE block's token exchanges, measured inside the compute actions (executor only).
/// all_gather: a sharded layer's parameters gathered (parallel.shard), measured inside the compute
/// actions and OPTIM (executor only).
enum class Lane : uint8_t { compute, send, recv, allreduce, all_to_all, all_gather };
constexpr int kLaneCount = 6;
const char* name(Lane lane);

/// How a collective was carried out (shown in traces).
enum class Algorithm : uint8_t { none, ring, hierarchical, tree, nvls };
const char* name(Algorithm a);
/// NCCL's protocol for a collective (none where the model has no protocols).
enum class Protocol : uint8_t { none, ll, ll128, simple };
const char* name(Protocol p);

// The fields are ordered so that none pads another: 64 bytes, not 72. A 16,384-rank simulation
// writes six million of them, and on this project's VMs about a third of its time went to the first
// touch of the memory they take (parallax_sim_bench --step --replicas 2048, docs/simulator.md).
struct TimelineEvent {
  int32_t rank = 0;
  Lane lane = Lane::compute;
  Algorithm algorithm = Algorithm::none;
  Protocol protocol = Protocol::none;
  schedule::Action action;
  int32_t step = 0;  ///< optimizer step
  Time start;
  Time end;
  int64_t bytes = 0;  ///< moved by a communication action
};
static_assert(sizeof(TimelineEvent) <= 64, "TimelineEvent: keep it in 64 bytes (see above)");

/// A value over time, e.g. a link's bandwidth: samples hold from their time to the next one.
struct Counter {
  std::string name;
  std::string unit;
  std::vector<std::pair<Time, double>> samples;
};

/// Device activity (a GPU kernel, memcpy or memset recorded by CUPTI) on its own lane beside the
/// action lanes, with the action that launched it when known.
struct DeviceSpan {
  int rank = 0;
  std::string lane;  ///< "gpu stream 7", "gpu stream 84 nccl", "gpu stream 7 memcpy"
  std::string name;  ///< kernel name
  Time start;
  Time end;
  bool attributed = false;
  schedule::Action action;  ///< when attributed
  int32_t step = 0;
  int64_t bytes = 0;
};

/// The device lane of compute actions timed on a GPU with CUDA events (one span per action).
inline constexpr const char* kCudaEventLane = "gpu compute (CUDA events)";
/// The lane of a measured GPU trace that keeps the host's span of each of those actions, from its
/// first launch to its last one queued (the action's compute span holds the device's time).
inline constexpr const char* kHostLaunchLane = "host launch";

/// A point in time on a rank, e.g. the start of an optimizer step.
struct Instant {
  int rank = 0;
  Time at;
  std::string name;
  int32_t step = 0;
};

/// How a rank's clock was put on rank 0's axis (measured timelines).
struct ClockAlignment {
  int rank = 0;
  int64_t offset_ns = 0;  ///< rank 0's clock minus this rank's at the start of the run
  double drift_ppm = 0;
  int64_t error_bound_ns = 0;
};

/// The memory a rank's training took (measured timelines): what its tensors held at their peak
/// over the run (a CPU rank: the bytes of live tensors, counted as LibTorch allocates them; a GPU
/// rank: the CUDA caching allocator's peak of allocated bytes), less what they held once its data
/// and process groups were set up and before its stages were built. What is left is the model,
/// gradients, optimizer state, activations and buffers at their peak: what the plan's memory
/// estimate predicts.
struct RankMemory {
  int rank = 0;
  int64_t peak_bytes = 0;
  int64_t baseline_bytes = 0;  ///< before the stages were built
  /// The whole process's peak resident set size (LibTorch's code and buffers, the allocator's
  /// slack included); 0 where not recorded.
  int64_t peak_rss_bytes = 0;
  int64_t training_bytes() const { return peak_bytes - baseline_bytes; }
};

struct Timeline {
  std::string kind;      ///< "predicted" or "measured"
  std::string scenario;  ///< scenario name
  std::optional<PlanSummary> plan;  ///< the plan it is of (timeline/plan_summary.hpp), when known
  int world_size = 0;
  std::vector<TimelineEvent> events;
  std::vector<Counter> counters;
  std::vector<Instant> instants;
  std::vector<DeviceSpan> device;
  std::vector<ClockAlignment> clocks;
  std::vector<RankMemory> memory;  ///< per rank, measured timelines only
};

}  // namespace parallax::timeline
