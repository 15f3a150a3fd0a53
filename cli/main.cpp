// The `parallax` command. Exit codes: 0 done, 1 failed while running, 2 bad input (scenario,
// schedule, flags). With --json, stdout carries one JSON object and nothing else; human text
// and progress go to stderr.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>

#include "cli/calibrate_command.hpp"
#include "cli/tune_command.hpp"
#include "cli/validate_command.hpp"
#include "cli/output.hpp"
#include "cli/plan_report.hpp"
#include "cli/report_command.hpp"
#include "cli/run_command.hpp"
#include "cli/sim_report.hpp"
#include "cli/trace_report.hpp"
#include "plan/error.hpp"
#include "plan/knobs.hpp"
#include "plan/plan.hpp"
#include "plan/schedule_csv.hpp"
#include "plan/trainer_export.hpp"
#include "plan/trace_writer.hpp"
#include "sim/metrics.hpp"
#include "sim/simulator.hpp"

namespace {

using namespace parallax;

constexpr int kExitFailed = 1;
constexpr int kExitBadInput = 2;

/// The options every scenario command shares.
struct ScenarioArgs {
  std::string scenario;
  std::vector<std::string> sets;
  bool json = false;

  void add_to(CLI::App* cmd, bool with_json = true) {
    cmd->add_option("SCENARIO", scenario,
                    "Scenario YAML file; without one, the built-in default (GPipe transformer on 2 T4s, "
                    "batch 32, chunks 16)");
    cmd->add_option("--set", sets, "Override a scenario value, e.g. --set parallel.chunks=8 (repeatable)")
        ->allow_extra_args(false)  // each --set takes one value, so SCENARIO may follow it
        ->type_name("KEY=VALUE");
    if (with_json) cmd->add_flag("--json", json, "Print one JSON object on stdout instead of text");
  }

