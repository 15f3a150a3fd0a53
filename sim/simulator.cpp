#include "sim/simulator.hpp"

#include <algorithm>
#include <cassert>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <limits>
#include <optional>
#include <unordered_map>

#include "plan/wait_graph.hpp"
#include "sim/cost_model.hpp"
#include "sim/event_queue.hpp"
#include "sim/huge_pages.hpp"
#include "sim/nccl_model.hpp"
#include "sim/network.hpp"
#include "sim/topology.hpp"

namespace parallax::sim {
namespace {

using plan::Action;
using plan::ActionKind;
using plan::Lane;

enum EventType : uint32_t { kComputeDone, kBucketReady, kSendCallDone, kRecvPosted, kFlowActivate, kFlowDone };

struct alignas(64) RankState {
  // The first cache line holds what every event of the rank reads (version, position, speed);
  // at 1,024 ranks and more the states outgrow the caches and each line costs a miss.
  uint32_t compute_version = 0;  // events of an earlier speed carry an older version
  int32_t pipeline_rank = 0;
  int32_t replica = 0;
  uint32_t pc = 0;          // next action in the rank's list
  int32_t last_compute = -1;
  int32_t last_done = -1;  // the latest event that let this rank go on
  int32_t compute_stage = 0;
  int32_t comm_kernels = 0;     // communication kernels running on the device
  bool waiting = false;   // blocked on a RECV, on OPTIM's all-reduces, or (NCCL) in a SEND
  bool in_send = false;   // NCCL: blocked in a SEND until its receive is posted
  // The compute action in progress (F, B or OPTIM), as work: the ns it takes alone. It goes at
  // `speed` (1, or 1/interference while a communication kernel runs on the device), so its end
  // and its buckets' ready times move when the speed does (docs/simulator.md, Interference).
  bool computing = false;
  bool memory_bound = false;  // it saturates the device's memory bandwidth
  uint32_t next_bucket = 0;
  double speed = 1;
  double work_done = 0;
  int64_t work_total = 0;
  // Read less often.
  int64_t progress_ns = 0;
  const std::vector<Time>* bucket_work = nullptr;  // the last backward's bucket-ready offsets
  int64_t held = 0, peak_held = 0;  // activation bytes
  Time send_called;  // when the rank entered the send call it is in
  // Of the events finished since the last compute started that the next compute waited on,
  // the one released last (the lowest index among equals): the only one `depend` would keep.
  // Kept as it comes rather than as a list: no heap buffer per rank to miss in the caches.
  Time waited_on_release;
  int32_t waited_on = -1;
};
static_assert(offsetof(RankState, work_total) < 64, "the hot fields fill the first cache line");

struct Transfer {
  int src = 0, dst = 0;
  ActionKind send_kind = ActionKind::SEND_F;
  int send_stage = 0, recv_stage = 0, mb = 0;
  Time start;
  int64_t bytes = 0;
  int32_t send_dep = -1, recv_dep = -1;
  Time recv_post;   // NCCL: when the receive was posted (Gloo: the rendezvous says when reached)
  size_t slot = 0;  // its rendezvous
};

// One side's post of a transfer: when, and the event that let it get there.
struct Posted {
  Time at;
  int32_t dep = -1;
};

// A point-to-point transfer's meeting point. It holds the side that posted first until the other
// side posts and the transfer starts with both (start_transfer). Gloo posts every receive at the
// step's start: then the data may arrive before the receiver reaches its RECV, and `first`
// holds, after the transfer started, when the receiver reached it (`reached`) or the send's
// event (`arrived`), whichever came first. 16 bytes: there is one per played receiver,
// direction, stage and micro-batch (16 MiB at 8,192 ranks of the mixed bench).
struct Rendezvous {
  Time first_at;  // the first post's (Posted), kept flat so the flags fill its padding
  int32_t first_dep = -1;
  bool sent = false, received = false;
  bool reached = false, arrived = false;

