#pragma once
// The simulator plays a plan's schedule on a model of its hardware and predicts the timeline of
// one optimizer step.
//
// Every rank walks its action list in order, as the executor does. F, B and OPTIM occupy the
// rank's compute stream. A SEND is posted without blocking (Gloo); on a profile with
// `collectives: nccl` it blocks its rank until the peer has posted the matching RECV, as NCCL's
// send does for messages larger than its buffers. A RECV blocks until its data has arrived; a
// transfer starts once both sides have posted (rendezvous, as NCCL and Gloo point-to-point do)
// and moves its bytes as a flow on the links of its route. Ranks that end up waiting on each
// other are reported as a Deadlock naming the cycle, never a hang. During a stage's
// last backward of the step each DDP bucket is handed to its group the moment its last gradient
// exists; a group all-reduces its buckets one after another, in that order, once every replica
// has handed the bucket over (ring inside a node or across nodes; hierarchical when a group spans
// several nodes with several members each). OPTIM waits for its stage's buckets. With a profile's
// `interference`, compute runs slower while a communication kernel runs on its device, and a
// device's fabric ports carry less while it runs memory-bound compute (docs/simulator.md).
//
// Every recorded event keeps the one dependency that released it last, so the critical path can
// be read off the executed schedule afterwards.
#include <cstdint>
#include <stdexcept>
#include <vector>

#include "plan/cost.hpp"
#include "plan/plan.hpp"
#include "plan/time.hpp"
#include "timeline/timeline.hpp"

namespace parallax::sim {

using plan::Time;
class NcclChoices;  // sim/nccl_model.hpp

struct SimOptions {
  bool record_link_samples = true;  ///< bandwidth over time per link, for traces
  /// Step time and peak memory only (the tuner): no timeline, dependencies or link usage. When the
  /// data-parallel replicas sit alike on the topology (pipeline divides the devices of a node, or
  /// the reverse), only replica 0 is played: the others do the same at the same times, and each
  /// all-reduce is still one flow over every member's links. Gives exactly the full step time.
  bool step_only = false;
  /// Play one replica for all when they sit alike (as step_only does), but record its timeline
  /// and dependencies: compute_metrics then gives every rank the metrics of its replica-0
  /// counterpart (busy, bubble, exposed communication, memory), equal to the full run's, and the
  /// critical path is replica 0's. Link usage covers the links replica 0's flows cross.
  bool fold_replicas = false;
  /// Every layer's cost for the plan's precision and micro-batch size, when the caller has them
  /// cached (plan::estimate_layer_cost otherwise).
  const std::vector<plan::LayerCost>* layer_costs = nullptr;
  /// NCCL's choices kept from earlier simulations (the tuner: one per thread), for a plan whose
  /// profile has that NCCL; otherwise the simulation keeps its own.
  NcclChoices* nccl_choices = nullptr;
};

struct LinkUsage {
  std::string name;
  double capacity_gb_per_s = 0;
  double bytes = 0;
  double peak_gb_per_s = 0;
  Time busy;
  std::vector<std::pair<Time, double>> samples;  ///< GB/s over time, when recorded
};

struct SimRun {
  timeline::Timeline timeline;            ///< events: compute, send, recv, allreduce lanes
  /// Per timeline event, the event it waited for: of those that released it, the one that did so
  /// last (the lowest index among equals); -1 when nothing held it. Following these links back
  /// from the last event gives the critical path (compute_metrics). One index per event rather
  /// than the whole dependency graph: at 8,192 ranks the graph was 89 MB, a quarter of the run.
  std::vector<int32_t> waited_for;
  std::vector<LinkUsage> links;
  Time step_time;                     ///< when the last action ends
  bool folded = false;                ///< one replica was played for all (step_only, fold_replicas)
  int played_ranks = 0;               ///< ranks played: world size, or one replica's when folded
  std::vector<int64_t> peak_memory;   ///< bytes per rank
  uint64_t events = 0;                ///< simulator events processed
  plan::Time wall;                    ///< the wall-clock time the simulation took
};

/// A schedule whose ranks wait on each other in a cycle; what() names the ranks and actions.
struct Deadlock : std::runtime_error {
  using std::runtime_error::runtime_error;
};

/// Whether step_only may play one replica for all (see SimOptions::step_only).
bool replicas_alike(const plan::Plan& plan);

/// No step of the plan ends sooner than this, from its DDP buckets (the tuner's floor on bucket
/// sizes, which its lower bound without communication cannot tell apart): on each rank, a stage's
/// last weight-gradient action starts after the compute the rank's list puts before it (from
/// micro-batch 0's arrival, at full speed), hands each bucket over at its offset in the action,
/// the stage's group all-reduces them in turn, each no faster than NCCL's model alone on its links,
/// and the stage's optimizer step follows. `costs`: stage_costs(plan). Zero without replicas.
/// `choices`: as SimOptions::nccl_choices.
struct StageCost;
Time reduction_floor(const plan::Plan& plan, const std::vector<StageCost>& costs, NcclChoices* choices = nullptr);

/// Simulates one optimizer step of the plan.
SimRun simulate(const plan::Plan& plan, const SimOptions& options = {});

}  // namespace parallax::sim