  plan::Plan resolve() const { return plan::resolve_plan(plan::load_scenario(scenario, sets)); }
};

int run_plan(const ScenarioArgs& args) {
  const plan::Plan p = args.resolve();
  if (args.json) std::cout << cli::plan_json(p).dump(2) << "\n";
  else std::cout << cli::plan_text(p);
  return 0;
}

// The plan as the trainer's own command: Megatron-LM's arguments and torchrun line, or torchtitan's
// job config. Exit 2 where the trainer cannot express the plan.
int run_export(const std::string& trainer, const ScenarioArgs& args) {
  const plan::Plan p = args.resolve();
  const plan::TrainerExport e = trainer == "megatron" ? plan::export_megatron(p) : plan::export_torchtitan(p);
  std::cout << e.text;
  return 0;
}

int run_schedule(const ScenarioArgs& args, const std::string& csv_path) {
  const plan::Plan p = args.resolve();
  if (!csv_path.empty()) {
    std::ostringstream csv;
    plan::write_schedule_csv(p.schedule, csv);
    cli::write_file_atomically(csv_path, csv.str());
    std::cerr << "wrote " << csv_path << " (PyTorch pipelining CSV, compute actions of one mini-batch)\n";
  }
  if (args.json) std::cout << cli::schedule_json(p).dump(2) << "\n";
  else std::cout << cli::schedule_text(p);
  return 0;
}

int run_simulate(const ScenarioArgs& args, const std::string& trace_path) {
  const plan::Plan p = args.resolve();
  cli::require_output_folder(trace_path);
  sim::SimOptions options;
  options.record_link_samples = !trace_path.empty();
  const sim::SimRun run = sim::simulate(p, options);
  const sim::Metrics m = sim::compute_metrics(p, run);
  if (!trace_path.empty()) {
    std::ostringstream trace;
    plan::write_chrome_trace(cli::predicted_timeline(p, run), trace);
    cli::write_file_atomically(trace_path, trace.str());
  }
  if (args.json) {
    std::cout << cli::simulate_json(p, run, m).dump(2) << "\n";
  } else {
    std::cout << cli::simulate_text(p, run, m);
  }
  if (!trace_path.empty()) std::cerr << "wrote " << trace_path << " (open it in https://ui.perfetto.dev)\n";
  return 0;
}

int run_trace(const std::vector<std::string>& files, bool json) {
  std::vector<profiler::LoadedTrace> traces;
  for (size_t i = 0; i < files.size(); ++i) traces.push_back(profiler::read_trace(files[i], static_cast<int>(i)));
  const auto summary = cli::trace_summary_json(traces);
  if (json) std::cout << summary.dump(2) << "\n";
  else std::cout << cli::trace_summary_text(summary);
  return 0;
}

profiler::LoadedTrace read_parallax_trace(const std::string& path) {
  auto t = profiler::read_trace(path);
  if (t.format != "parallax")
    throw plan::InputError(plan::Location{path}, "compare needs Parallax traces (from parallax simulate -o or parallax run -o); "
                                                 "this one is a " + t.format + " trace");
  return t;
}

int run_compare(const std::string& predicted, const std::string& measured, bool json) {
  const auto p = read_parallax_trace(predicted), m = read_parallax_trace(measured);
  const auto report = profiler::compare(p.timeline, m.timeline);
  if (json) std::cout << cli::compare_json(report).dump(2) << "\n";
  else std::cout << cli::compare_text(report);
  if (!report.only_predicted.empty() || !report.only_measured.empty())
    std::cerr << "warning: the two traces hold different actions: they are not of the same plan\n";
  return 0;
}

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
/// (`parallax calibrate --quick`, about a minute) and kept in parallax-out/ for the next runs; the
/// built-in cpu-host profile if calibrating fails.
std::string this_machine_profile(const std::string& self, const plan::Plan& plan) {
  const std::string path = cli::default_calibration_path();
  if (covers(path, plan)) {
    std::cerr << "\nusing this machine's calibration " << path << " (delete it to measure again)\n";
    return path;
  }
  std::cerr << "\ncalibrating this machine first (parallax calibrate --quick; once, kept in " << path << ")\n";
  cli::CalibrateArgs args;
  args.quick = true;
  const int rc = cli::calibrate_command(args, {self, "calibrate", "--quick"});
  if (rc == 0 && covers(path, plan)) return path;
  std::cerr << "warning: calibrating failed (exit " << rc << "); predicting with the uncalibrated cpu-host profile\n";
  return "cpu-host";
}

/// The main job on the default scenario: plan, predict (on the scenario's hardware and on this
/// machine, calibrated), run for real on this machine's CPU, compare, and leave everything in one
/// folder.
int run_main_job(const std::string& self) {
  namespace fs = std::filesystem;
  constexpr int kSteps = 4;  // one warm-up step and three measured ones
  ScenarioArgs args;
  const plan::Plan p = args.resolve();
  const fs::path out = fs::path("parallax-out") / p.scenario.name;
  fs::create_directories(out);
  std::ostringstream report;

  const sim::SimRun predicted = sim::simulate(p);
  const sim::Metrics predicted_metrics = sim::compute_metrics(p, predicted);
  const std::string predicted_path = (out / ("predicted-" + p.scenario.hardware.name + ".json")).string();
  std::ostringstream trace;
  plan::write_chrome_trace(cli::predicted_timeline(p, predicted), trace);
  cli::write_file_atomically(predicted_path, trace.str());
  report << cli::plan_text(p) << "\n" << cli::simulate_text(p, predicted, predicted_metrics) << "\n";
  std::cout << report.str() << std::flush;

  // The same plan predicted for this machine, which is where it is about to run.
  const std::string profile = this_machine_profile(self, p);
  ScenarioArgs here;
  here.sets = {"hardware=" + profile, "data.steps=" + std::to_string(kSteps)};
  const plan::Plan local = here.resolve();
  const sim::SimRun local_run = sim::simulate(local);
  const std::string local_path = (out / "predicted-here.json").string();
  trace.str("");
  plan::write_chrome_trace(cli::predicted_timeline(local, local_run), trace);
  cli::write_file_atomically(local_path, trace.str());

  const std::string measured_path = (out / "measured.json").string();
  // How long, by the prediction for this machine (its steps; the ranks' start-up comes on top).
  const double step_s = sim::compute_metrics(local, local_run).step_time.to_seconds();
  std::cerr << "\nrunning " << kSteps << " steps of " << p.scenario.name << " for real on this machine's CPU ("
            << p.world_size << " ranks; predicted " << cli::fmt("%.0f", step_s) << " s a step here)\n";
  // On this machine's profile, as predicted above: the scenario's own may name GPUs this machine
  // lacks (the default's T4s), which `run` refuses.
  cli::RunArgs run;
  run.sets = here.sets;
  run.trace_path = measured_path;
  const int rc = cli::run_command(
      run, {self, "run", "--set", run.sets.at(0), "--set", run.sets.at(1), "-o", measured_path});
  if (rc != 0) return rc;

  const auto comparison =
      profiler::compare(profiler::read_trace(local_path).timeline, profiler::read_trace(measured_path).timeline);
  const std::string compare_text = cli::compare_text(comparison);
  const std::string heading = "predicted (" + (profile == "cpu-host" ? std::string("uncalibrated cpu-host profile")
                                                                     : "calibrated profile " + profile) +
                              ") vs measured on this machine\n";
  std::cout << "\n" << heading << compare_text;
  report << heading << compare_text;
  cli::write_file_atomically((out / "report.txt").string(), report.str());
  cli::write_file_atomically((out / "report.json").string(), cli::compare_json(comparison).dump(2) + "\n");
  parallax::report::ReportInput page = cli::simulated_report_input(local, local_run);
  page.measured = profiler::read_trace(measured_path).timeline;
  page.title = p.scenario.name + " on this machine";
  cli::write_file_atomically((out / "report.html").string(), parallax::report::render_html(page));
  std::cout << "\nwrote " << out.string() << "/: predicted-" << p.scenario.hardware.name
            << ".json, predicted-here.json, measured.json (open them in https://ui.perfetto.dev), report.txt, "
               "report.json, report.html (open it in a browser)\n";
  return 0;
}

// The knob table (plan/knobs.hpp) as text, or as the Markdown table docs/scenarios.md holds.
int run_keys(bool markdown) {
  auto cell = [](const std::string& text) {  // a | inside a Markdown cell ends it
    std::string out;
    for (char c : text) {
      if (c == '|') out += '\\';
      out += c;
    }
    return out;
  };
  const plan::Settings defaults;
  if (markdown) std::cout << "| key | default | values | meaning |\n|---|---|---|---|\n";
  for (const plan::Knob& k : plan::knobs()) {
    const std::string def = k.format(k.get(defaults)), tuned = k.tuned ? "; tune searches it" : "";
    if (markdown)
      std::cout << "| `" << k.key << "` | `" << def << "` | " << cell(k.allowed()) << " | " << cell(k.doc) << tuned << " |\n";
    else
      std::cout << k.key << " (default " << def << "; " << k.allowed() << ")\n    " << k.doc << tuned << "\n";
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "Parallax: predict, run and compare distributed training plans.\n"
      "Without a command, runs the main job on the built-in default scenario."};
  app.require_subcommand(0, 1);
  app.set_version_flag("--version", "parallax 0.1.0");

  ScenarioArgs plan_args;
  auto* plan_cmd = app.add_subcommand(
      "plan", "Resolve a scenario: rank grid, layers per stage, DDP buckets, memory per rank");
  plan_args.add_to(plan_cmd);
  plan_cmd->footer("Example: parallax plan scenarios/gpipe-1b-4xA100.yaml --set parallel.schedule=1f1b");

  ScenarioArgs sched_args;
  std::string csv_path;
  auto* sched_cmd = app.add_subcommand(
      "schedule", "Per-rank action lists of one optimizer step (F, B or I and W, SEND/RECV, ALLREDUCE, OPTIM)");
  sched_args.add_to(sched_cmd);
  sched_cmd->add_option("--csv", csv_path,
                        "Also write the compute order as PyTorch pipelining CSV (one row per rank); "
                        "read one back with parallel.schedule: FILE.csv");
  sched_cmd->footer("Example: parallax schedule --set parallel.schedule=1f1b --csv 1f1b.csv");

  ScenarioArgs sim_args;
  std::string trace_path;
  auto* sim_cmd = app.add_subcommand(
      "simulate", "Predict one optimizer step: step time, bubbles, exposed communication, links, memory, critical path");
  sim_args.add_to(sim_cmd);
  sim_cmd->add_option("-o,--output", trace_path, "Write the predicted timeline as a Chrome trace (Perfetto)");
  sim_cmd->footer("Example: parallax simulate --set parallel.schedule=1f1b -o predicted.json");

  cli::RunArgs run_args;
  auto* run_cmd = app.add_subcommand(
      "run", "Run the plan for real with LibTorch (Gloo on CPUs, NCCL on CUDA GPUs), and record the measured timeline");
  run_cmd->add_option("SCENARIO", run_args.scenario, "Scenario YAML file; without one, the built-in default");
  run_cmd->add_option("--set", run_args.sets, "Override a scenario value (repeatable)")
      ->allow_extra_args(false)
      ->type_name("KEY=VALUE");
  run_cmd->add_flag("--json", run_args.json, "Print one JSON object on stdout: steps, accuracy, trace");
  run_cmd->add_option("--nproc", run_args.nproc, "Local ranks to start (default: the plan's world size)");
  run_cmd->add_option("-o,--output", run_args.trace_path, "Write the measured timeline as a Chrome trace");
  run_cmd->add_option("--checkpoint-dir", run_args.checkpoint_dir, "Folder for checkpoints");
  run_cmd->add_option("--checkpoint-every", run_args.checkpoint_every, "Save a checkpoint every K optimizer steps");
  run_cmd->add_flag("--resume", run_args.resume, "Continue from the latest complete checkpoint in --checkpoint-dir");
  run_cmd->add_option("--timeout", run_args.timeout_s,
                      "Seconds a rank waits for a peer before the job fails (default 60)");
  run_cmd->footer(
      "Examples:\n  parallax run scenarios/mlp-fashion-mnist-ddp2.yaml -o measured.json\n"
      "  torchrun --nproc-per-node 2 $(which parallax) run scenarios/mlp-fashion-mnist-pipeline2.yaml");

  std::vector<std::string> trace_files;
  bool trace_json = false;
  auto* trace_cmd = app.add_subcommand(
      "trace", "Summarise traces: Parallax's, or PyTorch profiler (Kineto) JSON, gzipped or not; several files of one job merge");
  trace_cmd->add_option("FILE", trace_files, "Trace files (.json or .json.gz)")->required();
  trace_cmd->add_flag("--json", trace_json, "Print one JSON object on stdout");

  std::string predicted_path, measured_path;
  bool compare_json = false;
  auto* compare_cmd = app.add_subcommand(
      "compare", "Predicted vs measured, action by action: step time, bubbles, exposed communication, per-kind errors");
  compare_cmd->add_option("PREDICTED", predicted_path, "Trace from parallax simulate -o")->required();
  compare_cmd->add_option("MEASURED", measured_path, "Trace from parallax run -o")->required();
  compare_cmd->add_flag("--json", compare_json, "Print one JSON object on stdout");

  cli::CalibrateArgs cal_args;
  auto* cal_cmd = app.add_subcommand(
      "calibrate",
      "Measure this machine with the executor's own code (layers, loss, data, optimizer, Gloo, and a real "
      "probe run for in-run slowdowns) and write a calibrated hardware profile");
  cal_cmd->add_option("SCENARIO", cal_args.scenarios,
                      "Scenarios whose layer signatures to measure (default: the built-in scenario, scenarios/*.yaml "
                      "on cpu-host and scenarios/accuracy/*.yaml under this folder)");
  cal_cmd->add_option("-o,--output", cal_args.output, "Profile to write (default parallax-out/calibrated-HOST.yaml)");
  cal_cmd->add_option("--base", cal_args.base, "Profile whose device and network the output keeps (default cpu-host). A GPU profile "
                                  "(device.kind: cuda, e.g. h100-nvlink-ib) measures this machine's first GPU instead, "
                                  "as one rank with CUDA events, and keeps the profile's links and NCCL section");
  cal_cmd->add_flag("--quick", cal_args.quick, "Only the micro-batch sizes the scenarios use, fewer repeats");
  cal_cmd->add_flag("--launch", cal_args.launch,
                    "GPU only, new and not yet run on a GPU: also time each layer and optimizer step with the GPU kept busy "
                    "ahead (the kernels alone) and the host's time to launch them, so that simulate runs launch-bound "
                    "steps at the larger of the two (docs/simulator.md, Launch-bound steps); about twice as long");
  cal_cmd
      ->add_option("--precision", cal_args.precisions,
                   "Also measure every layer at these precisions (fp32, bf16), for plans swept or tuned to them; "
                   "each scenario's own precision is always measured")
      ->allow_extra_args(false)
      ->delimiter(',');
  cal_cmd
      ->add_option("--probe-with", cal_args.probe_with,
                   "Run the in-run probes on these scenarios' models instead of the measured ones (repeatable), so "
                   "that plans you will validate never run during calibration")
      ->allow_extra_args(false)
      ->type_name("SCENARIO");
  cal_cmd
      ->add_option("--from-trace", cal_args.from_traces,
                   "What if: instead of measuring this machine, fit the job's profile to measured runs of one "
                   "configuration (parallax run -o traces, or PyTorch profiler traces of torch.distributed.pipelining "
                   "with their PP:<action> spans; repeatable). SCENARIO and --set give that configuration; the "
                   "output predicts the job's others with --set hardware=FILE")
      ->allow_extra_args(false)
      ->type_name("TRACE");
  cal_cmd->add_option("--set", cal_args.sets, "With --from-trace: a value of the measured configuration (repeatable)")
      ->allow_extra_args(false)
      ->type_name("KEY=VALUE");
  cal_cmd->footer(
      "Examples:\n  parallax calibrate -o here.yaml && parallax simulate scenarios/mlp-fashion-mnist-pipeline2.yaml "
      "--set hardware=here.yaml\n  parallax calibrate --quick my-model.yaml -o my-model-here.yaml\n  parallax calibrate "
      "--precision bf16 my-model.yaml -o here.yaml   # fp32 and bf16 layers\n"
      "  parallax run job.yaml -o run.json && parallax calibrate --from-trace run.json job.yaml -o fitted.yaml &&\n"
      "    parallax tune job.yaml --set hardware=fitted.yaml   # what if, from a measured run");

  cli::ValidateArgs val_args;
  auto* val_cmd = app.add_subcommand(
      "validate",
      "Run configurations for real and simulate them with the calibrated profile: step time errors, bubbles, "
      "and how well the prediction ranks each sweep");
  val_cmd->add_option("SCENARIO", val_args.scenarios, "Scenario files to validate")->required();
  val_cmd->add_option("--set", val_args.sets, "Override a scenario value in every configuration (repeatable)")
      ->allow_extra_args(false)
      ->type_name("KEY=VALUE");
  val_cmd->add_option("--sweep", val_args.sweeps,
                      "Run each scenario once per value and rank them together (repeatable; each is its own sweep)")
      ->allow_extra_args(false)
      ->type_name("KEY=V1,V2,...");
  val_cmd->add_option("--profile", val_args.profile,
                      "Calibrated profile to predict with (default parallax-out/calibrated-HOST.yaml, from parallax "
                      "calibrate)");
  val_cmd->add_option("--steps", val_args.steps,
                      "Steps per run; the first is a warm-up (default: enough for 2 s of predicted steps, 21 to 401)");
  val_cmd->add_option("--repeats", val_args.repeats,
                      "Runs per configuration, in rounds over them all; the measured step is the median of the runs' "
                      "undisturbed steps, and the spread is over the runs (default 1)");
  val_cmd->add_option("--keep-traces", val_args.keep_traces,
                      "Keep each run's measured trace in this folder, as INDEX.runR.json (INDEX: the configuration's "
                      "place in the output, from 0): for calibrate --from-trace")
      ->type_name("DIR");
  val_cmd->add_flag("--json", val_args.json,
                    "Print one JSON object on stdout: statistic, configurations[] (predicted_ms, measured_ms, error, spread, "
                    "median_ms, ...), mape, mean_signed_error, worst_error, sweeps[]");
  val_cmd->footer(
      "The measured step is the undisturbed step: the 20th percentile of a run's steps after warm-up (slow bursts on a\n"
      "shared machine move the median, not the fast level); the median and the share of disturbed steps are printed\n"
      "beside it. Step times vary from run to run: use --repeats 3 and read the spread beside each error.\n"
      "Examples:\n  parallax calibrate && parallax validate scenarios/mlp-fashion-mnist-pipeline2.yaml "
      "--sweep parallel.chunks=2,4,8,16\n"
      "  parallax validate scenarios/accuracy/*.yaml --repeats 3 --json > accuracy.json");

  cli::TuneArgs tune_args;
  auto* tune_cmd = app.add_subcommand(
      "tune",
      "Search chunks, partition_len, schedule, data x context x pipeline x tensor, DDP buckets, recompute and precision on the "
      "simulator for the fastest plan that fits device memory; optionally confirm the top few with real runs");
  tune_cmd->add_option("SCENARIO", tune_args.scenario, "Scenario YAML file; without one, the built-in default");
  tune_cmd->add_option("--set", tune_args.sets, "Override a scenario value before tuning (repeatable)")
      ->allow_extra_args(false)
      ->type_name("KEY=VALUE");
  tune_cmd->add_option("--world", tune_args.world, "Ranks (GPUs) to spread over (default: the scenario's data x context x pipeline x tensor)");
  tune_cmd->add_option("--search", tune_args.searches,
                       "Search only these values of a key, e.g. parallel.chunks=4,8,16 or parallel.partition_len="
                       "balanced,[5,7] (repeatable; parallel.grad_accumulation and parallel.rank_order are searched only when given here)")
      ->allow_extra_args(false)
      ->type_name("KEY=V1,V2,...");
  tune_cmd->add_option("--fix", tune_args.fixes, "Keep a key as the scenario has it, e.g. parallel.precision (repeatable)")
      ->allow_extra_args(false)
      ->type_name("KEY");
  tune_cmd->add_option("--objective", tune_args.objective,
                       "step: fastest step (ties: less memory); memory: least peak memory (ties: faster)")
      ->default_str("step");
  tune_cmd->add_option("--max-configs", tune_args.max_configs,
                       "Simulate at most N configurations, most promising (lowest bound) first");
  tune_cmd->add_option("--time-limit", tune_args.time_limit_s, "Stop the search after S seconds with the best so far (planning, in a shuffled order, takes at most half; "
                       "the ranked rows' full simulations come after)");
  tune_cmd->add_option("--top", tune_args.top, "Configurations in the ranked table (default 10)");
  tune_cmd->add_option("--validate", tune_args.validate,
                       "Run K configurations for real on this machine (as parallax run does): the best prediction, the best of "
                       "each other data x context x pipeline x tensor layout, then the next best; the best measured is the pick");
  tune_cmd->add_option("--validate-steps", tune_args.validate_steps, "Steps of each --validate run (default 200: one run per configuration, so a long one)");
  tune_cmd->add_option("--threads", tune_args.threads, "Threads to simulate on (default: one per core)");
  tune_cmd->add_flag("--json", tune_args.json,
                     "Print one JSON object on stdout: configs_evaluated, configs_pruned, wall_s, baseline, best, "
                     "ranked[], pareto[], validated[]");
  tune_cmd->add_option("-o,--output", tune_args.output, "Write the pick as a scenario file (atomically)");
  tune_cmd->footer(
      "The global batch (data x batch_size x grad_accumulation) never changes; every pick fits device memory.\n"
      "Predictions are as good as the hardware profile: on this machine, tune with its calibration "
      "(parallax calibrate) before --validate.\n"
      "Ctrl-C stops the search and prints the best so far.\n"
      "Examples:\n  parallax tune scenarios/gpipe-1b-4xA100.yaml -o best.yaml\n"
      "  parallax tune scenarios/gpipe-1b-4xA100.yaml --world 64 --fix parallel.precision --top 5\n"
      "  parallax calibrate && parallax tune scenarios/mlp-fashion-mnist-pipeline2.yaml "
      "--set hardware=parallax-out/calibrated-$(hostname).yaml --search parallel.chunks=1,2,4,8,16 --validate 3");

  cli::ReportArgs report_args;
  auto* report_cmd = app.add_subcommand(
      "report",
      "Write a self-contained HTML report (no network needed): timeline with measured actions inside their "
      "predicted outlines, step time and its error, bubbles, exposed communication, memory, links, per-kind "
      "errors, critical path, and a tune result's ranking");
  report_cmd->add_option("SCENARIO", report_args.scenario,
                         "Scenario to simulate when no --predicted is given; without one, the built-in default");
  report_cmd->add_option("--set", report_args.sets, "Override a scenario value (repeatable)")
      ->allow_extra_args(false)
      ->type_name("KEY=VALUE");
  report_cmd->add_option("--predicted", report_args.predicted, "Predicted trace (parallax simulate -o) instead of simulating");
  report_cmd->add_option("--measured", report_args.measured, "Measured trace of the same plan (parallax run -o)");
  report_cmd->add_option("--tune", report_args.tune, "A tune result (the JSON of parallax tune --json): ranked table and Pareto chart");
  report_cmd->add_option("-o,--output", report_args.output, "The HTML file to write (atomically)");
  report_cmd->footer(
      "Examples:\n  parallax report scenarios/gpipe-1b-4xA100.yaml -o report.html\n"
      "  parallax report --predicted predicted.json --measured measured.json -o report.html\n"
      "  parallax tune --json > tune.json && parallax report --tune tune.json -o report.html");

  ScenarioArgs export_args;
  std::string export_trainer;
  auto* export_cmd = app.add_subcommand(
      "export", "Print the plan as its trainer takes it: Megatron-LM's arguments with the torchrun line, or torchtitan's TOML job config");
  export_cmd->add_option("TRAINER", export_trainer, "megatron or torchtitan")->required()->check(CLI::IsMember({"megatron", "torchtitan"}));
  export_args.add_to(export_cmd, /*with_json=*/false);
  export_cmd->footer(
      "What the trainer cannot express (an explicit partition_len it cannot split the same way, a schedule it lacks, LibTorch's\n"
      "encoder block) exits 2 saying which key to change. Plan with framework: megatron for Megatron-LM's step time.\n"
      "Examples: parallax export megatron scenarios/llama-3.1-70b-64xH100.yaml\n"
      "          parallax export torchtitan scenarios/llama-3.1-70b-64xH100.yaml --set parallel.data=1 --set data.batch_size=128");

  bool keys_markdown = false;
  auto* keys_cmd = app.add_subcommand(
      "keys", "List the knobs: the scenario keys plan, simulate, tune and the GUI change (parallel.*, data.batch_size)");
  keys_cmd->add_flag("--markdown", keys_markdown, "As the Markdown table of docs/scenarios.md");
  keys_cmd->footer("Example: parallax keys; then parallax simulate --set parallel.chunks=8");

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int code = app.exit(e);
    return code == 0 ? 0 : kExitBadInput;
  }

