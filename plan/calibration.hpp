#pragma once
// What `parallax calibrate` measured on one machine, as the `calibration:` section of a hardware
// profile. Layer costs are keyed by a layer *signature* (kind, shapes, precision), so any model
// made of the same layers reuses them whatever its name or depth. Each cost is a table over
// micro-batch sizes: linear between measured sizes and, beyond the largest, the least-squares line
// through the upper half of the table (calibrate prints how far a single line would be off; on
// this CPU per-sample costs bend at cache sizes, so a table is kept rather than one line).
//
// No LibTorch here: exec/calibrate measures and writes, plan/ reads, the simulator applies.
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "plan/layers.hpp"
#include "plan/precision.hpp"
#include "plan/yaml_reader.hpp"

namespace parallax::plan {

/// Microseconds as a function of micro-batch size.
struct CostCurve {
  std::vector<double> mb;  ///< ascending, > 0
  std::vector<double> us;  ///< same length, >= 0

  bool empty() const { return mb.empty(); }
  /// Interpolated cost; 0 for an empty curve; never negative.
  double at(double microbatch) const;
};

/// Least-squares line us = fixed_us + per_sample_us * mb and its largest relative residual.
struct LinearFit {
  double fixed_us = 0;
  double per_sample_us = 0;
  double max_relative_residual = 0;
};
LinearFit fit_linear(const std::vector<double>& mb, const std::vector<double>& us);

/// One kind of action (F, B or OPTIM) measured in a probe run: its mean time alone (the
/// calibrated tables) and its mean time in the run, per action.
struct InRunPoint {
  double alone_us = 0, in_run_us = 0;
};

/// A kind's time in a run as a line over its time alone: in_run = factor x alone + extra_us.
struct InRunLine {
  double factor = 1, extra_us = 0;
  bool bounded = false;  ///< the factor is the bound, not what the probes gave
  double fitted = 1;     ///< what the probes gave, before the bound
};

/// The line through a small model's point and a large model's. A run slows small layers by a
/// fixed cost per action and large ones in proportion, and one model cannot tell the two apart:
/// without `large`, or when its actions are not at least twice as long, the factor is 1 and the
/// extra the small model's difference. The factor is bounded to [0.8, 2.5] (a noisy probe must
/// not turn a 1.2x slowdown into 5x); the line then still passes through the small model's point,
/// and says that it is bounded and what the probes gave.
InRunLine fit_in_run_line(const InRunPoint& small, const InRunPoint* large);

/// One layer signature measured with the executor's own module.
struct SignatureCost {
  std::string signature;
  CostCurve forward;              ///< with autograd recording (the normal F)
  CostCurve forward_no_grad;      ///< under no_grad (F with activation checkpointing)
  CostCurve backward;             ///< with the input gradient, without the backward call overhead
  CostCurve backward_no_input;    ///< the model's first layer: weight gradients only
  /// On a GPU: the bytes the forward (with autograd recording) leaves allocated until its
  /// backward, from the CUDA caching allocator's statistics: the tensors autograd saves, the
  /// output, and under autocast the 16-bit copies of the weights it saves. The layer's input is
  /// not in it (the layer before counts it as its output). "us" holds bytes; empty elsewhere.
  CostCurve kept_bytes;
  /// On a GPU: the host's time to launch the forward's (with autograd recording) and the
  /// backward's kernels, measured apart from their device time (`fwd_launch_us`, `bwd_launch_us`).
  /// With them, `forward` and `backward` are the device's time, and the simulator runs each
  /// action at the larger of the two along the schedule; empty: `forward` and `backward` were
  /// timed from an idle device and hold the launches.
  CostCurve forward_launch, backward_launch;
};

/// Two measurements of one signature taken minutes apart (calibrate's two passes over the
/// layers): the median (the upper middle of an even count) of the relative differences
/// |a - b| / min(a, b) of forward and backward at each size both measured; 0 when they share no
/// size. A median, since the smallest sizes of small layers (a few us) differ by 2x at random.
double pass_difference(const SignatureCost& a, const SignatureCost& b);
/// The lower of two passes at each size both measured; `a` as it is elsewhere. calibrate keeps
/// the cost alone as the machine gives it when nothing interferes (as its 20th percentiles do).
SignatureCost lower_of(const SignatureCost& a, const SignatureCost& b);

/// A point-to-point or collective time model: latency + bytes / bandwidth.
struct AlphaBeta {
  double latency_us = 0;
  double bandwidth_gb_per_s = 0;  ///< GB = 1e9 bytes
  double us(double bytes) const { return latency_us + (bandwidth_gb_per_s > 0 ? bytes / (bandwidth_gb_per_s * 1e3) : 0); }
};

/// How much longer compute and communication take inside a real run than alone, measured by
/// running the executor on a probe plan and comparing its actions (means without the top 1%) with
/// what the calibrated tables predict for them. It holds what isolated timings miss: caches that
/// the other micro-batches, the messages and the other rank's threads evict, and Gloo's threads
/// taking CPU from compute on shared cores. Compute in a run takes
/// The least an in-run factor may be, which a profile's reader enforces: no run makes an action or
/// a step's all-reduces ten times faster than alone. What calibrate measures below it is held
/// there and said (InRunFactors::bounded).
constexpr double kMinInRunFactor = 0.1;

/// `alone x factor + extra_us`.
struct InRunFactors {
  double forward = 1, backward = 1, optimizer = 1;
  /// Time each F, B and OPTIM adds inside a run, beyond its (scaled) time alone. The slowdown is
  /// partly a cost per action (caches refilled after the other micro-batches and the messages,
  /// threads woken on shared cores) and partly a proportion (the other rank's compute sharing
  /// caches and memory bandwidth): small MLP layers take ~2x their time alone in a run, a small
  /// transformer's layers 1.2-1.5x. calibrate fits both where it has two models of different
  /// sizes to probe (fit_in_run_line), else the extras alone with the factors at 1.
  double forward_extra_us = 0, backward_extra_us = 0, optimizer_extra_us = 0;
  /// The longest time alone (per action) of the probed models, where the factors were fitted: the
  /// proportional part applies up to it and stays there for longer actions, which are not
  /// slowed in proportion (the built-in transformer's F and B of 150-240 ms ran at about their
  /// time alone where the line through the probes, of actions of 0.1-3 ms, said 1.14x). 0: no
  /// limit (one probed model, or a profile from before).
  double forward_probed_us = 0, backward_probed_us = 0, optimizer_probed_us = 0;
  /// DDP all-reduces of a step (the time from the first one's start to the last one's end)
  /// against the calibrated all-reduce cost: they share the cores with backward and each other.
  double allreduce = 1;
  /// DDP (the data-parallel probe's factors only): the step's last backward of a stage, whose
  /// hooks hand the buckets to Gloo, takes this much longer than the other backwards per MB of
  /// the stage's gradients beyond the bucket copy-in: the all-reduces' copies and sums run on the
  /// same cores meanwhile. Measured here ~180-250 us per MB for MLPs of 0.9-7 MB of gradients,
  /// with 2 or 3 buckets alike; the earlier backwards (no_sync) take only backward_extra_us.
  double sync_backward_extra_us_per_mb = 0;
  /// Gloo moves a message once both sides have posted; the executor posts a step's receives at
  /// its start, so a send finds its receive posted. A SEND's main-thread time in the run beyond
  /// the bare send call (converting the tensor, writing it, handing it to the watcher thread),
  /// and delivery beyond the ping-pong's.
  double send_extra_us = 0, delivery_extra_us = 0;
  std::string probe;  ///< the plan it was measured on, in words
  /// The factors that are a fit's bound rather than a measurement, in words ("forward 2.5, the
  /// probes gave 4.10"); "" when none. Written into the profile beside them, so that a bound is
  /// never read back as if measured.
  std::string bounded;
};

/// One optimizer step plus zero_grad, against the parameters it updates.
struct OptimizerCost {
  std::string kind;  ///< sgd | adam | adamw
  bool momentum = false;
  CostCurve by_params;  ///< "mb" holds parameter counts
  /// On a GPU: the host's time to launch the step's kernels, by the same parameter counts
  /// (`launch_us`; empty: not measured apart, and by_params holds it).
  CostCurve launch;
  /// Measured on the CPU, where by_params is timed on 4 tensors: what each further tensor adds.
  /// LibTorch's optimizers step one tensor after another, a few calls each, so a stage of many
  /// small tensors (a transformer block holds 12) costs more than its parameter count says.
  /// 0 on a GPU, whose by_params points are the stages' own tensors (exec/measuring.cpp).
  double per_tensor_us = 0;
  /// The tensors by_params was timed on.
  static constexpr int kCurveTensors = 4;
  /// One step over `params` parameters in `tensors` tensors.
  double us(double params, int tensors) const;
};

struct Calibration {
  std::string source;   ///< file it came from
  int threads = 1;      ///< LibTorch threads per rank the costs were measured with
  int cores = 1;        ///< cores the local ranks share
  InRunFactors in_run;          ///< compute inside a real run against alone: a pipeline probe
  /// The same measured on a data-parallel probe (DDP): for plans with data > 1, whose compute
  /// shares the cores with all-reduces rather than with pipeline messages.
  std::optional<InRunFactors> in_run_data;
  double backward_call_us = 0;  ///< fixed cost of one autograd backward call (once per B)
  double copy_gb_per_s = 0;     ///< memory copy bandwidth (DDP bucket copies)
  /// The host's speed when the costs were measured, as the reference operator's time
  /// (exec::host_probe_us; 0: not measured): calibrate keeps the samples taken at it (within
  /// kHostSpeedTolerance, host_at_speed()). A run's trace records the probe before each step,
  /// for the reader; measured step times are taken by the step statistic instead.
  double host_probe_us = 0;
  /// A layer's time while the other local rank computes too, against alone (the median over a
  /// few signatures): cores shared with the other rank, or the host's cores behind them. The
  /// profile carries it as interference.compute_while_computing (1: not measured), for the
  /// simulator to apply while two ranks of a node compute at once.
  double shared_cores = 1;
  /// The sender's own time in Gloo's send call (the loopback TCP stack copies the message in
  /// the caller's thread), by message size: "mb" holds bytes. It keeps the sender from computing.
  CostCurve send_call;
  AlphaBeta p2p;                ///< Gloo delivery between two local ranks, after the send call
  AlphaBeta allreduce;          ///< Gloo all-reduce of `allreduce_ranks` local ranks
  int allreduce_ranks = 2;
  /// Gloo all-gather as the executor runs FSDP's (exec/fsdp.cpp: each rank broadcasts its slice
  /// into the gathered tensor), of `allreduce_ranks` local ranks, by the gathered tensor's bytes.
  /// Not the half all-reduce it was taken as before it was measured (absent: that): a broadcast
  /// moves each slice once and sums nothing.
  AlphaBeta allgather;
  /// The same all-gathers by the gathered tensor's bytes ("mb" holds bytes), as measured: the
  /// simulator reads a gather's time from it. Gloo's time is no line in the bytes: the line's
  /// slope through the large sizes plus the smallest message's time overstates a 1 MB gather
  /// (1.6x on an AMD EPYC VM, 2026-12-06). Empty: a profile from before it was kept (the line).
  CostCurve allgather_by_bytes;
  /// Of a Gloo all-gather's time, the share that is CPU work on the rank's own cores (the process's
  /// CPU time over the wall time, median over the large messages): Gloo's threads copying into and
  /// out of the sockets, beside the waits for the peer. Compute beside a collective on the same
  /// cores loses this share of it (sim: beside_compute). 0: not measured.
  double allgather_cpu_share = 0;
  std::map<std::string, SignatureCost> layers;  ///< by signature
  std::map<std::string, SignatureCost> losses;  ///< by the last layer's signature (forward, backward)
  std::map<std::string, CostCurve> data;        ///< by "SOURCE input|target": loading one micro-batch
  std::vector<OptimizerCost> optimizers;
  /// fp16's loss scaler on a GPU, by the parameters it checks ("mb" holds parameter counts):
  /// unscaling every gradient, checking it for inf and NaN, and the host reading the flag, from
  /// an idle device (exec/grad_scaler.hpp). The read stops the host running ahead, so the
  /// optimizer's launches that follow are no longer hidden behind the backward. Empty: not measured.
  CostCurve loss_scaler;

