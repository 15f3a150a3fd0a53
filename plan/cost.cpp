#include "plan/cost.hpp"

namespace parallax::plan {

LayerCost estimate_layer_cost(const Layer& layer, const Device& device, Precision precision,
                              int microbatch_size) {
  if (layer.kind == LayerKind::synthetic) {
    const double fwd_us = layer.synthetic.fwd_us_fixed + layer.synthetic.fwd_us_per_sample * microbatch_size;
    return {Time::us(fwd_us), Time::us(fwd_us * layer.synthetic.bwd_ratio)};
  }
  const auto peak = device.peak_tflops.find(precision);
  const double tflops = (peak != device.peak_tflops.end() ? peak->second : device.peak_tflops.at(Precision::fp32)) *
                        device.efficiency;
  const double compute_us = layer.flops_per_sample * microbatch_size / (tflops * 1e6);
  // Backward computes the gradients of the input and of the weights: twice the forward FLOPs.
  return {Time::us(device.layer_overhead_us + compute_us), Time::us(device.layer_overhead_us + 2.0 * compute_us)};
}

}  // namespace parallax::plan
