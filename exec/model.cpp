#include "exec/model.hpp"

#include <cmath>
#include <limits>

#include "exec/moe.hpp"
#include "plan/error.hpp"

namespace parallax::exec {
namespace {

// Token embedding plus learned positions, the table's first seq_len rows (none with rotary
// positions: the blocks rotate Q and K); output [seq, batch, hidden] as LibTorch's encoder layers expect (no batch_first in its C++ API).
class EmbedImpl : public torch::nn::Module {
 public:
  EmbedImpl(int64_t vocab, int64_t hidden, int64_t position_rows, bool positions)
      : tok(register_module("tok", torch::nn::Embedding(vocab, hidden))) {
    if (positions) pos = register_module("pos", torch::nn::Embedding(position_rows, hidden));
  }
  torch::Tensor forward(const torch::Tensor& ids) {
    auto x = tok(ids);
    if (pos) x = x + pos(torch::arange(ids.size(1), ids.options().dtype(torch::kLong))).unsqueeze(0);  // on the ids' device
    return x.transpose(0, 1).contiguous();
  }
  torch::nn::Embedding tok;
  torch::nn::Embedding pos{nullptr};
};
TORCH_MODULE(Embed);

// RMSNorm (Zhang and Sennrich 2019) as Hugging Face's LlamaRMSNorm computes it: in fp32, scaled
// by a learned weight. Written here because LibTorch 1.13 has no torch::nn::RMSNorm (2.4 added it).
class RMSNormImpl : public torch::nn::Module {
 public:
  explicit RMSNormImpl(int64_t hidden) : weight(register_parameter("weight", torch::ones({hidden}))) {}
  torch::Tensor forward(const torch::Tensor& x) {
    const auto x32 = x.to(torch::kFloat);
    return weight * (x32 * torch::rsqrt(x32.pow(2).mean(-1, /*keepdim=*/true) + kEps)).to(x.scalar_type());
  }
  static constexpr double kEps = 1e-5;
  torch::Tensor weight;
};
TORCH_MODULE(RMSNorm);

// A module behind one call: attention of either kind, a norm of either kind, a dense MLP or a MoE one.
struct Called {
  std::shared_ptr<torch::nn::Module> module;
  std::function<torch::Tensor(const torch::Tensor&)> call;
};
using Norm = Called;
Norm make_norm(plan::Norm kind, int64_t hidden) {
  if (kind == plan::Norm::rmsnorm) {
    auto m = RMSNorm(hidden).ptr();
    return {m, [m](const torch::Tensor& x) { return m->forward(x); }};
  }
  auto m = torch::nn::LayerNorm(torch::nn::LayerNormOptions({hidden})).ptr();
  return {m, [m](const torch::Tensor& x) { return m->forward(x); }};
}

// Rotary positions (Su et al. 2021) in the rotate-half form of GPT-NeoX and Hugging Face's Llama,
// base 10000, on x [batch, heads, seq, head_dim].
torch::Tensor rotate(const torch::Tensor& x) {
  const int64_t s = x.size(2), d = x.size(3);
  const auto opts = x.options().dtype(torch::kFloat);
  const auto inv_freq = 1.0 / torch::pow(10000.0, torch::arange(0, d, 2, opts) / static_cast<double>(d));
  const auto freqs = torch::outer(torch::arange(s, opts), inv_freq);
  const auto angles = torch::cat({freqs, freqs}, -1);
  const auto cos = angles.cos().to(x.scalar_type()), sin = angles.sin().to(x.scalar_type());
  const auto halves = x.chunk(2, -1);
  return x * cos + torch::cat({-halves[1], halves[0]}, -1) * sin;
}

// Causal self-attention with grouped key/value heads (each serves heads / kv_heads query heads),
// heads of head_dim (hidden / heads unless model.head_dim says), with model.qk_norm each head's
// query and key normed before the rotary positions (Qwen3Attention's q_norm and k_norm), and under
// model.sliding_window each query attending to its `window` most recent tokens, itself included.
class AttentionImpl : public torch::nn::Module {
 public:
  AttentionImpl(const plan::LayerShape& s)
      : heads_(s.heads), kv_heads_(s.kv_heads()), head_dim_(s.head_dim()), window_(s.window), rope_(s.form.rope),
        q_proj(register_module("q_proj", linear(s.hidden, s.q_width(), s.form.qkv_bias))),
        k_proj(register_module("k_proj", linear(s.hidden, s.k_width(), s.form.qkv_bias))),
        v_proj(register_module("v_proj", linear(s.hidden, s.v_width(), s.form.qkv_bias))),
        o_proj(register_module("o_proj", linear(s.attention_width(), s.hidden, s.form.bias))) {
    if (!s.form.qk_norm) return;
    q_norm = make_norm(s.form.norm, head_dim_);
    k_norm = make_norm(s.form.norm, head_dim_);
    register_module("q_norm", q_norm.module);
    register_module("k_norm", k_norm.module);
  }
  static torch::nn::Linear linear(int64_t in, int64_t out, bool bias) { return torch::nn::Linear(torch::nn::LinearOptions(in, out).bias(bias)); }

