// Collectives: part of the Simulation in sim/simulation.hpp.
#include "sim/simulation.hpp"

namespace parallax::sim::detail {

void Simulation::build_groups() {
  const int p = sched_.pipeline;
  for (const plan::Stage& st : plan_.stages) {
    Group g;
    for (int rep = 0; rep < plan_.scenario.parallel.replicas(); ++rep) g.members.push_back(rep * p + st.pipeline_rank);
    for (const auto& b : st.buckets) g.bucket_bytes.push_back(b.bytes);
    const size_t nb = g.bucket_bytes.size();
    g.arrivals.assign(nb, 0);
    g.last_arrival.assign(nb, Time());
    g.last_arrival_event.assign(nb, -1);
    g.member_last_event.assign(g.members.size(), -1);
    plan_collective(g);
    groups_.push_back(std::move(g));
  }
}

// Chooses how a group all-reduces each bucket and the flows that carry it (docs/simulator.md).
void Simulation::plan_collective(Group& g) {
  if (!plan_.scenario.hardware.nccl) {
    // Sharded gradients too: the executor reduces a layer on Gloo with an all-reduce of which each
    // rank keeps its slice (exec/fsdp.hpp; LibTorch 1.13's Gloo has no reduce-scatter), so it is
    // played whole. (HSDP's two collectives likewise, as the group's all-reduce.)
    g.plans.push_back(plain_allreduce(g, group_nodes(g)));
  } else {
    // NCCL's model needs only how many nodes the group spans and its most members on one
    // (shapes.whole), not the members by node: listing them was a tenth of a tuner's simulation.
    const ReductionShapes shapes = reduction_shapes(g);
    const GroupLinks links = group_links(g, shapes.whole.nodes > 1);
    // A stage's buckets are mostly of a few sizes (a transformer's blocks are alike): each size's
    // flows are laid out once (over a large group's links, a good part of a tuner's simulation).
    for (size_t b = 0; b < g.bucket_bytes.size(); ++b) {
      const auto same = std::find(g.bucket_bytes.begin(), g.bucket_bytes.begin() + static_cast<std::ptrdiff_t>(b), g.bucket_bytes[b]);
      if (same != g.bucket_bytes.begin() + static_cast<std::ptrdiff_t>(b)) g.plans.push_back(g.plans[static_cast<size_t>(same - g.bucket_bytes.begin())]);
      else g.plans.push_back(nccl_collective(links, shapes, static_cast<double>(g.bucket_bytes[b])));
    }
  }
  // A fit from the job's own runs stretches every phase alike, as the in-run factor does
  // (the flows carry the stretched bytes: their time, not their payload, is what was fitted).
  if (const auto& fitted = plan_.scenario.hardware.fitted; fitted && fitted->allreduce != 1)
    for (CollectivePlan& p : g.plans)
      for (Phase& ph : p.phases) {
        ph.latency = ph.latency.scaled(fitted->allreduce);
        ph.bytes_per_byte *= fitted->allreduce;
      }
}

// The ranks whose links a collective's flows cross. Folded, only the played replica's: the
// other replicas' links carry the same flows in the same roles (replicas_alike), so they never
// give a different fair share, and leaving them out keeps the link solver's components at one
// replica's size instead of the whole machine's.
std::vector<int> Simulation::routed(const std::vector<int>& ranks) const {
  if (played_ == plan_.scenario.parallel.tensor_groups()) return ranks;
  std::vector<int> out;
  for (int r : ranks)
    if (r < played_) out.push_back(r);
  return out;
}

Simulation::GroupLinks Simulation::group_links(const Group& g, bool spans_nodes) const {
  const std::vector<int> ranks = routed(g.members);
  return {dedupe(topo_.device_ports(ranks)), spans_nodes ? dedupe(topo_.nic_ports(ranks)) : std::vector<int>{}};
}

Simulation::GroupNodes Simulation::group_nodes(const Group& g) const {
  GroupNodes out;
  std::vector<int> node_index(static_cast<size_t>(plan_.nodes), -1);  // into out.members, by node
  for (int r : g.members) {
    int& at = node_index[topo_.node_of(r)];
    if (at < 0) {
      at = static_cast<int>(out.members.size());
      out.members.emplace_back();
    }
    out.members[at].push_back(r);
  }
  for (const auto& v : out.members) out.per_node = std::max(out.per_node, v.size());
  return out;
}

std::vector<int> Simulation::dedupe(std::vector<int> v) {
  std::sort(v.begin(), v.end());
  v.erase(std::unique(v.begin(), v.end()), v.end());
  return v;
}

GroupShape Simulation::shape_of(const std::vector<int>& members) const {
  std::vector<int> nodes;
  nodes.reserve(members.size());
  for (int r : members) nodes.push_back(topo_.node_of(r));
  return group_shape(nodes, plan_.nodes, plan_.scenario.hardware);
}

// The distributed optimizer (shard: optimizer) reduce-scatters the gradients, each rank keeping
// the shard it steps; its all-gather of the updated parameters is timed in the stage's costs
// (sim/cost_model.cpp: after the step in OPTIM, or beside the next step's first forward with
// parallel.overlap_param_gather). Under shard gradients and full each layer's gradients are such a bucket; full gathers
// the parameters in the layers' own time (sim/cost_model.cpp). A shard spans shard_ranks
// neighbouring replicas (replica = data index x context + context index); HSDP's copies of a
// shard are every shard_ranks-th replica.
Simulation::ReductionShapes Simulation::reduction_shapes(const Group& g) const {
  const plan::ParallelSpec& p = plan_.scenario.parallel;
  ReductionShapes out;
  out.whole = shape_of(g.members);
  if (p.shard == plan::Shard::none) return out;
  const int n = std::min(p.shard_ranks(), static_cast<int>(g.members.size()));
  out.shard = shape_of({g.members.begin(), g.members.begin() + n});
  std::vector<int> copies;
  for (size_t i = 0; i < g.members.size(); i += static_cast<size_t>(n)) copies.push_back(g.members[i]);
  out.copies = shape_of(copies);
  return out;
}

CollectiveCost Simulation::gradient_reduction(const ReductionShapes& shapes, double bytes) const {
  const plan::ParallelSpec& p = plan_.scenario.parallel;
  if (p.shard == plan::Shard::none) return nccl_choices_->all_reduce(shapes.whole, bytes);
  const int n = shapes.shard.ranks;
  CollectiveCost cost = nccl_choices_->reduce_scatter(shapes.shard, bytes);
  if (p.shard_copies() > 1) {
    // Each rank all-reduces its 1 / n of the buffer: the phases' bandwidth counts the whole buffer.
    for (PhaseCost pc : nccl_choices_->all_reduce(shapes.copies, bytes / n).phases) {
      pc.bandwidth_gb_per_s *= n;
      cost.phases.push_back(pc);
    }
  }
  return cost;
}

// NCCL's choice for a bucket of `bytes` (sim/nccl_model.hpp), as flows: each phase moves its
// bytes at the speed of its slowest link, scaled so that alone it takes NCCL's predicted time.
CollectivePlan Simulation::nccl_collective(const GroupLinks& group, const ReductionShapes& shapes, double bytes) {
  const auto& hw = plan_.scenario.hardware;
  const CollectiveCost cost = gradient_reduction(shapes, bytes);
  CollectivePlan out;
  out.algorithm = cost.algorithm;
  out.protocol = cost.phases.front().protocol;
  const std::vector<int>& inside = group.inside;
  const std::vector<int>& nics = group.nics;
  for (const PhaseCost& pc : cost.phases) {
    if (pc.across_nodes) out.protocol = pc.protocol;  // the phase across nodes is the one that shows
    // A whole-group ring or tree across nodes crosses the node fabric and the NICs; a rail's
    // shard of the hierarchical form only the NICs, and so does a group with one member per
    // node (its GPU reaches its NIC without the node fabric). Leaving the fabric out there also
    // keeps the groups of different pipeline stages, which share nodes, from joining one
    // component of the link solver (3x slower at 1,024 ranks, bench/tune_bench).
    std::vector<int> links = pc.across_nodes ? nics : inside;
    if (pc.across_nodes && cost.algorithm != timeline::Algorithm::hierarchical && shapes.whole.per_node > 1)
      links.insert(links.end(), inside.begin(), inside.end());
    double slowest = std::numeric_limits<double>::infinity();
    for (int l : links) slowest = std::min(slowest, network_.links()[l].capacity);
    // The profile's measured stretch over NCCL's model at this size (1 when it gives none).
    const double stretch = hw.nccl->stretch(bytes);
    out.phases.push_back({links, Time::us(pc.latency_us * stretch), stretch * slowest / pc.bandwidth_gb_per_s});
  }
  return out;
}

CollectivePlan Simulation::plain_allreduce(const Group& g, const GroupNodes& by) {
  CollectivePlan out;
  const double n = static_cast<double>(g.members.size());
  const auto& by_node = by.members;
  const int nodes = static_cast<int>(by_node.size());
  const size_t per_node = by.per_node;
  const auto& cal = plan_.scenario.hardware.calibration;
  if (nodes == 1 && cal && cal->allreduce.bandwidth_gb_per_s > 0) {
    // Measured on this host (sim/cost_model.hpp); a flow's bytes per byte are relative to the
    // node link's capacity (GB/s, 1e3 bytes a us).
    out.algorithm = timeline::Algorithm::ring;
    const RingCost ring = calibrated_allreduce(plan_, *cal, static_cast<int>(n));
    const double per_byte = ring.us_per_byte * topo_.node_bandwidth() * 1e3;
    out.phases.push_back({dedupe(topo_.device_ports(routed(g.members))), Time::us(ring.latency_us), per_byte});
    return out;
  }
  if (nodes == 1 || per_node == 1) {
    out.algorithm = timeline::Algorithm::ring;
    const Time alpha = nodes == 1 ? topo_.node_latency() : topo_.network_latency();
    const std::vector<int> ranks = routed(g.members);
    out.phases.push_back({dedupe(nodes == 1 ? topo_.device_ports(ranks) : topo_.nic_ports(ranks)),
                          alpha * (2 * (static_cast<int64_t>(n) - 1)), 2 * (n - 1) / n});
    return out;
  }
  // Reduce inside each node to a leader, all-reduce across the leaders, broadcast inside.
  out.algorithm = timeline::Algorithm::hierarchical;
  std::vector<int> leaders;
  for (const auto& v : by_node) leaders.push_back(v.front());
  const auto k = static_cast<int64_t>(per_node);
  const std::vector<int> inside = dedupe(topo_.device_ports(routed(g.members)));
  const Time chain = topo_.node_latency() * (k - 1);
  out.phases.push_back({inside, chain, 1.0});
  out.phases.push_back({dedupe(topo_.nic_ports(routed(leaders))), topo_.network_latency() * (2 * int64_t{nodes - 1}),
                        2.0 * (nodes - 1) / nodes});
  out.phases.push_back({inside, chain, 1.0});
  return out;
}

bool Simulation::stage_reduced(int stage) const {
  return groups_.empty() || groups_[stage].done == static_cast<int>(groups_[stage].bucket_bytes.size());
}

void Simulation::on_bucket_ready(int rank, int stage, int bucket, Time now) {
  ranks_[rank].next_bucket = static_cast<uint32_t>(bucket) + 1;
  Group& g = groups_[stage];
  // Folded, replica 0's bucket stands for every replica's, ready at the same time.
  g.arrivals[bucket] += played_ < plan_.scenario.parallel.tensor_groups() ? static_cast<int>(g.members.size()) : 1;
  g.last_arrival[bucket] = now;
  g.last_arrival_event[bucket] = ranks_[rank].last_compute;  // the backward producing it
  try_start(stage, now);
}

void Simulation::try_start(int stage, Time now) {
  Group& g = groups_[stage];
  if (g.running || g.next >= g.bucket_bytes.size()) return;
  if (g.arrivals[g.next] < static_cast<int>(g.members.size())) return;
  g.running = true;
  g.phase = 0;
  g.started = now;
  comm_kernels(g.members, +1, now);
  start_phase(stage, now);
}

const CollectivePlan& Simulation::plan_of(const Group& g, size_t bucket) const {
  return g.plans.size() == 1 ? g.plans.front() : g.plans[bucket];
}

void Simulation::start_phase(int stage, Time now) {
  Group& g = groups_[stage];
  const Phase& ph = plan_of(g, g.next).phases[g.phase];
  network_.start_flow(now, ph.latency, ph.bytes_per_byte * static_cast<double>(g.bucket_bytes[g.next]), ph.links,
                      -stage - 1);
}

void Simulation::on_collective_phase_done(int stage, Time now) {
  Group& g = groups_[stage];
  const CollectivePlan& how = plan_of(g, g.next);
  if (++g.phase < how.phases.size()) {
    start_phase(stage, now);
    return;
  }
  const int bucket = static_cast<int>(g.next);
  const Action a{ActionKind::ALLREDUCE, stage, -1, bucket};
  for (size_t i = 0; i < g.members.size(); ++i) {
    const int r = g.members[i];
    if (r >= played_) continue;
    const int32_t ev = record(r, Lane::allreduce, a, g.started, now, g.bucket_bytes[bucket], how.algorithm, how.protocol);
    depend(g.last_arrival_event[bucket], g.last_arrival[bucket]);
    if (g.member_last_event[i] >= 0) depend(g.member_last_event[i], end_of(g.member_last_event[i]));
    g.member_last_event[i] = ev;
  }
  g.running = false;
  ++g.next;
  // The next bucket starts (if ready) before this one's kernels end, so back-to-back buckets
  // keep the members' compute at one speed instead of re-queuing it twice at this instant.
  try_start(stage, now);
  comm_kernels(g.members, -1, now);
  if (++g.done == static_cast<int>(g.bucket_bytes.size())) {
    for (size_t i = 0; i < g.members.size(); ++i) {
      if (g.members[i] >= played_) continue;
      RankState& st = ranks_[g.members[i]];
      wait_on(st, g.member_last_event[i]);
      const auto& list = sched_.ranks[st.pipeline_rank];
      if (st.waiting && st.pc < list.size() && list[st.pc].kind == ActionKind::OPTIM && list[st.pc].stage == stage) {
        st.last_done = g.member_last_event[i];
        advance(g.members[i], now);
      }
    }
  }
}

}  // namespace parallax::sim::detail
