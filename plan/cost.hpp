#pragma once
// First-order cost of a layer on a device, in this order of preference: a cost measured on the
// device (the profile's measured_layers, by layer name, then by kind); the cost a synthetic layer
// states; else its FLOPs at the device's peak times its efficiency plus a fixed per-call overhead,
// so tiny micro-batches cost more per sample. Shared by "balanced" partitioning and the simulator.
#include "plan/hardware.hpp"
#include "plan/layers.hpp"
#include "plan/time.hpp"

namespace parallax::plan {

struct LayerCost {
  Time forward;
  Time backward;  ///< without recomputation; activation checkpointing adds `forward` on top
};

/// `input_gradient`: whether backward must also compute the gradient of the layer's input; the
/// model's first layer has none to compute (its input is data), so its backward does only the
/// weight gradient, half the work.
LayerCost estimate_layer_cost(const Layer& layer, const HardwareProfile& hardware, Precision precision,
                              int microbatch_size, bool input_gradient = true);

}  // namespace parallax::plan