  torch::Tensor forward(const torch::Tensor& x) {  // [seq, batch, hidden]
    const int64_t s = x.size(0), b = x.size(1), d = head_dim_;
    auto split = [&](const torch::Tensor& t, int64_t n) { return t.view({s, b, n, d}).permute({1, 2, 0, 3}); };
    auto q = split(q_proj(x), heads_), k = split(k_proj(x), kv_heads_), v = split(v_proj(x), kv_heads_);
    if (q_norm.module) {
      q = q_norm.call(q);
      k = k_norm.call(k);
    }
    if (rope_) {
      q = rotate(q);
      k = rotate(k);
    }
    if (kv_heads_ < heads_) {
      k = k.repeat_interleave(heads_ / kv_heads_, 1);
      v = v.repeat_interleave(heads_ / kv_heads_, 1);
    }
    auto scores = torch::matmul(q, k.transpose(-2, -1)) / std::sqrt(static_cast<double>(d));
    // Masked: the future, and under a sliding window of W the keys W or more tokens back.
    auto masked = torch::ones({s, s}, x.options().dtype(torch::kBool)).triu(1);
    if (window_ > 0) masked = masked | torch::ones({s, s}, x.options().dtype(torch::kBool)).tril(-window_);
    scores = scores.masked_fill(masked, -std::numeric_limits<float>::infinity());
    const auto out = torch::matmul(torch::softmax(scores, -1), v);  // [batch, heads, seq, d]
    return o_proj(out.permute({2, 0, 1, 3}).reshape({s, b, heads_ * d}));
  }

 private:
  int64_t heads_, kv_heads_, head_dim_, window_;
  bool rope_;

 public:
  torch::nn::Linear q_proj, k_proj, v_proj, o_proj;
  Norm q_norm, k_norm;  // with model.qk_norm
};
TORCH_MODULE(Attention);

// Multi-head latent attention (DeepSeek-V2 and -V3), as Hugging Face's DeepseekV3Attention computes
// it and with its parameter names (plan/layers.cpp lists the same, in the same order): the input
// projected down to a query latent (or straight to the queries without a query rank, V2-Lite) and
// to a key-value latent plus one rotary key every head shares; each latent RMS-normed; up
// projections per head to the keys' and queries' unrotated parts and to the values. Rotary
// positions in the rotate-half form of the other blocks (DeepSeek's checkpoints interleave the
// rotary channels: the same function of a permuted weight, so training is the same), the softmax
// scaled by 1/sqrt(qk_nope_head_dim + qk_rope_head_dim) (no YaRN factor: the shipped configs
// train at their original length).
class LatentAttentionImpl : public torch::nn::Module {
 public:
  explicit LatentAttentionImpl(const plan::LayerShape& s) : heads_(s.heads), m_(s.form.mla) {
    const bool bias = s.form.qkv_bias;
    if (m_.q_lora_rank > 0) {
      q_a_proj = register_module("q_a_proj", AttentionImpl::linear(s.hidden, m_.q_lora_rank, bias));
      q_a_layernorm = register_module("q_a_layernorm", RMSNorm(m_.q_lora_rank));
      q_b_proj = register_module("q_b_proj", AttentionImpl::linear(m_.q_lora_rank, s.q_width(), false));
    } else {
      q_proj = register_module("q_proj", AttentionImpl::linear(s.hidden, s.q_width(), false));
    }
    kv_a_proj_with_mqa = register_module("kv_a_proj_with_mqa", AttentionImpl::linear(s.hidden, m_.kv_lora_rank + m_.qk_rope_head_dim, bias));
    kv_a_layernorm = register_module("kv_a_layernorm", RMSNorm(m_.kv_lora_rank));
    kv_b_proj = register_module("kv_b_proj",
                                AttentionImpl::linear(m_.kv_lora_rank, s.heads * (m_.qk_nope_head_dim + m_.v_head_dim), false));
    o_proj = register_module("o_proj", AttentionImpl::linear(s.attention_width(), s.hidden, s.form.bias));
  }

