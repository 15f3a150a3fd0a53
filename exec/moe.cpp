#include "exec/moe.hpp"

#include <cmath>
#include <numeric>
#include <utility>

#include "profiler/host_tracer.hpp"

namespace parallax::exec {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

std::vector<int64_t> to_vector(const torch::Tensor& t) {
  const auto c = t.to(torch::kCPU, torch::kLong).contiguous();
  return {c.data_ptr<int64_t>(), c.data_ptr<int64_t>() + c.numel()};
}

int64_t sum(const std::vector<int64_t>& v) { return std::accumulate(v.begin(), v.end(), int64_t{0}); }

// One all-to-all of rows: `send[j]` rows of x to rank j, `recv[j]` rows from it, in rank order.
// `begin_ns`: when the exchange began (a dispatch's counts went first), 0: now.
torch::Tensor exchange_rows(const ExpertExchange& ex, const torch::Tensor& x, std::vector<int64_t> send,
                            std::vector<int64_t> recv, const char* what, bool backward, int64_t begin_ns = 0) {
  // An all-to-all only moves bytes: bf16 travels as fp16's bits, which Gloo's all-to-all takes
  // (this LibTorch's refuses bf16 as "Invalid scalar type").
  const bool bf16 = x.scalar_type() == torch::kBFloat16;
  auto in = bf16 ? x.contiguous().view(torch::kHalf) : x.contiguous();
  auto out = torch::empty({sum(recv), in.size(1)}, in.options());
  const int64_t begin = begin_ns > 0 ? begin_ns : profiler::now_ns();
  auto work = ex.group->alltoall_base(out, in, recv, send);
  ex.comm->wait(work, std::string("the ") + what + " all-to-all of a MoE block" + (backward ? " (backward)" : ""), ex.peers);
  if (ex.traced) ex.traced(begin, profiler::now_ns(), in.numel() * static_cast<int64_t>(in.element_size()));
  return bf16 ? out.view(torch::kBFloat16) : out;
}

// The all-to-all as an autograd function: backward sends the gradients back the way the rows came.
// The exchange is passed by address (saved as an integer: AutogradContext keeps IValues only); it
// belongs to the runtime's stage and outlives every graph built on it.
struct AllToAll : public torch::autograd::Function<AllToAll> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& x, const ExpertExchange* ex,
                               const std::vector<int64_t>& send, const std::vector<int64_t>& recv, const char* what,
                               int64_t begin_ns) {
    ctx->saved_data["exchange"] = static_cast<int64_t>(reinterpret_cast<intptr_t>(ex));
    ctx->saved_data["what"] = std::string(what);
    ctx->saved_data["send"] = send;
    ctx->saved_data["recv"] = recv;
    return exchange_rows(*ex, x, send, recv, what, false, begin_ns);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto* ex = reinterpret_cast<const ExpertExchange*>(static_cast<intptr_t>(ctx->saved_data["exchange"].toInt()));
    const std::string what = ctx->saved_data["what"].toStringRef();
    auto grad = exchange_rows(*ex, grads[0], ctx->saved_data["recv"].toIntVector(), ctx->saved_data["send"].toIntVector(),
                              what.c_str(), true);
    return {grad, torch::Tensor(), torch::Tensor(), torch::Tensor(), torch::Tensor(), torch::Tensor()};
  }
};

// Grouped expert weights drawn whole (every rank draws the same numbers, so a layer starts from
// the same weights on any layout) as a Linear of that shape is initialised (bound 1/sqrt(in)), and
// this rank's experts kept.
torch::Tensor grouped_weight(int64_t experts, int64_t out, int64_t in, int64_t first, int64_t count) {
  const double bound = 1.0 / std::sqrt(static_cast<double>(in));
  auto whole = torch::empty({experts, out, in}).uniform_(-bound, bound);
  return whole.narrow(0, first, count).clone();
}

}  // namespace

MoeImpl::MoeImpl(const plan::LayerShape& s, const ExpertExchange* exchange, const MakeShared& make_shared)
    : kind_(s.form.mlp), experts_(s.moe.experts), top_k_(s.moe.top_k), exchange_(exchange) {
  const int ranks = exchange ? exchange->size : 1, rank = exchange ? exchange->rank : 0;
  local_ = experts_ / ranks;
  const int64_t h = s.hidden, f = s.moe.ffn, first = rank * local_;
  router_ = register_module("router", std::make_shared<torch::nn::Module>());
  gate_ = router_->register_module("gate", torch::nn::Linear(torch::nn::LinearOptions(h, experts_).bias(false)));
  experts_module_ = register_module("experts", std::make_shared<torch::nn::Module>());
  if (kind_ == plan::Mlp::swiglu) gate_proj_ = experts_module_->register_parameter("gate_proj", grouped_weight(experts_, f, h, first, local_));
  up_proj_ = experts_module_->register_parameter("up_proj", grouped_weight(experts_, f, h, first, local_));
  down_proj_ = experts_module_->register_parameter("down_proj", grouped_weight(experts_, h, f, first, local_));
  if (s.moe.shared > 0) {
    auto [module, call] = make_shared(s.moe.shared * f);
    shared_ = register_module("shared_experts", module);
    call_shared_ = std::move(call);
  }
}