  Posted first() const { return {first_at, first_dep}; }
  void hold(const Posted& p) {
    first_at = p.at;
    first_dep = p.dep;
  }
};
static_assert(sizeof(Rendezvous) == 16);

struct Phase {
  std::vector<int> links;
  Time latency;
  double bytes_per_byte = 0;  // bytes over each link per bucket byte
};

// How one bucket is all-reduced: its algorithm, protocol and the phases that carry it.
struct CollectivePlan {
  plan::Algorithm algorithm = plan::Algorithm::ring;
  plan::Protocol protocol = plan::Protocol::none;
  std::vector<Phase> phases;
};

// One DDP group: a stage across its replicas.
struct Group {
  std::vector<int> members;
  std::vector<CollectivePlan> plans;  // per bucket (NCCL picks by size), or one for all buckets
  std::vector<int64_t> bucket_bytes;
  std::vector<int> arrivals;
  std::vector<Time> last_arrival;
  std::vector<int32_t> last_arrival_event;
  std::vector<int32_t> member_last_event;  // previous all-reduce event of each member
  size_t next = 0;      // next bucket to all-reduce
  bool running = false;
  size_t phase = 0;
  Time started;
  int done = 0;
};

class Simulation {
 public:
  Simulation(const plan::Plan& plan, const SimOptions& options)
      : plan_(plan),
        sched_(plan.schedule),
        costs_(stage_costs(plan, options.layer_costs)),
        step_only_(options.step_only),
        blocking_sends_(plan.schedule.collectives == plan::Collectives::nccl),
        preposted_receives_(!blocking_sends_),
        interference_(plan.scenario.hardware.interference),
        speed_beside_comm_(1.0 / interference_.compute),
        // Ranks that share cores slow each other whichever replica they play: fold none then.
        played_((options.step_only || options.fold_replicas) && replicas_alike(plan) &&
                        plan.scenario.hardware.interference.shared_cores == 1.0
                    ? sched_.pipeline
                    : plan.world_size),
        network_(queue_, kFlowActivate, kFlowDone),
        topo_(plan, network_, /*named=*/!options.step_only) {
    network_.record_samples(options.record_link_samples);
    const int p = sched_.pipeline;
    ranks_.resize(played_);
    played_replicas_ = static_cast<size_t>(played_ / p);
    backwards_done_.assign(static_cast<size_t>(played_) * sched_.virtual_stages, 0);
    if (interference_.shared_cores != 1.0) {
      const int per_node = plan.scenario.hardware.devices_per_node;
      node_computing_.assign(static_cast<size_t>((plan.world_size + per_node - 1) / per_node), 0);
    }
    for (int r = 0; r < played_; ++r) {
      ranks_[r].pipeline_rank = r % p;
      ranks_[r].replica = r / p;
    }
    for (int s = 0; s < p * sched_.virtual_stages; ++s) {
      StagePlace& place = stage_places_.emplace_back();
      place.pipeline_rank = s % p;
      place.local = s / p;
      for (size_t forward : {0, 1})
        place.first_slot[forward] = (static_cast<size_t>(place.local) * 2 + forward) * played_ +
                                    static_cast<size_t>(place.pipeline_rank) * played_replicas_;
    }
    slots_per_microbatch_ = static_cast<size_t>(sched_.virtual_stages) * 2 * played_;
    if (plan.scenario.parallel.data > 1) build_groups();
    const size_t slots = slots_per_microbatch_ * static_cast<size_t>(sched_.microbatches());
    reserve_huge(rendezvous_, slots);
    rendezvous_.resize(slots);
    // The executor posts every receive of a Gloo step at its start (exec/runtime.cpp), so a send
    // always finds its receive posted and the payload moves at once.
    if (preposted_receives_) {
      for (auto& rv : rendezvous_) rv.received = true;
      hold_receive_buffers();
    }
    run_.folded = played_ < plan.world_size;
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
    run_.timeline.world_size = plan.world_size;
  }

  SimRun run() {
    const auto t0 = std::chrono::steady_clock::now();
    for (int r = 0; r < played_; ++r) advance(r, Time());
    while (!queue_.empty()) dispatch(queue_.pop());
    report_stall();
    run_.step_time = end_;
    if (!step_only_) {
      network_.finish(end_);
      collect_links();
    }
    for (int r = 0; r < plan_.world_size; ++r) {
      const auto& m = plan_.ranks[r].memory;
      int64_t recompute = 0;  // one micro-batch's full activations while a backward recomputes
      for (int s : plan_.ranks[r].stages) recompute = std::max(recompute, costs_[s].recompute_bytes);
      const int64_t held = ranks_[r < played_ ? r : r % sched_.pipeline].peak_held;  // folded: as replica 0
      run_.peak_memory.push_back(m.params + m.gradients + m.optimizer + m.buckets + held + recompute);
    }
    run_.events = queue_.popped();
    run_.wall_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    return std::move(run_);
  }

 private:
  // The executor posts every receive of a Gloo step at its start: their buffers are held from
  // then until the forward that takes its input (after which it counts among the stage's
  // activations) or the backward that takes its output's gradient (plan's memory estimate alike).
  void hold_receive_buffers() {
    for (int r = 0; r < played_; ++r)
      for (const Action& a : sched_.ranks[r % sched_.pipeline]) {
        if (a.kind == ActionKind::RECV_F) ranks_[r].held += costs_[a.stage].forward_receive_buffer;
        if (a.kind == ActionKind::RECV_B) ranks_[r].held += costs_[a.stage].backward_receive_buffer;
        ranks_[r].peak_held = ranks_[r].held;
      }
  }

