#include "exec/calibrate.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <map>
#include <set>
#include <sstream>
#include <thread>

#include "exec/data.hpp"
#include "exec/gpu.hpp"
#include "exec/host_memory.hpp"
#include "exec/host_probe.hpp"
#include "exec/launcher.hpp"
#include "exec/model.hpp"
#include "exec/threads.hpp"
#include "profiler/compare.hpp"

namespace parallax::exec {
namespace {

using Clock = std::chrono::steady_clock;
constexpr auto kIdleWait = std::chrono::seconds(1800);  // rank 1 idles while rank 0 measures
const std::string kProbePortKey = "parallax/calibrate/probe-port";  // + "/" + the probe's index
const std::string kByeKey = "parallax/calibrate/bye";
const std::string kStopComputeKey = "parallax/calibrate/stop-compute";
constexpr size_t kSharedCoreSamples = 4;  // signatures timed while the other rank computes

double us_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::micro>(Clock::now() - t0).count();
}

using profiler::median;

// The lower quartile: a cost alone, as the machine gives it when nothing else interferes.
// Bursts of interference on this shared VM (another tenant, a descheduled vCPU) can slow half
// the repeats of one measurement by 10x; the median then moves, the lower quartile does not.
// What a run adds on top is measured by the in-run probe, against these figures.
double lower_quartile(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[(v.size() - 1) / 4];
}

// The host's speed while measuring (exec/host_probe.hpp). This project's shared VMs switch
// between a fast and a slow state for seconds to minutes; a layer measured in the slow one costs
// 1.3-1.8x more, and two calibrations that land in different states disagree by as much. Each
// sample is taken just after a probe, and a figure is made from the samples taken at the fastest
// host speed seen (the reference) when it has enough of them.
class HostGate {
 public:
  /// Probes for a moment first, so that the earliest measurements have a reference too.
  HostGate() {
    for (int i = 0; i < 200; ++i) probe();
  }
  double probe() {
    const double us = host_probe_us();
    reference_us_ = std::min(reference_us_, us);
    return us;
  }
  double reference_us() const { return reference_us_; }
  bool at_speed(double probe_us) const { return plan::host_at_speed(probe_us, reference_us_); }
  /// Counts a figure made from samples at speed (or not).
  void count(bool at_speed) { (at_speed ? at_speed_ : slow_) += 1; }
  int figures_at_speed() const { return at_speed_; }
  int figures_slow() const { return slow_; }

