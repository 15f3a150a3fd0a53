#pragma once
// `parallax report`: the self-contained HTML report (report/) of a prediction, simulated here from
// a scenario or read from a trace, with a measured run and a tune result beside it when given.
#include <string>
#include <vector>

#include "plan/plan.hpp"
#include "report/report.hpp"
#include "sim/simulator.hpp"

namespace parallax::cli {

struct ReportArgs {
  std::string scenario;           ///< simulated when no --predicted; empty: the built-in default
  std::vector<std::string> sets;  ///< applied to the scenario
  std::string predicted;          ///< a trace of parallax simulate -o
  std::string measured;           ///< a trace of parallax run -o
  std::string tune;               ///< the output of parallax tune --json
  std::string output;             ///< -o report.html
};

/// Checks the input, builds the page and writes it atomically; bad input is an InputError (exit 2)
/// and writes nothing.
int report_command(const ReportArgs& args);

/// The report's input for a simulated plan: its timeline with link counters and its critical path.
report::ReportInput simulated_report_input(const plan::Plan& plan, const sim::SimRun& run);

}  // namespace parallax::cli
