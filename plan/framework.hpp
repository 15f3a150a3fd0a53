#pragma once
// The trainer a plan is for (`framework:` at the top of a scenario): each trainer's own semantics,
// set at once, where the knobs would otherwise keep PyTorch's. A knob the scenario sets itself
// (in the file or by --set) wins over the framework's.
#include <cstdint>
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

/// The vocabulary the trainer builds its embedding and output layer for: Megatron-LM (and
/// Megatron-DeepSpeed, the same code) pads it with dummy tokens to a multiple of
/// --make-vocab-size-divisible-by (128) x the tensor-parallel size (vocab_size_with_padding, at
/// megatron/core/tokenizers/utils/build_tokenizer.py); torchtitan and PyTorch keep it.
int64_t padded_vocabulary(Framework f, int64_t vocab, int tensor);
/// Megatron-LM's --make-vocab-size-divisible-by default.
inline constexpr int64_t kMegatronVocabMultiple = 128;

}  // namespace parallax::plan
