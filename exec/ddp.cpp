#include "exec/ddp.hpp"

#include <map>

namespace parallax::exec {

BucketReducer::BucketReducer(const plan::Stage& stage, Stage& module, Group* group, int replicas,
                             profiler::HostTracer& tracer)
    : stage_(stage.index), group_(group), replicas_(replicas), tracer_(tracer) {
  std::map<std::string, torch::Tensor> by_name;
  for (const auto& p : module->named_parameters()) by_name[p.key()] = p.value();
  for (const plan::Bucket& b : stage.buckets) {
    Bucket bucket;
    bucket.index = b.index;
    int64_t numel = 0;
    for (const auto& name : b.params) {
      auto it = by_name.find(name);
      if (it == by_name.end()) throw std::logic_error("bucket parameter " + name + " is not in stage " + std::to_string(stage_));
      const int i = static_cast<int>(params_.size());
      params_.push_back(it->second);
      bucket_of_.push_back(static_cast<int>(buckets_.size()));
      offset_of_.push_back(static_cast<int>(numel));
      bucket.params.push_back(i);
      numel += it->second.numel();
    }
    bucket.flat = torch::zeros({numel}, params_.empty() ? torch::TensorOptions() : params_.back().options());  // their device
    buckets_.push_back(std::move(bucket));
  }
  for (int i = 0; i < static_cast<int>(params_.size()); ++i)
    params_[i].register_hook([this, i](torch::Tensor grad) { on_grad(i, grad); });
}

void BucketReducer::arm(int32_t step) {
  armed_ = true;
  step_ = step;
  for (auto& b : buckets_) {
    b.pending = static_cast<int>(b.params.size());
    b.work.reset();
    b.completed_ns.reset();
  }
}

void BucketReducer::on_grad(int i, const torch::Tensor& grad) {
  if (!armed_) return;
  Bucket& b = buckets_[bucket_of_[i]];
  const torch::Tensor& p = params_[i];
  auto slot = b.flat.narrow(0, offset_of_[i], p.numel()).view(p.sizes());
  // The hook sees this micro-batch's gradient before it is added to .grad.
  if (p.grad().defined()) torch::add_out(slot, p.grad(), grad.to(slot.dtype()));
  else slot.copy_(grad);
  if (--b.pending == 0) {
    std::vector<torch::Tensor> tensors{b.flat};
    b.launched_ns = profiler::now_ns();
    b.work = group_->allreduce(tensors);
    b.completed_ns = std::make_shared<std::atomic<int64_t>>(0);
    b.work->getFuture()->addCallback(
        [done = b.completed_ns](c10::ivalue::Future&) { done->store(profiler::now_ns()); });
  }
}

void BucketReducer::wait(const Communicator& comm) {
  armed_ = false;
  for (auto& b : buckets_) {
    const schedule::Action a{schedule::ActionKind::ALLREDUCE, stage_, -1, b.index};
    if (!b.work) throw std::logic_error("bucket " + a.id() + " never filled: a parameter got no gradient");
    comm.wait(b.work, a.id() + " (DDP group of stage " + std::to_string(stage_) + ")", comm.stage_group_ranks(stage_));
    // The future is marked complete before its callbacks run: wait() can return first.
    const int64_t done = b.completed_ns->load();
    tracer_.span(timeline::Lane::allreduce, a, b.launched_ns, done > 0 ? done : profiler::now_ns(), b.flat.numel() * 4,
                 step_);
  }
}

void BucketReducer::apply() {
  for (auto& b : buckets_) {
    b.flat.div_(replicas_);
    for (int i : b.params) {
      const torch::Tensor& p = params_[i];
      const auto mean = b.flat.narrow(0, offset_of_[i], p.numel()).view(p.sizes());
      if (p.grad().defined()) p.mutable_grad().copy_(mean);  // in place: no second copy of it
      else p.mutable_grad() = mean.clone();
    }
  }
}

}  // namespace parallax::exec
