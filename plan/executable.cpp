#include "plan/executable.hpp"

#include <string>

#include "plan/error.hpp"

namespace parallax::plan {

using schedule::splits_backward;

namespace {

// What the executor's sharded stages (exec/fsdp.hpp) run: one shard over the data-parallel ranks,
// gathered per layer around a whole backward.
void check_shard_executable(const Scenario& s) {
  const ParallelSpec& p = s.parallel;
  if (p.shard == Shard::none) return;
  const std::string what = std::string("parallel.shard ") + name(p.shard);
  auto predict_only = [&](const std::string& key, const std::string& with) {
    throw InputError(s.where(key), what + " with " + with +
                                       " is predict-only: `parallax simulate`, `plan` and `tune` take it, "
                                       "the executor does not run it yet");
  };
  if (p.shard_group > 0 && p.shard_group != p.data)
    predict_only("parallel.shard_group", "a shard group smaller than data (HSDP; shard_group " +
                                             std::to_string(p.shard_group) + " of data " + std::to_string(p.data) + ")");
  // FSDP2 over one rank still gathers into unsharded buffers, which the plan counts; the executor
  // would run it as DDP without a peer and measure something else.
  if (p.data == 1) predict_only("parallel.shard", "one data-parallel rank (nothing to shard: set parallel.shard: none to run it)");
  if (s.layers.back().shape.form.tie_embeddings) predict_only("model.tie_embeddings", "tied embeddings");
  if (!p.sharded(Shard::gradients)) return;
  if (p.reduces_every_microbatch() && p.chunks * p.grad_accumulation > 1)
    predict_only("parallel.reduce_scatter_every_microbatch",
                 "gradients reduced every micro-batch (the executor reduces them once, after the step's last backward: "
                 "set parallel.reduce_scatter_every_microbatch: false to run it so)");
  if (p.activation_checkpointing != Recompute::none)
    predict_only("parallel.activation_checkpointing", "activation checkpointing");
  if (splits_backward(p.schedule))
    predict_only("parallel.schedule", std::string("a schedule that splits the backward (") + name(p.schedule) + ")");
}

}  // namespace

void check_executable(const Scenario& s) {
  for (const auto& l : s.layers)
    if (l.kind == LayerKind::synthetic)
      throw InputError(s.where("model"),
                       "layer '" + l.name +
                           "' is synthetic: synthetic layers describe a cost for the simulator and "
                           "cannot be run; use a preset (mlp, transformer) or "
                           "linear/embedding/encoder/head layers");
  // What the simulator predicts but this executor does not run yet (docs/scenarios.md).
  const ParallelSpec& p = s.parallel;
  auto predict_only = [&](const std::string& key, const std::string& what) {
    throw InputError(s.where(key),
                     what +
                         " is predict-only: `parallax simulate`, `plan` and `tune` take it, "
                         "the executor does not run it yet");
  };
  if (p.tensor > 1)
    predict_only("parallel.tensor",
                 "tensor parallelism (parallel.tensor " + std::to_string(p.tensor) + ")");
  if (p.context > 1)
    predict_only("parallel.context", "context parallelism (parallel.context " + std::to_string(p.context) + ")");
  for (const auto& l : s.layers)
    if (l.shape.mtp) predict_only("model.mtp_layers", "multi-token prediction (model.mtp_layers)");
  // The executor's blocks run at dropout 0, so that runs of different layouts and a recomputed
  // forward compute the same function (random masks would need the RNG's state carried to each
  // re-run, as torch.utils.checkpoint carries it).
  for (const auto& l : s.layers)
    if (l.shape.form.dropout > 0) predict_only("model.dropout", "dropout (model.dropout above 0)");
  for (const auto& l : s.layers) {
    if (l.shape.moe.capacity_factor > 0)
      predict_only("model.capacity_factor", "a router's capacity factor (dropped tokens; the executor routes dropless)");
    if (l.shape.moe.weighted_activation)
      predict_only("model.expert_weighting", "the router's weights on the experts' activation (model.expert_weighting: activation; the executor "
                                             "weights their outputs: set output)");
  }
  if (p.expert > 1 && p.shard != Shard::none)
    predict_only("parallel.expert", "expert parallelism with parallel.shard");
  if (p.activation_checkpointing == Recompute::selective || p.activation_checkpointing == Recompute::selective_op)
    predict_only("parallel.activation_checkpointing", std::string("selective recompute (") + name(p.activation_checkpointing) + ")");
  if (p.activation_checkpointing != Recompute::none && splits_backward(p.schedule))
    predict_only(
        "parallel.activation_checkpointing",
        std::string("activation checkpointing with a schedule that splits the backward (") +
            name(p.schedule) + ")");
  if (p.master_weights)
    predict_only("parallel.master_weights", "master_weights (Megatron-LM's mixed precision)");
  if (p.grad_reduce_in_bf16)
    predict_only("parallel.grad_reduce_in_bf16", "bf16 gradient reduction");
  if (!p.overlap_grad_reduce && p.replicas() > 1)
    predict_only("parallel.overlap_grad_reduce", "gradient reduction after the backward (overlap_grad_reduce: false)");
  if (p.param_gather_overlapped())
    predict_only("parallel.overlap_param_gather", "the parameters' all-gather beside the next forward (overlap_param_gather: true; the "
                                                  "executor gathers them after the optimizer step)");
  check_shard_executable(s);
  if (p.tp_comm_overlap && p.tensor > 1)
    predict_only("parallel.tp_comm_overlap", "tensor-parallel communication overlapped with the GEMMs");
  if (p.p2p == P2p::megatron)
    predict_only("parallel.p2p", "Megatron-LM's point-to-point (parallel.p2p: megatron)");
  if (p.moe_token_dispatcher == TokenDispatcher::deepep && p.expert > 1)
    predict_only("parallel.moe_token_dispatcher", "DeepEP's token dispatch (the executor runs c10d's all-to-all)");
  for (const auto& l : s.layers)
    if (l.shape.flash_attention) predict_only("model.attention", "flash attention (layer '" + l.name + "')");
  // The executor computes the loss with LibTorch's cross_entropy on fp32 logits: the same loss, but
  // another cross entropy's kernels, bytes and memory than a fused or Megatron-core's one.
  if (s.layers.back().shape.loss == Loss::fused) predict_only("model.loss", "a fused cross entropy (model.loss: fused)");
  if (s.layers.back().shape.loss == Loss::megatron)
    predict_only("model.loss", "Megatron-core's vocabulary-parallel cross entropy (model.loss: megatron; set model.loss: eager to run "
                               "torch's)");
  if (s.layers.back().shape.form.tie_embeddings && p.stages() > 1)
    predict_only("model.tie_embeddings", "tied embeddings over several pipeline stages (the executor ties them within one stage)");
  if (p.precision == Precision::fp8) predict_only("parallel.precision", "fp8 (Transformer Engine's linear layers)");
  // On CUDA, fp16 runs under autocast with a loss scaler (exec/grad_scaler.hpp).
  if (s.parallel.precision == Precision::fp16 && s.hardware.device.kind != DeviceKind::cuda)
    throw InputError(
        s.where("parallel.precision"),
        "precision fp16 cannot run on the CPU: this LibTorch's CPU autocast has bf16 only; use "
        "fp32 or bf16 here, or a CUDA profile (fp16 trains there with a loss scaler)");
  const auto& first = s.layers.front();
  const bool tokens = first.kind == LayerKind::embedding;
  if (s.data.source == "fashion-mnist" &&
      (tokens || first.shape.in != 784 || s.layers.back().kind != LayerKind::linear ||
       s.layers.back().shape.out != 10))
    throw InputError(
        s.where("data.source"),
        "fashion-mnist needs a model taking 784 features and giving 10 classes (the mlp preset)");
  if (s.layers.back().kind != LayerKind::head && s.layers.back().kind != LayerKind::linear)
    throw InputError(s.where("model"),
                     "the model must end in a head or linear layer to compute a loss");
}

bool executable(const Scenario& scenario) {
  try {
    check_executable(scenario);
    return true;
  } catch (const InputError&) {
    return false;
  }
}

bool executable(const Scenario& base, const Settings& settings) {
  Scenario s = base;
  apply(settings, &s);
  return executable(s);
}

}  // namespace parallax::plan
