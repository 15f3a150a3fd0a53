#pragma once
// All-reduce as NCCL runs it, from NCCL's own tuning model (NVIDIA/nccl src/graph/tuning.cc,
// ncclTopoTuneModel and ncclTopoGetAlgoTime, at commit 5067397c2676d5aed50042fc39e5c8ee96eb0027).
//
// NCCL predicts each (algorithm, protocol) as `latency + bytes / bandwidth` and runs the fastest.
// The latency is a base per algorithm and protocol plus a hardware latency per hop (NVLink, PCIe,
// network); the bandwidth is the channels' bandwidth, cut by each protocol's efficiency and capped
// per channel, then turned from bus into algorithm bandwidth (ring: n / 2(n-1), tree: 1/2).
// Here the same tables and formulas give every candidate's cost, and the simulator plays the
// winner as flows on the machine's links, so other traffic on those links still slows it down.
//
// Two forms beyond NCCL's ring and tree:
// - nvls: NVLink SHARP on Hopper NVSwitch nodes, one node: every GPU sends its buffer to the
//   switch once and receives the reduced buffer once;
// - hierarchical: reduce-scatter inside each node, all-reduce of each 1/k shard across nodes on its
//   own rail (every NIC of a node busy at once), all-gather inside each node; three phases, one
//   after the other, each costed by the same model on its own communicator.
#include <unordered_map>
#include <vector>

#include "plan/hardware.hpp"
#include "timeline/timeline.hpp"

namespace parallax::sim {

/// A communicator as NCCL's tuning sees it.
struct Communicator {
  int ranks = 1;
  int nodes = 1;
  /// Bandwidth of one rank's channels together (GB/s): inside a node its NVLinks (or PCIe) as NCCL
  /// counts them; across nodes the lesser of that and the NIC bandwidth its rings get.
  double bus_gb_per_s = 0;
};

/// Which collective: NCCL's step count and bus-to-algorithm factor depend on it.
enum class Collective { all_reduce, reduce_scatter, all_gather };

/// One phase of a collective: `latency_us + buffer bytes / bandwidth_gb_per_s` when alone, where
/// the buffer is the whole all-reduce buffer (a shard's phase has its bandwidth scaled to match).
struct PhaseCost {
  timeline::Protocol protocol = timeline::Protocol::simple;
  double latency_us = 0;
  double bandwidth_gb_per_s = 0;
  bool across_nodes = false;  ///< runs over the NICs (else over the node fabric only)
  double time_us(double bytes) const { return latency_us + bytes / (1e3 * bandwidth_gb_per_s); }
};

struct CollectiveCost {
  timeline::Algorithm algorithm = timeline::Algorithm::ring;
  std::vector<PhaseCost> phases;
  double time_us(double bytes) const;
};

/// NCCL's bandwidth of one NVLink for the generation (src/graph/topo.h SM70/SM80/SM90_NVLINK_BW),
/// or of the PCIe path when nvlinks is 0 (PCI_BW).
double nccl_intra_gb_per_s(const plan::NcclConfig& cfg);

/// NCCL's cost of one (algorithm, protocol) for a collective of `bytes`; bandwidth 0 when NCCL
/// would not use it (LL128 off PCIe, tree only for all-reduce).
PhaseCost nccl_cost(const plan::NcclConfig& cfg, const Communicator& comm, Collective coll, timeline::Algorithm algorithm,
                    timeline::Protocol protocol, double bytes);

/// The fastest protocol for an algorithm (or the forced one), as NCCL picks it.
PhaseCost best_protocol(const plan::NcclConfig& cfg, const Communicator& comm, Collective coll,
                        timeline::Algorithm algorithm, double bytes);

/// The shape of an all-reduce group on the machine.
struct GroupShape {
  int ranks = 1;
  int nodes = 1;
  int per_node = 1;           ///< members per node (the largest)
  double nic_gb_per_s = 0;    ///< one NIC's bandwidth
  int nics_per_node = 1;
  bool operator==(const GroupShape&) const = default;
};

/// The shape of a group whose members sit on the nodes `member_nodes` (one per member, each below
/// `nodes`), with the profile's NICs.
GroupShape group_shape(const std::vector<int>& member_nodes, int nodes, const plan::HardwareProfile& hw);

/// Every candidate NCCL would consider for an all-reduce of `bytes` (the forced one alone when the
/// profile forces an algorithm), and the chosen, fastest one.
std::vector<CollectiveCost> allreduce_candidates(const plan::NcclConfig& cfg, const GroupShape& g, double bytes);
CollectiveCost choose_allreduce(const plan::NcclConfig& cfg, const GroupShape& g, double bytes);

/// A reduce-scatter of `bytes` (the whole buffer) as NCCL runs it: one ring over the group.
CollectiveCost choose_reduce_scatter(const plan::NcclConfig& cfg, const GroupShape& g, double bytes);

/// Microseconds NCCL takes for one collective of `bytes` (the whole buffer) over the group, alone
/// on its links, with the profile's measured stretch: all-reduce as choose_allreduce picks it,
/// all-gather and reduce-scatter as rings (NCCL runs them only as rings).
double collective_time_us(const plan::NcclConfig& cfg, const GroupShape& g, Collective coll, double bytes);

/// nccl-tests' bus bandwidth of an all-reduce (doc/PERFORMANCE.md: algbw × 2(n-1)/n).
double allreduce_bus_gb_per_s(double bytes, double time_us, int ranks);

/// NCCL's choices for one profile's NCCL, kept by (group shape, bytes) as they are asked for:
/// each answer is what the free function of the same name gives. A simulation asks once per
/// bucket size of each group; a tuner simulates a hundred thousand plans whose groups and bucket
/// sizes repeat, and choosing anew was a tenth of its search. Not thread-safe: one per thread.
class NcclChoices {
 public:
  explicit NcclChoices(const plan::NcclConfig& cfg) : cfg_(cfg) {}
  const plan::NcclConfig& config() const { return cfg_; }
  /// choose_allreduce(config(), g, bytes). The reference holds until the next call.
  const CollectiveCost& all_reduce(const GroupShape& g, double bytes);
  /// choose_reduce_scatter(config(), g, bytes). The reference holds until the next call.
  const CollectiveCost& reduce_scatter(const GroupShape& g, double bytes);
  /// collective_time_us(config(), g, coll, bytes).
  double time_us(const GroupShape& g, Collective coll, double bytes);

 private:
  struct Key {
    GroupShape group;
    Collective coll;
    double bytes;
    bool operator==(const Key&) const = default;
  };
  struct KeyHash {
    size_t operator()(const Key& k) const;
  };
  const CollectiveCost& choice(const Key& key);
  plan::NcclConfig cfg_;
  std::unordered_map<Key, CollectiveCost, KeyHash> kept_;
};

}  // namespace parallax::sim
