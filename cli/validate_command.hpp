#pragma once
// `parallax validate`: how well the calibrated prediction matches this machine. Each
// configuration runs for real (as `parallax run` does, in a child process) and is simulated with
// the calibrated profile; both go through `parallax compare`'s definitions. It prints per
// configuration predicted and measured step time (median after the warm-up step), the error and
// the bubble per rank; overall the mean absolute error, the worst error and, within each sweep,
// Kendall's tau between the predicted and the measured ranking.
#include <string>
#include <vector>

namespace parallax::cli {

struct ValidateArgs {
  std::vector<std::string> scenarios;
  std::vector<std::string> sets;    ///< applied to every configuration
  std::vector<std::string> sweeps;  ///< "KEY=V1,V2,...": each scenario once per value, ranked together
  std::string profile;              ///< empty: parallax-out/calibrated-<host>.yaml
  int steps = 60;
  int repeats = 1;
  bool json = false;
};

/// Kendall's tau-a of two rankings of the same items: (concordant - discordant) pairs over all
/// pairs; ties count as neither. 1 for the same order, -1 for the reverse.
double kendall_tau(const std::vector<double>& a, const std::vector<double>& b);

int validate_command(const ValidateArgs& args, const std::string& self);

/// One configuration run for real (`parallax run SCENARIO --set ...` in a child process, `steps`
/// steps) and simulated, through compare's definitions: the predicted and the median measured
/// step time (after the warm-up step). runtime_error when the run fails.
struct Measurement {
  double predicted_ms = 0;
  double measured_ms = 0;
};
Measurement measure(const std::string& self, const std::string& scenario, const std::vector<std::string>& sets, int steps);

}  // namespace parallax::cli
