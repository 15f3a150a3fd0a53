#include "timeline/metrics.hpp"

#include <algorithm>
#include <cstdint>
#include <iterator>
#include <optional>
#include <set>
#include <stdexcept>
#include <string>
#include <tuple>

namespace parallax::timeline {

using schedule::ActionKind;
using schedule::Action;
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

// Per stage, the ranks that compute it, ascending. In every placement (either rank order,
// looped or V-shaped stages) a stage's replicas come in the same rank order as its neighbour's:
// the k-th rank of stage s sends to the k-th rank of stage s+1.
using StageRanks = std::vector<std::vector<int>>;

StageRanks stage_ranks(const Timeline& timeline) {
  StageRanks out;
  for (const auto& e : timeline.events) {
    if (e.lane != Lane::compute || e.action.kind == ActionKind::OPTIM) continue;
    for (const Action& part : e.action.parts()) {
      if (part.stage < 0) continue;
      if (static_cast<size_t>(part.stage) >= out.size()) out.resize(part.stage + 1);
      out[part.stage].push_back(e.rank);
    }
  }
  for (auto& ranks : out) {
    std::sort(ranks.begin(), ranks.end());
    ranks.erase(std::unique(ranks.begin(), ranks.end()), ranks.end());
  }
  return out;
}

// A point-to-point message of a step: (receiving rank, forward, receiving stage, micro-batch).
using MessageKey = std::tuple<int, bool, int, int>;

// The message a SEND or RECV event is one side of.
std::optional<MessageKey> message_of(const TimelineEvent& e, const StageRanks& ranks) {
  const ActionKind k = e.action.kind;
  const bool send = k == ActionKind::SEND_F || k == ActionKind::SEND_B;
  if (!send && k != ActionKind::RECV_F && k != ActionKind::RECV_B) return std::nullopt;
  const bool forward = k == ActionKind::SEND_F || k == ActionKind::RECV_F;
  const int stage = send ? e.action.stage + (forward ? 1 : -1) : e.action.stage;
  int receiver = e.rank;
  if (send) {
    receiver = -1;
    const size_t from = static_cast<size_t>(e.action.stage), to = static_cast<size_t>(stage);
    if (from < ranks.size() && to < ranks.size()) {
      const auto& senders = ranks[from];
      const auto it = std::lower_bound(senders.begin(), senders.end(), e.rank);
      const size_t k = static_cast<size_t>(it - senders.begin());
      if (it != senders.end() && *it == e.rank && k < ranks[to].size()) receiver = ranks[to][k];
    }
  }
  return MessageKey{receiver, forward, stage, e.action.mb};
}

// When each message of `step` had both sides posted: the later of its SEND's and RECV's starts,
// sorted by message. A sorted vector rather than a std::map: a 1,024-rank step has a quarter of
// a million messages, and a node allocation per message made this the slowest part of metrics.
using Posted = std::vector<std::pair<MessageKey, int64_t>>;

Posted both_posted(const Timeline& timeline, int step, const StageRanks& ranks) {
  struct Side {
    MessageKey key;
    bool send = false;
    int64_t start = 0;
  };
  std::vector<Side> sides;
  for (const auto& e : timeline.events) {
    if (e.step != step) continue;
    if (const auto key = message_of(e, ranks))
      sides.push_back({*key, e.action.kind == ActionKind::SEND_F || e.action.kind == ActionKind::SEND_B, e.start.count_ns()});
  }
  // Stable: of two events for the same side of a message, the later in the timeline counts.
  std::stable_sort(sides.begin(), sides.end(), [](const Side& x, const Side& y) { return x.key < y.key; });
  Posted out;
  for (size_t i = 0; i < sides.size();) {
    int64_t send = INT64_MIN, recv = INT64_MIN;
    size_t j = i;
    for (; j < sides.size() && sides[j].key == sides[i].key; ++j) (sides[j].send ? send : recv) = sides[j].start;
    if (send != INT64_MIN && recv != INT64_MIN) out.emplace_back(sides[i].key, std::max(send, recv));
    i = j;
  }
  return out;
}

const int64_t* find_posted(const Posted& posted, const MessageKey& key) {
  auto it = std::lower_bound(posted.begin(), posted.end(), key, [](const auto& x, const MessageKey& k) { return x.first < k; });
  return it != posted.end() && it->first == key ? &it->second : nullptr;
}

}  // namespace

int64_t union_length(std::vector<std::pair<int64_t, int64_t>> intervals) {
  int64_t total = 0;
  for (const auto& [s, e] : merged(std::move(intervals))) total += e - s;
  return total;
}

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
  const StageRanks ranks = stage_ranks(timeline);
  const auto posted = both_posted(timeline, step, ranks);
  // The step starts with its first piece of work. A receive posted earlier is a rank that finished
  // the previous step first and waits for this one's data: in a real run the later stages post
  // their first receive while stage 0 is still finishing the step before, and counting that wait
  // would add the stagger between ranks to every measured step (the simulator starts all ranks
  // together, so its steps have none).
  for (const auto& e : timeline.events) {
    if (e.step != step || e.rank < 0 || e.rank >= timeline.world_size) continue;
    last = std::max(last, e.end.count_ns());
    if (e.action.kind != ActionKind::RECV_F && e.action.kind != ActionKind::RECV_B) first = std::min(first, e.start.count_ns());
  }
  for (const auto& e : timeline.events) {
    if (e.step != step || e.rank < 0 || e.rank >= timeline.world_size) continue;
    if (e.lane == Lane::compute) {
      compute[e.rank].emplace_back(e.start.count_ns(), e.end.count_ns());
      continue;
    }
    // A message is communication only once both sides have posted.
    int64_t from = std::max(first, e.start.count_ns());
    if (const auto key = message_of(e, ranks))
      if (const int64_t* both = find_posted(posted, *key)) from = std::max(from, *both);
    if (from < e.end.count_ns()) comm[e.rank].emplace_back(from, e.end.count_ns());
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
    rt.exposed_comm = Time::ns(uncovered(merged(std::move(comm[r])), busy));
    const int64_t bubble_ns = std::max<int64_t>(0, span - busy_ns - rt.exposed_comm.count_ns());
    rt.bubble = Time::ns(bubble_ns);
    rt.bubble_fraction = span > 0 ? static_cast<double>(bubble_ns) / static_cast<double>(span) : 0.0;
    sum += rt.bubble_fraction;
    out.ranks.push_back(rt);
  }
  out.bubble_fraction = timeline.world_size > 0 ? sum / timeline.world_size : 0.0;
  return out;
}

}  // namespace parallax::timeline
