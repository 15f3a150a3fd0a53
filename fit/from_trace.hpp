#pragma once
// What if: a profile fitted from a job's own measured runs (`parallax calibrate --from-trace`),
// so that the job's other configurations (chunks, schedules, partitions, buckets) are predicted
// from what this machine did with this model, not from a datasheet or micro-benchmarks alone.
//
// The traces are of one configuration of the job (the plan given): Parallax's measured traces
// (`parallax run -o`), or PyTorch profiler (Kineto) traces of torch.distributed.pipelining, whose
// schedules name each action's span `PP:<action>` (record_function; "PP:0F1", "PP:1B0", as
// Parallax names actions), or of a data-parallel job's forward / backward / optimizer phases. Their undisturbed steps (profiler::undisturbed_steps) are taken, and
// the simulator is made to reproduce them: per stage, the measured F and B against the predicted,
// spread onto the stage's layer signatures by their share of the stage's predicted time; the
// optimizer step and the all-reduces likewise. A few rounds, since the base profile's fixed costs
// per action do not scale. Only what the traces show is fitted; the rest stays the base's, and
// the result says which is which.
#include <string>
#include <vector>

#include "plan/fitted.hpp"
#include "plan/plan.hpp"
#include "plan/timeline.hpp"
#include "profiler/trace_reader.hpp"

namespace parallax::fit {

/// A trace's actions as a measured timeline of `plan`: a Parallax measured trace as it is, once
/// its plan summary is the plan's (same layers, layout, chunks and schedule); a Kineto trace
/// through its `PP:<action>` spans, each rank its distributedInfo rank, each step the
/// ProfilerStep#N span around it (or the action's repeat count without those). A Kineto trace of
/// a data-parallel job without a pipeline and with one micro-batch a step, and without such
/// spans, through its phases: "## forward ##" (or DistributedDataParallel.forward) as F,
/// "## backward ##" as B, "## optimizer ##" (or Optimizer.step#...) as OPTIM. InputError naming
/// the trace and what differs when it is of another model or layout, or holds no action of it.
plan::Timeline measured_actions(const profiler::LoadedTrace& trace, const plan::Plan& plan);

struct TraceFit {
  plan::FittedCosts costs;
  std::vector<std::string> fitted;  ///< what the traces gave, in words
  std::vector<std::string> kept;    ///< what stays the base profile's, in words
  plan::Time measured_step;           ///< the step statistic, the median over the traces
  plan::Time base_step, fitted_step;  ///< the step predicted with the base profile, and fitted
  int steps = 0;                      ///< undisturbed steps the fit is over, all traces
};

/// Fits `plan`'s hardware profile to the measured timelines (measured_actions of each trace).
TraceFit fit_to_measured(const plan::Plan& plan, const std::vector<plan::Timeline>& measured);

}  // namespace parallax::fit
