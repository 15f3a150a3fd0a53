// Compute on a device: part of the Simulation in sim/simulation.hpp.
#include "sim/simulation.hpp"

namespace parallax::sim::detail {

int& Simulation::backwards_done(int rank, int stage) {
  return backwards_done_[static_cast<size_t>(rank) * sched_.virtual_stages + stage_places_[stage].local];
}

// The rank starts a forward: the interleaved schedule's param_sync_func may start the next
// model chunk's gather now (chunk_prefetch_), after the one before it on the comm stream.
void Simulation::prefetch_chunks(int rank, Time now) {
  const int p = sched_.pipeline, v = sched_.virtual_stages, pr = ranks_[rank].pipeline_rank;
  const int id = rank_forwards_[static_cast<size_t>(rank)]++ + pr;  // Megatron's param_sync_microbatch_id
  if (id % p != 0 || id / p + 1 >= v || id / p + 1 < 2) return;    // the first forward of chunk id / p, in the first round
  const int next = id / p + 1;
  Time* done = &chunk_gather_done_[static_cast<size_t>(rank) * v];
  done[next] = std::max(now, done[next - 1]) + costs_[next * p + pr].chunk_gather;
}

int& Simulation::forwards_done(int rank, int stage) {
  return forwards_done_[static_cast<size_t>(rank) * sched_.virtual_stages + stage_places_[stage].local];
}

// The all-to-alls of an OVERLAP_F_B (forward of stage c, backward of stage b) that its compute
// does not hide. The pair runs in four phases, compute on one stream and communication on another
// (DeepSeek-V3 report, section 3.2.1 and its Figure 4; Megatron-core's combined 1F1B issues the
// same order): the forward's attention beside the backward's combine, the backward's experts
// beside the forward's dispatch, the forward's experts beside the backward's dispatch, the
// backward's attention beside the forward's combine. Each phase lasts the longer of its two, so
// what a phase's communication has over its compute is exposed. A dispatch and a combine move
// the same bytes: each is half a pass's all-to-alls. "Attention" is all of a pass but its experts
// and all-to-alls. Costs measured whole (no expert part) pair the whole compute with them.
static Time exposed_all_to_all(const StageCost& c, const StageCost& b) {
  auto excess = [](Time comm, Time compute) { return std::max(Time(), comm - compute); };
  const Time forward_rest = c.forward - c.all_to_all_forward, backward_rest = b.backward - b.all_to_all_backward;
  if (c.expert_forward == Time() && b.expert_backward == Time())
    return excess(c.all_to_all_forward + b.all_to_all_backward, forward_rest + backward_rest);
  const Time forward_half = c.all_to_all_forward.scaled(0.5), backward_half = b.all_to_all_backward.scaled(0.5);
  return excess(backward_half, forward_rest - c.expert_forward) + excess(forward_half, b.expert_backward) +
         excess(backward_half, c.expert_forward) + excess(forward_half, backward_rest - b.expert_backward);
}

// How long a compute action takes alone, and whether it saturates memory bandwidth. A backward
// split in two: I is the backward less its weight-gradient part, W that part. OVERLAP_F_B runs
// its forward and its backward on one device: their compute in sequence (compute does not
// overlap compute), their all-to-alls beside it where exposed_all_to_all finds room (DualPipe's
// overlap and Megatron-core's combined 1F1B), the hidden ones slowing the compute beside them as
// any communication does.
std::pair<Time, bool> Simulation::compute_work(const Action& a) const {
  const StageCost& c = costs_[a.stage];
  if (a.kind == ActionKind::OVERLAP_F_B) {
    const StageCost& b = costs_[a.b_stage];
    const Time comm = c.all_to_all_forward + b.all_to_all_backward, rest = c.forward + b.backward - comm;
    const Time exposed = exposed_all_to_all(c, b), hidden = comm - exposed;
    return {rest + exposed + hidden.scaled(interference_.compute - 1.0), b.backward_memory_bound};
  }
  switch (a.kind) {
    case ActionKind::F: return {c.forward, c.forward_memory_bound};
    case ActionKind::B: return {c.backward, c.backward_memory_bound};
    case ActionKind::I: return {c.backward - c.backward_weight, c.backward_memory_bound};
    case ActionKind::W: return {c.backward_weight, c.backward_memory_bound};
    case ActionKind::OVERLAP_F_B: return {c.forward + costs_[a.b_stage].backward, costs_[a.b_stage].backward_memory_bound};
    default: return {c.optimizer, c.optimizer_memory_bound};
  }
}

// The host's time to launch a compute action's kernels (StageCost's launch figures): I and W
// share the backward's in proportion to their device time.
Time Simulation::compute_launch(const Action& a) const {
  const StageCost& c = costs_[a.stage];
  auto share = [&](Time part) { return c.backward > Time() ? c.backward_launch.scaled(part / c.backward) : Time(); };
  switch (a.kind) {
    case ActionKind::F: return c.forward_launch;
    case ActionKind::B: return c.backward_launch;
    case ActionKind::I: return share(c.backward - c.backward_weight);
    case ActionKind::W: return share(c.backward_weight);
    case ActionKind::OVERLAP_F_B: return c.forward_launch + costs_[a.b_stage].backward_launch;
    default: return c.optimizer_launch;
  }
}

void Simulation::start_compute(int rank, const Action& a, Time now) {
  RankState& st = ranks_[rank];
  // The stage whose weight gradients the action completes, if any (B, W, OVERLAP_F_B's B).
  const bool overlap = a.kind == ActionKind::OVERLAP_F_B;
  const bool weights = schedule::makes_weight_gradient(a.kind) || overlap;
  const int weight_stage = overlap ? a.b_stage : a.stage;
  const StageCost& c = costs_[weight_stage];
  auto [dur, memory_bound] = compute_work(a);
  // The host launched the action's kernels after the previous action's: the device ends it no
  // sooner than the last launch (a launch-bound action), however fast its kernels run.
  if (const Time launch = compute_launch(a); launch > Time()) {
    st.host_free += launch;
    dur = std::max(dur, st.host_free - now);
  }
  // The step's last weight gradients of a stage also copy into the DDP buckets, and share the
  // cores with the all-reduces they start.
  const bool last_weights = weights && !groups_.empty() && backwards_done(rank, weight_stage) + 1 == sched_.microbatches();
  if (last_weights) dur += c.bucket_copy_in + c.sync_backward_extra;
  else if (weights && !groups_.empty()) dur += c.reduce_scatter_between;
  // The step's first forward of a stage waits for the parameters' all-gathers that the
  // previous optimizer step left to it: its first bucket's, started with the step, then the
  // exposed part of the later ones' beside it (StageCost::first_gather, first_forward_extra);
  // under the interleaved schedule, what is left of its chunk's whole gather (chunk_prefetch_).
  if (chunk_prefetch_ && (a.kind == ActionKind::F || overlap)) {  // combined 1F1B's forwards count too
    prefetch_chunks(rank, now);
    if (forwards_done(rank, a.stage)++ == 0) {
      const size_t chunk = static_cast<size_t>(rank) * sched_.virtual_stages + stage_places_[a.stage].local;
      dur += std::max(Time(), chunk_gather_done_[chunk] - now);
    }
  } else if (a.kind == ActionKind::F || overlap) {
    if (forwards_done(rank, a.stage)++ == 0)
      dur += std::max(Time(), first_gather_done_[a.stage] - now) + costs_[a.stage].first_forward_extra;
  }
  // Recorded with its start; on_compute_done sets its end (interference may stretch it).
  const int32_t ev = record(rank, Lane::compute, a, now, now, 0);
  if (st.last_compute >= 0) depend(st.last_compute, end_of(st.last_compute));
  if (st.waited_on >= 0) depend(st.waited_on, st.waited_on_release);
  st.waited_on = -1;
  st.last_compute = ev;
  st.bucket_work = nullptr;
  if (weights) ++backwards_done(rank, weight_stage);
  if (last_weights) {
    // Gradients are ready as the backward (or W) passes each bucket's first layer; OVERLAP_F_B
    // does its forward first.
    if (a.kind == ActionKind::W) st.bucket_work = &c.bucket_ready_in_weight;
    else if (!overlap) st.bucket_work = &c.bucket_ready;
    else {
      st.shifted_buckets = c.bucket_ready;
      for (Time& t : st.shifted_buckets) t += costs_[a.stage].forward;
      st.bucket_work = &st.shifted_buckets;
    }
  }
  st.computing = true;
  st.compute_stage = weight_stage;
  st.memory_bound = memory_bound;
  st.work_done = 0;
  st.work_total = dur.count_ns();
  st.progress_ns = now.count_ns();
  node_compute(rank, +1, now);
  st.speed = compute_speed(rank);
  st.next_bucket = 0;
  ++st.compute_version;
  schedule_compute(rank, now);
  if (st.memory_bound) slow_ports(rank, true, now);
}

bool Simulation::current(int rank, int32_t version) const {
  return ranks_[rank].compute_version == static_cast<uint32_t>(version);
}

// 1, or slower while a communication kernel runs on the device and while another rank of the
// node computes (shared cores).
double Simulation::compute_speed(int rank) const {
  const RankState& st = ranks_[rank];
  double speed = st.comm_kernels > 0 ? speed_beside_comm_ : 1.0;
  if (!node_computing_.empty() && node_computing_[topo_.node_of(rank)] > (st.computing ? 1 : 0))
    speed /= interference_.shared_cores;
  return speed;
}

// A rank of the node starts or stops computing: the others' compute in progress goes on at
// their new speed. The node's ranks are few where cores are shared (a CPU host's).
void Simulation::node_compute(int rank, int delta, Time now) {
  if (node_computing_.empty()) return;
  const int node = topo_.node_of(rank);
  node_computing_[node] += delta;
  const int per_node = plan_.scenario.hardware.devices_per_node;
  for (int r = node * per_node; r < std::min(played_, (node + 1) * per_node); ++r)
    if (r != rank) retime(r, now);
}

// The rank's compute in progress goes on at the speed of now.
void Simulation::retime(int rank, Time now) {
  RankState& st = ranks_[rank];
  if (!st.computing) return;
  const double speed = compute_speed(rank);
  if (speed == st.speed) return;
  st.work_done += static_cast<double>(now.count_ns() - st.progress_ns) * st.speed;
  st.progress_ns = now.count_ns();
  st.speed = speed;
  ++st.compute_version;  // the queued bucket and end events are stale
  schedule_compute(rank, now);
}

// Queues the compute's remaining bucket-ready points and its end at the current speed. At speed
// 1 from its start these are its offsets as they are. Bucket events go in before the end so
// that, at equal times, they come first.
void Simulation::schedule_compute(int rank, Time now) {
  RankState& st = ranks_[rank];
  const auto version = static_cast<int32_t>(st.compute_version);
  // Full speed from the start (most computes): the offsets as they are, as the formula below
  // would give them, without its floating point.
  const bool as_is = st.speed == 1.0 && st.work_done == 0.0;
  auto at = [&](int64_t work) {
    if (as_is) return now + Time::ns(work);
    const double left = std::max(0.0, static_cast<double>(work) - st.work_done);
    return now + Time::ns(static_cast<int64_t>(std::ceil(left / st.speed - 1e-6)));
  };
  if (st.bucket_work)
    for (size_t b = st.next_bucket; b < st.bucket_work->size(); ++b)
      queue_.push(at((*st.bucket_work)[b].count_ns()), kBucketReady, rank, version, static_cast<int32_t>(b));
  queue_.push(at(st.work_total), kComputeDone, rank, version);
}

// A communication kernel starts (+1) or ends (-1) on the rank's device: its compute in
// progress goes on at the new speed from now.
void Simulation::comm_kernel(int rank, int delta, Time now) {
  if (rank >= played_) return;
  ranks_[rank].comm_kernels += delta;
  retime(rank, now);
}

// A collective's kernels start or end on every member's device; nothing to track when compute
// is never slowed (the member loop would be wasted on every bucket).
void Simulation::comm_kernels(const std::vector<int>& members, int delta, Time now) {
  if (interference_.compute == 1.0) return;
  for (int m : members) comm_kernel(m, delta, now);
}

// Memory-bound compute on a device leaves its fabric ports less of its memory bandwidth.
void Simulation::slow_ports(int rank, bool slow, Time now) {
  if (interference_.communication == 1.0) return;
  const double capacity = topo_.node_bandwidth() / (slow ? interference_.communication : 1.0);
  for (int link : topo_.device_ports(rank)) network_.set_capacity(link, capacity, now);
}

void Simulation::on_compute_done(int rank, Time now) {
  RankState& st = ranks_[rank];
  st.computing = false;
  node_compute(rank, -1, now);
  if (st.memory_bound) slow_ports(rank, false, now);
  end_ = std::max(end_, now);
  if (st.last_compute >= 0) run_.timeline.events[st.last_compute].end = now;
  st.last_done = st.last_compute;
  advance(rank, now);
}

}  // namespace parallax::sim::detail
