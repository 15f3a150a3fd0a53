#pragma once
// The model as an ordered list of layers: what partition_len counts, what the executor builds and
// what the simulator costs. Parameters are named, shaped and ordered exactly as LibTorch registers
// them (a module's own parameters first, then its children in registration order), so DDP buckets
// computed here are the buckets the executor fills.
#include <cstdint>
#include <string>
#include <vector>

#include "plan/yaml_reader.hpp"

namespace parallax::plan {

struct ParamSpec {
  std::string name;  ///< full name, e.g. "layers.0.self_attn.in_proj_weight"
  std::vector<int64_t> shape;
  /// Split over the tensor-parallel group (Megatron-LM's column- and row-parallel weights, the
  /// vocabulary); false: every tensor rank holds it whole (norms, positions, row-parallel biases).
  bool tensor_split = false;
  int64_t numel() const;
  /// Elements one tensor rank of a group of `tensor` holds.
  int64_t numel_on(int tensor) const { return tensor_split ? (numel() + tensor - 1) / tensor : numel(); }
};

enum class LayerKind {
  linear,     ///< torch::nn::Linear, optionally followed by ReLU
  embedding,  ///< token embedding + learned positions
  encoder,    ///< torch::nn::TransformerEncoderLayer (post-norm, ReLU, as LibTorch's default)
  head,       ///< LayerNorm + Linear to the vocabulary (language-model head)
  synthetic,  ///< a layer that states its own cost; simulated, not executed
};
const char* name(LayerKind k);
/// Whether tensor parallelism splits layers of this kind (Megatron-LM's transformer kinds:
/// embedding, encoder, head); the others cannot take parallel.tensor > 1.
inline bool tensor_splits(LayerKind k) { return k == LayerKind::embedding || k == LayerKind::encoder || k == LayerKind::head; }

/// The shape knobs of a layer; which ones apply depends on its kind.
struct LayerShape {
  int64_t in = 0, out = 0;  ///< linear
  bool bias = true;         ///< linear
  bool relu = false;        ///< linear: ReLU after it
  int64_t hidden = 0, heads = 0, ffn = 0, seq_len = 0, vocab = 0;  ///< transformer kinds
  /// encoder: the attention kernel. Standard attention materialises the s x s scores (and keeps
  /// them for backward); flash attention (Dao et al. 2022) never does.
  bool flash_attention = false;
};

/// Cost of a synthetic layer, stated by the user.
struct SyntheticCost {
  double fwd_us_per_sample = 0;
  double fwd_us_fixed = 0;
  double bwd_ratio = 2;
};

struct Layer {
  std::string name;  ///< e.g. "embed", "layers.3", "fc0"
  LayerKind kind = LayerKind::linear;
  LayerShape shape;
  SyntheticCost synthetic;  ///< only for kind == synthetic
  std::vector<ParamSpec> params;
  /// Elements held for backward per sample (inputs and intermediates autograd saves).
  double activation_elems_per_sample = 0;
  /// Elements of the layer's input per sample (kept by activation checkpointing at a stage start).
  double input_elems_per_sample = 0;
  /// Elements of the layer's output per sample (what a stage sends to the next one).
  double output_elems_per_sample = 0;
  /// Forward FLOPs per sample (multiply-add = 2); 0 for synthetic layers.
  double flops_per_sample = 0;

  int64_t param_count() const;
  /// Parameters one rank of a tensor-parallel group of `tensor` holds.
  int64_t param_count(int tensor) const;
};

/// Expands `model:` (a preset or an explicit `layers:` list) into the layer list.
/// The returned string is a one-line description ("transformer, 8 blocks, hidden 512").
std::vector<Layer> parse_model(const Field& model, std::string* description);

/// Builders, also used by tests to check the shapes against hand-computed ones.
Layer make_linear(const std::string& name, int64_t in, int64_t out, bool relu, bool bias = true);
Layer make_embedding(const std::string& name, int64_t vocab, int64_t hidden, int64_t seq_len);
Layer make_encoder(const std::string& name, int64_t hidden, int64_t heads, int64_t ffn,
                   int64_t seq_len, bool flash_attention = false);
Layer make_head(const std::string& name, int64_t hidden, int64_t vocab, int64_t seq_len);
Layer make_synthetic(const std::string& name, const SyntheticCost& cost, double params_mb,
                     double activation_mb);

}  // namespace parallax::plan