  try {
    if (*plan_cmd) return run_plan(plan_args);
    if (*sched_cmd) return run_schedule(sched_args, csv_path);
    if (*sim_cmd) return run_simulate(sim_args, trace_path);
    if (*trace_cmd) return run_trace(trace_files, trace_json);
    if (*compare_cmd) return run_compare(predicted_path, measured_path, compare_json);
    if (*run_cmd) return cli::run_command(run_args, std::vector<std::string>(argv, argv + argc));
    if (*cal_cmd && !cal_args.from_traces.empty()) return cli::calibrate_from_traces(cal_args);
    if (*cal_cmd && !cal_args.sets.empty())
      throw plan::InputError(plan::Location{"--set"}, "calibrate takes --set only with --from-trace (the measured configuration)");
    if (*cal_cmd) return cli::calibrate_command(cal_args, std::vector<std::string>(argv, argv + argc));
    if (*val_cmd) return cli::validate_command(val_args, std::filesystem::read_symlink("/proc/self/exe").string());
    if (*report_cmd) return cli::report_command(report_args);
    if (*keys_cmd) return run_keys(keys_markdown);
    if (*export_cmd) return run_export(export_trainer, export_args);
    if (*tune_cmd) return cli::tune_command(tune_args, std::filesystem::read_symlink("/proc/self/exe").string());
    return run_main_job(argv[0]);
  } catch (const plan::InputError& e) {
    std::cerr << e.what() << "\n";
    return kExitBadInput;
  } catch (const std::exception& e) {
    std::cerr << "parallax: failed: " << e.what() << "\n";
    return kExitFailed;
  }
}
