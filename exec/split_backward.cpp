#include "exec/split_backward.hpp"

namespace parallax::exec {

torch::Tensor forward_split(StageImpl& stage, const torch::Tensor& input, SplitGraph* graph) {
  graph->inputs.clear();
  graph->outputs.clear();
  graph->output_grads.clear();
  torch::Tensor x = input;
  for (int i = 0; i < stage.layer_count(); ++i) {
    // Token ids and a first stage's data take no gradient; every later input is a cut.
    if (i > 0 || (x.is_floating_point() && x.requires_grad())) x = x.detach().requires_grad_(true);
    graph->inputs.push_back(x);
    x = stage.forward_layer(i, x);
    graph->outputs.push_back(x);
  }
  return x;
}

torch::Tensor backward_input(SplitGraph& graph, const torch::Tensor& root, const torch::Tensor& root_grad) {
  const int layers = static_cast<int>(graph.outputs.size());
  graph.output_grads.assign(layers, torch::Tensor());
  // The last output's gradient: from the loss (a piece of its own), or the next stage's.
  if (root_grad.defined()) {
    graph.output_grads[layers - 1] = root_grad.to(graph.outputs.back().scalar_type());
  } else {
    graph.output_grads[layers - 1] = torch::autograd::grad({root}, {graph.outputs.back()}, {}, /*retain_graph=*/false)[0];
  }
  torch::Tensor input_grad;
  for (int i = layers - 1; i >= 0; --i) {
    const torch::Tensor& x = graph.inputs[i];
    if (!x.requires_grad()) break;  // the stage's data: nothing before it
    const torch::Tensor g = torch::autograd::grad({graph.outputs[i]}, {x}, {graph.output_grads[i]}, /*retain_graph=*/true)[0];
    if (i > 0) graph.output_grads[i - 1] = g;
    else input_grad = g;
  }
  return input_grad;
}

void backward_weight(StageImpl& stage, SplitGraph& graph) {
  for (int i = static_cast<int>(graph.outputs.size()) - 1; i >= 0; --i) {
    std::vector<torch::Tensor> params = stage.layer_parameters(i);
    if (!params.empty())
      torch::autograd::backward({graph.outputs[i]}, {graph.output_grads[i]}, /*retain_graph=*/false, false, params);
  }
  graph = SplitGraph{};
}

}  // namespace parallax::exec
