#include "cli/main_job.hpp"

#include <filesystem>
#include <iostream>
#include <sstream>

#include "cli/calibrate_command.hpp"
#include "cli/output.hpp"
#include "cli/plan_report.hpp"
#include "cli/report_command.hpp"
#include "cli/run_command.hpp"
#include "cli/scenario_commands.hpp"
#include "cli/sim_report.hpp"
#include "cli/trace_report.hpp"
#include "plan/calibration.hpp"
#include "plan/yaml_reader.hpp"
#include "sim/metrics.hpp"
#include "sim/simulator.hpp"
#include "timeline/compare.hpp"
#include "timeline/trace_reader.hpp"
#include "timeline/trace_writer.hpp"

namespace parallax::cli {
namespace {

namespace fs = std::filesystem;

constexpr int kSteps = 4;  // one warm-up step and three measured ones

/// Whether `path` is a calibrated profile that costs every layer of `plan` from measurements.
bool covers(const std::string& path, const plan::Plan& plan) {
  try {
    const auto doc = plan::YamlDocument::from_file(path);
    const plan::HardwareProfile hw = plan::parse_hardware(plan::Field::root(doc));
    return hw.calibration &&
           plan::unmeasured_signatures(*hw.calibration, plan.layers(), plan.scenario.parallel.precision).empty();
  } catch (const plan::InputError&) {
    return false;  // from an older calibrate, or damaged: measure again
  }
}

/// The profile the main job predicts this machine with: this machine's calibration, measured once
/// (`parallax calibrate --quick`: minutes, most of them its probes' real runs) and kept in
/// parallax-out/ for the next runs; the built-in cpu-host profile if calibrating fails.
std::string this_machine_profile(const plan::Plan& plan) {
  const std::string path = default_calibration_path();
  if (covers(path, plan)) {
    std::cerr << "\nusing this machine's calibration " << path << " (delete it to measure again)\n";
    return path;
  }
  std::cerr << "\ncalibrating this machine first (parallax calibrate --quick: a minute or two on a 2-core machine, most of it real probe "
               "runs of the accuracy set's small scenarios; once, kept in "
            << path << ")\n";
  CalibrateArgs args;
  args.quick = true;
  const int rc = calibrate_command(args);
  if (rc == 0 && covers(path, plan)) return path;
  std::cerr << "warning: calibrating failed (exit " << rc << "); predicting with the uncalibrated cpu-host profile\n";
  return "cpu-host";
}

/// Simulates `plan` and writes its predicted trace to `path`.
sim::SimRun predict_to(const plan::Plan& plan, const std::string& path) {
  const sim::SimRun run = sim::simulate(plan);
  std::ostringstream trace;
  timeline::write_chrome_trace(predicted_timeline(plan, run), trace);
  write_file_atomically(path, trace.str());
  return run;
}

}  // namespace

int main_job() {
  const plan::Plan p = ScenarioArgs{}.resolve();
  const fs::path out = fs::path("parallax-out") / p.scenario.name;
  fs::create_directories(out);
  std::ostringstream text;  // report.txt

  const sim::SimRun predicted = predict_to(p, (out / ("predicted-" + p.scenario.hardware.name + ".json")).string());
  text << plan_text(p) << "\n" << simulate_text(p, predicted, sim::compute_metrics(p, predicted)) << "\n";
  std::cout << text.str() << std::flush;

  // The same plan predicted for this machine, which is where it is about to run: on this
  // machine's profile, as the scenario's own may name GPUs this machine lacks (the default's T4s),
  // which `run` refuses.
  const std::string profile = this_machine_profile(p);
  ScenarioArgs here;
  here.sets = {"hardware=" + profile, "data.steps=" + std::to_string(kSteps)};
  const plan::Plan local = here.resolve();
  const std::string local_path = (out / "predicted-here.json").string();
  const sim::SimRun local_run = predict_to(local, local_path);

  // How long, by the prediction for this machine (its steps; the ranks' start-up comes on top).
  const double step_s = sim::compute_metrics(local, local_run).step_time.to_seconds();
  std::cerr << "\nrunning " << kSteps << " steps of " << p.scenario.name << " for real on this machine's CPU ("
            << p.world_size << " ranks; predicted " << fmt("%.0f", step_s) << " s a step here)\n";
  RunArgs run;
  run.sets = here.sets;
  run.trace_path = (out / "measured.json").string();
  if (const int rc = run_command(run); rc != 0) return rc;

  const timeline::Timeline measured = timeline::read_trace(run.trace_path).timeline;
  const auto comparison = timeline::compare(timeline::read_trace(local_path).timeline, measured);
  const std::string heading = "predicted (" + (profile == "cpu-host" ? std::string("uncalibrated cpu-host profile")
                                                                     : "calibrated profile " + profile) +
                              ") vs measured on this machine\n";
  std::cout << "\n" << heading << compare_text(comparison);
  text << heading << compare_text(comparison);
  write_file_atomically((out / "report.txt").string(), text.str());
  write_file_atomically((out / "report.json").string(), compare_json(comparison).dump(2) + "\n");
  report::ReportInput page = simulated_report_input(local, local_run);
  page.measured = measured;
  page.title = p.scenario.name + " on this machine";
  write_file_atomically((out / "report.html").string(), report::render_html(page));
  std::cout << "\nwrote " << out.string() << "/: predicted-" << p.scenario.hardware.name
            << ".json, predicted-here.json, measured.json (open them in https://ui.perfetto.dev), report.txt, "
               "report.json, report.html (open it in a browser)\n";
  return 0;
}

}  // namespace parallax::cli
