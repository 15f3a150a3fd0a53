#pragma once
// A plan written as the trainer that runs it takes it (`parallax export megatron|torchtitan`):
// Megatron-LM's pretrain_gpt.py arguments with the torchrun line, or torchtitan's TOML job config.
// What the trainer cannot express (Parallax's explicit partition lists, schedules it lacks, a block
// it has no form for) is an InputError at the key to change: exit 2, never a command that runs
// something else than what was planned. The parallel settings each trainer runs are
// plan/trainer_rules.hpp's, which the tuner shares.
#include <string>
#include <utility>
#include <vector>

#include "plan/plan.hpp"

namespace parallax::plan {

/// One argument: its name ("--tensor-model-parallel-size", "parallelism.tensor_parallel_degree")
/// and value ("" for a flag).
using TrainerArgument = std::pair<std::string, std::string>;

struct TrainerExport {
  std::vector<TrainerArgument> arguments;
  std::vector<std::string> notes;  ///< what the trainer sets itself, or what is left to the user
  std::string text;                ///< what `parallax export` prints
  std::string does_not_fit;        ///< said when the plan's fullest rank exceeds the device (also the first note)
};

TrainerExport export_megatron(const Plan& plan);
TrainerExport export_torchtitan(const Plan& plan);

}  // namespace parallax::plan
