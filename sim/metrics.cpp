#include "sim/metrics.hpp"

#include <algorithm>
#include <cmath>
#include <stdexcept>

#include "timeline/metrics.hpp"

namespace parallax::sim {

std::vector<int32_t> critical_path(const timeline::Timeline& timeline, const std::vector<int32_t>& waited_for) {
  const auto& events = timeline.events;
  if (events.empty()) return {};
  if (waited_for.size() != events.size()) throw std::invalid_argument("critical_path: one waited-for link per event expected");
  size_t v = 0;  // the step ends with the event that ends last (the first of equals)
  for (size_t i = 1; i < events.size(); ++i)
    if (events[i].end > events[v].end) v = i;
  std::vector<int32_t> path = {static_cast<int32_t>(v)};
  // Each event names the one it waited for, always recorded before it, so the walk ends.
  for (int32_t u = waited_for[v]; u >= 0; u = waited_for[static_cast<size_t>(u)]) path.push_back(u);
  std::reverse(path.begin(), path.end());
  return path;
}

namespace {

// The step's numbers per rank. A folded run recorded replica 0 alone: its ranks' numbers are
// computed over that replica and stand for every replica's (SimOptions::fold_replicas), each rank
// taking those of the played rank at its pipeline rank.
timeline::StepTimes rank_times(const plan::ParallelSpec& p, const SimRun& run) {
  if (!run.folded || run.timeline.events.empty()) return timeline::step_times(run.timeline, 0);
  timeline::Timeline one = run.timeline;
  one.world_size = run.played_ranks;
  for (timeline::TimelineEvent& ev : one.events) ev.rank = plan::group_placement(p, ev.rank).pipeline_rank;
  timeline::StepTimes times = timeline::step_times(one, 0);
  const std::vector<timeline::RankTimes> replica = times.ranks;
  times.ranks.clear();
  for (int r = 0; r < p.tensor_groups(); ++r) {
    times.ranks.push_back(replica[plan::group_placement(p, r).pipeline_rank]);
    times.ranks.back().rank = r;
  }
  return times;  // the mean bubble over ranks is the replica's mean
}

}  // namespace

Metrics compute_metrics(const plan::Plan& plan, const SimRun& run) {
  Metrics m;
  const timeline::StepTimes times = rank_times(plan.scenario.parallel, run);
  const int64_t step = times.step_time.count_ns();
  m.step_time = times.step_time;
  m.bubble_fraction = times.bubble_fraction;
  m.imbalance_fraction = times.imbalance_fraction;
  m.device_memory = plan.scenario.hardware.device.memory_bytes();
  for (const timeline::RankTimes& t : times.ranks) {
    RankMetrics rm;
    rm.rank = t.rank;
    rm.busy = t.busy;
    rm.bubble = t.bubble;
    rm.bubble_fraction = t.bubble_fraction;
    rm.imbalance = t.imbalance;
    rm.imbalance_fraction = t.imbalance_fraction;
    rm.exposed_comm = t.exposed_comm;
    rm.peak_memory = t.rank < static_cast<int>(run.peak_memory.size()) ? run.peak_memory[t.rank] : 0;
    rm.fits = plan.scenario.hardware.device.holds(rm.peak_memory);
    m.fits = m.fits && rm.fits;
    m.ranks.push_back(rm);
  }

  for (const auto& l : run.links) {
    if (l.bytes <= 0) continue;
    LinkMetrics lm;
    lm.name = l.name;
    lm.bytes = l.bytes;
    lm.avg_gb_per_s = step > 0 ? l.bytes / static_cast<double>(step) : 0;  // bytes/ns = GB/s
    lm.peak_gb_per_s = l.peak_gb_per_s;
    lm.utilization = std::isfinite(l.capacity_gb_per_s) ? lm.avg_gb_per_s / l.capacity_gb_per_s : 0;
    lm.busy_fraction = step > 0 ? l.busy / times.step_time : 0;
    m.links.push_back(lm);
  }
  std::stable_sort(m.links.begin(), m.links.end(), [](const LinkMetrics& a, const LinkMetrics& b) { return a.bytes > b.bytes; });
  m.critical_path = critical_path(run.timeline, run.waited_for);
  return m;
}

}  // namespace parallax::sim
