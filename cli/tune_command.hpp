#pragma once
// `parallax tune`: searches the plan's knobs on the simulator (tune/), prints the ranked top K,
// the Pareto frontier of step time against peak memory, the speedup over the scenario as given
// and over PyTorch's defaults and why the pick is faster; optionally runs the top K for real and
// picks the best measured; writes the pick as a scenario file.
#include <string>
#include <vector>

namespace parallax::cli {

struct TuneArgs {
  std::string scenario;               ///< empty: the built-in default
  std::vector<std::string> sets;      ///< applied before tuning
  int world = 0;                      ///< 0: the scenario's data x pipeline
  std::vector<std::string> searches;  ///< "KEY=V1,V2,..."
  std::vector<std::string> fixes;     ///< keys kept as in the scenario
  bool any_trainer = false;           ///< also plans the scenario's framework (megatron, torchtitan) cannot run
  std::string objective = "step";     ///< step | memory
  size_t max_configs = 0;
  double time_limit_s = 0;
  int top = 10;
  int validate = 0;                   ///< run the top K for real
  int validate_steps = 200;  // one run per configuration: long enough to average over the machine's drift
  int threads = 0;
  bool json = false;
  std::string output;                 ///< -o BEST.yaml
};

int tune_command(const TuneArgs& args, const std::string& self);

}  // namespace parallax::cli
