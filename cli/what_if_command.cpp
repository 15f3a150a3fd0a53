// `parallax calibrate --from-trace TRACE... [SCENARIO] [--set ...]`: what if, from a measured run.
// The fitting is fit/from_trace's; this reads the traces, plans the job, prints the fit and
// writes the profile.
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <numeric>
#include <optional>
#include <set>
#include <iostream>

#include <nlohmann/json.hpp>

#include "cli/calibrate_command.hpp"
#include "cli/output.hpp"
#include "fit/from_trace.hpp"
#include "plan/error.hpp"
#include "plan/hardware.hpp"
#include "plan/plan.hpp"
#include "plan/scenario.hpp"
#include "plan/yaml_reader.hpp"
#include "timeline/step_statistic.hpp"
#include "timeline/trace_reader.hpp"

namespace parallax::cli {

namespace fs = std::filesystem;

namespace {

// A Parallax trace of a "balanced" scenario ran the partition balanced on the run's profile; the
// profile being fitted may balance otherwise, so the fit keeps the run's.
std::vector<std::string> with_run_partition(const std::string& scenario, std::vector<std::string> sets,
                                            const timeline::LoadedTrace& first) {
  if (first.format != "parallax") return sets;
  const auto& ran = first.timeline.plan;
  if (!ran || ran->partition_len.empty()) return sets;
  const plan::Scenario given = plan::load_scenario(scenario, sets);
  if (given.parallel.partition_len.mode != plan::PartitionLen::Mode::balanced) return sets;
  // A run's layers in another count than the scenario's: a trace of another model, said as such
  // (the partition taken from it would otherwise be the one to fail, as if given by --set).
  const int ran_layers = std::accumulate(ran->partition_len.begin(), ran->partition_len.end(), 0);
  if (ran_layers != static_cast<int>(given.layers.size()))
    throw plan::InputError(plan::Location{first.path}, "not a run of this job: a run of '" + first.timeline.scenario + "' (" +
                                                          std::to_string(ran_layers) + " layers), where this scenario's model has " +
                                                          std::to_string(given.layers.size()) + " layers ('" + given.name + "')");
  const int stages = given.parallel.pipeline * given.parallel.virtual_stages;
  if (static_cast<int>(ran->partition_len.size()) != stages)
    throw plan::InputError(plan::Location{first.path}, "not a run of this layout: a run in " + std::to_string(ran->partition_len.size()) +
                                                          " pipeline stages, where this scenario has " + std::to_string(stages) +
                                                          ": give the layout the trace ran (--set parallel.pipeline=..., parallel.virtual=...)");
  sets.push_back("parallel.partition_len=" + nlohmann::json(ran->partition_len).dump());
  return sets;
}

// The rank a profiler trace's events ran on (its distributedInfo.rank), -1 for Parallax's own or an
// empty one.
int profiler_rank(const timeline::LoadedTrace& t) {
  return t.format == "parallax" || t.events.empty() ? -1 : t.events.front().rank;
}

// The runs the files hold. A profiler's job writes a file per rank, each naming its rank
// (distributedInfo): files of distinct ranks of one job size join one run, as `parallax trace`
// merges them (kernels pair with their launches by rank and correlation, so ranks do not mix); a
// rank seen again starts the next run. A file given twice would count one run twice: refused.
std::vector<timeline::LoadedTrace> runs_of(const std::vector<std::string>& paths) {
  std::vector<timeline::LoadedTrace> runs;
  std::set<std::string> seen;
  std::set<int> ranks_in_run;
  for (const auto& path : paths) {
    refuse_given_twice(&seen, path, "each --from-trace is a run (or a rank's file of one)");
    timeline::LoadedTrace t = timeline::read_trace(path);
    const int rank = profiler_rank(t);
    timeline::LoadedTrace* run = runs.empty() ? nullptr : &runs.back();
    const bool joins = run && rank >= 0 && profiler_rank(*run) >= 0 && t.world_size == run->world_size && t.world_size > 1 &&
                       !ranks_in_run.count(rank);
    if (!joins) {
      ranks_in_run = {rank};
      runs.push_back(std::move(t));
      continue;
    }
    ranks_in_run.insert(rank);
    run->path += ", " + t.path;
    run->events.insert(run->events.end(), t.events.begin(), t.events.end());
    run->steps.insert(run->steps.end(), t.steps.begin(), t.steps.end());
    run->warnings.insert(run->warnings.end(), t.warnings.begin(), t.warnings.end());
  }
  for (auto& run : runs)  // a merged run's ranks in time order, as one file's events are
    std::stable_sort(run.events.begin(), run.events.end(), [](const auto& a, const auto& b) { return a.start_ns < b.start_ns; });
  return runs;
}

// The base profile's own text: a built-in profile's (its source says "(built-in)"), or its file's.
std::string base_text_of(const plan::HardwareProfile& hw) {
  if (hw.source.ends_with("(built-in)"))
    if (const char* text = plan::builtin_hardware_text(hw.name)) return text;
  return profile_text(hw.source);
}

// The job's cap on nodes where its scenario stated one the profile's own text does not have.
std::optional<int> stated_nodes(const plan::HardwareProfile& job, const std::string& base_text) {
  const plan::YamlDocument doc = plan::YamlDocument::from_text(base_text, job.name);
  const std::optional<int> own = plan::parse_hardware(plan::Field::root(doc)).max_nodes;
  return job.max_nodes != own ? job.max_nodes : std::nullopt;
}

std::string default_output(const plan::Scenario& s) {
  return (fs::path("parallax-out") / ("fitted-" + (s.file.empty() ? std::string("default") : fs::path(s.file).stem().string()) + ".yaml")).string();
}

// A GPU run whose actions waited on the host's kernel launches: their time is this host's, which
// the fitted factors carry; what changes how many launches a step makes moves it unmodelled.
void print_launch_shares(const std::vector<timeline::LoadedTrace>& traces) {
  const auto shares = fit::launch_shares(traces);
  if (shares.empty()) return;
  std::printf("\nthe host's kernel launches and the device's time, per action (median):\n");
  bool bound = false;
  for (const auto& s : shares) {
    // At or below 0 the device's last kernel ended before the host's last launch call returned.
    const std::string finished = s.after_last_launch_us > 0 ? fmt("%.0f us after the last launch", s.after_last_launch_us)
                                                            : std::string("as the last launch returned");
    std::printf("  %-5s launched in %.0f us, ran %.0f us on the device, which finished %s%s\n", schedule::name(s.kind), s.host_us,
                s.device_us, finished.c_str(), s.host_bound() ? ": bound by the launches" : "");
    bound = bound || s.host_bound();
  }
  if (bound)
    std::printf("  the device waited on the host's launches: the fit carries this host's speed into every prediction,\n"
                "  and configurations that change how many launches a step makes (chunks, accumulation, recompute)\n"
                "  are predicted as if the device's work set the time\n");
}

}  // namespace

// How far from its own run a fitted prediction may land before the user is told (see below).
constexpr double kFarOff = 0.10;

namespace {

// A layer factor this far from 1 is no correction of a profile but another job's or machine's
// times: a datasheet GPU profile lands within 2x of a run's layers, the CPU profile's bf16 guess
// within 15x, a launch-bound small layer on a GPU within a few tens. The optimizer step and the
// all-reduces are not judged: a scenario may stand in for what Parallax does not model (the
// shared Kineto job's Shampoo, written as Adam, fits x770 and predicts its run within 1%).
constexpr double kImplausibleFactor = 100;

// The fitted layer factors beyond kImplausibleFactor either way, in words ("linear 784x256 forward x4349").
std::vector<std::string> implausible_factors(const plan::FittedCosts& c) {
  std::vector<std::string> out;
  const auto check = [&](const std::string& what, double factor) {
    if (factor > 0 && (factor > kImplausibleFactor || factor < 1 / kImplausibleFactor))
      out.push_back(what + " x" + fmt(factor >= 100 ? "%.0f" : "%.3g", factor));
  };
  for (const auto& [signature, layer] : c.layers) {
    check(signature + " forward", layer.forward);
    check(signature + " backward", layer.backward);
  }
  if (out.size() > 3) {  // the first three say it
    const size_t more = out.size() - 3;
    out.resize(3);
    out.push_back("and " + std::to_string(more) + " more");
  }
  return out;
}

// The commands that predict the job's other configurations with the fitted profile: the scenario
// and --set values the traces measured, the profile in place of their hardware, and the changes
// to that hardware (hardware.KEY) after it, as the fit was made on them; each value quoted for a shell.
// `nodes`: the job's cap on nodes where it differs from the profile's (a scenario's
// `hardware: {profile: P, nodes: N}`), which the fitted profile, its base's text, does not carry.
std::string next_commands(const std::string& scenario, const std::vector<std::string>& sets, const std::string& output,
                          std::optional<int> nodes) {
  const auto quoted = [](const std::string& s) {
    std::string q = "'";
    for (char ch : s) q += ch == '\'' ? std::string("'\\''") : std::string(1, ch);
    return q + "'";
  };
  std::string job = scenario.empty() ? "" : scenario + " ";
  std::string machine = nodes ? "--set " + quoted("hardware={profile: " + output + ", nodes: " + std::to_string(*nodes) + "}")
                              : "--set hardware=" + output;
  for (const auto& s : sets) {
    if (s.starts_with("hardware.")) machine += " --set " + quoted(s);
    else if (!s.starts_with("hardware=")) job += "--set " + quoted(s) + " ";
  }
  return "  parallax simulate " + job + machine + " --set parallel.chunks=N\n" + "  parallax tune " + job + machine + "\n";
}

}  // namespace

int calibrate_from_traces(const CalibrateArgs& args) {
  if (args.scenarios.size() > 1) {
    // `--from-trace a.json b.json job.yaml` hands b.json to SCENARIO: each trace needs its flag.
    for (const auto& s : args.scenarios)
      if (s.ends_with(".json") || s.ends_with(".json.gz"))
        throw plan::InputError(plan::Location{s}, "a trace where the scenario goes: give each trace its own flag (--from-trace A.json "
                                                  "--from-trace B.json JOB.yaml)");
    throw plan::InputError(plan::Location{"SCENARIO"}, "--from-trace fits one job: give its scenario once (and its --set values)");
  }
  const std::string scenario = args.scenarios.empty() ? "" : args.scenarios.front();
  const std::vector<timeline::LoadedTrace> traces = runs_of(args.from_traces);
  const plan::Plan plan = plan::resolve_plan(plan::load_scenario(scenario, with_run_partition(scenario, args.sets, traces.front())));
  const plan::HardwareProfile& base = plan.scenario.hardware;
  if (base.fitted)
    throw plan::InputError(plan::Location{base.source}, "this profile carries a fitted section already; fit from the "
                                                        "profile it was fitted on (" + base.fitted->base + ")");
  const std::string base_text = base_text_of(base);
  if (base_text.empty())
    throw plan::InputError(plan::Location{"hardware"}, "the job's profile '" + base.name +
                                                          "' is not a file or a built-in profile; write it to a file and --set hardware=FILE");
  std::vector<timeline::Timeline> measured;
  for (const auto& t : traces) measured.push_back(fit::measured_actions(t, plan));
  const std::string output = args.output.empty() ? default_output(plan.scenario) : args.output;
  if (args.output.empty()) fs::create_directories(fs::path(output).parent_path());
  std::vector<std::string> inputs = plan.scenario.files_read();
  inputs.insert(inputs.end(), args.from_traces.begin(), args.from_traces.end());
  require_output_folder(output, inputs);

  std::cerr << "calibrate: fitting " << base.name << " to " << traces.size() << " measured run(s) of "
            << plan.scenario.name << "\n";
  // Kernels by kind first (where the traces show them), then the layers over those.
  std::vector<std::string> kernel_lines;
  const plan::FittedCosts::Kernels kernels = fit::fit_kernel_kinds(plan, traces, &kernel_lines, &measured);
  fit::TraceFit f = fit::fit_to_measured(plan, measured, kernels);
  f.costs.from = args.from_traces;
  f.costs.statistic = timeline::kStatisticName;
  f.costs.precision = plan::name(plan.scenario.parallel.precision);
  f.costs.base = base.source.ends_with("(built-in)") ? base.name : base.source;
  const std::string name = base.name + "-fitted-" + plan.scenario.name;
  write_file_atomically(output, plan::fitted_copy_yaml(base_text, name, f.costs,
                                                       {"written by parallax calibrate --from-trace: " + base.name +
                                                        " fitted to measured runs of " + plan.scenario.name}));

  std::printf("measured   %.3f ms a step (%s, %d undisturbed steps over %zu run(s))\n", f.measured_step.to_ms(),
              timeline::kStatisticName, f.steps, traces.size());
  std::printf("predicted  %.3f ms with %s (%+.1f%%), %.3f ms fitted (%+.1f%%)\n", f.base_step.to_ms(),
              base.name.c_str(), 100 * timeline::relative_error(f.base_step, f.measured_step), f.fitted_step.to_ms(),
              100 * timeline::relative_error(f.fitted_step, f.measured_step));
  // The fit sets each action's own time; what lies between actions (the host's work from one to the
  // next, a receive's wait beyond the modelled transfer) it does not, nor the kinds of action the
  // traces lack. Where that leaves the fitted step more than 10% from the run it was fitted to (or
  // further than the base's, past 5%), the user hears it before trusting the what if.
  const double base_error = std::abs(timeline::relative_error(f.base_step, f.measured_step));
  const double fitted_error = std::abs(timeline::relative_error(f.fitted_step, f.measured_step));
  // One factor a kind of action cannot follow actions of that kind that differ among themselves
  // (an all-reduce hidden under the backward and the last one exposed), nor the time between actions.
  if (fitted_error > kFarOff || (fitted_error > base_error && fitted_error > 0.05))
    std::fprintf(stderr, "calibrate: warning: the fitted profile predicts the run it was fitted to %.1f%% off (the base %.1f%%): %s "
                 "(compare the fitted prediction's trace with the run's to see where)\n",
                 100 * fitted_error, 100 * base_error,
                 f.missing.empty() ? "one factor for each kind of action does not follow this run's actions of a kind that "
                                     "differ among themselves, or the time between actions"
                                   : ("the traces hold no " + plan::join(f.missing, ", ") + ", which the fit kept from the base").c_str());
  // Too few steps: the statistic (and so every factor) rests on a step or two.
  if (f.steps < timeline::kMinStatisticSteps) {
    // A Parallax run's first step is its warm-up; a profiler's sampled steps come from mid-run.
    const bool warm_up_only = std::all_of(traces.begin(), traces.end(), [](const auto& t) {
      return t.format == "parallax" && timeline::steps_of(t.timeline).size() == 1;
    });
    std::fprintf(stderr, "calibrate: warning: the fit rests on %d undisturbed step%s%s; the statistic wants %d or more after the "
                 "warm-up (trace more steps)\n", f.steps, f.steps == 1 ? "" : "s",
                 warm_up_only ? " (a run of one step has only its warm-up)" : "", timeline::kMinStatisticSteps);
  }
  if (const auto far = implausible_factors(f.costs); !far.empty())
    std::fprintf(stderr, "calibrate: warning: %s %s no correction of %s but the times of another job or machine: check that the "
                 "traces are of %s as SCENARIO and --set give it\n", plan::join(far, ", ").c_str(), far.size() == 1 ? "is" : "are",
                 base.name.c_str(), plan.scenario.name.c_str());
  // A profiler trace's own step marks (ProfilerStep#N) hold what its actions do not (data loading,
  // exchanges outside the model): said beside, not fitted.
  std::vector<plan::Time> marked;
  for (const auto& t : traces)
    for (const auto& s : t.steps) marked.push_back(plan::Time::ns(s.end_ns - s.start_ns));
  if (!marked.empty())
    std::printf("           the traces' own ProfilerStep spans: median %.3f ms over %zu (%.3f-%.3f); the actions "
                "above cover %.0f%% of that\n",
                timeline::median(marked).to_ms(), marked.size(), std::min_element(marked.begin(), marked.end())->to_ms(),
                std::max_element(marked.begin(), marked.end())->to_ms(), 100 * (f.measured_step / timeline::median(marked)));
  std::printf("\nfitted from the traces:\n");
  for (const auto& line : f.fitted) std::printf("  %s\n", line.c_str());
  std::printf("kept from %s:\n", base.name.c_str());
  for (const auto& line : f.kept) std::printf("  %s\n", line.c_str());
  // A GPU trace's kernels, or why none were fitted (a CPU run's trace has none).
  std::printf("kernels by kind, against %s's compute model:\n", base.name.c_str());
  for (const auto& line : kernel_lines) std::printf("  %s\n", line.c_str());
  print_launch_shares(traces);
  std::printf("\nwrote %s; predict the job's other configurations with it:\n%s", output.c_str(),
              next_commands(scenario, args.sets, output, stated_nodes(base, base_text)).c_str());
  return 0;
}

}  // namespace parallax::cli
