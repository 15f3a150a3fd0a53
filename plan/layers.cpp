#include "plan/layers.hpp"

#include <cmath>
#include <filesystem>
#include <sstream>

#include "plan/hf_config.hpp"

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

// RMSNorm has a scale and no shift.
void add_norm_params(Layer& l, const std::string& prefix, int64_t hidden, Norm norm) {
  if (norm == Norm::layernorm) return add_layer_norm_params(l, prefix, hidden);
  l.params.push_back({prefix + "weight", {hidden}});
}

// Bytes a dropout mask keeps per element (PyTorch keeps a bool mask).
constexpr double kMaskBytes = 1;

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

// `attention: standard | flash`; absent, the trainer's default (parse_model's flash_default).
bool flash(const Field& map, bool by_default) {
  return map["attention"].present() ? to_choice(map["attention"], {"standard", "flash"}) == "flash" : by_default;
}

Layer parse_layer(const Field& item, size_t index, bool flash_default) {
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
                        flash(item, flash_default));
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

// The model's width must split evenly into heads.
void check_heads_divide_hidden(const Field& m, const TransformerShape& t) {
  if (t.hidden % t.heads != 0)
    (m["hidden"].present() ? m["hidden"] : m).fail("'model.hidden' (" + std::to_string(t.hidden) + ") must be divisible by 'model.heads' (" +
                                                   std::to_string(t.heads) + ")");
}

// A choice among an enum's values, each named as plan::name() names it.
template <typename E>
E choice_of(const Field& f, const std::vector<E>& values) {
  std::vector<std::string> names;
  for (E v : values) names.push_back(name(v));
  const std::string picked = to_choice(f, names);
  for (E v : values)
    if (picked == name(v)) return v;
  return values.front();
}

std::string describe_transformer(const TransformerShape& t) {
  std::ostringstream d;
  const BlockForm& f = t.form;
  d << "embed + " << t.blocks << (f.decoder ? " decoder" : " encoder") << " blocks + head (hidden " << t.hidden << ", heads " << t.heads;
  if (f.decoder && f.kv_heads > 0 && f.kv_heads != t.heads) d << ", kv_heads " << f.kv_heads;
  d << ", ffn " << t.ffn;
  if (f.decoder) d << " " << name(f.mlp) << ", " << name(f.norm) << (f.rope ? ", rope" : ", learned positions");
  if (f.tie_embeddings) d << ", tied embeddings";
  d << ", seq_len " << t.seq_len << ", vocab " << t.vocab << (t.flash_attention ? ", flash attention" : "") << ")";
  return d.str();
}

// The block-form keys: any of them makes the transformer's blocks decoder blocks (BlockForm).
const std::vector<std::string> kFormKeys = {"kv_heads", "mlp", "norm", "positions", "tie_embeddings", "bias", "qkv_bias"};

