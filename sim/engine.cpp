// The engine: part of the Simulation in sim/simulation.hpp.
#include "sim/simulation.hpp"

namespace parallax::sim::detail {

namespace {

// Megatron-LM's schedules wait for a stage's input just before the forward or backward that takes
// it: its 1F1B sends an output and receives the next compute's input in one batch_isend_irecv
// (send_forward_recv_backward and the like) right after a compute, and its interleaved schedule
// (overlap_p2p_comm, the default there) posts the receive then and waits on it in
// pp_pre_forward / before the backward (core/pipeline_parallel/schedules.py). torch's lowered
// lists put some receives earlier: the interleaved ones post the next micro-batch's input before
// the current forward (torch's runtime waits at the compute too). On NCCL with parallel.p2p
// megatron each receive is therefore played just before the compute it feeds, after any send
// before it, so its data flows while the rank computes. Sends there never wait and receives count
// as posted ahead, so waiting later cannot hold anything up.
const schedule::Schedule& megatron_batched_p2p(const plan::Plan& plan, schedule::Schedule* out) {
  const schedule::Schedule& s = plan.schedule;
  if (s.collectives != schedule::Collectives::nccl || plan.scenario.parallel.p2p != plan::P2p::megatron) return s;
  const int64_t microbatches = s.microbatches();
  // A receive's key is its consumer's: (stage, micro-batch, forward or backward), an index into
  // `held` (the tuner simulates thousands of plans: no hashing here).
  const auto key = [&](int stage, int mb, bool forward) { return (static_cast<int64_t>(stage) * microbatches + mb) * 2 + (forward ? 1 : 0); };
  const auto compute_keys = [&](const Action& a, int64_t keys[2]) {
    switch (a.kind) {
      case ActionKind::F: keys[0] = key(a.stage, a.mb, true); return 1;
      case ActionKind::B:
      case ActionKind::I: keys[0] = key(a.stage, a.mb, false); return 1;
      case ActionKind::OVERLAP_F_B: keys[0] = key(a.stage, a.mb, true), keys[1] = key(a.b_stage, a.b_mb, false); return 2;
      default: return 0;
    }
  };
  *out = s;
  std::vector<int32_t> held(static_cast<size_t>(s.stages() * microbatches * 2), -1);  // a held receive's place in the list
  for (auto& list : out->ranks) {
    std::vector<Action> moved;
    moved.reserve(list.size());
    std::vector<bool> placed(list.size(), false);
    for (size_t i = 0; i < list.size(); ++i) {
      const Action& a = list[i];
      const bool recv = a.kind == ActionKind::RECV_F || a.kind == ActionKind::RECV_B;
      if (recv && a.mb >= 0 && a.mb < microbatches) {
        int32_t& slot = held[static_cast<size_t>(key(a.stage, a.mb, a.kind == ActionKind::RECV_F))];
        if (slot < 0) {  // held for its consumer (a second of one key, never planned, stays in place)
          slot = static_cast<int32_t>(i);
          continue;
        }
      }
      int64_t keys[2];
      for (int k = 0, n = compute_keys(a, keys); k < n; ++k)
        if (int32_t& slot = held[static_cast<size_t>(keys[k])]; slot >= 0) {
          moved.push_back(list[static_cast<size_t>(slot)]);
          placed[static_cast<size_t>(slot)] = true;
          slot = -1;
        }
      moved.push_back(a);
      placed[i] = true;
    }
    // A receive whose compute never came (none is planned so) goes back at its own place.
    for (size_t i = 0; i < list.size(); ++i)
      if (!placed[i]) {
        held[static_cast<size_t>(key(list[i].stage, list[i].mb, list[i].kind == ActionKind::RECV_F))] = -1;
        moved.insert(moved.begin() + static_cast<std::ptrdiff_t>(std::min(i, moved.size())), list[i]);
      }
    list = std::move(moved);
  }
  return *out;
}

}  // namespace

Simulation::Simulation(const plan::Plan& plan, const SimOptions& options)
    : plan_(plan),
      sched_(megatron_batched_p2p(plan, &batched_)),
      costs_(stage_costs(plan, options.layer_costs)),
      step_only_(options.step_only),
      blocking_sends_(plan.schedule.collectives == schedule::Collectives::nccl && plan.scenario.parallel.p2p == plan::P2p::pytorch),
      preposted_receives_(!blocking_sends_),
      interference_(plan.scenario.hardware.interference),
      speed_beside_comm_(1.0 / interference_.compute),
      // Ranks that share cores slow each other whichever replica they play: fold none then.
      played_((options.step_only || options.fold_replicas) && replicas_alike(plan) &&
                      plan.scenario.hardware.interference.shared_cores == 1.0
                  ? sched_.pipeline
                  : plan.scenario.parallel.tensor_groups()),
      network_(queue_, kFlowActivate, kFlowDone),
      topo_(plan, network_, /*named=*/!options.step_only, /*played=*/options.step_only ? played_ : 0) {
  network_.record_samples(options.record_link_samples);
  const int p = sched_.pipeline;
  ranks_.resize(played_);
  played_replicas_ = static_cast<size_t>(played_ / p);
  backwards_done_.assign(static_cast<size_t>(played_) * sched_.virtual_stages, 0);
  forwards_done_.assign(static_cast<size_t>(played_) * sched_.virtual_stages, 0);
  if (interference_.shared_cores != 1.0) {
    const int per_node = plan.scenario.hardware.devices_per_node;
    node_computing_.assign(static_cast<size_t>((plan.world_size + per_node - 1) / per_node), 0);
  }
  for (int r = 0; r < played_; ++r) {
    ranks_[r].pipeline_rank = r % p;
    ranks_[r].replica = r / p;
  }
  if (const auto& nccl = plan.scenario.hardware.nccl) {
    nccl_choices_ = options.nccl_choices && options.nccl_choices->config() == *nccl ? options.nccl_choices
                                                                                     : &own_nccl_choices_.emplace(*nccl);
  }
  if (!step_only_) {
    shown_.resize(static_cast<size_t>(played_));
    for (int r = 0; r < played_; ++r) shown_[r] = shown_rank(r);
  }
  for (int s = 0; s < p * sched_.virtual_stages; ++s) {
    StagePlace& place = stage_places_.emplace_back();
    place.pipeline_rank = sched_.rank_of_stage(s);
    place.local = s / p;
    for (size_t forward : {0, 1})
      place.first_slot[forward] = (static_cast<size_t>(place.local) * 2 + forward) * played_ +
                                  static_cast<size_t>(place.pipeline_rank) * played_replicas_;
  }
  // A rank's stages take their first buckets' parameter all-gathers one after another from the
  // step's start (the optimizer's zero_grad starts the chain; Megatron-core's forward pre-hooks
  // carry it from chunk to chunk).
  // Stages come in order of their index on the rank (local = stage / p).
  first_gather_done_.assign(stage_places_.size(), Time());
  std::vector<Time> gathered(static_cast<size_t>(p));  // per pipeline rank, so far
  for (size_t s = 0; s < stage_places_.size(); ++s) {
    Time& so_far = gathered[static_cast<size_t>(stage_places_[s].pipeline_rank)];
    so_far += costs_[s].first_gather;
    first_gather_done_[s] = so_far;
  }
  const int v = sched_.virtual_stages;
  chunk_prefetch_ = sched_.kind == schedule::ScheduleKind::interleaved_1f1b && v > 1 && plan.scenario.parallel.param_gather_overlapped();
  if (chunk_prefetch_) {
    chunk_gather_done_.assign(static_cast<size_t>(played_) * v, Time());
    rank_forwards_.assign(static_cast<size_t>(played_), 0);
    for (int r = 0; r < played_; ++r) {  // chunks 0 and 1 start with the step (local chunk j is stage j x p + rank)
      Time* done = &chunk_gather_done_[static_cast<size_t>(r) * v];
      done[0] = costs_[ranks_[r].pipeline_rank].chunk_gather;
      done[1] = done[0] + costs_[p + ranks_[r].pipeline_rank].chunk_gather;
    }
  }
  slots_per_microbatch_ = static_cast<size_t>(sched_.virtual_stages) * 2 * played_;
  if (plan.scenario.parallel.replicas() > 1) build_groups();
  const size_t slots = slots_per_microbatch_ * static_cast<size_t>(sched_.microbatches());
  reserve_huge(rendezvous_, slots);
  rendezvous_.resize(slots);
  // The executor keeps a window of a Gloo step's receives posted ahead of its RECVs
  // (exec/runtime.cpp, schedule::receive_window), so a send mostly finds its receive posted and the
  // payload moves at once. A hand-over between two stages of one rank needs no receive.
  if (preposted_receives_) {
    for (int pr = 0; pr < p; ++pr) receive_window_.push_back(schedule::receive_window(sched_, pr));
    for (int r = 0; r < played_; ++r) {
      for (const Action& a : sched_.ranks[ranks_[r].pipeline_rank])
        if ((a.kind == ActionKind::RECV_F || a.kind == ActionKind::RECV_B) && !schedule::receives_from_peer(sched_, a))
          rendezvous_[rendezvous_slot(ranks_[r].replica, a.kind == ActionKind::RECV_F, a.stage, a.mb)].received = true;
      post_receives_ahead(r, Time());
    }
  }
  run_.folded = played_ < plan.scenario.parallel.tensor_groups();
  run_.played_ranks = played_;
  if (!step_only_) {
    // Roughly what the step records: every action once, transfers twice (send and receive side).
    size_t actions = 0;
    for (int r = 0; r < played_; ++r) actions += sched_.ranks[r % p].size();
    reserve_huge(run_.timeline.events, actions + actions / 4);
    reserve_huge(run_.waited_for, actions + actions / 4);
  }
  run_.timeline.kind = "predicted";
  run_.timeline.scenario = plan.scenario.name;
  // A tensor-parallel group's ranks run the same actions at the same times: the timeline has one
  // rank per group (its first), numbered as the schedule numbers them.
  run_.timeline.world_size = plan.scenario.parallel.tensor_groups();
}

SimRun Simulation::run() {
  const auto t0 = std::chrono::steady_clock::now();
  for (int r = 0; r < played_; ++r) advance(r, Time());
  while (!queue_.empty()) dispatch(queue_.pop());
  report_stall();
  run_.step_time = end_;
  if (!step_only_) {
    network_.finish(end_);
    collect_links();
  }
  // Memory is plan's rule (plan::MemoryEstimate), the one the tuner and `plan` use: the
  // simulator reports it rather than deriving it again.
  const int t = plan_.scenario.parallel.tensor;
  for (int r = 0; r < plan_.scenario.parallel.tensor_groups(); ++r) run_.peak_memory.push_back(plan_.ranks[r * t].memory.total());
  run_.events = queue_.popped();
  run_.wall = plan::Time::ns(std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t0).count());
  return std::move(run_);
}

