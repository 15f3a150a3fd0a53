#include "fit/measure.hpp"

#include <fcntl.h>
#include <ftw.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <thread>

#include "plan/plan.hpp"
#include "plan/scenario.hpp"
#include "sim/simulator.hpp"
#include "timeline/metrics.hpp"
#include "timeline/trace_reader.hpp"

extern char** environ;

namespace parallax::fit {

namespace fs = std::filesystem;

double kendall_tau(const std::vector<double>& a, const std::vector<double>& b) {
  const size_t n = std::min(a.size(), b.size());
  if (n < 2) return 1.0;
  double score = 0;
  for (size_t i = 0; i < n; ++i)
    for (size_t j = i + 1; j < n; ++j) {
      const double s = (a[i] - a[j]) * (b[i] - b[j]);
      score += s > 0 ? 1 : s < 0 ? -1 : 0;
    }
  return score / (static_cast<double>(n) * static_cast<double>(n - 1) / 2);
}

ResolvedTau kendall_tau_resolved(const std::vector<double>& predicted, const std::vector<double>& measured_low,
                                 const std::vector<double>& measured_high) {
  ResolvedTau r;
  const size_t n = std::min({predicted.size(), measured_low.size(), measured_high.size()});
  double score = 0;
  for (size_t i = 0; i < n; ++i)
    for (size_t j = i + 1; j < n; ++j) {
      ++r.pairs;
      const bool i_faster = measured_high[i] < measured_low[j], j_faster = measured_high[j] < measured_low[i];
      if (!i_faster && !j_faster) continue;  // the ranges overlap: the measurement cannot order them
      ++r.resolved;
      const double p = predicted[i] - predicted[j];
      if (p != 0) score += (p < 0) == i_faster ? 1 : -1;
    }
  if (r.resolved > 0) r.tau = score / static_cast<double>(r.resolved);
  return r;
}

int run_child(const std::vector<std::string>& argv, const std::string& out, const std::string& err,
              const std::atomic<bool>* cancel) {
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 1, out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_addopen(&actions, 2, err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  std::vector<char*> cargv;
  for (const auto& a : argv) cargv.push_back(const_cast<char*>(a.c_str()));
  cargv.push_back(nullptr);
  pid_t pid = 0;
  const int rc = posix_spawn(&pid, argv[0].c_str(), &actions, nullptr, cargv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  if (rc != 0) return 127;
  int status = 0;
  if (!cancel) {
    waitpid(pid, &status, 0);
  } else {
    // Polled, so that a cancel ends the run within a tick: SIGTERM ends `parallax run`, whose
    // ranks die with it (exec/launcher: PR_SET_PDEATHSIG).
    for (;;) {
      const pid_t done = waitpid(pid, &status, WNOHANG);
      if (done == pid || (done < 0 && errno != EINTR)) break;
      if (cancel->load()) {
        kill(pid, SIGTERM);
        waitpid(pid, &status, 0);
        throw Cancelled();
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

std::string tail_of(const std::string& path, size_t lines) {
  std::ifstream in(path);
  std::vector<std::string> all;
  for (std::string l; std::getline(in, l);) all.push_back(l);
  std::string out;
  for (size_t i = all.size() > lines ? all.size() - lines : 0; i < all.size(); ++i) out += "  " + all[i] + "\n";
  return out;
}

Prepared prepare(const Configuration& c, int steps, const std::vector<std::string>& common) {
  if (steps <= 0) {  // as many as the predicted step time asks for
    const Prepared probe = prepare(c, 3, common);
    const auto first = timeline::steps_of(probe.predicted);
    return prepare(c, steps_for(first.empty() ? plan::Time() : timeline::step_times(probe.predicted, first.front()).step_time),
                   common);
  }
  Prepared p;
  p.steps = steps;
  p.sets = common;
  p.sets.insert(p.sets.end(), c.overrides.begin(), c.overrides.end());
  p.sets.push_back("data.steps=" + std::to_string(steps));
  const plan::Plan plan = plan::resolve_plan(plan::load_scenario(c.scenario, p.sets));
  p.predicted = sim::simulate(plan).timeline;
  p.precision = plan::name(plan.scenario.parallel.precision);
  if (const auto& cal = plan.scenario.hardware.calibration) {
    p.calibrated = true;
    p.unmeasured = plan::unmeasured_signatures(*cal, plan.layers(), plan.scenario.parallel.precision);
  }
  return p;
}

// One run of a configuration for real, compared with its prediction into `o`.
void run_once(const Configuration& c, const Prepared& p, const std::string& self, const fs::path& work, Outcome* o,
              const std::atomic<bool>* cancel) {
  const std::string trace = (work / "measured.json").string();
  std::vector<std::string> argv = {self, "run", "-o", trace};
  if (!c.scenario.empty()) argv.push_back(c.scenario);  // none: the built-in default
  for (const auto& s : p.sets) argv.insert(argv.end(), {"--set", s});
  const int rc = run_child(argv, (work / "run.out").string(), (work / "run.err").string(), cancel);
  if (rc != 0)
    throw std::runtime_error("the run of " + c.label + " failed (exit " + std::to_string(rc) + "):\n" +
                             tail_of((work / "run.err").string(), 8));
  const auto report = timeline::compare(p.predicted, timeline::read_trace(trace).timeline);
  o->predicted = report.predicted_step;
  o->runs.push_back(report.measured_step);
  if (o->ranks.empty()) o->ranks = report.ranks;
}

std::vector<plan::Time> Outcome::undisturbed_runs() const {
  std::vector<plan::Time> v;
  for (const auto& r : runs) v.push_back(r.undisturbed);
  return v;
}

void summarise(Outcome* o) {
  if (o->runs.empty()) return;
  const std::vector<plan::Time> undisturbed = o->undisturbed_runs();
  std::vector<plan::Time> medians;
  double steps = 0, disturbed = 0;
  for (const auto& r : o->runs) {
    medians.push_back(r.median);
    steps += r.steps;
    disturbed += r.disturbed_share * r.steps;
  }
  const auto relative = [](plan::Time v, plan::Time to) { return to > plan::Time() ? v / to : 0.0; };
  const auto [low, high] = std::minmax_element(undisturbed.begin(), undisturbed.end());
  o->measured = timeline::median(undisturbed);
  o->low = *low;
  o->high = *high;
  o->spread = relative(*high - *low, o->measured);
  o->error = relative(o->predicted - o->measured, o->measured);
  const auto [mlow, mhigh] = std::minmax_element(medians.begin(), medians.end());
  o->median = timeline::median(medians);
  o->median_spread = relative(*mhigh - *mlow, o->median);
  o->median_error = relative(o->predicted - o->median, o->median);
  o->disturbed_share = steps > 0 ? disturbed / steps : 0.0;
}

int steps_for(plan::Time predicted_step) {
  const double for_time =
      predicted_step > plan::Time() ? std::ceil(plan::Time::seconds(kMinMeasuredSeconds) / predicted_step) : 0;
  return 1 + std::clamp(static_cast<int>(for_time), timeline::kMinStatisticSteps, kMaxAutoSteps);
}

Measurement measure(const std::string& self, const std::string& scenario, const std::vector<std::string>& sets, int steps,
                    const std::atomic<bool>* cancel) {
  const Configuration c{scenario, {}, "", fs::path(scenario.empty() ? "default" : scenario).stem().string()};
  const Prepared p = prepare(c, steps, sets);
  const fs::path work = fs::temp_directory_path() / ("parallax-measure-" + std::to_string(::getpid()));
  fs::create_directories(work);
  Outcome o;
  try {
    run_once(c, p, self, work, &o, cancel);
  } catch (...) {
    remove_tree(work.string());
    throw;
  }
  remove_tree(work.string());
  return {o.predicted, o.runs.front()};
}

void remove_tree(const std::string& path) {
  // Depth first, not following links: files and links first, each folder after its contents.
  auto remove_one = [](const char* p, const struct stat*, int, struct FTW*) {
    (void)std::remove(p);  // a file that cannot go stays; the walk goes on
    return 0;
  };
  nftw(path.c_str(), remove_one, 16, FTW_DEPTH | FTW_PHYS);
}

}  // namespace parallax::fit
