#pragma once
// The simulator's parts, for its own files only: not an interface of the sim module. One
// Simulation plays one step; its member functions live in four files by what they model:
//   sim/engine.cpp          the event queue and dispatch, ranks walking their action lists, the
//                           recorded timeline and each event's dependency, deadlock reports;
//   sim/compute.cpp         compute on a device as a shared resource: work at a speed that
//                           communication kernels (interference) and shared cores change;
//   sim/point_to_point.cpp  SEND/RECV: rendezvous, transfers as flows on the network;
//   sim/collectives.cpp     DDP groups and all-reduce phases (NCCL's model or the plain one).
// The state they share is the class's; memory is plan's rule (plan::MemoryEstimate), reported.
// The four files are compiled as one translation unit (sim/CMakeLists.txt, a unity group): the hot
// calls between them (advance -> start_compute -> schedule_compute) stay inlined as they were in
// one file, and the simulator's speed with them.
#include <algorithm>
#include <cassert>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <limits>
#include <optional>
#include <unordered_map>

#include "schedule/wait_graph.hpp"
#include "sim/cost_model.hpp"
#include "sim/event_queue.hpp"
#include "sim/huge_pages.hpp"
#include "sim/nccl_model.hpp"
#include "sim/network.hpp"
#include "sim/simulator.hpp"
#include "sim/topology.hpp"

namespace parallax::sim::detail {

using schedule::Action;
using schedule::ActionKind;
using timeline::Lane;

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
  // The compute action in progress (F, B, I, W, OVERLAP_F_B or OPTIM), as work: the ns it takes alone. It goes at
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
  Time send_called;  // when the rank entered the send call it is in
  // Of the events finished since the last compute started that the next compute waited on,
  // the one released last (the lowest index among equals): the only one `depend` would keep.
  // Kept as it comes rather than as a list: no heap buffer per rank to miss in the caches.
  Time waited_on_release;
  int32_t waited_on = -1;
  std::vector<Time> shifted_buckets;  // OVERLAP_F_B's bucket-ready offsets, after its forward
  uint32_t next_receive = 0;  // Gloo: the next action to look at for a receive to post
  int32_t receives_ahead = 0;  // Gloo: receives posted and not yet reached
  // On a GPU with launch figures: when the host has launched every kernel of the actions so far.
  // It runs ahead of the device, launching one action's kernels after the other's without
  // waiting for them (docs/simulator.md, Launch-bound steps).
  Time host_free;
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
// side posts and the transfer starts with both (start_transfer). Gloo posts receives ahead of their RECVs (a window
// over the step): then the data may arrive before the receiver reaches its RECV, and `first`
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
  timeline::Algorithm algorithm = timeline::Algorithm::ring;
  timeline::Protocol protocol = timeline::Protocol::none;
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
  Simulation(const plan::Plan& plan, const SimOptions& options);
  SimRun run();

 private:
  struct GroupNodes {  // the plain all-reduce's rings (plain_allreduce)
    std::vector<std::vector<int>> members;  // per node, in order of first appearance
    size_t per_node = 0;                    // the most members on one node
  };

  struct GroupLinks {
    std::vector<int> inside;  // device ports in their nodes
    std::vector<int> nics;    // NIC links, when the group spans nodes
  };

  // The engine (sim/engine.cpp): the event queue, dispatch, each rank walking its action list, the
  // timeline and its dependencies, stalls, link statistics.
  void dispatch(const Event& e);
  [[gnu::always_inline]] int32_t record(int rank, Lane lane, const Action& a, Time start, Time end, int64_t bytes,
                                        timeline::Algorithm algorithm = timeline::Algorithm::none,
                                        timeline::Protocol protocol = timeline::Protocol::none);
  void depend(int32_t from, Time release);
  static bool kept_over(int64_t release, int32_t event, int64_t kept_release, int32_t kept);
  Time end_of(int32_t event) const;
  void wait_on(RankState& st, int32_t event);
  Time compute_launch(const Action& a) const;
  void advance(int rank, Time now);
  void report_stall() const;
  int shown_rank(int rank) const;
  const Action& waiting_action(int rank) const;
  std::vector<int> peers_waited_for(int rank, const Action& a) const;
  void on_flow_done(int tag, Time now);
  void collect_links();

  // Compute on a device (sim/compute.cpp): F, B and OPTIM as work at a speed that interference
  // with communication and shared cores changes.
  int& backwards_done(int rank, int stage);
  int& forwards_done(int rank, int stage);
  void start_compute(int rank, const Action& a, Time now);
  std::pair<Time, bool> compute_work(const Action& a) const;
  void post_receives_ahead(int rank, Time now);
  void receive_reached(int rank, Time now);
  bool current(int rank, int32_t version) const;
  double compute_speed(int rank) const;
  void node_compute(int rank, int delta, Time now);
  void retime(int rank, Time now);
  void schedule_compute(int rank, Time now);
  void comm_kernel(int rank, int delta, Time now);
  void comm_kernels(const std::vector<int>& members, int delta, Time now);
  void slow_ports(int rank, bool slow, Time now);
  void on_compute_done(int rank, Time now);

  // Point-to-point (sim/point_to_point.cpp): SEND and RECV, their rendezvous and transfers.
  int peer_rank(int rank, int stage) const;
  size_t rendezvous_slot(int replica, bool forward, int recv_stage, int mb) const;
  int send_peer(int rank, const Action& send) const;
  size_t send_slot(int rank, const Action& send) const;
  Time send_call(const Action& a) const;
  void on_send_call_done(int rank, Time now);
  void post_send(int rank, const Action& a, Time called, Time now);
  void post_recv(int rank, const Action& a, Time now);
  bool reach_recv(int rank, const Action& a, Time now);
  int64_t transfer_bytes(bool forward, int send_stage) const;
  void on_recv_posted(int rank, Time now);
  void start_transfer(int src, int dst, const Action& send, int recv_stage, size_t slot, Time now,
                      const Posted& send_post, const Posted& recv);
  void on_transfer_done(int id, Time now);

