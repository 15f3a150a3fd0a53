#include "plan/cost.hpp"

namespace parallax::plan {

namespace {

const MeasuredLayerCost* find_measured(const Layer& layer, const HardwareProfile& hw) {
  for (const auto& m : hw.measured_layers)
    if (m.layer == layer.name) return &m;
  for (const auto& m : hw.measured_layers)
    if (!m.kind.empty() && m.kind == name(layer.kind)) return &m;
  return nullptr;
}

}  // namespace

LayerCost estimate_layer_cost(const Layer& layer, const HardwareProfile& hardware, Precision precision,
                              int microbatch_size, bool input_gradient) {
  if (const MeasuredLayerCost* m = find_measured(layer, hardware)) {
    return {Time::us(m->fwd_us_fixed + m->fwd_us_per_sample * microbatch_size),
            Time::us(m->bwd_us_fixed + m->bwd_us_per_sample * microbatch_size)};
  }
  const Device& device = hardware.device;
  if (layer.kind == LayerKind::synthetic) {
    const double fwd_us = layer.synthetic.fwd_us_fixed + layer.synthetic.fwd_us_per_sample * microbatch_size;
    return {Time::us(fwd_us), Time::us(fwd_us * layer.synthetic.bwd_ratio)};
  }
  const auto peak = device.peak_tflops.find(precision);
  const double tflops = (peak != device.peak_tflops.end() ? peak->second : device.peak_tflops.at(Precision::fp32)) *
                        device.efficiency;
  const double compute_us = layer.flops_per_sample * microbatch_size / (tflops * 1e6);
  // Backward computes the gradients of the input and of the weights: twice the forward FLOPs
  // (once when there is no input gradient to compute).
  const double backward_us = (input_gradient ? 2.0 : 1.0) * compute_us;
  return {Time::us(device.layer_overhead_us + compute_us), Time::us(device.layer_overhead_us + backward_us)};
}

}  // namespace parallax::plan
