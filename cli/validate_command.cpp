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
#include "fit/measure.hpp"
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

namespace {

using fit::Configuration;
using fit::Outcome;
using fit::Prepared;

std::vector<Configuration> configurations(const ValidateArgs& args) {
  std::vector<Configuration> out;
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
  const std::vector<Configuration> configs = configurations(args);
  // Every configuration is planned and predicted before anything runs: bad input exits 2 at once.
  std::vector<Prepared> prepared;
  for (const auto& c : configs) prepared.push_back(fit::prepare(c, args.steps, common));
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
        fit::run_once(configs[i], prepared[i], self, work, &outcomes[i]);
        const Outcome& o = outcomes[i];
        std::cerr << "validate: [" << r * configs.size() + i + 1 << "/" << configs.size() * args.repeats << "] "
                  << configs[i].label << ": predicted " << fmt("%.3f", o.predicted_ms) << " ms, measured "
                  << fmt("%.3f", o.measured_ms.back()) << " ms ("
                  << fmt("%+.1f%%", 100 * (o.predicted_ms - o.measured_ms.back()) / o.measured_ms.back()) << ")"
                  << host_words(prepared[i], o) << "\n";
      }
    for (auto& o : outcomes) fit::summarise(&o);
  } catch (...) {
    fit::remove_tree(work.string());
    throw;
  }
  fit::remove_tree(work.string());

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
  // Per sweep, each configuration's prediction, measured median and range over its runs.
  struct Sweep {
    std::vector<double> predicted, measured, low, high;
  };
  std::map<std::string, Sweep> sweeps;
  for (size_t i = 0; i < outcomes.size(); ++i)
    if (!configs[i].sweep.empty()) {
      const Outcome& o = outcomes[i];
      Sweep& sw = sweeps[configs[i].sweep];
      sw.predicted.push_back(o.predicted_ms);
      sw.measured.push_back(o.measured_median);
      sw.low.push_back(*std::min_element(o.measured_ms.begin(), o.measured_ms.end()));
      sw.high.push_back(*std::max_element(o.measured_ms.begin(), o.measured_ms.end()));
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
    for (const auto& [name, v] : sweeps) {
      const fit::ResolvedTau resolved = fit::kendall_tau_resolved(v.predicted, v.low, v.high);
      j["sweeps"].push_back({{"sweep", name},
                             {"configurations", v.predicted.size()},
                             {"kendall_tau", fit::kendall_tau(v.predicted, v.measured)},
                             {"kendall_tau_resolved", resolved.tau},
                             {"resolved_pairs", resolved.resolved},
                             {"pairs", resolved.pairs}});
    }
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
  for (const auto& [name, v] : sweeps) {
    const fit::ResolvedTau resolved = fit::kendall_tau_resolved(v.predicted, v.low, v.high);
    std::printf("Kendall tau %+.2f over the %zu configurations of sweep %s; %+.2f over the %zu of %zu pairs whose "
                "measured ranges over the runs do not overlap\n",
                fit::kendall_tau(v.predicted, v.measured), v.predicted.size(), name.c_str(), resolved.tau,
                resolved.resolved, resolved.pairs);
  }
  return 0;
}

}  // namespace parallax::cli
