// A model as a scenario gives it: a preset (transformer, from its keys or a Hugging Face config;
// mlp; synthetic) or an explicit `layers:` list, read into Layers with every value checked.
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <functional>
#include <sstream>

#include "plan/hf_config.hpp"
#include "plan/knobs.hpp"
#include "plan/layers.hpp"

namespace parallax::plan {
namespace {

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

// A synthetic layer's `params_mb` or `activation_mb` (0 when absent): up to a petabyte, so that a
// rank's bytes (this times micro-batches in flight, layers, copies) stay inside int64.
double megabytes(const Field& map, const std::string& key) {
  constexpr double kMaxMb = 1e9;
  const double mb = finite_number_or(map, key, 0, 0);
  if (mb > kMaxMb) map[key].fail("'" + map[key].path() + "' must be at most 1e9 (a petabyte), got " + map[key].node().Scalar());
  return mb;
}

SyntheticCost parse_synthetic_cost(const Field& map) {
  SyntheticCost c;
  c.fwd_us_per_sample = to_finite_number(require(map, "fwd_us_per_sample"), 0);
  c.fwd_us_fixed = finite_number_or(map, "fwd_us_fixed", 0, 0);
  c.bwd_ratio = finite_number_or(map, "bwd_ratio", 2, 0);
  return c;
}

// `attention: standard | flash | flash2`; absent, the trainer's default (parse_model's defaults).
bool flash(const Field& map, bool by_default) {
  return map["attention"].present() ? to_choice(map["attention"], {"standard", "flash", "flash2"}) != "standard" : by_default;
}
// `dropout`: a rate, 0 (the default: none) up to but not including 1.
double dropout_rate(const Field& f) {
  const double p = to_finite_number(f, 0);
  if (p >= 1) f.fail("'dropout' is a rate: at least 0 and below 1 (Megatron-LM's GPT trains at 0.1)");
  return p;
}
BlockForm form_with_dropout(const Field& map) {
  BlockForm form;
  if (map["dropout"].present()) form.dropout = dropout_rate(map["dropout"]);
  return form;
}

bool flash2(const Field& map) { return map["attention"].present() && to_choice(map["attention"], {"standard", "flash", "flash2"}) == "flash2"; }

Layer parse_layer(const Field& item, size_t index, const ModelDefaults& defaults) {
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
    expect_keys(item, {"kind", "name", "hidden", "heads", "ffn", "seq_len", "attention", "dropout"});
    const int64_t hidden = to_int(require(item, "hidden"), 1, kMaxWidth);
    const int64_t heads = to_int(require(item, "heads"), 1, kMaxWidth);
    if (hidden % heads != 0) item["heads"].fail("'hidden' must be divisible by 'heads'");
    Layer l = make_encoder(name, hidden, heads, positive(item, "ffn", 4 * hidden), to_int(require(item, "seq_len"), 1, kMaxWidth),
                           flash(item, defaults.flash_attention), form_with_dropout(item));
    l.shape.flash2 = flash2(item);
    return l;
  }
  if (kind == "head") {
    expect_keys(item, {"kind", "name", "hidden", "vocab", "seq_len"});
    Layer l = make_head(name, to_int(require(item, "hidden"), 1, kMaxWidth), to_int(require(item, "vocab"), 1, kMaxWidth),
                        to_int(require(item, "seq_len"), 1, kMaxWidth));
    l.shape.loss = defaults.loss;
    return l;
  }
  expect_keys(item, {"kind", "name", "fwd_us_per_sample", "fwd_us_fixed", "bwd_ratio", "params_mb",
                     "activation_mb"});
  return make_synthetic(name, parse_synthetic_cost(item), megabytes(item, "params_mb"), megabytes(item, "activation_mb"));
}

// The model's width must split evenly into heads, unless each head's width is given
// (model.head_dim, or a config's head_dim). `at` is where the failing value was given.
void check_heads_divide_hidden(const Field& at, const TransformerShape& t) {
  if (t.form.head_dim == 0 && t.hidden % t.heads != 0)
    at.fail("'model.hidden' (" + std::to_string(t.hidden) + ") must be divisible by 'model.heads' (" + std::to_string(t.heads) +
            "), or 'model.head_dim' must give each head's width");
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
  if (f.head_dim > 0) d << ", head_dim " << f.head_dim;
  if (f.qk_norm) d << ", qk_norm";
  if (t.window > 0) {
    d << ", sliding window " << t.window;
    if (t.full_attention_every > 0) d << " (full attention every " << t.full_attention_every << "th block)";
  }
  if (f.mla.on()) {
    d << ", latent attention (";
    if (f.mla.q_lora_rank > 0) d << "q rank " << f.mla.q_lora_rank << ", ";
    d << "kv rank " << f.mla.kv_lora_rank << ", qk " << f.mla.qk_nope_head_dim << " + " << f.mla.qk_rope_head_dim << " rotary, v "
      << f.mla.v_head_dim << ")";
  }
  d << ", ffn " << t.ffn;
  if (f.decoder)
    d << " " << name(f.mlp) << ", " << name(f.norm)
      << (f.rope ? ", rope" : f.position_rows > 0 ? ", " + std::to_string(f.position_rows) + " learned positions" : ", learned positions");
  if (f.tie_embeddings) d << ", tied embeddings";
  if (t.moe.on()) {
    d << "; " << t.moe.experts << " experts of ffn " << t.moe.ffn << ", top-" << t.moe.top_k;
    if (t.moe.shared > 0) d << " + " << t.moe.shared << " shared";
    if (t.first_dense > 0) d << ", first " << t.first_dense << " blocks dense";
    if (t.moe_every > 1) d << ", every " << t.moe_every << "th block";
  }
  if (t.mtp_layers > 0) d << ", " << t.mtp_layers << " multi-token prediction module" << (t.mtp_layers > 1 ? "s" : "");
  d << ", seq_len " << t.seq_len << ", vocab " << t.vocab << (t.flash2 ? ", flash attention (FlashAttention-2)" : t.flash_attention ? ", flash attention" : "")
    << (t.form.dropout > 0 ? ", dropout " + number_text(t.form.dropout) : "") << (t.eager ? ", eager kernels" : "")
    << (t.loss != Loss::eager ? std::string(", ") + name(t.loss) + " loss" : "") << ")";
  return d.str();
}

// The block-form keys: any of them makes the transformer's blocks decoder blocks (BlockForm).
const std::vector<std::string> kFormKeys = {"kv_heads", "head_dim", "qk_norm", "mla", "mlp", "norm", "positions", "tie_embeddings", "bias",
                                            "qkv_bias", "mtp_layers", "sliding_window", "full_attention_every"};

// `model.mla`: latent attention, in Hugging Face's DeepSeek field names (plan/layers.hpp, Mla).
Mla read_mla(const Field& f) {
  expect_keys(f, {"q_lora_rank", "kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim"});
  Mla m;
  m.q_lora_rank = f["q_lora_rank"].present() ? to_int(f["q_lora_rank"], 0, int64_t{1} << 20) : 0;
  m.kv_lora_rank = to_int(require(f, "kv_lora_rank"), 1, int64_t{1} << 20);
  m.qk_nope_head_dim = to_int(require(f, "qk_nope_head_dim"), 1, 4096);
  m.qk_rope_head_dim = to_int(require(f, "qk_rope_head_dim"), 1, 4096);
  m.v_head_dim = to_int(require(f, "v_head_dim"), 1, 4096);
  if (m.qk_rope_head_dim % 2 != 0) f["qk_rope_head_dim"].fail("qk_rope_head_dim must be even: rotary positions turn pairs of features");
  return m;
}

// What latent attention replaces or needs: its own head widths and one K and V per head, and
// rotary positions (its qk_rope_head_dim part).
void check_mla(const Field& m, const std::function<bool(const std::string&)>& given, const TransformerShape& t) {
  if (!t.form.mla.on()) return;
  const Field at = given("mla") ? m["mla"] : m;
  if (given("kv_heads") && t.form.kv_heads != t.heads)
    m["kv_heads"].fail("model.kv_heads with model.mla: latent attention gives every head its own key and value");
  if (given("head_dim")) m["head_dim"].fail("model.head_dim with model.mla: latent attention's widths are its qk_nope_head_dim, qk_rope_head_dim and v_head_dim");
  if (t.form.qk_norm) (given("qk_norm") ? m["qk_norm"] : at).fail("model.qk_norm with model.mla: latent attention norms its latents, not each head's query and key");
  if (!t.form.rope) at.fail("model.mla needs model.positions: rope (its qk_rope_head_dim is the rotary part of each query and key)");
}

// `model.max_positions`: learned positions' table rows (BlockForm::position_rows; a Hugging Face
// config's n_positions sets it), at least the job's sequence. Rotary positions have no table.
void read_position_rows(const Field& m, const std::function<bool(const std::string&)>& given, TransformerShape* t) {
  if (given("max_positions")) {
    if (t->form.rope) m["max_positions"].fail("model.max_positions sizes the learned positions' table; rotary positions (model.positions: rope) have none");
    t->form.position_rows = to_int(m["max_positions"], 1, int64_t{1} << 24);
  }
  if (!t->form.rope && t->form.position_rows > 0 && t->seq_len > t->form.position_rows)
    (given("max_positions") ? m["max_positions"] : m["seq_len"])
        .fail("the job's model.seq_len " + std::to_string(t->seq_len) + " is longer than the " + std::to_string(t->form.position_rows) +
              " learned positions of model.max_positions");
}

// `model.sliding_window` and `model.full_attention_every` (TransformerShape::block_window).
void read_window(const Field& m, const std::function<bool(const std::string&)>& given, TransformerShape* t) {
  if (given("sliding_window")) t->window = to_int(m["sliding_window"], 1, int64_t{1} << 24);
  if (given("full_attention_every")) {
    if (t->window == 0) m["full_attention_every"].fail("model.full_attention_every needs model.sliding_window: it says which blocks attend to every token");
    t->full_attention_every = to_int(m["full_attention_every"], 2, 10000);
  }
  if (t->window > 0 && t->form.mla.on())
    (given("sliding_window") ? m["sliding_window"] : m).fail("model.sliding_window with model.mla: Megatron-core's latent attention has no window");
}

// The mixture-of-experts keys: any of them makes the blocks decoder blocks as the form keys do.
const std::vector<std::string> kMoeKeys = {"experts", "experts_per_token", "shared_experts", "expert_ffn", "moe_layers",
                                           "capacity_factor", "expert_imbalance", "expert_weighting"};

// `moe_layers`: `all`, or {every: N, first_dense: K} (block i is MoE when i >= K and i + 1 is a
// multiple of N).
void read_moe_layers(const Field& f, TransformerShape* t) {
  if (f.is_scalar()) {
    to_choice(f, {"all"});
    t->moe_every = 1;
    t->first_dense = 0;
    return;
  }
  if (!f.is_map()) f.fail("'model.moe_layers' must be all, or a map {every: N, first_dense: K}");
  expect_keys(f, {"every", "first_dense"});
  t->moe_every = int_or(f, "every", 1, 1, kMaxLayers);
  t->first_dense = int_or(f, "first_dense", 0, 0, kMaxLayers);
}

// The MoE keys over what a config gave; InputError at the key whose value does not fit the others.
void read_moe(const Field& m, const std::function<bool(const std::string&)>& given, bool weighted_activation, TransformerShape* t) {
  MoeShape& moe = t->moe;
  if (given("experts")) moe.experts = int_or(m, "experts", 0, 0, kMaxWidth);
  if (given("experts_per_token")) moe.top_k = positive(m, "experts_per_token", 2);
  if (given("shared_experts")) moe.shared = int_or(m, "shared_experts", 0, 0, kMaxWidth);
  if (given("expert_ffn")) moe.ffn = positive(m, "expert_ffn", t->ffn);
  if (given("capacity_factor")) {
    const Field f = m["capacity_factor"];
    moe.capacity_factor = f.is_scalar() && f.node().Scalar() == "dropless" ? 0.0 : to_finite_number(f, 1.0);
  }
  if (given("expert_imbalance")) moe.imbalance = to_finite_number(m["expert_imbalance"], 1.0);
  moe.weighted_activation = given("expert_weighting") ? to_choice(m["expert_weighting"], {"output", "activation"}) == "activation"
                                                      : weighted_activation;
  if (given("moe_layers")) read_moe_layers(m["moe_layers"], t);
  if (!moe.on()) {
    for (const auto& k : kMoeKeys)
      if (k != "experts" && given(k)) m[k].fail("'model." + k + "' needs 'model.experts' (the routed experts per MoE block)");
    return;
  }
  if (moe.top_k == 0) moe.top_k = std::min<int64_t>(2, moe.experts);  // Mixtral's and GShard's top-2
  if (moe.ffn == 0) moe.ffn = t->ffn;
  if (moe.top_k > moe.experts)
    m["experts_per_token"].fail("'model.experts_per_token' (" + std::to_string(moe.top_k) + ") must be at most 'model.experts' (" +
                                std::to_string(moe.experts) + ")");
  if (t->first_dense >= t->blocks)
    m["moe_layers"].fail("'model.moe_layers.first_dense' (" + std::to_string(t->first_dense) + ") leaves none of the " +
                         std::to_string(t->blocks) + " blocks a MoE block");
}

// The job's own model keys: a Hugging Face config never gives them, and one given by --set leaves
// them as the file says.
const std::vector<std::string> kJobKeys = {"seq_len", "attention", "kernels", "loss", "dropout"};

// `transformer` from its keys, or from a Hugging Face config (`hf_config`) whose values the keys
// beside it override.
std::vector<Layer> transformer_preset(const Field& m, std::string* description, const ModelDefaults& defaults) {
  std::vector<std::string> allowed = {"preset", "hf_config", "layers", "hidden", "heads", "ffn", "vocab", "max_positions"};
  allowed.insert(allowed.end(), kJobKeys.begin(), kJobKeys.end());
  allowed.insert(allowed.end(), kFormKeys.begin(), kFormKeys.end());
  allowed.insert(allowed.end(), kMoeKeys.begin(), kMoeKeys.end());
  expect_keys(m, allowed);
  const Field config = m["hf_config"];
  // A config given by --set replaces the file's model: the file's other model keys (but kJobKeys)
  // are left out, so `--set model.hf_config=...` works over any scenario.
  const bool config_replaces_file = config.present() && !m.doc().override_for(config.path()).empty();
  auto given = [&](const std::string& key) {
    if (!m[key].present()) return false;
    const bool job_key = std::find(kJobKeys.begin(), kJobKeys.end(), key) != kJobKeys.end();
    return !config_replaces_file || job_key || !m.doc().override_for(m[key].path()).empty();
  };
  if (given("preset")) to_choice(m["preset"], {"transformer"});  // beside hf_config: only transformer
  TransformerShape t;
  std::string source = "transformer";
  if (config.present()) {
    if (!m["seq_len"].present())
      m.fail("a model read from a Hugging Face config needs 'model.seq_len', the job's tokens per sample (a config states "
             "only the longest sequence the model takes)");
    const int64_t seq = positive(m, "seq_len", 0);
    const HfModel hf = read_hf_config(hf_config_file(config), seq);
    t = hf.shape;
    source = std::filesystem::path(to_text(config)).filename().string() + " (" + hf.architecture + ")";
  }
  bool any_form_key = false;
  for (const auto& k : kFormKeys) any_form_key |= given(k);
  for (const auto& k : kMoeKeys) any_form_key |= given(k);
  if (any_form_key && !t.form.decoder) {  // a decoder block from keys: GPT-2's form unless told otherwise
    t.form.decoder = true;
    t.form.mlp = Mlp::gelu;
  }
  if (given("layers")) t.blocks = layer_count(m, t.blocks);
  if (given("hidden")) t.hidden = positive(m, "hidden", t.hidden);
  if (given("heads")) t.heads = positive(m, "heads", t.heads);
  t.ffn = given("ffn") ? positive(m, "ffn", t.ffn) : config.present() ? t.ffn : 4 * t.hidden;
  t.seq_len = positive(m, "seq_len", config.present() ? t.seq_len : 128);
  if (given("vocab")) t.vocab = positive(m, "vocab", t.vocab);
  t.flash_attention = flash(m, defaults.flash_attention);
  t.flash2 = flash2(m);
  t.eager = m["kernels"].present() && to_choice(m["kernels"], {"fused", "eager"}) == "eager";
  if (m["dropout"].present()) t.form.dropout = dropout_rate(m["dropout"]);
  t.loss = m["loss"].present() ? choice_of<Loss>(m["loss"], {Loss::eager, Loss::megatron, Loss::fused}) : defaults.loss;
  if (given("kv_heads")) t.form.kv_heads = positive(m, "kv_heads", t.heads);
  if (given("head_dim")) t.form.head_dim = positive(m, "head_dim", t.hidden / t.heads);
  if (t.form.head_dim * t.heads == t.hidden) t.form.head_dim = 0;  // the usual width: no departure to carry
  check_heads_divide_hidden(given("heads") ? m["heads"] : given("hidden") ? m["hidden"] : config.present() ? config : m, t);
  if (given("mlp")) t.form.mlp = choice_of<Mlp>(m["mlp"], {Mlp::relu, Mlp::gelu, Mlp::swiglu, Mlp::relu2});
  if (given("norm")) t.form.norm = choice_of<Norm>(m["norm"], {Norm::layernorm, Norm::rmsnorm});
  if (given("positions")) t.form.rope = to_choice(m["positions"], {"learned", "rope"}) == "rope";
  read_position_rows(m, given, &t);
  if (given("tie_embeddings")) t.form.tie_embeddings = to_bool(m["tie_embeddings"]);
  if (given("bias")) t.form.bias = t.form.qkv_bias = to_bool(m["bias"]);
  if (given("qkv_bias")) t.form.qkv_bias = to_bool(m["qkv_bias"]);
  if (given("qk_norm")) t.form.qk_norm = to_bool(m["qk_norm"]);
  if (given("mla")) t.form.mla = read_mla(m["mla"]);
  if (given("mtp_layers")) t.mtp_layers = to_int(m["mtp_layers"], 0, 16);
  read_window(m, given, &t);
  check_mla(m, given, t);
  const int64_t kv = t.form.kv_heads > 0 ? t.form.kv_heads : t.heads;
  if (kv > t.heads || t.heads % kv != 0)
    (given("kv_heads") ? m["kv_heads"] : m).fail("'model.kv_heads' (" + std::to_string(kv) + ") must divide 'model.heads' (" +
                                                 std::to_string(t.heads) + "): each key/value head serves a whole group of query heads");
  read_moe(m, given, defaults.weighted_activation, &t);
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
  const double params_mb = megabytes(m, "params_mb");
  const double activation_mb = megabytes(m, "activation_mb");
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

std::string hf_config_file(const Field& config) {
  std::string path = config.resolve_path(to_text(config));
  // A model's folder (a downloaded snapshot) holds its config.json, as from_pretrained reads it.
  if (std::filesystem::is_directory(path)) {
    if (!std::filesystem::is_regular_file(std::filesystem::path(path) / "config.json"))
      config.fail(path + " is a folder with no config.json in it");
    path = (std::filesystem::path(path) / "config.json").string();
  }
  if (!std::filesystem::is_regular_file(path)) config.fail("no Hugging Face config file at " + path);
  return path;
}

std::vector<Layer> parse_model(const Field& model, std::string* description, const ModelDefaults& defaults) {
  if (!model.present()) model.fail("missing required key 'model' (a preset: mlp | transformer | synthetic, or a 'layers:' list)");
  if (!model.is_map()) model.fail("'model' must be a map with a 'preset' or a 'layers:' list");
  if (model["hf_config"].present()) return transformer_preset(model, description, defaults);
  Field preset = model["preset"];
  if (preset.present()) {
    const std::string kind = to_choice(preset, {"mlp", "transformer", "synthetic"});
    if (kind == "transformer") return transformer_preset(model, description, defaults);
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
    layers.push_back(parse_layer(item, layers.size(), defaults));
    for (size_t i = 0; i + 1 < layers.size(); ++i)
      if (layers[i].name == layers.back().name)
        item.fail("layer name '" + layers.back().name + "' is used twice; names must be unique");
  }
  *description = "explicit list of " + std::to_string(layers.size()) + " layers";
  return layers;
}

}  // namespace parallax::plan