  torch::Tensor forward(const torch::Tensor& x) {  // [seq, batch, hidden]
    const int64_t s = x.size(0), b = x.size(1), nope = m_.qk_nope_head_dim, rope = m_.qk_rope_head_dim, v_dim = m_.v_head_dim;
    auto heads = [&](const torch::Tensor& t, int64_t n) { return t.reshape({s, b, n, -1}).permute({1, 2, 0, 3}); };  // [b, n, s, d]
    const auto q_all = heads(q_proj ? q_proj(x) : q_b_proj(q_a_layernorm(q_a_proj(x))), heads_);
    const auto q_parts = q_all.split({nope, rope}, -1);
    const auto latent = kv_a_proj_with_mqa(x).split({m_.kv_lora_rank, rope}, -1);
    const auto kv = heads(kv_b_proj(kv_a_layernorm(latent[0])), heads_).split({nope, v_dim}, -1);
    const auto k_rope = rotate(heads(latent[1], 1)).expand({b, heads_, s, rope});  // one rotary key for every head
    const auto q = torch::cat({q_parts[0], rotate(q_parts[1])}, -1), k = torch::cat({kv[0], k_rope}, -1);
    auto scores = torch::matmul(q, k.transpose(-2, -1)) / std::sqrt(static_cast<double>(nope + rope));
    const auto future = torch::ones({s, s}, x.options().dtype(torch::kBool)).triu(1);
    scores = scores.masked_fill(future, -std::numeric_limits<float>::infinity());
    const auto out = torch::matmul(torch::softmax(scores, -1), kv[1]);  // [batch, heads, seq, v_head_dim]
    return o_proj(out.permute({2, 0, 1, 3}).reshape({s, b, heads_ * v_dim}));
  }

 private:
  int64_t heads_;
  plan::Mla m_;

 public:
  torch::nn::Linear q_a_proj{nullptr}, q_b_proj{nullptr}, q_proj{nullptr}, kv_a_proj_with_mqa{nullptr}, kv_b_proj{nullptr}, o_proj{nullptr};
  RMSNorm q_a_layernorm{nullptr}, kv_a_layernorm{nullptr};
};
TORCH_MODULE(LatentAttention);

class MlpImpl : public torch::nn::Module {
 public:
  MlpImpl(const plan::LayerShape& s) : kind_(s.form.mlp) {
    if (kind_ == plan::Mlp::swiglu) gate_proj = register_module("gate_proj", AttentionImpl::linear(s.hidden, s.ffn, s.form.bias));
    up_proj = register_module("up_proj", AttentionImpl::linear(s.hidden, s.ffn, s.form.bias));
    down_proj = register_module("down_proj", AttentionImpl::linear(s.ffn, s.hidden, s.form.bias));
  }
  torch::Tensor forward(const torch::Tensor& x) {
    switch (kind_) {
      case plan::Mlp::swiglu: return down_proj(torch::silu(gate_proj(x)) * up_proj(x));
      case plan::Mlp::gelu: return down_proj(torch::gelu(up_proj(x)));
      case plan::Mlp::relu2: return down_proj(torch::relu(up_proj(x)).square());
      case plan::Mlp::relu: break;
    }
    return down_proj(torch::relu(up_proj(x)));
  }
  torch::nn::Linear gate_proj{nullptr}, up_proj{nullptr}, down_proj{nullptr};

 private:
  plan::Mlp kind_;
};
TORCH_MODULE(Mlp);

// The pre-norm decoder block of GPT and the Llama family: x + attention(norm(x)), then
// x + mlp(norm(x)); no dropout. Children registered as Hugging Face's LlamaDecoderLayer registers
// them (plan/layers.cpp lists the same parameters in the same order). Its self_attn is latent
// attention under model.mla; a MoE block's mlp is a Moe (exec/moe.hpp) over the stage's expert group.
class DecoderImpl : public torch::nn::Module {
 public:
  DecoderImpl(const plan::LayerShape& s, const ExpertExchange* experts)
      : self_attn(make_attention(s)),
        mlp(make_mlp(s, experts)),
        input_layernorm(make_norm(s.form.norm, s.hidden)),
        post_attention_layernorm(make_norm(s.form.norm, s.hidden)) {
    register_module("self_attn", self_attn.module);
    register_module("mlp", mlp.module);
    register_module("input_layernorm", input_layernorm.module);
    register_module("post_attention_layernorm", post_attention_layernorm.module);
  }
  torch::Tensor forward(torch::Tensor x) {
    x = x + self_attn.call(input_layernorm.call(x));
    return x + mlp.call(post_attention_layernorm.call(x));
  }
  Called self_attn, mlp;
  Norm input_layernorm, post_attention_layernorm;

