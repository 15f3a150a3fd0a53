// The optimizer step measured as the executor runs it: its time by parameters and tensors per
// stage, and fp16's loss scaler (exec/measuring.hpp).
#include "exec/measuring.hpp"

#include <algorithm>
#include <map>
#include <set>

#include "exec/grad_scaler.hpp"
#include "exec/model.hpp"
#include "timeline/step_statistic.hpp"

namespace parallax::exec::measuring {

using timeline::median;

namespace {

// The optimizer step's device time and the host's time to launch it (the same on the CPU); with
// b.launch on a GPU, the device kept busy ahead so that its time excludes the launch gaps.
std::pair<double, double> optimizer_step_times(const plan::OptimizerSpec& spec, std::vector<torch::Tensor> ps, const Bench& b) {
  PhaseClock& clock = *b.clock;
  std::vector<torch::Tensor> grads;
  for (auto& p : ps) {
    p = p.detach().requires_grad_(true);
    grads.push_back(torch::randn_like(p));
  }
  const std::unique_ptr<torch::optim::Optimizer> opt = make_optimizer(spec, ps);
  auto step = [&] {
    // Each repeat's gradients made anew, untimed, as a run's backward makes them; the step, then
    // the gradients dropped as the executor's OPTIM drops them (exec/runtime.cpp: set to none on
    // both LibTorch lines, where 1.13's zero_grad() would zero them), which frees them.
    for (size_t i = 0; i < ps.size(); ++i) ps[i].mutable_grad() = grads[i].clone();
    clock.begin();
    opt->step();
    for (auto& p : ps) p.mutable_grad() = torch::Tensor();
    clock.end();
    return clock.lap(/*host_too=*/true);
  };
  const double idle = repeat(step, b.budget)[0];
  if (!b.launch || !b.device.is_cuda()) return {idle, idle};
  // Busy ahead for twice the step from an idle device, which is at least its launches.
  clock.keep_busy_ahead(2 * idle + 500);
  const auto t = repeat(step, b.budget);
  clock.keep_busy_ahead(0);
  return {t[0], t[1]};
}

}  // namespace

double optimizer_step_us(const plan::OptimizerSpec& spec, std::vector<torch::Tensor> ps, const Bench& b) {
  return optimizer_step_times(spec, std::move(ps), b).first;
}

namespace {

// The CPU optimizer table's first point, in parameters.
constexpr int64_t kFewestOptimizerParams = 1 << 12;

// Parameters of the largest stage of any plan, rounded up to the next power of 4 from
// kFewestOptimizerParams.
int64_t largest_stage_params(const std::vector<plan::Plan>& plans) {
  int64_t most = kFewestOptimizerParams;
  for (const auto& p : plans)
    for (const auto& st : p.stages) most = std::max(most, st.param_bytes / 4);
  int64_t n = kFewestOptimizerParams;
  while (n < most) n *= 4;
  return n;
}

// On the CPU: `params` parameters in four tensors (OptimizerCost::kCurveTensors), at powers of 4
// from kFewestOptimizerParams up to the largest stage.
plan::CostCurve optimizer_curve(const std::vector<plan::Plan>& plans, const plan::OptimizerSpec& o, const Bench& b) {
  plan::CostCurve curve;
  for (int64_t n = kFewestOptimizerParams; n <= largest_stage_params(plans); n *= 4) {
    std::vector<torch::Tensor> parts;
    constexpr int k = plan::OptimizerCost::kCurveTensors;
    for (int i = 0; i < k; ++i) parts.push_back(torch::randn({n / k}, torch::TensorOptions().device(b.device)));
    curve.mb.push_back(static_cast<double>(n));
    curve.us.push_back(optimizer_step_us(o, std::move(parts), b));
  }
  return curve;
}

// On the CPU: what each tensor beyond the curve's 4 adds to a step (OptimizerCost::per_tensor_us):
// 64 tensors of 64 parameters against the curve's first point, the same 4,096 parameters in 4.
double optimizer_per_tensor_us(const plan::OptimizerSpec& o, const plan::CostCurve& curve, const Bench& b) {
  constexpr int kTensors = 64;
  constexpr int64_t kParams = kFewestOptimizerParams;
  if (curve.mb.empty() || curve.mb.front() != static_cast<double>(kParams)) return 0.0;
  std::vector<torch::Tensor> parts;
  for (int i = 0; i < kTensors; ++i) parts.push_back(torch::randn({kParams / kTensors}, torch::TensorOptions().device(b.device)));
  const double many = optimizer_step_us(o, std::move(parts), b);
  return std::max(0.0, (many - curve.us.front()) / (kTensors - plan::OptimizerCost::kCurveTensors));
}

// A point per stage size of `plans` (those `wanted` accepts): `us_of` timed on the stage's own
// parameter tensors on the bench's device. "mb" holds parameter counts, as the simulator looks
// them up (param_bytes / 4).
plan::CostCurve stage_curve(const std::vector<plan::Plan>& plans, const std::function<bool(const plan::Plan&)>& wanted,
                            const std::function<double(std::vector<torch::Tensor>)>& us_of, const Bench& b) {
  std::map<double, double> points;  // parameters -> us
  for (const plan::Plan& p : plans) {
    if (!wanted(p)) continue;
    for (const plan::Stage& st : p.stages) {
      const double n = static_cast<double>(st.param_bytes) / 4.0;
      if (points.count(n)) continue;
      Stage module(p, st.index, /*seed=*/1);
      module->to(b.device);
      points[n] = us_of(module->parameters());
    }
  }
  plan::CostCurve curve;
  for (const auto& [n, us] : points) {
    curve.mb.push_back(n);
    curve.us.push_back(us);
  }
  return curve;
}

// On a GPU: each stage of the plans with its own parameter tensors, a point per stage size.
// LibTorch's optimizers launch a few kernels per tensor, one tensor after another, so on a GPU
// their step follows the number and shapes of the tensors more than their total size (a
// 67M-parameter transformer's AdamW step took 2.3 ms on an H200's device in a run, a quarter
// of it idle between launches, and 3.9 ms of the host's time to launch).
// Into `cost`: by_params, and with b.launch the host's launch time of the same steps (`launch`),
// both from one measurement per stage size.
void stage_optimizer_curves(const std::vector<plan::Plan>& plans, const plan::OptimizerSpec& o, const Bench& b,
                            plan::OptimizerCost* cost) {
  std::map<double, double> launch;  // parameters -> the host's us
  cost->by_params = stage_curve(
      plans,
      [&](const plan::Plan& p) {
        return p.scenario.optimizer.kind == o.kind && (p.scenario.optimizer.momentum > 0) == (o.momentum > 0);
      },
      [&](std::vector<torch::Tensor> ps) {
        double n = 0;
        for (const auto& t : ps) n += static_cast<double>(t.numel());
        const auto [device, host] = optimizer_step_times(o, std::move(ps), b);
        launch[n] = host;
        return device;
      },
      b);
  // The same stages, in the same order of size (a stage's fp32 parameters are its param_bytes / 4).
  if (!b.launch || launch.size() != cost->by_params.mb.size()) return;
  cost->launch.mb = cost->by_params.mb;
  for (const auto& [n, us] : launch) cost->launch.us.push_back(us);
}

}  // namespace

std::vector<plan::OptimizerCost> measure_optimizers(const std::vector<plan::Plan>& plans, const Bench& b) {
  std::vector<plan::OptimizerCost> out;
  std::set<std::pair<std::string, bool>> done;
  for (const plan::Plan& p : plans) {
    const auto& o = p.scenario.optimizer;
    if (!done.insert({o.kind, o.momentum > 0}).second) continue;
    // Per-parameter cost bends where the state leaves the caches: a table over stage sizes.
    // On a GPU the stages' own tensors, whose number is in each point; on the CPU 4 tensors a
    // point and the cost of each further one apart.
    plan::OptimizerCost cost;
    cost.kind = o.kind;
    cost.momentum = o.momentum > 0;
    if (b.device.is_cuda()) {
      stage_optimizer_curves(plans, o, b, &cost);
    } else {
      cost.by_params = optimizer_curve(plans, o, b);
      cost.per_tensor_us = optimizer_per_tensor_us(o, cost.by_params, b);
    }
    out.push_back(cost);
  }
  return out;
}

plan::CostCurve measure_loss_scaler(const std::vector<plan::Plan>& plans, const Bench& b) {
  // Scale 1: the repeats leave the gradients as they are (the kernels are the same at any scale).
  GradScalerOptions options;
  options.init_scale = 1;
  const GradScaler scaler(options);
  PhaseClock& clock = *b.clock;
  auto us_of = [&](std::vector<torch::Tensor> ps) {
    for (auto& t : ps) t.mutable_grad() = torch::randn_like(t);
    // From an idle device (lap() synchronizes), as the executor's check_overflow runs once the
    // host has queued the backward: the launches, the kernels, and the host's read of the flag.
    return repeat(
        [&] {
          clock.begin();
          torch::Tensor found;
          scaler.unscale(ps, found);
          const bool overflow = found.item<float>() > 0;
          clock.end();
          if (overflow) throw std::logic_error("measure_loss_scaler: random gradients overflowed");
          return clock.lap();
        },
        b.budget)[0];
  };
  return stage_curve(plans, [](const plan::Plan&) { return true; }, us_of, b);
}

}  // namespace parallax::exec::measuring
