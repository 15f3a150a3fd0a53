#pragma once
// The plan's layers as LibTorch modules. A stage is a module whose children are its layers,
// registered under the layer names ("embed", "layers.4", "head", "fc0"), so its named_parameters()
// equal, name for name and shape for shape, the plan's parameter lists (tested for every preset).
// Each layer is initialised from (seed, layer index) alone, so a layer starts from the same
// weights whichever stage, rank or process builds it.
#include <torch/torch.h>

#include <functional>
#include <vector>

#include "exec/torch_compat.hpp"
#include "plan/plan.hpp"

namespace parallax::exec {

struct ExpertExchange;  // exec/moe.hpp

class StageImpl : public torch::nn::Module {
 public:
  /// `experts`: the expert group its MoE blocks exchange tokens over (nullptr: every expert here);
  /// it must outlive the stage.
  StageImpl(const plan::Plan& plan, int stage, uint64_t seed, const ExpertExchange* experts = nullptr);
  /// Layers [first, first + count) of `layers` (calibration builds one layer at a time).
  StageImpl(const std::vector<plan::Layer>& layers, int first, int count, uint64_t seed,
            const ExpertExchange* experts = nullptr);
  /// Input: token ids [batch, seq] (int64) for a stage starting with an embedding, features
  /// [batch, in] for one starting with a linear layer, else the previous stage's output.
  torch::Tensor forward(torch::Tensor x);
  /// The stage's layers one at a time (layer recompute keeps each one's input).
  int layer_count() const { return static_cast<int>(layers_.size()); }
  torch::Tensor forward_layer(int index, torch::Tensor x);
  /// The parameters of one layer (a split backward's W takes each layer's on its own).
  std::vector<torch::Tensor> layer_parameters(int index) const;

 private:
  // One of the typed modules is set, by kind (forward dispatches on the kind, no casts).
  struct Entry {
    plan::LayerKind kind;
    bool relu = false;
    std::shared_ptr<torch::nn::LinearImpl> linear;
    std::shared_ptr<torch::nn::TransformerEncoderLayerImpl> encoder;
    std::shared_ptr<torch::nn::Module> other;  // embedding, decoder block or head (file-local types)
    std::function<torch::Tensor(const torch::Tensor&)> call_other;
  };
  std::vector<Entry> layers_;
};
TORCH_MODULE(Stage);

// Autocast to `dtype` (bf16, or fp16 on CUDA; fp32 is off) for one forward, on the CPU or on
// CUDA; restores the previous state (LibTorch 1.13 has no guard; exec/torch_compat.hpp has the
// calls of both lines).
class AutocastScope {
 public:
  explicit AutocastScope(c10::ScalarType dtype, c10::DeviceType device = c10::kCPU)
      : on_(dtype != at::kFloat), device_(device) {
    if (!on_) return;
    was_ = autocast::enabled(device_);
    autocast::set_enabled(device_, true);
    autocast::set_dtype(device_, dtype);
  }
  ~AutocastScope() {
    if (!on_) return;
    autocast::set_enabled(device_, was_);
    at::autocast::clear_cache();
  }
  AutocastScope(const AutocastScope&) = delete;
  AutocastScope& operator=(const AutocastScope&) = delete;

 private:
  bool on_ = false, was_ = false;
  c10::DeviceType device_;
};

/// The torch type a precision computes in: what autocast runs at and stage-to-stage tensors carry.
torch::ScalarType compute_dtype(plan::Precision p);

/// The scenario's optimizer over `params`, as torch.optim builds it: sgd (momentum, weight decay),
/// adam or adamw. One rule for the runtime and for calibrate's timing of the step.
std::unique_ptr<torch::optim::Optimizer> make_optimizer(const plan::OptimizerSpec& o, const std::vector<torch::Tensor>& params);

/// Shape of a layer's output for a micro-batch (what crosses a stage boundary).
std::vector<int64_t> output_shape(const plan::Layer& layer, int64_t microbatch);

/// The loss of the model's last layer: cross-entropy over classes (MLP) or tokens (transformer).
torch::Tensor model_loss(const plan::Layer& last_layer, const torch::Tensor& output, const torch::Tensor& target);

}  // namespace parallax::exec
