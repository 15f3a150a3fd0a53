#pragma once
// The numbers every view shows (docs/architecture.md), computed from a timeline:
// step time; per rank busy, bubble and exposed communication; per link bytes, bandwidth and
// utilisation; peak memory; and the critical path through the executed dependency graph.
#include <string>
#include <vector>

#include "sim/simulator.hpp"

namespace parallax::sim {

struct RankMetrics {
  int rank = 0;
  Time busy;           ///< compute lane busy
  Time bubble;         ///< step time - busy - exposed communication
  double bubble_fraction = 0;
  Time imbalance;      ///< the part of the bubble spent waiting out the most loaded rank's extra work
  double imbalance_fraction = 0;
  Time exposed_comm;   ///< a communication lane busy while compute is idle
  int64_t peak_memory = 0;
  bool fits = true;
};

struct LinkMetrics {
  std::string name;
  double bytes = 0;
  double avg_gb_per_s = 0;   ///< bytes / step time
  double peak_gb_per_s = 0;
  double utilization = 0;    ///< average / capacity (0 for free links)
  double busy_fraction = 0;  ///< share of the step with traffic
};

struct Metrics {
  Time step_time;
  double bubble_fraction = 0;  ///< mean over ranks
  double imbalance_fraction = 0;  ///< mean over ranks; the rest of the bubble is fill and drain
  std::vector<RankMetrics> ranks;
  std::vector<LinkMetrics> links;  ///< links that carried traffic, busiest first
  std::vector<int32_t> critical_path;  ///< event indices, first to last
  int64_t device_memory = 0;
  bool fits = true;
};

Metrics compute_metrics(const plan::Plan& plan, const SimRun& run);

/// Follows, from the event that ends last, the dependency that released each event last
/// (SimRun::waited_for).
std::vector<int32_t> critical_path(const timeline::Timeline& timeline, const std::vector<int32_t>& waited_for);

}  // namespace parallax::sim
