#include "exec/ddp.hpp"

#include <map>

namespace parallax::exec {

void TracedAllreduce::launch(Group& group, const torch::Tensor& flat) {
  std::vector<torch::Tensor> tensors{flat};
  launched_ns_ = profiler::now_ns();
  work_ = group.allreduce(tensors);
  completed_ns_ = std::make_shared<std::atomic<int64_t>>(0);
  work_->getFuture()->addCallback([done = completed_ns_](c10::ivalue::Future&) { done->store(profiler::now_ns()); });
}

void TracedAllreduce::finish(const Communicator& comm, const std::string& what, const std::vector<int>& peers,
                             profiler::HostTracer& tracer, const schedule::Action& a, int64_t bytes, int32_t step) {
  comm.wait(work_, what, peers);
  // The future is marked complete before its callbacks run: wait() can return first.
  const int64_t done = completed_ns_->load();
  tracer.span(timeline::Lane::allreduce, a, launched_ns_, done > 0 ? done : profiler::now_ns(), bytes, step);
  reset();
}

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
    b.reduce.reset();
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
  if (--b.pending == 0) b.reduce.launch(*group_, b.flat);
}

void BucketReducer::wait(const Communicator& comm) {
  armed_ = false;
  for (auto& b : buckets_) {
    const schedule::Action a{schedule::ActionKind::ALLREDUCE, stage_, -1, b.index};
    if (!b.reduce.launched()) throw std::logic_error("bucket " + a.id() + " never filled: a parameter got no gradient");
    b.reduce.finish(comm, a.id() + " (DDP group of stage " + std::to_string(stage_) + ")", comm.stage_group_ranks(stage_), tracer_, a,
                    b.flat.numel() * 4, step_);
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
