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
#include "exec/device.hpp"
#include "exec/gpu.hpp"
#include "exec/launcher.hpp"
#include "exec/model.hpp"
#include "plan/error.hpp"
#include "plan/hardware.hpp"
#include "plan/timeline_metrics.hpp"
#include "profiler/compare.hpp"
#include "profiler/messages.hpp"
#include "sim/simulator.hpp"

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

struct Calibrated {
  std::string file;
  plan::Plan plan;
};

// Plans of the scenarios that the executor can run. Named scenarios that cannot run are bad
// input; in the default set they are skipped.
// `hardware` is the override they are planned with: the ideal machine for a CPU calibration (its
// costs are measured, not planned), the base profile for a GPU's (fp16 runs only there).
std::vector<Calibrated> executable_plans(const std::vector<std::string>& files, bool named, bool say,
                                         const std::string& hardware = "ideal") {
  std::vector<Calibrated> plans;
  for (const auto& f : files) {
    try {
      plan::Plan p = plan::resolve_plan(plan::load_scenario(f, {"hardware=" + hardware}));
      exec::check_executable(p.scenario);
      plans.push_back({f, std::move(p)});
    } catch (const plan::InputError& e) {
      if (named) throw;
      if (say) std::cerr << "calibrate: skipping " << f << ": " << e.what() << "\n";
    }
  }
  if (plans.empty()) throw plan::InputError(plan::Location{"SCENARIO"}, "no scenario the executor can run was given");
  return plans;
}

constexpr int kProbeRepeats = 3;

// A plan calibrate runs for real to measure compute and messages inside a run.
struct Probe {
  plan::Plan plan;
  bool data = false;  ///< the data-parallel layout (else the pipeline one)
  int model = 0;      ///< 0: the smallest calibrated model; 1: a model whose actions are several times longer
};

enum ComputeKind { kF, kB, kOptim, kComputeKinds };

// One probe run's in-run figures, and the per-action means they came from.
struct ProbeResult {
  plan::InRunFactors factors;
  plan::InRunPoint means[kComputeKinds];  ///< per-action means of F, B and OPTIM
  double longest_alone_us[kComputeKinds] = {};  ///< the longest action of each kind, alone
};

