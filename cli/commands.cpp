#include "cli/commands.hpp"

#include <filesystem>
#include <memory>
#include <vector>

#include "cli/calibrate_command.hpp"
#include "cli/report_command.hpp"
#include "cli/run_command.hpp"
#include "cli/scenario_commands.hpp"
#include "cli/tune_command.hpp"
#include "cli/validate_command.hpp"

namespace parallax::cli {
namespace {

// A count or a limit given on the command line must be above 0 (a 0 or a negative one would read
// as "not given" and be ignored silently): a parse error, exit 2, naming the flag.
CLI::Validator positive() {
  return CLI::Validator(
      [](std::string& text) -> std::string {
        try {
          if (std::stod(text) > 0) return "";
        } catch (const std::exception&) {
          return "";  // not a number: the option's own conversion says so
        }
        return "must be more than 0, not " + text;
      },
      "> 0");
}

/// This binary, which validate and tune --validate start as `parallax run` child processes.
std::string self() { return std::filesystem::read_symlink("/proc/self/exe").string(); }

/// The options every scenario command shares.
void add_scenario_options(CLI::App* cmd, ScenarioArgs& args, bool with_json = true) {
  cmd->add_option("SCENARIO", args.scenario,
                  "Scenario YAML file; without one, the built-in default (GPipe transformer on 2 T4s, "
                  "batch 32, chunks 16)");
  cmd->add_option("--set", args.sets, "Override a scenario value, e.g. --set parallel.chunks=8 (repeatable)")
      ->allow_extra_args(false)  // each --set takes one value, so SCENARIO may follow it
      ->type_name("KEY=VALUE");
  if (with_json) cmd->add_flag("--json", args.json, "Print one JSON object on stdout instead of text");
}

Runner define_plan(CLI::App& app) {
  auto plan_args = std::make_shared<ScenarioArgs>();
  auto* plan_cmd = app.add_subcommand(
      "plan", "Resolve a scenario: rank grid, layers per stage, DDP buckets, memory per rank");
  add_scenario_options(plan_cmd, *plan_args);
  plan_cmd->footer("Example: parallax plan scenarios/gpipe-1b-4xA100.yaml --set parallel.schedule=1f1b");
  return [=] { return plan_command(*plan_args); };
}

Runner define_schedule(CLI::App& app) {
  auto sched_args = std::make_shared<ScenarioArgs>();
  auto csv_path = std::make_shared<std::string>();
  auto* sched_cmd = app.add_subcommand(
      "schedule", "Per-rank action lists of one optimizer step (F, B or I and W, SEND/RECV, ALLREDUCE, OPTIM)");
  add_scenario_options(sched_cmd, *sched_args);
  sched_cmd->add_option("--csv", *csv_path,
                        "Also write the compute order as PyTorch pipelining CSV (one row per rank); "
                        "read one back with parallel.schedule: FILE.csv");
  sched_cmd->footer("Example: parallax schedule --set parallel.schedule=1f1b --csv 1f1b.csv");
  return [=] { return schedule_command(*sched_args, *csv_path); };
}

Runner define_simulate(CLI::App& app) {
  auto sim_args = std::make_shared<ScenarioArgs>();
  auto trace_path = std::make_shared<std::string>();
  auto* sim_cmd = app.add_subcommand(
      "simulate", "Predict one optimizer step: step time, bubbles, exposed communication, links, memory, critical path");
  add_scenario_options(sim_cmd, *sim_args);
  sim_cmd->add_option("-o,--output", *trace_path, "Write the predicted timeline as a Chrome trace (Perfetto)");
  sim_cmd->footer(
      "On a GPU profile that published runs were predicted on (A100, H100, H200, B200), the step time is followed by\n"
      "how the profile's predictions held on them (`published_check` in the profile; docs/accuracy.md).\n"
      "Example: parallax simulate --set parallel.schedule=1f1b -o predicted.json\n"
      "         parallax simulate scenarios/llama-3.1-70b-64xH100.yaml");
  return [=] { return simulate_command(*sim_args, *trace_path); };
}

Runner define_run(CLI::App& app) {
  auto run_args = std::make_shared<RunArgs>();
  auto* run_cmd = app.add_subcommand(
      "run", "Run the plan for real with LibTorch (Gloo on CPUs, NCCL on CUDA GPUs), and record the measured timeline");
  run_cmd->add_option("SCENARIO", run_args->scenario, "Scenario YAML file; without one, the built-in default");
  run_cmd->add_option("--set", run_args->sets, "Override a scenario value (repeatable)")
      ->allow_extra_args(false)
      ->type_name("KEY=VALUE");
  run_cmd->add_flag("--json", run_args->json, "Print one JSON object on stdout: steps, accuracy, trace");
  run_cmd->add_option("--nproc", run_args->nproc, "Local ranks to start (default: the plan's world size)")
      ->check(positive());
  run_cmd->add_option("-o,--output", run_args->trace_path, "Write the measured timeline as a Chrome trace");
  run_cmd->add_option("--checkpoint-dir", run_args->checkpoint_dir, "Folder for checkpoints");
  run_cmd->add_option("--checkpoint-every", run_args->checkpoint_every, "Save a checkpoint every K optimizer steps, and after the last")
      ->check(positive());
  run_cmd->add_flag("--resume", run_args->resume, "Continue from the latest complete checkpoint in --checkpoint-dir");
  run_cmd->add_option("--timeout", run_args->timeout_s,
                      "Seconds a rank waits for a peer before the job fails (default 60)");
  run_cmd->footer(
      "Examples:\n  parallax run scenarios/mlp-fashion-mnist-ddp2.yaml -o measured.json\n"
      "  torchrun --nproc-per-node 2 --no-python $(which parallax) run scenarios/mlp-fashion-mnist-pipeline2.yaml");
  return [=] { return run_command(*run_args); };
}

Runner define_trace(CLI::App& app) {
  auto trace_files = std::make_shared<std::vector<std::string>>();
  auto trace_json = std::make_shared<bool>(false);
  auto* trace_cmd = app.add_subcommand(
      "trace", "Summarise traces (lanes, communication, steps, GPU kernels by kind): Parallax's, or PyTorch profiler (Kineto) JSON, gzipped or not; several files of one job merge");
  trace_cmd->add_option("FILE", *trace_files, "Trace files (.json or .json.gz)")->required();
  trace_cmd->add_flag("--json", *trace_json, "Print one JSON object on stdout");
  return [=] { return trace_command(*trace_files, *trace_json); };
}

Runner define_compare(CLI::App& app) {
  auto predicted_path = std::make_shared<std::string>();
  auto measured_path = std::make_shared<std::string>();
  auto compare_json = std::make_shared<bool>(false);
  auto* compare_cmd = app.add_subcommand(
      "compare", "Predicted vs measured, action by action: step time, bubbles, exposed communication, per-kind errors");
  compare_cmd->add_option("PREDICTED", *predicted_path, "Trace from parallax simulate -o")->required();
  compare_cmd->add_option("MEASURED", *measured_path, "Trace from parallax run -o")->required();
  compare_cmd->add_flag("--json", *compare_json, "Print one JSON object on stdout");
  return [=] { return compare_command(*predicted_path, *measured_path, *compare_json); };
}

Runner define_calibrate(CLI::App& app) {
  auto cal_args = std::make_shared<CalibrateArgs>();
  auto* cal_cmd = app.add_subcommand(
      "calibrate",
      "Measure this machine with the executor's own code (layers, loss, data, optimizer, Gloo, and a real "
      "probe run for in-run slowdowns) and write a calibrated hardware profile; or, with --from-trace, fit a profile to "
      "measured runs (what-if: predict another plan from them)");
  cal_cmd->add_option("SCENARIO", cal_args->scenarios,
                      "Scenarios whose layer signatures to measure (default: the built-in scenario, scenarios/*.yaml "
                      "on cpu-host and scenarios/accuracy/*.yaml under this folder, else in the checkout the binary was built in)");
  cal_cmd->add_option("-o,--output", cal_args->output, "Profile to write (default parallax-out/calibrated-HOST.yaml)");
  cal_cmd->add_option("--base", cal_args->base, "Profile whose device and network the output keeps (default cpu-host). A GPU profile "
                                  "(device.kind: cuda, e.g. h100-nvlink-ib) measures this machine's first GPU instead, "
                                  "as one rank with CUDA events, and keeps the profile's links and NCCL section");
  cal_cmd->add_flag("--quick", cal_args->quick,
                    "Only the micro-batch sizes the scenarios use and their halves, fewer repeats, one pass over the layers "
                    "(a minute or two on a 2-core machine; with --tables a 3 x 3 x 3 grid and three lengths)");
  cal_cmd->add_flag("--tables", cal_args->tables,
                    "GPU only: measure the device's compute tables instead of layers (GEMMs over m, n, k of 256-4096 in bf16, "
                    "fp16 and fp8; memory-bound kernels; flash attention by sequence length) and write the --base profile "
                    "with them as its device.compute, set beside the base's own figure by figure on stderr. Takes no "
                    "SCENARIO; --quick times a smaller grid, --sizes another");
  cal_cmd
      ->add_option("--sizes", cal_args->sizes,
                   "With --tables: the GEMM grid's sizes, m, n and k alike (default 256,512,1024,2048,4096; 16-32768). "
                   "Training GEMMs reach m = 16k tokens and beyond; a grid to 16384 takes minutes, and the simulator "
                   "holds a table's figures flat beyond its largest size")
      ->allow_extra_args(false)
      ->delimiter(',')
      ->type_name("N,N,...");
  cal_cmd->add_flag("--launch", cal_args->launch,
                    "GPU only: also time each layer and optimizer step with the GPU kept busy "
                    "ahead (the kernels alone) and the host's time to launch them, so that simulate runs launch-bound "
                    "steps at the larger of the two (docs/simulator.md, Launch-bound steps); about twice as long");
  cal_cmd
      ->add_option("--precision", cal_args->precisions,
                   "Also measure every layer at these precisions (fp32, bf16; fp16 too on a GPU), for plans swept or tuned to them; "
                   "each scenario's own precision is always measured")
      ->allow_extra_args(false)
      ->delimiter(',');
  cal_cmd
      ->add_option("--probe-with", cal_args->probe_with,
                   "Run the in-run probes on these scenarios' models instead of the measured ones (repeatable), so "
                   "that plans you will validate never run during calibration")
      ->allow_extra_args(false)
      ->type_name("SCENARIO");
  auto* from_trace = cal_cmd
      ->add_option("--from-trace", cal_args->from_traces,
                   "What if: instead of measuring this machine, fit the job's profile to measured runs of one "
                   "configuration (parallax run -o traces, or PyTorch profiler traces of torch.distributed.pipelining "
                   "with their PP:<action> spans; repeatable). SCENARIO and --set give that configuration; the "
                   "output predicts the job's others with --set hardware=FILE")
      ->allow_extra_args(false)
      ->type_name("TRACE");
  // A fit starts from the job's own profile (its hardware) and measures nothing: the options that
  // say what to measure, or on what base, are refused beside it rather than ignored.
  for (const char* measuring : {"--base", "--quick", "--tables", "--sizes", "--launch", "--precision", "--probe-with"})
    from_trace->excludes(cal_cmd->get_option(measuring));
  cal_cmd->add_option("--set", cal_args->sets, "With --from-trace: a value of the measured configuration (repeatable)")
      ->allow_extra_args(false)
      ->type_name("KEY=VALUE");
  cal_cmd->footer(
      "Examples:\n  parallax calibrate -o here.yaml && parallax simulate scenarios/mlp-fashion-mnist-pipeline2.yaml "
      "--set hardware=here.yaml\n  parallax calibrate --quick my-model.yaml -o my-model-here.yaml\n  parallax calibrate "
      "--precision bf16 my-model.yaml -o here.yaml   # fp32 and bf16 layers\n"
      "  parallax run job.yaml -o run.json && parallax calibrate --from-trace run.json job.yaml -o fitted.yaml &&\n"
      "    parallax tune job.yaml --set hardware=fitted.yaml   # what if, from a measured run\n"
      "  parallax calibrate --tables --base h100-nvlink-ib -o h100-here.yaml   # on a GPU: its GEMM, memory and attention tables\n"
      "  parallax calibrate --tables --base h100-nvlink-ib --sizes 1024,2048,4096,8192,16384 -o h100-large.yaml");
  return [=] { return calibrate_command(*cal_args); };
}

Runner define_validate(CLI::App& app) {
  auto val_args = std::make_shared<ValidateArgs>();
  auto* val_cmd = app.add_subcommand(
      "validate",
      "Run configurations for real and simulate them with the calibrated profile: step time errors, bubbles, "
      "and how well the prediction ranks each sweep");
  val_cmd->add_option("SCENARIO", val_args->scenarios, "Scenario files to validate")->required();
  val_cmd->add_option("--set", val_args->sets, "Override a scenario value in every configuration (repeatable)")
      ->allow_extra_args(false)
      ->type_name("KEY=VALUE");
  val_cmd->add_option("--sweep", val_args->sweeps,
                      "Run each scenario once per value and rank them together (repeatable; each is its own sweep)")
      ->allow_extra_args(false)
      ->type_name("KEY=V1,V2,...");
  val_cmd->add_option("--profile", val_args->profile,
                      "Calibrated profile to predict with (default parallax-out/calibrated-HOST.yaml, from parallax "
                      "calibrate)");
  val_cmd->add_option("--steps", val_args->steps,
                      "Steps per run, 3 or more; the first is a warm-up (default: enough for 2 s of predicted steps, 21 to 401)")
      ->check(CLI::Range(3, 1 << 30));
  val_cmd->add_option("--repeats", val_args->repeats,
                      "Runs per configuration, in rounds over them all; the measured step is the median of the runs' "
                      "undisturbed steps, and the spread is over the runs (default 1)");
  val_cmd->add_option("--keep-traces", val_args->keep_traces,
                      "Keep each run's measured trace in this folder, as INDEX.runR.json (INDEX: the configuration's "
                      "place in the output, from 0): for calibrate --from-trace")
      ->type_name("DIR");
  val_cmd->add_flag("--json", val_args->json,
                    "Print one JSON object on stdout: statistic, configurations[] (predicted_ms, measured_ms, error, spread, "
                    "median_ms, ...), mape, mean_signed_error, worst_error, sweeps[]");
  val_cmd->footer(
      "The measured step is the undisturbed step: the 20th percentile of a run's steps after warm-up (slow bursts on a\n"
      "shared machine move the median, not the fast level); the median and the share of disturbed steps are printed\n"
      "beside it. Step times vary from run to run: use --repeats 3 and read the spread beside each error.\n"
      "Examples:\n  parallax calibrate && parallax validate scenarios/mlp-fashion-mnist-pipeline2.yaml "
      "--sweep parallel.chunks=2,4,8,16\n"
      "  parallax validate scenarios/accuracy/*.yaml --repeats 3 --json > accuracy.json");
  return [=] { return validate_command(*val_args, self()); };
}

Runner define_tune(CLI::App& app) {
  auto tune_args = std::make_shared<TuneArgs>();
  auto* tune_cmd = app.add_subcommand(
      "tune",
      "Search chunks, partition_len, schedule, data x context x pipeline x tensor, DDP buckets, recompute and precision on the "
      "simulator for the fastest plan that fits device memory; optionally confirm the top few with real runs");
  tune_cmd->add_option("SCENARIO", tune_args->scenario, "Scenario YAML file; without one, the built-in default");
  tune_cmd->add_option("--set", tune_args->sets, "Override a scenario value before tuning (repeatable)")
      ->allow_extra_args(false)
      ->type_name("KEY=VALUE");
  tune_cmd->add_option("--world", tune_args->world, "Ranks (GPUs) to spread over (default: the scenario's data x context x pipeline x tensor)")
      ->check(positive());
  tune_cmd->add_option("--search", tune_args->searches,
                       "Search only these values of a key, e.g. parallel.chunks=4,8,16 or parallel.partition_len="
                       "balanced,[5,7] (repeatable, one per key; parallel.grad_accumulation and parallel.rank_order are searched only "
                       "when given here). The scenario as given and PyTorch's defaults are always simulated beside the search, and "
                       "either may win")
      ->allow_extra_args(false)
      ->type_name("KEY=V1,V2,...");
  tune_cmd->add_option("--fix", tune_args->fixes, "Keep a key as the scenario has it, e.g. parallel.precision (repeatable)")
      ->allow_extra_args(false)
      ->type_name("KEY");
  tune_cmd->add_flag("--any-trainer", tune_args->any_trainer,
                     "Under framework: megatron or torchtitan, also search plans that trainer cannot run (DualPipeV, FSDP under "
                     "Megatron-LM, ...): parallax export then refuses such a pick");
  tune_cmd->add_option("--objective", tune_args->objective,
                       "step: fastest step (ties: less memory); memory: least peak memory (ties: faster)")
      ->default_str("step");
  tune_cmd->add_option("--max-configs", tune_args->max_configs,
                       "Simulate at most N configurations, most promising (lowest bound) first (the whole space is still listed "
                       "and planned first: --time-limit bounds the time)")
      ->check(positive());
  tune_cmd->add_option("--time-limit", tune_args->time_limit_s, "Stop the search after S seconds with the best so far (planning, in a shuffled order, takes at most two thirds; "
                       "the ranked rows' full simulations come after, with their own progress: seconds each for a plan of thousands of GPUs)")
      ->check(positive());
  tune_cmd->add_option("--top", tune_args->top, "Configurations in the ranked table (default 10)");
  tune_cmd->add_option("--validate", tune_args->validate,
                       "Run K configurations for real on this machine (as parallax run does): the best prediction, the best of "
                       "each other data x context x pipeline x tensor layout, then the next best; the best measured is the pick");
  tune_cmd->add_option("--validate-steps", tune_args->validate_steps, "Steps of each --validate run (default 200: one run per configuration, so a long one)")
      ->check(positive());
  tune_cmd->add_option("--threads", tune_args->threads, "Threads to simulate on, 1 to 1024 (default: one per core)")
      ->check(positive());
  tune_cmd->add_flag("--json", tune_args->json,
                     "Print one JSON object on stdout: configs_evaluated, configs_pruned, wall_s, baseline, best, "
                     "ranked[], pareto[], validated[]");
  tune_cmd->add_option("-o,--output", tune_args->output, "Write the pick as a scenario file (atomically)");
  tune_cmd->footer(
      "The global batch (data x batch_size x grad_accumulation) never changes; every pick fits device memory.\n"
      "A scenario with framework: megatron or torchtitan is tuned to what that trainer runs (its schedules, sharding, "
      "recompute), so that parallax export takes the pick; --any-trainer lifts that.\n"
      "Predictions are as good as the hardware profile: on this machine, tune with its calibration "
      "(parallax calibrate) before --validate.\n"
      "Ctrl-C stops the search and prints the best so far.\n"
      "Examples:\n  parallax tune scenarios/gpipe-1b-4xA100.yaml -o best.yaml\n"
      "  parallax tune scenarios/gpipe-1b-4xA100.yaml --world 64 --fix parallel.precision --top 5\n"
      "  parallax calibrate && parallax tune scenarios/mlp-fashion-mnist-pipeline2.yaml "
      "--set hardware=parallax-out/calibrated-$(hostname).yaml --search parallel.chunks=1,2,4,8,16 --validate 3");
  return [=] { return tune_command(*tune_args, self()); };
}

Runner define_report(CLI::App& app) {
  auto report_args = std::make_shared<ReportArgs>();
  auto* report_cmd = app.add_subcommand(
      "report",
      "Write a self-contained HTML report (no network needed): timeline with measured actions inside their "
      "predicted outlines, step time and its error, bubbles, exposed communication, memory, links, per-kind "
      "errors, critical path, and a tune result's ranking");
  report_cmd->add_option("SCENARIO", report_args->scenario,
                         "Scenario to simulate when no --predicted is given; without one, the built-in default");
  report_cmd->add_option("--set", report_args->sets, "Override a scenario value (repeatable)")
      ->allow_extra_args(false)
      ->type_name("KEY=VALUE");
  report_cmd->add_option("--predicted", report_args->predicted, "Predicted trace (parallax simulate -o) instead of simulating");
  report_cmd->add_option("--measured", report_args->measured, "Measured trace of the same plan (parallax run -o)");
  report_cmd->add_option("--tune", report_args->tune, "A tune result (the JSON of parallax tune --json): ranked table and Pareto chart");
  report_cmd->add_option("-o,--output", report_args->output, "The HTML file to write (atomically)");
  report_cmd->footer(
      "Examples:\n  parallax report scenarios/gpipe-1b-4xA100.yaml -o report.html\n"
      "  parallax report --predicted predicted.json --measured measured.json -o report.html\n"
      "  parallax tune --json > tune.json && parallax report --tune tune.json -o report.html");
  return [=] { return report_command(*report_args); };
}

Runner define_export(CLI::App& app) {
  auto export_args = std::make_shared<ScenarioArgs>();
  auto export_trainer = std::make_shared<std::string>();
  auto* export_cmd = app.add_subcommand(
      "export", "Print the plan as its trainer takes it: Megatron-LM's arguments with the torchrun line, or torchtitan's TOML job config");
  export_cmd->add_option("TRAINER", *export_trainer, "megatron or torchtitan")->required()->check(CLI::IsMember({"megatron", "torchtitan"}));
  add_scenario_options(export_cmd, *export_args, /*with_json=*/false);
  export_cmd->footer(
      "What the trainer cannot express (a schedule it lacks, a sharding level it does not run, LibTorch's encoder block;\n"
      "docs/cli.md lists them) exits 2 saying which key to change. Plan with framework: megatron for Megatron-LM's step time.\n"
      "Examples: parallax export megatron scenarios/llama-3.1-70b-64xH100.yaml\n"
      "          parallax export torchtitan scenarios/llama-3.1-70b-64xH100.yaml --set parallel.shard=full");
  return [=] { return export_command(*export_trainer, *export_args); };
}

Runner define_keys(CLI::App& app) {
  auto keys_markdown = std::make_shared<bool>(false);
  auto* keys_cmd = app.add_subcommand(
      "keys", "List the knobs: the scenario keys plan, simulate, tune and the GUI change (parallel.*, data.batch_size)");
  keys_cmd->add_flag("--markdown", *keys_markdown, "As the Markdown table of docs/scenarios.md");
  keys_cmd->footer("Example: parallax keys; then parallax simulate --set parallel.chunks=8");
  return [=] { return keys_command(*keys_markdown); };
}

}  // namespace

std::map<std::string, Runner> define_commands(CLI::App& app) {
  using Define = Runner (*)(CLI::App&);
  // In the order --help lists them.
  const Define table[] = {define_plan,     define_schedule, define_simulate, define_run,    define_trace,
                          define_compare,  define_calibrate, define_validate, define_tune,  define_report,
                          define_export,   define_keys};
  std::map<std::string, Runner> runners;
  for (const Define define : table) {
    Runner run = define(app);
    runners[app.get_subcommands([](CLI::App*) { return true; }).back()->get_name()] = std::move(run);
  }
  return runners;
}

}  // namespace parallax::cli
