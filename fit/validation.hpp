#pragma once
// `parallax validate`'s work, without its printing: the configurations of a set of scenarios and
// sweeps, their runs in rounds (each round goes over every configuration, so that neighbouring
// runs belong to different configurations and the machine's drift spreads over all of them), and
// the summary: errors against the step statistic and against the median, each with its spread
// over the runs, and per sweep Kendall's tau over the pairs the measurement resolves.
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "fit/measure.hpp"

namespace parallax::fit {

/// Each scenario once, or once per value of each sweep ("KEY=V1,V2,..."), which then ranks its
/// values together. InputError on a malformed sweep.
std::vector<Configuration> configurations(const std::vector<std::string>& scenarios,
                                          const std::vector<std::string>& sweeps);

/// Called after each run: its number (from 1), the count, the configuration and its outcome so far.
using RunProgress = std::function<void(size_t run, size_t runs, const Configuration&, const Outcome&)>;

/// `repeats` rounds over `configs` (each prepared as `prepared`), each run by run_once() in a
/// scratch folder of its own; the outcomes summarised. With `keep_traces` (a folder), each run's
/// measured trace is kept there as trace_name(). runtime_error when a run fails.
std::vector<Outcome> run_rounds(const std::vector<Configuration>& configs, const std::vector<Prepared>& prepared,
                                int repeats, const std::string& self, const RunProgress& progress,
                                const std::string& keep_traces = "");

/// The file a kept trace of run `round` (from 1) of configuration `index` is: "3.run1.json".
std::string trace_name(size_t index, int round);

/// One sweep's ranking: predicted against measured (the step statistic), and the tau.
struct SweepSummary {
  std::vector<double> predicted, measured, low, high;
  double tau = 0;        ///< over all pairs
  ResolvedTau resolved;  ///< over the pairs whose measured ranges over the runs do not overlap
};

struct ValidationSummary {
  double mean_abs_error = 0, mean_signed_error = 0, worst_error = 0;  ///< against the step statistic
  size_t worst = 0;                                                    ///< its configuration
  double median_mean_abs_error = 0;  ///< against the median step, for comparison
  double spread_median = 0;          ///< the median over configurations of the statistic's spread
  std::map<std::string, SweepSummary> sweeps;  ///< by Configuration::sweep
};

ValidationSummary summarise(const std::vector<Configuration>& configs, const std::vector<Outcome>& outcomes);

}  // namespace parallax::fit