 private:
  static Called make_attention(const plan::LayerShape& s) {
    if (s.form.mla.on()) {
      auto m = LatentAttention(s).ptr();
      return {m, [m](const torch::Tensor& x) { return m->forward(x); }};
    }
    auto m = Attention(s).ptr();
    return {m, [m](const torch::Tensor& x) { return m->forward(x); }};
  }
  static Called dense_mlp(plan::LayerShape s, int64_t width) {
    s.ffn = width;
    auto m = Mlp(s).ptr();
    return {m, [m](const torch::Tensor& x) { return m->forward(x); }};
  }
  static Called make_mlp(const plan::LayerShape& s, const ExpertExchange* experts) {
    if (!s.moe.on()) return dense_mlp(s, s.ffn);
    auto m = Moe(s, experts, [&s](int64_t width) {
      auto shared = dense_mlp(s, width);
      return std::make_pair(shared.module, shared.call);
    }).ptr();
    return {m, [m](const torch::Tensor& x) { return m->forward(x); }};
  }
};
TORCH_MODULE(Decoder);

// The final norm and the projection to the vocabulary: its own Linear (with a bias in LibTorch's
// encoder model, none in a decoder's), or the embedding's matrix when the embeddings are tied.
class HeadImpl : public torch::nn::Module {
 public:
  HeadImpl(const plan::LayerShape& s, torch::Tensor tied) : norm(make_norm(s.form.norm, s.hidden)), tied_(std::move(tied)) {
    register_module("norm", norm.module);
    if (!tied_.defined()) output = register_module("output", AttentionImpl::linear(s.hidden, s.vocab, !s.form.decoder));
  }
  torch::Tensor forward(const torch::Tensor& x) {
    const auto y = norm.call(x);
    return tied_.defined() ? torch::nn::functional::linear(y, tied_) : output(y);
  }
  Norm norm;
  torch::nn::Linear output{nullptr};

