#pragma once
// Cost of a layer on a device, in this order of preference:
// 1. the profile's calibration (`parallax calibrate`), by layer signature: measured forward,
//    backward with or without the input gradient, and forward under no_grad;
// 2. the profile's older measured_layers (by layer name, then by kind);
// 3. the cost a synthetic layer states;
// 4. a roofline: the larger of the FLOP time (peak x efficiency) and the memory-traffic time
//    (parameters and activations read and written at the device's memory bandwidth), plus a
//    per-call overhead. Backward is costed on its own FLOPs and bytes: input and weight gradients
//    (weight gradients only for the model's first layer), not as a fixed ratio of forward.
// Shared by "balanced" partitioning and the simulator.
#include "plan/hardware.hpp"
#include "plan/layers.hpp"
#include "plan/time.hpp"

namespace parallax::plan {

struct LayerCost {
  Time forward;
  Time backward;         ///< without recomputation; activation checkpointing adds a forward
  Time forward_no_grad;  ///< forward without recording for backward (checkpointed F)
  bool measured = false; ///< from a calibration
  /// Roofline estimates: the memory-traffic term won over the FLOP term (the layer saturates the
  /// device's memory bandwidth, which slows communication on the device; docs/simulator.md).
  bool forward_memory_bound = false, backward_memory_bound = false;
};

/// `input_gradient`: whether backward must also compute the gradient of the layer's input; the
/// model's first layer has none to compute (its input is data).
LayerCost estimate_layer_cost(const Layer& layer, const HardwareProfile& hardware, Precision precision,
                              int microbatch_size, bool input_gradient = true);

}  // namespace parallax::plan
