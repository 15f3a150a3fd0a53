#pragma once
// `parallax validate`: how well the calibrated prediction matches this machine. Each
// configuration runs for real (as `parallax run` does, in a child process) and is simulated with
// the calibrated profile; both go through `parallax compare`'s definitions. It prints per
// configuration predicted and measured step time (the step statistic, timeline/step_statistic.hpp,
// with the median beside it), the error and the bubble per rank; overall the mean absolute and
// signed errors, the worst and, within each sweep, Kendall's tau between the predicted and the
// measured ranking. The work is fit/validation's; this prints it.
#include <string>
#include <vector>

namespace parallax::cli {

struct ValidateArgs {
  std::vector<std::string> scenarios;
  std::vector<std::string> sets;    ///< applied to every configuration
  std::vector<std::string> sweeps;  ///< "KEY=V1,V2,...": each scenario once per value, ranked together
  std::string profile;              ///< empty: parallax-out/calibrated-<host>.yaml
  int steps = 0;  ///< per run, the warm-up included; 0: as each configuration's predicted step asks (fit::steps_for)
  int repeats = 1;
  bool json = false;
  std::string keep_traces;  ///< a folder: each run's measured trace, as fit::trace_name names it
};

int validate_command(const ValidateArgs& args, const std::string& self);

}  // namespace parallax::cli
