#include "sim/topology.hpp"

namespace parallax::sim {

Topology::Topology(const plan::Plan& plan, Network& network, bool named, int played) {
  const auto& hw = plan.scenario.hardware;
  devices_per_node_ = hw.devices_per_node;
  nics_per_node_ = hw.nics_per_node;
  node_latency_ = Time::us(hw.node_link.latency_us);
  node_bandwidth_ = hw.node_link.bandwidth_gb_per_s;
  // One device per simulated rank, a tensor-parallel group's first, where parallel.rank_order
  // puts it (plan::rank_of); the group's other devices carry the same traffic on their own ports.
  const plan::ParallelSpec& par = plan.scenario.parallel;
  const int groups = par.tensor_groups();
  if (played <= 0 || played > groups) played = groups;
  network.reserve_links(2 * static_cast<size_t>(played) + 2 * static_cast<size_t>(plan.nodes) * nics_per_node_);
  std::vector<char> node_played(static_cast<size_t>(plan.nodes), 0);
  for (int r = 0; r < groups; ++r) {
    const int device = plan::rank_of(par, {r / par.pipeline, r % par.pipeline, 0});
    node_of_.push_back(device / devices_per_node_);
    local_of_.push_back(device % devices_per_node_);
    if (r >= played) continue;
    node_played[node_of_.back()] = 1;
    const std::string dev =
        named ? "node" + std::to_string(device / devices_per_node_) + "/dev" + std::to_string(device % devices_per_node_) + " " + hw.node_link.name : "";
    up_.push_back(network.add_link(named ? dev + " up" : dev, hw.node_link.bandwidth_gb_per_s));
    down_.push_back(network.add_link(named ? dev + " down" : dev, hw.node_link.bandwidth_gb_per_s));
  }
  if (hw.network && plan.nodes > 1) {
    network_latency_ = Time::us(hw.network->latency_us);
    network_bandwidth_ = hw.network->bandwidth_gb_per_s;
    for (int n = 0; n < plan.nodes; ++n) {
      for (int i = 0; i < nics_per_node_; ++i) {
        if (!node_played[n]) {
          nic_up_.push_back(-1);
          nic_down_.push_back(-1);
          continue;
        }
        const std::string nic = named ? "node" + std::to_string(n) + "/nic" + std::to_string(i) + " " + hw.network->name : "";
        nic_up_.push_back(network.add_link(named ? nic + " up" : nic, hw.network->bandwidth_gb_per_s));
        nic_down_.push_back(network.add_link(named ? nic + " down" : nic, hw.network->bandwidth_gb_per_s));
      }
    }
  }
}

int Topology::nic_of(int rank) const {
  return node_of(rank) * nics_per_node_ + local_of_[rank] % nics_per_node_;
}

Route Topology::p2p(int src, int dst) const {
  if (node_of(src) == node_of(dst)) return {{up_[src], down_[dst]}, node_latency_};
  return {{nic_up_[nic_of(src)], nic_down_[nic_of(dst)]}, network_latency_};
}

std::vector<int> Topology::device_ports(const std::vector<int>& ranks) const {
  std::vector<int> links;
  for (int r : ranks) {
    links.push_back(up_[r]);
    links.push_back(down_[r]);
  }
  return links;
}

std::vector<int> Topology::nic_ports(const std::vector<int>& ranks) const {
  std::vector<int> links;
  for (int r : ranks) {
    links.push_back(nic_up_[nic_of(r)]);
    links.push_back(nic_down_[nic_of(r)]);
  }
  return links;
}

}  // namespace parallax::sim