// The plans calibrate runs for real to measure how much slower compute and communication are
// inside a run than alone:
// - pipeline: two stages, 1F1B, (up to) 4 micro-batches: compute between pipeline messages, and
//   the messages themselves;
// - data-parallel: two DDP replicas, two micro-batches: compute sharing the cores with all-reduces
//   in the last backward, and without them in the first.
// Both run on the calibrated model with two layers or more whose step is shortest, so that the
// probes stay short and their steps many. Where another model's actions are several times
// longer (and its step still short enough to probe), both probes run on it too: a run slows small
// layers by a fixed cost per action (threads woken, caches refilled after the messages) and large
// ones in proportion (the other rank's compute sharing caches and memory bandwidth), and two
// models of different sizes tell the two apart (plan::fit_in_run_line). Each probe runs about 2 s by the
// base profile's estimate. `plans` are the models to choose among: the measured scenarios', or
// --probe-with's.
std::vector<Probe> probe_plans(const std::vector<Calibrated>& plans, const plan::HardwareProfile& base) {
  const std::vector<std::string> common = {"hardware=ideal", "parallel.virtual=1", "parallel.partition_len=balanced",
                                           "parallel.grad_accumulation=1", "parallel.activation_checkpointing=false"};
  auto estimate_ms = [&](plan::Scenario s) {
    s.hardware = base;
    return plan::step_times(sim::simulate(plan::resolve_plan(s)).timeline, 0).step_time.to_ms();
  };
  auto probe = [&](const Calibrated& c, const std::vector<std::string>& layout, const std::string& words) {
    std::vector<std::string> sets = common;
    sets.insert(sets.end(), layout.begin(), layout.end());
    plan::Scenario s = plan::load_scenario(c.file, sets);
    const double step_ms = estimate_ms(s);
    s.data.steps = std::clamp(static_cast<int>(2000.0 / std::max(step_ms, 0.01)), 20, 400);
    s.name += " (calibration probe: " + words + ", " + std::to_string(s.data.steps) + " steps)";
    return std::make_pair(step_ms, plan::resolve_plan(s));
  };
  auto pipeline = [&](const Calibrated& c) {
    const int batch = c.plan.scenario.data.batch_size;
    const int chunks = batch % 4 == 0 ? 4 : batch % 2 == 0 ? 2 : 1;
    return probe(c, {"parallel.data=1", "parallel.pipeline=2", "parallel.schedule=1f1b",
                     "parallel.chunks=" + std::to_string(chunks)},
                 "pipeline 2, 1f1b, " + std::to_string(chunks) + " chunks");
  };
  // The shortest and the longest pipeline probe among models whose probe step is short enough.
  constexpr double kLongestProbeStepMs = 100;  // 20 steps in 2 s
  std::optional<std::pair<double, plan::Plan>> small, large;
  const Calibrated *small_model = nullptr, *large_model = nullptr;
  for (const auto& c : plans) {
    if (c.plan.layers().size() < 2) continue;
    auto p = pipeline(c);
    if (!small || p.first < small->first) small = p, small_model = &c;
    if (p.first <= kLongestProbeStepMs && (!large || p.first > large->first)) large = p, large_model = &c;
  }
  if (!small_model) return {};
  constexpr double kDistinctSize = 3;  // step ratio from which the two models tell size effects apart
  if (!large || large->first < kDistinctSize * small->first) large_model = nullptr;
  std::vector<Probe> out;
  for (const Calibrated* model : {small_model, large_model}) {
    if (!model) continue;
    const int size = model == small_model ? 0 : 1;
    out.push_back({size == 0 ? small->second : large->second, false, size});
    if (model->plan.scenario.data.batch_size % 2 == 0) {
      // Two micro-batches where the batch allows: the first backward without all-reduces, the last with.
      const int chunks = model->plan.scenario.data.batch_size % 4 == 0 ? 2 : 1;
      out.push_back({probe(*model, {"parallel.data=2", "parallel.pipeline=1", "parallel.chunks=" + std::to_string(chunks)},
                           "data 2, " + std::to_string(chunks) + " chunk(s)")
                         .second,
                     true, size});
    }
  }
  return out;
}

// The mean without the top and bottom 10%. What validate compares is the median step, and a
// step adds up its actions: the frequent shorter delays belong in it, a rank descheduled for a
// scheduler slice (~4 ms here, in ~1-3% of the sends) mostly does not. With receives posted at
// the step's start the remaining tails are such slices; the mean without only the top 1%, kept
// while late receives were common, over-predicted 1F1B on the accuracy MLP by 20-40%.
double typical(std::vector<double> v) {
  if (v.empty()) return 0.0;
  std::sort(v.begin(), v.end());
  const size_t cut = v.size() / 10;
  double sum = 0;
  for (size_t i = cut; i < v.size() - cut; ++i) sum += v[i];
  return sum / static_cast<double>(v.size() - 2 * cut);
}

// A kind's actions (F, B or OPTIM) in a timeline, one duration each, over the steps after the
// first when there are several.
std::vector<double> durations_us(const plan::Timeline& t, plan::ActionKind kind) {
  int first_step = INT32_MAX, last_step = INT32_MIN;
  for (const auto& e : t.events) first_step = std::min(first_step, e.step), last_step = std::max(last_step, e.step);
  std::vector<double> out;
  for (const auto& e : t.events)
    if (e.action.kind == kind && e.lane == plan::Lane::compute && (e.step != first_step || last_step == first_step))
      out.push_back((e.end - e.start).to_us());
  return out;
}

