#include "exec/calibrate.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <map>
#include <set>
#include <sstream>
#include <thread>

#include "exec/gpu.hpp"
#include "exec/host_memory.hpp"
#include "exec/host_probe.hpp"
#include "exec/launcher.hpp"
#include "exec/measuring.hpp"
#include "exec/model.hpp"
#include "exec/threads.hpp"
#include "timeline/compare.hpp"

namespace parallax::exec {
namespace {

using namespace measuring;

constexpr auto kIdleWait = std::chrono::seconds(1800);  // rank 1 idles while rank 0 measures
const std::string kProbePortKey = "parallax/calibrate/probe-port";  // + "/" + the probe's index
const std::string kByeKey = "parallax/calibrate/bye";
const std::string kStopComputeKey = "parallax/calibrate/stop-compute";
constexpr size_t kSharedCoreSamples = 4;  // signatures timed while the other rank computes

using timeline::median;

class Calibrator {
 public:
  Calibrator(const std::vector<plan::Plan>& plans, const LaunchInfo& launch, const CalibrateOptions& options)
      : plans_(plans),
        comm_(launch),
        options_(options),
        device_(options.device),
        clock_(options.device),
        budget_(budget(options.quick, &gate_)) {
    collect_work();
  }

  /// Rank 0: the measurements. The other rank: serves rank 0's commands.
  std::optional<plan::Calibration> run() {
    if (comm_.rank() != 0) {
      serve();
      return std::nullopt;
    }
    plan::Calibration c;
    c.threads = torch::get_num_threads();
    c.cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
    check_idle(c.cores, "the layers");
    c.backward_call_us = backward_call_us();
    say("backward call overhead " + fmt(c.backward_call_us) + " us");
    int i = 0;
    std::vector<size_t> slow;  // signatures with a figure that had too few samples at the host's reference speed
    for (const auto& w : work_) {
      const auto t0 = Clock::now();
      const int slow_before = gate_.figures_slow();
      auto [layer, loss] = measure_signature(w, c.backward_call_us, on_device());
      if (gate_.figures_slow() > slow_before) slow.push_back(static_cast<size_t>(i));
      c.layers[layer.signature] = layer;
      if (w.last) c.losses[loss.signature] = loss;
      const auto fit = plan::fit_linear(layer.forward.mb, layer.forward.us);
      // (a stream: gcc 12 warns falsely on long chains of string +)
      std::ostringstream line;
      line << "[" << ++i << "/" << work_.size() << "] " << layer.signature << ": mb " << layer.forward.mb.front() << ".."
           << layer.forward.mb.back() << ", forward " << fmt(layer.forward.us.front()) << ".."
           << fmt(layer.forward.us.back()) << " us (one line would be off by up to "
           << fmt(100 * fit.max_relative_residual) << "%), " << fmt(us_since(t0) / 1e6) << " s";
      say(line.str());
    }
    if (!options_.quick) slow = second_pass(&c);
    remeasure(&c, slow);
    const Bench bench = on_device();
    for (const DataCost& d : measure_data(plans_, bench)) {
      c.data[d.key] = d.input;
      c.data[d.target_key] = d.target;
      say("data " + d.key + ": " + fmt(d.input.us.front()) + ".." + fmt(d.input.us.back()) + " us per micro-batch");
    }
    for (const plan::OptimizerCost& o : measure_optimizers(plans_, bench)) {
      c.optimizers.push_back(o);
      say("optimizer " + o.kind + (o.momentum ? " (momentum)" : "") + ": " + fmt(o.by_params.us.front()) + " us at " +
          fmt(o.by_params.mb.front()) + " parameters .. " + fmt(o.by_params.us.back()) + " us at " + fmt(o.by_params.mb.back()) +
          (o.per_tensor_us > 0 ? ", +" + fmt(o.per_tensor_us) + " us a tensor beyond 4" : ""));
    }
    if (uses_fp16()) {
      c.loss_scaler = measure_loss_scaler(plans_, bench);
      say("fp16 loss scaler: " + fmt(c.loss_scaler.us.front()) + " us at " + fmt(c.loss_scaler.mb.front()) +
          " parameters .. " + fmt(c.loss_scaler.us.back()) + " us at " + fmt(c.loss_scaler.mb.back()));
    }
    c.copy_gb_per_s = copy_gb_per_s(bench);
    say("memory copy " + fmt(c.copy_gb_per_s) + " GB/s");
    if (device_.is_cuda()) {
      // One GPU, one rank: the layers have the device to themselves in a run too, and the
      // links are the base profile's (NCCL between GPUs is not measured here).
      c.host_probe_us = gate_.reference_us();
      return c;
    }
    c.shared_cores = shared_cores(c.backward_call_us);
    say("a layer takes " + fmt(c.shared_cores) + "x its time alone while the other rank computes too");
    check_idle(c.cores, "Gloo's messages");  // the costs other programs lengthen most (a thread woken per message)
    command("gloo");
    measure_gloo(comm_, &c);
    say("Gloo send call " + fmt(c.send_call.us.front()) + ".." + fmt(c.send_call.us.back()) + " us (" +
        bytes_text(c.send_call.mb.front()) + ".." + bytes_text(c.send_call.mb.back()) + "), delivery after it " +
        fmt(c.p2p.latency_us) + " us + " + fmt(c.p2p.bandwidth_gb_per_s) + " GB/s; all-reduce (2 ranks) " +
        fmt(c.allreduce.latency_us) + " us + " + fmt(c.allreduce.bandwidth_gb_per_s) + " GB/s");
    command("done");
    c.host_probe_us = gate_.reference_us();
    say("host speed: reference probe " + fmt(c.host_probe_us) + " us; " + std::to_string(gate_.figures_at_speed()) +
        " figures measured at it, " + std::to_string(gate_.figures_slow()) + " with too few samples at it");
    return c;
  }

