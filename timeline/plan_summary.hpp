#pragma once
// The plan a timeline is of, as a trace carries it: the contract between what `plan`, `simulate`
// and `run` write and what `compare`, the report and what-if read. It is built from a Plan in one
// place (summarize) and written into every trace as its "parallax".plan object; readers take the
// typed fields, never the JSON's keys. The whole document is kept beside them for `plan --json`
// and the report page, which show all of it (docs/cli.md gives its shape).
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "plan/plan.hpp"

namespace parallax::timeline {

struct LayerSummary {
  std::string name;
  std::string kind;  ///< plan::name(LayerKind)
  int64_t param_count = 0;
};

/// One rank's memory estimate (plan::MemoryEstimate), in bytes.
struct MemorySummary {
  int rank = 0;
  int64_t params = 0, gradients = 0, optimizer = 0, buckets = 0, activations = 0, recompute = 0;
  int64_t gathered = 0;  ///< parallel.shard: held unsharded for a while (plan::MemoryEstimate::gathered)
  int64_t not_at_once = 0;  ///< taken off the total (plan::MemoryEstimate::not_at_once())
  int64_t total = 0;    ///< everything, the reserve included
  int64_t reserve = 0;  ///< CUDA context, workspaces and fragmentation
  int64_t device_bytes = 0;
  bool fits = true;
  /// What the tensors take: what a run measures (plan::MemoryEstimate::allocated).
  int64_t allocated() const { return total - reserve; }
};

/// Where a rank sits (plan::RankPlan).
struct RankSummary {
  int rank = 0, replica = 0, pipeline_rank = 0, tensor_rank = 0;
  std::vector<int> stages;
};

struct PlanSummary {
  std::string scenario;
  std::string hardware;
  /// The profile's device ("" in traces written before 2026-12-07): a profile calibrated or fitted
  /// on a machine keeps its base's, so two of one machine share it whatever their names.
  std::string device;
  std::string schedule;   ///< schedule::name(ScheduleKind)
  std::string precision;  ///< plan::name(Precision)
  /// The optimizer's kind and the data source ("" in traces written before 2026-12-06).
  std::string optimizer, data_source;
  int world_size = 0;
  int data = 1, context = 1, pipeline = 1, tensor = 1, virtual_stages = 1;
  int chunks = 1;
  int grad_accumulation = 1;
  int microbatch_size = 0;
  std::vector<int> partition_len;  ///< layers per stage, as resolved
  std::vector<LayerSummary> layers;
  std::vector<RankSummary> ranks;
  std::vector<MemorySummary> memory;  ///< per rank
  nlohmann::json document;            ///< the whole summary, as written
};

/// The summary of a resolved plan.
PlanSummary summarize(const plan::Plan& plan);
/// How the plan's hardware profile predicted published runs (`published_checks()`), as `simulate
/// --json` and the plan summary carry it: [{runs_of, bench, rows, mean_error_percent, ..., text}],
/// `text` as plan::describe words it.
nlohmann::json published_check_json(const plan::HardwareProfile& hw);
/// A plan's step kernels by kind (plan::step_kernels): {pipeline_rank, gemm_ms, flash_ms, memory_ms,
/// whose, text}, null without a compute model; `simulate --json` and a trace's plan summary carry it.
nlohmann::json kernels_json(const plan::Plan& plan);
/// What sets a prediction's plan apart from a run's in their model (its layers and their
/// parameters), actions, precision or optimizer (grid, schedule, virtual stages, chunks, micro-batch
/// size, layers per stage, precision, optimizer kind), as "schedule: predicted
/// gpipe, run 1f1b; chunks: ..."; "" when nothing does. Fields an older trace lacks read as equal.
/// compare and the report refuse such a pair; the GUI, whose prediction follows its knobs, says it.
std::string plan_differences(const PlanSummary& predicted, const PlanSummary& measured);
/// Where a timeline's rank sits in the plan's grid, in the trainers' words: "pp 1, dp 0, cp 1",
/// each dimension above 1 ("" when none is, or the rank is not in the plan). `timeline_ranks` is
/// the timeline's world size: a simulated timeline of a plan with tensor parallelism shows one
/// rank per tensor group, group g being the plan's rank g x tensor (plan::group_of).
std::string rank_role(const PlanSummary& plan, int rank, int timeline_ranks);
/// Reads a summary as a trace carries it; missing fields keep their defaults (an older trace's
/// summary reads as far as it goes). nullopt when `document` is not an object.
std::optional<PlanSummary> read_plan_summary(const nlohmann::json& document);

}  // namespace parallax::timeline
