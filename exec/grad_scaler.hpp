#pragma once
// Dynamic loss scaling for fp16 training, as PyTorch's AMP GradScaler does it
// (torch/cuda/amp/grad_scaler.py and the _amp_update_scale_ kernel, PyTorch 1.13): the loss is
// multiplied by a scale S before backward, so that small fp16 gradients do not flush to zero;
// before the optimizer step every gradient is multiplied by 1/S and checked for inf and NaN. A
// step whose gradients overflowed is skipped and S shrinks by `backoff_factor`; after
// `growth_interval` steps in a row without overflow S grows by `growth_factor`.
//
// LibTorch 1.13 has no C++ GradScaler, and its fused _amp_* kernels are CUDA-only, so this is the
// same algorithm with the fused unscale-and-check kernel on CUDA gradients and plain tensor
// operations elsewhere (tested on the CPU). The scale and
// the growth tracker live on the host: every rank of a job must take the same decision, which
// needs one host read of the agreed overflow flag per step anyway (PyTorch's step() reads it too).
#include <torch/torch.h>

#include <optional>
#include <vector>

#include "plan/precision.hpp"

namespace parallax::exec {

struct GradScalerOptions {
  double init_scale = 65536.0;  // PyTorch's defaults
  double growth_factor = 2.0;
  double backoff_factor = 0.5;
  int growth_interval = 2000;
};

/// The loss scaler's settings: PyTorch's defaults for fp16, none otherwise. Testing aid:
/// PARALLAX_LOSS_SCALER=INIT:GROWTH_INTERVAL runs it at any precision with those settings (the
/// CPU has no fp16 autocast, so the tests exercise it in fp32, where power-of-two scales are exact).
std::optional<GradScalerOptions> scaler_options(plan::Precision precision);

class GradScaler {
 public:
  explicit GradScaler(GradScalerOptions options = {});

  /// The factor to multiply the loss by before backward.
  double scale() const { return scale_; }
  /// Multiplies every defined gradient of `params` by 1/scale (rounded to float as PyTorch does)
  /// and folds "some gradient is inf or NaN" into `found_inf`, a 1-element float tensor (0 or 1)
  /// on the gradients' device. No host sync.
  void unscale(const std::vector<torch::Tensor>& params, torch::Tensor& found_inf) const;
  /// Ends a step whose overflow flag (agreed by every rank) is `found_inf`: backs off or grows the
  /// scale. Returns whether the optimizer may step (no overflow).
  bool update(bool found_inf);

  int growth_tracker() const { return growth_tracker_; }
  /// For resuming from a checkpoint.
  void restore(double scale, int growth_tracker) {
    scale_ = scale;
    growth_tracker_ = growth_tracker;
  }

 private:
  GradScalerOptions options_;
  double scale_;
  int growth_tracker_ = 0;  // steps in a row without overflow since the scale last changed
};

}  // namespace parallax::exec
