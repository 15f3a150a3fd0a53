#include "sim/simulator.hpp"

#include "sim/simulation.hpp"

namespace parallax::sim {

// Playing replica 0 alone gives every replica's numbers when each replica meets the same links
// in the same roles, and no link that carries one replica's sends carries another's:
// - each pair of neighbouring pipeline ranks is in one node for every replica, or apart for every
//   replica (so the sends of every replica take the same kind of path);
// - a NIC that carries a replica's sends serves no device of another replica. A collective's
//   flow is one flow on every link it crosses, however many of its members share a NIC, so NICs
//   that carry collectives alone may be shared.
// Device ports are each one device's; nothing else is shared. The rule holds for either rank
// order: tp-pp-dp when each node holds whole replicas or a replica fills whole nodes, tp-dp-pp
// when a stage's replicas fill whole nodes or a node holds whole stages, with a NIC per device
// or per replica in a node.
bool replicas_alike(const plan::Plan& plan) {
  const plan::ParallelSpec& par = plan.scenario.parallel;
  const auto& hw = plan.scenario.hardware;
  if (par.replicas() < 2) return false;
  const int per_node = hw.devices_per_node, nics = std::max(1, hw.nics_per_node), p = par.pipeline;
  const auto device = [&](int replica, int pipeline_rank) { return plan::rank_of(par, {replica, pipeline_rank, 0}); };
  const auto nic = [&](int d) { return (d / per_node) * nics + d % per_node % nics; };
  // Pipeline ranks that exchange tensors: stage s sends to stage s + 1.
  std::vector<std::pair<int, int>> neighbours;
  for (int s = 0; s + 1 < std::min(par.stages(), 2 * p); ++s) neighbours.emplace_back(s % p, (s + 1) % p);
  // NIC -> the replica whose sends it carries, -1 for none (by index: the tuner asks this of every
  // configuration it simulates, and a hash map here was a tenth of a 1,024-rank simulation).
  std::vector<int> sender_of(static_cast<size_t>(plan.nodes) * nics, -1);
  bool any = false;
  for (int r = 0; r < par.replicas(); ++r)
    for (const auto& [a, b] : neighbours) {
      const int from = device(r, a), to = device(r, b);
      const bool apart = from / per_node != to / per_node;
      if (apart != (device(0, a) / per_node != device(0, b) / per_node)) return false;
      if (!apart) continue;
      for (int d : {from, to}) {
        int& sender = sender_of[nic(d)];
        if (sender >= 0 && sender != r) return false;
        sender = r;
        any = true;
      }
    }
  if (!any) return true;
  for (int r = 0; r < par.replicas(); ++r)
    for (int pr = 0; pr < p; ++pr) {
      const int sender = sender_of[nic(device(r, pr))];
      if (sender >= 0 && sender != r) return false;
    }
  return true;
}

SimRun simulate(const plan::Plan& plan, const SimOptions& options) { return detail::Simulation(plan, options).run(); }

}  // namespace parallax::sim
