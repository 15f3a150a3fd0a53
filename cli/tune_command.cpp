#include "cli/tune_command.hpp"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>

#include "cli/calibrate_command.hpp"
#include "cli/output.hpp"
#include "cli/run_command.hpp"
#include "cli/validate_command.hpp"
#include "exec/device.hpp"
#include "fit/measure.hpp"
#include "fit/tune_picks.hpp"
#include "plan/error.hpp"
#include "plan/executable.hpp"
#include "plan/hardware.hpp"
#include "plan/scenario.hpp"
#include "plan/trainer_rules.hpp"
#include "plan/yaml_reader.hpp"
#include "timeline/step_statistic.hpp"
#include "tune/pick.hpp"
#include "tune/search.hpp"

namespace parallax::cli {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

std::atomic<bool> g_interrupted{false};
extern "C" void on_sigint(int) { g_interrupted = true; }

constexpr double kMiB = 1024.0 * 1024.0;

json overrides_json(const plan::Overrides& o) {
  json j = json::object();
  for (const auto& [k, v] : o) j[k] = v;
  return j;
}

// Progress on stderr: one updating line on a terminal, a line every few seconds otherwise.
class ProgressBar {
 public:
  /// `limit_s`: the search's time limit (0: none), which no ETA goes past.
  explicit ProgressBar(double limit_s = 0) : limit_s_(limit_s) {}
  void operator()(const tune::Progress& p) {
    const bool tty = ::isatty(2);
    if (p.total == 0 && std::string(p.phase) == "listing") {  // its size is what listing finds
      std::cerr << "tune: listing the space (layouts x schedules x the other knobs)" << (tty ? "..." : "\n") << std::flush;
      shown_ = tty;
      return;
    }
    if (!tty && p.elapsed_s - last_ < 5 && p.done < p.total) return;
    last_ = p.elapsed_s;
    const double frac = p.total ? static_cast<double>(p.done) / static_cast<double>(p.total) : 1;
    const int width = 30, filled = static_cast<int>(frac * width);
    std::string bar(filled, '#');
    bar.resize(width, '.');
    double eta = frac > 0 ? p.elapsed_s * (1 - frac) / frac : 0;
    if (limit_s_ > 0) eta = std::min(eta, std::max(0.0, limit_s_ - p.elapsed_s));
    char line[200];
    std::snprintf(line, sizeof line, "tune: %-10s [%s] %zu/%zu  %.1f s, ETA %.0f s%s", p.phase, bar.c_str(), p.done,
                  p.total, p.elapsed_s, eta, p.best_step > plan::Time() ? fmt(", best %.3f ms", p.best_step.to_ms()).c_str() : "");
    std::cerr << (tty ? "\r" : "") << line << (tty ? "\033[K" : "\n") << std::flush;
    shown_ = tty;
  }
  void done() {
    if (shown_) std::cerr << "\n";
  }

 private:
  double last_ = -10;
  bool shown_ = false;
  double limit_s_ = 0;
};

// The scenario document with the pick's overrides, as YAML. A relative hardware file is rewritten
// relative to where the new file goes, so it still loads from there: one from --set is relative to
// the working directory, one in the file to the file's folder.
std::string best_yaml(const plan::YamlDocument& given, const std::string& output, const plan::Overrides& o,
                      const std::string& header) {
  plan::YamlDocument doc = given;
  for (const auto& s : plan::set_flags(o)) doc.apply_override(s);
  YAML::Node root = YAML::Clone(doc.root());
  // The files the scenario names by a relative path (a hardware profile, a Hugging Face config) are
  // relative to its own folder, or to the working directory when a --set gave them: rewritten
  // relative to the written file's folder, so that it loads from there.
  const fs::path to_dir = fs::absolute(fs::path(output)).parent_path();
  auto rebase = [&](YAML::Node holder, const std::string& key, const std::string& path) {
    if (!holder.IsMap() || !holder[key] || !holder[key].IsScalar()) return;
    const std::string file = holder[key].Scalar();
    const bool a_file = path != "hardware" || plan::names_hardware_file(file);
    if (!a_file || !fs::path(file).is_relative()) return;
    const bool from_flag = !doc.override_for(path).empty();
    holder[key] = fs::proximate(fs::absolute(from_flag ? fs::path(file) : fs::path(doc.base_dir()) / file), to_dir).string();
  };
  rebase(root, "hardware", "hardware");
  if (root["hardware"] && root["hardware"].IsMap()) rebase(root["hardware"], "profile", "hardware.profile");  // {profile: FILE, nodes: N}
  if (root["model"]) rebase(root["model"], "hf_config", "model.hf_config");
  YAML::Emitter out;
  out << root;
  return header + out.c_str() + "\n";
}

// What to do with the written pick: run it, or, where the executor cannot train it (tensor
// parallelism, fp8, ...), simulate it and, where its trainer takes it, launch it there.
std::string next_step_text(const std::string& path) {
  plan::Scenario s;
  try {
    s = plan::load_scenario(path, {});
  } catch (const plan::InputError& e) {
    // The search is done and the file written: say what is wrong with it, and exit 0 as before.
    return "wrote " + path + ", which does not load as it is (" + e.where().str() + ": " + e.message() + ")";
  }
  try {
    plan::check_executable(s);
  } catch (const plan::InputError& e) {
    const bool trainer = s.framework == plan::Framework::megatron || s.framework == plan::Framework::torchtitan;
    const bool exports = trainer && !plan::trainer_refusal(s, s.framework);
    return "wrote " + path + "; parallax run cannot train it (" + e.message() + "): predict it with parallax simulate " + path +
           (exports ? std::string(", launch it with parallax export ") + plan::name(s.framework) + " " + path : std::string());
  }
  try {
    check_runs_here(s);  // its GPUs and data on this machine
    return "wrote " + path + "; run it with: parallax run " + path;
  } catch (const plan::InputError& e) {
    return "wrote " + path + "; run it with parallax run " + path + " where it can train (not here: " + e.message() + ")";
  }
}

std::string samples_per_s(const tune::Evaluation& e) {
  return fmt("%.0f", e.config.global_batch() / (e.step.to_ms() / 1e3));
}

}  // namespace