  /// Each signature's difference between the two passes over the layers (none with --quick).
  const std::map<std::string, double>& pass_differences() const { return pass_differences_; }
  /// What rank 0 warned of while measuring (a busy machine), for the profile's header.
  const std::vector<std::string>& warnings() const { return warnings_; }

  /// The port on which probe run `i` meets: rank 0 picks a free one just before the run (a port
  /// picked long before could be taken meanwhile) and hands it over through this store.
  int probe_port(size_t i) {
    const std::string key = kProbePortKey + "/" + std::to_string(i);
    if (comm_.rank() == 0) {
      const std::string port = std::to_string(free_port());
      comm_.store().set(key, std::vector<uint8_t>(port.begin(), port.end()));
      return std::stoi(port);
    }
    comm_.store().wait({key}, kIdleWait);
    const auto port = comm_.store().get(key);
    return std::stoi(std::string(port.begin(), port.end()));
  }

  /// Rank 1 says it needs the store no more; rank 0 (whose process holds the store) waits for it.
  void bye() {
    if (comm_.world().getSize() == 1) return;  // a GPU's calibration: no other rank
    if (comm_.rank() == 0) comm_.store().wait({kByeKey}, kIdleWait);
    else comm_.store().set(kByeKey, std::vector<uint8_t>{1});
  }

 private:
  static std::string fmt(double v) {
    char b[32];
    std::snprintf(b, sizeof b, v >= 100 ? "%.0f" : v >= 10 ? "%.1f" : "%.2f", v);
    return b;
  }
  // Where the layers, data, optimizer and copies are measured, and how.
  Bench on_device() { return {device_, &clock_, budget_, options_.quick, options_.launch && device_.is_cuda()}; }

  static std::string bytes_text(double b) {
    return b >= (1 << 20) ? fmt(b / (1 << 20)) + " MB" : b >= 1024 ? fmt(b / 1024) + " KB" : fmt(b) + " B";
  }
  void say(const std::string& line) const {
    if (options_.progress) options_.progress(line);
  }

  // Other programs' threads on the cores: each figure measured after takes their share of a core
  // with it, which the host probe (a 13 us operator between samples) does not see: it slips in
  // between the others' time slices, where a Gloo message waits for its thread to be woken.
  void check_idle(int cores, const std::string& what) {
    const std::string warning = busy_machine_warning(other_runnable_threads(), cores, what);
    if (warning.empty()) return;
    say(warning);
    warnings_.push_back(warning);
  }

  // A second pass over the layers, a minute or so after the first. On this project's shared VMs
  // one layer's cost alone has moved by up to 2x between calibrations while a bare sgemm held
  // within 7% (docs/accuracy.md): the difference tells how far this machine's figures can be
  // trusted, and the lower of the two passes is kept.
  // Returns the signatures with a figure measured off the host's reference speed in this pass.
  std::vector<size_t> second_pass(plan::Calibration* c) {
    say("second pass over the layers, to see how far their costs repeat");
    std::vector<size_t> slow;
    for (size_t k = 0; k < work_.size(); ++k) {
      const SignatureWork& w = work_[k];
      const int slow_before = gate_.figures_slow();
      auto [layer, loss] = measure_signature(w, c->backward_call_us, on_device());
      if (gate_.figures_slow() > slow_before) slow.push_back(k);
      plan::SignatureCost& first = c->layers[layer.signature];
      pass_differences_[layer.signature] = plan::pass_difference(first, layer);
      first = plan::lower_of(first, layer);
      if (w.last) c->losses[loss.signature] = plan::lower_of(c->losses[loss.signature], loss);
    }
    say(pass_summary(pass_differences_));
    return slow;
  }

