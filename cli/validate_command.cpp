#include "cli/validate_command.hpp"

#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>

#include "cli/calibrate_command.hpp"
#include "cli/output.hpp"
#include "cli/sim_report.hpp"
#include "plan/error.hpp"
#include "plan/scenario.hpp"
#include "profiler/compare.hpp"
#include "profiler/trace_reader.hpp"
#include "sim/simulator.hpp"
#include "tune/space.hpp"

extern char** environ;

namespace parallax::cli {

namespace fs = std::filesystem;
using nlohmann::json;

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

namespace {

struct Config {
  std::string scenario;
  std::vector<std::string> overrides;  ///< --set values beyond the common ones
  std::string sweep;                   ///< "" or "SCENARIO KEY": the group it is ranked in
  std::string label;
};

struct Outcome {
  double predicted_ms = 0;
  std::vector<double> measured_ms;  ///< one median per run, over every step after warm-up
  double measured_median = 0, spread = 0, error = 0;
  /// The same over the steps the host ran at the calibrated speed in (runs with enough of them).
  std::vector<double> at_speed_ms;
  double at_speed_median = 0, at_speed_error = 0;
  int steps_at_speed = 0, steps_probed = 0;
  std::vector<profiler::RankComparison> ranks;  ///< of the first run
};

std::vector<Config> configurations(const ValidateArgs& args) {
  std::vector<Config> out;
  for (const auto& s : args.scenarios) {
    const std::string name = fs::path(s).stem().string();
    if (args.sweeps.empty()) {
      out.push_back({s, {}, "", name});
      continue;
    }
    for (const auto& sweep : args.sweeps) {
      const auto eq = sweep.find('=');
      if (eq == std::string::npos || eq == 0 || eq + 1 == sweep.size())
        throw plan::InputError(plan::Location{"--sweep"}, "'" + sweep + "' is not KEY=V1,V2,...");
      const std::string key = sweep.substr(0, eq);
      for (const auto& v : tune::split_values(sweep.substr(eq + 1)))
        out.push_back({s, {key + "=" + v}, name + " " + key, name + " " + key + "=" + v});
    }
  }
  return out;
}

// Runs argv as a child with stdout and stderr into files; returns its exit code.
int run_child(const std::vector<std::string>& argv, const std::string& out, const std::string& err) {
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
  waitpid(pid, &status, 0);
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

// A configuration's plan with the run's step count, and its predicted timeline.
struct Prepared {
  std::vector<std::string> sets;
  plan::Timeline predicted;
  std::vector<std::string> unmeasured;  ///< layer signatures the profile has no measurement of
  std::string precision;
  double host_reference_us = 0;  ///< the profile's host_probe_us
};

Prepared prepare(const Config& c, const ValidateArgs& args, const std::vector<std::string>& common) {
  Prepared p;
  p.sets = common;
  p.sets.insert(p.sets.end(), c.overrides.begin(), c.overrides.end());
  p.sets.push_back("data.steps=" + std::to_string(args.steps));
  const plan::Plan plan = plan::resolve_plan(plan::load_scenario(c.scenario, p.sets));
  p.predicted = predicted_timeline(plan, sim::simulate(plan));
  p.precision = plan::name(plan.scenario.parallel.precision);
  if (const auto& cal = plan.scenario.hardware.calibration) {
    p.unmeasured = plan::unmeasured_signatures(*cal, plan.layers(), plan.scenario.parallel.precision);
    p.host_reference_us = cal->host_probe_us;
  }
  return p;
}

// One run of a configuration for real, compared with its prediction into `o`.
void run_once(const Config& c, const Prepared& p, const std::string& self, const fs::path& work, Outcome* o) {
  const std::string trace = (work / "measured.json").string();
  std::vector<std::string> argv = {self, "run", "-o", trace};
  if (!c.scenario.empty()) argv.push_back(c.scenario);  // none: the built-in default
  for (const auto& s : p.sets) argv.insert(argv.end(), {"--set", s});
  const int rc = run_child(argv, (work / "run.out").string(), (work / "run.err").string());
  if (rc != 0)
    throw std::runtime_error("the run of " + c.label + " failed (exit " + std::to_string(rc) + "):\n" +
                             tail_of((work / "run.err").string(), 8));
  const auto report = profiler::compare(p.predicted, profiler::read_trace(trace).timeline, p.host_reference_us);
  o->predicted_ms = report.predicted_step_ms;
  o->measured_ms.push_back(report.all_steps_ms.median);
  if (report.host_matched) o->at_speed_ms.push_back(report.measured_step_ms.median);
  o->steps_at_speed += report.host_steps_at_speed;
  o->steps_probed += report.host_probed_steps;
  if (o->ranks.empty()) o->ranks = report.ranks;
}

void summarise(Outcome* o) {
  const auto [low, high] = std::minmax_element(o->measured_ms.begin(), o->measured_ms.end());
  o->measured_median = profiler::median(o->measured_ms);
  o->spread = o->measured_median > 0 ? (*high - *low) / o->measured_median : 0;
  o->error = o->measured_median > 0 ? (o->predicted_ms - o->measured_median) / o->measured_median : 0;
  o->at_speed_median = profiler::median(o->at_speed_ms);
  o->at_speed_error = o->at_speed_median > 0 ? (o->predicted_ms - o->at_speed_median) / o->at_speed_median : 0;
}

// How many of the last run's steps the host ran at the calibrated speed in.
std::string host_words(const Prepared& p, const Outcome& o) {
  if (p.host_reference_us <= 0) return "";
  return "; host at the calibrated speed in " + std::to_string(o.steps_at_speed) + " of " +
         std::to_string(o.steps_probed) + " steps so far";
}

std::string at_speed_text(const Outcome& o) {
  const std::string share = o.steps_probed > 0 ? fmt("%.0f%%", 100.0 * o.steps_at_speed / o.steps_probed) : "-";
  if (o.at_speed_ms.empty()) return "       -  " + share;
  return fmt("%+7.1f%%", 100 * o.at_speed_error) + " " + share;
}

std::string bubbles_text(const Outcome& o) {
  std::string s;
  for (const auto& r : o.ranks)
    s += (s.empty() ? "" : "  ") + std::to_string(r.rank) + ": " + fmt("%.0f", 100 * r.predicted_bubble_fraction) +
         "/" + fmt("%.0f%%", 100 * r.measured_bubble_fraction);
  return s;
}

}  // namespace

Measurement measure(const std::string& self, const std::string& scenario, const std::vector<std::string>& sets, int steps) {
  ValidateArgs args;
  args.steps = steps;
  const Config c{scenario, {}, "", fs::path(scenario.empty() ? "default" : scenario).stem().string()};
  const Prepared p = prepare(c, args, sets);
  const fs::path work = fs::temp_directory_path() / ("parallax-measure-" + std::to_string(::getpid()));
  fs::create_directories(work);
  Outcome o;
  try {
    run_once(c, p, self, work, &o);
  } catch (...) {
    remove_tree(work.string());
    throw;
  }
  remove_tree(work.string());
  return {o.predicted_ms, o.measured_ms.front()};
}

int validate_command(const ValidateArgs& args, const std::string& self) {
  if (args.scenarios.empty()) throw plan::InputError(plan::Location{"SCENARIO"}, "give at least one scenario");
  if (args.steps < 3) throw plan::InputError(plan::Location{"--steps"}, "needs 3 steps or more (the first is a warm-up)");
  if (args.repeats < 1) throw plan::InputError(plan::Location{"--repeats"}, "needs 1 or more");
  const std::string profile = args.profile.empty() ? default_calibration_path() : args.profile;
  if (!fs::exists(profile))
    throw plan::InputError(plan::Location{profile},
                           "no calibrated profile here; run `parallax calibrate` first (or give one with --profile)");
  std::vector<std::string> common = args.sets;
  common.push_back("hardware=" + profile);
  const std::vector<Config> configs = configurations(args);
  // Every configuration is planned and predicted before anything runs: bad input exits 2 at once.
  std::vector<Prepared> prepared;
  for (const auto& c : configs) prepared.push_back(prepare(c, args, common));
  for (size_t i = 0; i < configs.size(); ++i) {
    const Prepared& p = prepared[i];
    if (p.unmeasured.empty()) continue;
    const std::string scenario = configs[i].scenario.empty() ? "" : configs[i].scenario + " ";
    std::cerr << "validate: warning: " << configs[i].label << ": " << p.unmeasured.size()
              << " layer signature(s) not in " << profile << " (" << p.unmeasured.front()
              << (p.unmeasured.size() > 1 ? ", ..." : "")
              << "), costed from the device's peak instead; `parallax calibrate --precision " << p.precision
              << " " << scenario << "-o PROFILE` measures them\n";
  }
  const fs::path work = fs::temp_directory_path() / ("parallax-validate-" + std::to_string(::getpid()));
  fs::create_directories(work);
  std::cerr << "validate: " << configs.size() << " configuration(s) with profile " << profile << ", " << args.steps
            << " steps x " << args.repeats << " run(s) each\n";
  // Repeats go round the configurations rather than one after another, so that the machine's
  // drift over the minutes spreads over all of them instead of biasing some.
  std::vector<Outcome> outcomes(configs.size());
  try {
    for (int r = 0; r < args.repeats; ++r)
      for (size_t i = 0; i < configs.size(); ++i) {
        run_once(configs[i], prepared[i], self, work, &outcomes[i]);
        const Outcome& o = outcomes[i];
        std::cerr << "validate: [" << r * configs.size() + i + 1 << "/" << configs.size() * args.repeats << "] "
                  << configs[i].label << ": predicted " << fmt("%.3f", o.predicted_ms) << " ms, measured "
                  << fmt("%.3f", o.measured_ms.back()) << " ms ("
                  << fmt("%+.1f%%", 100 * (o.predicted_ms - o.measured_ms.back()) / o.measured_ms.back()) << ")"
                  << host_words(prepared[i], o) << "\n";
      }
    for (auto& o : outcomes) summarise(&o);
  } catch (...) {
    remove_tree(work.string());
    throw;
  }
  remove_tree(work.string());

  double sum = 0, worst = 0;
  std::string worst_label;
  for (size_t i = 0; i < outcomes.size(); ++i) {
    sum += std::abs(outcomes[i].error);
    if (std::abs(outcomes[i].error) >= std::abs(worst)) {
      worst = outcomes[i].error;
      worst_label = configs[i].label;
    }
  }
  const double mape = sum / static_cast<double>(outcomes.size());
  // The same over the configurations measured at the calibrated host speed.
  double at_speed_sum = 0, at_speed_worst = 0;
  size_t at_speed_n = 0;
  for (const auto& o : outcomes)
    if (!o.at_speed_ms.empty()) {
      ++at_speed_n;
      at_speed_sum += std::abs(o.at_speed_error);
      if (std::abs(o.at_speed_error) >= std::abs(at_speed_worst)) at_speed_worst = o.at_speed_error;
    }
  const double at_speed_mape = at_speed_n ? at_speed_sum / static_cast<double>(at_speed_n) : 0;
  std::map<std::string, std::pair<std::vector<double>, std::vector<double>>> sweeps;
  for (size_t i = 0; i < outcomes.size(); ++i)
    if (!configs[i].sweep.empty()) {
      sweeps[configs[i].sweep].first.push_back(outcomes[i].predicted_ms);
      sweeps[configs[i].sweep].second.push_back(outcomes[i].measured_median);
    }

  if (args.json) {
    json j;
    j["profile"] = profile;
    j["steps"] = args.steps;
    j["repeats"] = args.repeats;
    j["configurations"] = json::array();
    for (size_t i = 0; i < outcomes.size(); ++i) {
      const Outcome& o = outcomes[i];
      json ranks = json::array();
      for (const auto& r : o.ranks)
        ranks.push_back({{"rank", r.rank},
                         {"predicted_bubble_fraction", r.predicted_bubble_fraction},
                         {"measured_bubble_fraction", r.measured_bubble_fraction}});
      j["configurations"].push_back({{"scenario", configs[i].scenario},
                                     {"overrides", configs[i].overrides},
                                     {"predicted_step_ms", o.predicted_ms},
                                     {"measured_step_ms", o.measured_median},
                                     {"measured_runs_ms", o.measured_ms},
                                     {"spread", o.spread},
                                     {"error", o.error},
                                     {"measured_at_speed_runs_ms", o.at_speed_ms},
                                     {"measured_at_speed_ms", o.at_speed_median},
                                     {"error_at_speed", o.at_speed_ms.empty() ? json(nullptr) : json(o.at_speed_error)},
                                     {"steps_at_speed", o.steps_at_speed},
                                     {"steps_probed", o.steps_probed},
                                     {"ranks", ranks}});
    }
    j["mape"] = mape;
    j["worst_error"] = worst;
    j["host_reference_us"] = prepared.empty() ? 0.0 : prepared.front().host_reference_us;
    j["configurations_at_speed"] = at_speed_n;
    j["mape_at_speed"] = at_speed_mape;
    j["worst_error_at_speed"] = at_speed_worst;
    j["sweeps"] = json::array();
    for (const auto& [name, v] : sweeps)
      j["sweeps"].push_back({{"sweep", name}, {"configurations", v.first.size()}, {"kendall_tau", kendall_tau(v.first, v.second)}});
    std::cout << j.dump(2) << "\n";
    return 0;
  }
  std::printf("%-52s %10s %10s %8s %7s %18s  %s\n", "configuration", "predicted", "measured", "error", "spread",
              "at speed: error, of", "bubble per rank, predicted/measured");
  for (size_t i = 0; i < outcomes.size(); ++i) {
    const Outcome& o = outcomes[i];
    std::printf("%-52s %7.3f ms %7.3f ms %+7.1f%% %6.1f%% %18s  %s\n", configs[i].label.c_str(), o.predicted_ms,
                o.measured_median, 100 * o.error, 100 * o.spread, at_speed_text(o).c_str(), bubbles_text(o).c_str());
  }
  std::printf("\nmean absolute error %.1f%% over %zu configurations; worst %+.1f%% (%s)\n", 100 * mape, outcomes.size(),
              100 * worst, worst_label.c_str());
  if (at_speed_n > 0)
    std::printf("at the calibrated host speed: mean absolute error %.1f%% over the %zu configurations with a run of %d "
                "or more such steps (and %.0f%% of its steps or more); worst %+.1f%%\n",
                100 * at_speed_mape, at_speed_n, profiler::kMinStepsAtSpeed, 100 * profiler::kMinShareAtSpeed,
                100 * at_speed_worst);
  for (const auto& [name, v] : sweeps)
    std::printf("Kendall tau %+.2f over the %zu configurations of sweep %s\n", kendall_tau(v.first, v.second),
                v.first.size(), name.c_str());
  return 0;
}

}  // namespace parallax::cli
