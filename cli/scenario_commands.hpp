#pragma once
// The commands that read a scenario or a trace and print: plan, schedule, simulate, export, keys,
// trace and compare. Each is one function the command table (commands.cpp) calls once its
// options are parsed, and the main job (main_job.cpp) calls too.
#include <string>
#include <vector>

#include "plan/plan.hpp"

namespace parallax::cli {

/// What every scenario command takes: a scenario (empty: the built-in default) and --set values.
struct ScenarioArgs {
  std::string scenario;
  std::vector<std::string> sets;
  bool json = false;

  plan::Plan resolve() const;
};

int plan_command(const ScenarioArgs& args);
/// `csv_path`: also write the compute order as PyTorch pipelining CSV.
int schedule_command(const ScenarioArgs& args, const std::string& csv_path);
/// `trace_path`: also write the predicted timeline as a Chrome trace.
int simulate_command(const ScenarioArgs& args, const std::string& trace_path);
/// `trainer`: megatron or torchtitan. Exit 2 where the trainer cannot express the plan.
int export_command(const std::string& trainer, const ScenarioArgs& args);
/// The knob table as text, or as the Markdown table docs/scenarios.md holds.
int keys_command(bool markdown);
int trace_command(const std::vector<std::string>& files, bool json);
int compare_command(const std::string& predicted, const std::string& measured, bool json);

}  // namespace parallax::cli
