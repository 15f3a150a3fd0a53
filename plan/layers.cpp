#include "plan/layers.hpp"

#include <cmath>
#include <sstream>

namespace parallax::plan {
namespace {

constexpr double kMiB = 1024.0 * 1024.0;

// Megatron-LM's split: a column-parallel linear splits its weight and bias by output rows; a
// row-parallel one its weight by input columns, its bias added once after the all-reduce.
enum class Split { none, column, row };

void add_linear_params(Layer& l, const std::string& prefix, int64_t in, int64_t out, bool bias, Split split = Split::none) {
  l.params.push_back({prefix + "weight", {out, in}, split != Split::none});
  if (bias) l.params.push_back({prefix + "bias", {out}, split == Split::column});
}

void add_layer_norm_params(Layer& l, const std::string& prefix, int64_t hidden) {
  l.params.push_back({prefix + "weight", {hidden}});
  l.params.push_back({prefix + "bias", {hidden}});
}

// Bounds on what a model may ask for. The largest published models have a few hundred layers and
// widths, vocabularies and sequences below a million; past these a typo of a few digits would
// build millions of layers (fuzzing found 69,935 transformer blocks taking 4 s to plan, and a
// billion would exhaust memory) or overflow the byte counts (width x width x layers in int64).
constexpr int64_t kMaxLayers = 10000;
constexpr int64_t kMaxWidth = int64_t{1} << 20;

// A width, vocabulary, sequence length or head count.
int64_t positive(const Field& map, const std::string& key, int64_t fallback) {
  return int_or(map, key, fallback, 1, kMaxWidth);
}

int64_t layer_count(const Field& map, int64_t fallback) { return int_or(map, "layers", fallback, 1, kMaxLayers); }

const std::vector<std::string> kKinds = {"linear", "embedding", "encoder", "head", "synthetic"};

SyntheticCost parse_synthetic_cost(const Field& map) {
  SyntheticCost c;
  c.fwd_us_per_sample = to_number(require(map, "fwd_us_per_sample"), 0);
  c.fwd_us_fixed = number_or(map, "fwd_us_fixed", 0, 0);
  c.bwd_ratio = number_or(map, "bwd_ratio", 2, 0);
  return c;
}

// `attention: standard | flash` (standard when absent).
bool flash(const Field& map) {
  return map["attention"].present() && to_choice(map["attention"], {"standard", "flash"}) == "flash";
}

Layer parse_layer(const Field& item, size_t index) {
  if (!item.is_map()) item.fail("each entry of 'model.layers' must be a map with a 'kind' (" + join(kKinds, " | ") + ")");
  const std::string kind = to_choice(require(item, "kind"), kKinds);
  const std::string name = string_or(item, "name", "layers." + std::to_string(index));
  if (kind == "linear") {
    expect_keys(item, {"kind", "name", "in", "out", "bias", "activation"});
    const bool relu = item["activation"].present() && to_choice(item["activation"], {"none", "relu"}) == "relu";
    return make_linear(name, to_int(require(item, "in"), 1, kMaxWidth), to_int(require(item, "out"), 1, kMaxWidth), relu,
                       bool_or(item, "bias", true));
  }
  if (kind == "embedding") {
    expect_keys(item, {"kind", "name", "vocab", "hidden", "seq_len"});
    return make_embedding(name, to_int(require(item, "vocab"), 1, kMaxWidth), to_int(require(item, "hidden"), 1, kMaxWidth),
                          to_int(require(item, "seq_len"), 1, kMaxWidth));
  }
  if (kind == "encoder") {
    expect_keys(item, {"kind", "name", "hidden", "heads", "ffn", "seq_len", "attention"});
    const int64_t hidden = to_int(require(item, "hidden"), 1, kMaxWidth);
    const int64_t heads = to_int(require(item, "heads"), 1, kMaxWidth);
    if (hidden % heads != 0) item["heads"].fail("'hidden' must be divisible by 'heads'");
    return make_encoder(name, hidden, heads, positive(item, "ffn", 4 * hidden), to_int(require(item, "seq_len"), 1, kMaxWidth),
                        flash(item));
  }
  if (kind == "head") {
    expect_keys(item, {"kind", "name", "hidden", "vocab", "seq_len"});
    return make_head(name, to_int(require(item, "hidden"), 1, kMaxWidth), to_int(require(item, "vocab"), 1, kMaxWidth),
                     to_int(require(item, "seq_len"), 1, kMaxWidth));
  }
  expect_keys(item, {"kind", "name", "fwd_us_per_sample", "fwd_us_fixed", "bwd_ratio", "params_mb",
                     "activation_mb"});
  return make_synthetic(name, parse_synthetic_cost(item), number_or(item, "params_mb", 0, 0),
                        number_or(item, "activation_mb", 0, 0));
}

std::vector<Layer> transformer_preset(const Field& m, std::string* description) {
  expect_keys(m, {"preset", "layers", "hidden", "heads", "ffn", "seq_len", "vocab", "attention"});
  const int64_t blocks = layer_count(m, 8);
  const int64_t hidden = positive(m, "hidden", 512);
  const int64_t heads = positive(m, "heads", 8);
  if (hidden % heads != 0) m["hidden"].fail("'model.hidden' (" + std::to_string(hidden) + ") must be divisible by 'model.heads' (" + std::to_string(heads) + ")");
  const int64_t ffn = positive(m, "ffn", 4 * hidden);
  const int64_t seq = positive(m, "seq_len", 128);
  const int64_t vocab = positive(m, "vocab", 10000);
  std::vector<Layer> layers;
  layers.push_back(make_embedding("embed", vocab, hidden, seq));
  for (int64_t i = 0; i < blocks; ++i)
    layers.push_back(make_encoder("layers." + std::to_string(i), hidden, heads, ffn, seq, flash(m)));
  layers.push_back(make_head("head", hidden, vocab, seq));
  std::ostringstream d;
  d << "transformer: embed + " << blocks << " encoder blocks + head (hidden " << hidden << ", heads "
    << heads << ", ffn " << ffn << ", seq_len " << seq << ", vocab " << vocab << (flash(m) ? ", flash attention" : "") << ")";
  *description = d.str();
  return layers;
}

std::vector<Layer> mlp_preset(const Field& m, std::string* description) {
  expect_keys(m, {"preset", "layers", "hidden", "input", "classes"});
  const int64_t hidden_layers = layer_count(m, 2);
  const int64_t hidden = positive(m, "hidden", 256);
  const int64_t input = positive(m, "input", 784);
  const int64_t classes = positive(m, "classes", 10);
  std::vector<Layer> layers;
  int64_t in = input;
  for (int64_t i = 0; i < hidden_layers; ++i) {
    layers.push_back(make_linear("fc" + std::to_string(i), in, hidden, /*relu=*/true));
    in = hidden;
  }
  layers.push_back(make_linear("out", in, classes, /*relu=*/false));
  std::ostringstream d;
  d << "mlp: " << input << " -> " << hidden_layers << " x " << hidden << " (ReLU) -> " << classes;
  *description = d.str();
  return layers;
}

std::vector<Layer> synthetic_preset(const Field& m, std::string* description) {
  expect_keys(m, {"preset", "layers", "fwd_us_per_sample", "fwd_us_fixed", "bwd_ratio", "params_mb",
                  "activation_mb"});
  const int64_t count = to_int(require(m, "layers"), 1, kMaxLayers);
  const SyntheticCost cost = parse_synthetic_cost(m);
  const double params_mb = number_or(m, "params_mb", 0, 0);
  const double activation_mb = number_or(m, "activation_mb", 0, 0);
  std::vector<Layer> layers;
  for (int64_t i = 0; i < count; ++i)
    layers.push_back(make_synthetic("layers." + std::to_string(i), cost, params_mb, activation_mb));
  std::ostringstream d;
  d << "synthetic: " << count << " uniform layers (" << cost.fwd_us_per_sample << " us/sample + "
    << cost.fwd_us_fixed << " us forward, backward x" << cost.bwd_ratio << ", " << params_mb
    << " MB params)";
  *description = d.str();
  return layers;
}

}  // namespace

const char* name(LayerKind k) {
  switch (k) {
    case LayerKind::linear: return "linear";
    case LayerKind::embedding: return "embedding";
    case LayerKind::encoder: return "encoder";
    case LayerKind::head: return "head";
    case LayerKind::synthetic: return "synthetic";
  }
  return "?";
}

int64_t ParamSpec::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

int64_t Layer::param_count() const {
  int64_t n = 0;
  for (const auto& p : params) n += p.numel();
  return n;
}

int64_t Layer::param_count(int tensor) const {
  int64_t n = 0;
  for (const auto& p : params) n += p.numel_on(tensor);
  return n;
}

Layer make_linear(const std::string& name, int64_t in, int64_t out, bool relu, bool bias) {
  Layer l;
  l.name = name;
  l.kind = LayerKind::linear;
  l.shape.in = in;
  l.shape.out = out;
  l.shape.bias = bias;
  l.shape.relu = relu;
  add_linear_params(l, name + ".", in, out, bias);
  // Autograd keeps the input for the weight gradient, and ReLU's output for its mask.
  l.activation_elems_per_sample = static_cast<double>(in + (relu ? out : 0));
  l.input_elems_per_sample = static_cast<double>(in);
  l.output_elems_per_sample = static_cast<double>(out);
  l.flops_per_sample = 2.0 * in * out;
  return l;
}

Layer make_embedding(const std::string& name, int64_t vocab, int64_t hidden, int64_t seq_len) {
  Layer l;
  l.name = name;
  l.kind = LayerKind::embedding;
  l.shape.vocab = vocab;
  l.shape.hidden = hidden;
  l.shape.seq_len = seq_len;
  l.params.push_back({name + ".tok.weight", {vocab, hidden}, /*tensor_split=*/true});  // vocab-parallel
  l.params.push_back({name + ".pos.weight", {seq_len, hidden}});
  // Backward needs only the token ids (int64: two fp32-sized elements each).
  l.activation_elems_per_sample = 2.0 * seq_len;
  l.input_elems_per_sample = 2.0 * seq_len;
  l.output_elems_per_sample = static_cast<double>(seq_len * hidden);
  l.flops_per_sample = static_cast<double>(seq_len * hidden);  // adding the positions
  return l;
}

Layer make_encoder(const std::string& name, int64_t hidden, int64_t heads, int64_t ffn,
                   int64_t seq_len, bool flash_attention) {
  Layer l;
  l.name = name;
  l.kind = LayerKind::encoder;
  l.shape.hidden = hidden;
  l.shape.heads = heads;
  l.shape.ffn = ffn;
  l.shape.seq_len = seq_len;
  l.shape.flash_attention = flash_attention;
  // LibTorch's TransformerEncoderLayerImpl::reset() registers self_attn, linear1, dropout, linear2,
  // norm1, norm2; MultiheadAttention registers in_proj_weight, in_proj_bias, then out_proj.
  const std::string p = name + ".";
  l.params.push_back({p + "self_attn.in_proj_weight", {3 * hidden, hidden}, true});  // column-parallel
  l.params.push_back({p + "self_attn.in_proj_bias", {3 * hidden}, true});
  add_linear_params(l, p + "self_attn.out_proj.", hidden, hidden, true, Split::row);
  add_linear_params(l, p + "linear1.", hidden, ffn, true, Split::column);
  add_linear_params(l, p + "linear2.", ffn, hidden, true, Split::row);
  add_layer_norm_params(l, p + "norm1.", hidden);
  add_layer_norm_params(l, p + "norm2.", hidden);
  const double s = static_cast<double>(seq_len), h = static_cast<double>(hidden);
  // Korthikanti et al. 2022, "Reducing Activation Recomputation in Large Transformer Models", eq. 1:
  // s*b*h*(34 + 5*a*s/h) bytes per layer with 2-byte activations, i.e. s*h*(17 + 2.5*a*s/h)
  // elements per sample: attention 5.5*s*h + 2.5*a*s^2, layer norms 2*s*h, and the MLP 9.5*s*h,
  // which the paper gives for ffn = 4h and which we scale by ffn/4h. This figure is the traffic
  // the plain roofline reads; memory is plan/memory.cpp's, which splits the same terms by tensor
  // and sequence parallelism and counts dropout masks as bytes.
  const double ffn_scale = static_cast<double>(ffn) / (4.0 * h);
  l.activation_elems_per_sample = s * h * (7.5 + 9.5 * ffn_scale) + 2.5 * heads * s * s;
  l.input_elems_per_sample = s * h;
  l.output_elems_per_sample = s * h;
  // Per token: QKV 6h^2, out projection 2h^2, FFN 4*h*ffn; per sample the scores and the
  // attention-weighted values add 4*s^2*h.
  l.flops_per_sample = s * (8.0 * h * h + 4.0 * h * ffn) + 4.0 * s * s * h;
  return l;
}

Layer make_head(const std::string& name, int64_t hidden, int64_t vocab, int64_t seq_len) {
  Layer l;
  l.name = name;
  l.kind = LayerKind::head;
  l.shape.hidden = hidden;
  l.shape.vocab = vocab;
  l.shape.seq_len = seq_len;
  add_layer_norm_params(l, name + ".norm.", hidden);
  add_linear_params(l, name + ".output.", hidden, vocab, true, Split::column);  // vocab-parallel
  const double s = static_cast<double>(seq_len), h = static_cast<double>(hidden);
  l.activation_elems_per_sample = s * (2.0 * h + static_cast<double>(vocab));  // norm in, linear in, logits
  l.input_elems_per_sample = s * h;
  l.output_elems_per_sample = s * static_cast<double>(vocab);
  l.flops_per_sample = 2.0 * s * h * vocab + 5.0 * s * h;
  return l;
}

Layer make_synthetic(const std::string& name, const SyntheticCost& cost, double params_mb,
                     double activation_mb) {
  Layer l;
  l.name = name;
  l.kind = LayerKind::synthetic;
  l.synthetic = cost;
  const auto numel = static_cast<int64_t>(std::llround(params_mb * kMiB / 4.0));
  if (numel > 0) l.params.push_back({name + ".weight", {numel}});
  const double elems = activation_mb * kMiB / 4.0;
  l.activation_elems_per_sample = elems;
  l.input_elems_per_sample = elems;
  l.output_elems_per_sample = elems;
  return l;
}

std::vector<Layer> parse_model(const Field& model, std::string* description) {
  if (!model.present()) model.fail("missing required key 'model' (a preset: mlp | transformer | synthetic, or a 'layers:' list)");
  if (!model.is_map()) model.fail("'model' must be a map with a 'preset' or a 'layers:' list");
  Field preset = model["preset"];
  if (preset.present()) {
    const std::string kind = to_choice(preset, {"mlp", "transformer", "synthetic"});
    if (kind == "transformer") return transformer_preset(model, description);
    if (kind == "mlp") return mlp_preset(model, description);
    return synthetic_preset(model, description);
  }
  expect_keys(model, {"preset", "layers"});
  Field list = model["layers"];
  if (!list.is_sequence() || list.node().size() == 0)
    model.fail("'model' needs a 'preset' (mlp | transformer | synthetic) or a non-empty 'layers:' list");
  if (list.node().size() > static_cast<size_t>(kMaxLayers))
    list.fail("'model.layers' lists " + std::to_string(list.node().size()) + " layers; at most " +
              std::to_string(kMaxLayers) + " are allowed");
  std::vector<Layer> layers;
  for (const Field& item : list.elements()) {
    layers.push_back(parse_layer(item, layers.size()));
    for (size_t i = 0; i + 1 < layers.size(); ++i)
      if (layers[i].name == layers.back().name)
        item.fail("layer name '" + layers.back().name + "' is used twice; names must be unique");
  }
  *description = "explicit list of " + std::to_string(layers.size()) + " layers";
  return layers;
}

}  // namespace parallax::plan
