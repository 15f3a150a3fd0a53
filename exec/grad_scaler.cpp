#include "exec/grad_scaler.hpp"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <stdexcept>

namespace parallax::exec {

std::optional<GradScalerOptions> scaler_options(plan::Precision precision) {
  std::optional<GradScalerOptions> out;
  if (precision == plan::Precision::fp16) out.emplace();
  if (const char* spec = std::getenv("PARALLAX_LOSS_SCALER")) {
    GradScalerOptions o;
    if (std::sscanf(spec, "%lf:%d", &o.init_scale, &o.growth_interval) != 2)
      throw std::invalid_argument("PARALLAX_LOSS_SCALER must be INIT_SCALE:GROWTH_INTERVAL, e.g. 65536:2000");
    out = o;
  }
  return out;
}

GradScaler::GradScaler(GradScalerOptions options)
    : options_(options), scale_(static_cast<float>(options.init_scale)) {
  if (!(options.init_scale > 0) || !(options.growth_factor > 1) || !(options.backoff_factor > 0) ||
      !(options.backoff_factor < 1) || options.growth_interval < 1)
    throw std::invalid_argument("GradScaler: needs init_scale > 0, growth_factor > 1, 0 < backoff_factor < 1, growth_interval >= 1");
}

void GradScaler::unscale(const std::vector<torch::Tensor>& params, torch::Tensor& found_inf) const {
  // PyTorch: inv_scale = scale.double().reciprocal().float().
  const auto inv_scale = static_cast<double>(static_cast<float>(1.0 / scale_));
  // On a GPU, PyTorch's own fused kernel, as torch.amp.GradScaler calls it: a few launches per
  // dtype instead of several per tensor (the plain form made an H200's fp16 step of a 67M-parameter
  // transformer 1.1-1.6x torch's; docs/gpu.md). The same arithmetic: multiply, then flag inf/NaN.
  std::map<c10::ScalarType, std::vector<torch::Tensor>> cuda_grads;
  for (const auto& p : params)
    if (const torch::Tensor& g = p.grad(); g.defined() && g.is_cuda()) cuda_grads[g.scalar_type()].push_back(g);
  for (auto& [dtype, grads] : cuda_grads) {
    const auto options = torch::TensorOptions().dtype(torch::kFloat).device(grads.front().device());
    if (!found_inf.defined()) found_inf = torch::zeros({1}, options);
    at::_amp_foreach_non_finite_check_and_unscale_(grads, found_inf, torch::full({1}, inv_scale, options));
  }
  for (const auto& p : params) {
    torch::Tensor g = p.grad();
    if (!g.defined() || g.is_cuda()) continue;
    g.mul_(inv_scale);
    const torch::Tensor bad = torch::isfinite(g).all().logical_not().to(torch::kFloat).reshape({1});
    found_inf = found_inf.defined() ? torch::maximum(found_inf, bad.to(found_inf.device())) : bad;
  }
  if (!found_inf.defined() && !params.empty())
    found_inf = torch::zeros({1}, torch::TensorOptions().dtype(torch::kFloat).device(params.front().device()));
}

bool GradScaler::update(bool found_inf) {
  if (found_inf) {
    scale_ = static_cast<float>(scale_ * options_.backoff_factor);  // PyTorch keeps the scale in fp32
    growth_tracker_ = 0;
    return false;
  }
  if (++growth_tracker_ == options_.growth_interval) {
    // As _amp_update_scale_: the scale grows only while it stays finite.
    const float grown = static_cast<float>(scale_ * options_.growth_factor);
    if (std::isfinite(grown)) scale_ = grown;
    growth_tracker_ = 0;
  }
  return true;
}

}  // namespace parallax::exec