 private:
  double reference_us_ = 1e300;
  int at_speed_ = 0, slow_ = 0;
};

// How long to keep repeating one measurement.
struct Budget {
  int min_reps = 12;
  int max_reps = 200;
  double min_total_us = 60'000;
  HostGate* gate = nullptr;  ///< none: every sample counts
};
Budget budget(bool quick, HostGate* gate) { return quick ? Budget{8, 60, 20'000, gate} : Budget{12, 200, 60'000, gate}; }

// The fewest samples at the host's reference speed a figure is made of; with fewer, of all.
constexpr size_t kMinSamplesAtSpeed = 4;

// Repeats `rep` (which returns one sample per named figure) after one warm-up call, and returns
// each figure's lower quartile over the samples taken at the host's reference speed (all of
// them when too few were). Slow samples do not count towards the time budget, up to max_reps.
std::vector<double> repeat(const std::function<std::vector<double>()>& rep, const Budget& b) {
  rep();
  std::vector<std::vector<double>> samples;
  std::vector<bool> at_speed;
  size_t fast = 0;
  double total = 0;
  for (int i = 0; i < b.max_reps && (i < b.min_reps || total < b.min_total_us || (b.gate && fast < kMinSamplesAtSpeed)); ++i) {
    const bool ok = !b.gate || b.gate->at_speed(b.gate->probe());
    const auto t0 = Clock::now();
    const auto s = rep();
    if (ok) total += us_since(t0), ++fast;
    at_speed.push_back(ok);
    if (samples.empty()) samples.resize(s.size());
    for (size_t k = 0; k < s.size(); ++k) samples[k].push_back(s[k]);
  }
  // The reference may have dropped during the loop: judge every sample by the final one.
  const bool use_speed = b.gate && fast >= kMinSamplesAtSpeed;
  if (b.gate) b.gate->count(use_speed);
  std::vector<double> out;
  for (auto& v : samples) {
    std::vector<double> kept;
    for (size_t i = 0; i < v.size(); ++i)
      if (!use_speed || at_speed[i]) kept.push_back(v[i]);
    out.push_back(lower_quartile(std::move(kept)));
  }
  return out;
}

// A layer's input for a micro-batch, as the previous layer (or the data) gives it, on `device`.
torch::Tensor layer_input(const plan::Layer& l, int64_t mb, torch::Device device) {
  const auto& s = l.shape;
  const auto on = torch::TensorOptions().device(device);
  switch (l.kind) {
    case plan::LayerKind::linear: return torch::randn({mb, s.in}, on);
    case plan::LayerKind::embedding: return torch::randint(0, s.vocab, {mb, s.seq_len}, on.dtype(torch::kLong));
    case plan::LayerKind::encoder:
    case plan::LayerKind::head: return torch::randn({s.seq_len, mb, s.hidden}, on);
    case plan::LayerKind::synthetic: break;
  }
  throw std::logic_error("synthetic layers are not measured");
}

torch::Tensor loss_target(const plan::Layer& last, int64_t mb, torch::Device device) {
  const auto on = torch::TensorOptions().device(device).dtype(torch::kLong);
  if (last.kind == plan::LayerKind::head) return torch::randint(0, last.shape.vocab, {mb, last.shape.seq_len}, on);
  return torch::randint(0, last.shape.out, {mb}, on);
}

// The autocast type of a precision (fp32: autocast off).
c10::ScalarType autocast_type(plan::Precision p) {
  return p == plan::Precision::bf16 ? at::kBFloat16 : p == plan::Precision::fp16 ? at::kHalf : at::kFloat;
}

// Times the phases of one repeat. On the CPU: the host clock around each phase. On a GPU: CUDA
// events around each phase's launches on the current stream, as a run times its compute actions
// (exec/gpu.hpp), read after one synchronize per repeat. A phase then costs what the device took
// from its first launch to its last kernel's end, host gaps between launches included, which is
// what a run's F and B spans on a GPU hold.
class PhaseClock {
 public:
  explicit PhaseClock(torch::Device device)
      : device_(device), events_(device.is_cuda() ? gpu::make_compute_timer() : nullptr) {}

  void begin() {
    if (!events_) {
      t0_ = Clock::now();
      return;
    }
    if (!started_) {
      torch::cuda::synchronize(device_.index());  // the anchor event must run at once
      events_->start_step(0);
      started_ = true;
    }
    events_->begin();
  }
  void end() {
    if (events_) events_->end();
    else host_us_.push_back(us_since(t0_));
  }
  /// This repeat's phases in microseconds, in order; the clock is then ready for the next one.
  std::vector<double> lap() {
    std::vector<double> out;
    if (!events_) {
      out.swap(host_us_);
      return out;
    }
    torch::cuda::synchronize(device_.index());
    for (const auto& [b, e] : events_->collect()) out.push_back(static_cast<double>(e - b) / 1e3);
    started_ = false;
    return out;
  }

