#include "tune/evaluator.hpp"

#include <algorithm>

#include "plan/partition.hpp"
#include "sim/cost_model.hpp"
#include "sim/simulator.hpp"

namespace parallax::tune {

using plan::Time;

Evaluator::Evaluator(plan::Scenario base) : base_(std::move(base)), given_(plan::settings_of(base_)) {}

const plan::Scenario& Evaluator::base_for(int tensor) {
  std::lock_guard<std::mutex> lock(padded_mutex_);
  auto [it, fresh] = padded_.try_emplace(tensor, base_);
  if (fresh) {
    it->second.parallel.tensor = tensor;
    plan::pad_vocabulary(&it->second);
  }
  return it->second;  // std::map keeps references valid while others are added
}

const std::vector<plan::LayerCost>& Evaluator::layer_costs(const plan::Settings& c, int mb) {
  const plan::Scenario& base = base_for(c.tensor);
  std::lock_guard<std::mutex> lock(mutex_);
  auto [it, fresh] = costs_.try_emplace(
      {c.precision, mb, c.tensor, c.context, c.sequence_parallel, c.activation_checkpointing, c.expert, c.expert_tensor_ways()});
  if (fresh) {
    for (size_t l = 0; l < base.layers.size(); ++l)
      it->second.push_back(plan::estimate_layer_cost(base.layers[l], base.hardware, c, mb, /*input_gradient=*/l > 0));
  }
  return it->second;  // std::map keeps references valid while others are added
}

plan::PartitionLen Evaluator::balanced_split(const plan::Settings& c) {
  const int mb = c.batch_size / c.chunks;
  const std::pair key{CostKey{c.precision, mb, c.tensor, c.context, c.sequence_parallel, c.activation_checkpointing, c.expert,
                              c.expert_tensor_ways()},
                      c.stages()};
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (const auto it = splits_.find(key); it != splits_.end()) return it->second;
  }
  std::vector<int64_t> costs;
  for (const auto& l : layer_costs(c, c.batch_size / c.chunks)) costs.push_back(balance_weight(l));
  plan::PartitionLen split = plan::partition_of(plan::balanced_partition(costs, c.stages()));
  std::lock_guard<std::mutex> lock(mutex_);
  return splits_.try_emplace(key, std::move(split)).first->second;
}

plan::Plan Evaluator::plan_of(const plan::Settings& c, plan::PlanDetail detail) {
  plan::Settings explicit_split = c;
  if (c.partition_len.mode == plan::PartitionLen::Mode::balanced && c.stages() <= static_cast<int>(base_.layers.size()))
    explicit_split.partition_len = balanced_split(c);  // the same split, without re-estimating costs
  return plan::resolve_plan(plan::with_settings(base_for(c.tensor), explicit_split), /*check_generated=*/false, &schedules_, detail);
}

Evaluation Evaluator::bound(const plan::Plan& p, const plan::Settings& c) {
  Evaluation e;
  e.config = c;
  for (const auto& r : p.ranks) e.peak_memory = std::max(e.peak_memory, r.memory.total());
  e.fits = base_.hardware.device.holds(e.peak_memory);
  e.lower_bound = lower_bound(p, layer_costs(c, p.microbatch_size));
  return e;
}

Evaluation Evaluator::bound(const plan::Settings& c) { return bound(plan_of(c, plan::PlanDetail::bound), c); }

Evaluation Evaluator::evaluate(const plan::Settings& c) {
  const plan::Plan p = plan_of(c);
  Evaluation e = bound(p, c);
  e.step = step_of(p, c);
  return e;
}

Time Evaluator::step_of(const plan::Plan& p, const plan::Settings& c, sim::NcclChoices* nccl) {
  sim::SimOptions options;
  options.step_only = true;
  options.record_link_samples = false;
  options.layer_costs = &layer_costs(c, p.microbatch_size);
  options.nccl_choices = nccl;
  return sim::simulate(p, options).step_time;
}

void Evaluator::rebucket(plan::Plan* p, const plan::Settings& c) {
  p->scenario.parallel.bucket_cap_mb = c.bucket_cap_mb;
  p->scenario.parallel.first_bucket_mb = c.first_bucket_mb;
  plan::rebucket(p, &schedules_);
}

Time Evaluator::bucket_bound(const plan::Plan& p, const plan::Settings& c, Time lower_bound, sim::NcclChoices* nccl) {
  const auto& costs = layer_costs(c, p.microbatch_size);
  return std::max(lower_bound, sim::reduction_floor(p, sim::stage_costs(p, &costs), nccl));
}

Time lower_bound(const plan::Plan& p, const std::vector<plan::LayerCost>& layer_costs) {
  const std::vector<sim::StageCost> c = sim::stage_costs(p, &layer_costs);
  const int64_t m = p.schedule.microbatches();
  Time best;
  std::vector<Time> rank_busy(p.scenario.parallel.pipeline);
  for (const plan::Stage& st : p.stages)
    rank_busy[st.pipeline_rank] += m * (c[st.index].forward + c[st.index].backward) + c[st.index].optimizer;
  for (Time t : rank_busy) best = std::max(best, t);
  // Stage b starts once micro-batch 0's forward went through the stages before it, and after its
  // last backward the input gradient goes back through them. Where the schedule defers W, only
  // stage b's I must come before that trip (its W may run beside it), and the trip is of I's.
  const bool split = schedule::splits_backward(p.scenario.parallel.schedule);
  Time forwards, inputs, backwards;  // through the stages before b
  for (size_t b = 0; b < c.size(); ++b) {
    const Time input = c[b].backward - c[b].backward_weight;
    if (split) {
      best = std::max(best, forwards + m * (c[b].forward + c[b].backward) + c[b].optimizer);
      best = std::max(best, forwards + m * (c[b].forward + input) + inputs + c[0].optimizer);
    } else {
      best = std::max(best, forwards + backwards + m * (c[b].forward + c[b].backward) + c[0].optimizer);
    }
    forwards += c[b].forward;
    inputs += input;
    backwards += c[b].backward;
  }
  return best;
}

}  // namespace parallax::tune
