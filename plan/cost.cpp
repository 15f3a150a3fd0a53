#include "plan/cost.hpp"

#include <algorithm>
#include <cmath>

namespace parallax::plan {

namespace {

const MeasuredLayerCost* find_measured(const Layer& layer, const HardwareProfile& hw) {
  for (const auto& m : hw.measured_layers)
    if (m.layer == layer.name) return &m;
  for (const auto& m : hw.measured_layers)
    if (!m.kind.empty() && m.kind == name(layer.kind)) return &m;
  return nullptr;
}

std::optional<LayerCost> calibrated(const Layer& layer, const HardwareProfile& hw, Precision precision, int mb,
                                    bool input_gradient) {
  if (!hw.calibration) return std::nullopt;
  const SignatureCost* c = hw.calibration->layer(layer_signature(layer, precision));
  if (!c) return std::nullopt;
  LayerCost out;
  out.measured = true;
  out.forward = Time::us(c->forward.at(mb));
  out.forward_no_grad = c->forward_no_grad.empty() ? out.forward : Time::us(c->forward_no_grad.at(mb));
  const CostCurve& b = !input_gradient && !c->backward_no_input.empty() ? c->backward_no_input : c->backward;
  out.backward = Time::us(b.at(mb));
  return out;
}

// Bytes a layer moves per call: its parameters once (the copy autocast makes in the compute type,
// elements as wide as an activation's), plus its activations per sample.
double parameter_bytes(const Layer& layer, Precision precision) {
  return static_cast<double>(layer.param_count()) * activation_bytes(precision);
}

}  // namespace

LayerCost estimate_layer_cost(const Layer& layer, const HardwareProfile& hardware, Precision precision,
                              int microbatch_size, bool input_gradient) {
  if (auto c = calibrated(layer, hardware, precision, microbatch_size, input_gradient)) return *c;
  if (const MeasuredLayerCost* m = find_measured(layer, hardware)) {
    const Time f = Time::us(m->fwd_us_fixed + m->fwd_us_per_sample * microbatch_size);
    return {f, Time::us(m->bwd_us_fixed + m->bwd_us_per_sample * microbatch_size), f, true};
  }
  const Device& device = hardware.device;
  if (layer.kind == LayerKind::synthetic) {
    const double fwd_us = layer.synthetic.fwd_us_fixed + layer.synthetic.fwd_us_per_sample * microbatch_size;
    return {Time::us(fwd_us), Time::us(fwd_us * layer.synthetic.bwd_ratio), Time::us(fwd_us), false};
  }
  const auto peak = device.peak_tflops.find(precision);
  const double tflops = (peak != device.peak_tflops.end() ? peak->second : device.peak_tflops.at(Precision::fp32)) *
                        device.efficiency;
  const double mb = microbatch_size;
  const double elem = activation_bytes(precision);
  const double flop_us = layer.flops_per_sample * mb / (tflops * 1e6);
  const double bw = device.memory_bandwidth_gb_per_s;  // may be +inf: no memory term
  auto memory_us = [&](double bytes) { return std::isinf(bw) || bw <= 0 ? 0.0 : bytes / (bw * 1e3); };
  const double params = parameter_bytes(layer, precision);
  const double in = layer.input_elems_per_sample * mb * elem, out_bytes = layer.output_elems_per_sample * mb * elem;
  const double saved = layer.activation_elems_per_sample * mb * elem;
  // Forward reads the weights and its input, writes its output and what backward keeps.
  const double fwd_us = std::max(flop_us, memory_us(params + in + out_bytes + saved));
  const double fwd_no_grad_us = std::max(flop_us, memory_us(params + in + out_bytes));
  // Backward: weight gradients (one forward's FLOPs) and, unless first, input gradients (another).
  // It reads the weights, the saved activations and the output gradient, and writes the weight
  // gradients and the input gradient.
  const double bwd_flop_us = (input_gradient ? 2.0 : 1.0) * flop_us;
  const double bwd_bytes = 2 * params + saved + out_bytes + (input_gradient ? in : 0.0);
  const double bwd_us = std::max(bwd_flop_us, memory_us(bwd_bytes));
  const double call = device.layer_overhead_us;
  LayerCost out{Time::us(call + fwd_us), Time::us(call + bwd_us), Time::us(call + fwd_no_grad_us), false};
  out.forward_memory_bound = memory_us(params + in + out_bytes + saved) > flop_us;
  out.backward_memory_bound = memory_us(bwd_bytes) > bwd_flop_us;
  return out;
}

}  // namespace parallax::plan
