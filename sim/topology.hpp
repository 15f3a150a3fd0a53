#pragma once
// The machine a plan runs on, as links: every device has an up and a down port into its node's
// fabric (NVLink/NVSwitch, or PCIe), every node has nics_per_node NICs with an up and a down link
// into a non-blocking network. A device uses NIC (local_rank mod nics_per_node), as rail-optimised
// clusters wire them. Routes: inside a node, source up + destination down; across nodes, source
// NIC up + destination NIC down (GPUDirect RDMA; the PCIe hop to the NIC is not modelled).
#include <array>
#include <vector>

#include "plan/plan.hpp"
#include "sim/network.hpp"

namespace parallax::sim {

/// A point-to-point path: two links (the sender's way out, the receiver's way in).
struct Route {
  std::array<int, 2> links;
  Time latency;
};

/// Ranks here are the simulator's: replica-major (replica x pipeline + pipeline rank), one per
/// tensor-parallel group; the constructor places each on its device by the plan's rank order.
class Topology {
 public:
  /// `named`: give links readable names ("node0/dev1 NVLink up"); step-only runs need none.
  /// `played`: the ranks a step-only run plays (the first `played`: a folded run's one replica),
  /// whose ports and whose nodes' NICs alone get links; every rank by default (0). The others
  /// are never routed (Simulation::routed), and at 1,024 ranks their links were a tenth of
  /// setting up a tuner's simulation.
  Topology(const plan::Plan& plan, Network& network, bool named = true, int played = 0);

  int node_of(int rank) const { return node_of_[rank]; }
  Route p2p(int src, int dst) const;
  /// Ports of the given ranks inside their node (up and down of each).
  std::vector<int> device_ports(const std::vector<int>& ranks) const;
  /// One rank's up and down ports.
  std::array<int, 2> device_ports(int rank) const { return {up_[rank], down_[rank]}; }
  /// NIC links (up and down) used by the given ranks.
  std::vector<int> nic_ports(const std::vector<int>& ranks) const;
  Time node_latency() const { return node_latency_; }
  Time network_latency() const { return network_latency_; }
  double node_bandwidth() const { return node_bandwidth_; }
  double network_bandwidth() const { return network_bandwidth_; }

 private:
  int nic_of(int rank) const;

  int devices_per_node_ = 1;
  int nics_per_node_ = 1;
  std::vector<int> up_, down_;          // per rank
  std::vector<int> node_of_;            // per rank: looked up, as a division it was an idiv per call
  std::vector<int> local_of_;           // per rank: its device index inside its node
  std::vector<int> nic_up_, nic_down_;  // per node * nics + nic
  Time node_latency_, network_latency_;
  double node_bandwidth_ = 0, network_bandwidth_ = 0;
};

}  // namespace parallax::sim