torch::Tensor MoeImpl::forward(const torch::Tensor& x) {
  const auto flat = x.reshape({-1, x.size(-1)});
  const auto probs = torch::softmax(gate_(flat).to(torch::kFloat), -1);
  auto [weights, chosen] = probs.topk(top_k_, -1);
  if (top_k_ > 1) weights = weights / weights.sum(-1, /*keepdim=*/true);  // exec/moe.hpp: top-1 keeps its probability
  const auto expert_of = chosen.reshape({-1});  // token t's copies at t * top_k ...
  // Stable, so one expert's copies keep the tokens' order whatever the layout.
  const auto order = std::get<1>(torch::sort(expert_of, /*stable=*/true, /*dim=*/0, /*descending=*/false));
  const auto token = torch::div(order, top_k_, "floor");
  auto y = routed(flat.index_select(0, token), torch::bincount(expert_of, {}, experts_));
  y = (y * weights.reshape({-1}).index_select(0, order).unsqueeze(1).to(y.scalar_type())).to(flat.scalar_type());
  auto out = torch::zeros_like(flat).index_add(0, token, y);
  if (shared_) out = out + call_shared_(flat);
  return out.view_as(x);
}

torch::Tensor MoeImpl::routed(const torch::Tensor& sorted, const torch::Tensor& counts) {
  if (!exchange_ || exchange_->size == 1) return local_experts(sorted, to_vector(counts));
  const ExpertExchange& ex = *exchange_;
  const int n = ex.size;
  // What each rank sends this one, expert by expert: from[src * local + e].
  auto mine_counts = counts.contiguous(), arrived_counts = torch::empty_like(counts);
  std::vector<int64_t> equal;
  const int64_t begin = profiler::now_ns();
  ex.comm->wait(ex.group->alltoall_base(arrived_counts, mine_counts, equal, equal), "the token counts all-to-all of a MoE block", ex.peers);
  const auto from = to_vector(arrived_counts);
  std::vector<int64_t> send(n), recv(n), per_expert(local_, 0);
  const auto mine = to_vector(counts);
  for (int j = 0; j < n; ++j)
    for (int64_t e = 0; e < local_; ++e) {
      send[j] += mine[j * local_ + e];
      recv[j] += from[j * local_ + e];
      per_expert[e] += from[j * local_ + e];
    }
  const auto arrived = AllToAll::apply(sorted, exchange_, send, recv, "dispatch", begin);  // by source rank, then expert
  // Regroup by local expert (each expert's rows from rank 0, then rank 1, ...), and back after.
  std::vector<int64_t> start(n, 0), by_expert;
  for (int j = 1; j < n; ++j) start[j] = start[j - 1] + recv[j - 1];
  for (int64_t e = 0; e < local_; ++e)
    for (int j = 0; j < n; ++j) {
      for (int64_t i = 0; i < from[j * local_ + e]; ++i) by_expert.push_back(start[j] + i);
      start[j] += from[j * local_ + e];
    }
  const auto grouping = torch::tensor(by_expert, torch::dtype(torch::kLong)).to(sorted.device());
  const auto ungrouping = torch::argsort(grouping);
  const auto done = local_experts(arrived.index_select(0, grouping), per_expert).index_select(0, ungrouping);
  return AllToAll::apply(done, exchange_, recv, send, "combine", int64_t{0});
}

torch::Tensor MoeImpl::local_experts(const torch::Tensor& grouped, const std::vector<int64_t>& counts) {
  // Every local expert runs, on no rows if none came: its weights stay in the graph and get a
  // (zero) gradient, as a grouped GEMM's do, so DDP's buckets fill on every rank.
  std::vector<torch::Tensor> outs;
  int64_t at = 0;
  for (int64_t e = 0; e < local_; ++e) {
    const auto x = grouped.narrow(0, at, counts[e]);
    at += counts[e];
    const auto up = torch::matmul(x, up_proj_[e].t());
    torch::Tensor act;
    switch (kind_) {
      case plan::Mlp::swiglu: act = torch::silu(torch::matmul(x, gate_proj_[e].t())) * up; break;
      case plan::Mlp::gelu: act = torch::gelu(up); break;
      case plan::Mlp::relu2: act = torch::relu(up).square(); break;
      case plan::Mlp::relu: act = torch::relu(up); break;
    }
    outs.push_back(torch::matmul(act, down_proj_[e].t()));
  }
  return torch::cat(outs, 0);
}

}  // namespace parallax::exec