// A step's all-reduce time on one rank: the union of its ALLREDUCE spans (they may overlap), as
// a mean over ranks and steps (after the first, when there are several).
double allreduce_ms(const plan::Timeline& t) {
  std::map<std::pair<int, int>, std::vector<std::pair<int64_t, int64_t>>> spans;  // by (step, rank)
  int first_step = INT32_MAX, last_step = INT32_MIN;
  for (const auto& e : t.events) {
    first_step = std::min(first_step, e.step);
    last_step = std::max(last_step, e.step);
    if (e.lane == plan::Lane::allreduce) spans[{e.step, e.rank}].emplace_back(e.start.count_ns(), e.end.count_ns());
  }
  double sum = 0;
  int n = 0;
  for (auto& [key, v] : spans) {
    if (key.first == first_step && last_step > first_step) continue;
    sum += plan::Time::ns(plan::union_length(std::move(v))).to_ms();
    ++n;
  }
  return n ? sum / n : 0.0;
}

// The typical duration of a timeline's B actions, the step's last ones (which start the DDP
// all-reduces) or the others, over the steps after the first when there are several.
double typical_backward_us(const plan::Timeline& t, int microbatches, bool last) {
  int first_step = INT32_MAX, last_step = INT32_MIN;
  for (const auto& e : t.events) first_step = std::min(first_step, e.step), last_step = std::max(last_step, e.step);
  std::vector<double> v;
  for (const auto& e : t.events) {
    if (e.action.kind != plan::ActionKind::B || (e.step == first_step && last_step > first_step)) continue;
    if ((e.action.mb == microbatches - 1) != last) continue;
    v.push_back((e.end - e.start).to_us());
  }
  return typical(v);
}

// Under DDP the step's last backward shares the cores with the all-reduces its hooks start; the
// earlier ones (no_sync) do not. With two micro-batches or more the probe measures both: the
// others' extra is backward_extra_us, the last one's beyond it is per MB of the stage's
// gradients. With one, the pipeline probe's backward extra stands for the others'.
void fit_sync_backward(const plan::Plan& probe, const plan::Timeline& predicted, const plan::Timeline& measured,
                       const plan::Calibration& calibration, plan::InRunFactors* f) {
  const int n = probe.scenario.parallel.chunks * probe.scenario.parallel.grad_accumulation;
  if (n > 1)
    f->backward_extra_us = typical_backward_us(measured, n, false) - typical_backward_us(predicted, n, false);
  else
    f->backward_extra_us = calibration.in_run.backward_extra_us;
  const double sync_extra_us =
      typical_backward_us(measured, n, true) - typical_backward_us(predicted, n, true) - f->backward_extra_us;
  const double mb = static_cast<double>(probe.stages.at(0).param_bytes) / 1e6;
  f->sync_backward_extra_us_per_mb = mb > 0 ? sync_extra_us / mb : 0.0;
}

// Field by field, the median of several probe runs' factors.
plan::InRunFactors median_factors(const std::vector<plan::InRunFactors>& runs) {
  plan::InRunFactors m = runs.front();
  auto field = [&](double plan::InRunFactors::*x) {
    std::vector<double> v;
    for (const auto& f : runs) v.push_back(f.*x);
    m.*x = profiler::median(v);
  };
  for (auto x : {&plan::InRunFactors::forward, &plan::InRunFactors::backward, &plan::InRunFactors::optimizer,
                 &plan::InRunFactors::forward_extra_us, &plan::InRunFactors::backward_extra_us,
                 &plan::InRunFactors::optimizer_extra_us, &plan::InRunFactors::allreduce,
                 &plan::InRunFactors::sync_backward_extra_us_per_mb, &plan::InRunFactors::send_extra_us,
                 &plan::InRunFactors::delivery_extra_us})
    field(x);
  if (runs.size() > 1) m.probe += ", median of " + std::to_string(runs.size()) + " runs";
  return m;
}