// The simulator numbers its ranks replica-major (replica x pipeline + pipeline rank: a folded run
// plays ranks 0..pipeline-1); the timeline shows each as the plan places it (plan::group_of), the
// numbers the executor's measured ranks carry. record() writes them (shown_).
int Simulation::shown_rank(int rank) const {
  return plan::group_of(plan_.scenario.parallel, ranks_[rank].replica, ranks_[rank].pipeline_rank);
}

void Simulation::dispatch(const Event& e) {
  switch (e.type) {
    case kComputeDone:
      if (current(e.a, e.b)) on_compute_done(e.a, e.time());
      break;
    case kBucketReady:
      if (current(e.a, e.b)) on_bucket_ready(e.a, ranks_[e.a].compute_stage, e.c, e.time());
      break;
    case kSendCallDone: on_send_call_done(e.a, e.time()); break;
    case kRecvPosted: on_recv_posted(e.a, e.time()); break;
    default:
      if (const std::optional<int> flow = network_.handle(e)) on_flow_done(*flow, e.time());
      break;
  }
}

// "The event just recorded could not start before `from` released it at `release`." Every
// event's dependencies are given right after it is recorded (so no index of it is needed, and
// none checked: that check was 1% of the step's instructions), and only the one released last
// (the lowest index among equals) need be kept: it is the event's link on the critical path.
void Simulation::depend(int32_t from, Time release) {
  if (from < 0 || step_only_) return;
  int32_t& waited = run_.waited_for.back();
  const int64_t ns = release.count_ns();
  if (kept_over(ns, from, latest_release_, waited)) {
    latest_release_ = ns;
    waited = from;
  }
}

