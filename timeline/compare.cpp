#include "timeline/compare.hpp"

#include <algorithm>
#include <cmath>
#include <map>
#include <set>

#include <nlohmann/json.hpp>

#include "timeline/metrics.hpp"

namespace parallax::timeline {
namespace {

using Key = std::pair<int, std::string>;  // rank, action id

struct Span {
  plan::Time start, duration;  // start relative to the step's start
};

std::map<Key, Span> spans_of(const timeline::Timeline& t, int step) {
  const plan::Time origin = timeline::step_times(t, step).start;
  std::map<Key, Span> out;
  for (const auto& e : t.events) {
    if (e.step != step) continue;
    out[{e.rank, e.action.id()}] = {e.start - origin, e.end - e.start};
  }
  return out;
}

std::string kind_of(schedule::ActionKind k) {
  switch (k) {
    case schedule::ActionKind::SEND_F:
    case schedule::ActionKind::SEND_B: return "SEND";
    case schedule::ActionKind::RECV_F:
    case schedule::ActionKind::RECV_B: return "RECV";
    default: return schedule::name(k);
  }
}

std::string label(const Key& k) { return std::to_string(k.first) + ":" + k.second; }

constexpr double kMiB = 1024.0 * 1024.0;

// The plan's memory estimate per rank, in MiB, from the trace's plan; empty when it carries none.
// Without the reserve (CUDA context, cached blocks), which a run's measured figure does not hold.
std::map<int, double> estimated_memory_mb(const Timeline& t) {
  std::map<int, double> out;
  if (t.plan)
    for (const MemorySummary& m : t.plan->memory) out[m.rank] = static_cast<double>(m.allocated()) / kMiB;
  return out;
}

}  // namespace

std::vector<int> undisturbed_steps(const timeline::Timeline& measured) {
  const MeasuredSteps after = steps_after_warmup(measured);
  const std::vector<plan::Time> times = after.step_times();
  const StepStatistic statistic = step_statistic(times);
  std::vector<int> out;
  for (size_t i = 0; i < after.steps.size(); ++i)
    if (!statistic.disturbed(times[i])) out.push_back(after.steps[i]);
  return out;
}

timeline::Timeline undisturbed_only(timeline::Timeline measured, bool keep_warmup) {
  const std::vector<int> steps = timeline::steps_of(measured), kept = undisturbed_steps(measured);
  if (steps.size() < 2) return measured;
  std::set<int> keep(kept.begin(), kept.end());
  if (keep_warmup) keep.insert(steps.front());
  auto& events = measured.events;
  events.erase(std::remove_if(events.begin(), events.end(), [&](const timeline::TimelineEvent& e) { return !keep.count(e.step); }),
               events.end());
  return measured;
}

int representative_step(const timeline::Timeline& measured) {
  // Named, not a structured binding: a lambda capturing one needs C++20's P1381, which clang
  // before 16 lacks, and the fuzz build (bench/fuzz.sh) compiles this with Debian's clang 14.
  const MeasuredSteps after = steps_after_warmup(measured);
  const std::vector<int>& steps = after.steps;
  const std::vector<plan::Time> times = after.step_times();
  const plan::Time target = undisturbed(times);
  auto off = [&](size_t i) { return abs(times[i] - target); };
  int best = -1;
  for (size_t i = 0; i < steps.size(); ++i)
    if (best < 0 || off(i) < off(static_cast<size_t>(best))) best = static_cast<int>(i);
  return best < 0 ? -1 : steps[static_cast<size_t>(best)];
}

CompareReport compare(const timeline::Timeline& predicted, const timeline::Timeline& measured) {
  CompareReport r;
  const std::vector<int> pred_steps = timeline::steps_of(predicted);
  const int pstep = pred_steps.empty() ? 0 : pred_steps.front();
  const MeasuredSteps after = steps_after_warmup(measured);  // each step's numbers, computed once
  r.measured_step = step_statistic(after.step_times());

  const timeline::StepTimes pt = timeline::step_times(predicted, pstep);
  r.predicted_step = pt.step_time;
  if (r.measured_step.undisturbed > plan::Time()) {
    r.step_error = relative_error(r.predicted_step, r.measured_step.undisturbed);
    r.median_error = relative_error(r.predicted_step, r.measured_step.median);
  }
  std::vector<StepTimes> mt;
  for (size_t i = 0; i < after.steps.size(); ++i)
    if (!r.measured_step.disturbed(after.times[i].step_time)) {
      r.measured_steps.push_back(after.steps[i]);
      mt.push_back(after.times[i]);
    }
  const std::vector<int>& msteps = r.measured_steps;

  const int ranks = std::max(predicted.world_size, measured.world_size);
  const auto estimate = estimated_memory_mb(predicted);
  for (int rank = 0; rank < ranks; ++rank) {
    RankComparison rc;
    rc.rank = rank;
    if (const auto it = estimate.find(rank); it != estimate.end()) rc.predicted_memory_mb = it->second;
    for (const auto& m : measured.memory)
      if (m.rank == rank) rc.measured_memory_mb = static_cast<double>(m.training_bytes()) / kMiB;
    if (rank < static_cast<int>(pt.ranks.size())) {
      rc.predicted_bubble = pt.ranks[rank].bubble;
      rc.predicted_bubble_fraction = pt.ranks[rank].bubble_fraction;
      rc.predicted_imbalance_fraction = pt.ranks[rank].imbalance_fraction;
      rc.predicted_exposed_comm = pt.ranks[rank].exposed_comm;
    }
    std::vector<plan::Time> bubble, exposed;
    std::vector<double> fraction, imbalance;
    for (const auto& m : mt) {
      if (rank >= static_cast<int>(m.ranks.size())) continue;
      bubble.push_back(m.ranks[rank].bubble);
      fraction.push_back(m.ranks[rank].bubble_fraction);
      imbalance.push_back(m.ranks[rank].imbalance_fraction);
      exposed.push_back(m.ranks[rank].exposed_comm);
    }
    rc.measured_bubble = median(bubble);
    rc.measured_bubble_fraction = median(fraction);
    rc.measured_imbalance_fraction = median(imbalance);
    rc.measured_exposed_comm = median(exposed);
    r.ranks.push_back(rc);
  }

  // Join action by action; measured spans are averaged over the measured steps.
  const auto pspans = spans_of(predicted, pstep);
  std::map<Key, std::vector<Span>> mspans;
  for (int s : msteps)
    for (const auto& [k, span] : spans_of(measured, s)) mspans[k].push_back(span);
  std::map<Key, schedule::ActionKind> kinds;
  for (const auto& e : predicted.events) kinds[{e.rank, e.action.id()}] = e.action.kind;
  for (const auto& e : measured.events) kinds[{e.rank, e.action.id()}] = e.action.kind;

  std::map<std::string, KindComparison> by_kind;
  for (const auto& [key, p] : pspans) {
    auto it = mspans.find(key);
    if (it == mspans.end()) {
      r.only_predicted.push_back(label(key));
      continue;
    }
    ActionComparison a;
    a.rank = key.first;
    a.action = key.second;
    a.predicted_start = p.start;
    a.predicted_duration = p.duration;
    for (const Span& m : it->second) {
      a.measured_start += m.start;
      a.measured_duration += m.duration;
    }
    const auto n = static_cast<int64_t>(it->second.size());
    a.measured_start = a.measured_start / n;
    a.measured_duration = a.measured_duration / n;
    const plan::Time start_off = a.predicted_start - a.measured_start;
    const plan::Time end_off = start_off + a.predicted_duration - a.measured_duration;
    a.difference = std::max(abs(start_off), abs(end_off));
    r.worst.push_back(a);

    KindComparison& kc = by_kind[kind_of(kinds[key])];
    kc.kind = kind_of(kinds[key]);
    if (a.measured_duration > plan::Time()) {
      const double err = relative_error(a.predicted_duration, a.measured_duration);
      kc.mean_abs_error += std::abs(err);
      if (kc.actions == 0 || std::abs(err) > std::abs(kc.worst_error)) {
        kc.worst_error = err;
        kc.worst_action = label(key);
      }
      ++kc.actions;
      kc.predicted += a.predicted_duration;
      kc.measured += a.measured_duration;
    }
  }
  for (const auto& [key, spans] : mspans) {
    if (pspans.count(key)) continue;
    // A MoE block's exchanges and a sharded layer's gathers are measured inside the actions the
    // simulator folds them into.
    if (kinds[key] == schedule::ActionKind::ALL_TO_ALL) ++r.measured_exchanges;
    else if (kinds[key] == schedule::ActionKind::ALL_GATHER) ++r.measured_gathers;
    else r.only_measured.push_back(label(key));
  }
  for (const char* k : {"F", "B", "SEND", "RECV", "ALLREDUCE", "OPTIM"}) {
    auto it = by_kind.find(k);
    if (it == by_kind.end()) continue;
    if (it->second.actions > 0) it->second.mean_abs_error /= it->second.actions;
    r.kinds.push_back(it->second);
  }
  std::stable_sort(r.worst.begin(), r.worst.end(),
                   [](const ActionComparison& x, const ActionComparison& y) { return x.difference > y.difference; });
  if (r.worst.size() > 10) r.worst.resize(10);
  return r;
}

}  // namespace parallax::timeline
