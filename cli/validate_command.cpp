#include "cli/validate_command.hpp"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <nlohmann/json.hpp>

#include "cli/calibrate_command.hpp"
#include "cli/output.hpp"
#include "cli/run_command.hpp"
#include "fit/validation.hpp"
#include "plan/error.hpp"
#include "timeline/step_statistic.hpp"

namespace parallax::cli {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

using fit::Configuration;
using fit::Outcome;
using fit::Prepared;

std::string bubbles_text(const Outcome& o) {
  std::string s;
  for (const auto& r : o.ranks)
    s += (s.empty() ? "" : "  ") + std::to_string(r.rank) + ": " + fmt("%.0f", 100 * r.predicted_bubble_fraction) +
         "/" + fmt("%.0f%%", 100 * r.measured_bubble_fraction);
  return s;
}

void warn_unmeasured(const std::vector<Configuration>& configs, const std::vector<Prepared>& prepared,
                     const std::string& profile) {
  // A profile with no calibration at all (a shipped one) measured nothing: one warning says so.
  if (std::any_of(prepared.begin(), prepared.end(), [](const Prepared& p) { return !p.calibrated; })) {
    std::cerr << "validate: warning: " << profile << " holds no calibration (parallax calibrate writes one): every layer is "
              << "costed from the device's peak figures, so the errors below say how far those are off, not the simulator; "
              << "`parallax calibrate -o PROFILE` measures this machine\n";
    return;
  }
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
}

// One line per run on stderr: the run's statistic, its median and how much of it was disturbed.
void print_progress(size_t run, size_t runs, const Configuration& c, const Outcome& o) {
  const timeline::StepStatistic& s = o.runs.back();
  std::cerr << "validate: [" << run << "/" << runs << "] " << c.label << ": predicted " << fmt("%.3f", o.predicted.to_ms())
            << " ms, measured " << fmt("%.3f", s.undisturbed.to_ms()) << " ms undisturbed ("
            << fmt("%+.1f%%", 100 * timeline::relative_error(o.predicted, s.undisturbed)) << "), median "
            << fmt("%.3f", s.median.to_ms()) << " ms, " << fmt("%.0f%%", 100 * s.disturbed_share) << " of " << s.steps
            << " steps disturbed\n";
  if (s.steps < timeline::kMinStatisticSteps)
    std::cerr << "validate: warning: " << s.steps << " steps after warm-up; the statistic wants "
              << timeline::kMinStatisticSteps << " or more (leave --steps out to get enough)\n";
}

json configuration_json(const Configuration& c, const Prepared& p, const Outcome& o) {
  json ranks = json::array(), runs = json::array();
  for (plan::Time t : o.undisturbed_runs()) runs.push_back(t.to_ms());
  for (const auto& r : o.ranks)
    ranks.push_back({{"rank", r.rank},
                     {"predicted_bubble_fraction", r.predicted_bubble_fraction},
                     {"measured_bubble_fraction", r.measured_bubble_fraction}});
  return {{"scenario", c.scenario},
          {"overrides", c.overrides},
          {"sets", p.sets},
          {"steps", p.steps},
          {"predicted_ms", o.predicted.to_ms()},
          {"measured_ms", o.measured.to_ms()},
          {"statistic", timeline::kStatisticName},
          {"error", o.error},
          {"spread", o.undisturbed_runs().size() > 1 ? json(o.spread) : json(nullptr)},  // one run: not measured
          {"runs_ms", runs},
          {"median_ms", o.median.to_ms()},
          {"median_error", o.median_error},
          {"median_spread", o.undisturbed_runs().size() > 1 ? json(o.median_spread) : json(nullptr)},
          {"disturbed_share", o.disturbed_share},
          {"ranks", ranks}};
}

void print_json(const ValidateArgs& args, const std::string& profile, const std::vector<Configuration>& configs,
                const std::vector<Prepared>& prepared, const std::vector<Outcome>& outcomes,
                const fit::ValidationSummary& s) {
  json j;
  j["profile"] = profile;
  j["statistic"] = timeline::kStatisticName;
  j["repeats"] = args.repeats;
  j["configurations"] = json::array();
  for (size_t i = 0; i < outcomes.size(); ++i) j["configurations"].push_back(configuration_json(configs[i], prepared[i], outcomes[i]));
  j["mape"] = s.mean_abs_error;
  j["mean_signed_error"] = s.mean_signed_error;
  j["worst_error"] = s.worst_error;
  j["median_spread_of_configurations"] = args.repeats > 1 ? json(s.spread_median) : json(nullptr);
  j["mape_against_median"] = s.median_mean_abs_error;
  j["sweeps"] = json::array();
  for (const auto& [name, v] : s.sweeps)
    j["sweeps"].push_back({{"sweep", name},
                           {"configurations", v.predicted.size()},
                           // null where there is nothing to rank: one configuration, or no pair the runs resolve
                           {"kendall_tau", v.predicted.size() < 2 ? json(nullptr) : json(v.tau)},
                           {"kendall_tau_resolved", v.resolved.resolved == 0 ? json(nullptr) : json(v.resolved.tau)},
                           {"resolved_pairs", v.resolved.resolved},
                           {"pairs", v.resolved.pairs}});
  std::cout << j.dump(2) << "\n";
}

// A spread over the runs in percent, or a dash where one run measured none.
std::string spread_text(double spread, bool measured) { return measured ? fmt("%6.1f%%", 100 * spread) : std::string("      -"); }

void print_table(const std::vector<Configuration>& configs, const std::vector<Outcome>& outcomes,
                 const fit::ValidationSummary& s, int repeats) {
  std::printf("measured: the %s of each run, the median over runs; spread: (max - min) / measured over the runs\n\n",
              timeline::kStatisticName);
  std::printf("%-52s %10s %10s %8s %7s   %-27s %9s  %s\n", "configuration", "predicted", "measured", "error", "spread",
              "median: ms, error, spread", "disturbed", "bubble per rank, predicted/measured");
  for (size_t i = 0; i < outcomes.size(); ++i) {
    const Outcome& o = outcomes[i];
    const bool several = o.undisturbed_runs().size() > 1;
    std::printf("%-52s %7.3f ms %7.3f ms %+7.1f%% %s   %7.3f ms %+7.1f%% %s   %8.0f%%  %s\n", configs[i].label.c_str(),
                o.predicted.to_ms(), o.measured.to_ms(), 100 * o.error, spread_text(o.spread, several).c_str(), o.median.to_ms(),
                100 * o.median_error, spread_text(o.median_spread, several).c_str(), 100 * o.disturbed_share, bubbles_text(o).c_str());
  }
  std::printf("\nagainst the %s: mean absolute error %.1f%% over %zu configurations, mean signed %+.1f%%, worst "
              "%+.1f%% (%s); %s\n",
              timeline::kStatisticName, 100 * s.mean_abs_error, outcomes.size(), 100 * s.mean_signed_error,
              100 * s.worst_error, configs[s.worst].label.c_str(),
              repeats > 1 ? fmt("spread over the runs %.1f%% (median over configurations)", 100 * s.spread_median).c_str()
                          : "spread over the runs not measured (one run each: --repeats 2 or more measures it)");
  std::printf("against the median step: mean absolute error %.1f%%\n", 100 * s.median_mean_abs_error);
  for (const auto& [name, v] : s.sweeps) {
    if (v.predicted.size() < 2) {
      std::printf("sweep %s: one configuration, nothing to rank\n", name.c_str());
      continue;
    }
    std::printf("Kendall tau %+.2f over the %zu configurations of sweep %s; ", v.tau, v.predicted.size(), name.c_str());
    if (v.resolved.resolved == 0)
      std::printf("none of its %zu pairs has measured ranges over the runs that do not overlap\n", v.resolved.pairs);
    else
      std::printf("%+.2f over the %zu of %zu pairs whose measured ranges over the runs do not overlap\n", v.resolved.tau,
                  v.resolved.resolved, v.resolved.pairs);
  }
}

}  // namespace