 private:
  torch::Tensor tied_;
};
TORCH_MODULE(Head);

// Registers `child` under a dotted name, creating plain holder modules for the prefixes
// ("layers.4" -> holder "layers", child "4"), as nn.ModuleDict does in Python.
void register_dotted(torch::nn::Module& root, const std::string& dotted, std::shared_ptr<torch::nn::Module> child) {
  torch::nn::Module* at = &root;
  std::string rest = dotted;
  for (auto dot = rest.find('.'); dot != std::string::npos; dot = rest.find('.')) {
    const std::string head = rest.substr(0, dot);
    rest = rest.substr(dot + 1);
    std::shared_ptr<torch::nn::Module> next;
    for (const auto& c : at->named_children())
      if (c.key() == head) next = c.value();
    if (!next) next = at->register_module(head, std::make_shared<torch::nn::Module>());
    at = next.get();
  }
  at->register_module(rest, std::move(child));
}

}  // namespace

StageImpl::StageImpl(const plan::Plan& plan, int stage, uint64_t seed, const ExpertExchange* experts)
    : StageImpl(plan.layers(), plan.stages.at(stage).first_layer, plan.stages.at(stage).layer_count, seed, experts) {}

StageImpl::StageImpl(const std::vector<plan::Layer>& layers, int first, int count, uint64_t seed, const ExpertExchange* experts) {
  torch::Tensor embedding;  // the token embedding's matrix, which a tied head projects with
  for (int l = first; l < first + count; ++l) {
    const plan::Layer& layer = layers[l];
    torch::manual_seed(seed * 1000003ULL + static_cast<uint64_t>(l));
    const auto& s = layer.shape;
    Entry e{layer.kind, s.relu, nullptr, nullptr, nullptr, {}};
    std::shared_ptr<torch::nn::Module> module;
    switch (layer.kind) {
      case plan::LayerKind::linear:
        e.linear = torch::nn::Linear(torch::nn::LinearOptions(s.in, s.out).bias(s.bias)).ptr();
        module = e.linear;
        break;
      case plan::LayerKind::embedding: {
        auto m = Embed(s.vocab, s.hidden, s.position_rows(), !s.form.rope).ptr();
        embedding = m->tok->weight;
        e.call_other = [m](const torch::Tensor& x) { return m->forward(x); };
        e.other = module = m;
        break;
      }
      case plan::LayerKind::encoder:
        if (s.form.decoder) {
          auto m = Decoder(s, experts).ptr();
          e.call_other = [m](const torch::Tensor& x) { return m->forward(x); };
          e.other = module = m;
          break;
        }
        // Dropout 0: runs with different layouts must compute the same function.
        e.encoder = torch::nn::TransformerEncoderLayer(
                        torch::nn::TransformerEncoderLayerOptions(s.hidden, s.heads).dim_feedforward(s.ffn).dropout(0.0))
                        .ptr();
        module = e.encoder;
        break;
      case plan::LayerKind::head: {
        // Tied: the embedding's matrix, on this stage (plan/executable.cpp keeps a tied model on one
        // stage). A head built without its embedding (calibrate times one layer at a time) projects
        // with a matrix of its own, the same work.
        auto m = Head(s, s.form.tie_embeddings ? embedding : torch::Tensor()).ptr();
        e.call_other = [m](const torch::Tensor& x) { return m->forward(x); };
        e.other = module = m;
        break;
      }
      case plan::LayerKind::synthetic: throw std::logic_error("synthetic layers cannot be executed");
    }
    register_dotted(*this, layer.name, module);
    layers_.push_back(std::move(e));
  }
}

torch::Tensor StageImpl::forward(torch::Tensor x) {
  for (int i = 0; i < layer_count(); ++i) x = forward_layer(i, x);
  return x;
}

std::vector<torch::Tensor> StageImpl::layer_parameters(int index) const {
  const Entry& e = layers_[index];
  if (e.linear) return e.linear->parameters();
  if (e.encoder) return e.encoder->parameters();
  return e.other ? e.other->parameters() : std::vector<torch::Tensor>{};
}

torch::Tensor StageImpl::forward_layer(int index, torch::Tensor x) {
  const Entry& e = layers_[index];
  if (e.linear) {
    x = e.linear->forward(x);
    return e.relu ? torch::relu(x) : x;
  }
  if (e.encoder) return e.encoder->forward(x);
  return e.call_other(x);
}

torch::ScalarType compute_dtype(plan::Precision p) {
  return p == plan::Precision::bf16 ? torch::kBFloat16 : p == plan::Precision::fp16 ? torch::kHalf : torch::kFloat;
}

std::unique_ptr<torch::optim::Optimizer> make_optimizer(const plan::OptimizerSpec& o, const std::vector<torch::Tensor>& params) {
  if (o.kind == "sgd")
    return std::make_unique<torch::optim::SGD>(params, torch::optim::SGDOptions(o.lr).momentum(o.momentum).weight_decay(o.weight_decay));
  if (o.kind == "adam") return std::make_unique<torch::optim::Adam>(params, torch::optim::AdamOptions(o.lr).weight_decay(o.weight_decay));
  return std::make_unique<torch::optim::AdamW>(params, torch::optim::AdamWOptions(o.lr).weight_decay(o.weight_decay));
}

std::vector<int64_t> output_shape(const plan::Layer& layer, int64_t microbatch) {
  const auto& s = layer.shape;
  switch (layer.kind) {
    case plan::LayerKind::linear: return {microbatch, s.out};
    case plan::LayerKind::embedding:
    case plan::LayerKind::encoder: return {s.seq_len, microbatch, s.hidden};
    case plan::LayerKind::head: return {s.seq_len, microbatch, s.vocab};
    case plan::LayerKind::synthetic: break;
  }
  throw std::logic_error("no output shape for a synthetic layer");
}

torch::Tensor model_loss(const plan::Layer& last, const torch::Tensor& output, const torch::Tensor& target) {
  if (last.kind == plan::LayerKind::head) {
    // [seq, batch, vocab] against [batch, seq].
    const auto logits = output.transpose(0, 1).reshape({-1, last.shape.vocab}).to(torch::kFloat);
    return torch::nn::functional::cross_entropy(logits, target.reshape({-1}));
  }
  return torch::nn::functional::cross_entropy(output.to(torch::kFloat), target);
}

}  // namespace parallax::exec
