#pragma once
// The step statistic: the one figure every measured step time in Parallax is. compare, validate,
// the report, the GUI, tune --validate and calibrate's fits all take a run's measured step time
// through step_statistic() and nothing else.
//
// The figure is the undisturbed step: a low quantile of a run's step times after the warm-up
// step. On the shared CPU machines Parallax is measured on, step-time noise is one-sided and
// comes per run: slow bursts (another tenant, a descheduled vCPU) that differ from run to run,
// over a steady fast level. A median moves with the bursts (medians of one configuration spread
// 14-64% between runs there); the fast level does not. The median and the share of disturbed
// steps are kept beside it, for the reader to see how much of the run the bursts took.
#include <string>
#include <vector>

#include "plan/time.hpp"
#include "timeline/metrics.hpp"

namespace parallax::timeline {

/// The quantile the undisturbed step is: the 20th percentile. Why p20 and not p10: the
/// quantile must sit below the share of undisturbed steps, and on these machines bursts took up
/// to about half of a run, so both do; p20 then wins on its own noise. Over a run's 40-60 steps
/// p10 rests on the 4th-6th fastest step, p20 on the 8th-12th, so one lucky step moves it less;
/// and on symmetric noise (a quiet GPU) p20 sits 0.84 standard deviations below the median,
/// p10 1.28.
inline constexpr double kUndisturbedQuantile = 0.2;
/// The statistic's name, as outputs print it beside an error.
inline constexpr const char* kStatisticName = "undisturbed step (p20)";
/// A step more than this much slower than the undisturbed step counts as disturbed. 10%: above
/// the fast level's own jitter on these machines (+-3%), below the slow state (+30% and more).
inline constexpr double kDisturbedMargin = 0.10;
/// Below this many steps after the warm-up a quantile rests on one or two steps: validate and
/// tune --validate measure at least this many, and outputs warn when a run had fewer.
inline constexpr int kMinStatisticSteps = 20;
/// compare's and the report's caveat for a run of `steps` after the warm-up: "few steps: this run
/// has N after the warm-up; the statistic wants 20 or more", or "" from kMinStatisticSteps on (and
/// for none: a run with no step after the warm-up is said otherwise).
std::string few_steps_warning(int steps);

/// The q-quantile of `v` (0 <= q <= 1), interpolating linearly between order statistics
/// (numpy's default, "type 7"); 0 when empty.
double quantile(std::vector<double> v, double q);

/// The undisturbed level of a set of times: quantile(v, kUndisturbedQuantile).
double undisturbed(std::vector<double> v);

/// The median of `v` (the mean of the middle two for an even count; 0 when empty).
double median(std::vector<double> v);

/// The same of durations, to the nearest nanosecond.
plan::Time quantile(const std::vector<plan::Time>& v, double q);
plan::Time undisturbed(const std::vector<plan::Time>& v);
plan::Time median(const std::vector<plan::Time>& v);

struct StepStatistic {
  plan::Time undisturbed;       ///< the statistic: kUndisturbedQuantile of the steps
  plan::Time median, min, max;
  double disturbed_share = 0;   ///< of the steps, those above undisturbed * (1 + kDisturbedMargin)
  int steps = 0;                ///< how many steps it is over
  bool disturbed(plan::Time step) const { return step > undisturbed.scaled(1 + kDisturbedMargin); }
};

/// The statistic over a run's step times after the warm-up step (the caller drops that one).
StepStatistic step_statistic(const std::vector<plan::Time>& steps);

/// A measured run's steps after its warm-up, the job's first step, numbered 0 (the allocator,
/// caches, lazy initialisation), with each one's numbers; the only step when there is one. A
/// profiler's window that starts later in a job (ProfilerStep#551 first) has no warm-up to drop.
/// The one place the warm-up rule is written.
struct MeasuredSteps {
  std::vector<int> steps;
  std::vector<StepTimes> times;  ///< each step's, in the same order
  std::vector<plan::Time> step_times() const;
};
MeasuredSteps steps_after_warmup(const Timeline& measured);
/// A measured run's step statistic: over its steps after the warm-up.
StepStatistic measured_step(const Timeline& measured);

/// A prediction's error against a measurement: predicted / measured - 1 (+0.05 is 5% too slow);
/// 0 when nothing was measured.
double relative_error(plan::Time predicted, plan::Time measured);

}  // namespace parallax::timeline