int validate_command(const ValidateArgs& args, const std::string& self) {
  if (args.scenarios.empty()) throw plan::InputError(plan::Location{"SCENARIO"}, "give at least one scenario");
  if (args.steps != 0 && args.steps < 3)
    throw plan::InputError(plan::Location{"--steps"}, "needs 3 steps or more (the first is a warm-up)");
  if (args.repeats < 1) throw plan::InputError(plan::Location{"--repeats"}, "needs 1 or more");
  // The scenarios first: a missing one is the first thing to say, whatever else is missing.
  for (const auto& scenario : args.scenarios)
    if (!fs::is_regular_file(scenario)) throw plan::InputError(plan::Location{scenario}, "no scenario file here (does it exist?)");
  const std::string profile = args.profile.empty() ? default_calibration_path() : args.profile;
  if (!fs::exists(profile))
    throw plan::InputError(plan::Location{args.profile.empty() ? profile : "--profile " + profile},
                           args.profile.empty() ? "no calibrated profile here; run `parallax calibrate` first (or give one with --profile)"
                                                : "no such profile (parallax calibrate writes one)");
  for (const auto& set : args.sets)
    if (set.rfind("hardware=", 0) == 0 || set.rfind("hardware.", 0) == 0)
      throw plan::InputError(plan::Location{"--set " + set}, "validate predicts with the calibrated profile it runs against (--profile); "
                                                             "give the profile there");
  std::vector<std::string> common = args.sets;
  common.push_back("hardware=" + profile);
  const std::vector<Configuration> configs = fit::configurations(args.scenarios, args.sweeps);
  // Every configuration is planned and predicted before anything runs: bad input exits 2 at once.
  std::vector<Prepared> prepared;
  for (const auto& c : configs) {
    try {
      prepared.push_back(fit::prepare(c, args.steps, common));
      check_runs_here(plan::load_scenario(c.scenario, prepared.back().sets),
                      "to validate on this machine's CPU, give --profile a profile `parallax calibrate` wrote here");
    } catch (const plan::InputError& e) {
      // A sweep's value reaches the scenario as a --set of its own: name the --sweep the user wrote.
      for (const auto& set : c.overrides)
        if (e.where().file == "--set " + set) throw plan::InputError(plan::Location{"--sweep " + set}, e.message(), e.key());
      if (e.where().file == "--set hardware=" + profile) throw plan::InputError(plan::Location{"--profile " + profile}, e.message(), e.key());
      throw;
    }
  }
  if (!args.keep_traces.empty()) {
    std::error_code failed;
    fs::create_directories(args.keep_traces, failed);
    if (failed || !fs::is_directory(args.keep_traces))
      throw plan::InputError(plan::Location{args.keep_traces}, "--keep-traces needs a folder it can make or use: " +
                                                                   (failed ? failed.message() : std::string("a file of that name is in the way")));
  }
  warn_unmeasured(configs, prepared, profile);
  std::cerr << "validate: " << configs.size() << " configuration(s) with profile " << profile << ", "
            << (args.steps > 0 ? std::to_string(args.steps) + " steps" : std::string("steps for each as its predicted step asks"))
            << " x " << args.repeats << " run(s) each, in rounds\n";
  const std::vector<Outcome> outcomes =
      fit::run_rounds(configs, prepared, args.repeats, self, print_progress, args.keep_traces);
  const fit::ValidationSummary summary = fit::summarise(configs, outcomes);
  if (args.json)
    print_json(args, profile, configs, prepared, outcomes, summary);
  else
    print_table(configs, outcomes, summary, args.repeats);
  return 0;
}

}  // namespace parallax::cli
