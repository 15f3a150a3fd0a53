#include "plan/plan.hpp"

#include <algorithm>
#include <cmath>
#include <map>
#include <set>
#include <stdexcept>

#include "plan/buckets.hpp"
#include "plan/cost.hpp"
#include "plan/partition.hpp"
#include "plan/schedule_validate.hpp"

namespace parallax::plan {
namespace {

std::vector<int> choose_partition(const Scenario& s, int microbatch_size) {
  const ParallelSpec& p = s.parallel;
  const int stages = p.stages();
  const int layers = static_cast<int>(s.layers.size());
  switch (p.partition_len.mode) {
    case PartitionLen::Mode::per_stage: return std::vector<int>(stages, p.partition_len.per_stage);
    case PartitionLen::Mode::list: return p.partition_len.lens;
    case PartitionLen::Mode::balanced: break;
  }
  // Balance what a stage spends per micro-batch: forward + backward (+ recomputation).
  std::vector<int64_t> costs(layers);
  for (int i = 0; i < layers; ++i) {
    const LayerCost c = estimate_layer_cost(s.layers[i], s.hardware, p.precision, microbatch_size, /*input_gradient=*/i > 0);
    Time t = c.forward + c.backward;
    if (p.activation_checkpointing) t += c.forward;
    costs[i] = t.count_ns();
  }
  return balanced_partition(costs, stages);
}

std::vector<Bucket> stage_buckets(const Scenario& s, const Stage& stage) {
  // Gradient-ready order of a layer stack: last layer's last parameter first.
  std::vector<const ParamSpec*> ready;
  std::vector<int> layer_of;
  for (int l = stage.first_layer + stage.layer_count - 1; l >= stage.first_layer; --l) {
    const auto& params = s.layers[l].params;
    for (auto it = params.rbegin(); it != params.rend(); ++it) {
      ready.push_back(&*it);
      layer_of.push_back(l);
    }
  }
  std::vector<int64_t> bytes;
  for (const ParamSpec* p : ready) bytes.push_back(p->numel() * kParamBytes);
  const auto groups = assign_buckets(bytes, mib_to_bytes(s.parallel.first_bucket_mb),
                                     mib_to_bytes(s.parallel.bucket_cap_mb));
  std::vector<Bucket> buckets;
  for (const auto& group : groups) {
    Bucket b;
    b.stage = stage.index;
    b.index = static_cast<int>(buckets.size());
    b.ready_layer = layer_of[group.back()];
    for (int i : group) {
      b.bytes += bytes[i];
      b.params.push_back(ready[i]->name);
    }
    buckets.push_back(std::move(b));
  }
  return buckets;
}

// The most micro-batches each stage holds activations for at once on a rank, found by walking
// the rank's action list: a forward adds one, its backward releases it. On Gloo the executor
// posts every receive of the step at its start (exec/runtime.cpp), so their buffers are held
// from then: a forward's input until that forward (then it is one of the stage's activations),
// an output gradient until its backward.
int64_t peak_activation_bytes(const Plan& plan, int pipeline_rank, int* peak_inflight) {
  std::map<int, int64_t> per_mb;  // stage -> bytes one micro-batch holds
  int64_t held = 0, peak = 0;
  int inflight = 0;
  *peak_inflight = 0;
  const bool preposted = plan.schedule.collectives == Collectives::gloo;
  std::set<std::pair<bool, int>> received;  // (forward, stage) whose micro-batches arrive by RECV
  for (const Action& a : plan.schedule.ranks[pipeline_rank]) {
    if (!preposted || (a.kind != ActionKind::RECV_F && a.kind != ActionKind::RECV_B)) continue;
    const bool forward = a.kind == ActionKind::RECV_F;
    held += receive_buffer_bytes(plan, forward, a.stage);
    received.emplace(forward, a.stage);
  }
  peak = held;
  for (const Action& a : plan.schedule.ranks[pipeline_rank]) {
    if (!is_compute(a.kind)) continue;
    if (!per_mb.count(a.stage)) per_mb[a.stage] = stage_activation_bytes(plan, plan.stages[a.stage]);
    const int64_t bytes = per_mb[a.stage];
    if (a.kind == ActionKind::F) {
      if (received.count({true, a.stage})) held -= receive_buffer_bytes(plan, true, a.stage);
      held += bytes;
      ++inflight;
    } else {
      if (received.count({false, a.stage})) held -= receive_buffer_bytes(plan, false, a.stage);
      held -= bytes;
      --inflight;
    }
    if (held > peak) peak = held;
    *peak_inflight = std::max(*peak_inflight, inflight);
  }
  // With checkpointing, backward re-runs the stage's forward and briefly holds one micro-batch's
  // full activations on top of the stored inputs.
  if (plan.scenario.parallel.activation_checkpointing) {
    int64_t recompute = 0;
    for (const Stage& st : plan.stages) {
      if (st.pipeline_rank != pipeline_rank) continue;
      int64_t full = 0;
      for (int l = st.first_layer; l < st.first_layer + st.layer_count; ++l)
        full += static_cast<int64_t>(plan.scenario.layers[l].activation_elems_per_sample * plan.microbatch_size *
                                     activation_bytes(plan.scenario.parallel.precision));
      recompute = std::max(recompute, full);
    }
    peak += recompute;
  }
  return peak;
}

}  // namespace

int64_t receive_buffer_bytes(const Plan& plan, bool forward, int stage) {
  // As the simulator's messages (sim/cost_model.cpp): the sender's output, or the gradient of the
  // receiver's output, which is the next stage's input.
  const auto& layers = plan.scenario.layers;
  const double elems = forward ? layers[plan.stages[stage - 1].first_layer + plan.stages[stage - 1].layer_count - 1].output_elems_per_sample
                               : layers[plan.stages[stage + 1].first_layer].input_elems_per_sample;
  return std::llround(elems * plan.microbatch_size * activation_bytes(plan.scenario.parallel.precision));
}

int64_t stage_activation_bytes(const Plan& plan, const Stage& stage) {
  const auto& layers = plan.scenario.layers;
  const int elem = activation_bytes(plan.scenario.parallel.precision);
  double elems = 0;
  if (plan.scenario.parallel.activation_checkpointing) {
    elems = layers[stage.first_layer].input_elems_per_sample;  // only the stage input is kept
  } else {
    for (int l = stage.first_layer; l < stage.first_layer + stage.layer_count; ++l)
      elems += layers[l].activation_elems_per_sample;
  }
  return static_cast<int64_t>(std::llround(elems * plan.microbatch_size * elem));
}

Plan resolve_plan(const Scenario& scenario, bool check_generated) {
  Plan plan;
  plan.scenario = scenario;
  const ParallelSpec& p = scenario.parallel;
  plan.world_size = p.world_size();
  plan.nodes = scenario.hardware.nodes_for(plan.world_size);
  plan.microbatch_size = scenario.data.batch_size / p.chunks;
  plan.partition = choose_partition(scenario, plan.microbatch_size);

  int first = 0;
  for (int s = 0; s < p.stages(); ++s) {
    Stage st;
    st.index = s;
    st.pipeline_rank = s % p.pipeline;
    st.first_layer = first;
    st.layer_count = plan.partition[s];
    first += st.layer_count;
    for (int l = st.first_layer; l < st.first_layer + st.layer_count; ++l)
      st.param_bytes += scenario.layers[l].param_count() * kParamBytes;
    if (p.data > 1) st.buckets = stage_buckets(scenario, st);
    plan.stages.push_back(std::move(st));
  }

  std::vector<int> buckets_per_stage;
  if (p.data > 1)
    for (const Stage& st : plan.stages) buckets_per_stage.push_back(static_cast<int>(st.buckets.size()));
  plan.schedule = lower(compute_order(scenario), p.schedule, p.pipeline, p.virtual_stages, p.chunks,
                        p.grad_accumulation, buckets_per_stage, scenario.hardware.collectives);
  const bool imported = p.schedule == ScheduleKind::csv;
  const auto problems = imported || check_generated ? validate_schedule(plan.schedule) : std::vector<std::string>{};
  if (!problems.empty()) {
    if (imported)
      throw InputError(scenario.where("parallel.schedule"), "schedule " + p.schedule_csv + " cannot run: " + problems.front() +
                                                                (problems.size() > 1 ? " (and " + std::to_string(problems.size() - 1) + " more)" : ""));
    throw std::logic_error("generated schedule is invalid: " + problems.front());
  }

  std::vector<MemoryEstimate> per_pipeline_rank(p.pipeline);
  for (int r = 0; r < p.pipeline; ++r) {
    MemoryEstimate& m = per_pipeline_rank[r];
    for (const Stage& st : plan.stages) {
      if (st.pipeline_rank != r) continue;
      m.params += st.param_bytes;
      m.gradients += st.param_bytes;
      m.optimizer += st.param_bytes * scenario.optimizer.state_per_param();
      if (p.data > 1) m.buckets += st.param_bytes;
    }
    m.activations = peak_activation_bytes(plan, r, &m.peak_inflight);
  }
  for (int rank = 0; rank < plan.world_size; ++rank) {
    RankPlan rp;
    rp.rank = rank;
    rp.replica = rank / p.pipeline;
    rp.pipeline_rank = rank % p.pipeline;
    rp.node = rank / scenario.hardware.devices_per_node;
    rp.local_rank = rank % scenario.hardware.devices_per_node;
    for (int s = rp.pipeline_rank; s < p.stages(); s += p.pipeline) rp.stages.push_back(s);
    rp.memory = per_pipeline_rank[rp.pipeline_rank];
    plan.ranks.push_back(std::move(rp));
  }
  return plan;
}

}  // namespace parallax::plan
