#include "plan/timeline_metrics.hpp"

#include <algorithm>
#include <cstdint>
#include <set>

namespace parallax::plan {
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

std::vector<int> steps_of(const Timeline& timeline) {
  std::set<int> steps;
  for (const auto& e : timeline.events) steps.insert(e.step);
  return {steps.begin(), steps.end()};
}

StepTimes step_times(const Timeline& timeline, int step) {
  StepTimes out;
  out.step = step;
  int64_t first = INT64_MAX, last = INT64_MIN;
  std::vector<std::vector<Interval>> compute(timeline.world_size), comm(timeline.world_size);
  for (const auto& e : timeline.events) {
    if (e.step != step || e.rank < 0 || e.rank >= timeline.world_size) continue;
    first = std::min(first, e.start.count_ns());
    last = std::max(last, e.end.count_ns());
    (e.lane == Lane::compute ? compute : comm)[e.rank].emplace_back(e.start.count_ns(), e.end.count_ns());
  }
  if (first > last) first = last = 0;
  const int64_t span = last - first;
  out.start = Time::ns(first);
  out.step_time = Time::ns(span);
  double sum = 0;
  for (int r = 0; r < timeline.world_size; ++r) {
    RankTimes rt;
    rt.rank = r;
    const auto busy = merged(std::move(compute[r]));
    int64_t busy_ns = 0;
    for (const auto& [s, e] : busy) busy_ns += e - s;
    rt.busy = Time::ns(busy_ns);
    rt.bubble = Time::ns(span - busy_ns);
    rt.bubble_fraction = span > 0 ? static_cast<double>(span - busy_ns) / static_cast<double>(span) : 0.0;
    rt.exposed_comm = Time::ns(uncovered(merged(std::move(comm[r])), busy));
    sum += rt.bubble_fraction;
    out.ranks.push_back(rt);
  }
  out.bubble_fraction = timeline.world_size > 0 ? sum / timeline.world_size : 0.0;
  return out;
}

}  // namespace parallax::plan
