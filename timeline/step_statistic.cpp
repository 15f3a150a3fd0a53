#include "timeline/step_statistic.hpp"

#include <algorithm>
#include <cmath>

namespace parallax::timeline {

double quantile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const double at = std::clamp(q, 0.0, 1.0) * static_cast<double>(v.size() - 1);
  const auto below = static_cast<size_t>(std::floor(at));
  const size_t above = std::min(below + 1, v.size() - 1);
  return v[below] + (at - static_cast<double>(below)) * (v[above] - v[below]);
}

double undisturbed(std::vector<double> v) { return quantile(std::move(v), kUndisturbedQuantile); }

double median(std::vector<double> v) { return quantile(std::move(v), 0.5); }

plan::Time quantile(const std::vector<plan::Time>& v, double q) {
  std::vector<double> ns;
  for (plan::Time t : v) ns.push_back(static_cast<double>(t.count_ns()));
  return plan::Time::ns(std::llround(quantile(std::move(ns), q)));
}

plan::Time undisturbed(const std::vector<plan::Time>& v) { return quantile(v, kUndisturbedQuantile); }

plan::Time median(const std::vector<plan::Time>& v) { return quantile(v, 0.5); }

StepStatistic step_statistic(const std::vector<plan::Time>& steps) {
  StepStatistic s;
  if (steps.empty()) return s;
  s.steps = static_cast<int>(steps.size());
  s.undisturbed = undisturbed(steps);
  s.median = median(steps);
  const auto [low, high] = std::minmax_element(steps.begin(), steps.end());
  s.min = *low;
  s.max = *high;
  const auto slow = std::count_if(steps.begin(), steps.end(), [&](plan::Time t) { return s.disturbed(t); });
  s.disturbed_share = static_cast<double>(slow) / static_cast<double>(s.steps);
  return s;
}

std::vector<plan::Time> MeasuredSteps::step_times() const {
  std::vector<plan::Time> out;
  for (const StepTimes& t : times) out.push_back(t.step_time);
  return out;
}

MeasuredSteps steps_after_warmup(const Timeline& measured) {
  MeasuredSteps out;
  out.steps = steps_of(measured);
  if (out.steps.size() > 1 && out.steps.front() == 0) out.steps.erase(out.steps.begin());
  for (int s : out.steps) out.times.push_back(step_times(measured, s));
  return out;
}

StepStatistic measured_step(const Timeline& measured) { return step_statistic(steps_after_warmup(measured).step_times()); }

double relative_error(plan::Time predicted, plan::Time measured) {
  return measured > plan::Time() ? predicted / measured - 1 : 0.0;
}

std::string few_steps_warning(int steps) {
  if (steps <= 0 || steps >= kMinStatisticSteps) return "";
  return "few steps: this run has " + std::to_string(steps) + " after the warm-up; the statistic wants " +
         std::to_string(kMinStatisticSteps) + " or more";
}

}  // namespace parallax::timeline
