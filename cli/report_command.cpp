#include "cli/report_command.hpp"

#include <cmath>
#include <filesystem>
#include <fstream>
#include <iostream>

#include "cli/output.hpp"
#include "cli/sim_report.hpp"
#include "cli/trace_report.hpp"
#include "plan/error.hpp"
#include "plan/scenario.hpp"
#include "sim/metrics.hpp"
#include "timeline/metrics.hpp"
#include "timeline/trace_reader.hpp"

namespace parallax::cli {
namespace {

using nlohmann::json;

/// A Parallax trace of the expected kind ("predicted" or "measured").
timeline::Timeline read_timeline(const std::string& path, const std::string& kind) {
  return read_trace_of_kind(path, kind, "report", "--" + kind).timeline;
}

json read_tune_result(const std::string& path) {
  if (std::filesystem::is_directory(path)) throw plan::InputError(plan::Location{path}, "a folder, not a tune result");
  std::ifstream in(path);
  if (!in) throw plan::InputError(plan::Location{path}, "cannot open the tune result (does it exist?)");
  json j;
  try {
    j = json::parse(in);
  } catch (const json::parse_error& e) {
    throw plan::InputError(plan::Location{path}, "not valid JSON (at byte " + std::to_string(e.byte) +
                                                     "; is the file truncated?): a tune result is what `parallax tune --json` prints");
  }
  if (const std::string problem = report::tune_result_problem(j); !problem.empty())
    throw plan::InputError(plan::Location{path}, "not a tune result (" + problem + "): expected the JSON object that "
                                                 "`parallax tune --json` prints");
  return j;
}

// Whether the page's plan is one the tune result predicted: its scenario as given or one of its rows
// (a pick written with -o and reported beside its search, or one it ran with --validate). Step
// times to a microsecond.
bool tune_holds_plan(const json& tune, double step_ms) {
  auto same = [&](const json& row) { return std::abs(row.value("predicted_step_ms", -1.0) - step_ms) < 1e-3; };
  if (same(tune["baseline"]) || same(tune["best"])) return true;
  for (const char* list : {"ranked", "pareto", "validated"})
    for (const auto& row : tune.value(list, json::array()))
      if (same(row)) return true;
  return false;
}

void check_output(const ReportArgs& args) {
  const std::string& path = args.output;
  if (path.empty())
    throw plan::InputError(plan::Location{"-o"}, "report needs the file to write: -o report.html");
  require_output_folder(path, {args.scenario, args.predicted, args.measured, args.tune});
}

}  // namespace

report::ReportInput simulated_report_input(const plan::Plan& plan, const sim::SimRun& run) {
  report::ReportInput in;
  in.predicted = predicted_timeline(plan, run);
  in.critical_path = sim::compute_metrics(plan, run).critical_path;
  return in;
}

int report_command(const ReportArgs& args) {
  check_output(args);
  if (!args.predicted.empty() && (!args.scenario.empty() || !args.sets.empty()))
    throw plan::InputError(plan::Location{"--predicted " + args.predicted},  // the flag's, not the file's fault
                           std::string("give either a SCENARIO to simulate or --predicted TRACE, not both (") +
                               (args.scenario.empty() ? "--set values are a SCENARIO's" : "SCENARIO " + args.scenario + " given too") + ")");
  // Read everything the user named before the (possibly long) simulation, so bad input fails fast.
  std::optional<timeline::Timeline> measured;
  if (!args.measured.empty()) measured = read_timeline(args.measured, "measured");
  const json tune = args.tune.empty() ? json() : read_tune_result(args.tune);

  report::ReportInput in;
  if (!args.predicted.empty()) {
    in.predicted = read_timeline(args.predicted, "predicted");
  } else {
    const plan::Plan p = plan::resolve_plan(plan::load_scenario(args.scenario, args.sets));
    require_output_folder(args.output, p.scenario.files_read());
    sim::SimOptions options;
    options.record_link_samples = true;  // the page's link bandwidth
    in = simulated_report_input(p, sim::simulate(p, options));
  }
  if (measured) {
    in.warnings = check_same_job(in.predicted, *measured, args.measured);
    for (const std::string& w : in.warnings) std::cerr << "warning: " << w << "\n";
  }
  if (tune.contains("scenario") && tune["scenario"] != in.predicted.scenario)
    throw plan::InputError(plan::Location{args.tune}, "a tune result of scenario '" + tune["scenario"].get<std::string>() +
                                                          "', not of '" + in.predicted.scenario + "', the one this page shows");
  if (const auto steps = timeline::steps_of(in.predicted); !tune.is_null() && !steps.empty()) {
    const double step_ms = timeline::step_times(in.predicted, steps.front()).step_time.to_ms();
    if (!tune_holds_plan(tune, step_ms))
      throw plan::InputError(plan::Location{args.tune},
                             "a tune of another plan of '" + in.predicted.scenario + "': its scenario as given predicted " +
                                 fmt("%.3f ms", tune["baseline"]["predicted_step_ms"].get<double>()) + " and no row of it " +
                                 fmt("%.3f ms", step_ms) + ", this page's step (a --set given to one and not the other?)");
  }
  in.measured = std::move(measured);
  in.tune = tune;
  write_file_atomically(args.output, report::render_html(in));
  std::cerr << "wrote " << args.output << " (self-contained: open it in any browser, no network needed)\n";
  return 0;
}

}  // namespace parallax::cli
