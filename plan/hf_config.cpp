#include "plan/hf_config.hpp"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>

namespace parallax::plan {
namespace {

// Fields every architecture may hold that change nothing Parallax plans: "_source" (where a shipped
// config in scenarios/models/ came from; any other key transformers writes with a leading "_" is
// its own bookkeeping, passed over too), token ids, inference and initialisation settings, dtypes
// (torch_dtype, and dtype, as transformers 4.56 and later write it), a released checkpoint's
// quantization, the layers' attention kinds (layer_types, read beside sliding_window below),
// the rotary base and scaling (rope_theta and rope_scaling, or transformers 5's rope_parameters) (how positions are encoded,
// not what they cost: kept for `parallax export`, read_rotary), norm epsilons (kept for it too,
// read_definition) and dropout rates (a training choice, the job's model.dropout: 0 unless the
// scenario says, as these families train).
const std::vector<std::string> kIgnored = {
    "_source", "_name_or_path", "architectures", "model_type", "bos_token_id", "eos_token_id", "pad_token_id",
    "torch_dtype", "dtype", "transformers_version", "rope_parameters", "layer_types", "quantization_config", "use_cache", "initializer_range", "pretraining_tp",
    "rope_theta", "rope_scaling", "rms_norm_eps", "norm_eps", "layer_norm_eps", "layer_norm_epsilon",
    "attention_dropout", "hidden_dropout", "max_position_embeddings", "partial_rotary_factor",
    "head_dim", "kv_channels", "attention_bias", "mlp_bias", "tie_word_embeddings", "sliding_window",
    "use_sliding_window", "max_window_layers", "hidden_act", "num_key_value_heads", "vocab_size",
    "hidden_size", "intermediate_size", "num_attention_heads", "num_hidden_layers",
    "bos_token", "eos_token", "tokenizer_class", "output_attentions", "output_hidden_states",
    "return_dict", "id2label", "label2id", "use_return_dict"};
// GPT-2's own names.
const std::vector<std::string> kGpt2 = {
    "n_layer", "n_embd", "n_head", "n_inner", "n_positions", "n_ctx", "activation_function", "attn_pdrop",
    "embd_pdrop", "resid_pdrop", "summary_activation", "summary_first_dropout", "summary_proj_to_labels",
    "summary_type", "summary_use_proj", "task_specific_params", "scale_attn_weights",
    "scale_attn_by_inverse_layer_idx", "reorder_and_upcast_attn", "n_special", "predict_special_tokens"};

// The mixture-of-experts families' own names: the experts, and the router's training settings
// (auxiliary loss, jitter, logits output, top-k renormalisation), which change no cost. Each
// family's own: a field another family reads (Qwen2-MoE's shared expert in a Qwen3-MoE or Mixtral
// config) builds nothing in transformers, so it is refused rather than read or passed over.
const std::vector<std::string> kMixtral = {"num_local_experts", "num_experts_per_tok", "router_aux_loss_coef", "router_jitter_noise",
                                           "output_router_logits"};
const std::vector<std::string> kQwen3Moe = {"num_experts", "num_experts_per_tok", "moe_intermediate_size", "decoder_sparse_step",
                                            "mlp_only_layers", "router_aux_loss_coef", "output_router_logits", "norm_topk_prob"};
const std::vector<std::string> kQwen2MoeOnly = {"shared_expert_intermediate_size"};

// DeepSeek-V2 and -V3's own names: latent attention, the experts, multi-token prediction, and
// what changes no cost: the router's scoring and balancing (scoring_func, topk_method,
// routed_scaling_factor, aux_loss_alpha, seq_aux, norm_topk_prob), the inference-time ep_size,
// the released weights' fp8 format (quantization_config) and the remote code's auto_map. Their
// group-limited routing (n_group, topk_group: a token's experts on at most topk_group of n_group
// groups, DeepSeek-V3's nodes) is read and not planned: the all-to-all is costed as if a token's
// experts fell anywhere, which counts at least its cross-node traffic.
const std::vector<std::string> kDeepSeek = {
    "q_lora_rank", "kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim", "n_routed_experts", "n_shared_experts",
    "num_experts_per_tok", "moe_intermediate_size", "first_k_dense_replace", "moe_layer_freq", "num_nextn_predict_layers",
    "scoring_func", "topk_method", "routed_scaling_factor", "aux_loss_alpha", "seq_aux", "norm_topk_prob", "n_group", "topk_group",
    "ep_size", "auto_map"};

// The JSON type of each field read, as transformers' config classes take it. The config is read
// as YAML for its fields' places, and YAML would take "2048" or "false" as a number or a boolean
// where Python keeps a string (a string "false" is true there): nlohmann::json checks the text is
// JSON and each field read holds its type. null is allowed wherever transformers allows None; the
// readers below say what it means.
enum class JsonType { integer, number, boolean, text };
const std::map<std::string, JsonType> kFieldTypes = {
    {"num_hidden_layers", JsonType::integer}, {"hidden_size", JsonType::integer}, {"intermediate_size", JsonType::integer},
    {"num_attention_heads", JsonType::integer}, {"num_key_value_heads", JsonType::integer}, {"vocab_size", JsonType::integer},
    {"head_dim", JsonType::integer}, {"max_position_embeddings", JsonType::integer}, {"sliding_window", JsonType::integer},
    {"n_layer", JsonType::integer}, {"n_embd", JsonType::integer}, {"n_head", JsonType::integer}, {"n_inner", JsonType::integer},
    {"n_positions", JsonType::integer}, {"num_local_experts", JsonType::integer}, {"num_experts", JsonType::integer},
    {"num_experts_per_tok", JsonType::integer}, {"moe_intermediate_size", JsonType::integer},
    {"shared_expert_intermediate_size", JsonType::integer}, {"decoder_sparse_step", JsonType::integer},
    {"q_lora_rank", JsonType::integer}, {"kv_lora_rank", JsonType::integer}, {"qk_nope_head_dim", JsonType::integer},
    {"qk_rope_head_dim", JsonType::integer}, {"v_head_dim", JsonType::integer}, {"n_routed_experts", JsonType::integer},
    {"n_shared_experts", JsonType::integer}, {"first_k_dense_replace", JsonType::integer}, {"moe_layer_freq", JsonType::integer},
    {"num_nextn_predict_layers", JsonType::integer}, {"rope_theta", JsonType::number},
    {"tie_word_embeddings", JsonType::boolean}, {"attention_bias", JsonType::boolean}, {"mlp_bias", JsonType::boolean},
    {"use_sliding_window", JsonType::boolean}, {"hidden_act", JsonType::text}, {"activation_function", JsonType::text},
    {"model_type", JsonType::text}, {"rms_norm_eps", JsonType::number}, {"norm_eps", JsonType::number},
    {"layer_norm_eps", JsonType::number}, {"layer_norm_epsilon", JsonType::number}, {"partial_rotary_factor", JsonType::number},
    {"norm_topk_prob", JsonType::boolean}, {"scoring_func", JsonType::text}, {"topk_method", JsonType::text},
    {"n_group", JsonType::integer}, {"topk_group", JsonType::integer}, {"routed_scaling_factor", JsonType::number}};

bool holds(const nlohmann::json& v, JsonType type) {
  switch (type) {
    case JsonType::integer: return v.is_number_integer();
    case JsonType::number: return v.is_number();
    case JsonType::boolean: return v.is_boolean();
    case JsonType::text: return v.is_string();
  }
  return false;
}

const char* type_name(JsonType type) {
  switch (type) {
    case JsonType::integer: return "a whole JSON number";
    case JsonType::number: return "a JSON number";
    case JsonType::boolean: return "true or false";
    case JsonType::text: return "a JSON string";
  }
  return "";
}

// Line and column (from 1) of a byte offset in the text, for nlohmann's parse errors.
Location location_of_byte(const std::string& path, const std::string& text, std::size_t byte) {
  Location at{path};
  at.line = 1;
  at.column = 1;
  for (std::size_t i = 0; i < std::min(byte, text.size()); ++i) {
    if (text[i] == '\n') {
      ++at.line;
      at.column = 1;
    } else {
      ++at.column;
    }
  }
  return at;
}

// The file's text as JSON: one object, or an InputError at the place it stops being JSON.
nlohmann::json parse_json(const std::string& text, const std::string& path) {
  if (text.find_first_not_of(" \t\r\n") == std::string::npos) throw InputError(Location{path}, "empty file: not a Hugging Face config.json");
  nlohmann::json doc;
  try {
    doc = nlohmann::json::parse(text);
  } catch (const nlohmann::json::parse_error& e) {
    // what() reads "[json.exception.parse_error.101] parse error at line 1, column 2: why".
    std::string why = e.what();
    if (const auto colon = why.find(": "); colon != std::string::npos) why = why.substr(colon + 2);
    throw InputError(location_of_byte(path, text, e.byte > 0 ? e.byte - 1 : 0),
                     "not JSON, as a Hugging Face config.json must be: " + why);
  }
  if (!doc.is_object()) throw InputError(Location{path}, "a Hugging Face config.json is a JSON object, not " + std::string(doc.type_name()));
  return doc;
}

// JSON writes a character beyond U+FFFF as a pair of \\u escapes (Python's json.dumps, so
// save_pretrained, writes an emoji in a path so), which yaml-cpp refuses; YAML writes it as one
// \\U escape of eight digits. Only escapes change (the text is valid JSON: nlohmann read it), and
// a line's columns after one move by two.
std::string astral_escapes_for_yaml(const std::string& text) {
  std::string out;
  out.reserve(text.size());
  const auto hex4 = [&](std::size_t at, unsigned* value) {
    if (at + 4 > text.size()) return false;
    *value = static_cast<unsigned>(std::stoul(text.substr(at, 4), nullptr, 16));
    return true;
  };
  for (std::size_t i = 0; i < text.size(); ++i) {
    unsigned high = 0, low = 0;
    if (text[i] == '\\' && i + 1 < text.size() && text[i + 1] != 'u') {  // another escape: copied whole
      out += text.substr(i, 2);
      ++i;
      continue;
    }
    if (text[i] == '\\' && hex4(i + 2, &high) && high >= 0xD800 && high < 0xDC00 && i + 11 < text.size() && text[i + 6] == '\\' &&
        text[i + 7] == 'u' && hex4(i + 8, &low) && low >= 0xDC00 && low < 0xE000) {
      char code[16];
      std::snprintf(code, sizeof code, "\\U%08X", 0x10000 + ((high - 0xD800) << 10) + (low - 0xDC00));
      out += code;
      i += 11;
      continue;
    }
    out += text[i];
  }
  return out;
}

// The fields read_rotary reads inside rope_scaling or rope_parameters (transformers 5).
const std::map<std::string, JsonType> kRotaryFieldTypes = {
    {"rope_theta", JsonType::number}, {"partial_rotary_factor", JsonType::number}, {"rope_type", JsonType::text},
    {"type", JsonType::text}, {"factor", JsonType::number}, {"mscale", JsonType::number},
    {"mscale_all_dim", JsonType::number}, {"original_max_position_embeddings", JsonType::integer}};

void check_fields(const nlohmann::json& doc, const Field& c, const std::map<std::string, JsonType>& types, const std::string& inside) {
  for (const auto& [key, type] : types) {
    const auto it = doc.find(key);
    if (it == doc.end() || it->is_null() || holds(*it, type)) continue;
    c[key].fail("'" + inside + key + "' is " + it->dump() + "; transformers reads it as " + type_name(type));
  }
}

// Each field Parallax reads holds its JSON type.
void check_types(const nlohmann::json& doc, const Field& c) {
  check_fields(doc, c, kFieldTypes, "");
  for (const char* map : {"rope_scaling", "rope_parameters"})
    if (const auto it = doc.find(map); it != doc.end() && it->is_object())
      check_fields(*it, c[map], kRotaryFieldTypes, std::string(map) + ".");
}

const std::vector<std::string> kArchitectures = {"LlamaForCausalLM", "MistralForCausalLM", "Qwen2ForCausalLM",
                                                 "Qwen3ForCausalLM", "GPT2LMHeadModel", "NemotronForCausalLM",
                                                 "MixtralForCausalLM", "Qwen2MoeForCausalLM", "Qwen3MoeForCausalLM",
                                                 "DeepseekV2ForCausalLM", "DeepseekV3ForCausalLM"};

int64_t width(const Field& map, const std::string& key) { return to_int(require(map, key), 1, int64_t{1} << 20); }

// hidden_act of the Llama-style families: silu is SwiGLU (gate * silu), relu2 squared ReLU.
Mlp activation(const Field& f, const std::string& arch) {
  const std::string act = to_text(f);
  if (arch == "NemotronForCausalLM") {
    if (act == "relu2") return Mlp::relu2;
    f.fail("hidden_act '" + act + "': NemotronForCausalLM is read with relu2 (squared ReLU) only");
  }
  if (act == "silu" || act == "swish") return Mlp::swiglu;
  f.fail("hidden_act '" + act + "': " + arch + " is read with silu (SwiGLU) only");
}

TransformerShape llama_family(const Field& c, const std::string& arch) {
  TransformerShape t;
  t.form.decoder = true;
  t.form.rope = true;
  t.form.norm = arch == "NemotronForCausalLM" ? Norm::layernorm : Norm::rmsnorm;  // Nemotron's LayerNorm1P
  t.blocks = to_int(require(c, "num_hidden_layers"), 1, 10000);
  t.hidden = width(c, "hidden_size");
  t.heads = width(c, "num_attention_heads");
  t.ffn = width(c, "intermediate_size");
  t.vocab = width(c, "vocab_size");
  // Absent, the config class's default (transformers' MistralConfig, Qwen2Config and the rest);
  // null, or absent where the default is None (Llama, Nemotron), one key/value head per query head.
  static const std::map<std::string, int64_t> kDefaultKvHeads = {{"MistralForCausalLM", 8}, {"MixtralForCausalLM", 8},
                                                                 {"Qwen2ForCausalLM", 32}, {"Qwen3ForCausalLM", 32},
                                                                 {"Qwen2MoeForCausalLM", 16}, {"Qwen3MoeForCausalLM", 4}};
  const Field kv = c["num_key_value_heads"];
  const auto family_kv = kDefaultKvHeads.find(arch);
  const bool stated = kv.node().IsDefined();  // null is stated: None
  t.form.kv_heads = kv.present() ? width(c, "num_key_value_heads")
                    : !stated && family_kv != kDefaultKvHeads.end() ? family_kv->second
                                                                    : t.heads;
  t.form.mlp = activation(c["hidden_act"].present() ? c["hidden_act"] : require(c, "hidden_act"), arch);
  t.form.tie_embeddings = bool_or(c, "tie_word_embeddings", false);
  if (arch == "Qwen2ForCausalLM" || arch == "Qwen2MoeForCausalLM") {  // Qwen2's attention has biases on Q, K and V, nowhere else
    t.form.bias = false;
    t.form.qkv_bias = true;
  } else {
    // LlamaConfig's mlp_bias defaults to false whatever attention_bias says (configs saved before
    // transformers 4.42 have no mlp_bias: their MLPs had none).
    const bool attention = bool_or(c, "attention_bias", false), mlp = bool_or(c, "mlp_bias", false);
    if (attention != mlp)
      (c["mlp_bias"].present() ? c["mlp_bias"] : c["attention_bias"])
          .fail("attention_bias " + std::string(attention ? "true" : "false") + " with mlp_bias " + (mlp ? "true" : "false") +
                (c["mlp_bias"].present() ? "" : " (" + arch + "'s default)") + ": Parallax plans biases on all of a block's linears or on none");
    t.form.bias = t.form.qkv_bias = attention;
  }
  // Qwen3's attention norms each head's query and key (Qwen3Attention's q_norm and k_norm, RMSNorm
  // over head_dim, before the rotary positions).
  t.form.qk_norm = arch == "Qwen3ForCausalLM" || arch == "Qwen3MoeForCausalLM";
  // Qwen3's heads are wider than hidden / heads (128 at hidden 2,048 and 32 heads): the query
  // projection's width is then heads x head_dim.
  if (c["head_dim"].present() && !c["head_dim"].node().IsNull() && to_int(c["head_dim"], 1) * t.heads != t.hidden)
    t.form.head_dim = to_int(c["head_dim"], 1);
  if (!c["head_dim"].node().IsDefined() && arch == "Qwen3ForCausalLM" && 128 * t.heads != t.hidden)  // Qwen3Config's head_dim: 128
    t.form.head_dim = 128;
  return t;
}

// Mixtral: every block's MLP is num_local_experts experts of intermediate_size. Qwen2-MoE and
// Qwen3-MoE: experts of moe_intermediate_size in every decoder_sparse_step-th block, and (Qwen2-MoE)
// one shared expert of shared_expert_intermediate_size (a whole number of expert widths; its
// sigmoid gate, one weight row, is left out).
void read_experts(const Field& c, const std::string& arch, TransformerShape* t) {
  MoeShape& moe = t->moe;
  moe.top_k = width(c, "num_experts_per_tok");
  if (arch == "MixtralForCausalLM") {
    moe.experts = width(c, "num_local_experts");
    moe.ffn = t->ffn;
  } else {
    moe.experts = width(c, "num_experts");
    moe.ffn = width(c, "moe_intermediate_size");
    t->moe_every = int_or(c, "decoder_sparse_step", 1, 1, 10000);
    const Field only = c["mlp_only_layers"];
    if (only.present() && (!only.is_sequence() || only.node().size() > 0))
      only.fail("mlp_only_layers: Parallax plans MoE blocks every decoder_sparse_step blocks; dense blocks in between are not read");
    if (c["shared_expert_intermediate_size"].present()) {
      const int64_t shared = width(c, "shared_expert_intermediate_size");
      if (shared % moe.ffn != 0)
        c["shared_expert_intermediate_size"].fail("shared_expert_intermediate_size " + std::to_string(shared) +
                                                  " is not a whole number of moe_intermediate_size " + std::to_string(moe.ffn));
      moe.shared = shared / moe.ffn;
    }
  }
  if (moe.top_k > moe.experts) c["num_experts_per_tok"].fail("num_experts_per_tok is more than the experts");
}

// DeepSeek-V2 and -V3 (Hugging Face's DeepseekV3Attention and DeepseekV3MoE): latent attention;
// intermediate_size wide dense MLPs in the first first_k_dense_replace blocks, then n_routed_experts
// experts of moe_intermediate_size (num_experts_per_tok a token) and n_shared_experts more of that
// width in every moe_layer_freq-th block; num_nextn_predict_layers multi-token prediction modules.
void read_deepseek(const Field& c, TransformerShape* t) {
  Mla& m = t->form.mla;
  // transformers' defaults for these are V3's (a 1,536 query rank, 256 experts, one shared, three
  // dense blocks first), unlike V2's: the fields are read only as stated, null meaning none.
  for (const std::string key : {"q_lora_rank", "n_routed_experts"})
    if (!c[key].node().IsDefined()) c.fail("missing required key '" + key + "' (null for none): transformers' default is V3's");
  const Field q = c["q_lora_rank"];
  m.q_lora_rank = q.present() && !q.node().IsNull() ? width(c, "q_lora_rank") : 0;  // null: Q straight from the input (V2-Lite)
  m.kv_lora_rank = width(c, "kv_lora_rank");
  m.qk_nope_head_dim = width(c, "qk_nope_head_dim");
  m.qk_rope_head_dim = width(c, "qk_rope_head_dim");
  m.v_head_dim = width(c, "v_head_dim");
  t->form.kv_heads = 0;  // every head its own key and value
  if (c["n_routed_experts"].present() && !c["n_routed_experts"].node().IsNull()) {
    MoeShape& moe = t->moe;
    moe.experts = width(c, "n_routed_experts");
    moe.top_k = width(c, "num_experts_per_tok");
    moe.ffn = width(c, "moe_intermediate_size");
    const Field shared = c["n_shared_experts"];
    if (!shared.node().IsDefined()) c.fail("missing required key 'n_shared_experts' (null for none): transformers' default is V3's");
    moe.shared = shared.node().IsNull() ? 0 : to_int(shared, 0, 1024);
    t->first_dense = to_int(require(c, "first_k_dense_replace"), 0, 10000);
    if (int_or(c, "moe_layer_freq", 1, 1, 10000) != 1)
      c["moe_layer_freq"].fail("moe_layer_freq: Parallax plans DeepSeek's MoE blocks in every block after first_k_dense_replace (moe_layer_freq 1)");
    if (moe.top_k > moe.experts) c["num_experts_per_tok"].fail("num_experts_per_tok is more than the experts");
  }
  t->mtp_layers = int_or(c, "num_nextn_predict_layers", 0, 0, 16);
}

TransformerShape gpt2(const Field& c) {
  TransformerShape t;
  t.form.decoder = true;
  t.form.mlp = Mlp::gelu;
  t.blocks = to_int(require(c, "n_layer"), 1, 10000);
  t.hidden = width(c, "n_embd");
  t.heads = width(c, "n_head");
  t.ffn = c["n_inner"].present() ? width(c, "n_inner") : 4 * t.hidden;  // null: 4 x n_embd
  t.vocab = width(c, "vocab_size");
  t.form.tie_embeddings = bool_or(c, "tie_word_embeddings", true);
  if (c["activation_function"].present()) {
    const std::string act = to_text(c["activation_function"]);
    if (act.rfind("gelu", 0) != 0) c["activation_function"].fail("activation_function '" + act + "': GPT2LMHeadModel is read with a GELU only");
  }
  return t;
}

}  // namespace

const std::vector<std::string>& hf_architectures() { return kArchitectures; }

// rope_theta and rope_scaling ({rope_type or type, factor, mscale, mscale_all_dim, ...}; null:
// none), as stated: a trainer needs them to build the same model.
Rotary read_rotary(const Field& c) {
  Rotary r;
  if (const Field theta = c["rope_theta"]; theta.present()) r.base = to_number(theta, 0);
  if (const Field fraction = c["partial_rotary_factor"]; fraction.present()) r.fraction = to_number(fraction, 0);
  // transformers 5 holds the base, the rotated share and the scaling in one rope_parameters map
  // (its rope_type "default" being no scaling).
  const Field params = c["rope_parameters"];
  for (const Field& f : {params, c["rope_scaling"]})
    if (f.present() && !f.is_map())
      f.fail("'" + f.path() + "' must be a map ({rope_type, factor, ...}) or null, as transformers reads it; got " + (f.is_scalar() ? f.node().Scalar() : std::string("a list")));
  const bool v5 = params.present();
  if (v5 && params["rope_theta"].present()) r.base = to_number(params["rope_theta"], 0);
  if (v5 && params["partial_rotary_factor"].present()) r.fraction = to_number(params["partial_rotary_factor"], 0);
  const Field scaling = v5 ? params : c["rope_scaling"];
  if (!scaling.present()) return r;  // absent or null
  if (v5 && scaling["rope_type"].present() && to_text(scaling["rope_type"]) == "default") return r;
  const Field type = scaling["rope_type"].present() ? scaling["rope_type"] : scaling["type"];
  if (type.present()) r.scaling = to_text(type);
  if (scaling["factor"].present()) r.factor = to_number(scaling["factor"], 0);
  if (scaling["mscale"].present()) r.mscale = to_number(scaling["mscale"], 0);
  if (scaling["mscale_all_dim"].present()) r.mscale_all_dim = to_number(scaling["mscale_all_dim"], 0);
  if (const Field original = scaling["original_max_position_embeddings"]; original.present())
    r.original_max_positions = static_cast<int64_t>(to_number(original, 1));
  if (scaling["low_freq_factor"].present()) r.low_freq = to_number(scaling["low_freq_factor"], 0);
  if (scaling["high_freq_factor"].present()) r.high_freq = to_number(scaling["high_freq_factor"], 0);
  return r;
}

// What the config states that changes no cost but defines the model (Definition), by family.
Definition read_definition(const Field& c, const std::string& arch) {
  Definition d;
  for (const char* key : {"rms_norm_eps", "norm_eps", "layer_norm_eps", "layer_norm_epsilon"})
    if (c[key].present()) d.norm_eps = to_number(c[key], 0);
  d.norm_1p = arch == "NemotronForCausalLM";  // transformers' NemotronLayerNorm1P
  if (c["activation_function"].present()) {
    const std::string act = to_text(c["activation_function"]);
    d.gelu_tanh = act == "gelu_new" || act == "gelu_pytorch_tanh" || act == "gelu_fast";
  }
  d.router_renormalize = bool_or(c, "norm_topk_prob", arch == "MixtralForCausalLM" || arch == "Qwen3MoeForCausalLM");
  for (const char* key : {"router_aux_loss_coef", "aux_loss_alpha"})
    if (c[key].present()) d.router_aux_coeff = to_number(c[key], 0);
  d.router_aux_per_sequence = bool_or(c, "seq_aux", false);
  if (arch.rfind("Deepseek", 0) == 0) {
    d.router_score = c["scoring_func"].present() ? to_text(c["scoring_func"]) : "softmax";
    d.router_expert_bias = c["topk_method"].present() && to_text(c["topk_method"]) == "noaux_tc";
    d.router_groups = int_or(c, "n_group", 0, 0, 1 << 20);
    d.router_group_topk = int_or(c, "topk_group", 0, 0, 1 << 20);
    // Group-limited routing as transformers and Megatron-core run it: the experts split into
    // n_group equal groups, a token's top-k among the experts of its topk_group best groups.
    if (d.router_groups > 1) {
      const int64_t experts = int_or(c, "n_routed_experts", 0, 0, 1 << 20), top_k = int_or(c, "num_experts_per_tok", 0, 0, 1 << 20);
      if (experts % d.router_groups != 0)
        c["n_group"].fail("n_group " + std::to_string(d.router_groups) + " does not divide the " + std::to_string(experts) + " experts into equal groups");
      if (d.router_group_topk < 1 || d.router_group_topk > d.router_groups)
        c["topk_group"].fail("topk_group " + std::to_string(d.router_group_topk) + " is not a count of the " + std::to_string(d.router_groups) +
                             " groups (1 to n_group)");
      if (top_k > d.router_group_topk * (experts / d.router_groups))
        c["num_experts_per_tok"].fail("num_experts_per_tok " + std::to_string(top_k) + " is more than the " +
                                      std::to_string(d.router_group_topk * (experts / d.router_groups)) + " experts of topk_group groups");
    }
    if (c["routed_scaling_factor"].present()) d.router_scaling = to_number(c["routed_scaling_factor"], 0);
  }
  return d;
}

HfModel read_hf_config(const std::string& path, int64_t seq_len) {
  if (!std::filesystem::is_regular_file(path)) throw InputError(Location{path}, "no such Hugging Face config file");
  // A config.json is a few kilobytes; a path to something huge (a checkpoint, /proc/kcore) is a mistake.
  if (std::filesystem::file_size(path) > (std::uintmax_t{1} << 24))
    throw InputError(Location{path}, "larger than 16 MiB: not a Hugging Face config.json (give the model's config, not its weights)");
  // Read once: checked as JSON, then parsed as YAML for the fields' places.
  std::ifstream in(path, std::ios::binary);
  if (!in) throw InputError(Location{path}, "cannot open file (is it readable?)");
  std::stringstream buffer;
  buffer << in.rdbuf();
  const nlohmann::json json = parse_json(buffer.str(), path);
  const std::filesystem::path dir = std::filesystem::path(path).parent_path();
  const YamlDocument doc = YamlDocument::from_text(astral_escapes_for_yaml(buffer.str()), path, dir.empty() ? "." : dir.string());
  const Field c = Field::root(doc);
  check_types(json, c);
  // transformers picks the config class (and the defaults of fields left out) by model_type, the
  // model class by architectures: the two must name one family. A config saved from a bare config
  // class (LlamaConfig(...).save_pretrained, a from-scratch run's) has no architectures: its
  // model_type's causal LM then.
  static const std::map<std::string, std::string> kModelTypes = {
      {"LlamaForCausalLM", "llama"}, {"MistralForCausalLM", "mistral"}, {"Qwen2ForCausalLM", "qwen2"}, {"Qwen3ForCausalLM", "qwen3"},
      {"GPT2LMHeadModel", "gpt2"}, {"NemotronForCausalLM", "nemotron"}, {"MixtralForCausalLM", "mixtral"},
      {"Qwen2MoeForCausalLM", "qwen2_moe"}, {"Qwen3MoeForCausalLM", "qwen3_moe"}, {"DeepseekV2ForCausalLM", "deepseek_v2"},
      {"DeepseekV3ForCausalLM", "deepseek_v3"}};
  HfModel m;
  const Field archs = c["architectures"];
  if (archs.present() && !archs.node().IsNull()) {
    if (!archs.is_sequence() || archs.node().size() != 1)
      archs.fail("'architectures' must list exactly one architecture, one of: " + join(kArchitectures));
    m.architecture = to_choice(archs.elements().front(), kArchitectures);
  } else {
    const Field type = c["model_type"];
    if (!type.present() || type.node().IsNull())
      (archs.present() ? archs : c).fail("neither 'architectures' nor 'model_type' says the model's family (one of: " + join(kArchitectures) + ")");
    for (const auto& [arch, model_type] : kModelTypes)
      if (model_type == to_text(type)) m.architecture = arch;
    if (m.architecture.empty()) {
      std::vector<std::string> types;
      for (const auto& entry : kModelTypes) types.push_back(entry.second);
      type.fail("model_type '" + to_text(type) + "' is none Parallax reads (one of: " + join(types) + ")");
    }
  }
  if (const Field type = c["model_type"]; type.present() && to_text(type) != kModelTypes.at(m.architecture))
    type.fail("model_type '" + to_text(type) + "' is not " + m.architecture + "'s ('" + kModelTypes.at(m.architecture) + "')");
  const bool is_gpt2 = m.architecture == "GPT2LMHeadModel";
  std::vector<std::string> known = kIgnored;
  const bool is_moe = m.architecture == "MixtralForCausalLM" || m.architecture == "Qwen2MoeForCausalLM" ||
                      m.architecture == "Qwen3MoeForCausalLM";
  const bool is_deepseek = m.architecture.rfind("Deepseek", 0) == 0;
  if (is_gpt2) known.insert(known.end(), kGpt2.begin(), kGpt2.end());
  if (m.architecture == "MixtralForCausalLM") known.insert(known.end(), kMixtral.begin(), kMixtral.end());
  if (m.architecture.rfind("Qwen", 0) == 0 && is_moe) known.insert(known.end(), kQwen3Moe.begin(), kQwen3Moe.end());
  if (m.architecture == "Qwen2MoeForCausalLM") known.insert(known.end(), kQwen2MoeOnly.begin(), kQwen2MoeOnly.end());
  if (is_deepseek) known.insert(known.end(), kDeepSeek.begin(), kDeepSeek.end());
  for (const auto& [key, value] : json.items())
    if (key.starts_with("_") && std::find(known.begin(), known.end(), key) == known.end())
      known.push_back(key);  // transformers' own bookkeeping (_attn_implementation_autoset, ...)
  expect_keys(c, known);
  m.shape = is_gpt2 ? gpt2(c) : llama_family(c, m.architecture);
  if (m.shape.form.rope) m.shape.form.rotary = read_rotary(c);
  m.shape.form.definition = read_definition(c, m.architecture);
  if (is_moe) read_experts(c, m.architecture, &m.shape);
  if (is_deepseek) read_deepseek(c, &m.shape);
  // A head width other than hidden / heads is read from head_dim (Qwen3's wider heads, Minitron's
  // 48 heads of 128 at hidden 4,096); without it the heads must split the width.
  if (m.shape.form.head_dim == 0 && m.shape.hidden % m.shape.heads != 0)
    c[is_gpt2 ? "n_embd" : "hidden_size"].fail("the width " + std::to_string(m.shape.hidden) + " is not divisible by the " +
                                               std::to_string(m.shape.heads) + " attention heads, and no head_dim says each head's width");
  const int64_t kv = m.shape.form.kv_heads > 0 ? m.shape.form.kv_heads : m.shape.heads;
  if (kv > m.shape.heads || m.shape.heads % kv != 0)
    c["num_key_value_heads"].fail("num_key_value_heads " + std::to_string(kv) +
                                  (c["num_key_value_heads"].node().IsDefined() ? "" : " (not in the config: " + m.architecture + "'s default)") +
                                  " must divide num_attention_heads " + std::to_string(m.shape.heads));
  // Learned positions (GPT-2's table of n_positions rows) bound the sequence. Rotary ones do not:
  // a trainer computes them for the job's length (torchtitan precomputes them to its seq_len; its
  // December 2024 benchmarks, Table 2, trained Llama 3.1 8B at 262,144 tokens on a config stating
  // 131,072), so max_position_embeddings is recorded, not enforced.
  // The learned table is sized as the model's (n_positions rows; GPT2Config's default 1,024), of
  // which a sample uses its first seq_len, as GPT-2 indexes it.
  const Field window = c[is_gpt2 ? "n_positions" : "max_position_embeddings"];
  if (window.present()) m.max_positions = to_int(window, 1);
  if (!m.shape.form.rope) {
    if (m.max_positions == 0) m.max_positions = 1024;
    m.shape.form.position_rows = m.max_positions;
    if (seq_len > m.max_positions)
      (window.present() ? window : c).fail("the job's model.seq_len " + std::to_string(seq_len) + " is longer than the " +
                                           std::to_string(m.max_positions) + " positions this model takes" +
                                           (window.present() ? "" : " (n_positions, not in the config: GPT2Config's default)"));
  }
  // Sliding-window attention, where it is on, limits what each token attends to: Mistral's and
  // Mixtral's sliding_window in every block (model.sliding_window). The Qwen families switch it
  // with use_sliding_window and keep their first max_window_layers blocks full, a pattern
  // Parallax does not plan: past their window it refuses.
  // Absent, MistralConfig's sliding_window is 4096 (Mixtral's None). transformers' layer_types,
  // where a config states it, names each block's kind: a Qwen block of "sliding_attention" is one
  // past max_window_layers; elsewhere a window is every block's or none's.
  const Field sliding = c["sliding_window"];
  const bool qwen = m.architecture.rfind("Qwen", 0) == 0;
  const int64_t window_size = sliding.present() ? to_int(sliding, 1)
                              : !sliding.node().IsDefined() && (m.architecture == "MistralForCausalLM" || qwen) ? 4096
                                                                                                                : 0;
  int sliding_blocks = -1;  // as layer_types says; -1 without it
  if (const Field types = c["layer_types"]; types.present()) {
    // transformers' layer_type_validation: one kind per block.
    if (!types.is_sequence() || static_cast<int64_t>(types.node().size()) != m.shape.blocks)
      types.fail("'layer_types' must list each of the " + std::to_string(m.shape.blocks) +
                 " blocks' attention (full_attention | sliding_attention), as transformers checks it");
    sliding_blocks = 0;
    for (const Field& t : types.elements()) sliding_blocks += to_choice(t, {"full_attention", "sliding_attention"}) == "sliding_attention";
    if (!qwen && sliding_blocks > 0 && sliding_blocks != static_cast<int>(types.node().size()))
      types.fail("layer_types mixes full and sliding-window blocks; Parallax plans a window in every block or none");
  }
  // Qwen: the window is on only with use_sliding_window (transformers sets sliding_window to None
  // otherwise), in the blocks layer_types names, or else past the first max_window_layers.
  const bool qwen_sliding = bool_or(c, "use_sliding_window", false) &&
                            (sliding_blocks >= 0 ? sliding_blocks > 0 : int_or(c, "max_window_layers", 28, 0, 1 << 20) < m.shape.blocks);
  const bool sliding_on = window_size > 0 && (qwen ? qwen_sliding : sliding_blocks != 0);
  if (sliding_on && !qwen) m.shape.window = window_size;
  if (sliding_on && qwen && seq_len > window_size)
    (sliding.present() ? sliding : c["use_sliding_window"]).fail("sliding-window attention of " + std::to_string(window_size) + " tokens at model.seq_len " +
                 std::to_string(seq_len) + " in the blocks past max_window_layers: Parallax plans a window in every block or "
                 "every block but every n-th (model.full_attention_every); keep seq_len within the window");
  m.shape.seq_len = seq_len;
  return m;
}

}  // namespace parallax::plan
