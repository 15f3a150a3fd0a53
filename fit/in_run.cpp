#include "fit/in_run.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <map>
#include <numeric>
#include <set>

#include "fit/measure.hpp"
#include "plan/executable.hpp"
#include "profiler/messages.hpp"
#include "sim/simulator.hpp"
#include "timeline/compare.hpp"
#include "timeline/metrics.hpp"

namespace parallax::fit {

std::vector<Calibrated> executable_plans(const std::vector<std::string>& files, bool named, bool say,
                                         const std::string& hardware) {
  std::vector<Calibrated> plans;
  for (const auto& f : files) {
    try {
      plan::Plan p = plan::resolve_plan(plan::load_scenario(f, {"hardware=" + hardware}));
      plan::check_executable(p.scenario);
      plans.push_back({f, std::move(p)});
    } catch (const plan::InputError& e) {
      if (named) throw;
      if (say) std::cerr << "calibrate: skipping " << f << ": " << e.what() << "\n";
    }
  }
  if (plans.empty()) throw plan::InputError(plan::Location{"SCENARIO"}, "no scenario the executor can run was given");
  return plans;
}

std::vector<Probe> probe_plans(const std::vector<Calibrated>& plans, const plan::HardwareProfile& base) {
  const std::vector<std::string> common = {"hardware=ideal", "parallel.virtual=1", "parallel.partition_len=balanced",
                                           "parallel.grad_accumulation=1", "parallel.activation_checkpointing=false"};
  auto estimate = [&](plan::Scenario s) {
    s.hardware = base;
    return timeline::step_times(sim::simulate(plan::resolve_plan(s)).timeline, 0).step_time;
  };
  auto probe = [&](const Calibrated& c, const std::vector<std::string>& layout, const std::string& words) {
    std::vector<std::string> sets = common;
    sets.insert(sets.end(), layout.begin(), layout.end());
    plan::Scenario s = plan::load_scenario(c.file, sets);
    const plan::Time step = estimate(s);
    s.data.steps = steps_for(step);  // as validate measures a run
    s.name += " (calibration probe: " + words + ", " + std::to_string(s.data.steps) + " steps)";
    return std::make_pair(step, plan::resolve_plan(s));
  };
  auto pipeline = [&](const Calibrated& c) {
    const int batch = c.plan.scenario.data.batch_size;
    const int chunks = batch % 4 == 0 ? 4 : batch % 2 == 0 ? 2 : 1;
    return probe(c, {"parallel.data=1", "parallel.pipeline=2", "parallel.schedule=1f1b",
                     "parallel.chunks=" + std::to_string(chunks)},
                 "pipeline 2, 1f1b, " + std::to_string(chunks) + " chunks");
  };
  // The shortest and the longest pipeline probe among models whose probe step is short enough.
  const plan::Time kLongestProbeStep = plan::Time::ms(100);  // 20 steps in 2 s
  std::optional<std::pair<plan::Time, plan::Plan>> small, large;
  const Calibrated *small_model = nullptr, *large_model = nullptr;
  for (const auto& c : plans) {
    if (c.plan.layers().size() < 2) continue;
    auto p = pipeline(c);
    if (!small || p.first < small->first) small = p, small_model = &c;
    if (p.first <= kLongestProbeStep && (!large || p.first > large->first)) large = p, large_model = &c;
  }
  if (!small_model) return {};
  constexpr double kDistinctSize = 3;  // step ratio from which the two models tell size effects apart
  if (!large || large->first / small->first < kDistinctSize) large_model = nullptr;
  std::vector<Probe> out;
  for (const Calibrated* model : {small_model, large_model}) {
    if (!model) continue;
    const int size = model == small_model ? 0 : 1;
    out.push_back({size == 0 ? small->second : large->second, false, size});
    if (model->plan.scenario.data.batch_size % 2 == 0) {
      // Two micro-batches where the batch allows: the first backward without all-reduces, the last with.
      const int chunks = model->plan.scenario.data.batch_size % 4 == 0 ? 2 : 1;
      out.push_back({probe(*model, {"parallel.data=2", "parallel.pipeline=1", "parallel.chunks=" + std::to_string(chunks)},
                           "data 2, " + std::to_string(chunks) + " chunk(s)")
                         .second,
                     true, size});
    }
  }
  return out;
}

// The mean without the top and bottom 10%, over the undisturbed steps' actions (timeline::undisturbed_only). A
// step adds up its actions: the frequent shorter delays belong in it, a rank descheduled for a
// scheduler slice (~4 ms here, in ~1-3% of the sends) mostly does not. With receives posted at
// the step's start the remaining tails are such slices; the mean without only the top 1%, kept
// while late receives were common, over-predicted 1F1B on the accuracy MLP by 20-40%. Not a
// quantile: a kind's actions mix layers of different sizes, compared as means with the costs
// alone.
double trimmed_mean(std::vector<double> v) {
  if (v.empty()) return 0.0;
  std::sort(v.begin(), v.end());
  const size_t cut = v.size() / 10;
  double sum = 0;
  for (size_t i = cut; i < v.size() - cut; ++i) sum += v[i];
  return sum / static_cast<double>(v.size() - 2 * cut);
}

// A step's all-reduce time on one rank: the union of its ALLREDUCE spans (they may overlap), as
// a mean over ranks and steps (after the first, when there are several).
plan::Time allreduce_time(const timeline::Timeline& t) {
  std::map<std::pair<int, int>, std::vector<std::pair<int64_t, int64_t>>> spans;  // by (step, rank)
  int first_step = INT32_MAX, last_step = INT32_MIN;
  for (const auto& e : t.events) {
    first_step = std::min(first_step, e.step);
    last_step = std::max(last_step, e.step);
    if (e.lane == timeline::Lane::allreduce) spans[{e.step, e.rank}].emplace_back(e.start.count_ns(), e.end.count_ns());
  }
  plan::Time sum;
  int64_t n = 0;
  for (auto& [key, v] : spans) {
    if (key.first == first_step && last_step > first_step) continue;
    sum += plan::Time::ns(timeline::union_length(std::move(v)));
    ++n;
  }
  return n ? sum / n : plan::Time();
}

namespace {

// A kind's actions (F, B or OPTIM) in a timeline, one duration each, over the steps after the
// first when there are several.
std::vector<double> durations_us(const timeline::Timeline& t, schedule::ActionKind kind) {
  int first_step = INT32_MAX, last_step = INT32_MIN;
  for (const auto& e : t.events) first_step = std::min(first_step, e.step), last_step = std::max(last_step, e.step);
  std::vector<double> out;
  for (const auto& e : t.events)
    if (e.action.kind == kind && e.lane == timeline::Lane::compute && (e.step != first_step || last_step == first_step))
      out.push_back((e.end - e.start).to_us());
  return out;
}

// The typical duration of a timeline's B actions, the step's last ones (which start the DDP
// all-reduces) or the others, over the steps after the first when there are several.
double typical_backward_us(const timeline::Timeline& t, int microbatches, bool last) {
  int first_step = INT32_MAX, last_step = INT32_MIN;
  for (const auto& e : t.events) first_step = std::min(first_step, e.step), last_step = std::max(last_step, e.step);
  std::vector<double> v;
  for (const auto& e : t.events) {
    if (e.action.kind != schedule::ActionKind::B || (e.step == first_step && last_step > first_step)) continue;
    if ((e.action.mb == microbatches - 1) != last) continue;
    v.push_back((e.end - e.start).to_us());
  }
  return trimmed_mean(v);
}

// Under DDP the step's last backward shares the cores with the all-reduces its hooks start; the
// earlier ones (no_sync) do not. With two micro-batches or more the probe measures both: the
// others' extra is backward_extra_us, the last one's beyond it is per MB of the stage's
// gradients. With one, the pipeline probe's backward extra stands for the others'.
void fit_sync_backward(const plan::Plan& probe, const timeline::Timeline& predicted, const timeline::Timeline& measured,
                       const plan::Calibration& calibration, plan::InRunFactors* f) {
  const int n = probe.scenario.parallel.chunks * probe.scenario.parallel.grad_accumulation;
  if (n > 1)
    f->backward_extra_us = typical_backward_us(measured, n, false) - typical_backward_us(predicted, n, false);
  else
    f->backward_extra_us = calibration.in_run.backward_extra_us;
  const double sync_extra_us =
      typical_backward_us(measured, n, true) - typical_backward_us(predicted, n, true) - f->backward_extra_us;
  const double mb = static_cast<double>(probe.stages.at(0).param_bytes) / 1e6;
  f->sync_backward_extra_us_per_mb = mb > 0 ? sync_extra_us / mb : 0.0;
}

// Field by field, the median of several probe runs' factors.
plan::InRunFactors median_factors(const std::vector<plan::InRunFactors>& runs) {
  plan::InRunFactors m = runs.front();
  auto field = [&](double plan::InRunFactors::*x) {
    std::vector<double> v;
    for (const auto& f : runs) v.push_back(f.*x);
    m.*x = timeline::median(v);
  };
  for (auto x : {&plan::InRunFactors::forward, &plan::InRunFactors::backward, &plan::InRunFactors::optimizer,
                 &plan::InRunFactors::forward_extra_us, &plan::InRunFactors::backward_extra_us,
                 &plan::InRunFactors::optimizer_extra_us, &plan::InRunFactors::allreduce,
                 &plan::InRunFactors::sync_backward_extra_us_per_mb, &plan::InRunFactors::send_extra_us,
                 &plan::InRunFactors::delivery_extra_us})
    field(x);
  if (runs.size() > 1) m.probe += ", median of " + std::to_string(runs.size()) + " runs";
  return m;
}

}  // namespace

ProbeResult in_run_factors(plan::Plan probe, const plan::Calibration& calibration, const timeline::Timeline& run) {
  plan::Calibration alone = calibration;
  alone.in_run = {};
  alone.in_run_data.reset();
  probe.scenario.hardware.calibration = alone;
  const timeline::Timeline predicted = sim::simulate(probe).timeline;
  // Over the probe run's undisturbed steps (timeline::undisturbed_steps), as compare measures a
  // run: the factors carry what a run adds to the costs alone, not a burst's slowdown. The first
  // step stays, as the warm-up the figures below leave out.
  const timeline::Timeline measured = timeline::undisturbed_only(run, /*keep_warmup=*/true);
  ProbeResult out;
  plan::InRunFactors& f = out.factors;
  const profiler::MessageTiming m = profiler::message_timing(measured, probe.scenario.parallel);
  if (!m.send_us.empty() && !calibration.send_call.empty())
    f.send_extra_us = trimmed_mean(m.send_us) - calibration.send_call.at(trimmed_mean(m.bytes));
  if (!m.delivery_us.empty() && calibration.p2p.bandwidth_gb_per_s > 0)
    f.delivery_extra_us = trimmed_mean(m.delivery_us) - calibration.p2p.us(trimmed_mean(m.bytes));
  // Every step's actions of each kind (the prediction's are alike from step to step).
  for (auto [kind, index, extra] : {std::tuple{schedule::ActionKind::F, kF, &plan::InRunFactors::forward_extra_us},
                                    std::tuple{schedule::ActionKind::B, kB, &plan::InRunFactors::backward_extra_us},
                                    std::tuple{schedule::ActionKind::OPTIM, kOptim, &plan::InRunFactors::optimizer_extra_us}}) {
    const auto alone = durations_us(predicted, kind), in_run = durations_us(measured, kind);
    if (alone.empty() || in_run.empty()) continue;
    const plan::InRunPoint means{std::accumulate(alone.begin(), alone.end(), 0.0) / alone.size(), trimmed_mean(in_run)};
    f.*extra = means.in_run_us - means.alone_us;
    out.means[index] = means;
    out.longest_alone_us[index] = *std::max_element(alone.begin(), alone.end());
  }
  if (probe.scenario.parallel.data > 1) {
    fit_sync_backward(probe, predicted, measured, calibration, &f);
    // The backwards the fit by size uses are the ones without all-reduces.
    const int n = probe.scenario.parallel.chunks * probe.scenario.parallel.grad_accumulation;
    if (n > 1) out.means[kB] = {typical_backward_us(predicted, n, false), typical_backward_us(measured, n, false)};
  }
  if (const plan::Time predicted_allreduce = allreduce_time(predicted); predicted_allreduce > plan::Time()) {
    const plan::Time measured_allreduce = allreduce_time(measured);
    if (measured_allreduce > plan::Time()) f.allreduce = measured_allreduce / predicted_allreduce;
  }
  f.probe = probe.scenario.name;
  return out;
}

ProbeResult median_result(const std::vector<ProbeResult>& repeats) {
  ProbeResult m;
  std::vector<plan::InRunFactors> factors;
  for (const auto& r : repeats) factors.push_back(r.factors);
  m.factors = median_factors(factors);
  for (int k = 0; k < kComputeKinds; ++k) {
    std::vector<double> alone, measured;
    for (const auto& r : repeats) alone.push_back(r.means[k].alone_us), measured.push_back(r.means[k].in_run_us);
    m.means[k] = {timeline::median(alone), timeline::median(measured)};
    m.longest_alone_us[k] = repeats.front().longest_alone_us[k];  // the prediction's: alike in every repeat
  }
  return m;
}

std::string in_run_words(double factor, double extra_us) {
  char buf[96];
  if (factor == 1) std::snprintf(buf, sizeof buf, "%+.0f us beyond its time alone", extra_us);
  else std::snprintf(buf, sizeof buf, "%.2fx its time alone %+.0f us", factor, extra_us);
  return buf;
}

plan::InRunFactors layout_factors(const ProbeResult& small, const ProbeResult* large) {
  plan::InRunFactors f = small.factors;
  auto fit = [&](ComputeKind k, double* factor, double* extra_us, double* probed_us) {
    const plan::InRunLine line = plan::fit_in_run_line(small.means[k], large ? &large->means[k] : nullptr);
    *factor = line.factor;
    if (line.bounded) {  // said in the profile, never passed off as measured
      static const char* names[] = {"forward", "backward", "optimizer"};
      char words[96];
      std::snprintf(words, sizeof words, "%s %.2f, the probes gave %.2f", names[k], line.factor, line.fitted);
      f.bounded += (f.bounded.empty() ? "" : "; ") + std::string(words);
    }
    *extra_us = line.extra_us;
    // The line holds where it was measured; a longer action is not slowed in proportion.
    *probed_us = large ? std::max(small.longest_alone_us[k], large->longest_alone_us[k]) : 0.0;
  };
  fit(kF, &f.forward, &f.forward_extra_us, &f.forward_probed_us);
  fit(kB, &f.backward, &f.backward_extra_us, &f.backward_probed_us);
  fit(kOptim, &f.optimizer, &f.optimizer_extra_us, &f.optimizer_probed_us);
  // The all-reduces' factor is a measured ratio, not a line: where the probe's all-reduces took
  // less than the least a profile accepts (they overlapped, or their calibrated cost alone came out
  // high), it is held there and said, so that calibrate never writes a profile it cannot read.
  if (f.allreduce < plan::kMinInRunFactor) {
    char words[96];
    std::snprintf(words, sizeof words, "allreduce %.2f, the probes gave %.3f", plan::kMinInRunFactor, f.allreduce);
    f.bounded += (f.bounded.empty() ? "" : "; ") + std::string(words);
    f.allreduce = plan::kMinInRunFactor;
  }
  if (large) f.probe += "; sizes from " + large->factors.probe;
  return f;
}

}  // namespace parallax::fit
