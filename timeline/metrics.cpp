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

// Sorts and merges intervals in place: [begin, end) becomes [begin, returned).
Interval* merge_in_place(Interval* begin, Interval* end) {
  if (begin == end) return end;
  if (!std::is_sorted(begin, end)) std::sort(begin, end);  // a rank's events mostly come in time order: no sort then
  Interval* out = begin;
  for (Interval* iv = begin + 1; iv != end; ++iv) {
    if (iv->first <= out->second) out->second = std::max(out->second, iv->second);
    else *++out = *iv;
  }
  return out + 1;
}

// The summed length of [begin, end).
int64_t total_length(const Interval* begin, const Interval* end) {
  int64_t total = 0;
  for (const Interval* iv = begin; iv != end; ++iv) total += iv->second - iv->first;
  return total;
}

// A counting sort's slices: `at[k + 1]` holds how many items have key k; after this, key k's
// items go to [at[k], at[k + 1]) of one array.
void to_offsets(std::vector<uint32_t>& at) {
  for (size_t k = 0; k + 1 < at.size(); ++k) at[k + 1] += at[k];
}

// Length of [a, a_end) not covered by [b, b_end) (both merged).
int64_t uncovered(const Interval* a, const Interval* a_end, const Interval* b, const Interval* b_end) {
  int64_t total = 0;
  for (; a != a_end; ++a) {
    const auto [s, e] = *a;
    int64_t at = s;
    while (b != b_end && b->second <= at) ++b;
    for (const Interval* k = b; k != b_end && k->first < e; ++k) {
      if (k->first > at) total += k->first - at;
      at = std::max(at, k->second);
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
  // A rank computes a stage many times: each (stage, rank) is kept once as it is first met,
  // marked in a table over the timeline's ranks (a rank outside them is kept every time, and
  // the sort below makes them unique).
  const size_t world = static_cast<size_t>(std::max(timeline.world_size, 0));
  std::vector<std::vector<bool>> seen;
  for (const auto& e : timeline.events) {
    if (e.lane != Lane::compute || e.action.kind == ActionKind::OPTIM) continue;
    for (const Action& part : e.action.parts()) {
      if (part.stage < 0) continue;
      const size_t stage = static_cast<size_t>(part.stage);
      if (stage >= out.size()) {
        out.resize(stage + 1);
        seen.resize(stage + 1);
      }
      if (e.rank >= 0 && static_cast<size_t>(e.rank) < world) {
        if (seen[stage].empty()) seen[stage].resize(world);
        if (seen[stage][static_cast<size_t>(e.rank)]) continue;
        seen[stage][static_cast<size_t>(e.rank)] = true;
      }
      out[stage].push_back(e.rank);
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
// by event (kNotPosted for an event that is no side of a message, or whose message misses a side).
// The sides are grouped by their receiving rank, then sorted within the rank by message: a
// quarter of a million messages on 1,024 ranks, and sixteen times that on 16,384, made one sort of
// them all (or a std::map) the slowest part of metrics. A receiving rank outside the timeline's
// ranks matches nothing: step_times reads no event of such a rank.
constexpr int64_t kNotPosted = INT64_MIN;

std::vector<int64_t> both_posted(const Timeline& timeline, int step, const StageRanks& ranks) {
  const auto& events = timeline.events;
  struct Side {
    MessageKey key;
    uint32_t event = 0;
    bool send = false;
    int64_t start = 0;  // copied here: reading it back from the event would be a cache miss a side
  };
  std::vector<Side> sides;
  for (size_t i = 0; i < events.size(); ++i) {
    const TimelineEvent& e = events[i];
    if (e.step != step) continue;
    if (const auto key = message_of(e, ranks))
      sides.push_back({*key, static_cast<uint32_t>(i), e.action.kind == ActionKind::SEND_F || e.action.kind == ActionKind::SEND_B,
                       e.start.count_ns()});
  }
  // Grouped by receiving rank, each group in timeline order: a counting sort of the sides' indices.
  const size_t world = static_cast<size_t>(std::max(timeline.world_size, 0));
  auto receiver = [&](const Side& s) {
    const int r = std::get<0>(s.key);
    return r >= 0 && static_cast<size_t>(r) < world ? static_cast<size_t>(r) : world;  // world: matches nothing
  };
  std::vector<uint32_t> at(world + 2, 0);
  for (const Side& s : sides) ++at[receiver(s) + 1];
  to_offsets(at);
  std::vector<uint32_t> order(sides.size());
  std::vector<uint32_t> next(at.begin(), at.end() - 1);
  for (size_t i = 0; i < sides.size(); ++i) order[next[receiver(sides[i])]++] = static_cast<uint32_t>(i);
  std::vector<int64_t> out(events.size(), kNotPosted);
  std::vector<Side> group;
  for (size_t r = 0; r < world; ++r) {
    group.clear();
    for (uint32_t k = at[r]; k < at[r + 1]; ++k) group.push_back(sides[order[k]]);
    // By message, and in timeline order within one: of two events for the same side of a
    // message, the later in the timeline counts.
    std::sort(group.begin(), group.end(), [](const Side& x, const Side& y) { return std::tie(x.key, x.event) < std::tie(y.key, y.event); });
    for (size_t i = 0; i < group.size();) {
      int64_t send = kNotPosted, recv = kNotPosted;
      size_t j = i;
      for (; j < group.size() && group[j].key == group[i].key; ++j) (group[j].send ? send : recv) = group[j].start;
      if (send != kNotPosted && recv != kNotPosted)
        for (size_t k = i; k < j; ++k) out[group[k].event] = std::max(send, recv);
      i = j;
    }
  }
  return out;
}

// The header's split of each bubble: the most loaded rank's work beyond a rank's is imbalance.
void split_imbalance(StepTimes& out) {
  if (out.step_time.count_ns() <= 0 || out.ranks.empty()) return;
  int64_t most = 0;
  for (const RankTimes& r : out.ranks) most = std::max(most, r.busy.count_ns() + r.exposed_comm.count_ns());
  double sum = 0;
  for (RankTimes& r : out.ranks) {
    const int64_t extra = most - r.busy.count_ns() - r.exposed_comm.count_ns();
    r.imbalance = Time::ns(std::min(extra, r.bubble.count_ns()));
    r.imbalance_fraction = static_cast<double>(r.imbalance.count_ns()) / static_cast<double>(out.step_time.count_ns());
    sum += r.imbalance_fraction;
  }
  out.imbalance_fraction = sum / static_cast<double>(out.ranks.size());
}

}  // namespace

int64_t union_length(std::vector<std::pair<int64_t, int64_t>> intervals) {
  return total_length(intervals.data(), merge_in_place(intervals.data(), intervals.data() + intervals.size()));
}

std::vector<int> steps_of(const Timeline& timeline) {
  std::set<int> steps;
  for (const auto& e : timeline.events) steps.insert(e.step);
  return {steps.begin(), steps.end()};
}

StepTimes step_times(const Timeline& timeline, int step) {
  StepTimes out;
  out.step = step;
  const auto& events = timeline.events;
  const size_t world = static_cast<size_t>(std::max(timeline.world_size, 0));
  auto counted = [&](const TimelineEvent& e) { return e.step == step && e.rank >= 0 && static_cast<size_t>(e.rank) < world; };
  const StageRanks ranks = stage_ranks(timeline);
  const std::vector<int64_t> posted = both_posted(timeline, step, ranks);
  // The step starts with its first piece of work. A receive posted earlier is a rank that finished
  // the previous step first and waits for this one's data: in a real run the later stages post
  // their first receive while stage 0 is still finishing the step before, and counting that wait
  // would add the stagger between ranks to every measured step (the simulator starts all ranks
  // together, so its steps have none). The same pass counts each rank's compute and other events.
  int64_t first = INT64_MAX, last = INT64_MIN;
  std::vector<uint32_t> compute_at(world + 1, 0), comm_at(world + 1, 0);
  for (const TimelineEvent& e : events) {
    if (!counted(e)) continue;
    last = std::max(last, e.end.count_ns());
    if (e.action.kind != ActionKind::RECV_F && e.action.kind != ActionKind::RECV_B) first = std::min(first, e.start.count_ns());
    ++(e.lane == Lane::compute ? compute_at : comm_at)[static_cast<size_t>(e.rank) + 1];
  }
  if (first > last) first = last = 0;
  const int64_t span = last - first;
  out.start = Time::ns(first);
  out.step_time = Time::ns(span);
  // Each rank's intervals in one array, a rank's in timeline order (a counting sort: the events'
  // ranks interleave, and one pass in order over millions of them beats a gather per rank).
  to_offsets(compute_at);
  to_offsets(comm_at);
  std::vector<Interval> compute(compute_at[world]), comm(comm_at[world]);
  std::vector<uint32_t> compute_next(compute_at.begin(), compute_at.end() - 1), comm_next(comm_at.begin(), comm_at.end() - 1);
  for (size_t i = 0; i < events.size(); ++i) {
    const TimelineEvent& e = events[i];
    if (!counted(e)) continue;
    const size_t r = static_cast<size_t>(e.rank);
    if (e.lane == Lane::compute) {
      compute[compute_next[r]++] = {e.start.count_ns(), e.end.count_ns()};
      continue;
    }
    // A message is communication only once both sides have posted.
    comm[comm_next[r]++] = {std::max({first, e.start.count_ns(), posted[i]}), e.end.count_ns()};
  }
  double sum = 0;
  for (size_t r = 0; r < world; ++r) {
    Interval* busy_begin = compute.data() + compute_at[r];
    Interval* busy_end = merge_in_place(busy_begin, compute.data() + compute_at[r + 1]);
    // Messages that ended before both sides posted moved nothing.
    Interval* comm_end = std::remove_if(comm.data() + comm_at[r], comm.data() + comm_at[r + 1], [](const Interval& iv) { return iv.first >= iv.second; });
    comm_end = merge_in_place(comm.data() + comm_at[r], comm_end);
    RankTimes rt;
    rt.rank = static_cast<int>(r);
    const int64_t busy_ns = total_length(busy_begin, busy_end);
    rt.busy = Time::ns(busy_ns);
    rt.exposed_comm = Time::ns(uncovered(comm.data() + comm_at[r], comm_end, busy_begin, busy_end));
    const int64_t bubble_ns = std::max<int64_t>(0, span - busy_ns - rt.exposed_comm.count_ns());
    rt.bubble = Time::ns(bubble_ns);
    rt.bubble_fraction = span > 0 ? static_cast<double>(bubble_ns) / static_cast<double>(span) : 0.0;
    sum += rt.bubble_fraction;
    out.ranks.push_back(rt);
  }
  out.bubble_fraction = world > 0 ? sum / static_cast<double>(world) : 0.0;
  split_imbalance(out);
  return out;
}

}  // namespace parallax::timeline
