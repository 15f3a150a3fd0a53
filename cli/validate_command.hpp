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

int validate_command(const ValidateArgs& args, const std::string& self);

}  // namespace parallax::cli
