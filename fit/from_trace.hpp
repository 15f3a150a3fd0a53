#pragma once
// What if: a profile fitted from a job's own measured runs (`parallax calibrate --from-trace`),
// so that the job's other configurations (chunks, schedules, partitions, buckets) are predicted
// from what this machine did with this model, not from a datasheet or micro-benchmarks alone.
//
// The traces are of one configuration of the job (the plan given): Parallax's measured traces
// (`parallax run -o`), or PyTorch profiler (Kineto) traces of torch.distributed.pipelining, whose
// schedules name each action's span `PP:<action>` (record_function; "PP:0F1", "PP:1B0", as
// Parallax names actions), or of a data-parallel job's forward / backward / optimizer phases. Their undisturbed steps (timeline::undisturbed_steps) are taken, and
// the simulator is made to reproduce them: per stage, the measured F and B against the predicted,
// spread onto the stage's layer signatures by their share of the stage's predicted time; the
// optimizer step and the all-reduces likewise. A few rounds, since the base profile's fixed costs
// per action do not scale. Only what the traces show is fitted; the rest stays the base's, and
// the result says which is which.
#include <string>
#include <vector>

#include "plan/fitted.hpp"
#include "plan/plan.hpp"
#include "timeline/timeline.hpp"
#include "timeline/trace_reader.hpp"

namespace parallax::fit {

/// A trace's actions as a measured timeline of `plan`: a Parallax measured trace as it is, once
/// its plan summary is the plan's (same layers, layout, chunks and schedule); a Kineto trace
/// through its `PP:<action>` spans, each rank its distributedInfo rank, each step the
/// ProfilerStep#N span around it (or the action's repeat count without those). A Kineto trace of
/// a data-parallel job without a pipeline and with one micro-batch a step, and without such
/// spans, through its phases: "## forward ##" (or DistributedDataParallel.forward) as F,
/// "## backward ##" as B, "## optimizer ##" (or Optimizer.step#...) as OPTIM. InputError naming
/// the trace and what differs when it is of another model or layout, or holds no action of it.
timeline::Timeline measured_actions(const timeline::LoadedTrace& trace, const plan::Plan& plan);

struct TraceFit {
  plan::FittedCosts costs;
  std::vector<std::string> fitted;  ///< what the traces gave, in words
  std::vector<std::string> kept;    ///< what stays the base profile's, in words
  /// The kinds of compute action the job has and the traces do not ("backward", "optimizer step"):
  /// kept from the base, so the fitted step is off by what they are.
  std::vector<std::string> missing;
  plan::Time measured_step;           ///< the step statistic, the median over the traces
  plan::Time base_step, fitted_step;  ///< the step predicted with the base profile, and fitted
  int steps = 0;                      ///< undisturbed steps the fit is over, all traces
};

/// Fits `plan`'s hardware profile to the measured timelines (measured_actions of each trace).
/// `kernels`: factors by kind of kernel fitted first (fit_kernel_kinds), which the layer factors
/// then fit over.
TraceFit fit_to_measured(const plan::Plan& plan, const std::vector<timeline::Timeline>& measured,
                         const plan::FittedCosts::Kernels& kernels = {});

/// The kind of a GPU kernel by its name, as the compute model splits a layer: GEMMs (cuBLAS,
/// CUTLASS and their xmma / wgmma / nvjet kernels), flash attention (flash, fmha), communication (NCCL)
/// and copies (memcpy, memset), and the rest, memory-bound (elementwise, norms, softmax, dropout).
enum class KernelKind { gemm, flash, memory, communication, copy };
KernelKind kernel_kind(const std::string& name);

/// Per-kernel-kind factors from GPU traces that show their kernels (Parallax's measured traces
/// with CUPTI's kernels attributed to actions; PyTorch profiler traces, whose kernels go to the
/// action span, PP:<action> or a phase, that holds their launch, paired by args.correlation):
/// over every F and B of the steps after the first,
/// the kernels' time of each kind against what the profile's compute model (`device.compute`)
/// says of that kind for those actions (plan::kernel_class_times). A kind the traces or the model
/// do not show stays 1. `said` gets one line per kind, or why nothing was fitted.
/// `measured_actions_of`: each trace's measured_actions where the caller has them (else built here).
plan::FittedCosts::Kernels fit_kernel_kinds(const plan::Plan& plan, const std::vector<timeline::LoadedTrace>& traces,
                                            std::vector<std::string>* said,
                                            const std::vector<timeline::Timeline>* measured_actions_of = nullptr);

/// How a kind of compute action (F, B, OPTIM) of a measured GPU run went on the host and on the
/// device: how long the host took to launch it, how long the device ran it, and how long the
/// device ran on after the host's last launch of it. Medians over the steps after the first.
struct LaunchShare {
  schedule::ActionKind kind;
  double host_us = 0, device_us = 0, after_last_launch_us = 0;
  int actions = 0;
  /// The device finished soon after the host's last launch: it was kept waiting on the launches,
  /// so the action's time is the host's, which a fit carries into every prediction. (A host that
  /// is ahead of the device queues an action long before the device gets to it: a long launch
  /// span alone says nothing.)
  bool host_bound() const { return device_us > 0 && after_last_launch_us < kHostBound * device_us; }
  /// On an H200 (2026-11-27, docs/gpu.md) bf16's F, B and OPTIM finished 0.5 ms, 0 and 0 ms after
  /// their last launch, and a micro-batch more cost what its launches did; fp32's 9.3, 24.8 and
  /// 21.3 ms after, 0.7 to 9.5 times their device time.
  static constexpr double kHostBound = 0.2;
};

/// Per kind, from Parallax's measured GPU traces (their host-launch spans beside the actions'
/// CUDA-event times); empty for CPU runs and other traces.
std::vector<LaunchShare> launch_shares(const std::vector<timeline::LoadedTrace>& traces);

}  // namespace parallax::fit
