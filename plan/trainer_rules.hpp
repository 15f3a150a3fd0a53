#pragma once
// What each trainer runs of a plan's parallel knobs: the settings Megatron-LM or torchtitan cannot
// run (a schedule it lacks, a sharding it does not do, micro-batches its interleaved schedule
// refuses). One place for both `parallax export`, which refuses such a plan at the key to change
// (exit 2), and `parallax tune`, which under `framework: megatron` or `torchtitan` searches only
// what that trainer runs. What the tuner never changes (the model's blocks, the optimizer, the
// data) is export's alone (plan/trainer_export.cpp).
#include <optional>
#include <string>

#include "plan/framework.hpp"
#include "plan/scenario.hpp"

namespace parallax::plan {

struct TrainerRefusal {
  std::string key;  ///< the knob to change ("parallel.schedule")
  std::string why;  ///< the trainer's reason and what to set
};

/// The first parallel setting of `s` that `trainer` cannot run, or nothing. PyTorch and DeepSpeed
/// (no export) refuse nothing here.
std::optional<TrainerRefusal> trainer_refusal(const Scenario& s, Framework trainer);

/// Whether `trainer` has rules here: Megatron-LM and torchtitan (whose plans `parallax export` writes).
bool has_trainer_rules(Framework trainer);

/// trainer_refusal as an InputError at the scenario's key (its file position).
void check_trainer_runs(const Scenario& s, Framework trainer);

/// Whether torchtitan runs the plan's data ranks under FSDP2: a shard over two ranks or more
/// (data_parallel_shard_degree above 1), or context parallelism, which FSDP2 always spans
/// (parallel_dims.py). Otherwise its replicas are DDP (replicate), or there are none.
bool torchtitan_fsdp(const ParallelSpec& par);

/// The model's multi-token prediction modules (Megatron-LM's --mtp-num-layers).
int mtp_layers(const Scenario& s);

/// "Megatron-LM", "torchtitan": the trainer as its users name it.
const char* trainer_name(Framework trainer);

}  // namespace parallax::plan
