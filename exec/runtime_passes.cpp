// The micro-batch passes of a rank's Runtime (exec/rank_runtime.hpp): forward, backward in its
// whole, split (I, W) and recomputed forms, and the loss scaler's overflow check before OPTIM.
#include <limits>

#include "exec/device.hpp"
#include "exec/faults.hpp"
#include "exec/rank_runtime.hpp"

namespace parallax::exec {
namespace {

// What a micro-batch's backward (B or I) leaves behind goes at once, not at the step's end: a
// later 1F1B stage would otherwise hold every micro-batch's input, target and gradients until
// then, and its memory would grow with the chunks. The input's gradient stays for its SEND_B.
void release_after_backward(Slot& slot) {
  slot.output = slot.loss = slot.input = slot.target = slot.grad_out = torch::Tensor();
  slot.layer_inputs.clear();
  slot.layer_outputs.clear();
}

// A layer's input as layer recompute keeps it: for autograd where the layer takes a floating-point
// input whose gradient goes somewhere (not the first stage's token ids or features).
torch::Tensor recompute_input(const torch::Tensor& kept, bool stage_input_has_grad) {
  return kept.is_floating_point() && stage_input_has_grad ? kept.detach().requires_grad_() : kept;
}

}  // namespace

// Loss scaling (fp16): every stage of this rank gets its averaged gradients and divides them by
// the scale; then all ranks agree whether any gradient anywhere overflowed, since a stage that
// stepped while another skipped would leave the pipeline's stages at different steps (PyTorch's
// sharded scalers all-reduce their flag for the same reason). One host read per step.
void Runtime::check_overflow() {
  torch::Tensor found;
  const bool inject = fault_mode(launch_.rank, step_) == "overflow";
  for (auto& [s, st] : stages_) {
    if (st.reducer) {
      st.reducer->wait(comm_);
      st.reducer->apply();
    }
    if (st.sharded) {
      st.sharded->wait_reductions();
      st.sharded->gradients_to_shards();
    }
    if (inject) {
      torch::NoGradGuard no_grad;
      stepped_parameters(st).front().grad().view({-1})[0].fill_(std::numeric_limits<float>::infinity());
    }
    scaler_->unscale(stepped_parameters(st), found);
  }
  std::vector<torch::Tensor> flag{found};
  c10d::AllreduceOptions max;
  max.reduceOp = c10d::ReduceOp::MAX;
  comm_.wait(comm_.world().allreduce(flag, max), "the loss scaler's overflow check");
  const bool overflow = flag[0].item<float>() > 0;
  scaled_step_ok_ = scaler_->update(overflow);
  overflow_checked_ = true;
}

void Runtime::forward(const Action& a, Slot& slot, int64_t step) {
  computing_ = a;
  StageState& st = stages_.at(a.stage);
  if (a.stage == 0 || is_last(a.stage)) {
    MicroBatch mb = data_.micro_batch(step, a.mb, replica_, /*with_input=*/a.stage == 0);
    if (a.stage == 0) slot.input = mb.input.to(train_device_);
    slot.target = mb.target.to(train_device_);
  }
  torch::Tensor out;
  {
    AutocastScope autocast(dtype_, train_device_.type());
    if (p_.activation_checkpointing == plan::Recompute::stage) {
      torch::NoGradGuard no_grad;  // keep only the input; B recomputes
      out = st.module->forward(slot.input);
    } else if (p_.activation_checkpointing == plan::Recompute::layer) {
      // Keep each block's input, B recomputing one block at a time; the embedding and the head
      // keep their graph (and the head the loss's).
      slot.layer_inputs.clear();
      slot.layer_outputs.clear();
      out = slot.input;
      for (int i = 0; i < st.module->layer_count(); ++i) {
        if (p_.recomputes_forward(stage_layer(a.stage, i).kind)) {
          torch::NoGradGuard no_grad;
          slot.layer_inputs.push_back(out);
          slot.layer_outputs.emplace_back();
          out = st.module->forward_layer(i, out);
        } else {
          slot.layer_inputs.push_back(recompute_input(out, i > 0 || a.stage > 0));
          out = st.module->forward_layer(i, slot.layer_inputs.back());
          // (The last stage's head's backward starts from the loss: its logits need not stay.)
          const bool last = i + 1 == st.module->layer_count() && is_last(a.stage);
          slot.layer_outputs.push_back(last ? torch::Tensor() : out);
        }
      }
    } else if (st.split) {
      out = forward_split(*st.module, slot.input, &slot.split);
    } else {
      out = st.sharded ? st.sharded->forward(slot.input) : st.module->forward(slot.input);
    }
    if (is_last(a.stage)) {
      slot.loss = model_loss(last_layer(a.stage), out, slot.target);
      // Summed where the loss is, in double, and read once per step: reading it here would
      // make a GPU rank wait for its kernels after every micro-batch.
      const torch::Tensor loss = slot.loss.detach().to(torch::kDouble);
      loss_total_ = loss_total_.defined() ? loss_total_ + loss : loss;
      ++loss_count_;
    }
  }
  // The last stage's backward starts from the loss, whose graph holds what it needs: its output
  // (the logits, a vocabulary per token) goes now, as Megatron-LM's last stage returns only the loss.
  slot.output = is_last(a.stage) ? torch::Tensor() : out;
}

// Layer recompute: from the last layer to the first, re-run a block from its kept input with
// autograd and take its backward at once, so one block's activations live at a time (what
// torch.utils.checkpoint around each block does); a kept layer's backward runs on the graph its
// forward kept, the head's from the loss. Returns the gradient of the stage's input.
torch::Tensor Runtime::backward_by_layer(const Action& a, Slot& slot, double scale) {
  StageState& st = stages_.at(a.stage);
  torch::Tensor grad = slot.grad_out;
  for (int i = st.module->layer_count() - 1; i >= 0; --i) {
    const bool last = i + 1 == st.module->layer_count() && is_last(a.stage);
    torch::Tensor x = slot.layer_inputs[i], y = slot.layer_outputs[i];
    if (!p_.recomputes_forward(stage_layer(a.stage, i).kind)) {  // kept
      if (last) (slot.loss * scale).backward();
      else y.backward(grad.to(y.scalar_type()));
    } else {
      x = recompute_input(x, i > 0 || a.stage > 0);
      AutocastScope autocast(dtype_, train_device_.type());
      y = st.module->forward_layer(i, x);
      if (last) (model_loss(last_layer(a.stage), y, slot.target) * scale).backward();
      else y.backward(grad.to(y.scalar_type()));
    }
    grad = x.requires_grad() ? x.grad() : torch::Tensor();
    slot.layer_inputs[i] = slot.layer_outputs[i] = torch::Tensor();  // this layer's activations go now
  }
  return grad;
}

// I: the input gradient; the weights' wait for W (exec/split_backward.hpp).
void Runtime::backward_input(const Action& a, Slot& slot) {
  computing_ = a;
  const double scale = loss_scale();
  const torch::Tensor grad_in = is_last(a.stage) ? exec::backward_input(slot.split, slot.loss * scale, {})
                                                 : exec::backward_input(slot.split, slot.output, slot.grad_out);
  if (a.stage > 0) slot.grad_in = grad_in;
  release_after_backward(slot);
}

void Runtime::arm_if_last(StageState& st) {
  if (++st.backwards != plan_.schedule.microbatches()) return;
  if (st.reducer) st.reducer->arm(static_cast<int32_t>(step_));
  if (st.sharded) st.sharded->arm(static_cast<int32_t>(step_));
}

// W, the stage's last of the step arming DDP's buckets as B does.
void Runtime::backward_weight(const Action& a, Slot& slot) {
  computing_ = a;
  StageState& st = stages_.at(a.stage);
  arm_if_last(st);
  exec::backward_weight(*st.module, slot.split);
}

void Runtime::backward(const Action& a, Slot& slot) {
  computing_ = a;
  StageState& st = stages_.at(a.stage);
  if (st.split) {  // a full backward of a stage whose other backwards split: I, then W
    backward_input(a, slot);
    backward_weight(a, slot);
    return;
  }
  arm_if_last(st);
  if (p_.activation_checkpointing == plan::Recompute::layer) {
    const double scale = loss_scale();
    const torch::Tensor grad_in = backward_by_layer(a, slot, scale);
    if (a.stage > 0) slot.grad_in = grad_in;
    release_after_backward(slot);
    return;
  }
  torch::Tensor out = slot.output, loss = slot.loss;
  if (p_.activation_checkpointing == plan::Recompute::stage) {
    AutocastScope autocast(dtype_, train_device_.type());
    out = st.module->forward(slot.input);
    if (is_last(a.stage)) {
      loss = model_loss(last_layer(a.stage), out, slot.target);
      out = torch::Tensor();  // the logits: the loss's graph holds what its backward needs
    }
  }
  // Every micro-batch's loss is a mean over its samples; scaling by 1/(chunks x accumulation)
  // makes the step's gradient the mean over the whole mini-batches, as one big batch would.
  // A loss scaler multiplies by its scale too; check_overflow divides it out of the gradients.
  const double scale = loss_scale();
  if (st.sharded) st.sharded->before_backward();
  if (is_last(a.stage)) (loss * scale).backward();
  else out.backward(slot.grad_out.to(out.scalar_type()));
  if (st.sharded) st.sharded->after_backward();
  if (a.stage > 0) slot.grad_in = slot.input.grad();
  release_after_backward(slot);
}

}  // namespace parallax::exec
