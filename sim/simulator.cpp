#include "sim/simulator.hpp"

#include "sim/simulation.hpp"

namespace parallax::sim {

bool replicas_alike(const plan::Plan& plan) {
  // Every replica then meets the same links in the same roles: it fills whole nodes, or each
  // node holds whole replicas.
  const int per_node = plan.scenario.hardware.devices_per_node;
  const int p = plan.scenario.parallel.pipeline;
  return plan.scenario.parallel.data > 1 && (per_node % p == 0 || p % per_node == 0);
}

SimRun simulate(const plan::Plan& plan, const SimOptions& options) { return detail::Simulation(plan, options).run(); }

}  // namespace parallax::sim