  void build_groups() {
    const int p = sched_.pipeline;
    for (const plan::Stage& st : plan_.stages) {
      Group g;
      for (int rep = 0; rep < plan_.scenario.parallel.data; ++rep) g.members.push_back(rep * p + st.pipeline_rank);
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

  struct GroupNodes {
    std::vector<std::vector<int>> members;  // per node, in order of first appearance
    size_t per_node = 0;                    // the most members on one node
  };

  // Chooses how a group all-reduces each bucket and the flows that carry it (docs/simulator.md).
  void plan_collective(Group& g) {
    const GroupNodes nodes = group_nodes(g);
    if (!plan_.scenario.hardware.nccl) {
      g.plans.push_back(plain_collective(g, nodes));
      return;
    }
    const GroupLinks links = group_links(g, nodes);
    for (int64_t bytes : g.bucket_bytes) g.plans.push_back(nccl_collective(g, nodes, links, static_cast<double>(bytes)));
  }

  // The ranks whose links a collective's flows cross. Folded, only the played replica's: the
  // other replicas' links carry the same flows in the same roles (replicas_alike), so they never
  // give a different fair share, and leaving them out keeps the link solver's components at one
  // replica's size instead of the whole machine's.
  std::vector<int> routed(const std::vector<int>& ranks) const {
    if (played_ == plan_.world_size) return ranks;
    std::vector<int> out;
    for (int r : ranks)
      if (r < played_) out.push_back(r);
    return out;
  }

  struct GroupLinks {
    std::vector<int> inside;  // device ports in their nodes
    std::vector<int> nics;    // NIC links, when the group spans nodes
  };

  GroupLinks group_links(const Group& g, const GroupNodes& nodes) const {
    const std::vector<int> ranks = routed(g.members);
    return {dedupe(topo_.device_ports(ranks)), nodes.members.size() > 1 ? dedupe(topo_.nic_ports(ranks)) : std::vector<int>{}};
  }

  GroupNodes group_nodes(const Group& g) const {
    GroupNodes out;
    std::unordered_map<int, size_t> node_index;
    for (int r : g.members) {
      auto [it, fresh] = node_index.emplace(topo_.node_of(r), out.members.size());
      if (fresh) out.members.emplace_back();
      out.members[it->second].push_back(r);
    }
    for (const auto& v : out.members) out.per_node = std::max(out.per_node, v.size());
    return out;
  }

  static std::vector<int> dedupe(std::vector<int> v) {
    std::sort(v.begin(), v.end());
    v.erase(std::unique(v.begin(), v.end()), v.end());
    return v;
  }

  // NCCL's choice for a bucket of `bytes` (sim/nccl_model.hpp), as flows: each phase moves its
  // bytes at the speed of its slowest link, scaled so that alone it takes NCCL's predicted time.
  CollectivePlan nccl_collective(const Group& g, const GroupNodes& nodes, const GroupLinks& group, double bytes) {
    const auto& hw = plan_.scenario.hardware;
    GroupShape shape;
    shape.ranks = static_cast<int>(g.members.size());
    shape.nodes = static_cast<int>(nodes.members.size());
    shape.per_node = static_cast<int>(nodes.per_node);
    shape.nic_gb_per_s = hw.network ? hw.network->bandwidth_gb_per_s : 0;
    shape.nics_per_node = hw.nics_per_node;
    const CollectiveCost cost = choose_allreduce(*hw.nccl, shape, bytes);
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
      if (pc.across_nodes && cost.algorithm != plan::Algorithm::hierarchical && shape.per_node > 1)
        links.insert(links.end(), inside.begin(), inside.end());
      double slowest = std::numeric_limits<double>::infinity();
      for (int l : links) slowest = std::min(slowest, network_.links()[l].capacity);
      // The profile's measured stretch over NCCL's model at this size (1 when it gives none).
      const double stretch = hw.nccl->stretch(bytes);
      out.phases.push_back({links, Time::us(pc.latency_us * stretch), stretch * slowest / pc.bandwidth_gb_per_s});
    }
    return out;
  }

  // The plain model: a ring inside a node or across one member per node, else reduce to a leader,
  // ring across the leaders, broadcast (formulas in docs/simulator.md).
  CollectivePlan plain_collective(const Group& g, const GroupNodes& by) {
    CollectivePlan out;
    const double n = static_cast<double>(g.members.size());
    const auto& by_node = by.members;
    const int nodes = static_cast<int>(by_node.size());
    const size_t per_node = by.per_node;
    const auto& cal = plan_.scenario.hardware.calibration;
    if (nodes == 1 && cal && cal->allreduce.bandwidth_gb_per_s > 0) {
      // Measured on this host (parallax calibrate) for cal->allreduce_ranks ranks; a ring of n
      // ranks scales its latency by (n-1) and its bytes per rank by 2(n-1)/n. Inside a run it
      // takes the in-run factor longer (it shares the cores with backward).
      out.algorithm = plan::Algorithm::ring;
      const double m = cal->allreduce_ranks;
      const double capacity = topo_.node_bandwidth();
      const double in_run = in_run_factors(plan_, *cal).allreduce;
      const double latency_us = in_run * cal->allreduce.latency_us * (n - 1) / (m - 1);
      const double per_byte =
          in_run * (2 * (n - 1) / n) / (2 * (m - 1) / m) * capacity / cal->allreduce.bandwidth_gb_per_s;
      out.phases.push_back({dedupe(topo_.device_ports(routed(g.members))), Time::us(latency_us), per_byte});
      return out;
    }
    if (nodes == 1 || per_node == 1) {
      out.algorithm = plan::Algorithm::ring;
      const Time alpha = nodes == 1 ? topo_.node_latency() : topo_.network_latency();
      const std::vector<int> ranks = routed(g.members);
      out.phases.push_back({dedupe(nodes == 1 ? topo_.device_ports(ranks) : topo_.nic_ports(ranks)),
                            Time::ns(alpha.count_ns() * 2 * (static_cast<int64_t>(n) - 1)), 2 * (n - 1) / n});
      return out;
    }
    // Reduce inside each node to a leader, all-reduce across the leaders, broadcast inside.
    out.algorithm = plan::Algorithm::hierarchical;
    std::vector<int> leaders;
    for (const auto& v : by_node) leaders.push_back(v.front());
    const auto k = static_cast<int64_t>(per_node);
    const std::vector<int> inside = dedupe(topo_.device_ports(routed(g.members)));
    const Time chain = Time::ns(topo_.node_latency().count_ns() * (k - 1));
    out.phases.push_back({inside, chain, 1.0});
    out.phases.push_back({dedupe(topo_.nic_ports(routed(leaders))), Time::ns(topo_.network_latency().count_ns() * 2 * (nodes - 1)),
                          2.0 * (nodes - 1) / nodes});
    out.phases.push_back({inside, chain, 1.0});
    return out;
  }

  void dispatch(const Event& e) {
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

  // The event's index in the timeline; -1 in step_only mode, which keeps only the latest end.
  // Inlined at its callers (see Network::activate: 239.5 M -> 222.3 M instructions with both).
  [[gnu::always_inline]] int32_t record(int rank, Lane lane, const Action& a, Time start, Time end, int64_t bytes,
                 plan::Algorithm algorithm = plan::Algorithm::none, plan::Protocol protocol = plan::Protocol::none) {
    end_ = std::max(end_, end);
    if (step_only_) return -1;
    plan::TimelineEvent& ev = run_.timeline.events.emplace_back();  // written in place: no 56-byte copy
    ev.rank = rank;
    ev.lane = lane;
    ev.action = a;
    ev.start = start;
    ev.end = end;
    ev.bytes = bytes;
    ev.algorithm = algorithm;
    ev.protocol = protocol;
    run_.waited_for.push_back(-1);
    latest_release_ = -1;
    return static_cast<int32_t>(run_.timeline.events.size()) - 1;
  }

  // "The event just recorded could not start before `from` released it at `release`." Every
  // event's dependencies are given right after it is recorded (so no index of it is needed, and
  // none checked: that check was 1% of the step's instructions), and only the one released last
  // (the lowest index among equals) need be kept: it is the event's link on the critical path.
  void depend(int32_t from, Time release) {
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
  static bool kept_over(int64_t release, int32_t event, int64_t kept_release, int32_t kept) {
    return release > kept_release || (release == kept_release && event < kept);
  }

  Time end_of(int32_t event) const { return event < 0 ? Time() : run_.timeline.events[event].end; }

  // The rank's next compute waits on `event`, which has ended: of all it waits on, depend()
  // keeps only one (kept_over), whatever the order they come in, so only that one is held.
  void wait_on(RankState& st, int32_t event) {
    if (event < 0) return;
    const Time release = end_of(event);
    if (st.waited_on < 0 ||
        kept_over(release.count_ns(), event, st.waited_on_release.count_ns(), st.waited_on)) {
      st.waited_on_release = release;
      st.waited_on = event;
    }
  }

  void advance(int rank, Time now) {
    RankState& st = ranks_[rank];
    const auto& list = sched_.ranks[st.pipeline_rank];
    st.waiting = false;
    while (st.pc < list.size()) {
      const Action& a = list[st.pc];
      switch (a.kind) {
        case ActionKind::F:
        case ActionKind::B:
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
      }
    }
  }

  int& backwards_done(int rank, int stage) {
    return backwards_done_[static_cast<size_t>(rank) * sched_.virtual_stages + stage_places_[stage].local];
  }

  void start_compute(int rank, const Action& a, Time now) {
    RankState& st = ranks_[rank];
    const StageCost& c = costs_[a.stage];
    Time dur = a.kind == ActionKind::F ? c.forward : a.kind == ActionKind::B ? c.backward : c.optimizer;
    // The step's last backward of a stage also copies its gradients into the DDP buckets, and
    // shares the cores with the all-reduces it starts.
    if (a.kind == ActionKind::B && !groups_.empty() &&
        backwards_done(rank, a.stage) + 1 == sched_.microbatches())
      dur += c.bucket_copy_in + c.sync_backward_extra;
    // Recorded with its start; on_compute_done sets its end (interference may stretch it).
    const int32_t ev = record(rank, Lane::compute, a, now, now, 0);
    if (st.last_compute >= 0) depend(st.last_compute, end_of(st.last_compute));
    if (st.waited_on >= 0) depend(st.waited_on, st.waited_on_release);
    st.waited_on = -1;
    st.last_compute = ev;
    st.bucket_work = nullptr;
    if (a.kind == ActionKind::F) {
      st.held += c.activation_bytes - c.forward_receive_buffer;
      st.peak_held = std::max(st.peak_held, st.held);
    } else if (a.kind == ActionKind::B) {
      st.held -= c.activation_bytes + c.backward_receive_buffer;
      if (++backwards_done(rank, a.stage) == sched_.microbatches() && !groups_.empty()) st.bucket_work = &c.bucket_ready;
    }
    st.computing = true;
    st.compute_stage = a.stage;
    st.memory_bound = a.kind == ActionKind::F   ? c.forward_memory_bound
                      : a.kind == ActionKind::B ? c.backward_memory_bound
                                                : c.optimizer_memory_bound;
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

  // --- interference between compute and communication on one device (docs/simulator.md) ---

  bool current(int rank, int32_t version) const {
    return ranks_[rank].compute_version == static_cast<uint32_t>(version);
  }

  // 1, or slower while a communication kernel runs on the device and while another rank of the
  // node computes (shared cores).
  double compute_speed(int rank) const {
    const RankState& st = ranks_[rank];
    double speed = st.comm_kernels > 0 ? speed_beside_comm_ : 1.0;
    if (!node_computing_.empty() && node_computing_[topo_.node_of(rank)] > (st.computing ? 1 : 0))
      speed /= interference_.shared_cores;
    return speed;
  }

  // A rank of the node starts or stops computing: the others' compute in progress goes on at
  // their new speed. The node's ranks are few where cores are shared (a CPU host's).
  void node_compute(int rank, int delta, Time now) {
    if (node_computing_.empty()) return;
    const int node = topo_.node_of(rank);
    node_computing_[node] += delta;
    const int per_node = plan_.scenario.hardware.devices_per_node;
    for (int r = node * per_node; r < std::min(played_, (node + 1) * per_node); ++r)
      if (r != rank) retime(r, now);
  }

  // The rank's compute in progress goes on at the speed of now.
  void retime(int rank, Time now) {
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
  void schedule_compute(int rank, Time now) {
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
  void comm_kernel(int rank, int delta, Time now) {
    if (rank >= played_) return;
    ranks_[rank].comm_kernels += delta;
    retime(rank, now);
  }

  // A collective's kernels start or end on every member's device; nothing to track when compute
  // is never slowed (the member loop would be wasted on every bucket).
  void comm_kernels(const std::vector<int>& members, int delta, Time now) {
    if (interference_.compute == 1.0) return;
    for (int m : members) comm_kernel(m, delta, now);
  }

  // Memory-bound compute on a device leaves its fabric ports less of its memory bandwidth.
  void slow_ports(int rank, bool slow, Time now) {
    if (interference_.communication == 1.0) return;
    const double capacity = topo_.node_bandwidth() / (slow ? interference_.communication : 1.0);
    for (int link : topo_.device_ports(rank)) network_.set_capacity(link, capacity, now);
  }

  void on_compute_done(int rank, Time now) {
    RankState& st = ranks_[rank];
    st.computing = false;
    node_compute(rank, -1, now);
    if (st.memory_bound) slow_ports(rank, false, now);
    end_ = std::max(end_, now);
    if (st.last_compute >= 0) run_.timeline.events[st.last_compute].end = now;
    st.last_done = st.last_compute;
    advance(rank, now);
  }

  // --- point-to-point ---

  int peer_rank(int rank, int stage) const {
    return ranks_[rank].replica * sched_.pipeline + stage_places_[stage].pipeline_rank;
  }

  // Slot of the transfer that the rank of `replica` and stage `recv_stage` receives for (direction,
  // micro-batch).
  // Ordered by micro-batch, stage and direction, then by pipeline rank and replica: the replicas
  // of a stage handle one micro-batch at about the same time, and their slots then share cache
  // lines (four to a line) rather than lying a rank's whole table apart. At 8,192 ranks the table
  // is 16 MiB and the order decides whether it is read from the caches or from memory.
  size_t rendezvous_slot(int replica, bool forward, int recv_stage, int mb) const {
    // ((mb * virtual_stages + local) * 2 + forward) * played_ + pipeline_rank * played_replicas_ +
    // replica, with the per-stage part looked up (StagePlace::first_slot).
    return static_cast<size_t>(mb) * slots_per_microbatch_ + stage_places_[recv_stage].first_slot[forward] +
           static_cast<size_t>(replica);
  }

  int send_peer(int rank, const Action& send) const {
    return peer_rank(rank, send.kind == ActionKind::SEND_F ? send.stage + 1 : send.stage - 1);
  }

  size_t send_slot(int rank, const Action& send) const {
    const bool forward = send.kind == ActionKind::SEND_F;
    const int recv_stage = forward ? send.stage + 1 : send.stage - 1;
    return rendezvous_slot(ranks_[rank].replica, forward, recv_stage, send.mb);
  }

  // The sender's time in the send call, where the payload is written: its receive is posted
  // (Gloo: at the step's start; NCCL: the send waited for it).
  Time send_call(const Action& a) const {
    const StageCost& c = costs_[a.stage];
    return a.kind == ActionKind::SEND_F ? c.send_forward_call : c.send_backward_call;
  }

  void on_send_call_done(int rank, Time now) {
    RankState& st = ranks_[rank];
    const Action& a = sched_.ranks[st.pipeline_rank][st.pc];
    post_send(rank, a, st.send_called, now);
    ++st.pc;
    advance(rank, now);
  }

  // `called` is when the sender entered the send call, `now` when the data can leave.
  void post_send(int rank, const Action& a, Time called, Time now) {
    const bool forward = a.kind == ActionKind::SEND_F;
    const int recv_stage = forward ? a.stage + 1 : a.stage - 1;
    const int dst = peer_rank(rank, recv_stage);
    const size_t slot = rendezvous_slot(ranks_[rank].replica, forward, recv_stage, a.mb);
    Rendezvous& rv = rendezvous_[slot];
    rv.sent = true;
    const Posted send{called, ranks_[rank].last_compute};  // the compute that produced the data
    // Transports (Gloo's TCP pairs, NCCL) move a message once both sides have posted.
    if (!rv.received) {
      rv.hold(send);
      return;
    }
    start_transfer(rank, dst, a, recv_stage, slot, now, send, preposted_receives_ ? Posted{} : rv.first());
  }

  void post_recv(int rank, const Action& a, Time now) {
    const bool forward = a.kind == ActionKind::RECV_F;
    const int send_stage = forward ? a.stage - 1 : a.stage + 1;
    const int src = peer_rank(rank, send_stage);
    const size_t slot = rendezvous_slot(ranks_[rank].replica, forward, a.stage, a.mb);
    Rendezvous& rv = rendezvous_[slot];
    rv.received = true;
    const Posted recv{now, ranks_[rank].last_done};
    if (rv.sent) {
      const Action send{forward ? ActionKind::SEND_F : ActionKind::SEND_B, send_stage, a.mb};
      start_transfer(src, rank, send, a.stage, slot, now, rv.first(), recv);
      return;
    }
    rv.hold(recv);
    const RankState& sender = ranks_[src];
    if (sender.in_send && sched_.ranks[sender.pipeline_rank][sender.pc] ==
                              Action{forward ? ActionKind::SEND_F : ActionKind::SEND_B, send_stage, a.mb})
      queue_.push(now, kRecvPosted, src);
  }

  // Gloo: the rank reaches a RECV whose receive was posted at the step's start. Returns true (and
  // records the receive) when the data has already arrived.
  bool reach_recv(int rank, const Action& a, Time now) {
    const bool forward = a.kind == ActionKind::RECV_F;
    Rendezvous& rv = rendezvous_[rendezvous_slot(ranks_[rank].replica, forward, a.stage, a.mb)];
    rv.reached = true;
    if (!rv.arrived) {
      rv.first_at = now;  // the transfer reads it when it ends
      return false;
    }
    const int32_t send_ev = rv.first_dep;
    const int32_t recv_ev = record(rank, Lane::recv, a, now, now, transfer_bytes(forward, forward ? a.stage - 1 : a.stage + 1));
    // The data was there first: what released the receive last is the rank's own earlier work,
    // so a critical path through it stays on this rank.
    depend(send_ev, end_of(send_ev));
    depend(ranks_[rank].last_done, now);
    wait_on(ranks_[rank], recv_ev);
    ranks_[rank].last_done = recv_ev;
    return true;
  }

  int64_t transfer_bytes(bool forward, int send_stage) const {
    const StageCost& c = costs_[send_stage];
    return forward ? c.send_forward_bytes : c.send_backward_bytes;
  }

  // NCCL: the receive a blocked sender waited for is posted; the send goes on from here.
  void on_recv_posted(int rank, Time now) {
    RankState& st = ranks_[rank];
    const Rendezvous& rv = rendezvous_[send_slot(rank, sched_.ranks[st.pipeline_rank][st.pc])];
    st.in_send = false;
    if (rv.first_dep >= 0) {  // the receive's, posted first
      wait_on(st, rv.first_dep);  // the sender could not go on before the receiver got here
      st.last_done = rv.first_dep;
    }
    advance(rank, now);
  }

  // Ranks left with actions when nothing more can happen wait on each other: names the cycle of
  // who waits for whom (a Deadlock), or says where they stopped if there is no cycle.
  void report_stall() const {
    plan::WaitGraph waits_for(played_);  // r -> q when rank r waits for rank q
    bool stalled = false;
    for (int r = 0; r < played_; ++r) {
      const RankState& st = ranks_[r];
      const auto& list = sched_.ranks[st.pipeline_rank];
      if (st.pc >= list.size()) continue;
      stalled = true;
      for (int peer : peers_waited_for(r, list[st.pc])) boost::add_edge(r, peer, waits_for);
    }
    if (!stalled) return;
    std::vector<int> cycle = plan::find_cycle(waits_for);
    if (cycle.empty()) {
      for (int r = 0; r < played_; ++r)
        if (ranks_[r].pc < sched_.ranks[ranks_[r].pipeline_rank].size())
          throw std::logic_error("simulation stalled: rank " + std::to_string(r) + " waits at " + waiting_action(r).id());
    }
    std::string m = "deadlock:";
    for (size_t i = 0; i < cycle.size(); ++i) {
      const int r = cycle[i], next = cycle[(i + 1) % cycle.size()];
      m += std::string(i ? "," : "") + " rank " + std::to_string(r) + " waits in " + waiting_action(r).id() +
           " for rank " + std::to_string(next);
    }
    throw Deadlock(m + (blocking_sends_ ? " (NCCL: a send waits until its receive is posted)" : ""));
  }

  const Action& waiting_action(int rank) const { return sched_.ranks[ranks_[rank].pipeline_rank][ranks_[rank].pc]; }

  // The ranks whose progress `a`, where `rank` stopped, waits for.
  std::vector<int> peers_waited_for(int rank, const Action& a) const {
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

  // Both sides have posted: the payload moves, after the route's latency. `recv` is none (Posted{})
  // for a receive posted at the step's start (Gloo).
  void start_transfer(int src, int dst, const Action& send, int recv_stage, size_t slot, Time now,
                      const Posted& send_post, const Posted& recv) {
    int id;
    if (!free_transfers_.empty()) {
      id = free_transfers_.back();
      free_transfers_.pop_back();
    } else {
      id = static_cast<int>(transfers_.size());
      transfers_.emplace_back();
    }
    Transfer& t = transfers_[id];  // written in place, as the timeline's events are
    t.src = src;
    t.dst = dst;
    t.send_kind = send.kind;
    t.send_stage = send.stage;
    t.recv_stage = recv_stage;
    t.mb = send.mb;
    t.bytes = transfer_bytes(send.kind == ActionKind::SEND_F, send.stage);
    t.send_dep = send_post.dep;
    t.recv_dep = recv.dep;
    t.recv_post = recv.at;
    t.slot = slot;
    t.start = send_post.at;
    const Route route = topo_.p2p(src, dst);
    network_.start_flow(now, route.latency, static_cast<double>(t.bytes), route.links, id);
    comm_kernel(src, +1, now);
    comm_kernel(dst, +1, now);
  }

  void on_transfer_done(int id, Time now) {
    const Transfer& t = transfers_[id];  // freed below, before anything can start another transfer
    comm_kernel(t.src, -1, now);
    comm_kernel(t.dst, -1, now);
    const bool forward = t.send_kind == ActionKind::SEND_F;
    const int32_t send_ev = record(t.src, Lane::send, {t.send_kind, t.send_stage, t.mb}, t.start, now, t.bytes);
    depend(t.send_dep, end_of(t.send_dep));
    if (t.recv_dep >= 0) depend(t.recv_dep, end_of(t.recv_dep));
    Rendezvous& rv = rendezvous_[t.slot];
    const Action recv{forward ? ActionKind::RECV_F : ActionKind::RECV_B, t.recv_stage, t.mb};
    if (preposted_receives_ && !rv.reached) {  // the receiver gets there later (reach_recv)
      rv.arrived = true;
      rv.first_dep = send_ev;
      free_transfers_.push_back(id);
      return;
    }
    const Time recv_posted = preposted_receives_ ? rv.first_at : t.recv_post;  // Gloo: when reached
    const int32_t recv_ev = record(t.dst, Lane::recv, recv, std::max(t.start, recv_posted), now, t.bytes);
    depend(send_ev, now);
    RankState& dst = ranks_[t.dst];
    assert(dst.waiting && sched_.ranks[dst.pipeline_rank][dst.pc] == recv);
    wait_on(dst, recv_ev);
    dst.last_done = recv_ev;
    ++dst.pc;
    const int receiver = t.dst;
    free_transfers_.push_back(id);
    advance(receiver, now);
  }

  // --- DDP all-reduce ---

  bool stage_reduced(int stage) const {
    return groups_.empty() || groups_[stage].done == static_cast<int>(groups_[stage].bucket_bytes.size());
  }

  void on_bucket_ready(int rank, int stage, int bucket, Time now) {
    ranks_[rank].next_bucket = static_cast<uint32_t>(bucket) + 1;
    Group& g = groups_[stage];
    // Folded, replica 0's bucket stands for every replica's, ready at the same time.
    g.arrivals[bucket] += played_ < plan_.world_size ? static_cast<int>(g.members.size()) : 1;
    g.last_arrival[bucket] = now;
    g.last_arrival_event[bucket] = ranks_[rank].last_compute;  // the backward producing it
    try_start(stage, now);
  }

  void try_start(int stage, Time now) {
    Group& g = groups_[stage];
    if (g.running || g.next >= g.bucket_bytes.size()) return;
    if (g.arrivals[g.next] < static_cast<int>(g.members.size())) return;
    g.running = true;
    g.phase = 0;
    g.started = now;
    comm_kernels(g.members, +1, now);
    start_phase(stage, now);
  }

  const CollectivePlan& plan_of(const Group& g, size_t bucket) const {
    return g.plans.size() == 1 ? g.plans.front() : g.plans[bucket];
  }

  void start_phase(int stage, Time now) {
    Group& g = groups_[stage];
    const Phase& ph = plan_of(g, g.next).phases[g.phase];
    network_.start_flow(now, ph.latency, ph.bytes_per_byte * static_cast<double>(g.bucket_bytes[g.next]), ph.links,
                        -stage - 1);
  }

  void on_collective_phase_done(int stage, Time now) {
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

  void on_flow_done(int tag, Time now) {
    if (tag >= 0) on_transfer_done(tag, now);
    else on_collective_phase_done(-tag - 1, now);
  }

  void collect_links() {
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

  const plan::Plan& plan_;
  const plan::Schedule& sched_;
  std::vector<StageCost> costs_;
  bool step_only_ = false;
  bool blocking_sends_ = false;  // NCCL: a SEND waits until its receive is posted
  bool preposted_receives_ = false;  // Gloo: every receive is posted at the step's start
  plan::Interference interference_;
  double speed_beside_comm_ = 1;  // 1 / interference_.compute, divided once (compute_speed's hot path)
  int played_ = 0;  // ranks played: all, or replica 0's when folded
  size_t played_replicas_ = 1;  // played_ / pipeline
  std::vector<int> node_computing_;  // per node, its ranks computing; empty: cores not shared
  Time end_;        // the latest end of any recorded event
  int64_t latest_release_ = -1;  // of the latest recorded event's dependencies so far (depend)
  // Calibrated hosts: a message whose receive comes after its send takes this long (beyond its
  // bytes) from the receive's post.
  EventQueue queue_;
  Network network_;
  Topology topo_;
  std::vector<RankState> ranks_;
  // Per stage, its pipeline rank and its index among that rank's stages (stage % p and stage / p),
  // and where its receivers' rendezvous slots start, per direction (rendezvous_slot), looked up:
  // the pipeline size is known only at run time, so each was an integer division (an idiv, slow
  // beside the adds around it), and a transfer took five of them.
  struct StagePlace {
    int32_t pipeline_rank = 0, local = 0;
    size_t first_slot[2] = {0, 0};  // backward, forward
  };
  std::vector<StagePlace> stage_places_;
  size_t slots_per_microbatch_ = 0;
  std::vector<int> backwards_done_;  // per played rank and local stage: backwards done this step
  std::vector<Group> groups_;
  std::vector<Transfer> transfers_;
  std::vector<int> free_transfers_;
  std::vector<Rendezvous> rendezvous_;  // dense: each (played receiver, direction, stage, micro-batch) once
  SimRun run_;
};

}  // namespace

bool replicas_alike(const plan::Plan& plan) {
  // Every replica then meets the same links in the same roles: it fills whole nodes, or each
  // node holds whole replicas.
  const int per_node = plan.scenario.hardware.devices_per_node;
  const int p = plan.scenario.parallel.pipeline;
  return plan.scenario.parallel.data > 1 && (per_node % p == 0 || p % per_node == 0);
}

SimRun simulate(const plan::Plan& plan, const SimOptions& options) { return Simulation(plan, options).run(); }

}  // namespace parallax::sim