// The in-run factors: a probe's measured F, B and OPTIM (per-action means) and its all-reduces
// against what `calibration` predicts for them without in-run figures; its messages.
ProbeResult in_run_factors(plan::Plan probe, const plan::Calibration& calibration,
                           const std::vector<exec::RankResult>& results) {
  plan::Calibration alone = calibration;
  alone.in_run = {};
  alone.in_run_data.reset();
  probe.scenario.hardware.calibration = alone;
  const plan::Timeline predicted = sim::simulate(probe).timeline;
  // Every step, whatever the host's speed (exec/host_probe.hpp): runs on this project's VMs see
  // the host at the speed of the costs alone in a few percent of their steps only, so the factors
  // carry the rest of the slowdown a run meets.
  const plan::Timeline measured = exec::measured_timeline(results, probe.scenario.name, probe.world_size);
  ProbeResult out;
  plan::InRunFactors& f = out.factors;
  const profiler::MessageTiming m = profiler::message_timing(measured, probe.scenario.parallel.pipeline);
  if (!m.send_us.empty() && !calibration.send_call.empty())
    f.send_extra_us = typical(m.send_us) - calibration.send_call.at(typical(m.bytes));
  if (!m.delivery_us.empty() && calibration.p2p.bandwidth_gb_per_s > 0)
    f.delivery_extra_us = typical(m.delivery_us) - calibration.p2p.us(typical(m.bytes));
  // Every step's actions of each kind (the prediction's are alike from step to step).
  for (auto [kind, index, extra] : {std::tuple{plan::ActionKind::F, kF, &plan::InRunFactors::forward_extra_us},
                                    std::tuple{plan::ActionKind::B, kB, &plan::InRunFactors::backward_extra_us},
                                    std::tuple{plan::ActionKind::OPTIM, kOptim, &plan::InRunFactors::optimizer_extra_us}}) {
    const auto alone = durations_us(predicted, kind), in_run = durations_us(measured, kind);
    if (alone.empty() || in_run.empty()) continue;
    const plan::InRunPoint means{std::accumulate(alone.begin(), alone.end(), 0.0) / alone.size(), typical(in_run)};
    f.*extra = means.in_run_us - means.alone_us;
    out.means[index] = means;
    out.longest_alone_us[index] = *std::max_element(alone.begin(), alone.end());
  }
  if (probe.scenario.parallel.data > 1) {
    fit_sync_backward(probe, predicted, measured, calibration, &f);
    // The backwards the fit by size uses are the ones without all-reduces.
    const int n = probe.scenario.parallel.chunks * probe.scenario.parallel.grad_accumulation;
    if (n > 1) out.means[kB] = {typical_backward_us(predicted, n, false), typical_backward_us(measured, n, false)};
  }
  if (const double predicted_ms = allreduce_ms(predicted); predicted_ms > 0) {
    const double measured_ms = allreduce_ms(measured);
    if (measured_ms > 0) f.allreduce = measured_ms / predicted_ms;
  }
  f.probe = probe.scenario.name;
  return out;
}

// The repeats of one probe: each in-run figure and each mean is the median of the repeats'.
ProbeResult median_result(const std::vector<ProbeResult>& repeats) {
  ProbeResult m;
  std::vector<plan::InRunFactors> factors;
  for (const auto& r : repeats) factors.push_back(r.factors);
  m.factors = median_factors(factors);
  for (int k = 0; k < kComputeKinds; ++k) {
    std::vector<double> alone, measured;
    for (const auto& r : repeats) alone.push_back(r.means[k].alone_us), measured.push_back(r.means[k].in_run_us);
    m.means[k] = {profiler::median(alone), profiler::median(measured)};
    m.longest_alone_us[k] = repeats.front().longest_alone_us[k];  // the prediction's: alike in every repeat
  }
  return m;
}

// "1.18x its time alone +40 us", or "+144 us beyond its time alone" when the factor is 1.
std::string in_run_words(double factor, double extra_us) {
  if (factor == 1) return fmt("%+.0f", extra_us) + " us beyond its time alone";
  return fmt("%.2f", factor) + "x its time alone " + fmt("%+.0f", extra_us) + " us";
}