// `transformer` from its keys, or from a Hugging Face config (`hf_config`) whose values the keys
// beside it override. seq_len and attention are the job's own: a config never gives them.
std::vector<Layer> transformer_preset(const Field& m, std::string* description, bool flash_default) {
  std::vector<std::string> allowed = {"preset", "hf_config", "layers", "hidden", "heads", "ffn", "seq_len", "vocab", "attention"};
  allowed.insert(allowed.end(), kFormKeys.begin(), kFormKeys.end());
  expect_keys(m, allowed);
  const Field config = m["hf_config"];
  // A config given by --set replaces the file's model: the file's other model keys (but seq_len
  // and attention) are left out, so `--set model.hf_config=...` works over any scenario.
  const bool config_replaces_file = config.present() && !m.doc().override_for(config.path()).empty();
  auto given = [&](const std::string& key) {
    if (!m[key].present()) return false;
    return !config_replaces_file || key == "seq_len" || key == "attention" || !m.doc().override_for(m[key].path()).empty();
  };
  if (given("preset")) to_choice(m["preset"], {"transformer"});  // beside hf_config: only transformer
  TransformerShape t;
  std::string source = "transformer";
  if (config.present()) {
    if (!m["seq_len"].present())
      m.fail("a model read from a Hugging Face config needs 'model.seq_len', the job's tokens per sample (a config states "
             "only the longest sequence the model takes)");
    const int64_t seq = positive(m, "seq_len", 0);
    const std::string path = config.resolve_path(to_string(config));
    if (!std::filesystem::is_regular_file(path)) config.fail("no Hugging Face config file at " + path);
    const HfModel hf = read_hf_config(path, seq);
    t = hf.shape;
    source = std::filesystem::path(to_string(config)).filename().string() + " (" + hf.architecture + ")";
  }
  bool any_form_key = false;
  for (const auto& k : kFormKeys) any_form_key |= given(k);
  if (any_form_key && !t.form.decoder) {  // a decoder block from keys: GPT-2's form unless told otherwise
    t.form.decoder = true;
    t.form.mlp = Mlp::gelu;
  }
  if (given("layers")) t.blocks = layer_count(m, t.blocks);
  if (given("hidden")) t.hidden = positive(m, "hidden", t.hidden);
  if (given("heads")) t.heads = positive(m, "heads", t.heads);
  check_heads_divide_hidden(m, t);
  t.ffn = given("ffn") ? positive(m, "ffn", t.ffn) : config.present() ? t.ffn : 4 * t.hidden;
  t.seq_len = positive(m, "seq_len", config.present() ? t.seq_len : 128);
  if (given("vocab")) t.vocab = positive(m, "vocab", t.vocab);
  t.flash_attention = flash(m, flash_default);
  if (given("kv_heads")) t.form.kv_heads = positive(m, "kv_heads", t.heads);
  if (given("mlp")) t.form.mlp = choice_of<Mlp>(m["mlp"], {Mlp::relu, Mlp::gelu, Mlp::swiglu, Mlp::relu2});
  if (given("norm")) t.form.norm = choice_of<Norm>(m["norm"], {Norm::layernorm, Norm::rmsnorm});
  if (given("positions")) t.form.rope = to_choice(m["positions"], {"learned", "rope"}) == "rope";
  if (given("tie_embeddings")) t.form.tie_embeddings = to_bool(m["tie_embeddings"]);
  if (given("bias")) t.form.bias = t.form.qkv_bias = to_bool(m["bias"]);
  if (given("qkv_bias")) t.form.qkv_bias = to_bool(m["qkv_bias"]);
  const int64_t kv = t.form.kv_heads > 0 ? t.form.kv_heads : t.heads;
  if (kv > t.heads || t.heads % kv != 0)
    (given("kv_heads") ? m["kv_heads"] : m).fail("'model.kv_heads' (" + std::to_string(kv) + ") must divide 'model.heads' (" +
                                                 std::to_string(t.heads) + "): each key/value head serves a whole group of query heads");
  std::vector<Layer> layers = make_transformer(t);
  *description = source + ": " + describe_transformer(t);
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

const char* name(Mlp m) {
  switch (m) {
    case Mlp::relu: return "relu";
    case Mlp::gelu: return "gelu";
    case Mlp::swiglu: return "swiglu";
    case Mlp::relu2: return "relu2";
  }
  return "?";
}

const char* name(Norm n) { return n == Norm::rmsnorm ? "rmsnorm" : "layernorm"; }

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

Layer make_embedding(const std::string& name, int64_t vocab, int64_t hidden, int64_t seq_len, const BlockForm& form) {
  Layer l;
  l.name = name;
  l.kind = LayerKind::embedding;
  l.shape.vocab = vocab;
  l.shape.hidden = hidden;
  l.shape.seq_len = seq_len;
  l.shape.form = form;
  l.params.push_back({name + ".tok.weight", {vocab, hidden}, /*tensor_split=*/true});  // vocab-parallel
  if (!form.rope) l.params.push_back({name + ".pos.weight", {seq_len, hidden}});
  // Backward needs only the token ids (int64: two fp32-sized elements each).
  l.activation_elems_per_sample = 2.0 * seq_len;
  l.input_elems_per_sample = 2.0 * seq_len;
  l.output_elems_per_sample = static_cast<double>(seq_len * hidden);
  l.flops_per_sample = form.rope ? 0.0 : static_cast<double>(seq_len * hidden);  // adding the positions
  return l;
}

BlockActivations block_activations(const LayerShape& sh, double e, double linear_e) {
  const double s = static_cast<double>(sh.seq_len), h = static_cast<double>(sh.hidden);
  const double a = static_cast<double>(sh.heads), ffn = static_cast<double>(sh.ffn);
  const double kv_width = h / a * static_cast<double>(sh.kv_heads());
  const bool dropout = !sh.form.decoder;  // LibTorch's encoder layer has dropout modules (at p = 0 here)
  const double mask = dropout ? kMaskBytes : 0.0;
  // What a gated MLP keeps: Megatron-core's fused SwiGLU keeps its input (gate and up, 2 x ffn)
  // and the down projection's input (ffn); GELU and squared ReLU keep their input and output.
  const double mlp_tensors = sh.form.mlp == Mlp::swiglu ? 3.0 : 2.0;
  BlockActivations out;
  // The two norms' inputs and the inputs of QKV and of the MLP, whole on every tensor rank, and
  // the masks of the two dropouts after attention and after the MLP.
  out.unsplit = s * h * (2 * e + 2 * linear_e + 2 * mask);
  // Q, the output projection's input, and the MLP's ffn-wide tensors (the last is the down
  // projection's input).
  out.split = s * (e * h + linear_e * h + e * (mlp_tensors - 1) * ffn + linear_e * ffn);
  out.kv = s * e * 2 * kv_width;  // K and V (rotated, with rotary positions: RoPE fused keeps no more)
  // The scores per head: softmax output, and with dropout its mask and output. Flash attention
  // keeps no scores, only its softmax statistics (one fp32 per row and head).
  out.scores = sh.flash_attention ? a * s * 4.0 : a * s * s * (dropout ? 2 * e + mask : e);
  return out;
}

Layer make_encoder(const std::string& name, int64_t hidden, int64_t heads, int64_t ffn,
                   int64_t seq_len, bool flash_attention, const BlockForm& form) {
  Layer l;
  l.name = name;
  l.kind = LayerKind::encoder;
  l.shape.hidden = hidden;
  l.shape.heads = heads;
  l.shape.ffn = ffn;
  l.shape.seq_len = seq_len;
  l.shape.flash_attention = flash_attention;
  l.shape.form = form;
  const std::string p = name + ".";
  const int64_t kv = l.shape.kv_heads(), kv_width = hidden / heads * kv;
  if (!form.decoder) {
    // LibTorch's TransformerEncoderLayerImpl::reset() registers self_attn, linear1, dropout, linear2,
    // norm1, norm2; MultiheadAttention registers in_proj_weight, in_proj_bias, then out_proj.
    l.params.push_back({p + "self_attn.in_proj_weight", {3 * hidden, hidden}, true});  // column-parallel
    l.params.push_back({p + "self_attn.in_proj_bias", {3 * hidden}, true});
    add_linear_params(l, p + "self_attn.out_proj.", hidden, hidden, true, Split::row);
    add_linear_params(l, p + "linear1.", hidden, ffn, true, Split::column);
    add_linear_params(l, p + "linear2.", ffn, hidden, true, Split::row);
    add_layer_norm_params(l, p + "norm1.", hidden);
    add_layer_norm_params(l, p + "norm2.", hidden);
  } else {
    // Hugging Face's LlamaDecoderLayer order (exec/model.cpp registers the same): self_attn
    // (q, k, v, o), mlp (gate, up, down), then the two norms.
    add_linear_params(l, p + "self_attn.q_proj.", hidden, hidden, form.qkv_bias, Split::column);
    for (const char* proj : {"k_proj.", "v_proj."}) {
      const size_t first = l.params.size();
      add_linear_params(l, p + "self_attn." + proj, hidden, kv_width, form.qkv_bias, Split::column);
      for (size_t i = first; i < l.params.size(); ++i) l.params[i].max_split = kv;  // replicated past kv heads
    }
    add_linear_params(l, p + "self_attn.o_proj.", hidden, hidden, form.bias, Split::row);
    if (form.mlp == Mlp::swiglu) add_linear_params(l, p + "mlp.gate_proj.", hidden, ffn, form.bias, Split::column);
    add_linear_params(l, p + "mlp.up_proj.", hidden, ffn, form.bias, Split::column);
    add_linear_params(l, p + "mlp.down_proj.", ffn, hidden, form.bias, Split::row);
    add_norm_params(l, p + "input_layernorm.", hidden, form.norm);
    add_norm_params(l, p + "post_attention_layernorm.", hidden, form.norm);
  }
  const double s = static_cast<double>(seq_len), h = static_cast<double>(hidden);
  // The traffic the plain roofline reads: the bytes kept at 2 bytes an element, counted as
  // elements (memory is plan/memory.cpp's, which splits the same terms by tensor and sequence
  // parallelism). At ffn = 4h and full attention, Korthikanti et al.'s s*h*(17 + 2.5*a*s/h).
  const BlockActivations kept = block_activations(l.shape, 2.0, 2.0);
  l.activation_elems_per_sample = (kept.unsplit + kept.split + kept.kv + kept.scores) / 2.0;
  l.input_elems_per_sample = s * h;
  l.output_elems_per_sample = s * h;
  // Per token: Q and the output projection 2h^2 each, K and V 2*h*kv_width each, the MLP 2*h*ffn
  // per matrix (three for SwiGLU); per sample the scores and the attention-weighted values add
  // 4*s^2*h (grouped-query attention shares K and V, not the work per query head).
  const double mlp_matrices = form.mlp == Mlp::swiglu ? 3.0 : 2.0;
  l.flops_per_sample = s * (4.0 * h * h + 4.0 * h * static_cast<double>(kv_width) + 2.0 * mlp_matrices * h * ffn) + 4.0 * s * s * h;
  return l;
}

Layer make_head(const std::string& name, int64_t hidden, int64_t vocab, int64_t seq_len, const BlockForm& form) {
  Layer l;
  l.name = name;
  l.kind = LayerKind::head;
  l.shape.hidden = hidden;
  l.shape.vocab = vocab;
  l.shape.seq_len = seq_len;
  l.shape.form = form;
  add_norm_params(l, name + ".norm.", hidden, form.norm);
  // Vocabulary-parallel. A decoder's output projection has no bias (every Hugging Face
  // *ForCausalLM); tied, it is the embedding's matrix and holds no parameter of its own.
  if (!form.tie_embeddings) add_linear_params(l, name + ".output.", hidden, vocab, !form.decoder, Split::column);
  const double s = static_cast<double>(seq_len), h = static_cast<double>(hidden);
  l.activation_elems_per_sample = s * (2.0 * h + static_cast<double>(vocab));  // norm in, linear in, logits
  l.input_elems_per_sample = s * h;
  l.output_elems_per_sample = s * static_cast<double>(vocab);
  l.flops_per_sample = 2.0 * s * h * vocab + 5.0 * s * h;
  return l;
}

std::vector<Layer> make_transformer(const TransformerShape& t) {
  std::vector<Layer> layers;
  layers.push_back(make_embedding("embed", t.vocab, t.hidden, t.seq_len, t.form));
  for (int64_t i = 0; i < t.blocks; ++i)
    layers.push_back(make_encoder("layers." + std::to_string(i), t.hidden, t.heads, t.ffn, t.seq_len, t.flash_attention, t.form));
  layers.push_back(make_head("head", t.hidden, t.vocab, t.seq_len, t.form));
  return layers;
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

std::vector<Layer> parse_model(const Field& model, std::string* description, bool flash_default) {
  if (!model.present()) model.fail("missing required key 'model' (a preset: mlp | transformer | synthetic, or a 'layers:' list)");
  if (!model.is_map()) model.fail("'model' must be a map with a 'preset' or a 'layers:' list");
  if (model["hf_config"].present()) return transformer_preset(model, description, flash_default);
  Field preset = model["preset"];
  if (preset.present()) {
    const std::string kind = to_choice(preset, {"mlp", "transformer", "synthetic"});
    if (kind == "transformer") return transformer_preset(model, description, flash_default);
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
    layers.push_back(parse_layer(item, layers.size(), flash_default));
    for (size_t i = 0; i + 1 < layers.size(); ++i)
      if (layers[i].name == layers.back().name)
        item.fail("layer name '" + layers.back().name + "' is used twice; names must be unique");
  }
  *description = "explicit list of " + std::to_string(layers.size()) + " layers";
  return layers;
}

}  // namespace parallax::plan
