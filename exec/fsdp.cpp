#include "exec/fsdp.hpp"

#include <torch/csrc/autograd/function_hook.h>
#include <torch/csrc/autograd/variable.h>

#include <algorithm>
#include <string>

namespace parallax::exec {
namespace {

// Gives `t`'s storage `bytes` bytes from its own allocator (0: none), keeping the storage itself,
// so every view of it (the unit's parameters, what autograd saved of them) sees the new memory.
// What torch's FSDP1 does with storage().resize_(); LibTorch has no public call for it.
void resize_storage(const torch::Tensor& t, size_t bytes) {
  c10::StorageImpl* s = t.storage().unsafeGetStorageImpl();
  s->set_data_ptr_noswap(bytes > 0 ? s->allocator()->allocate(bytes) : at::DataPtr(nullptr, s->device()));
  s->set_nbytes(bytes);
}

}  // namespace

ShardedStage::ShardedStage(const plan::Plan& plan, const plan::Stage& stage, Stage& module, Group* group, int shard_rank,
                           int shards, const Communicator& comm, profiler::HostTracer& tracer)
    : plan_(plan),
      stage_(stage.index),
      module_(module),
      group_(group),
      shard_rank_(shard_rank),
      shards_count_(shards),
      comm_(comm),
      tracer_(tracer),
      shards_(std::make_shared<torch::nn::Module>("shards")) {
  torch::NoGradGuard no_grad;
  units_.resize(module->layer_count());
  for (const plan::Bucket& b : stage.buckets) units_.at(b.ready_layer - stage.first_layer).bucket = b.index;
  for (int i = 0; i < module->layer_count(); ++i) {
    Unit& u = units_[i];
    u.params = module->layer_parameters(i);
    for (const auto& p : u.params) u.numel += p.numel();
    u.padded = (u.numel + shards - 1) / shards * shards;
    if (u.numel == 0) continue;
    auto values = torch::zeros({u.padded}, u.params.front().options());
    int64_t offset = 0;
    for (auto& p : u.params) {
      values.narrow(0, offset, p.numel()).view(p.sizes()).copy_(p);
      offset += p.numel();
    }
    // Parameters kept whole (optimizer, gradients): the shard is this rank's slice of them, which
    // the optimizer updates in place. Under full the shard is all that stays.
    auto slice = values.narrow(0, shard_rank_ * shard_numel(u), shard_numel(u));
    u.shard = shards_->register_parameter("layer" + std::to_string(stage.first_layer + i), full() ? slice.clone() : slice);
    u.flat = full() ? values.to(compute_dtype(plan.scenario.parallel.precision)) : values;
    offset = 0;
    for (auto& p : u.params) {
      p.set_data(u.flat.narrow(0, offset, p.numel()).view(p.sizes()));  // its memory is now its unit's flat buffer
      offset += p.numel();
    }
    if (full()) release(u);
    if (!plan.scenario.parallel.sharded(plan::Shard::gradients)) continue;
    for (size_t j = 0; j < u.params.size(); ++j) {
      u.params[j].register_hook([this, i, j](const torch::Tensor& grad) { on_grad(i, static_cast<int>(j), grad); });
      count_after_accumulation(u, i, static_cast<int>(j));
    }
  }
}

namespace {

// Runs after a parameter's gradient accumulator (what PyTorch's C++ Reducer hooks, and FSDP2's
// post-accumulate-grad hook in Python).
struct AfterAccumulation : torch::autograd::FunctionPostHook {
  std::function<void()> run;
  explicit AfterAccumulation(std::function<void()> f) : run(std::move(f)) {}
  torch::autograd::variable_list operator()(const torch::autograd::variable_list& outputs,
                                            const torch::autograd::variable_list&) override {
    run();
    return outputs;
  }
};

}  // namespace

// The accumulator is kept alive here with its hook: autograd makes a new one (without the hook)
// whenever no graph holds the old one.
void ShardedStage::count_after_accumulation(Unit& u, int unit, int param) {
  auto accumulator = torch::autograd::impl::grad_accumulator(u.params[param]);
  accumulator->add_post_hook(
      std::make_unique<AfterAccumulation>([this, unit]() { after_accumulation(unit); }));
  u.accumulators.push_back(std::move(accumulator));
}

bool ShardedStage::full() const { return plan_.scenario.parallel.shard == plan::Shard::full; }

// One broadcast from each rank of its slice, in place: Gloo's all-gather would stage the whole
// unit in a buffer of its own, a second copy of the unit while it runs.
void ShardedStage::launch_gather(Unit& u) {
  const auto bytes = static_cast<size_t>(u.padded) * u.flat.element_size();
  if (u.flat.storage().nbytes() != bytes) resize_storage(u.flat, bytes);
  if (full()) u.flat.narrow(0, shard_rank_ * shard_numel(u), shard_numel(u)).copy_(u.shard.detach());
  // Debian's LibTorch 1.13 Gloo broadcasts no bf16: a 16-bit buffer goes as its bytes, which a
  // broadcast copies unchanged.
  const bool as_bytes = u.flat.element_size() == 2;
  const auto data = as_bytes ? u.flat.view(torch::kByte) : u.flat;
  const int64_t slice_numel = shard_numel(u) * (as_bytes ? 2 : 1);
  for (int r = 0; r < shards_count_; ++r) {
    std::vector<torch::Tensor> slice{data.narrow(0, r * slice_numel, slice_numel)};
    c10d::BroadcastOptions from;
    from.rootRank = r;
    u.gather.add(group_->broadcast(slice, from));
  }
}

void ShardedStage::ensure_gathered(int unit) {
  Unit& u = units_[unit];
  if (u.gathered || u.numel == 0) return;
  if (!u.gather.launched()) launch_gather(u);
  const auto span = u.gather.wait(comm_,
                                  "the all-gather of layer " + std::to_string(plan_.stages[stage_].first_layer + unit) +
                                      " (stage " + std::to_string(stage_) + ")",
                                  comm_.stage_group_ranks(stage_));
  if (traced) traced(span.begin, span.end, u.padded * static_cast<int64_t>(u.flat.element_size()));
  u.gathered = true;
}

// FSDP2's implicit prefetch: the next unit's gather runs on Gloo's thread while this one computes.
void ShardedStage::prefetch(int unit) {
  if (unit < 0 || unit >= static_cast<int>(units_.size())) return;
  Unit& u = units_[unit];
  if (!u.gathered && !u.gather.launched() && u.numel > 0) launch_gather(u);
}

void ShardedStage::release(Unit& u) {
  if (!full() || !u.gathered || u.numel == 0) return;
  resize_storage(u.flat, 0);
  u.gathered = false;
}

torch::Tensor ShardedStage::forward(const torch::Tensor& x) {
  if (!full()) return module_->forward(x);
  torch::Tensor out = x;
  const bool reshard = plan_.scenario.parallel.reshard_after_forward;
  for (int i = 0; i < static_cast<int>(units_.size()); ++i) {
    ensure_gathered(i);
    prefetch(i + 1);
    out = module_->forward_layer(i, out);
    // Fires as the gradient of this layer's output arrives, before the layer's backward: the
    // layers after it are done (freed), this one is gathered and the one before prefetched.
    if (out.requires_grad())
      out.register_hook([this, i](const torch::Tensor&) {
        for (int j = i + 1; j < static_cast<int>(units_.size()); ++j) release(units_[j]);
        ensure_gathered(i);
        prefetch(i - 1);
      });
    if (reshard) release(units_[i]);
  }
  return out;
}

void ShardedStage::before_backward() {
  if (!full() || units_.empty()) return;
  ensure_gathered(static_cast<int>(units_.size()) - 1);
  prefetch(static_cast<int>(units_.size()) - 2);
}

void ShardedStage::after_backward() {
  if (!full()) return;
  for (int i = 0; i < static_cast<int>(units_.size()); ++i) {
    if (units_[i].gather.launched()) ensure_gathered(i);  // a prefetch nobody waited for
    release(units_[i]);
  }
}

void ShardedStage::arm(int32_t step) {
  armed_ = true;
  step_ = step;
  for (auto& u : units_) {
    u.pending = static_cast<int>(u.params.size());
    u.arrived = 0;
    u.reduce.reset();
  }
}

// Before autograd accumulates a parameter's gradient: its .grad is made a view of the unit's flat
// gradient buffer (zeros), allocated at the unit's first gradient of the step, and autograd adds
// each micro-batch's gradient into it in place. The sum is then already where the reduction needs
// it: nothing is copied, and a layer's moment holds the summed gradients and the incoming one,
// the two copies FSDP2 holds (its .grad, then its reduce-scatter input). 16-bit parameters keep
// autograd's own .grad until add_cast_gradients.
void ShardedStage::on_grad(int unit, int param, const torch::Tensor&) {
  Unit& u = units_[unit];
  torch::Tensor& grad = u.params[param].mutable_grad();
  if (grad.defined()) return;
  if (!u.grads.defined()) {
    // The layers after this one are done with: their reductions ran during this layer's backward
    // and end now, freeing their gradients before this layer's take their place.
    for (int previous : reducing_) finish_reduce(units_[previous]);
    reducing_.clear();
    u.grads = torch::zeros({u.padded}, u.shard.options());
  }
  if (casts(u)) return;
  const torch::Tensor& p = u.params[param];
  int64_t offset = 0;
  for (int j = 0; j < param; ++j) offset += u.params[j].numel();
  grad = u.grads.narrow(0, offset, p.numel()).view(p.sizes());
}

// After autograd has added a parameter's gradient: once the unit's every parameter has, 16-bit
// gradients go into the buffer; in the step's last backward the buffer is then reduced.
void ShardedStage::after_accumulation(int unit) {
  Unit& u = units_[unit];
  if (++u.arrived == static_cast<int>(u.params.size())) {
    u.arrived = 0;
    if (casts(u)) add_cast_gradients(u);
  }
  if (!armed_) return;
  if (--u.pending > 0) return;
  for (auto& p : u.params) p.mutable_grad() = torch::Tensor();  // views of the buffer the reduction now owns
  u.reduce.launch(*group_, u.grads);
  reducing_.push_back(unit);
}

namespace {

// to += from, of another dtype, a slice at a time: on the CPU an in-place add first casts its whole
// operand to the result's type (TensorIterator's promotion makes a temporary), which for a large
// layer was a fourth copy of its gradients (16 MiB at hidden 2048; FSDP2 casts inside its copy-in
// kernel).
void add_cast(torch::Tensor to, const torch::Tensor& from) {
  constexpr int64_t kSlice = 1 << 16;
  for (int64_t at = 0; at < to.numel(); at += kSlice) {
    const int64_t n = std::min(kSlice, to.numel() - at);
    to.narrow(0, at, n).add_(from.narrow(0, at, n));
  }
}

}  // namespace

// FSDP2's post-backward under a param_dtype: the unit's 16-bit gradients, all made by now, added
// into its fp32 buffer (the sum of the step's micro-batches) and freed.
void ShardedStage::add_cast_gradients(Unit& u) {
  torch::NoGradGuard no_grad;
  int64_t offset = 0;
  for (auto& p : u.params) {
    if (p.grad().defined()) add_cast(u.grads.narrow(0, offset, p.numel()), p.grad().reshape({-1}));
    p.mutable_grad() = torch::Tensor();
    offset += p.numel();
  }
}

void ShardedStage::finish_reduce(Unit& u) {
  const schedule::Action a{schedule::ActionKind::ALLREDUCE, stage_, -1, u.bucket};
  u.reduce.finish(comm_, a.id() + " (the gradient reduction of stage " + std::to_string(stage_) + ")",
                  comm_.stage_group_ranks(stage_), tracer_, a, u.padded * 4, step_);
  // The whole gradients go before the shard's is made, the flat buffer after: no moment holds all three.
  for (auto& p : u.params) p.mutable_grad() = torch::Tensor();
  u.shard.mutable_grad() = u.grads.narrow(0, shard_rank_ * shard_numel(u), shard_numel(u)).div(shards_count_);
  u.grads = torch::Tensor();
}

void ShardedStage::wait_reductions() {
  if (!plan_.scenario.parallel.sharded(plan::Shard::gradients)) return;
  armed_ = false;
  for (int unit : reducing_) finish_reduce(units_[unit]);
  reducing_.clear();
  for (size_t i = 0; i < units_.size(); ++i)
    if (units_[i].pending > 0)
      throw std::logic_error("layer " + std::to_string(plan_.stages[stage_].first_layer + static_cast<int>(i)) +
                             " of stage " + std::to_string(stage_) + " was never reduced: a parameter got no gradient");
}

void ShardedStage::gradients_to_shards() {
  if (plan_.scenario.parallel.sharded(plan::Shard::gradients)) return;  // finish_reduce left them there
  // ZeRO-1: DDP's buckets left each parameter's averaged gradient; this rank's slice of them.
  torch::NoGradGuard no_grad;
  for (auto& u : units_) {
    if (u.numel == 0) continue;
    auto grad = torch::zeros({shard_numel(u)}, u.flat.options());
    const int64_t first = shard_rank_ * shard_numel(u), end = first + shard_numel(u);
    int64_t offset = 0;  // where each parameter starts in the unit's flat buffer
    for (auto& p : u.params) {
      const int64_t lo = std::max(first, offset), hi = std::min(end, offset + p.numel());
      if (lo < hi && p.grad().defined()) grad.narrow(0, lo - first, hi - lo).copy_(p.grad().view({-1}).narrow(0, lo - offset, hi - lo));
      offset += p.numel();
      p.mutable_grad() = torch::Tensor();
    }
    u.shard.mutable_grad() = grad;
  }
}

void ShardedStage::shards_to_parameters() {
  if (full()) return;  // the next forward gathers them
  // Loading a checkpoint gives each shard storage of its own (LibTorch's archive read sets the
  // tensor's storage): copied back into its slice of the flat buffer and made a view of it again,
  // or the optimizer would step a copy that no gather sends.
  torch::NoGradGuard no_grad;
  for (auto& u : units_) {
    if (u.numel == 0) continue;
    auto slice = u.flat.narrow(0, shard_rank_ * shard_numel(u), shard_numel(u));
    if (u.shard.data_ptr() == slice.data_ptr()) continue;
    slice.copy_(u.shard.detach());
    u.shard.set_data(slice);
  }
  for (auto& u : units_)
    if (u.numel > 0) launch_gather(u);
  for (size_t i = 0; i < units_.size(); ++i) {
    units_[i].gathered = false;
    ensure_gathered(static_cast<int>(i));
  }
}

void ShardedStage::gather_all() {
  for (size_t i = 0; i < units_.size(); ++i) ensure_gathered(static_cast<int>(i));
}

}  // namespace parallax::exec
