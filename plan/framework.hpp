#pragma once
// The trainer a plan is for (`framework:` at the top of a scenario): each trainer's own semantics,
// set at once, where the knobs would otherwise keep PyTorch's. A knob the scenario sets itself
// (in the file or by --set) wins over the framework's.
#include <string>
#include <utility>
#include <vector>
#include "plan/layers.hpp"

namespace parallax::plan {

enum class Framework { pytorch, megatron, torchtitan, deepspeed };
const char* name(Framework f);
const std::vector<Framework>& frameworks();

struct FrameworkSemantics {
  /// (knob key, YAML value) the trainer implies, as `parallel.p2p`, "megatron".
  std::vector<std::pair<std::string, std::string>> knobs;
  /// What a transformer runs by default: the attention kernel, flash (Megatron-core with
  /// Transformer Engine, torchtitan's scaled_dot_product_attention) or standard; and the cross
  /// entropy, Megatron-core's vocabulary-parallel one (Megatron-LM, Megatron-DeepSpeed) or torch's.
  ModelDefaults model;
  std::string why;  ///< one line: where these defaults come from
};
const FrameworkSemantics& semantics(Framework f);

}  // namespace parallax::plan
