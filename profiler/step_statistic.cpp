#include "profiler/step_statistic.hpp"

#include <algorithm>
#include <cmath>

namespace parallax::profiler {

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

StepStatistic step_statistic(const std::vector<double>& step_ms) {
  StepStatistic s;
  if (step_ms.empty()) return s;
  s.steps = static_cast<int>(step_ms.size());
  s.undisturbed_ms = undisturbed(step_ms);
  s.median_ms = median(step_ms);
  const auto [low, high] = std::minmax_element(step_ms.begin(), step_ms.end());
  s.min_ms = *low;
  s.max_ms = *high;
  const auto slow = std::count_if(step_ms.begin(), step_ms.end(), [&](double t) { return s.disturbed(t); });
  s.disturbed_share = static_cast<double>(slow) / static_cast<double>(s.steps);
  return s;
}

}  // namespace parallax::profiler