// Each key is restricted once: a second --search of a key, or a --fix of a searched one, would
// leave one of the two unheeded.
void refuse_conflicting_restrictions(const TuneArgs& args) {
  std::map<std::string, std::string> restricted;  // key -> the flag that restricts it
  const auto restrict = [&](const std::string& key, const std::string& flag) {
    const auto [it, fresh] = restricted.emplace(key, flag);
    if (!fresh)
      throw plan::InputError(plan::Location{flag}, "'" + key + "' is restricted already by " + it->second +
                                                      ": give a key once (list its values in one --search KEY=V1,V2, or --fix it alone)");
  };
  for (const auto& s : args.searches) restrict(s.substr(0, s.find('=')), "--search " + s);
  for (const auto& f : args.fixes) restrict(f, "--fix " + f);
}

int tune_command(const TuneArgs& args, const std::string& self) {
  require_output_folder(args.output, {args.scenario});
  refuse_conflicting_restrictions(args);
  if (args.threads > 1024) throw plan::InputError(plan::Location{"--threads"}, "at most 1024 (each thread keeps its own simulation)");
  if (args.objective != "step" && args.objective != "memory")
    throw plan::InputError(plan::Location{"--objective"}, "'" + args.objective + "' is not an objective; use step or memory");
  if (args.top < 1) throw plan::InputError(plan::Location{"--top"}, "needs 1 or more");
  if (args.validate < 0) throw plan::InputError(plan::Location{"--validate"}, "needs 0 or more");
  if (args.world < 0) throw plan::InputError(plan::Location{"--world"}, "needs 1 or more");
  const plan::YamlDocument doc = plan::scenario_document(args.scenario, args.sets);
  const plan::Scenario base = plan::parse_scenario(doc);
  require_output_folder(args.output, base.files_read());
  if (base.parallel.schedule == schedule::ScheduleKind::csv)
    throw plan::InputError(base.where("parallel.schedule"),
                           "tune searches generated schedules; this scenario imports " + base.parallel.schedule_csv +
                               " (set parallel.schedule to a generated schedule to tune it; parallax keys lists them)");
  if (args.validate > 0) exec::check_device(base);  // a GPU profile on a machine without one: before the search
  if (args.validate > 0 && !base.hardware.calibration)
    std::cerr << "tune: note: predicting with '" << base.hardware.name
              << "', which is not calibrated; --validate runs on this machine's CPU, so tune with its calibration "
                 "(parallax calibrate, then --set hardware=" << default_calibration_path() << ")\n";
  tune::Evaluator ev(base);
  tune::Space space = tune::default_space(base, args.world);
  for (const auto& s : args.searches) tune::search(&space, s);
  for (const auto& f : args.fixes) tune::fix(&space, ev.given(), f);
  if (args.any_trainer) space.trainer = plan::Framework::pytorch;
  if (plan::has_trainer_rules(space.trainer))
    std::cerr << "tune: framework " << plan::name(space.trainer) << ": searching only what " << plan::trainer_name(space.trainer)
              << " runs, so that parallax export takes the pick (--any-trainer searches every plan)\n";
  if (args.validate > 0) {
    for (const auto& note : fit::keep_executable(&space, base))
      std::cerr << "tune: --validate runs the picks for real: leaving out " << note << " (predict-only)\n";
    // A key the user searched with nothing left to run would be searched as if never named.
    for (const auto& assignment : args.searches)
      if (const std::string key = assignment.substr(0, assignment.find('=')); space.values.count(key) && space.of(key).empty())
        throw plan::InputError(plan::Location{"--search " + assignment},
                               "every value is predict-only (the executor cannot run it), and --validate runs the picks for real: "
                               "search values the executor runs, or tune without --validate");
  }

  tune::SearchOptions opt;
  opt.objective = args.objective == "memory" ? tune::Objective::memory : tune::Objective::step;
  opt.max_configs = args.max_configs;
  opt.time_limit_s = args.time_limit_s;
  opt.top = args.top;
  opt.threads = args.threads;
  ProgressBar bar(args.time_limit_s);
  opt.progress = [&](const tune::Progress& p) { bar(p); };
  g_interrupted = false;
  opt.cancel = &g_interrupted;
  auto previous = std::signal(SIGINT, on_sigint);
  const tune::SearchResult r = tune::search(ev, space, opt);
  std::signal(SIGINT, previous);
  bar.done();
  if (r.valid_in_space == 0) {
    // Named by every --search and --fix: which of them rules the plans out is the combination's.
    std::string flags;
    for (const auto& s : args.searches) flags += (flags.empty() ? "--search " : " --search ") + s;
    for (const auto& f : args.fixes) flags += (flags.empty() ? "--fix " : " --fix ") + f;
    throw plan::InputError(plan::Location{flags.empty() ? std::string("tune") : flags},
                           r.invalid > 0 ? "none of the " + std::to_string(r.invalid) + " combinations searched makes a valid plan, e.g.: " +
                                               r.invalid_example + " (the table would hold only the scenario as given)"
                                         : "no data x context x pipeline x tensor of the values searched makes the world of " +
                                               std::to_string(space.world) + " ranks (--world)");
  }
  if (r.ranked.empty()) {
    if (g_interrupted) {
      std::cerr << "tune: stopped (Ctrl-C) before any of the " << r.combinations << " configurations was found to fit device memory\n";
      return 130;
    }
    // Stopped early, the search has not seen the whole space: say so rather than "none fits".
    const std::string reason =
        (!r.stopped.empty() ? "stopped (" + r.stopped + ") before any of the " + std::to_string(r.combinations) +
                                  " configurations was found to fit device memory; narrow the space (--search, --fix) or give it more "
                                  "time (--time-limit)"
                            : "no configuration of the " + std::to_string(r.combinations) + " searched fits device memory (" +
                                  std::to_string(r.over_memory) + " over it)") +
        (r.invalid_example.empty() ? "" : " (" + std::to_string(r.invalid) + " combinations were not valid, e.g.: " + r.invalid_example + ")");
    std::cerr << "tune: " << reason << "\n";
    if (args.json)  // --json prints its one object whatever the outcome: a script reads why
      std::cout << json{{"scenario", base.name}, {"configs_total", r.combinations}, {"configs_invalid", r.invalid},
                        {"configs_evaluated", r.evaluated}, {"configs_pruned", r.pruned}, {"configs_over_memory", r.over_memory},
                        {"wall_s", r.wall_s}, {"stopped", r.stopped}, {"best", nullptr}, {"ranked", json::array()},
                        {"pareto", json::array()}, {"validated", json::array()}, {"none_fits", reason}}
                       .dump(2)
                << "\n";
    return 1;
  }

  // Run the top K for real: the best measured wins (fit/tune_picks.hpp).
  fit::PickRuns picks;
  picks.self = self;
  picks.scenario = args.scenario;
  picks.sets = args.sets;
  picks.steps = args.validate_steps;
  picks.starting = [&](size_t i, size_t n, const plan::Overrides& changed) {
    std::cerr << "tune: running " << i + 1 << " of " << n << " for real (" << plan::describe(changed) << ", "
              << args.validate_steps << " steps)\n";
  };
  picks.measured = [](const fit::ValidatedPick& v) {
    std::cerr << "tune:   predicted " << fmt("%.3f", v.predicted.to_ms()) << " ms, measured "
              << fmt("%.3f", v.measured.undisturbed.to_ms()) << " ms undisturbed (median "
              << fmt("%.3f", v.measured.median.to_ms()) << " ms, " << fmt("%.0f%%", 100 * v.measured.disturbed_share)
              << " of the steps disturbed)\n";
  };
  const std::vector<const tune::Evaluation*> candidates =
      fit::validation_candidates(r, base, static_cast<size_t>(args.validate));
  if (args.validate > 0 && candidates.empty()) {
    plan::check_executable(base);  // says why, when the scenario itself is what cannot run
    throw plan::InputError(plan::Location{"--validate"}, "none of the ranked configurations can run for real (they are predict-only)");
  }
  const std::vector<fit::ValidatedPick> validated = fit::run_picks(candidates, picks);
  const fit::ValidatedPick* fastest = fit::fastest(validated);
  // The full simulation of each ranked row (the table's bubble and exposed communication), with
  // its own progress: after a search's time limit, a large plan's rows take their seconds each.
  const auto details_start = std::chrono::steady_clock::now();
  ProgressBar detail_bar;
  const std::vector<tune::Detail> details = tune::ranked_details(ev, r, args.threads, [&](size_t done) {
    detail_bar({"in full", done, r.ranked.size(),
                std::chrono::duration<double>(std::chrono::steady_clock::now() - details_start).count(), plan::Time()});
  });
  detail_bar.done();
  const double details_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - details_start).count();
  const tune::Pick pick = tune::pick(ev, r, fastest ? fastest->evaluation : nullptr, details);
  const tune::Evaluation* best = pick.best;
  const plan::Overrides& best_overrides = best->changes;

  if (!args.output.empty()) {
    // The file below holds the --set values too: the header names them, and "as given" is with them.
    std::string sets;
    for (const auto& s : args.sets) sets += " --set " + s;
    const std::string header = "# Written by parallax tune from " + (args.scenario.empty() ? doc.file() : args.scenario) + sets +
                               ": " + plan::describe(best_overrides) + "\n# predicted step " +
                               fmt("%.3f ms", best->step.to_ms()) + " (as given" + (sets.empty() ? "" : ", with the --set values,") + " " +
                               fmt("%.3f ms", r.baseline.step.to_ms()) + ")\n";
    write_file_atomically(args.output, best_yaml(doc, args.output, best_overrides, header));
  }

  const std::string stopped = r.stopped.empty() ? "" : " (stopped early: " + r.stopped + "; the best so far)";
  if (args.json) {
    auto eval_json = [&](const tune::Evaluation& e) {
      return json{{"overrides", overrides_json(e.changes)},
                  {"predicted_step_ms", e.step.to_ms()},
                  {"peak_memory_mb", static_cast<double>(e.peak_memory) / kMiB}};
    };
    json j;
    j["scenario"] = base.name;
    // Whose rules every configuration passed: "megatron", "torchtitan", or "none".
    j["trainer"] = plan::has_trainer_rules(space.trainer) ? plan::name(space.trainer) : "none";
    j["configs_total"] = r.combinations;
    j["configs_sampled_one_in"] = r.sampled_one_in;
    j["configs_invalid"] = r.invalid;
    j["configs_evaluated"] = r.evaluated;
    j["configs_pruned"] = r.pruned;
    j["configs_over_memory"] = r.over_memory;
    j["wall_s"] = r.wall_s;
    j["ranked_full_simulations_s"] = details_s;
    j["stopped"] = r.stopped;
    j["baseline"] = eval_json(r.baseline);
    j["pytorch_defaults"] = r.defaults.simulated() ? eval_json(r.defaults) : json();
    j["best"] = eval_json(*best);
    j["speedup_vs_given"] = pick.vs_given;
    j["speedup_vs_pytorch_defaults"] = r.defaults.simulated() ? json(pick.vs_defaults) : json();
    j["why"] = pick.why;
    j["ranked"] = json::array();
    for (const auto& e : r.ranked) {
      json row = eval_json(e);
      row["equivalents"] = json::array();  // the same prediction: they differ only in knobs with no effect
      for (const auto& c : e.equivalents) row["equivalents"].push_back(overrides_json(plan::overrides(ev.given(), c)));
      j["ranked"].push_back(row);
    }
    j["pareto"] = json::array();
    for (const auto& e : r.pareto) j["pareto"].push_back(eval_json(e));
    j["validated"] = json::array();
    for (const auto& v : validated)
      j["validated"].push_back({{"overrides", overrides_json(v.evaluation->changes)},
                                {"predicted_step_ms", v.predicted.to_ms()},
                                {"measured_step_ms", v.measured.undisturbed.to_ms()},
                                {"statistic", timeline::kStatisticName}});
    std::cout << j.dump(2) << "\n";
  } else {
    std::printf("tune: %s, %zu ranks; %zu configurations (%zu more combinations not valid), %zu simulated, %zu pruned "
                "by the lower bound, %zu over device memory, in %.2f s (and %.2f s simulating the ranked rows in full)%s\n\n",
                base.name.c_str(), static_cast<size_t>(space.world), r.combinations, r.invalid, r.evaluated, r.pruned, r.over_memory, r.wall_s,
                details_s, stopped.c_str());
    if (r.sampled_one_in > 1)
      std::printf("(the space is about %zu times these counts: past %zu configurations it was sampled uniformly, one combination in %zu)\n\n",
                  r.sampled_one_in, tune::kEnumerationCap, r.sampled_one_in);
    std::printf("%4s %10s %10s %7s %9s %12s %10s  %s\n", "rank", "step ms", "samples/s", "bubble", "imbalance", "exposed ms",
                "peak MiB", "what changes from the scenario");
    for (size_t i = 0; i < r.ranked.size(); ++i) {
      const auto& e = r.ranked[i];
      const tune::Detail& d = details[i];
      const std::string also = tune::also_text(e);
      std::printf("%4zu %10.3f %10s %6.1f%% %8.1f%% %12.3f %10.1f  %s%s\n", i + 1, e.step.to_ms(), samples_per_s(e).c_str(),
                  100 * d.bubble, 100 * d.imbalance, d.exposed.to_ms(), static_cast<double>(e.peak_memory) / kMiB,
                  plan::describe(e.changes).c_str(), also.empty() ? "" : ("  (" + also + ")").c_str());
    }
    std::printf("\nPareto frontier, step time against peak memory (of the configurations simulated):\n");
    for (const auto& e : r.pareto)
      std::printf("  %10.3f ms %10.1f MiB  %s\n", e.step.to_ms(), static_cast<double>(e.peak_memory) / kMiB,
                  plan::describe(e.changes).c_str());
    if (!validated.empty()) {
      std::printf("\nrun for real (%d steps each, measured as the %s; the best measured is the pick):\n",
                  args.validate_steps, timeline::kStatisticName);
      for (const auto& v : validated)
        std::printf("  predicted %10.3f ms, measured %10.3f ms (%+.1f%%)  %s\n", v.predicted.to_ms(),
                    v.measured.undisturbed.to_ms(), 100 * timeline::relative_error(v.predicted, v.measured.undisturbed),
                    plan::describe(v.evaluation->changes).c_str());
    }
    // A baseline that does not fit device memory could not run: its speedup is no choice a user had.
    auto unfit = [](const tune::Evaluation& e) {
      return e.fits ? std::string() : fmt(", does not fit: %.1f GiB at its fullest rank", static_cast<double>(e.peak_memory) / (1024.0 * kMiB));
    };
    std::printf("\npick: %s\n", plan::describe(best_overrides).c_str());
    // With --world the scenario as given (and PyTorch's defaults of it) may hold other ranks than
    // the pick: a speed-up is then also the ranks'.
    auto other_ranks = [&](const tune::Evaluation& e) {
      const int ranks = e.config.world_size();
      return ranks != space.world ? " on " + std::to_string(ranks) + " ranks, the pick on " + std::to_string(space.world) : std::string();
    };
    std::printf("  predicted step %.3f ms: %.2fx the scenario as given (%.3f ms%s%s)", best->step.to_ms(), pick.vs_given,
                r.baseline.step.to_ms(), other_ranks(r.baseline).c_str(), unfit(r.baseline).c_str());
    if (r.defaults.simulated())
      std::printf(", %.2fx PyTorch's defaults (%.3f ms: %s%s%s)", pick.vs_defaults, r.defaults.step.to_ms(),
                  plan::describe(r.defaults.changes).c_str(), other_ranks(r.defaults).c_str(), unfit(r.defaults).c_str());
    std::printf("\n  why: %s\n", pick.why.c_str());
    for (const auto& [key, value] : best_overrides)
      if (key == "parallel.precision")
        std::printf("  note: the pick trains in %s, the scenario in %s: its numerics change too (--fix parallel.precision keeps %s)\n",
                    value.c_str(), plan::name(base.parallel.precision), plan::name(base.parallel.precision));
    if (!args.output.empty()) std::printf("\n%s\n", next_step_text(args.output).c_str());
  }
  return g_interrupted ? 130 : 0;
}

}  // namespace parallax::cli
