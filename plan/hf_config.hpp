#pragma once
// A transformer read from its Hugging Face `config.json` (`model: {hf_config: PATH}`): the
// architectures Parallax knows, each field it reads, and the fields it knows to leave alone.
// Anything else is an InputError at the field's line and column, so a config that would mean a
// model Parallax cannot build (sliding windows past the sequence, biases on one half of a block)
// is refused rather than planned wrong.
#include <string>

#include "plan/layers.hpp"
#include "plan/yaml_reader.hpp"

namespace parallax::plan {

struct HfModel {
  TransformerShape shape;     ///< seq_len and the attention kernel are the job's, not the config's
  std::string architecture;   ///< "LlamaForCausalLM"
  int64_t max_positions = 0;  ///< the longest sequence the model takes (0: not stated)
};

/// The architectures read: LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM,
/// Qwen3ForCausalLM, GPT2LMHeadModel, NemotronForCausalLM, the mixture-of-experts
/// MixtralForCausalLM, Qwen2MoeForCausalLM and Qwen3MoeForCausalLM, and DeepSeek's
/// DeepseekV2ForCausalLM and DeepseekV3ForCausalLM (latent attention, experts, multi-token prediction).
const std::vector<std::string>& hf_architectures();

/// Reads the config at `path`: checked as JSON (nlohmann::json: the syntax, and the type of each
/// field read), then read as YAML 1.2, of which JSON is a subset, so that each field keeps its
/// place for the messages. `seq_len` is the job's, checked against the model's window.
HfModel read_hf_config(const std::string& path, int64_t seq_len);

}  // namespace parallax::plan