  // Collectives (sim/collectives.cpp): DDP groups, how each bucket is all-reduced (NCCL's model
  // or the plain one), and their phases as flows.
  void build_groups();
  void plan_collective(Group& g);
  std::vector<int> routed(const std::vector<int>& ranks) const;
  GroupLinks group_links(const Group& g, bool spans_nodes) const;
  GroupNodes group_nodes(const Group& g) const;
  /// How these members of a group sit on the machine, as NCCL's model takes it.
  GroupShape shape_of(const std::vector<int>& members) const;
  /// The shapes a stage's gradient reduction runs over: the whole group, and under parallel.shard
  /// one shard's ranks and (HSDP) one shard's copies. Found once per group, not per bucket: a
  /// sharded 1,024-rank job has a bucket per layer, and placing 128 members on their nodes for
  /// each was most of its simulation.
  struct ReductionShapes {
    GroupShape whole, shard, copies;
  };
  ReductionShapes reduction_shapes(const Group& g) const;
  /// NCCL's cost of reducing a bucket of `bytes` over a stage's group: an all-reduce, or under
  /// parallel.shard a reduce-scatter over each shard's ranks (then, HSDP, an all-reduce of the
  /// shard over its copies).
  CollectiveCost gradient_reduction(const ReductionShapes& shapes, double bytes) const;
  static std::vector<int> dedupe(std::vector<int> v);
  CollectivePlan nccl_collective(const GroupLinks& group, const ReductionShapes& shapes, double bytes);
  CollectivePlan plain_allreduce(const Group& g, const GroupNodes& by);
  bool stage_reduced(int stage) const;
  void on_bucket_ready(int rank, int stage, int bucket, Time now);
  void try_start(int stage, Time now);
  const CollectivePlan& plan_of(const Group& g, size_t bucket) const;
  void start_phase(int stage, Time now);
  void on_collective_phase_done(int stage, Time now);

  const plan::Plan& plan_;
  schedule::Schedule batched_;  // the plan's schedule with Megatron-LM's receives before their computes (megatron_batched_p2p)
  const schedule::Schedule& sched_;
  std::vector<StageCost> costs_;
  bool step_only_ = false;
  bool blocking_sends_ = false;  // NCCL: a SEND waits until its receive is posted
  std::vector<int> receive_window_;  // Gloo: per pipeline rank, receives kept posted ahead
  bool preposted_receives_ = false;  // Gloo (and Megatron's p2p): every receive is posted ahead of its send
  plan::Interference interference_;
  double speed_beside_comm_ = 1;  // 1 / interference_.compute, divided once (compute_speed's hot path)
  int played_ = 0;  // ranks played: all, or replica 0's when folded
  size_t played_replicas_ = 1;  // played_ / pipeline
  std::vector<int> node_computing_;  // per node, its ranks computing; empty: cores not shared
  Time end_;        // the latest end of any recorded event
  int64_t latest_release_ = -1;  // of the latest recorded event's dependencies so far (depend)
  EventQueue queue_;
  Network network_;
  Topology topo_;
  std::vector<RankState> ranks_;
  std::optional<NcclChoices> own_nccl_choices_;
  NcclChoices* nccl_choices_ = nullptr;  // SimOptions::nccl_choices, or own_nccl_choices_; null without NCCL
  std::vector<int32_t> shown_;  // per played rank, its number in the timeline (shown_rank); empty when step_only_
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
  std::vector<int> forwards_done_;   // and forwards
  // Per stage: when the all-gathers its rank starts with the step have brought its first bucket of
  // parameters (StageCost::first_gather; a rank's stages in order, one after another).
  std::vector<Time> first_gather_done_;
  // Megatron-core's interleaved schedule (and NeMo's, with Apex's distributed optimizer) starts a
  // model chunk's parameter all-gather whole through config.param_sync_func rather than bucket by
  // bucket: chunks 0 and 1 with the step, chunk c + 1 (c >= 1) when the rank starts its forward
  // number c x pipeline - pipeline_rank, so that every pipeline rank starts it at about the same
  // time (megatron/core/pipeline_parallel/schedules.py, forward_step_helper). One comm stream
  // runs them one after another. chunk_gather_done_: per played rank and local chunk, when its
  // gather ends (set when it starts); rank_forwards_: per played rank, forwards started.
  bool chunk_prefetch_ = false;
  std::vector<Time> chunk_gather_done_;
  std::vector<int> rank_forwards_;
  void prefetch_chunks(int rank, Time now);
  std::vector<Group> groups_;
  std::vector<Transfer> transfers_;
  std::vector<int> free_transfers_;
  std::vector<Rendezvous> rendezvous_;  // dense: each (played receiver, direction, stage, micro-batch) once
  SimRun run_;
};

// The event's index in the timeline; -1 in step_only mode, which keeps only the latest end.
// Inlined at its callers (see Network::activate: 239.5 M -> 222.3 M instructions with both).
inline int32_t Simulation::record(int rank, Lane lane, const Action& a, Time start, Time end, int64_t bytes,
                                       timeline::Algorithm algorithm, timeline::Protocol protocol) {
  end_ = std::max(end_, end);
  if (step_only_) return -1;
  timeline::TimelineEvent& ev = run_.timeline.events.emplace_back();  // written in place: no 64-byte copy
  ev.rank = shown_[rank];
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

}  // namespace parallax::sim::detail