  const SignatureCost* layer(const std::string& signature) const;
  const SignatureCost* loss(const std::string& signature) const;
  const OptimizerCost* optimizer(const std::string& kind, bool momentum) const;
};

/// On the shared VMs this is measured on, the host switches between speeds for seconds to
/// minutes: the reference operator takes ~12.8 us in the fast state and 15-17 us in the slow one
/// (small LibTorch layers slow 1.3-1.8x with it; docs/accuracy.md). 12% sits between the two and
/// above the fast state's own jitter (+-3%).
inline constexpr double kHostSpeedTolerance = 1.12;
/// Whether a probe time says the host ran at the speed of `reference_us` (or faster).
inline bool host_at_speed(double probe_us, double reference_us) {
  return reference_us <= 0 || probe_us <= reference_us * kHostSpeedTolerance;
}

/// "linear 784x256 relu fp32", "encoder h512 heads8 ffn2048 seq128 bf16", ...
std::string layer_signature(const Layer& layer, Precision precision);
/// The signatures of `layers` at `precision` that `calibration` has not measured, each once, in
/// order: what the cost model then takes from the device's peak figures instead.
std::vector<std::string> unmeasured_signatures(const Calibration& calibration, const std::vector<Layer>& layers,
                                               Precision precision);

/// Key of `Calibration::data`: loading one micro-batch of `source` for a model starting with
/// `first_layer`, with its inputs (first stage) or only its targets (last stage).
std::string data_key(const std::string& source, const Layer& first_layer, bool with_input);

/// Parses a profile's `calibration:` map (unknown keys and negative costs are InputErrors).
Calibration parse_calibration(const Field& map);
/// The `calibration:` section as YAML text (indented two spaces, as under the key).
std::string calibration_yaml(const Calibration& c);

struct HardwareProfile;
/// A whole profile file: `base`'s device and network (the node link set to the measured Gloo
/// send/recv figures), named NAME, with `calibration`; `header` lines become leading comments.
std::string calibrated_profile_yaml(const HardwareProfile& base, const std::string& name, const Calibration& calibration,
                                    const std::vector<std::string>& header);
/// A GPU calibration's profile: `base_text` (a whole profile file, which keeps its device kind,
/// collectives, links and NCCL section, comments and all) renamed NAME, with `calibration`
/// appended; `header` lines become leading comments. A base that already has a `calibration:`
/// section is a logic_error (calibrate refuses it first).
std::string calibrated_copy_yaml(const std::string& base_text, const std::string& name, const Calibration& calibration,
                                 const std::vector<std::string>& header);

}  // namespace parallax::plan
