#pragma once
// Predicted against measured, action by action. The two timelines are joined on (rank, action
// id) within each optimizer step; step-level numbers use the definitions of plan/timeline_metrics.
// Measured figures are taken over the steps after the first (a warm-up) when there are several,
// with min / median / max; an action's measured start and duration are its means over them (a
// step's time is a sum of durations along its critical path, so the rare long ones count).
#include <string>
#include <vector>

#include "plan/timeline.hpp"

namespace parallax::profiler {

struct Spread {
  double min = 0, median = 0, max = 0;
};

struct RankComparison {
  int rank = 0;
  double predicted_bubble_ms = 0, measured_bubble_ms = 0;
  double predicted_bubble_fraction = 0, measured_bubble_fraction = 0;
  double predicted_exposed_comm_ms = 0, measured_exposed_comm_ms = 0;
  /// MiB: the plan's estimate (from the trace's plan) and the run's measured training memory
  /// (plan::RankMemory); negative when a trace does not carry it.
  double predicted_memory_mb = -1, measured_memory_mb = -1;
};

struct KindComparison {
  std::string kind;  ///< F, B, SEND, RECV, ALLREDUCE, OPTIM
  int actions = 0;
  double mean_abs_error = 0;  ///< mean of |predicted - measured| / measured duration
  double worst_error = 0;     ///< signed, the largest in magnitude
  std::string worst_action;   ///< "rank:id"
  double predicted_ms = 0, measured_ms = 0;  ///< summed over the kind's actions (one step)
};

struct ActionComparison {
  int rank = 0;
  std::string action;
  double predicted_start_ms = 0, predicted_duration_ms = 0;  ///< start relative to the step's start
  double measured_start_ms = 0, measured_duration_ms = 0;    ///< means over the measured steps
  double difference_ms = 0;  ///< max(|start difference|, |end difference|)
};

struct CompareReport {
  double predicted_step_ms = 0;
  Spread measured_step_ms;
  double step_error = 0;  ///< (predicted - measured median) / measured median
  std::vector<int> measured_steps;  ///< the steps the measured figures are over
  /// Given a host reference: the steps after warm-up whose host probe was within
  /// plan::kHostSpeedTolerance of it, of `host_probed_steps`. When there are enough of them
  /// (kMinStepsAtSpeed, kMinShareAtSpeed), the measured figures are over those steps only
  /// (`host_matched`). `all_steps_ms` is the step time over every step after warm-up.
  int host_steps_at_speed = 0, host_probed_steps = 0;
  bool host_matched = false;
  Spread all_steps_ms;
  std::vector<RankComparison> ranks;
  std::vector<KindComparison> kinds;
  std::vector<ActionComparison> worst;  ///< the ten largest timing differences
  std::vector<std::string> only_predicted, only_measured;  ///< "rank:id"
};

/// `host_reference_us` > 0 (a calibrated profile's host_probe_us): compare with the measured steps
/// the host ran at the calibrated speed in, when there are enough of them (see CompareReport).
CompareReport compare(const plan::Timeline& predicted, const plan::Timeline& measured, double host_reference_us = 0);

/// compare() keeps to the steps at the calibrated host speed when there are at least this many
/// and this share of the steps after warm-up: fewer would be a rare state of the host's.
inline constexpr int kMinStepsAtSpeed = 10;
inline constexpr double kMinShareAtSpeed = 0.25;

/// The median of `v` (the mean of the middle two for an even count; 0 when empty).
double median(std::vector<double> v);

}  // namespace parallax::profiler