// The in-run figures of one layout: the small model's, with F, B and OPTIM fitted by size.
plan::InRunFactors layout_factors(const ProbeResult& small, const ProbeResult* large) {
  plan::InRunFactors f = small.factors;
  auto fit = [&](ComputeKind k, double* factor, double* extra_us, double* probed_us) {
    const plan::InRunLine line = plan::fit_in_run_line(small.means[k], large ? &large->means[k] : nullptr);
    *factor = line.factor;
    *extra_us = line.extra_us;
    // The line holds where it was measured; a longer action is not slowed in proportion.
    *probed_us = large ? std::max(small.longest_alone_us[k], large->longest_alone_us[k]) : 0.0;
  };
  fit(kF, &f.forward, &f.forward_extra_us, &f.forward_probed_us);
  fit(kB, &f.backward, &f.backward_extra_us, &f.backward_probed_us);
  fit(kOptim, &f.optimizer, &f.optimizer_extra_us, &f.optimizer_probed_us);
  if (large) f.probe += "; sizes from " + large->factors.probe;
  return f;
}

// --precision's names; fp16 only where the executor runs it (CUDA), never in calibrate's CPU runs.
std::vector<plan::Precision> extra_precisions(const std::vector<std::string>& names, bool gpu) {
  std::vector<plan::Precision> out;
  for (const std::string& n : names) {
    const auto p = plan::precision_from_name(n);
    if (!p || (*p == plan::Precision::fp16 && !gpu))
      throw plan::InputError(plan::Location{"--precision"},
                             "'" + n + "' is not a precision calibrate measures " +
                                 (gpu ? "(fp32, bf16 or fp16)" : "on the CPU (fp32 or bf16; fp16 on a GPU base profile)"));
    out.push_back(*p);
  }
  return out;
}

// The text of the profile --base names: a built-in profile or a file.
std::string profile_text(const std::string& base) {
  if (const char* text = plan::builtin_hardware_text(base)) return text;
  std::ifstream in(base);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

std::string date_now() {
  const std::time_t now = std::time(nullptr);
  char date[32];
  std::strftime(date, sizeof date, "%Y-%m-%d %H:%M", std::localtime(&now));
  return date;
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
  const auto calibrated = executable_plans(files, named, true, args.base);
  exec::check_device(calibrated.front().plan.scenario);  // no CUDA, or no GPU: exit 2 naming the profile
  if (args.output.empty()) fs::create_directories(fs::path(output).parent_path());
  require_output_folder(output);
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
  options.precisions = extra_precisions(args.precisions, true);
  options.device = torch::Device(torch::kCUDA, 0);
  options.progress = [](const std::string& line) { std::cerr << "calibrate: " << line << "\n" << std::flush; };
  const auto run = exec::calibrate_rank(plans, launch, options);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const std::vector<std::string> header = {
      "Measured on this machine's GPU by `parallax calibrate --base " + args.base + (args.quick ? " --quick" : "") +
          "` (" + fmt("%.0f", seconds) + " s). Use it as `hardware: FILE` or `--set hardware=FILE`.",
      "date: " + date_now() + ", host: " + host_name() + ", GPU: " + gpu_name,
      "LibTorch " + std::string(TORCH_VERSION) + ", one rank, layers timed with CUDA events",
      "device, links and NCCL copied from the base profile '" + base.name + "' (NCCL is not measured)",
      "scenarios measured: " + scenario_names, exec::pass_summary(run->pass_differences)};
  write_file_atomically(output, plan::calibrated_copy_yaml(base_text, base.name + "-calibrated", run->calibration, header));
  std::cerr << "calibrate: wrote " << output << " in " << fmt("%.0f", seconds) << " s; use it with --set hardware="
            << output << "\n";
  return 0;
}

}  // namespace

std::vector<std::string> default_calibration_scenarios() {
  std::vector<std::string> out = {""};
  std::vector<fs::path> found;
  if (fs::is_directory("scenarios"))
    for (const auto& e : fs::directory_iterator("scenarios"))
      if (e.path().extension() == ".yaml" && uses_cpu_host(e.path())) found.push_back(e.path());
  if (fs::is_directory("scenarios/accuracy"))
    for (const auto& e : fs::directory_iterator("scenarios/accuracy"))
      if (e.path().extension() == ".yaml") found.push_back(e.path());
  std::sort(found.begin(), found.end());
  for (const auto& p : found) out.push_back(p.string());
  return out;
}

std::string default_calibration_path() { return "parallax-out/calibrated-" + host_name() + ".yaml"; }

