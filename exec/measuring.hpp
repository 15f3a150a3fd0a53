#pragma once
// What `parallax calibrate` measures with, apart from the driver that decides what to measure
// (exec/calibrate.cpp): repeating a measurement until it is steady at the host's reference speed,
// the clock that times a repeat's phases on the CPU or a GPU, a layer's input, timing one layer
// signature (measuring_layer.cpp), and the measurements that need no layer: loading data, the
// optimizer step (measuring_optimizer.cpp), a memory copy and Gloo between the two ranks. For exec's own files only: not an interface of the exec module.
#include <chrono>
#include <functional>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "exec/comm.hpp"
#include "exec/gpu.hpp"
#include "exec/model.hpp"
#include "plan/calibration.hpp"
#include "plan/plan.hpp"

namespace parallax::exec::measuring {

using Clock = std::chrono::steady_clock;

double us_since(Clock::time_point t0);

/// The host's speed while measuring (exec/host_probe.hpp). This project's shared VMs switch
/// between a fast and a slow state for seconds to minutes; a layer measured in the slow one costs
/// 1.3-1.8x more, and two calibrations that land in different states disagree by as much. Each
/// sample is taken just after a probe, and a figure is made from the samples taken at the fastest
/// host speed seen (the reference) when it has enough of them.
class HostGate {
 public:
  /// Probes for a moment first, so that the earliest measurements have a reference too.
  HostGate();
  double probe();
  double reference_us() const { return reference_us_; }
  bool at_speed(double probe_us) const;
  /// Counts a figure made from samples at speed (or not).
  void count(bool at_speed) { (at_speed ? at_speed_ : slow_) += 1; }
  int figures_at_speed() const { return at_speed_; }
  int figures_slow() const { return slow_; }

 private:
  double reference_us_ = 1e300;
  int at_speed_ = 0, slow_ = 0;
};

/// How long to keep repeating one measurement: at least min_reps samples and min_total_us of
/// samples at the host's reference speed (4 of them with a gate), each only until the figure has
/// taken its time limit, and never more than max_reps.
struct Budget {
  int min_reps = 12;
  int max_reps = 200;
  double min_total_us = 60'000;
  /// A figure that has taken this long stops at 4 samples rather than min_reps: a repeat of a
  /// large layer takes seconds, and 12 of them made a few signatures most of calibrate's time.
  double enough_us = 3e6;
  /// Waiting for samples at the reference speed stops here: a slow spell of the host can last
  /// minutes, and remeasuring later (calibrate's last pass) finds it fast more often than waiting.
  double wait_us = 10e6;
  HostGate* gate = nullptr;  ///< none: every sample counts
};
Budget budget(bool quick, HostGate* gate);
/// Whether repeat() takes another sample, having taken `reps` in `spent_us`, `fast` of them (in
/// `fast_us`) at the host's reference speed.
bool another_sample(const Budget& b, int reps, double spent_us, int fast, double fast_us);

/// Repeats `rep` (which returns one sample per named figure) after one warm-up call, and returns
/// each figure's undisturbed level (timeline::undisturbed, the statistic a run's step is measured
/// by: a cost as the machine gives it when nothing else interferes) over the samples taken at the
/// host's reference speed (all of them when too few were). Slow samples do not count towards the time budget, up to max_reps.
std::vector<double> repeat(const std::function<std::vector<double>()>& rep, const Budget& b);

/// A layer's input for a micro-batch, as the previous layer (or the data) gives it, on `device`.
torch::Tensor layer_input(const plan::Layer& l, int64_t mb, torch::Device device);
torch::Tensor loss_target(const plan::Layer& last, int64_t mb, torch::Device device);

/// Times the phases of one repeat. On the CPU: the host clock around each phase. On a GPU: CUDA
/// events around each phase's launches on the current stream, as a run times its compute actions
/// (exec/gpu.hpp), read after one synchronize per repeat. A phase then costs what the device took
/// from its first launch to its last kernel's end, host gaps between launches included, which is
/// what a run's F and B spans on a GPU hold.
class PhaseClock {
 public:
  explicit PhaseClock(torch::Device device);
  void begin();
  void end();
  /// This repeat's phases in microseconds, in order; the clock is then ready for the next one.
  /// With host_too, the host's time of each phase follows them (on a GPU: the time to launch its
  /// kernels, the call returning once they are queued; on the CPU the same figures twice).
  std::vector<double> lap(bool host_too = false);
  /// On a GPU: before each phase, keep the device busy for `us` (gpu::keep_busy), so that the
  /// phase's kernels queue up while the host launches them and its events then time the device
  /// alone, launch gaps excluded. 0 (the default): phases start on an idle device.
  void keep_busy_ahead(double us) { ahead_us_ = us; }

