#pragma once
// Calibration's probes and in-run fits: which plans `parallax calibrate` runs for real to measure
// how much slower compute and messages are inside a run than alone, and the fits that turn those
// runs into a profile's in-run factors (plan::InRunFactors). The probes run through exec; the
// fits read their measured timelines against the simulator's prediction.
#include <string>
#include <vector>

#include "plan/calibration.hpp"
#include "plan/hardware.hpp"
#include "plan/plan.hpp"
#include "timeline/timeline.hpp"

namespace parallax::fit {

struct Calibrated {
  std::string file;
  plan::Plan plan;
};

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

// Plans of the scenarios that the executor can run. Named scenarios that cannot run are bad
// input; in the default set they are skipped.
// `hardware` is the override they are planned with: the ideal machine for a CPU calibration (its
// costs are measured, not planned), the base profile for a GPU's (fp16 runs only there).
std::vector<Calibrated> executable_plans(const std::vector<std::string>& files, bool named, bool say,
                                         const std::string& hardware = "ideal");

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
std::vector<Probe> probe_plans(const std::vector<Calibrated>& plans, const plan::HardwareProfile& base);

// The in-run factors: a probe's measured F, B and OPTIM (per-action means) and its all-reduces
// against what `calibration` predicts for them without in-run figures; its messages. `measured`
// is the probe run's measured timeline (exec::measured_timeline of its ranks' results).
ProbeResult in_run_factors(plan::Plan probe, const plan::Calibration& calibration, const timeline::Timeline& measured);

// The repeats of one probe: each in-run figure and each mean is the median of the repeats'.
ProbeResult median_result(const std::vector<ProbeResult>& repeats);

// "1.18x its time alone +40 us", or "+144 us beyond its time alone" when the factor is 1.
std::string in_run_words(double factor, double extra_us);

// Shared with the fit from a job's own trace (fit/from_trace.hpp):
// - the mean without the top and bottom 10% of `v` (0 when empty): what the fits take of a kind's
//   actions over the undisturbed steps;
// - a step's all-reduce time on one rank, the union of its ALLREDUCE spans, as a mean over ranks
//   and steps (after the first, when there are several); 0 without all-reduces.
double trimmed_mean(std::vector<double> v);
plan::Time allreduce_time(const timeline::Timeline& t);

// The in-run figures of one layout: the small model's, with F, B and OPTIM fitted by size.
plan::InRunFactors layout_factors(const ProbeResult& small, const ProbeResult* large);

}  // namespace parallax::fit
