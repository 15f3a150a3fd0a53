#pragma once
// A mixture-of-experts MLP in LibTorch (issue 59): a router picks each token's top_k experts, the
// routed experts are grouped weights (experts x out x in, torchtitan's GroupedExperts, the plan's
// parameters), and the shared experts see every token. Dropless: every routed token is computed.
//
// The router, as Mixtral and Qwen3-MoE's (norm_topk_prob) route: a bias-free linear gate, a softmax
// over the experts in fp32, the top_k of it, renormalised to sum to one. Top-1 keeps the
// probability itself, as the Switch Transformer does: renormalised it would be 1 and the router
// would learn nothing (worse, Adam would step on its rounding noise). No auxiliary loss (the
// DeepSeek-V3 report trains without one); the loss is the model's alone.
//
// Expert parallelism (parallel.expert > 1): rank r of an expert group of n holds experts
// [r E/n, (r+1) E/n). A block sends each rank the copies of the tokens routed to its experts with
// c10d's all-to-all (the counts first, then the tokens: Megatron-core's alltoall dispatcher),
// computes them, and sends the results back by the reverse all-to-all; in backward the gradients
// take the same two exchanges in reverse. Without a group every expert is local.
#include <torch/torch.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "exec/comm.hpp"
#include "plan/layers.hpp"

namespace parallax::exec {

/// The expert group one stage's MoE blocks exchange tokens over.
struct ExpertExchange {
  Group* group = nullptr;        ///< the expert group; nullptr: every expert local
  int rank = 0, size = 1;        ///< this rank's place in it, its ranks
  const Communicator* comm = nullptr;
  std::vector<int> peers;        ///< the group's global ranks (a failed wait names them)
  /// Records one exchange of rows (a dispatch with its counts' exchange before it, a combine, or
  /// either's backward): its span and the bytes this rank sent. Unset: not traced.
  std::function<void(int64_t begin_ns, int64_t end_ns, int64_t bytes)> traced;
};

class MoeImpl : public torch::nn::Module {
 public:
  /// The shared experts' MLP of a given width, built after the routed experts (the order of the
  /// random draws; bench/pipelining_torch.py's Moe draws the same).
  using MakeShared = std::function<std::pair<std::shared_ptr<torch::nn::Module>, std::function<torch::Tensor(const torch::Tensor&)>>(int64_t width)>;
  MoeImpl(const plan::LayerShape& s, const ExpertExchange* exchange, const MakeShared& make_shared);
  /// x: [seq, batch, hidden].
  torch::Tensor forward(const torch::Tensor& x);

 private:
  /// The routed copies (sorted by expert) through their experts, wherever those are.
  torch::Tensor routed(const torch::Tensor& sorted, const torch::Tensor& counts);
  /// Grouped tokens through the local experts, `counts[e]` rows for local expert e.
  torch::Tensor local_experts(const torch::Tensor& grouped, const std::vector<int64_t>& counts);

  plan::Mlp kind_;
  int64_t experts_, top_k_, local_;
  const ExpertExchange* exchange_;
  std::shared_ptr<torch::nn::Module> router_, experts_module_, shared_;
  torch::nn::Linear gate_{nullptr};
  torch::Tensor gate_proj_, up_proj_, down_proj_;  // [local, ffn, hidden], [local, hidden, ffn]
  std::function<torch::Tensor(const torch::Tensor&)> call_shared_;
};
TORCH_MODULE(Moe);

}  // namespace parallax::exec
