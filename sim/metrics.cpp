#include "sim/metrics.hpp"

#include <algorithm>
#include <boost/graph/compressed_sparse_row_graph.hpp>
#include <boost/range/iterator_range.hpp>
#include <cmath>

namespace parallax::sim {
namespace {

using Interval = std::pair<int64_t, int64_t>;

// Sorts and merges overlapping intervals.
std::vector<Interval> merged(std::vector<Interval> v) {
  std::sort(v.begin(), v.end());
  std::vector<Interval> out;
  for (const auto& iv : v) {
    if (!out.empty() && iv.first <= out.back().second) out.back().second = std::max(out.back().second, iv.second);
    else out.push_back(iv);
  }
  return out;
}

// Length of `a` not covered by `b` (both merged).
int64_t uncovered(const std::vector<Interval>& a, const std::vector<Interval>& b) {
  int64_t total = 0;
  size_t j = 0;
  for (const auto& [s, e] : a) {
    int64_t at = s;
    while (j < b.size() && b[j].second <= at) ++j;
    for (size_t k = j; k < b.size() && b[k].first < e; ++k) {
      if (b[k].first > at) total += b[k].first - at;
      at = std::max(at, b[k].second);
      if (at >= e) break;
    }
    if (at < e) total += e - at;
  }
  return total;
}

}  // namespace

std::vector<int32_t> critical_path(const plan::Timeline& timeline, const std::vector<Dependency>& deps) {
  const auto& events = timeline.events;
  if (events.empty()) return {};
  // Edges point from an event to what it depended on, so out_edges(v) are v's dependencies.
  struct Release {
    int64_t ns = 0;
  };
  using Graph = boost::compressed_sparse_row_graph<boost::directedS, boost::no_property, Release, boost::no_property,
                                                   uint32_t, uint32_t>;
  std::vector<std::pair<uint32_t, uint32_t>> edges;
  std::vector<Release> props;
  edges.reserve(deps.size());
  props.reserve(deps.size());
  for (const Dependency& d : deps) {
    edges.emplace_back(static_cast<uint32_t>(d.to), static_cast<uint32_t>(d.from));
    props.push_back({d.release_ns});
  }
  const Graph g(boost::edges_are_unsorted_multi_pass, edges.begin(), edges.end(), props.begin(),
                static_cast<uint32_t>(events.size()));

  uint32_t v = 0;
  for (uint32_t i = 1; i < events.size(); ++i)
    if (events[i].end > events[v].end) v = i;
  std::vector<int32_t> path = {static_cast<int32_t>(v)};
  for (;;) {
    // The dependency released last is the one this event waited for; ties go to the lowest index.
    int64_t best_release = -1;
    uint32_t best = v;
    for (auto e : boost::make_iterator_range(boost::out_edges(v, g))) {
      const uint32_t u = boost::target(e, g);
      const int64_t rel = g[e].ns;
      if (rel > best_release || (rel == best_release && u < best)) {
        best_release = rel;
        best = u;
      }
    }
    if (best == v) break;
    v = best;
    path.push_back(static_cast<int32_t>(v));
  }
  std::reverse(path.begin(), path.end());
  return path;
}

Metrics compute_metrics(const plan::Plan& plan, const SimRun& run) {
  Metrics m;
  const auto& events = run.timeline.events;
  int64_t first = INT64_MAX, last = 0;
  for (const auto& e : events) {
    first = std::min(first, e.start.count_ns());
    last = std::max(last, e.end.count_ns());
  }
  if (events.empty()) first = 0;
  const int64_t step = last - first;
  m.step_time = Time::ns(step);
  m.device_memory = plan.scenario.hardware.device.memory_bytes();

  std::vector<std::vector<Interval>> compute(plan.world_size), comm(plan.world_size);
  for (const auto& e : events) {
    auto& bucket = e.lane == plan::Lane::compute ? compute : comm;
    bucket[e.rank].emplace_back(e.start.count_ns(), e.end.count_ns());
  }
  double bubble_sum = 0;
  for (int r = 0; r < plan.world_size; ++r) {
    RankMetrics rm;
    rm.rank = r;
    const auto busy = merged(std::move(compute[r]));
    int64_t busy_ns = 0;
    for (const auto& [s, e] : busy) busy_ns += e - s;
    rm.busy = Time::ns(busy_ns);
    rm.bubble = Time::ns(step - busy_ns);
    rm.bubble_fraction = step > 0 ? static_cast<double>(step - busy_ns) / static_cast<double>(step) : 0.0;
    rm.exposed_comm = Time::ns(uncovered(merged(std::move(comm[r])), busy));
    rm.peak_memory = r < static_cast<int>(run.peak_memory.size()) ? run.peak_memory[r] : 0;
    rm.fits = rm.peak_memory <= m.device_memory;
    m.fits = m.fits && rm.fits;
    bubble_sum += rm.bubble_fraction;
    m.ranks.push_back(rm);
  }
  m.bubble_fraction = plan.world_size > 0 ? bubble_sum / plan.world_size : 0;

  for (const auto& l : run.links) {
    if (l.bytes <= 0) continue;
    LinkMetrics lm;
    lm.name = l.name;
    lm.bytes = l.bytes;
    lm.avg_gb_per_s = step > 0 ? l.bytes / static_cast<double>(step) : 0;  // bytes/ns = GB/s
    lm.peak_gb_per_s = l.peak_gb_per_s;
    lm.utilization = std::isfinite(l.capacity_gb_per_s) ? lm.avg_gb_per_s / l.capacity_gb_per_s : 0;
    lm.busy_fraction = step > 0 ? static_cast<double>(l.busy.count_ns()) / static_cast<double>(step) : 0;
    m.links.push_back(lm);
  }
  std::stable_sort(m.links.begin(), m.links.end(), [](const LinkMetrics& a, const LinkMetrics& b) { return a.bytes > b.bytes; });
  m.critical_path = critical_path(run.timeline, run.dependencies);
  return m;
}

}  // namespace parallax::sim
