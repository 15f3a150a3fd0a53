// Timing one layer signature for calibrate (exec/measuring.hpp): forward, backward with and without
// the input gradient, the forward without autograd, the loss, what the forward keeps, and on a GPU
// with --launch the host's launches apart from the device's kernels.
#include <algorithm>

#include "exec/calibrate.hpp"
#include "exec/measuring.hpp"

namespace parallax::exec::measuring {

std::pair<plan::SignatureCost, plan::SignatureCost> measure_signature(const SignatureWork& w, double call_us, const Bench& b) {
  plan::SignatureCost layer, loss;
  layer.signature = loss.signature = plan::layer_signature(w.layer, w.precision);
  Stage module(std::vector<plan::Layer>{w.layer}, 0, 1, /*seed=*/1);
  module->to(b.device);
  const c10::ScalarType autocast = compute_dtype(w.precision);
  const bool float_input = w.layer.kind != plan::LayerKind::embedding;
  double last_pass_us = 0;
  for (int mb : calibration_sizes({w.used.begin(), w.used.end()}, w.largest_batch, b.quick)) {
    // Sizes whose one pass would take over ~2 s are left to extrapolation (keeps calibrate short).
    if (last_pass_us > 0 && !w.used.count(mb) && last_pass_us * 2 > 2e6) break;
    const auto x = layer_input(w.layer, mb, b.device);
    const auto grad = torch::randn(output_shape(w.layer, mb), torch::TensorOptions().device(b.device));
    auto pass = [&](bool input_grad) {
      return repeat(
          [&] {
            auto in = float_input ? x.clone().requires_grad_(input_grad) : x;
            torch::Tensor out;
            b.clock->begin();
            {
              AutocastScope scope(autocast, b.device.type());
              out = module->forward(in);
            }
            b.clock->end();
            b.clock->begin();
            torch::autograd::backward({out}, {grad.to(out.scalar_type())});
            b.clock->end();
            b.clock->begin();
            {
              torch::NoGradGuard no_grad;
              AutocastScope scope(autocast, b.device.type());
              module->forward(in);
            }
            b.clock->end();
            return b.clock->lap(/*host_too=*/true);  // F, B, F no_grad; then the host's
          },
          b.budget);
    };
    auto with = pass(float_input);
    std::vector<double> without;
    if (w.first && float_input) without = pass(false);
    const bool launch = b.launch;
    if (launch) {
      // Again with the device busy ahead of each phase, for twice its time from an idle device
      // (at least its launches): the events then hold the kernels alone, the host's figures
      // the launches (docs/simulator.md, Launch-bound steps).
      b.clock->keep_busy_ahead(2 * *std::max_element(with.begin(), with.begin() + 3) + 500);
      with = pass(float_input);
      if (!without.empty()) without = pass(false);
      b.clock->keep_busy_ahead(0);
      layer.forward_launch.mb.push_back(mb);
      layer.forward_launch.us.push_back(with[3]);
      layer.backward_launch.mb.push_back(mb);
      layer.backward_launch.us.push_back(std::max(0.0, with[4] - call_us));
    }
    layer.forward.mb.push_back(mb);
    layer.forward.us.push_back(with[0]);
    layer.backward.mb.push_back(mb);
    // The autograd call's own time is the stage's, once per B (Calibration::backward_call_us);
    // with launch figures it is the host's, and the device's backward keeps all it measured.
    layer.backward.us.push_back(launch ? with[1] : std::max(0.0, with[1] - call_us));
    layer.forward_no_grad.mb.push_back(mb);
    layer.forward_no_grad.us.push_back(with[2]);
    if (!without.empty()) {
      layer.backward_no_input.mb.push_back(mb);
      layer.backward_no_input.us.push_back(launch ? without[1] : std::max(0.0, without[1] - call_us));
    }
    if (w.last) {
      const auto target = loss_target(w.layer, mb, b.device);
      const auto l = repeat(
          [&] {
            auto out = torch::randn(output_shape(w.layer, mb), torch::TensorOptions().device(b.device)).requires_grad_(true);
            torch::Tensor value;
            b.clock->begin();
            {
              AutocastScope scope(autocast, b.device.type());
              value = model_loss(w.layer, out, target);
            }
            b.clock->end();
            b.clock->begin();
            value.backward();
            b.clock->end();
            return b.clock->lap();
          },
          b.budget);
      loss.forward.mb.push_back(mb);
      loss.forward.us.push_back(l[0]);
      loss.backward.mb.push_back(mb);
      loss.backward.us.push_back(std::max(0.0, l[1] - call_us));
    }
    const KeptBytes kept = kept_bytes(module, w.layer, w.last, mb, autocast, b.device);
    layer.kept_bytes.mb.push_back(mb);
    layer.kept_bytes.us.push_back(kept.layer);
    if (w.last) {
      loss.kept_bytes.mb.push_back(mb);
      loss.kept_bytes.us.push_back(kept.loss);
    }
    last_pass_us = with[0] + with[1] + with[2];
  }
  return {layer, loss};
}

double forward_backward_us(const SignatureWork& w, int mb, double call_us, const Budget& b) {
  Stage module(std::vector<plan::Layer>{w.layer}, 0, 1, /*seed=*/1);
  const bool float_input = w.layer.kind != plan::LayerKind::embedding;
  const auto x = layer_input(w.layer, mb, torch::kCPU);
  const auto grad = torch::randn(output_shape(w.layer, mb));
  const auto t = repeat(
      [&] {
        auto in = float_input ? x.clone().requires_grad_(true) : x;
        auto t0 = Clock::now();
        const torch::Tensor out = module->forward(in);
        const double fwd = us_since(t0);
        t0 = Clock::now();
        torch::autograd::backward({out}, {grad});
        return std::vector<double>{fwd, us_since(t0)};
      },
      b);
  return t[0] + std::max(0.0, t[1] - call_us);
}

}  // namespace parallax::exec::measuring