  // Once more, the signatures the host was too slow for (the lower figures are kept): a slow
  // spell of the host lasts seconds to minutes, so a later try often finds it fast again.
  void remeasure(plan::Calibration* c, const std::vector<size_t>& slow) {
    if (slow.empty()) return;
    say("measuring " + std::to_string(slow.size()) + " signature(s) again: the host ran slower than its reference while they were measured");
    for (size_t k : slow) {
      const SignatureWork& w = work_[k];
      auto [layer, loss] = measure_signature(w, c->backward_call_us, on_device());
      plan::SignatureCost& kept = c->layers[layer.signature];
      kept = plan::lower_of(kept, layer);
      if (w.last) c->losses[loss.signature] = plan::lower_of(c->losses[loss.signature], loss);
    }
  }

  bool uses_fp16() const {
    for (const SignatureWork& w : work_)
      if (w.precision == plan::Precision::fp16) return true;
    return false;
  }

  void collect_work() {
    std::map<std::string, size_t> index;
    for (const plan::Plan& p : plans_) {
      std::vector<plan::Precision> precisions{p.scenario.parallel.precision};
      precisions.insert(precisions.end(), options_.precisions.begin(), options_.precisions.end());
      for (const plan::Precision precision : precisions) collect_work(p, precision, &index);
    }
  }

  // The signatures of `p`'s layers at `precision`, merged into work_ by signature.
  void collect_work(const plan::Plan& p, plan::Precision precision, std::map<std::string, size_t>* index) {
    const int n = static_cast<int>(p.layers().size());
    for (int l = 0; l < n; ++l) {
      const std::string sig = plan::layer_signature(p.layers()[l], precision);
      auto [it, fresh] = index->emplace(sig, work_.size());
      if (fresh) work_.push_back(SignatureWork{p.layers()[l], precision, false, false, {}, 1});
      SignatureWork& w = work_[it->second];
      w.first |= l == 0;
      w.last |= l == n - 1;
      w.used.insert(p.microbatch_size);
      w.largest_batch = std::max(w.largest_batch, p.scenario.data.batch_size);
    }
  }

  // --- compute (rank 0 alone) ---

  double backward_call_us() {
    return repeat(
               [this] {
                 auto x = torch::ones({1}, torch::TensorOptions().device(device_).requires_grad(true));
                 auto y = (x * 2).sum();
                 clock_.begin();
                 y.backward();
                 clock_.end();
                 return clock_.lap();
               },
               budget_)[0];
  }



  // How much slower a layer runs while the other rank computes too: a few fp32 signatures at
  // their largest used micro-batch, alone (at the host's reference speed) and then again while
  // rank 1 runs the calibrated layers in a loop (serve()). Where ranks outnumber cores this is
  // large; on this project's 2-vCPU VMs it measured 1.00-1.02 (docs/accuracy.md).
  double shared_cores(double call_us) {
    std::vector<size_t> fp32;
    for (size_t k = 0; k < work_.size(); ++k)
      if (work_[k].precision == plan::Precision::fp32) fp32.push_back(k);
    if (fp32.empty()) return 1;
    // Up to kSharedCoreSamples of them, spread over the list.
    std::vector<const SignatureWork*> sample;
    const size_t n = std::min(fp32.size(), kSharedCoreSamples);
    for (size_t i = 0; i < n; ++i) sample.push_back(&work_[fp32[i * fp32.size() / n]]);
    std::vector<double> alone;
    for (const SignatureWork* w : sample) alone.push_back(forward_backward_us(*w, *w->used.rbegin(), call_us, budget_));
    command("compute");
    Budget together_budget = budget_;
    together_budget.gate = nullptr;  // slower is what is measured here
    std::vector<double> ratios;
    for (size_t i = 0; i < sample.size(); ++i)
      ratios.push_back(forward_backward_us(*sample[i], *sample[i]->used.rbegin(), call_us, together_budget) / alone[i]);
    comm_.store().set(kStopComputeKey, std::vector<uint8_t>{1});
    return std::max(1.0, median(ratios));
  }

  // Rank 1, on "compute": the calibrated fp32 layers forward and backward, round and round,
  // until rank 0 says stop (checked every ~20 ms: the store is a round trip away).
  void compute_until_stopped() {
    struct Load {
      Stage module;
      torch::Tensor input, grad;
    };
    std::vector<Load> loads;
    for (const SignatureWork& w : work_) {
      if (w.precision != plan::Precision::fp32 || w.layer.kind == plan::LayerKind::embedding) continue;
      const int mb = *w.used.rbegin();
      loads.push_back({Stage(std::vector<plan::Layer>{w.layer}, 0, 1, /*seed=*/1), layer_input(w.layer, mb, torch::kCPU),
                       torch::randn(output_shape(w.layer, mb))});
    }
    if (loads.empty()) return;
    for (size_t k = 0;; ++k) {
      const auto t0 = Clock::now();
      while (us_since(t0) < 20'000) {
        Load& l = loads[k++ % loads.size()];
        const torch::Tensor out = l.module->forward(l.input.clone().requires_grad_(true));
        torch::autograd::backward({out}, {l.grad});
      }
      if (comm_.store().check({kStopComputeKey})) return;
    }
  }

