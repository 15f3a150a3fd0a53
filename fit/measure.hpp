#pragma once
// Measuring a configuration for real against its prediction: `parallax run` in a child process
// (so that a crash or a hang of the run is the child's), its measured trace read back and
// compared with the simulated step by compare's definitions and the one step statistic
// (timeline/step_statistic.hpp). validate's loop (fit/validation.hpp) and the tuner's --validate
// both measure through here.
#include <atomic>
#include <filesystem>
#include <stdexcept>
#include <string>
#include <vector>

#include "timeline/compare.hpp"
#include "timeline/step_statistic.hpp"
#include "timeline/timeline.hpp"

namespace parallax::fit {

/// One configuration validate runs: a scenario with its --set values.
struct Configuration {
  std::string scenario;
  std::vector<std::string> overrides;  ///< --set values beyond the common ones
  std::string sweep;                   ///< "" or "SCENARIO KEY": the group it is ranked in
  std::string label;
};

/// A configuration's runs against its prediction. The measured step is the step statistic of
/// each run (its undisturbed step), and over the runs their median; the median step is kept
/// beside it with its own error, for comparison.
struct Outcome {
  plan::Time predicted;
  std::vector<timeline::StepStatistic> runs;  ///< one per run, over its steps after warm-up
  plan::Time measured;       ///< the median of the runs' undisturbed steps
  plan::Time low, high;      ///< their range over the runs
  double spread = 0;         ///< (high - low) / measured
  double error = 0;          ///< (predicted - measured) / measured
  plan::Time median;         ///< the same with each run's median step
  double median_spread = 0, median_error = 0;
  double disturbed_share = 0;  ///< of all the runs' steps, the disturbed ones
  std::vector<plan::Time> undisturbed_runs() const;  ///< each run's undisturbed step
  std::vector<timeline::RankComparison> ranks;  ///< of the first run
};

// A configuration's plan with the run's step count, and its predicted timeline.
struct Prepared {
  int steps = 0;  ///< of the run, the warm-up step included
  std::vector<std::string> sets;
  timeline::Timeline predicted;
  std::vector<std::string> unmeasured;  ///< layer signatures the profile has no measurement of
  bool calibrated = false;              ///< the profile holds a calibration (else every layer is unmeasured)
  std::string precision;
};

/// A configuration's plan with the run's step count (`steps` <= 0: steps_for its predicted step),
/// and its predicted timeline; InputError when the scenario is bad, before anything runs.
Prepared prepare(const Configuration& c, int steps, const std::vector<std::string>& common);

/// One run of a configuration for real (`self run ...` in `work`), compared with its prediction
/// into `o`; runtime_error naming the run, with its stderr's tail, when it fails.
void run_once(const Configuration& c, const Prepared& p, const std::string& self, const std::filesystem::path& work,
              Outcome* o, const std::atomic<bool>* cancel = nullptr);

/// The measured step, spread and errors of `o`'s runs.
void summarise(Outcome* o);

/// How many steps a run needs for the step statistic: short steps run longer rather than the
/// statistic resting on few. At least kMinStatisticSteps after the warm-up, and enough for
/// kMinMeasuredSeconds of predicted stepping, at most kMaxAutoSteps; the warm-up step on top.
/// calibrate's in-run probes run as many.
inline constexpr double kMinMeasuredSeconds = 2.0;
inline constexpr int kMaxAutoSteps = 400;
int steps_for(plan::Time predicted_step);

/// One configuration run for real (`parallax run SCENARIO --set ...` in a child process, `steps`
/// steps) and simulated, through compare's definitions: the predicted and the measured step
/// (the step statistic after the warm-up step). runtime_error when the run fails; Cancelled
/// (the run terminated) when `cancel` is set while it runs.
struct Measurement {
  plan::Time predicted;
  timeline::StepStatistic step;  ///< step.undisturbed is the measured step
};
Measurement measure(const std::string& self, const std::string& scenario, const std::vector<std::string>& sets, int steps,
                    const std::atomic<bool>* cancel = nullptr);

/// Kendall's tau-a of two rankings of the same items: (concordant - discordant) pairs over all
/// pairs; ties count as neither. 1 for the same order, -1 for the reverse.
double kendall_tau(const std::vector<double>& a, const std::vector<double>& b);

/// Kendall's tau over the pairs the measurement resolves: those whose measured ranges
/// [low, high] (over repeated runs) do not overlap, so that which one is faster is known. Over
/// those pairs, (concordant - discordant) / resolved, a predicted tie counting as neither; 0 when
/// no pair is resolved. With one run per item every pair of distinct measurements is resolved.
struct ResolvedTau {
  double tau = 0;
  size_t resolved = 0, pairs = 0;
};
ResolvedTau kendall_tau_resolved(const std::vector<double>& predicted, const std::vector<double>& measured_low,
                                 const std::vector<double>& measured_high);

/// Runs argv as a child with stdout and stderr into files; its exit code (127: could not start).
/// When `cancel` is set while it runs, the child is terminated and Cancelled thrown.
int run_child(const std::vector<std::string>& argv, const std::string& out, const std::string& err,
              const std::atomic<bool>* cancel = nullptr);

/// A run stopped because its caller cancelled it.
struct Cancelled : std::runtime_error {
  Cancelled() : std::runtime_error("cancelled") {}
};

/// The last `lines` lines of a file, indented, for error messages.
std::string tail_of(const std::string& path, size_t lines);

/// Removes a folder of the caller's own making and everything in it, quietly (what is left
/// stays). std::filesystem::remove_all does the same, but pip's libtorch exports its own copy,
/// and a binary built on a GPU machine (GCC 13.3, binutils 2.42) bound its calls to that copy,
/// which crashed (a jump to address 0); the link-order fix of cmake/torch.cmake did not hold
/// there.
void remove_tree(const std::string& path);

}  // namespace parallax::fit
