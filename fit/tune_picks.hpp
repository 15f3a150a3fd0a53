#pragma once
// The tuner's picks run for real: `parallax tune --validate K` and the GUI's "Validate top K for
// real" both come here. Which of a search's ranked configurations run (those the executor can
// run), each one's run against its prediction (fit::measure, in a child process), and the pick:
// the fastest measured.
#include <atomic>
#include <functional>
#include <string>
#include <vector>

#include "fit/measure.hpp"
#include "plan/knobs.hpp"
#include "plan/scenario.hpp"
#include "tune/search.hpp"

namespace parallax::fit {

/// The configurations --validate K runs: the best prediction, then the best of each other data x
/// pipeline x tensor layout (the model errs most between layouts: a pipeline's messages against
/// DDP's all-reduces), then the next best predictions; at most k, each one the executor can run
/// on `base` (plan::executable).
std::vector<const tune::Evaluation*> validation_candidates(const tune::SearchResult& r, const plan::Scenario& base,
                                                           size_t k);

/// Leaves out of `space` the values the executor cannot run (tensor > 1, selective recompute,
/// ...; plan::check_executable is the rule), so that a search meant to be validated ranks only
/// runnable configurations; one line per key left short ("parallel.tensor 2, 4"). Nothing when
/// the scenario as given cannot run (measuring it says why later).
std::vector<std::string> keep_executable(tune::Space* space, const plan::Scenario& base);

/// One candidate run for real.
struct ValidatedPick {
  const tune::Evaluation* evaluation = nullptr;
  plan::Time predicted;             ///< the search's prediction
  timeline::StepStatistic measured;  ///< measured.undisturbed is the measured step
};

struct PickRuns {
  std::string self;                    ///< the parallax binary the runs start
  std::string scenario;                ///< the scenario file; "" for the built-in default
  std::vector<std::string> sets;       ///< --set values giving the search's base from the file
  int steps = 200;                     ///< of each run
  /// Called before each run: its index from 0, the count, and the --set values it adds.
  std::function<void(size_t, size_t, const plan::Overrides&)> starting;
  std::function<void(const ValidatedPick&)> measured;  ///< called after each run
  const std::atomic<bool>* cancel = nullptr;  ///< set to stop (the run in progress is terminated)
};

/// Runs each candidate (its `changes` against the search's scenario) in turn. The picks measured
/// before a cancel are returned; runtime_error naming the configuration when a run fails.
std::vector<ValidatedPick> run_picks(const std::vector<const tune::Evaluation*>& candidates, const PickRuns& runs);

/// The tuner's pick among measured step times: the index of the least one, those never measured
/// (0) left out; -1 when there is none. `tune --validate` and the GUI both pick by it.
int fastest_index(const std::vector<plan::Time>& measured_steps);
/// The fastest measured of `picks` (fastest_index); nullptr when there is none.
const ValidatedPick* fastest(const std::vector<ValidatedPick>& picks);

}  // namespace parallax::fit