 private:
  torch::Device device_;
  std::unique_ptr<gpu::ComputeTimer> events_;
  bool started_ = false;
  double ahead_us_ = 0;
  Clock::time_point t0_;
  std::vector<double> host_us_;
};

/// Where and how a measurement runs: the device, its clock, the repeat budget, --quick.
struct Bench {
  torch::Device device;
  PhaseClock* clock;
  Budget budget;
  bool quick = false;
  /// On a GPU (calibrate --launch): time the device with it kept busy ahead, and the host's
  /// launches apart (plan::SignatureCost::forward_launch and the others).
  bool launch = false;
};

/// One layer signature to measure, with an example layer and what its models need.
struct SignatureWork {
  plan::Layer layer;
  plan::Precision precision = plan::Precision::fp32;
  bool first = false;  ///< some model starts with it: measure backward without the input gradient
  bool last = false;   ///< some model ends with it: measure the loss
  std::set<int> used;  ///< micro-batch sizes plans use
  int largest_batch = 1;
};

/// One layer signature over its micro-batch sizes (calibration_sizes), and its loss when a model
/// ends with it; `call_us` is autograd's own call time, taken out of each backward
/// (plan::Calibration::backward_call_us). exec/measuring_layer.cpp.
std::pair<plan::SignatureCost, plan::SignatureCost> measure_signature(const SignatureWork& w, double call_us, const Bench& b);

/// One forward and backward of the signature at `mb` on the CPU (backward less `call_us`), repeated.
double forward_backward_us(const SignatureWork& w, int mb, double call_us, const Budget& b);

/// The optimizer step (and zero_grad) over the parameter tensors `ps`.
double optimizer_step_us(const plan::OptimizerSpec& spec, std::vector<torch::Tensor> ps, const Bench& b);

/// Loading one micro-batch as the executor does, per data source and model input of the plans.
struct DataCost {
  std::string key, target_key;  ///< plan::data_key with the input, and with the target only
  plan::CostCurve input, target;
};
std::vector<DataCost> measure_data(const std::vector<plan::Plan>& plans, const Bench& b);

/// The optimizer step per kind of the plans' optimizers, over parameter counts.
std::vector<plan::OptimizerCost> measure_optimizers(const std::vector<plan::Plan>& plans, const Bench& b);

/// fp16's loss scaler (unscale, inf/NaN check, the host's read of the flag) over each stage's
/// parameters of the plans: "mb" holds parameter counts.
plan::CostCurve measure_loss_scaler(const std::vector<plan::Plan>& plans, const Bench& b);

/// From the CUDA caching allocator's count on a GPU, the count of live tensors on the CPU
/// (count_tensor_memory must be on): the bytes `layer`'s forward at micro-batch
/// `mb` (under autocast to `autocast`) leaves allocated while its output, and with it the autograd
/// graph, lives: what a run holds from an F until its B. The input is made before, as the layer
/// before's output (counted there). With `with_loss`, the same for the loss on the layer's output.
struct KeptBytes {
  double layer = 0, loss = 0;
};
KeptBytes kept_bytes(Stage& module, const plan::Layer& layer, bool with_loss, int64_t mb, c10::ScalarType autocast,
                     torch::Device device);

/// A device memory copy's speed.
double copy_gb_per_s(const Bench& b);

/// Gloo between the two ranks of `comm`, both calling it: the send call, delivery after it and a
/// 2-rank all-reduce over message sizes, written into `c` on rank 0 (null on the other rank).
void measure_gloo(Communicator& comm, plan::Calibration* c);

}  // namespace parallax::exec::measuring
