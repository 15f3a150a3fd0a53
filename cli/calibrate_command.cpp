#include "cli/calibrate_command.hpp"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <numeric>
#include <optional>
#include <thread>
#include <tuple>

#include "cli/output.hpp"
#include "exec/calibrate.hpp"
#include "exec/compute_tables.hpp"
#include "exec/device.hpp"
#include "exec/gpu.hpp"
#include "exec/launcher.hpp"
#include "exec/model.hpp"
#include "exec/runtime.hpp"
#include "fit/in_run.hpp"
#include "plan/compute_tables.hpp"
#include "plan/error.hpp"
#include "plan/hardware.hpp"
#include "plan/profile_copy.hpp"
#include "profiler/messages.hpp"
#include "sim/simulator.hpp"
#include "timeline/compare.hpp"
#include "timeline/metrics.hpp"

namespace parallax::cli {
namespace {

namespace fs = std::filesystem;

std::string host_name() {
  char buf[256] = {0};
  if (gethostname(buf, sizeof buf - 1) != 0 || !buf[0]) return "this-host";
  return buf;
}

std::string cpu_model() {
  std::ifstream in("/proc/cpuinfo");
  for (std::string line; std::getline(in, line);)
    if (line.rfind("model name", 0) == 0) return line.substr(line.find(':') + 2);
  return "unknown CPU";
}

bool uses_cpu_host(const fs::path& file) {
  std::ifstream in(file);
  for (std::string line; std::getline(in, line);)
    if (line.rfind("hardware:", 0) == 0) return line.find("cpu-host") != std::string::npos;
  return false;
}


// --precision's names; fp16 only where the executor runs it (CUDA), never in calibrate's CPU runs.
std::vector<plan::Precision> extra_precisions(const std::vector<std::string>& names, bool gpu) {
  std::vector<plan::Precision> out;
  for (const std::string& n : names) {
    const auto p = plan::precision_from_name(n);
    if (!p || *p == plan::Precision::fp8 || (*p == plan::Precision::fp16 && !gpu))
      throw plan::InputError(plan::Location{"--precision"},
                             "'" + n + "' is not a precision calibrate measures " +
                                 (gpu ? "(fp32, bf16 or fp16)" : "on the CPU (fp32 or bf16; fp16 on a GPU base profile)"));
    out.push_back(*p);
  }
  return out;
}

std::string date_now() {
  const std::time_t now = std::time(nullptr);
  char date[32];
  std::strftime(date, sizeof date, "%Y-%m-%d %H:%M", std::localtime(&now));
  return date;
}

// What calibrate reads, which its output must not replace: the scenarios, the probes' and the base profile.
// A profile measured on a busy machine says so in its header, where whoever uses it reads it.
std::vector<std::string> with_warnings(std::vector<std::string> header, const std::vector<std::string>& warnings) {
  for (const auto& w : warnings) header.push_back(w);
  return header;
}

// The warnings again after the last line: minutes of progress lines lie between them and the end.
void say_warnings_again(const std::vector<std::string>& warnings) {
  for (const auto& w : warnings) std::cerr << "calibrate: " << w << " (said in the profile's header too)\n";
}

std::vector<std::string> calibrate_inputs(const CalibrateArgs& args, const std::vector<std::string>& files) {
  std::vector<std::string> inputs = files;
  inputs.insert(inputs.end(), args.probe_with.begin(), args.probe_with.end());
  inputs.push_back(args.base);
  return inputs;
}

// calibrate on a GPU (--base names a profile with device.kind: cuda): one rank on the first GPU
// this process sees (CUDA_VISIBLE_DEVICES picks it), its layers, losses, optimizer steps and
// copies timed with CUDA events. The profile written is the base's own text, device kind, links
// and NCCL section included, with the measured calibration: NCCL between GPUs is not measured.
int calibrate_gpu(const CalibrateArgs& args, const std::vector<std::string>& files, bool named,
                  const plan::HardwareProfile& base, const std::string& output) {
  const std::string base_text = profile_text(args.base);
  if (base.calibration)
    throw plan::InputError(plan::Location{"--base"}, "profile '" + base.name +
                                                         "' is calibrated already; calibrate from the profile it was made from");
  const auto calibrated = fit::executable_plans(files, named, true, args.base);
  try {  // no CUDA, or no GPU: exit 2 naming the profile as the user gave it
    exec::check_device(calibrated.front().plan.scenario, "to calibrate this machine's CPU, leave out --base (its default is cpu-host)");
  } catch (const plan::InputError& e) {
    throw plan::InputError(plan::Location{"--base " + args.base}, e.message(), e.key());
  }
  if (args.output.empty()) fs::create_directories(fs::path(output).parent_path());
  require_output_folder(output, calibrate_inputs(args, files));
  std::vector<plan::Plan> plans;
  std::string scenario_names;
  for (const auto& c : calibrated) {
    plans.push_back(c.plan);
    scenario_names += (scenario_names.empty() ? "" : ", ") + c.plan.scenario.name;
  }
  const std::string gpu_name = exec::gpu::device_name(0);
  std::cerr << "calibrate: measuring " << plans.size() << " scenario(s) on GPU 0 (" << gpu_name << ") with CUDA events"
            << (args.quick ? " (quick)" : "") << "\n";
  const auto t0 = std::chrono::steady_clock::now();
  exec::LaunchInfo launch;
  launch.world_size = 1;
  launch.master_port = exec::free_port();
  launch.timeout = std::chrono::seconds(1800);
  exec::CalibrateOptions options;
  options.quick = args.quick;
  options.launch = args.launch;
  options.precisions = extra_precisions(args.precisions, true);
  options.device = torch::Device(torch::kCUDA, 0);
  options.progress = [](const std::string& line) { std::cerr << "calibrate: " << line << "\n" << std::flush; };
  const auto run = exec::calibrate_rank(plans, launch, options);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const std::vector<std::string> header = {
      "Measured on this machine's GPU by `parallax calibrate --base " + args.base + (args.quick ? " --quick" : "") +
          (args.launch ? " --launch" : "") +
          "` (" + fmt("%.0f", seconds) + " s). Use it as `hardware: FILE` or `--set hardware=FILE`.",
      "date: " + date_now() + ", host: " + host_name() + ", GPU: " + gpu_name,
      "LibTorch " + std::string(TORCH_VERSION) + ", one rank, layers timed with CUDA events",
      "device, links and NCCL copied from the base profile '" + base.name + "' (NCCL is not measured)",
      "scenarios measured: " + scenario_names, exec::pass_summary(run->pass_differences)};
  write_file_atomically(output, plan::calibrated_copy_yaml(base_text, base.name + "-calibrated", run->calibration,
                                                           with_warnings(header, run->warnings)));
  std::cerr << "calibrate: wrote " << output << " in " << fmt("%.0f", seconds) << " s; use it with --set hardware="
            << output << "\n";
  say_warnings_again(run->warnings);
  return 0;
}

// "1024,2048,4096": --sizes as the command line takes it.
std::string sizes_list(const std::vector<int64_t>& sizes) {
  std::string list;
  for (int64_t s : sizes) {
    if (!list.empty()) list += ',';
    list += std::to_string(s);
  }
  return list;
}

// calibrate --tables: the base profile with its device.compute measured on GPU 0, the base's own
// figures set beside the measured ones on stderr. The base's published_check goes: it describes
// the base's predictions, not these.
int calibrate_tables(const CalibrateArgs& args, const plan::HardwareProfile& base, const std::string& output) {
  if (base.device.kind != plan::DeviceKind::cuda)
    throw plan::InputError(plan::Location{"--base"}, "--tables measures a GPU: give a GPU --base (e.g. h100-nvlink-ib); profile '" +
                                                         base.name + "' is not one (device.kind: cuda)");
  if (!base.device.peak_tflops.count(plan::Precision::bf16))
    throw plan::InputError(plan::Location{"--base"}, "profile '" + base.name + "' gives no device.peak_tflops.bf16: the GEMM and "
                                                         "attention tables are read against the device's dense peaks");
  if (!args.scenarios.empty() || !args.precisions.empty() || args.launch || !args.probe_with.empty())
    throw plan::InputError(plan::Location{"--tables"}, "--tables measures the device's compute tables alone: it takes no SCENARIO, "
                                                        "--precision, --launch or --probe-with (calibrate without --tables measures layers)");
  std::vector<int64_t> sizes = args.sizes;
  std::sort(sizes.begin(), sizes.end());
  sizes.erase(std::unique(sizes.begin(), sizes.end()), sizes.end());
  if (!args.sizes.empty() && (sizes.size() < 2 || sizes.front() < 16 || sizes.back() > 32768))
    throw plan::InputError(plan::Location{"--sizes"}, "the GEMM grid needs two sizes or more, each from 16 to 32768 (m, n and k "
                                                       "alike, e.g. --sizes 1024,2048,4096,8192,16384)");
  if (!exec::gpu::built_with_cuda() || exec::gpu::visible_devices() == 0)
    throw plan::InputError(plan::Location{"--tables"}, exec::gpu::built_with_cuda()
                                                           ? "--tables needs a GPU, and this machine shows none"
                                                           : "--tables needs a GPU: this Parallax is built with a LibTorch without CUDA");
  if (args.output.empty()) fs::create_directories(fs::path(output).parent_path());
  require_output_folder(output, {args.base});
  const std::string gpu_name = exec::gpu::device_name(0);
  std::cerr << "calibrate: measuring the compute tables of GPU 0 (" << gpu_name << ")" << (args.quick ? " (quick)" : "") << "\n";
  // Another GPU's profile as the base is allowed (its peaks and bandwidth are what the fractions
  // are read against), but rarely meant: a faster card's shapes are held at the base's peak.
  const std::string here = plan::gpu_chip(gpu_name), profiled = plan::gpu_chip(base.device.name);
  if (!here.empty() && !profiled.empty() && here != profiled)
    std::cerr << "calibrate: warning: GPU 0 (" << here << ") is not the GPU the base profile '" << base.name << "' describes ("
              << base.device.name << "): the tables are read against the " << profiled
              << "'s peaks and bandwidth, and shapes faster than its peak are held there\n";
  const auto t0 = std::chrono::steady_clock::now();
  exec::TablesOptions options;
  options.device = torch::Device(torch::kCUDA, 0);
  if (args.quick) {
    options.sizes = {256, 1024, 4096};
    options.sequences = {1024, 4096, 16384};
  }
  if (!sizes.empty()) options.sizes = sizes;
  // The precisions the base profile has a dense peak for (an A100's has no fp8): a table is read
  // against its peak.
  options.precisions.clear();
  for (plan::Precision p : {plan::Precision::bf16, plan::Precision::fp16, plan::Precision::fp8})
    if (base.device.peak_tflops.count(p)) options.precisions.push_back(p);
  options.progress = [](const std::string& line) { std::cerr << "calibrate: " << line << "\n" << std::flush; };
  exec::gpu::select(0);
  exec::MeasuredTables measured = exec::measure_compute_tables(options, base.device);
  // The ceiling a busy GPU holds at its power limit is not what short timings show: the base's stays.
  if (base.device.compute) measured.compute.sustained_tflops = base.device.compute->sustained_tflops;
  const bool ceiling = !measured.compute.sustained_tflops.empty();
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::vector<std::string> notes = {"Measured on " + gpu_name + " by `parallax calibrate --tables" + (args.quick ? " --quick" : "") +
                                        (sizes.empty() ? "" : " --sizes " + sizes_list(sizes)) +
                                        "` (" + date_now() + ", host " + host_name() + ", LibTorch " + TORCH_VERSION + ", " +
                                        fmt("%.0f", seconds) + " s): each GEMM the device's time of back-to-back calls",
                                    ceiling ? "sustained_tflops: the base profile's, not measured here"
                                            : "no sustained_tflops: the base profile gives none, and short timings do not measure one"};
  notes.insert(notes.end(), measured.notes.begin(), measured.notes.end());
  const std::vector<std::string> header = {
      "The compute tables (device.compute) of " + gpu_name + ", measured by `parallax calibrate --tables --base " + args.base +
          "`; everything else is the base profile's. Use it as `hardware: FILE` or `--set hardware=FILE`."};
  const std::string text = plan::with_compute_block(
      plan::without_published_check(plan::renamed_profile_text(profile_text(args.base), base.name + "-tables", header, "calibration")),
      plan::compute_yaml(measured.compute, notes));
  // What is written must read back as a profile: parsed before it is written.
  const auto doc = plan::YamlDocument::from_text(text, output);
  (void)plan::parse_hardware(plan::Field::root(doc));
  write_file_atomically(output, text);
  if (base.device.compute) {
    std::cerr << "calibrate: measured against the base profile '" << base.name << "':\n";
    for (const auto& line : plan::compare_compute(measured.compute, *base.device.compute)) std::cerr << "  " << line << "\n";
  }
  std::cerr << "calibrate: wrote " << output << " in " << fmt("%.0f", seconds) << " s; use it with --set hardware=" << output << "\n";
  return 0;
}

}  // namespace

std::string profile_text(const std::string& base) {
  if (const char* text = plan::builtin_hardware_text(base)) return text;
  std::ifstream in(base);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}


namespace {
// The shipped scenarios: ./scenarios, else those of the checkout the binary was built in
// (build/parallax beside scenarios/). Without them calibrate would measure only the built-in
// default, and probe with it: a model some twenty times slower a step than the accuracy set's.
fs::path shipped_scenarios() {
  if (fs::is_directory("scenarios")) return "scenarios";
  std::error_code failed;
  const fs::path exe = fs::read_symlink("/proc/self/exe", failed);
  for (fs::path dir = exe.parent_path(); !failed && !dir.empty() && dir != dir.parent_path(); dir = dir.parent_path())
    if (fs::is_directory(dir / "scenarios" / "accuracy")) return dir / "scenarios";
  return {};
}
}  // namespace

std::vector<std::string> default_calibration_scenarios(bool warn) {
  std::vector<std::string> out = {""};
  std::vector<fs::path> found;
  const fs::path shipped = shipped_scenarios();
  if (shipped.empty() && warn)  // an installed binary, or one copied out of the checkout
    std::cerr << "calibrate: warning: no scenarios/ folder here or above the binary, so only the built-in scenario is measured "
                 "(and probed, some twenty times slower a step than the accuracy set): run it from the checkout, or name the "
                 "scenarios to measure\n";
  if (!shipped.empty())
    for (const auto& e : fs::directory_iterator(shipped))
      if (e.path().extension() == ".yaml" && uses_cpu_host(e.path())) found.push_back(e.path());
  if (!shipped.empty() && fs::is_directory(shipped / "accuracy"))
    for (const auto& e : fs::directory_iterator(shipped / "accuracy"))
      if (e.path().extension() == ".yaml") found.push_back(e.path());
  std::sort(found.begin(), found.end());
  for (const auto& p : found) out.push_back(p.string());
  return out;
}

std::string default_calibration_path() { return "parallax-out/calibrated-" + host_name() + ".yaml"; }

std::vector<std::string> CalibrateArgs::command_line() const {
  std::vector<std::string> line = {"parallax", "calibrate"};
  line.insert(line.end(), scenarios.begin(), scenarios.end());
  if (!output.empty()) line.insert(line.end(), {"-o", output});
  line.insert(line.end(), {"--base", base});
  if (quick) line.push_back("--quick");
  if (launch) line.push_back("--launch");
  if (tables) line.push_back("--tables");
  if (!sizes.empty()) line.insert(line.end(), {"--sizes", sizes_list(sizes)});
  for (const auto& p : precisions) line.insert(line.end(), {"--precision", p});
  for (const auto& s : probe_with) line.insert(line.end(), {"--probe-with", s});
  for (const auto& t : from_traces) line.insert(line.end(), {"--from-trace", t});
  for (const auto& s : sets) line.insert(line.end(), {"--set", s});
  return line;
}

int calibrate_command(const CalibrateArgs& args) {
  if (!args.from_traces.empty()) return calibrate_from_traces(args);
  if (!args.sets.empty())
    throw plan::InputError(plan::Location{"--set"}, "calibrate takes --set only with --from-trace (the measured configuration)");
  if (!args.sizes.empty() && !args.tables)
    throw plan::InputError(plan::Location{"--sizes"}, "sets the GEMM grid of --tables; without --tables calibrate measures layers");
  const bool named = !args.scenarios.empty();
  exec::LaunchInfo launch;
  const bool as_rank = exec::LaunchInfo::from_environment(&launch);
  const auto files = named ? args.scenarios : default_calibration_scenarios(/*warn=*/!as_rank);  // the launcher warns once
  const std::string output = args.output.empty() ? default_calibration_path() : args.output;
  const plan::HardwareProfile base = [&] {
    const auto doc = plan::YamlDocument::from_text("hardware: " + args.base, "--base");
    return plan::resolve_hardware(plan::Field::root(doc)["hardware"]);
  }();
  if (args.tables) return calibrate_tables(args, base, output);
  if (base.device.kind == plan::DeviceKind::cuda) return calibrate_gpu(args, files, named, base, output);
  // Everything that can be wrong with the input is found before the ranks start.
  const auto calibrated = fit::executable_plans(files, named, !as_rank);
  const auto probe_models = args.probe_with.empty() ? std::vector<fit::Calibrated>{}
                                                    : fit::executable_plans(args.probe_with, true, false);
  if (!probe_models.empty() &&
      std::none_of(probe_models.begin(), probe_models.end(), [](const fit::Calibrated& c) { return c.plan.layers().size() >= 2; }))
    throw plan::InputError(plan::Location{"--probe-with"}, "the probes need a model of two layers or more");
  if (args.launch)
    throw plan::InputError(plan::Location{"--launch"}, "--launch times a GPU's kernel launches apart from its kernels; on the CPU "
                                                       "the host runs the layers itself. Give a GPU --base (e.g. h100-nvlink-ib)");
  const std::vector<plan::Precision> precisions = extra_precisions(args.precisions, false);
  std::vector<plan::Plan> plans;
  for (const auto& c : calibrated) plans.push_back(c.plan);
  if (!as_rank) {
    if (args.output.empty()) fs::create_directories(fs::path(output).parent_path());  // the default folder
    require_output_folder(output, calibrate_inputs(args, files));
    std::cerr << "calibrate: measuring " << plans.size() << " scenario(s) on this machine with 2 local ranks"
              << (args.quick ? " (quick)" : "") << "\n";
    return exec::launch_local(2, args.command_line(), std::chrono::seconds(1800));
  }
  launch.timeout = std::chrono::seconds(1800);
  const auto t0 = std::chrono::steady_clock::now();
  exec::CalibrateOptions options;
  options.quick = args.quick;
  options.precisions = precisions;
  options.progress = [](const std::string& line) { std::cerr << "calibrate: " << line << "\n" << std::flush; };
  // Each probe runs fit::kProbeRepeats times, interleaved, and each in-run figure is the median of
  // the repeats: one ~2 s probe on this kind of shared machine can land in a slow spell (a
  // calibration's pipeline extras have come out twice another's an hour apart).
  const std::vector<fit::Probe> probes = fit::probe_plans(probe_models.empty() ? calibrated : probe_models, base);
  for (int r = 0; r < fit::kProbeRepeats; ++r)
    for (const fit::Probe& p : probes) options.probes.push_back(p.plan);
  // The probes' micro-batch sizes are measured too: their factors divide by those costs.
  std::vector<plan::Plan> measured_plans = plans;
  measured_plans.insert(measured_plans.end(), options.probes.begin(), options.probes.end());
  const auto run = exec::calibrate_rank(measured_plans, launch, options);
  if (!run) return 0;
  plan::Calibration cal = run->calibration;
  // A probe's simulation needs the link the profile will carry: the measured Gloo delivery.
  const auto doc = plan::YamlDocument::from_text(plan::calibrated_profile_yaml(base, "probe", cal, {}), "probe");
  const plan::HardwareProfile measured = plan::parse_hardware(plan::Field::root(doc));
  // Each probe's repeats, by (layout, model).
  std::map<std::pair<bool, int>, fit::ProbeResult> results;
  for (size_t i = 0; i < probes.size(); ++i) {
    plan::Plan probe = probes[i].plan;
    probe.scenario.hardware = measured;
    std::vector<fit::ProbeResult> repeats;
    for (int r = 0; r < fit::kProbeRepeats; ++r)
      repeats.push_back(fit::in_run_factors(
          probe, cal, exec::measured_timeline(run->probes[r * probes.size() + i], probe.scenario.name, probe.world_size)));
    results[{probes[i].data, probes[i].model}] = fit::median_result(repeats);
  }
  for (bool data : {false, true}) {
    if (!results.count({data, 0})) continue;
    const auto large = results.find({data, 1});
    const plan::InRunFactors f = fit::layout_factors(results.at({data, 0}), large == results.end() ? nullptr : &large->second);
    if (!f.bounded.empty())
      std::cerr << "calibrate: warning: in-run factors held at their bounds (F, B, OPTIM within [0.8, 2.5], all-reduces at least 0.1: " << f.bounded
                << "); the profile says so beside them\n";
    std::cerr << "calibrate: in a real run each F takes " << fit::in_run_words(f.forward, f.forward_extra_us) << ", each B "
              << fit::in_run_words(f.backward, f.backward_extra_us) << ", each OPTIM "
              << fit::in_run_words(f.optimizer, f.optimizer_extra_us);
    if (data) {
      std::cerr << ", the step's last B " << fmt("%+.0f", f.sync_backward_extra_us_per_mb)
                << " us more per MB of gradients, all-reduces take " << fmt("%.2f", f.allreduce) << "x theirs; "
                << f.probe << "\n";
      cal.in_run_data = f;
      continue;
    }
    std::cerr << "; " << f.probe << "\n"
              << "calibrate: a message (its receive posted at the step's start): the send keeps its rank "
              << fmt("%+.0f", f.send_extra_us) << " us beyond the bare call, delivery takes "
              << fmt("%+.0f", f.delivery_extra_us) << " us beyond idle ranks'\n";
    // A message cannot arrive sooner in a run than between idle ranks by more than noise: the idle
    // measurement itself was held up (another process on the cores while it ran).
    if (f.delivery_extra_us < -0.5 * cal.p2p.latency_us && f.delivery_extra_us < -50)
      std::cerr << "calibrate: warning: messages arrived " << fmt("%.0f", -f.delivery_extra_us)
                << " us sooner in the run than between idle ranks (whose latency measured " << fmt("%.0f", cal.p2p.latency_us)
                << " us): the idle measurement was held up, likely by another process on these cores; calibrate again on an idle "
                   "machine\n";
    cal.in_run = f;
  }
  const auto* c = &cal;
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::vector<std::string> header = {
      "Measured on this machine by `parallax calibrate" + std::string(args.quick ? " --quick" : "") + "` (" +
          fmt("%.0f", seconds) + " s). Use it as `hardware: FILE` or `--set hardware=FILE`.",
      "date: " + date_now() + ", host: " + host_name(),
      "CPU: " + cpu_model() + ", " + std::to_string(std::thread::hardware_concurrency()) + " cores",
      "LibTorch " + std::string(TORCH_VERSION) + ", " + std::to_string(c->threads) +
          " thread(s) per rank, 2 local ranks, Gloo over loopback",
      "device and network copied from the base profile '" + base.name + "'"};
  std::string scenario_names;
  for (const auto& p : plans) scenario_names += (scenario_names.empty() ? "" : ", ") + p.scenario.name;
  header.push_back("scenarios measured: " + scenario_names);
  header.push_back(exec::pass_summary(run->pass_differences));
  write_file_atomically(output, plan::calibrated_profile_yaml(base, base.name + "-calibrated", *c, with_warnings(header, run->warnings)));
  std::cerr << "calibrate: wrote " << output << " in " << fmt("%.0f", seconds) << " s; use it with --set hardware="
            << output << "\n";
  say_warnings_again(run->warnings);
  return 0;
}

}  // namespace parallax::cli