int calibrate_command(const CalibrateArgs& args, const std::vector<std::string>& argv) {
  const bool named = !args.scenarios.empty();
  const auto files = named ? args.scenarios : default_calibration_scenarios();
  const std::string output = args.output.empty() ? default_calibration_path() : args.output;
  const plan::HardwareProfile base = [&] {
    const auto doc = plan::YamlDocument::from_text("hardware: " + args.base, "--base");
    return plan::resolve_hardware(plan::Field::root(doc)["hardware"]);
  }();
  if (base.device.kind == plan::DeviceKind::cuda) return calibrate_gpu(args, files, named, base, output);
  exec::LaunchInfo launch;
  const bool as_rank = exec::LaunchInfo::from_environment(&launch);
  // Everything that can be wrong with the input is found before the ranks start.
  const auto calibrated = executable_plans(files, named, !as_rank);
  const auto probe_models = args.probe_with.empty() ? std::vector<Calibrated>{}
                                                    : executable_plans(args.probe_with, true, false);
  if (!probe_models.empty() &&
      std::none_of(probe_models.begin(), probe_models.end(), [](const Calibrated& c) { return c.plan.layers().size() >= 2; }))
    throw plan::InputError(plan::Location{"--probe-with"}, "the probes need a model of two layers or more");
  const std::vector<plan::Precision> precisions = extra_precisions(args.precisions, false);
  std::vector<plan::Plan> plans;
  for (const auto& c : calibrated) plans.push_back(c.plan);
  if (!as_rank) {
    if (args.output.empty()) fs::create_directories(fs::path(output).parent_path());  // the default folder
    require_output_folder(output);
    std::cerr << "calibrate: measuring " << plans.size() << " scenario(s) on this machine with 2 local ranks"
              << (args.quick ? " (quick)" : "") << "\n";
    return exec::launch_local(2, argv, std::chrono::seconds(1800));
  }
  launch.timeout = std::chrono::seconds(1800);
  const auto t0 = std::chrono::steady_clock::now();
  exec::CalibrateOptions options;
  options.quick = args.quick;
  options.precisions = precisions;
  options.progress = [](const std::string& line) { std::cerr << "calibrate: " << line << "\n" << std::flush; };
  // Each probe runs kProbeRepeats times, interleaved, and each in-run figure is the median of
  // the repeats: one ~2 s probe on this kind of shared machine can land in a slow spell (a
  // calibration's pipeline extras have come out twice another's an hour apart).
  const std::vector<Probe> probes = probe_plans(probe_models.empty() ? calibrated : probe_models, base);
  for (int r = 0; r < kProbeRepeats; ++r)
    for (const Probe& p : probes) options.probes.push_back(p.plan);
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
  std::map<std::pair<bool, int>, ProbeResult> results;
  for (size_t i = 0; i < probes.size(); ++i) {
    plan::Plan probe = probes[i].plan;
    probe.scenario.hardware = measured;
    std::vector<ProbeResult> repeats;
    for (int r = 0; r < kProbeRepeats; ++r)
      repeats.push_back(in_run_factors(probe, cal, run->probes[r * probes.size() + i]));
    results[{probes[i].data, probes[i].model}] = median_result(repeats);
  }
  for (bool data : {false, true}) {
    if (!results.count({data, 0})) continue;
    const auto large = results.find({data, 1});
    const plan::InRunFactors f = layout_factors(results.at({data, 0}), large == results.end() ? nullptr : &large->second);
    std::cerr << "calibrate: in a real run each F takes " << in_run_words(f.forward, f.forward_extra_us) << ", each B "
              << in_run_words(f.backward, f.backward_extra_us) << ", each OPTIM "
              << in_run_words(f.optimizer, f.optimizer_extra_us);
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
  write_file_atomically(output, plan::calibrated_profile_yaml(base, base.name + "-calibrated", *c, header));
  std::cerr << "calibrate: wrote " << output << " in " << fmt("%.0f", seconds) << " s; use it with --set hardware="
            << output << "\n";
  return 0;
}

}  // namespace parallax::cli
