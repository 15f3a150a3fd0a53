#include "exec/ddp.hpp"

#include <algorithm>
#include <map>

namespace parallax::exec {

void TracedCollective::launch(Group& group, const torch::Tensor& flat) {
  std::vector<torch::Tensor> tensors{flat};
  add(group.allreduce(tensors));
}

void TracedCollective::add(Communicator::Work work) {
  if (works_.empty()) launched_ns_ = profiler::now_ns();
  works_.push_back(std::move(work));
  auto done = std::make_shared<std::atomic<int64_t>>(0);
  completed_ns_.push_back(done);
  works_.back()->getFuture()->addCallback([done](c10::ivalue::Future&) { done->store(profiler::now_ns()); });
}

TracedCollective::Span TracedCollective::wait(const Communicator& comm, const std::string& what, const std::vector<int>& peers) {
  Span span{launched_ns_, 0};
  for (size_t i = 0; i < works_.size(); ++i) {
    comm.wait(works_[i], what, peers);
    // The future is marked complete before its callbacks run: wait() can return first.
    const int64_t done = completed_ns_[i]->load();
    span.end = std::max(span.end, done > 0 ? done : profiler::now_ns());
  }
  reset();
  return span;
}

void TracedCollective::finish(const Communicator& comm, const std::string& what, const std::vector<int>& peers,
                              profiler::HostTracer& tracer, const schedule::Action& a, int64_t bytes, int32_t step) {
  const Span span = wait(comm, what, peers);
  tracer.span(timeline::Lane::allreduce, a, span.begin, span.end, bytes, step);
}

BucketReducer::BucketReducer(const plan::Stage& stage, const std::vector<plan::Layer>& layers, Stage& module, Group* group, int replicas,
                             profiler::HostTracer& tracer, ExpertReduction experts)
    : stage_(stage.index), group_(group), replicas_(replicas), tracer_(tracer), experts_(std::move(experts)) {
  std::map<std::string, torch::Tensor> by_name;
  for (const auto& p : module->named_parameters()) by_name[p.key()] = p.value();
  for (const plan::Bucket& b : stage.buckets) {
    Bucket bucket;
    bucket.index = b.index;
    int64_t numel = 0, expert_numel = 0;
    for (const auto& name : plan::param_names(layers, b)) {
      auto it = by_name.find(name);
      if (it == by_name.end()) throw std::logic_error("bucket parameter " + name + " is not in stage " + std::to_string(stage_));
      const int i = static_cast<int>(params_.size());
      const bool expert = experts_.params.count(name) > 0;
      params_.push_back(it->second);
      bucket_of_.push_back(static_cast<int>(buckets_.size()));
      offset_of_.push_back(static_cast<int>(expert ? expert_numel : numel));
      expert_.push_back(expert);
      bucket.params.push_back(i);
      (expert ? expert_numel : numel) += it->second.numel();
    }
    const auto options = params_.empty() ? torch::TensorOptions() : params_.back().options();  // their device
    bucket.flat = torch::zeros({numel}, options);
    bucket.expert_flat = torch::zeros({expert_numel}, options);
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
    b.filled = false;
    b.reduce.reset();
  }
}

void BucketReducer::on_grad(int i, const torch::Tensor& grad) {
  if (!armed_) return;
  Bucket& b = buckets_[bucket_of_[i]];
  const torch::Tensor& p = params_[i];
  auto slot = slot_of(i);
  // The hook sees this micro-batch's gradient before it is added to .grad.
  if (p.grad().defined()) torch::add_out(slot, p.grad(), grad.to(slot.dtype()));
  else slot.copy_(grad);
  if (--b.pending > 0) return;
  b.filled = true;
  b.filled_ns = profiler::now_ns();
  if (b.flat.numel() > 0) b.reduce.launch(*group_, b.flat);
  if (b.expert_flat.numel() > 0 && experts_.group) b.reduce.launch(*experts_.group, b.expert_flat);
}

torch::Tensor BucketReducer::slot_of(int i) const {
  const Bucket& b = buckets_[bucket_of_[i]];
  const torch::Tensor& p = params_[i];
  return (expert_[i] ? b.expert_flat : b.flat).narrow(0, offset_of_[i], p.numel()).view(p.sizes());
}

void BucketReducer::wait(const Communicator& comm) {
  armed_ = false;
  for (auto& b : buckets_) {
    const schedule::Action a{schedule::ActionKind::ALLREDUCE, stage_, -1, b.index};
    if (!b.filled) throw std::logic_error("bucket " + a.id() + " never filled: a parameter got no gradient");
    if (!b.reduce.launched()) {  // expert gradients held by this rank alone: nothing to reduce, as planned
      tracer_.span(timeline::Lane::allreduce, a, b.filled_ns, b.filled_ns, 0, step_);
      continue;
    }
    const int64_t bytes = b.flat.numel() * 4 + (experts_.group ? b.expert_flat.numel() * 4 : 0);
    b.reduce.finish(comm, a.id() + " (DDP group of stage " + std::to_string(stage_) + ")", comm.stage_group_ranks(stage_), tracer_, a,
                    bytes, step_);
  }
}

void BucketReducer::apply() {
  for (auto& b : buckets_) {
    b.flat.div_(replicas_);
    // Each expert's gradient holds the contributions of its whole expert group's tokens (the
    // combine's backward brought them), summed over the replicas holding it: over all `replicas`
    // ranks' losses, so divided by all of them (Megatron-core's expert_gradient_scaling_factor,
    // 1 / data-parallel size).
    b.expert_flat.div_(replicas_);
    for (int i : b.params) {
      const torch::Tensor& p = params_[i];
      const auto mean = slot_of(i);
      if (p.grad().defined()) p.mutable_grad().copy_(mean);  // in place: no second copy of it
      else p.mutable_grad() = mean.clone();
    }
  }
}

}  // namespace parallax::exec
