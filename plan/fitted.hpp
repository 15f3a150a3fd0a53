#pragma once
// What `parallax calibrate --from-trace` fitted from measured runs of one job: factors over a base
// profile's costs, as the `fitted:` section of a hardware profile. A factor multiplies whatever
// the base profile says (its calibration, its shape-aware model or its roofline), so the fit
// carries the base's shape over micro-batch sizes and layouts, at the level the job measured.
//   - layers: by layer signature (kind, shapes, precision), forward and backward apart; any plan
//     with the same layers takes them, whatever its chunks, partition or schedule;
//   - optimizer: the optimizer step;
//   - allreduce: the data-parallel all-reduces;
//   - kernels: by kind of kernel, where the traces show the GPU's kernels and the base profile has
//     a shape-aware compute model: its GEMMs, its flash attention and its memory-bound kernels,
//     each over what the model says of them. These apply inside the model, to any layer and
//     layout, and the layer factors then fit what remains.
// What the traces did not show is not in the section: those costs stay the base's (1).
#include <map>
#include <string>
#include <vector>

#include "plan/yaml_reader.hpp"

namespace parallax::plan {

struct FittedCosts {
  struct Layer {
    double forward = 1, backward = 1;
  };
  std::map<std::string, Layer> layers;  ///< by signature
  double optimizer = 1, allreduce = 1;
  /// Added to every point-to-point send call of a forward's activations (SEND_F) and of a
  /// backward's gradients (SEND_B): what the traces' sends took beyond the base's (a Gloo send's
  /// copy and post on the sender's thread, which an uncalibrated profile leaves out).
  double send_forward_us = 0, send_backward_us = 0;
  /// Measured kernel time over the compute model's, by kind of kernel (`kernels:`).
  struct Kernels {
    double gemm = 1, flash = 1, memory = 1;
    bool operator==(const Kernels&) const = default;
  };
  Kernels kernels;
  std::vector<std::string> from;  ///< the traces, as given
  std::string statistic;          ///< the step statistic the measured figures were taken by
  std::string base;               ///< the base profile's name
  /// The precision the runs trained at ("bf16"; "" in profiles written before 2026-12-06): the
  /// layer factors are of that precision's layers, while the optimizer, all-reduce and kernel
  /// factors apply at any, which a plan at another precision is told (plan/simulate).
  std::string precision;

  /// The layer factors of `signature`, all 1 when it was not fitted.
  Layer layer(const std::string& signature) const;
};

FittedCosts parse_fitted(const Field& map);
/// The `fitted:` section's body (two-space indented), as parse_fitted reads it back.
std::string fitted_yaml(const FittedCosts& f);
/// `base_text` (a profile's YAML) renamed `name`, with the `fitted:` section after it and
/// `header` as comments first (plan/profile_copy.hpp); logic_error when the base carries a fitted
/// section already (calibrate --from-trace refuses such a base first).
std::string fitted_copy_yaml(const std::string& base_text, const std::string& name, const FittedCosts& f,
                             const std::vector<std::string>& header);

}  // namespace parallax::plan