  // --- both ranks ---

  // --- commands from rank 0 to the other rank, through the store ---

  std::string command_key(int k) const { return "parallax/calibrate/cmd/" + std::to_string(k); }

  void command(const std::string& what) {
    comm_.store().set(command_key(commands_++), std::vector<uint8_t>(what.begin(), what.end()));
  }

  void serve() {
    for (int k = 0;; ++k) {
      comm_.store().wait({command_key(k)}, kIdleWait);
      const auto bytes = comm_.store().get(command_key(k));
      const std::string cmd(bytes.begin(), bytes.end());
      if (cmd == "done") return;
      if (cmd == "gloo") {
        measure_gloo(comm_, nullptr);
        continue;
      }
      if (cmd == "compute") {
        compute_until_stopped();
        continue;
      }
      throw std::runtime_error("calibrate: unknown command '" + cmd + "' from rank 0");
    }
  }

  const std::vector<plan::Plan>& plans_;
  Communicator comm_;
  CalibrateOptions options_;
  torch::Device device_;  // where the layers, losses, optimizer and copies are measured
  PhaseClock clock_;      // times their phases there
  HostGate gate_;         // before budget_, which points to it
  Budget budget_;
  std::map<std::string, double> pass_differences_;
  std::vector<std::string> warnings_;
  std::vector<SignatureWork> work_;
  int commands_ = 0;
};

}  // namespace

std::vector<int> calibration_sizes(const std::vector<int>& used, int largest_batch, bool quick) {
  std::set<int> sizes(used.begin(), used.end());
  if (quick) {
    for (int u : used) sizes.insert(std::max(1, u / 2));
  } else {
    for (int s = 1; s <= std::max(1, largest_batch); s *= 2) sizes.insert(s);
  }
  return {sizes.begin(), sizes.end()};
}

std::string pass_summary(const std::map<std::string, double>& differences) {
  if (differences.empty()) return "one pass over the layers (--quick): their repeatability is not measured";
  std::vector<double> all;
  auto worst = differences.begin();
  for (auto it = differences.begin(); it != differences.end(); ++it) {
    all.push_back(it->second);
    if (it->second > worst->second) worst = it;
  }
  std::sort(all.begin(), all.end());
  char line[512];
  std::snprintf(line, sizeof line,
                "layer costs alone differ by %.0f%% between two passes (median over %zu signatures, each "
                "the median over its sizes), by %.0f%% at worst (%s)",
                100 * all[all.size() / 2], all.size(), 100 * worst->second, worst->first.c_str());
  return line;
}

std::optional<CalibrationRun> calibrate_rank(const std::vector<plan::Plan>& plans, const LaunchInfo& launch,
                                           const CalibrateOptions& options) {
  const int ranks = options.device.is_cuda() ? 1 : 2;
  if (launch.world_size != ranks)
    throw std::runtime_error(options.device.is_cuda()
                                 ? "calibrate on a GPU runs as 1 rank; this job has " + std::to_string(launch.world_size)
                                 : "calibrate runs as 2 local ranks (the layout of two-rank plans); this job has " +
                                       std::to_string(launch.world_size));
  if (options.device.is_cuda()) gpu::select(options.device.index());
  keep_freed_memory();  // as run_rank does, so the layers are timed with the same allocator behaviour
  count_tensor_memory();  // and their kept bytes measured as a run measures its memory
  // The threads per rank `parallax run` sets for a job of this size.
  torch::set_num_threads(static_cast<int>(std::max(1u, std::thread::hardware_concurrency() / 2)));
  const std::set<long> before = thread_ids();
  Calibrator calibrator(plans, launch, options);
  demote_helper_threads(before);  // Gloo's threads as a run has them, for the message timings
  std::optional<plan::Calibration> measured = calibrator.run();
  std::vector<std::vector<RankResult>> probes;
  for (size_t i = 0; i < options.probes.size(); ++i) {
    const plan::Plan& probe = options.probes[i];
    if (options.progress && launch.rank == 0) options.progress("in-run probe: running " + probe.scenario.name + " for real");
    LaunchInfo again = launch;
    again.master_port = calibrator.probe_port(i);
    probes.push_back(run_rank(probe, again, RunOptions{}));
  }
  calibrator.bye();
  if (!measured) return std::nullopt;
  return CalibrationRun{std::move(*measured), std::move(probes), calibrator.pass_differences(), calibrator.warnings()};
}

}  // namespace parallax::exec
