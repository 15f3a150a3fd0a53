// A floor on a plan's step time from its DDP buckets (sim/simulator.hpp, reduction_floor): the
// rules it relies on are the Simulation's, each named where it is used.
#include <algorithm>
#include <optional>

#include "sim/cost_model.hpp"
#include "sim/nccl_model.hpp"
#include "sim/simulator.hpp"

namespace parallax::sim {
namespace {

using schedule::Action;
using schedule::ActionKind;

// The stage's data-parallel group as Simulation::shape_of sees it: its members are replica x
// pipeline + the stage's pipeline rank, each on the node of its device (Topology: plan::rank_of).
GroupShape data_parallel_shape(const plan::Plan& plan, int pipeline_rank) {
  const plan::ParallelSpec& p = plan.scenario.parallel;
  std::vector<int> nodes;
  nodes.reserve(static_cast<size_t>(p.replicas()));
  for (int rep = 0; rep < p.replicas(); ++rep)
    nodes.push_back(plan::rank_of(p, {rep, pipeline_rank, 0}) / plan.scenario.hardware.devices_per_node);
  return group_shape(nodes, plan.nodes, plan.scenario.hardware);
}

// No less than each bucket's all-reduce can take: NCCL's choice alone on the group's links, as
// Simulation::nccl_collective gives its phases (latency and bytes, stretched, at the slowest
// link's rate; sharing links or slowed ports only lengthen them), with a fitted factor. Zero
// where the reduction is not that all-reduce (Gloo, sharded states): the floor then counts the
// buckets' hand-over and the optimizer step only.
std::vector<Time> alone_allreduces(const plan::Plan& plan, const plan::Stage& st, NcclChoices* nccl) {
  const auto& hw = plan.scenario.hardware;
  std::vector<Time> out(st.buckets.size());
  if (!hw.nccl || plan.scenario.parallel.shard != plan::Shard::none) return out;
  const GroupShape shape = data_parallel_shape(plan, st.pipeline_rank);
  const double fitted = hw.fitted ? hw.fitted->allreduce : 1.0;
  for (size_t k = 0; k < st.buckets.size(); ++k)
    out[k] = Time::us(nccl->time_us(shape, Collective::all_reduce, static_cast<double>(st.buckets[k].bytes)) * fitted);
  return out;
}

// What a compute action takes at least (Simulation::compute_work at full speed, before the
// launch, bucket-copy and interference terms that only lengthen it).
Time least_duration(const Action& a, const std::vector<StageCost>& c) {
  switch (a.kind) {
    case ActionKind::F: return c[a.stage].forward;
    case ActionKind::B: return c[a.stage].backward;
    case ActionKind::I: return c[a.stage].backward - c[a.stage].backward_weight;
    case ActionKind::W: return c[a.stage].backward_weight;
    case ActionKind::OVERLAP_F_B: {
      // Its compute less every all-to-all (exposed ones only add).
      const Time comm = c[a.stage].all_to_all_forward + c[a.b_stage].all_to_all_backward;
      return std::max(Time(), c[a.stage].forward + c[a.b_stage].backward - comm);
    }
    default: return Time();
  }
}

}  // namespace

Time reduction_floor(const plan::Plan& plan, const std::vector<StageCost>& costs, NcclChoices* choices) {
  if (plan.scenario.parallel.replicas() <= 1) return Time();
  const auto& hw = plan.scenario.hardware;
  std::optional<NcclChoices> own;  // the caller's, where it has one for this profile's NCCL
  if (hw.nccl && !(choices && choices->config() == *hw.nccl)) choices = &own.emplace(*hw.nccl);
  std::vector<std::vector<Time>> alone;  // by stage, by bucket
  for (const plan::Stage& st : plan.stages) alone.push_back(alone_allreduces(plan, st, choices));
  // Micro-batch 0's forward reaches stage b after the forwards of the stages before it.
  std::vector<Time> arrival(costs.size());
  for (size_t b = 1; b < costs.size(); ++b) arrival[b] = arrival[b - 1] + costs[b - 1].forward;
  const int microbatches = plan.schedule.microbatches();
  Time floor;
  for (const auto& list : plan.schedule.ranks) {
    Time at;  // no compute of the rank so far ended before this (its compute runs one action at a time)
    bool first = true;
    std::vector<int> weights_done(costs.size(), 0);
    for (const Action& a : list) {
      if (!schedule::is_compute(a.kind)) continue;
      if (first && (a.kind == ActionKind::F || a.kind == ActionKind::OVERLAP_F_B)) at = arrival[a.stage];
      first = false;
      const bool overlap = a.kind == ActionKind::OVERLAP_F_B;
      const int stage = overlap ? a.b_stage : a.stage;
      if ((schedule::makes_weight_gradient(a.kind) || overlap) && ++weights_done[stage] == microbatches) {
        // The step's last weight gradients of the stage: each bucket is handed over at its
        // offset in the action (OVERLAP_F_B after its forward), the group reduces them in turn,
        // and the stage's optimizer step waits for the last (Simulation::start_compute,
        // on_collective_phase_done).
        const std::vector<Time>& offsets = a.kind == ActionKind::W ? costs[stage].bucket_ready_in_weight : costs[stage].bucket_ready;
        const Time shift = overlap ? costs[a.stage].forward : Time();
        Time reduced, after;  // the buckets' reduction ends no sooner than reduced; after: the remaining buckets' time
        for (size_t k = offsets.size(); k-- > 0;) {
          after += alone[stage][k];
          reduced = std::max(reduced, shift + offsets[k] + after);
        }
        floor = std::max(floor, at + reduced + costs[stage].optimizer);
      }
      at += least_duration(a, costs);
    }
  }
  return floor;
}

}  // namespace parallax::sim
