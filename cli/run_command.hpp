#pragma once
// `parallax run`: the plan for real. Without RANK/WORLD_SIZE in the environment it checks the
// scenario (exit 2 before any rank starts) and launches --nproc local ranks of itself; as a rank
// (started by that launcher, torchrun or srun) it trains, and rank 0 merges every rank's
// measured spans into one trace and prints the report.
#include <string>
#include <vector>

#include "plan/scenario.hpp"

namespace parallax::cli {

/// InputError (exit 2) when `parallax run` cannot train `scenario` on this machine: what the
/// executor does not run (plan::check_executable), a device this build or machine lacks, a data
/// set not installed. What run and validate check before any rank starts.
/// `instead`: what to do on a machine without the profile's GPU, in the command's words (exec::check_device).
void check_runs_here(const plan::Scenario& scenario, const std::string& instead = "");

struct RunArgs {
  std::string scenario;
  std::vector<std::string> sets;
  bool json = false;
  int nproc = 0;  ///< 0: the plan's world size
  std::string trace_path;
  std::string checkpoint_dir;
  int checkpoint_every = 0;
  bool resume = false;
  int timeout_s = 60;

  /// The `parallax run` command line that gives these arguments: what the launcher starts each
  /// rank with.
  std::vector<std::string> command_line() const;
};

int run_command(const RunArgs& args);

}  // namespace parallax::cli
