#pragma once
// A backward split in two, as zero-bubble schedules run it (Qi et al. 2024; torch's
// stage_backward_input and stage_backward_weight): I makes the gradient of the stage's input,
// which the previous stage waits for, and W later makes the weights' gradients.
//
// The forward runs each layer on its own piece of graph: a layer's input is the previous
// layer's output detached, with requires_grad. I then walks the layers from the last, asking
// autograd for the gradient of each layer's input alone (keeping the graph), and keeps the
// gradient of every layer's output. W asks, layer by layer, for the gradients of that layer's
// parameters alone from its kept output gradient, so nothing of I is computed twice; autograd
// skips the parts a request does not need. torch cuts its graph at parameter groups instead of
// layers; at layer granularity a layer's internal activation gradients are made in I and again
// in W (an encoder block's; a linear layer has none).
#include <torch/torch.h>

#include <vector>

#include "exec/model.hpp"

namespace parallax::exec {

struct SplitGraph {
  std::vector<torch::Tensor> inputs;        ///< each layer's input (a graph leaf, but data's)
  std::vector<torch::Tensor> outputs;       ///< each layer's output
  std::vector<torch::Tensor> output_grads;  ///< after I: the gradient of each layer's output
  bool defined() const { return !outputs.empty(); }
};

/// Forward through the stage, layer by layer on separate graph pieces; returns the output.
torch::Tensor forward_split(StageImpl& stage, const torch::Tensor& input, SplitGraph* graph);

/// I: from `root` (the loss, or the stage's output) and its gradient (undefined for a loss),
/// the gradient of every layer's output, and returned the gradient of the stage's input
/// (undefined when the input needs none: data).
torch::Tensor backward_input(SplitGraph& graph, const torch::Tensor& root, const torch::Tensor& root_grad);

/// W: every layer's parameter gradients, accumulated into .grad (DDP's hooks see them); frees
/// the graph.
void backward_weight(StageImpl& stage, SplitGraph& graph);

}  // namespace parallax::exec
