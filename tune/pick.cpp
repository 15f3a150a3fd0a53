#include "tune/pick.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <exception>
#include <map>
#include <thread>

#include "sim/metrics.hpp"
#include "sim/simulator.hpp"

namespace parallax::tune {
namespace {

std::string percent(double fraction) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.0f%%", 100 * fraction);
  return buf;
}

// The critical path's time by what it is made of: compute per stage and kind, point-to-point,
// all-reduce; its three largest parts.
std::string critical_path_text(const sim::SimRun& run, const sim::Metrics& m) {
  std::map<std::string, double> parts;
  double total = 0;
  for (int32_t i : m.critical_path) {
    const auto& e = run.timeline.events[i];
    const double ms = (e.end - e.start).to_ms();
    total += ms;
    const std::string stage = "stage " + std::to_string(e.action.stage);
    std::string what;
    switch (e.action.kind) {
      case schedule::ActionKind::F: what = stage + " forward"; break;
      case schedule::ActionKind::B: what = stage + " backward"; break;
      // A split backward's halves (zero-bubble and DualPipe schedules) and DualPipe's overlapped pair.
      case schedule::ActionKind::I: what = stage + " input gradients"; break;
      case schedule::ActionKind::W: what = stage + " weight gradients"; break;
      case schedule::ActionKind::OVERLAP_F_B: what = stage + " forward and backward overlapped"; break;
      case schedule::ActionKind::OPTIM: what = "optimizer"; break;
      case schedule::ActionKind::ALLREDUCE: what = "all-reduce"; break;
      case schedule::ActionKind::ALL_TO_ALL: what = "all-to-all"; break;
      case schedule::ActionKind::ALL_GATHER: what = "all-gather"; break;
      case schedule::ActionKind::SEND_F:
      case schedule::ActionKind::RECV_F:
      case schedule::ActionKind::SEND_B:
      case schedule::ActionKind::RECV_B: what = "point-to-point"; break;
    }
    parts[what] += ms;
  }
  if (total <= 0) return "";
  std::vector<std::pair<double, std::string>> sorted;
  for (const auto& [what, ms] : parts) sorted.emplace_back(ms, what);
  std::sort(sorted.rbegin(), sorted.rend());
  std::string s;
  for (size_t i = 0; i < sorted.size() && i < 3; ++i) s += (i ? ", " : "") + sorted[i].second + " " + percent(sorted[i].first / total);
  return s;
}

}  // namespace

Detail detail_of(Evaluator& evaluator, const plan::Settings& config) {
  const plan::Plan p = evaluator.plan_of(config);
  sim::SimOptions o;
  o.record_link_samples = false;
  const sim::SimRun run = sim::simulate(p, o);
  const sim::Metrics m = sim::compute_metrics(p, run);
  Detail d;
  d.bubble = m.bubble_fraction;
  d.imbalance = m.imbalance_fraction;
  for (const auto& r : m.ranks) d.exposed = std::max(d.exposed, r.exposed_comm);
  d.critical_path = critical_path_text(run, m);
  return d;
}

std::vector<Detail> ranked_details(Evaluator& evaluator, const SearchResult& result, int threads,
                                   const std::function<void(size_t done)>& progress) {
  std::vector<Detail> out(result.ranked.size());
  std::vector<std::exception_ptr> failed(out.size());
  const int n = threads > 0 ? threads : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  parallel_for(
      out.size(), std::min<int>(n, static_cast<int>(std::max<size_t>(1, out.size()))),
      [&](size_t i, int) {
        try {
          out[i] = detail_of(evaluator, result.ranked[i].config);
        } catch (...) {
          failed[i] = std::current_exception();
        }
      },
      [] { return false; }, [&](size_t done) { if (progress) progress(done); });
  for (const auto& f : failed)
    if (f) std::rethrow_exception(f);
  return out;
}

Pick pick(Evaluator& evaluator, const SearchResult& result, const Evaluation* measured_best,
          const std::vector<Detail>& details) {
  Pick p;
  p.best = measured_best ? measured_best : &result.ranked.front();
  const auto ranked = std::find_if(result.ranked.begin(), result.ranked.end(),
                                   [&](const Evaluation& e) { return e.config == p.best->config; });
  p.detail = ranked != result.ranked.end() ? details[ranked - result.ranked.begin()] : detail_of(evaluator, p.best->config);
  p.given = detail_of(evaluator, evaluator.given());
  p.vs_given = result.baseline.step / p.best->step;
  p.vs_defaults = result.defaults.simulated() ? result.defaults.step / p.best->step : std::nan("");
  const auto bubble = [](const Detail& d) { return percent(d.bubble) + (d.imbalance > 0.005 ? ", imbalance " + percent(d.imbalance) + " of it" : ""); };
  p.why = "bubble " + bubble(p.detail) + " (as given " + bubble(p.given) + "), exposed communication " +
          plan::duration_text(p.detail.exposed) + " (as given " + plan::duration_text(p.given.exposed) + "); its critical path: " +
          p.detail.critical_path;
  return p;
}

}  // namespace parallax::tune