// Of two dependencies, whether `event` released at `release` is the one kept over `kept`:
// released later, or as late and earlier in the timeline.
bool Simulation::kept_over(int64_t release, int32_t event, int64_t kept_release, int32_t kept) {
  return release > kept_release || (release == kept_release && event < kept);
}

Time Simulation::end_of(int32_t event) const { return event < 0 ? Time() : run_.timeline.events[event].end; }

// The rank's next compute waits on `event`, which has ended: of all it waits on, depend()
// keeps only one (kept_over), whatever the order they come in, so only that one is held.
void Simulation::wait_on(RankState& st, int32_t event) {
  if (event < 0) return;
  const Time release = end_of(event);
  if (st.waited_on < 0 ||
      kept_over(release.count_ns(), event, st.waited_on_release.count_ns(), st.waited_on)) {
    st.waited_on_release = release;
    st.waited_on = event;
  }
}

void Simulation::advance(int rank, Time now) {
  RankState& st = ranks_[rank];
  const auto& list = sched_.ranks[st.pipeline_rank];
  st.waiting = false;
  while (st.pc < list.size()) {
    const Action& a = list[st.pc];
    switch (a.kind) {
      case ActionKind::F:
      case ActionKind::B:
      case ActionKind::I:
      case ActionKind::W:
      case ActionKind::OVERLAP_F_B:
        start_compute(rank, a, now);
        ++st.pc;
        return;
      case ActionKind::OPTIM:
        if (!stage_reduced(a.stage)) {
          st.waiting = true;
          return;
        }
        start_compute(rank, a, now);
        ++st.pc;
        return;
      case ActionKind::SEND_F:
      case ActionKind::SEND_B: {
        if (blocking_sends_ && !rendezvous_[send_slot(rank, a)].received && send_peer(rank, a) != rank) {
          st.waiting = st.in_send = true;  // NCCL: on_recv_posted lets it go on
          return;
        }
        const Time call = send_call(a);
        if (call > Time()) {  // the sender is busy in the send call; the data leaves after it
          st.send_called = now;
          queue_.push(now + call, kSendCallDone, rank);
          return;
        }
        post_send(rank, a, now, now);
        ++st.pc;
        break;
      }
      case ActionKind::RECV_F:
      case ActionKind::RECV_B:
        if (preposted_receives_) {
          receive_reached(rank, now);
          if (reach_recv(rank, a, now)) {  // the data is already here
            ++st.pc;
            break;
          }
          st.waiting = true;
          return;  // on_transfer_done moves past it
        }
        st.waiting = true;
        post_recv(rank, a, now);
        return;  // on_transfer_done moves past it
      case ActionKind::ALLREDUCE:
        ++st.pc;  // handed to the group when the bucket became ready, inside the last backward
        break;
      case ActionKind::ALL_TO_ALL:
      case ActionKind::ALL_GATHER:  // the executor's, measured inside other actions; never planned
        throw std::logic_error(std::string("simulation: a planned schedule holds ") + schedule::name(a.kind));
    }
  }
}

