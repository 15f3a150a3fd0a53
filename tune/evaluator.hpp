#pragma once
// Evaluating one configuration fast: the scenario is parsed once; each configuration sets typed
// knobs on a copy, is resolved into a plan and simulated in step-only mode (no timeline, one
// replica for all when they are alike). Layer costs are cached per (precision, micro-batch size),
// so the balanced split, the lower bound and the simulation of every configuration that shares
// them cost no new estimates. Safe to call from several threads.
#include <cmath>
#include <map>
#include <tuple>
#include <mutex>
#include <string>
#include <vector>

#include "plan/cost.hpp"
#include "plan/knobs.hpp"
#include "plan/plan.hpp"
#include "sim/nccl_model.hpp"

namespace parallax::tune {

struct Evaluation {
  plan::Settings config;
  plan::Time step;         ///< predicted step time; 0 until simulated
  plan::Time lower_bound;  ///< no schedule of this plan can take less (see lower_bound)
  int64_t peak_memory = 0;        ///< bytes, the fullest rank's
  bool fits = true;               ///< every rank's peak within its device's memory
  size_t index = 0;               ///< in the search's enumeration (ties keep this order)
  /// In a ranked list: the other configurations simulated to the same step time and peak memory
  /// (they differ only in knobs with no effect here), shown as "also: ..." beside this one.
  std::vector<plan::Settings> equivalents;
  /// What differs from the scenario as given, as `tune -o` writes it; set on the rows a search
  /// returns (baseline, defaults, ranked, pareto, layout_best), empty elsewhere.
  plan::Overrides changes;
  bool simulated() const { return step > plan::Time(); }
};

/// A layer's weight in a balanced split, as resolve_plan's "balanced" weighs it: forward +
/// backward + what recompute adds, in ns.
inline int64_t balance_weight(const plan::LayerCost& l) { return (l.forward + l.backward + l.recompute).count_ns(); }

class Evaluator {
 public:
  explicit Evaluator(plan::Scenario base);
  const plan::Scenario& base() const { return base_; }
  /// The knob values of the scenario as given.
  const plan::Settings& given() const { return given_; }

  /// Each layer's cost under the configuration's precision, tensor split and recompute, at this
  /// micro-batch size (cached).
  const std::vector<plan::LayerCost>& layer_costs(const plan::Settings& config, int microbatch_size);
  /// The split resolve_plan's "balanced" picks for the configuration's stages, as a list.
  plan::PartitionLen balanced_split(const plan::Settings& config);
  /// The configuration's plan; InputError when the knobs do not fit together. bound() plans
  /// with plan::PlanDetail::bound.
  plan::Plan plan_of(const plan::Settings& config, plan::PlanDetail detail = plan::PlanDetail::whole);
  /// Memory and lower bound, without simulating.
  Evaluation bound(const plan::Settings& config);
  /// bound() plus the step-only simulation's step time.
  Evaluation evaluate(const plan::Settings& config);
  /// The step-only simulation's step time of a plan of `config`. `nccl`: the calling thread's
  /// NCCL choices, kept from one plan to the next (sim::SimOptions::nccl_choices).
  plan::Time step_of(const plan::Plan& plan, const plan::Settings& config, sim::NcclChoices* nccl = nullptr);
  /// A plan of `config` from one of a configuration that differs in DDP's bucket knobs at most
  /// (plan::rebucket, with the schedules kept here): what plan_of(config) gives, without planning.
  void rebucket(plan::Plan* plan, const plan::Settings& config);
  /// The plan's lower bound, raised by what its buckets' reduction takes at least
  /// (sim::reduction_floor): unlike lower_bound, it tells bucket sizes apart.
  plan::Time bucket_bound(const plan::Plan& plan, const plan::Settings& config, plan::Time lower_bound,
                          sim::NcclChoices* nccl = nullptr);

 private:
  Evaluation bound(const plan::Plan& plan, const plan::Settings& config);
  /// The base with the vocabulary its trainer pads at this tensor degree (plan::pad_vocabulary),
  /// so that each plan of that degree shares its layers rather than copying them.
  const plan::Scenario& base_for(int tensor);
  plan::Scenario base_;
  std::mutex padded_mutex_;
  std::map<int, plan::Scenario> padded_;  // by tensor degree
  plan::Settings given_;
  std::mutex mutex_;
  // By (precision, micro-batch size, tensor, context, sequence parallel, recompute): what a layer's cost depends on.
  // precision, micro-batch, tensor, context, sequence parallelism, recompute, expert, expert tensor:
  // what a layer's cost depends on.
  using CostKey = std::tuple<plan::Precision, int, int, int, bool, plan::Recompute, int, int>;
  std::map<CostKey, std::vector<plan::LayerCost>> costs_;
  // Balanced splits by (cost key, stages): the split's dynamic programme is most of the time a
  // large job's enumeration takes, and its configurations share few of them.
  std::map<std::pair<CostKey, int>, plan::PartitionLen> splits_;
  plan::LoweredSchedules schedules_;
};

/// A floor on the plan's step time from its stage costs: the busiest rank's compute, and for
/// each stage b the chain micro-batch 0 must pass before b starts plus b's own m forwards and
/// backwards plus the backwards after it and stage 0's optimizer step. Communication counts 0.
plan::Time lower_bound(const plan::Plan& plan, const std::vector<plan::LayerCost>& layer_costs);

}  // namespace parallax::tune
