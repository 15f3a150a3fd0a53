#include "exec/model.hpp"

#include "plan/error.hpp"

namespace parallax::exec {
namespace {

// Token embedding plus learned positions; output [seq, batch, hidden] as LibTorch's encoder
// layers expect (no batch_first in its C++ API).
class EmbedImpl : public torch::nn::Module {
 public:
  EmbedImpl(int64_t vocab, int64_t hidden, int64_t seq_len)
      : tok(register_module("tok", torch::nn::Embedding(vocab, hidden))),
        pos(register_module("pos", torch::nn::Embedding(seq_len, hidden))) {}
  torch::Tensor forward(const torch::Tensor& ids) {
    const auto positions = torch::arange(ids.size(1), ids.options().dtype(torch::kLong));  // on the ids' device
    return (tok(ids) + pos(positions).unsqueeze(0)).transpose(0, 1).contiguous();
  }
  torch::nn::Embedding tok, pos;
};
TORCH_MODULE(Embed);

class HeadImpl : public torch::nn::Module {
 public:
  HeadImpl(int64_t hidden, int64_t vocab)
      : norm(register_module("norm", torch::nn::LayerNorm(torch::nn::LayerNormOptions({hidden})))),
        output(register_module("output", torch::nn::Linear(hidden, vocab))) {}
  torch::Tensor forward(const torch::Tensor& x) { return output(norm(x)); }
  torch::nn::LayerNorm norm;
  torch::nn::Linear output;
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

StageImpl::StageImpl(const plan::Plan& plan, int stage, uint64_t seed)
    : StageImpl(plan.layers(), plan.stages.at(stage).first_layer, plan.stages.at(stage).layer_count, seed) {}

StageImpl::StageImpl(const std::vector<plan::Layer>& layers, int first, int count, uint64_t seed) {
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
        auto m = Embed(s.vocab, s.hidden, s.seq_len).ptr();
        e.call_other = [m](const torch::Tensor& x) { return m->forward(x); };
        e.other = module = m;
        break;
      }
      case plan::LayerKind::encoder:
        // Dropout 0: runs with different layouts must compute the same function.
        e.encoder = torch::nn::TransformerEncoderLayer(
                        torch::nn::TransformerEncoderLayerOptions(s.hidden, s.heads).dim_feedforward(s.ffn).dropout(0.0))
                        .ptr();
        module = e.encoder;
        break;
      case plan::LayerKind::head: {
        auto m = Head(s.hidden, s.vocab).ptr();
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
