#include "plan/layers.hpp"

#include <algorithm>

#include <cmath>

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

// The ffn-wide tensors a dense MLP keeps for its backward, the down projection's input among them.
// Megatron-core's fused SwiGLU keeps its input (gate and up, 2 x ffn) and the down projection's
// input; GELU and squared ReLU keep their input and output; ReLU's backward takes its output
// (threshold_backward on the result), which is the down projection's input (`shared`): one
// tensor, unless the down projection keeps a copy of its own (fp8's cast).
double mlp_kept_tensors(Mlp mlp, bool shared) {
  switch (mlp) {
    case Mlp::relu: return shared ? 1.0 : 2.0;
    case Mlp::swiglu: return 3.0;
    case Mlp::gelu:
    case Mlp::relu2: return 2.0;
  }
  return 2.0;
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

const char* name(Loss l) {
  switch (l) {
    case Loss::eager: return "eager";
    case Loss::megatron: return "megatron";
    case Loss::fused: return "fused";
  }
  return "?";
}

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

const Layer* first_moe_layer(const std::vector<Layer>& layers) {
  for (const Layer& l : layers)
    if (l.shape.moe.on()) return &l;
  return nullptr;
}

int moe_block_count(const std::vector<Layer>& layers) {
  return static_cast<int>(std::count_if(layers.begin(), layers.end(), [](const Layer& l) { return l.shape.moe.on(); }));
}

int64_t Layer::param_count(int tensor, int expert, int expert_tensor) const {
  int64_t n = 0;
  for (const auto& p : params) n += p.numel_on(tensor, expert, expert_tensor);
  return n;
}

int64_t Layer::expert_param_count(int tensor, int expert, int expert_tensor) const {
  int64_t n = 0;
  for (const auto& p : params)
    if (p.expert) n += p.numel_on(tensor, expert, expert_tensor);
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
  if (!form.rope) l.params.push_back({name + ".pos.weight", {l.shape.position_rows(), hidden}});
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
  const double qw = static_cast<double>(sh.q_width()), aw = static_cast<double>(sh.attention_width());
  // Dropout at p = 0 returns its input (ATen's dropout): no mask, no second copy of the scores.
  const bool dropout = sh.form.dropout > 0;
  const double mask = dropout ? kMaskBytes : 0.0;
  const double mlp_tensors = mlp_kept_tensors(sh.form.mlp, linear_e == e);
  // LibTorch's encoder layer also drops inside its MLP (linear2(dropout(relu(linear1(x))))): the
  // activation's output, the mask and the dropped copy (the second linear's input) are apart.
  const double ffn_dropout = dropout && !sh.form.decoder ? e + mask : 0.0;
  BlockActivations out;
  // The two norms' inputs and the inputs of QKV and of the MLP, whole on every tensor rank, and
  // the masks of the two dropouts after attention and after the MLP.
  out.unsplit = s * h * (2 * e + 2 * linear_e + 2 * mask);
  out.norm_outputs = s * h * 2 * linear_e;
  if (sh.mtp) out.unsplit += s * h * (2 * e + 2 * linear_e);  // enorm's and hnorm's inputs, eh_proj's (2 x hidden)
  if (sh.form.mla.on()) {
    // Latent attention's down projections, whole on every tensor rank (split by sequence
    // parallelism alone): their outputs (the latent norms' inputs, the rotary key before its
    // rotation) and the normed latents (the up projections' inputs).
    const Mla& m = sh.form.mla;
    out.unsplit += s * (e * static_cast<double>(m.latent_width()) + linear_e * static_cast<double>(m.q_lora_rank + m.kv_lora_rank));
  }
  // Q, the output projection's input, and the MLP's ffn-wide tensors (the last is the down
  // projection's input).
  const double attention = e * qw + linear_e * aw;
  out.split = s * (attention + (e * (mlp_tensors - 1) + ffn_dropout + linear_e) * ffn);
  out.mlp_split = s * (e * (mlp_tensors - 1) + ffn_dropout + linear_e) * ffn;
  if (sh.form.mla.on()) out.mla_q = s * e * qw;
  if (sh.form.qk_norm) out.split += s * e * qw;  // the query norm's input (the query projection's output)
  if (sh.moe.on()) {
    // A token's k routed experts and the shared ones keep the MLP's ffn-wide tensors each, at the
    // experts' width; the routed ones also keep the token's dispatched copy (their GEMMs' input)
    // and, where the router's weights scale their outputs, those outputs (the weights take
    // gradients from them; scaling the activation instead takes them from its input, kept
    // anyway). The router keeps its fp32 probabilities.
    const double k = static_cast<double>(sh.moe.top_k), width = static_cast<double>((sh.moe.top_k + sh.moe.shared) * sh.moe.ffn);
    const double outputs = sh.moe.weighted_activation ? 0.0 : e;
    out.moe_split = s * (e * (mlp_tensors - 1) * width + linear_e * width + k * h * (linear_e + outputs));
    out.split = s * attention + out.moe_split;
    out.mlp_split = 0;
    out.moe_unsplit = s * 4.0 * static_cast<double>(sh.moe.experts);
    out.unsplit += out.moe_unsplit;
    out.expert_act = s * linear_e * k * static_cast<double>(sh.moe.ffn);
  }
  // K and V (rotated, with rotary positions: RoPE fused keeps no more; latent attention's K holds
  // the shared rotary key once per head, as the attention kernel takes it).
  out.kv = s * e * static_cast<double>(sh.k_width() + sh.v_width());
  if (sh.form.qk_norm) out.kv += s * e * static_cast<double>(sh.k_width());  // the key norm's input
  // The scores per head: softmax output, and with dropout its mask and output. Flash attention
  // keeps no scores, only its softmax statistics (one fp32 per row and head).
  out.scores = sh.flash_attention ? a * s * 4.0 : a * s * s * (dropout ? 2 * e + mask : e);
  return out;
}

std::vector<Matmul> block_matmuls(const LayerShape& sh, double t) {
  const double h = static_cast<double>(sh.hidden), ffn = static_cast<double>(sh.ffn) / t, qw = static_cast<double>(sh.q_width()) / t;
  const double aw = static_cast<double>(sh.attention_width()) / t;
  std::vector<Matmul> out;
  if (const Mla& m = sh.form.mla; m.on()) {
    // torchtitan's DeepSeek-V3 attention: wq (or wq_a, wq_b), wkv_a, wkv_b, wo; the down
    // projections whole on every tensor rank.
    const double heads = static_cast<double>(sh.heads) / t, q_rank = static_cast<double>(m.q_lora_rank);
    const double kv_rank = static_cast<double>(m.kv_lora_rank);
    // One push_back a matmul: g++ 12 warns falsely (-Warray-bounds) on inserting initializer lists.
    if (m.q_lora_rank > 0) {
      out.push_back({q_rank, h});
      out.push_back({qw, q_rank});
    } else {
      out.push_back({qw, h});
    }
    out.push_back({kv_rank + static_cast<double>(m.qk_rope_head_dim), h});
    out.push_back({heads * static_cast<double>(m.qk_nope_head_dim + m.v_head_dim), kv_rank});
    out.push_back({h, aw});
  } else {
    const double kv = static_cast<double>(sh.kv_heads()), kv_width = kv * static_cast<double>(sh.head_dim()) / std::min(t, kv);
    out = {{qw, h}, {kv_width, h}, {kv_width, h}, {h, aw}};
  }
  if (sh.form.mlp == Mlp::swiglu) out.push_back({ffn, h});  // the gate, beside the up projection
  out.push_back({ffn, h});
  out.push_back({h, ffn});
  return out;
}

// torchtitan's op policy (torchtitan/parallelisms/parallelize_llama.py, `_save_list`, 2024-12): an
// op's output is saved when it is aten.mm, except every second one in the block's forward, or the
// flash or efficient scaled_dot_product_attention, or a functional reduce-scatter; everything else
// in the block (norms, rotary positions, the activation function, the residual adds) is recomputed
// from the block's input.
// Flash attention only (parse_scenario checks): the math kernel's batched matmuls are not saved.
double op_checkpoint_bytes(const LayerShape& sh, double e, double t, double sp) {
  const double s = static_cast<double>(sh.seq_len), h = static_cast<double>(sh.hidden);
  const std::vector<Matmul> mm = block_matmuls(sh, t);
  double kept = h / sp;  // the checkpoint's input
  for (size_t i = 0; i < mm.size(); i += 2) kept += mm[i].out;
  kept += static_cast<double>(sh.attention_width()) / t;  // attention's output
  if (sp > 1) kept += 2 * h / sp;                  // the reduce-scatters after wo and w2 (kept too) under sequence parallelism
  const double statistics = static_cast<double>(sh.heads) / t * 4.0;  // flash attention's fp32 log-sum-exp per row and head
  return s * (kept * e + statistics);
}

bool op_checkpointing_derived(const Layer& l) {
  return l.kind != LayerKind::encoder || (!l.shape.moe.on() && l.shape.flash_attention && !l.shape.form.mla.on());
}

// A mixture-of-experts block's MLP, in torchtitan's MoE module order: the router's gate, the
// routed experts as grouped weights (experts x out x in), then the shared experts as one gated MLP
// of shared x ffn (as Megatron-core's SharedExpertMLP fuses them).
static void add_moe_params(Layer& l, const std::string& p, int64_t hidden, const MoeShape& moe, const BlockForm& form) {
  l.params.push_back({p + "mlp.router.gate.weight", {moe.experts, hidden}});
  const bool gated = form.mlp == Mlp::swiglu;
  if (gated) l.params.push_back({p + "mlp.experts.gate_proj", {moe.experts, moe.ffn, hidden}, true, 0, true});
  l.params.push_back({p + "mlp.experts.up_proj", {moe.experts, moe.ffn, hidden}, true, 0, true});
  l.params.push_back({p + "mlp.experts.down_proj", {moe.experts, hidden, moe.ffn}, true, 0, true});
  if (moe.shared == 0) return;
  const int64_t width = moe.shared * moe.ffn;
  if (gated) add_linear_params(l, p + "mlp.shared_experts.gate_proj.", hidden, width, form.bias, Split::column);
  add_linear_params(l, p + "mlp.shared_experts.up_proj.", hidden, width, form.bias, Split::column);
  add_linear_params(l, p + "mlp.shared_experts.down_proj.", width, hidden, form.bias, Split::row);
}

// Latent attention's projections in Hugging Face's DeepseekV3Attention order: q_a_proj,
// q_a_layernorm, q_b_proj (or q_proj without a query rank), kv_a_proj_with_mqa, kv_a_layernorm,
// kv_b_proj (o_proj follows). The down projections and the latent norms are whole on every tensor
// rank (Megatron-core's duplicated linears); the up projections are split by heads.
static void add_latent_attention_params(Layer& l, const std::string& p, const LayerShape& sh) {
  const Mla& m = sh.form.mla;
  const bool bias = sh.form.qkv_bias;
  if (m.q_lora_rank > 0) {
    add_linear_params(l, p + "q_a_proj.", sh.hidden, m.q_lora_rank, bias, Split::none);
    add_norm_params(l, p + "q_a_layernorm.", m.q_lora_rank, Norm::rmsnorm);
    add_linear_params(l, p + "q_b_proj.", m.q_lora_rank, sh.q_width(), false, Split::column);
  } else {
    add_linear_params(l, p + "q_proj.", sh.hidden, sh.q_width(), false, Split::column);
  }
  add_linear_params(l, p + "kv_a_proj_with_mqa.", sh.hidden, m.kv_lora_rank + m.qk_rope_head_dim, bias, Split::none);
  add_norm_params(l, p + "kv_a_layernorm.", m.kv_lora_rank, Norm::rmsnorm);
  add_linear_params(l, p + "kv_b_proj.", m.kv_lora_rank, sh.heads * (m.qk_nope_head_dim + m.v_head_dim), false, Split::column);
}

double attention_core_flops_per_sample(const LayerShape& sh) {
  const double s = static_cast<double>(sh.seq_len);
  return 2.0 * s * s * static_cast<double>(sh.q_width() + sh.attention_width());
}

Layer make_encoder(const std::string& name, int64_t hidden, int64_t heads, int64_t ffn,
                   int64_t seq_len, bool flash_attention, const BlockForm& form, const MoeShape& moe) {
  Layer l;
  l.name = name;
  l.kind = LayerKind::encoder;
  l.shape.hidden = hidden;
  l.shape.heads = heads;
  l.shape.ffn = ffn;
  l.shape.seq_len = seq_len;
  l.shape.flash_attention = flash_attention;
  l.shape.form = form;
  l.shape.moe = moe;
  const std::string p = name + ".";
  const int64_t kv = l.shape.kv_heads(), kv_width = l.shape.head_dim() * kv, qw = l.shape.q_width();
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
    if (form.mla.on()) {
      add_latent_attention_params(l, p + "self_attn.", l.shape);
    } else {
      add_linear_params(l, p + "self_attn.q_proj.", hidden, qw, form.qkv_bias, Split::column);
      for (const char* proj : {"k_proj.", "v_proj."}) {
        const size_t first = l.params.size();
        add_linear_params(l, p + "self_attn." + proj, hidden, kv_width, form.qkv_bias, Split::column);
        for (size_t i = first; i < l.params.size(); ++i) l.params[i].max_split = kv;  // replicated past kv heads
      }
    }
    add_linear_params(l, p + "self_attn.o_proj.", l.shape.attention_width(), hidden, form.bias, Split::row);
    if (form.qk_norm) {  // Qwen3Attention's q_norm and k_norm, over one head's width: whole on every tensor rank
      add_norm_params(l, p + "self_attn.q_norm.", l.shape.head_dim(), form.norm);
      add_norm_params(l, p + "self_attn.k_norm.", l.shape.head_dim(), form.norm);
    }
    if (moe.on()) {
      add_moe_params(l, p, hidden, moe, form);
    } else {
      if (form.mlp == Mlp::swiglu) add_linear_params(l, p + "mlp.gate_proj.", hidden, ffn, form.bias, Split::column);
      add_linear_params(l, p + "mlp.up_proj.", hidden, ffn, form.bias, Split::column);
      add_linear_params(l, p + "mlp.down_proj.", ffn, hidden, form.bias, Split::row);
    }
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
  // Per token: 2 FLOPs per weight of the attention's projections (Q and the output projection
  // 2h^2 each, K and V 2*h*kv_width each; latent attention's down and up projections) and of the
  // MLP (2*h*ffn per matrix, three for SwiGLU); per sample the scores and the attention-weighted
  // values add 2*s^2 per query width and per value width (4*s^2*h at full attention; grouped-query
  // attention shares K and V, not the work per query head).
  // A MoE block's tokens each pass top_k routed and the shared experts, and the router's gate.
  const double mlp_matrices = form.mlp == Mlp::swiglu ? 3.0 : 2.0;
  const double mlp_width = moe.on() ? static_cast<double>((moe.top_k + moe.shared) * moe.ffn) : static_cast<double>(ffn);
  const double router = moe.on() ? 2.0 * h * static_cast<double>(moe.experts) : 0.0;
  const double q = static_cast<double>(qw);  // hidden, unless head_dim says otherwise
  double projections = 4.0 * h * q + 4.0 * h * static_cast<double>(kv_width);
  if (form.mla.on()) {
    const std::vector<Matmul> mm = block_matmuls(l.shape, 1);
    projections = 0;
    for (size_t i = 0; i + (form.mlp == Mlp::swiglu ? 3 : 2) < mm.size(); ++i) projections += 2.0 * mm[i].out * mm[i].in;
  }
  l.flops_per_sample = s * (projections + 2.0 * mlp_matrices * h * mlp_width + router) + attention_core_flops_per_sample(l.shape);
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

void set_vocabulary(Layer* l, int64_t vocab) {
  const int64_t was = l->shape.vocab;
  if ((l->kind != LayerKind::embedding && l->kind != LayerKind::head) || vocab == was) return;
  // The vocabulary-parallel rows: the token table, the output projection's weight and bias.
  for (ParamSpec& p : l->params)
    if (p.tensor_split && !p.shape.empty() && p.shape[0] == was) p.shape[0] = vocab;
  if (l->kind == LayerKind::head) {
    const double s = static_cast<double>(l->shape.seq_len), more = static_cast<double>(vocab - was);
    const double n = std::max(1, l->shape.predictions);  // each prediction's logits (multi-token prediction)
    l->activation_elems_per_sample += n * s * more;
    l->output_elems_per_sample += s * more;
    l->flops_per_sample += n * 2.0 * s * static_cast<double>(l->shape.hidden) * more;
  }
  l->shape.vocab = vocab;
}

// A multi-token prediction module's own parameters and work, in Megatron-core's
// MultiTokenPredictionLayer order: enorm and hnorm, then eh_proj (2 x hidden to hidden,
// column-parallel, no bias), before its block's. Its copy of the embedding on a pipeline's last
// stage is not counted (it is the first stage's matrix under one pipeline stage).
static void add_mtp_projection(Layer& l) {
  const int64_t h = l.shape.hidden;
  std::vector<ParamSpec> own;
  std::swap(own, l.params);
  add_norm_params(l, l.name + ".enorm.", h, l.shape.form.norm);
  add_norm_params(l, l.name + ".hnorm.", h, l.shape.form.norm);
  add_linear_params(l, l.name + ".eh_proj.", 2 * h, h, false, Split::column);
  l.params.insert(l.params.end(), own.begin(), own.end());
  l.shape.mtp = true;
  const double s = static_cast<double>(l.shape.seq_len), hd = static_cast<double>(h);
  l.flops_per_sample += s * 2.0 * 2.0 * hd * hd;
  l.activation_elems_per_sample += s * 4.0 * hd;  // the two norms' inputs and eh_proj's input (block_activations)
}

double LayerShape::keys_per_query() const {
  const double s = static_cast<double>(seq_len), w = static_cast<double>(window);
  if (window <= 0 || window >= seq_len) return s / 2;
  return (w * s - w * (w - 1) / 2) / s;
}

std::vector<Layer> make_transformer(const TransformerShape& t) {
  std::vector<Layer> layers;
  layers.push_back(make_embedding("embed", t.vocab, t.hidden, t.seq_len, t.form));
  for (int64_t i = 0; i < t.blocks; ++i) {
    layers.push_back(make_encoder("layers." + std::to_string(i), t.hidden, t.heads, t.ffn, t.seq_len, t.flash_attention, t.form,
                                  t.moe_block(i) ? t.moe : MoeShape{}));
    layers.back().shape.flash2 = t.flash2;
    layers.back().shape.eager = t.eager;
    layers.back().shape.window = t.block_window(i);
  }
  for (int64_t k = 0; k < t.mtp_layers; ++k) {
    layers.push_back(make_encoder("mtp." + std::to_string(k), t.hidden, t.heads, t.ffn, t.seq_len, t.flash_attention, t.form,
                                  t.moe_block(t.blocks + k) ? t.moe : MoeShape{}));
    Layer& l = layers.back();
    l.shape.flash2 = t.flash2;
    l.shape.eager = t.eager;
    l.shape.window = t.block_window(t.blocks + k);
    add_mtp_projection(l);
  }
  layers.push_back(make_head("head", t.hidden, t.vocab, t.seq_len, t.form));
  layers.back().shape.loss = t.loss;
  if (t.mtp_layers > 0) {
    Layer& head = layers.back();
    head.shape.predictions = static_cast<int>(1 + t.mtp_layers);
    const double n = static_cast<double>(head.shape.predictions);
    head.activation_elems_per_sample *= n;
    head.flops_per_sample *= n;
  }
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

}  // namespace parallax::plan
