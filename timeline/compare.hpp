#pragma once
// Predicted against measured, action by action. The two timelines are joined on (rank, action
// id) within each optimizer step; step-level numbers use the definitions of timeline/metrics.
// The measured step time is the step statistic (timeline/step_statistic.hpp) over the steps after
// the first (a warm-up) when there are several. Action and rank figures are over the undisturbed
// ones among those steps (no slower than the statistic allows): an action's measured start and
// duration are its means over them (a step's time is a sum of durations along its critical path,
// so the rare long ones count), a rank's bubble their median.
#include <string>
#include <vector>

#include "timeline/step_statistic.hpp"
#include "timeline/timeline.hpp"

namespace parallax::timeline {

struct RankComparison {
  int rank = 0;
  plan::Time predicted_bubble, measured_bubble;
  double predicted_bubble_fraction = 0, measured_bubble_fraction = 0;
  /// The part of each bubble fraction that is imbalance (timeline/metrics.hpp).
  double predicted_imbalance_fraction = 0, measured_imbalance_fraction = 0;
  plan::Time predicted_exposed_comm, measured_exposed_comm;
  /// MiB: the plan's estimate (from the trace's plan) and the run's measured training memory
  /// (timeline::RankMemory); negative when a trace does not carry it.
  double predicted_memory_mb = -1, measured_memory_mb = -1;
};

struct KindComparison {
  std::string kind;  ///< F, B, SEND, RECV, ALLREDUCE, OPTIM
  int actions = 0;
  double mean_abs_error = 0;  ///< mean of |predicted - measured| / measured duration
  double worst_error = 0;     ///< signed, the largest in magnitude
  std::string worst_action;   ///< "rank:id"
  plan::Time predicted, measured;  ///< summed over the kind's actions (one step)
};

struct ActionComparison {
  int rank = 0;
  std::string action;
  plan::Time predicted_start, predicted_duration;  ///< start relative to the step's start
  plan::Time measured_start, measured_duration;    ///< means over the measured steps
  plan::Time difference;  ///< max(|start difference|, |end difference|)
};

struct CompareReport {
  plan::Time predicted_step;
  StepStatistic measured_step;      ///< over the steps after warm-up
  double step_error = 0;            ///< (predicted - measured undisturbed) / measured undisturbed
  double median_error = 0;          ///< the same against the measured median, for comparison
  std::vector<int> measured_steps;  ///< the undisturbed steps after warm-up: what action figures are over
  std::vector<RankComparison> ranks;
  std::vector<KindComparison> kinds;
  std::vector<ActionComparison> worst;  ///< the ten largest timing differences
  std::vector<std::string> only_predicted, only_measured;  ///< "rank:id"
  /// MoE all-to-all actions of the measured trace (ALL_TO_ALL, per rank and step's place): the
  /// prediction folds them into F and B, so they are neither joined nor "only measured".
  int measured_exchanges = 0;
  /// Sharded layers' parameter gathers of the measured trace (ALL_GATHER, per rank and step's
  /// place): folded into F, B and OPTIM by the prediction alike.
  int measured_gathers = 0;
};

CompareReport compare(const timeline::Timeline& predicted, const timeline::Timeline& measured);

/// The steps after the warm-up that the step statistic counts as undisturbed: what compare's
/// action and rank figures and calibrate's in-run fits are over.
std::vector<int> undisturbed_steps(const timeline::Timeline& measured);
/// `measured` with only the events of its undisturbed steps, and of its warm-up step too when
/// `keep_warmup` (for a reader that drops the first step itself). A run of one step is kept whole.
timeline::Timeline undisturbed_only(timeline::Timeline measured, bool keep_warmup = false);

/// The step a timeline view shows of a measured run: of the steps after the warm-up, the one
/// whose time is closest to the run's step statistic (the step the error is against, not the
/// warm-up or a burst); the only step when there is one, -1 when there is none.
int representative_step(const timeline::Timeline& measured);

}  // namespace parallax::timeline