 private:
  torch::Device device_;
  std::unique_ptr<gpu::ComputeTimer> events_;
  bool started_ = false;
  Clock::time_point t0_;
  std::vector<double> host_us_;
};

// One layer signature to measure, with an example layer and what its models need.
struct Work {
  plan::Layer layer;
  plan::Precision precision = plan::Precision::fp32;
  bool first = false;  // some model starts with it: measure backward without the input gradient
  bool last = false;   // some model ends with it: measure the loss
  std::set<int> used;  // micro-batch sizes plans use
  int largest_batch = 1;
};

// The optimizer step (and zero_grad) over the parameter tensors `ps`.
double optimizer_step_us(const plan::OptimizerSpec& spec, std::vector<torch::Tensor> ps, const Budget& b,
                         PhaseClock& clock) {
  std::vector<torch::Tensor> grads;
  for (auto& p : ps) {
    p = p.detach().requires_grad_(true);
    grads.push_back(torch::randn_like(p));
  }
  std::unique_ptr<torch::optim::Optimizer> opt;
  if (spec.kind == "sgd")
    opt = std::make_unique<torch::optim::SGD>(ps, torch::optim::SGDOptions(0.01).momentum(spec.momentum));
  else if (spec.kind == "adam")
    opt = std::make_unique<torch::optim::Adam>(ps, torch::optim::AdamOptions(1e-3));
  else
    opt = std::make_unique<torch::optim::AdamW>(ps, torch::optim::AdamWOptions(1e-3));
  return repeat(
             [&] {
               // Each repeat's gradients, untimed: zero_grad() drops them in LibTorch 2.x
               // (set_to_none), as a run's next backward makes them anew; 1.13 zeroes them.
               for (size_t i = 0; i < ps.size(); ++i) ps[i].mutable_grad() = grads[i];
               clock.begin();
               opt->step();
               opt->zero_grad();
               clock.end();
               return clock.lap();
             },
             b)[0];
}

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
    c.backward_call_us = backward_call_us();
    say("backward call overhead " + fmt(c.backward_call_us) + " us");
    int i = 0;
    std::vector<size_t> slow;  // signatures with a figure that had too few samples at the host's reference speed
    for (const auto& w : work_) {
      const auto t0 = Clock::now();
      const int slow_before = gate_.figures_slow();
      auto [layer, loss] = measure(w, c.backward_call_us);
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
    measure_data(c);
    measure_optimizers(c);
    c.copy_gb_per_s = copy_gb_per_s();
    say("memory copy " + fmt(c.copy_gb_per_s) + " GB/s");
    if (device_.is_cuda()) {
      // One GPU, one rank: the layers have the device to themselves in a run too, and the
      // links are the base profile's (NCCL between GPUs is not measured here).
      c.host_probe_us = gate_.reference_us();
      return c;
    }
    c.shared_cores = shared_cores(c.backward_call_us);
    say("a layer takes " + fmt(c.shared_cores) + "x its time alone while the other rank computes too");
    command("gloo");
    gloo(&c);
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
  static std::string bytes_text(double b) {
    return b >= (1 << 20) ? fmt(b / (1 << 20)) + " MB" : b >= 1024 ? fmt(b / 1024) + " KB" : fmt(b) + " B";
  }
  void say(const std::string& line) const {
    if (options_.progress) options_.progress(line);
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
      const Work& w = work_[k];
      const int slow_before = gate_.figures_slow();
      auto [layer, loss] = measure(w, c->backward_call_us);
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
      const Work& w = work_[k];
      auto [layer, loss] = measure(w, c->backward_call_us);
      plan::SignatureCost& kept = c->layers[layer.signature];
      kept = plan::lower_of(kept, layer);
      if (w.last) c->losses[loss.signature] = plan::lower_of(c->losses[loss.signature], loss);
    }
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
      if (fresh) work_.push_back(Work{p.layers()[l], precision, false, false, {}, 1});
      Work& w = work_[it->second];
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

  // One layer signature over its micro-batch sizes; also its loss when a model ends with it.
  std::pair<plan::SignatureCost, plan::SignatureCost> measure(const Work& w, double call_us) {
    plan::SignatureCost layer, loss;
    layer.signature = loss.signature = plan::layer_signature(w.layer, w.precision);
    Stage module(std::vector<plan::Layer>{w.layer}, 0, 1, /*seed=*/1);
    module->to(device_);
    const c10::ScalarType autocast = autocast_type(w.precision);
    const bool float_input = w.layer.kind != plan::LayerKind::embedding;
    double last_pass_us = 0;
    for (int mb : calibration_sizes({w.used.begin(), w.used.end()}, w.largest_batch, options_.quick)) {
      // Sizes whose one pass would take over ~2 s are left to extrapolation (keeps calibrate short).
      if (last_pass_us > 0 && !w.used.count(mb) && last_pass_us * 2 > 2e6) break;
      const auto x = layer_input(w.layer, mb, device_);
      const auto grad = torch::randn(output_shape(w.layer, mb), torch::TensorOptions().device(device_));
      auto pass = [&](bool input_grad) {
        return repeat(
            [&] {
              auto in = float_input ? x.clone().requires_grad_(input_grad) : x;
              torch::Tensor out;
              clock_.begin();
              {
                AutocastScope scope(autocast, device_.type());
                out = module->forward(in);
              }
              clock_.end();
              clock_.begin();
              torch::autograd::backward({out}, {grad.to(out.scalar_type())});
              clock_.end();
              clock_.begin();
              {
                torch::NoGradGuard no_grad;
                AutocastScope scope(autocast, device_.type());
                module->forward(in);
              }
              clock_.end();
              return clock_.lap();
            },
            budget_);
      };
      const auto with = pass(float_input);
      layer.forward.mb.push_back(mb);
      layer.forward.us.push_back(with[0]);
      layer.backward.mb.push_back(mb);
      layer.backward.us.push_back(std::max(0.0, with[1] - call_us));
      layer.forward_no_grad.mb.push_back(mb);
      layer.forward_no_grad.us.push_back(with[2]);
      if (w.first && float_input) {
        const auto without = pass(false);
        layer.backward_no_input.mb.push_back(mb);
        layer.backward_no_input.us.push_back(std::max(0.0, without[1] - call_us));
      }
      if (w.last) {
        const auto target = loss_target(w.layer, mb, device_);
        const auto l = repeat(
            [&] {
              auto out = torch::randn(output_shape(w.layer, mb), torch::TensorOptions().device(device_)).requires_grad_(true);
              torch::Tensor value;
              clock_.begin();
              {
                AutocastScope scope(autocast, device_.type());
                value = model_loss(w.layer, out, target);
              }
              clock_.end();
              clock_.begin();
              value.backward();
              clock_.end();
              return clock_.lap();
            },
            budget_);
        loss.forward.mb.push_back(mb);
        loss.forward.us.push_back(l[0]);
        loss.backward.mb.push_back(mb);
        loss.backward.us.push_back(std::max(0.0, l[1] - call_us));
      }
      last_pass_us = with[0] + with[1] + with[2];
    }
    return {layer, loss};
  }

  // One forward and backward of the signature at `mb` (backward less the call overhead), repeated.
  double forward_backward_us(const Work& w, int mb, double call_us, const Budget& b) {
    Stage module(std::vector<plan::Layer>{w.layer}, 0, 1, /*seed=*/1);
    const bool float_input = w.layer.kind != plan::LayerKind::embedding;
    const auto x = layer_input(w.layer, mb, torch::kCPU);
    const auto grad = torch::randn(output_shape(w.layer, mb));
    const auto t = repeat(
        [&] {
          auto in = float_input ? x.clone().requires_grad_(true) : x;
          auto t0 = Clock::now();
          const torch::Tensor out = module->forward(in);
          const double fwd = us_since(t0);
          t0 = Clock::now();
          torch::autograd::backward({out}, {grad});
          return std::vector<double>{fwd, us_since(t0)};
        },
        b);
    return t[0] + std::max(0.0, t[1] - call_us);
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
    std::vector<const Work*> sample;
    const size_t n = std::min(fp32.size(), kSharedCoreSamples);
    for (size_t i = 0; i < n; ++i) sample.push_back(&work_[fp32[i * fp32.size() / n]]);
    std::vector<double> alone;
    for (const Work* w : sample) alone.push_back(forward_backward_us(*w, *w->used.rbegin(), call_us, budget_));
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
    for (const Work& w : work_) {
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

  // Loading one micro-batch as the executor does (stage 0 with its input, the last stage the
  // target only), per data source and model input.
  void measure_data(plan::Calibration& c) {
    std::set<std::string> done;
    for (const plan::Plan& p : plans_) {
      const std::string key = plan::data_key(p.scenario.data.source, p.layers().front(), true);
      if (!done.insert(key).second) continue;
      // A copy of the plan whose micro-batch size we change between measurements: DataSource
      // reads it by reference, and its global batch (set at construction) covers every size.
      plan::Plan probe = p;
      const int largest = p.scenario.data.batch_size;
      probe.scenario.data.batch_size = largest;
      probe.scenario.parallel.chunks = 1;
      probe.scenario.parallel.data = 1;
      probe.scenario.parallel.grad_accumulation = 1;
      probe.microbatch_size = largest;
      DataSource data(probe);
      plan::CostCurve input, target;
      int64_t step = 0;
      for (int mb : calibration_sizes({p.microbatch_size}, largest, options_.quick)) {
        probe.microbatch_size = mb;
        const auto t = repeat(
            [&] {
              auto t0 = Clock::now();
              data.micro_batch(step, 0, 0, true);
              const double with_input = us_since(t0);
              t0 = Clock::now();
              data.micro_batch(step++, 0, 0, false);
              return std::vector<double>{with_input, us_since(t0)};
            },
            budget_);
        input.mb.push_back(mb);
        input.us.push_back(t[0]);
        target.mb.push_back(mb);
        target.us.push_back(t[1]);
      }
      c.data[key] = input;
      c.data[plan::data_key(p.scenario.data.source, p.layers().front(), false)] = target;
      say("data " + key + ": " + fmt(input.us.front()) + ".." + fmt(input.us.back()) + " us per micro-batch");
    }
  }

  void measure_optimizers(plan::Calibration& c) {
    std::set<std::pair<std::string, bool>> done;
    for (const plan::Plan& p : plans_) {
      const auto& o = p.scenario.optimizer;
      if (!done.insert({o.kind, o.momentum > 0}).second) continue;
      // Per-parameter cost bends where the state leaves the caches: a table over stage sizes.
      const plan::CostCurve curve = device_.is_cuda() ? stage_optimizer_curve(o) : optimizer_curve(o);
      c.optimizers.push_back({o.kind, o.momentum > 0, curve});
      say("optimizer " + o.kind + (o.momentum > 0 ? " (momentum)" : "") + ": " + fmt(curve.us.front()) + " us at " +
          fmt(curve.mb.front()) + " parameters .. " + fmt(curve.us.back()) + " us at " + fmt(curve.mb.back()));
    }
  }

  // On the CPU: `params` parameters in four tensors, at powers of 4 up to the largest stage.
  plan::CostCurve optimizer_curve(const plan::OptimizerSpec& o) {
    plan::CostCurve curve;
    for (int64_t n = 1 << 12; n <= largest_stage_params(); n *= 4) {
      std::vector<torch::Tensor> parts;
      for (int i = 0; i < 4; ++i) parts.push_back(torch::randn({n / 4}, torch::TensorOptions().device(device_)));
      curve.mb.push_back(static_cast<double>(n));
      curve.us.push_back(optimizer_step_us(o, std::move(parts), budget_, clock_));
    }
    return curve;
  }

  // On a GPU: each stage of the plans with its own parameter tensors, a point per stage size.
  // LibTorch's optimizers launch a few kernels per tensor, one tensor after another, so on a GPU
  // their step follows the number and shapes of the tensors more than their total size (a
  // 67M-parameter transformer's AdamW step took 2.3 ms on an H200's device in a run, a quarter
  // of it idle between launches, and 3.9 ms of the host's time to launch).
  plan::CostCurve stage_optimizer_curve(const plan::OptimizerSpec& o) {
    std::map<double, double> points;  // parameters -> us
    for (const plan::Plan& p : plans_) {
      if (p.scenario.optimizer.kind != o.kind || (p.scenario.optimizer.momentum > 0) != (o.momentum > 0)) continue;
      for (const plan::Stage& st : p.stages) {
        const double n = static_cast<double>(st.param_bytes) / 4.0;  // as the simulator looks it up
        if (points.count(n)) continue;
        Stage module(p, st.index, /*seed=*/1);
        module->to(device_);
        points[n] = optimizer_step_us(o, module->parameters(), budget_, clock_);
      }
    }
    plan::CostCurve curve;
    for (const auto& [n, us] : points) {
      curve.mb.push_back(n);
      curve.us.push_back(us);
    }
    return curve;
  }

  // Parameters of the largest stage of any plan, rounded up to the next power of 4 from 4096.
  int64_t largest_stage_params() const {
    int64_t most = 1 << 12;
    for (const auto& p : plans_)
      for (const auto& st : p.stages) most = std::max(most, st.param_bytes / 4);
    int64_t n = 1 << 12;
    while (n < most) n *= 4;
    return n;
  }

  double copy_gb_per_s() {
    const auto src = torch::randn({1 << 22}, torch::TensorOptions().device(device_));
    auto dst = torch::empty_like(src);
    const double us = repeat(
        [&] {
          clock_.begin();
          dst.copy_(src);
          clock_.end();
          return clock_.lap();
        },
        budget_)[0];
    return static_cast<double>(src.nbytes()) / (us * 1e3);
  }

  // --- both ranks ---

  void gloo(plan::Calibration* c) {
    const std::vector<int64_t> sizes = {1 << 8, 1 << 10, 1 << 14, 1 << 16, 1 << 18, 1 << 20, 1 << 22};  // floats
    std::vector<double> bytes, call, delivery, allreduce;
    for (int64_t n : sizes) {
      auto t = torch::zeros({n});
      auto back = torch::zeros({n});
      auto token = torch::zeros({1});
      const int reps = n >= (1 << 20) ? 8 : 30;
      std::vector<double> in_call, one_way, ar;
      // Every message here has its receive posted first, so that the sender writes the payload
      // in its send call (the run's other order is measured by the in-run probe): rank 1 posts
      // its receive, then tells rank 0 with a token over the same connection, which arrives after
      // the receive's notification; rank 0 posts the pong's receive before it sends.
      for (int r = 0; r < reps + 2; ++r) {
        std::vector<torch::Tensor> v{t}, w{back}, k{token};
        if (comm_.rank() == 0) {
          auto pong = comm_.world().recv(w, 1, 8);
          comm_.world().recv(k, 1, 9)->wait();
          const auto t0 = Clock::now();
          auto work = comm_.world().send(v, 1, 7);
          if (r >= 2) in_call.push_back(us_since(t0));
          pong->wait();
          if (r >= 2) one_way.push_back(us_since(t0) / 2);
          work->wait();
        } else {
          auto ping = comm_.world().recv(v, 0, 7);
          comm_.world().send(k, 0, 9)->wait();
          ping->wait();
          comm_.world().send(w, 0, 8)->wait();
        }
        const auto t1 = Clock::now();
        comm_.world().allreduce(v)->wait();
        if (r >= 2) ar.push_back(us_since(t1));
      }
      bytes.push_back(static_cast<double>(t.nbytes()));
      if (comm_.rank() == 0) {
        call.push_back(median(in_call));
        // A one-way trip is the send call, then delivery (the receiver's Gloo thread reading).
        delivery.push_back(std::max(0.0, median(one_way) - call.back()));
      }
      allreduce.push_back(median(ar));
    }
    if (!c) return;
    c->send_call.mb = bytes;
    c->send_call.us = call;
    c->p2p = alpha_beta(bytes, delivery);
    c->allreduce = alpha_beta(bytes, allreduce);
    c->allreduce_ranks = 2;
  }

  // Latency from the smallest message, bandwidth from the slope over the large ones.
  static plan::AlphaBeta alpha_beta(const std::vector<double>& bytes, const std::vector<double>& us) {
    const size_t from = bytes.size() / 2;
    const auto fit = plan::fit_linear({bytes.begin() + from, bytes.end()}, {us.begin() + from, us.end()});
    plan::AlphaBeta ab;
    ab.bandwidth_gb_per_s = fit.per_sample_us > 0 ? 1.0 / (fit.per_sample_us * 1e3) : 1e3;
    ab.latency_us = std::max(0.0, us.front() - bytes.front() / (ab.bandwidth_gb_per_s * 1e3));
    return ab;
  }

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
        gloo(nullptr);
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
  std::vector<Work> work_;
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
  return CalibrationRun{std::move(*measured), std::move(probes), calibrator.pass_differences()};
}

}  // namespace parallax::exec