// Ranks left with actions when nothing more can happen wait on each other: names the cycle of
// who waits for whom (a Deadlock), or says where they stopped if there is no cycle.
void Simulation::report_stall() const {
  schedule::WaitGraph waits_for(played_);  // r -> q when rank r waits for rank q
  bool stalled = false;
  for (int r = 0; r < played_; ++r) {
    const RankState& st = ranks_[r];
    const auto& list = sched_.ranks[st.pipeline_rank];
    if (st.pc >= list.size()) continue;
    stalled = true;
    for (int peer : peers_waited_for(r, list[st.pc])) boost::add_edge(r, peer, waits_for);
  }
  if (!stalled) return;
  std::vector<int> cycle = schedule::find_cycle(waits_for);
  if (cycle.empty()) {
    for (int r = 0; r < played_; ++r)
      if (ranks_[r].pc < sched_.ranks[ranks_[r].pipeline_rank].size())
        throw std::logic_error("simulation stalled: rank " + std::to_string(shown_rank(r)) + " waits at " + waiting_action(r).id());
  }
  std::string m = "deadlock:";
  for (size_t i = 0; i < cycle.size(); ++i) {
    const int r = cycle[i], next = cycle[(i + 1) % cycle.size()];
    m += std::string(i ? "," : "") + " rank " + std::to_string(shown_rank(r)) + " waits in " + waiting_action(r).id() +
         " for rank " + std::to_string(shown_rank(next));
  }
  throw Deadlock(m + (blocking_sends_ ? " (NCCL: a send waits until its receive is posted)" : ""));
}

const Action& Simulation::waiting_action(int rank) const { return sched_.ranks[ranks_[rank].pipeline_rank][ranks_[rank].pc]; }

// The ranks whose progress `a`, where `rank` stopped, waits for.
std::vector<int> Simulation::peers_waited_for(int rank, const Action& a) const {
  switch (a.kind) {
    case ActionKind::SEND_F:
    case ActionKind::SEND_B: return {send_peer(rank, a)};
    case ActionKind::RECV_F: return {peer_rank(rank, a.stage - 1)};
    case ActionKind::RECV_B: return {peer_rank(rank, a.stage + 1)};
    case ActionKind::OPTIM: {
      std::vector<int> others;  // its all-reduces need every replica's buckets
      if (!groups_.empty())
        for (int m : groups_[a.stage].members)
          if (m != rank && m < played_) others.push_back(m);
      return others;
    }
    default: return {};
  }
}

void Simulation::on_flow_done(int tag, Time now) {
  if (tag >= 0) on_transfer_done(tag, now);
  else on_collective_phase_done(-tag - 1, now);
}

void Simulation::collect_links() {
  const auto& links = network_.links();
  for (size_t i = 0; i < links.size(); ++i) {
    const Link& l = links[i];
    LinkUsage u;
    u.name = network_.name(static_cast<int>(i));
    u.capacity_gb_per_s = l.capacity;
    u.bytes = l.bytes;
    u.peak_gb_per_s = l.peak;
    u.busy = Time::ns(l.busy_ns);
    u.samples = network_.samples(static_cast<int>(i));
    run_.links.push_back(std::move(u));
  }
}

}  // namespace parallax::sim::detail
