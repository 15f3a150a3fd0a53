#include "cli/plan_report.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>

#include "cli/output.hpp"
#include "plan/cost.hpp"
#include "plan/knobs.hpp"
#include "plan/memory.hpp"
#include "plan/trainer_rules.hpp"

namespace parallax::cli {
namespace {

using nlohmann::json;
using plan::Plan;

std::string layer_span(const Plan& p, const plan::Stage& st) {
  const auto& first = p.layers()[st.first_layer].name;
  if (st.layer_count == 1) return first;
  return first + " .. " + p.layers()[st.first_layer + st.layer_count - 1].name + " (" +
         std::to_string(st.layer_count) + ")";
}

int64_t total_params(const Plan& p) {
  int64_t n = 0;
  for (const auto& l : p.layers()) n += l.param_count();
  return n;
}

std::string pad(std::string s, size_t width) {
  if (s.size() < width) s.append(width - s.size(), ' ');
  return s;
}

}  // namespace

// A pipeline on GPUs left at PyTorch's point-to-point: what a Megatron-LM job would change (its
// point-to-point alone moves the bubble several-fold on NCCL).
std::string framework_hint(const plan::Scenario& s) {
  if (s.framework != plan::Framework::pytorch || s.parallel.pipeline == 1 || s.hardware.device.kind != plan::DeviceKind::cuda ||
      s.parallel.p2p != plan::P2p::pytorch)
    return "";
  return "framework  pytorch (torch.distributed.pipelining's point-to-point: a send waits for its receive). For a Megatron-LM "
         "or NeMo job set framework: megatron\n";
}

// A profile fitted to runs at one precision, planned at another: what of the fit applies.
std::string fitted_precision_line(const plan::Scenario& s) {
  const auto& f = s.hardware.fitted;
  const std::string planned = plan::name(s.parallel.precision);
  if (!f || f->precision.empty() || f->precision == planned) return "";
  return "fitted     " + s.hardware.name + " was fitted to " + f->precision + " runs: at " + planned +
         " its layer factors do not apply (those layers cost as its base's), its optimizer, all-reduce and kernel factors "
         "do; fit a run at " + planned + " (calibrate --from-trace) to predict this precision\n";
}

std::string format_bytes(int64_t bytes) {
  char buf[64];
  const double b = static_cast<double>(bytes);
  if (bytes < 1024) std::snprintf(buf, sizeof buf, "%lld B", static_cast<long long>(bytes));
  else if (b < 1024.0 * 1024) std::snprintf(buf, sizeof buf, "%.1f KiB", b / 1024);
  else if (b < 1024.0 * 1024 * 1024) std::snprintf(buf, sizeof buf, "%.1f MiB", b / (1024.0 * 1024));
  else std::snprintf(buf, sizeof buf, "%.2f GiB", b / (1024.0 * 1024 * 1024));
  return buf;
}

// FSDP's all-gathers (shard full): each layer's parameters before its forward, and again before its
// backward where they were freed after it, each beside the previous layer's compute (FSDP2's
// prefetch), counted per stage for one micro-batch.
void gathers_text(const plan::Plan& p, std::ostream& o) {
  const plan::ParallelSpec& par = p.scenario.parallel;
  if (!par.sharded(plan::Shard::full) || par.shard_ranks() == 1) return;
  const int per_layer = par.reshard_after_forward ? 2 : 1;
  o << "\nall-gathers (shard full: each layer's parameters before its forward"
    << (par.reshard_after_forward ? " and again before its backward (reshard_after_forward)" : " (kept to its backward: reshard_after_forward false)")
    << ", the next layer's beside the current one's compute, over " << par.shard_ranks() << " ranks):\n";
  for (const auto& st : p.stages) {
    double bytes = 0;
    for (int l = st.first_layer; l < st.first_layer + st.layer_count; ++l) {
      const plan::Layer& layer = p.layers()[l];
      bytes += static_cast<double>(layer.param_count(par.tensor, par.expert, par.expert_tensor_ways())) * plan::gathered_parameter_bytes(par, layer);
    }
    o << "  stage " << st.index << ": " << per_layer * st.layer_count << " a micro-batch (" << st.layer_count << " layers x " << per_layer
      << "), " << format_bytes(static_cast<int64_t>(per_layer * bytes)) << " gathered\n";
  }
}

// The rank formula with this plan's numbers (plan::rank_of holds it). Context ranks sit inside a
// replica, next to the tensor ranks (Megatron-core's tp-cp-dp-pp).
std::string placement_line(const plan::ParallelSpec& p) {
  const bool data_first = p.rank_order == plan::RankOrder::tensor_data_pipeline;
  const bool context = p.context > 1;
  const std::string replica = context ? "data index x " + std::to_string(p.context) + " + context index" : "replica";
  std::ostringstream o;
  o << "rank = (" << (data_first ? "pipeline rank x " + std::to_string(p.replicas()) + " + " + replica
                                 : "(" + replica + ") x " + std::to_string(p.pipeline) + " + pipeline rank")
    << ") x " << p.tensor << " + tensor rank: tensor fastest (a tensor group in one node), then "
    << (context ? "context, then " : "") << (data_first ? "data, then pipeline" : "pipeline, then data")
    << " (parallel.rank_order " << plan::name(p.rank_order) << (data_first ? ", Megatron-LM's" : "") << ")";
  return o.str();
}

// What the trainer set, or framework_hint's line.
std::string framework_line(const plan::Plan& p) {
  const plan::Scenario& s = p.scenario;
  if (s.framework == plan::Framework::pytorch) return framework_hint(s);
  std::ostringstream o;
  o << "framework  " << plan::name(s.framework) << ": ";
  if (s.framework_set.empty()) o << "nothing set (the scenario sets each of its semantics itself)";
  for (size_t i = 0; i < s.framework_set.size(); ++i) o << (i ? ", " : "") << s.framework_set[i];
  if (p.unpadded_vocab > 0)
    o << "; vocab " << p.unpadded_vocab << " padded to " << p.layers().front().shape.vocab << " (a multiple of "
      << plan::kMegatronVocabMultiple << " x tensor " << s.parallel.tensor << ", --make-vocab-size-divisible-by)";
  o << "\n";
  return o.str();
}

// A MoE model's experts as this plan places them, and its all-to-alls and imbalance per MoE block
// and micro-batch (plan::expert_traffic); empty for a dense model.
std::string experts_line(const Plan& p) {
  const auto& s = p.scenario;
  const plan::ParallelSpec& par = s.parallel;
  const plan::Layer* moe = plan::first_moe_layer(p.layers());
  if (!moe) return "";
  const int blocks = plan::moe_block_count(p.layers());
  const plan::MoeShape& m = moe->shape.moe;
  const plan::ExpertTraffic x = plan::expert_traffic(*moe, par, p.microbatch_size);
  std::ostringstream o;
  o << "experts    " << blocks << " MoE blocks of " << m.experts << " experts (top-" << m.top_k
    << (m.shared ? ", " + std::to_string(m.shared) + " shared" : std::string()) << ") over expert " << par.expert << ": "
    << m.experts / par.expert << " a rank"
    << (par.tensor > 1 ? (par.expert_tensor_ways() > 1 ? ", split over the tensor group" : ", whole (expert_tensor 1)") : "")
    << ", gradients reduced over the " << par.expert_replicas() << " rank" << (par.expert_replicas() > 1 ? "s" : "")
    << " holding the same\n";
  o << "           per MoE block and micro-batch: ";
  if (x.forward > 0)
    o << x.forward << " all-to-alls in forward and " << x.backward << " in backward"
      << (par.recomputes(plan::kRecomputeMoe) ? " (2 of them recomputing the MoE layer)" : "") << " of " << format_bytes(x.all_to_all_bytes)
      << " sent per rank"
      << (par.moe_token_dispatcher == plan::TokenDispatcher::deepep
              ? " (by DeepEP: a token once to each node and each GPU holding its experts, fewer bytes than per expert)"
              : " (NCCL's all-to-all)");
  else
    o << "no all-to-all (expert 1)";
  char imbalance[64];
  std::snprintf(imbalance, sizeof imbalance, "%.3f", x.imbalance);
  o << "; load imbalance " << imbalance << "x ("
    << (m.imbalance > 0 ? "stated, model.expert_imbalance" : "a balanced router's floor; an aux-loss router measured like 1.6 at expert 8 (docs/accuracy.md); "
                             "state model.expert_imbalance for yours")
    << (m.capacity_factor > 0 ? ", capped by capacity_factor" : ", dropless") << ")\n";
  if (par.overlap_moe_expert_parallel_comm)
    o << "           combined 1F1B (overlap_moe_expert_parallel_comm): each steady-state step runs a forward beside an "
         "earlier micro-batch's backward, each one's all-to-alls behind the other's compute; one more micro-batch in flight\n";
  else if (x.forward > 0 && p.schedule.kind != schedule::ScheduleKind::dualpipev)
    o << "           the all-to-alls wait in line with the compute (DualPipeV, or parallel.overlap_moe_expert_parallel_comm, hides them)\n";
  return o.str();
}

// A calibrated profile's layer costs are measured at a range of micro-batch sizes; outside it
// CostCurve::at extends the line through the larger sizes (or the first segment below), which the
// plan's reader should know of. One line naming the range and the layers past it, or "".
std::string calibration_range_text(const Plan& p) {
  const auto& cal = p.scenario.hardware.calibration;
  if (!cal) return "";
  const double mb = static_cast<double>(p.microbatch_size);
  double lo = 0, hi = 0;
  int past = 0;
  for (const auto& l : p.layers()) {
    const plan::SignatureCost* c = cal->layer(plan::layer_signature(l, p.scenario.parallel.precision));
    if (!c || c->forward.empty()) continue;
    if (mb >= c->forward.mb.front() && mb <= c->forward.mb.back()) continue;
    lo = c->forward.mb.front();
    hi = c->forward.mb.back();
    ++past;
  }
  if (past == 0) return "";
  return std::to_string(past) + " layer" + (past > 1 ? "s'" : "'s") + " calibrated costs measured at micro-batches " +
         plan::number_text(lo) + "-" + plan::number_text(hi) + " only: this plan's " + std::to_string(p.microbatch_size) +
         " is extrapolated along the line through the " + (mb > hi ? "larger" : "two smallest") + " measured sizes " +
         "(parallax calibrate SCENARIO measures the sizes a scenario uses)\n";
}

std::string published_check_text(const plan::Scenario& s) {
  const plan::HardwareProfile& hw = s.hardware;
  const auto& checks = hw.published_checks();
  if (checks.empty()) return "";
  std::ostringstream o;
  o << "published  how " << hw.name << "'s predictions held on published runs (error = predicted / published - 1; "
    << "negative: the runs took longer; docs/accuracy.md):\n";
  for (const plan::PublishedCheck& c : checks)
    o << "           " << plan::describe(c) << " (" << c.bench << "; raw output " << c.results << ")\n";
  // The plan's trainer's own runs, where this profile was checked on another's only.
  if (s.framework == plan::Framework::pytorch) return o.str();
  const std::string trainer = plan::trainer_name(s.framework);
  const auto its = [&](const plan::PublishedCheck& c) { return c.runs_of.rfind(trainer, 0) == 0; };
  if (std::any_of(checks.begin(), checks.end(), its)) return o.str();
  std::vector<std::string> elsewhere;
  for (const std::string& name : plan::builtin_hardware_names()) {
    if (name == hw.name) continue;
    const auto doc = plan::YamlDocument::from_text("hardware: " + name, "published");
    const plan::HardwareProfile other = plan::resolve_hardware(plan::Field::root(doc)["hardware"]);
    for (const plan::PublishedCheck& c : other.published_checks())
      if (its(c) && c.runs_of.find(", a change") == std::string::npos) elsewhere.push_back(name + ": " + plan::describe(c));
  }
  if (!elsewhere.empty()) {
    o << "           none of these ran " << trainer << "; its published runs, on the profiles of the GPUs they ran on:\n";
    for (const auto& line : elsewhere) o << "           " << line << "\n";
  }
  return o.str();
}

std::string plan_text(const Plan& p) {
  const auto& s = p.scenario;
  const auto& hw = s.hardware;
  std::ostringstream o;
  o << "scenario   " << s.name << "  (" << s.file << ")\n";
  o << "model      " << s.model_description << "\n"
    << "           " << p.layers().size() << " layers, " << total_params(p) << " parameters";
  if (const int64_t active = plan::active_param_count(p.layers()); active != total_params(p))
    o << ", " << active << " a token uses (its top-k of each block's experts)";
  o << "\n";
  o << framework_line(p) << fitted_precision_line(s);
  o << "hardware   " << hw.name << ": " << hw.devices_per_node << " x " << hw.device.name << " per node ("
    << hw.node_link.name << ")" << (hw.network ? ", network " + hw.network->name : std::string()) << "; plan uses "
    << p.nodes << " node" << (p.nodes > 1 ? "s" : "");
  if (hw.device.compute && hw.device.compute->clock_fraction != 1)
    o << "; GEMMs and attention at " << hw.device.compute->clock_fraction << " of its tables' clock (device.compute.clock_fraction)";
  // The ceiling on the linear layers' GEMMs in the plan's precision (at the clock above).
  if (hw.device.compute)
    if (const auto cap = hw.device.compute->sustained_tflops.find(s.parallel.precision); cap != hw.device.compute->sustained_tflops.end())
      o << "; GEMMs at most " << std::lround(cap->second) << " TFLOP/s in " << plan::name(s.parallel.precision)
        << ", what it sustains at its power limit (device.compute.sustained_tflops)";
  o << "\n" << published_check_text(s);
  if (const std::string range = calibration_range_text(p); !range.empty()) o << "           " << range;
  o << "grid       data " << s.parallel.data << (s.parallel.context > 1 ? " x context " + std::to_string(s.parallel.context) : "")
    << " x pipeline " << s.parallel.pipeline << " x tensor " << s.parallel.tensor
    << " = " << p.world_size << " ranks; virtual " << s.parallel.virtual_stages << ", " << p.stages.size() << " stages"
    << (s.parallel.sequence_parallel ? "; sequence parallel" : "") << "\n";
  o << "placement  " << placement_line(s.parallel) << "\n";
  o << experts_line(p);
  o << "batch      " << s.data.batch_size << " per replica = " << p.chunks() << " chunks x " << p.microbatch_size
    << "; grad_accumulation " << s.parallel.grad_accumulation << "; global batch "
    << s.data.batch_size * s.parallel.grad_accumulation * s.parallel.data << "\n";
  o << "schedule   " << schedule::name(s.parallel.schedule) << ", precision " << plan::name(s.parallel.precision)
    << (s.parallel.activation_checkpointing != plan::Recompute::none
            ? std::string(", recompute: ") + plan::name(s.parallel.activation_checkpointing)
            : std::string()) << "\n";
  const plan::OptimizerSpec& opt = s.optimizer;
  o << "optimizer  " << opt.kind << ", lr " << plan::number_text(opt.lr)
    << (opt.momentum > 0 ? ", momentum " + plan::number_text(opt.momentum) : std::string())
    << (opt.weight_decay > 0 ? ", weight decay " + plan::number_text(opt.weight_decay) : std::string())
    << (opt.state_bf16 ? ", bf16 state" : "") << "\n\n";

  // The stage's parameters on one GPU (a tensor rank's share): a count, as the memory table below
  // gives their bytes in the plan's precision.
  const auto count_text = [](int64_t n) {
    char b[32];
    std::snprintf(b, sizeof b, n >= 1'000'000'000 ? "%.2fB" : n >= 1'000'000 ? "%.1fM" : "%.0f",
                  n >= 1'000'000'000 ? n / 1e9 : n >= 1'000'000 ? n / 1e6 : static_cast<double>(n));
    return std::string(b);
  };
  o << pad("stage", 7) << pad("pp", 6) << pad("params/GPU", 12) << pad("buckets", 9) << "layers\n";
  for (const auto& st : p.stages) {
    o << pad(std::to_string(st.index), 7) << pad(std::to_string(st.pipeline_rank), 6)
      << pad(count_text(st.param_count), 12) << pad(std::to_string(st.buckets.size()), 9) << layer_span(p, st)
      << "\n";
  }
  bool any_buckets = false;
  for (const auto& st : p.stages) any_buckets = any_buckets || !st.buckets.empty();
  if (any_buckets) {
    if (s.parallel.sharded(plan::Shard::gradients))
      o << "\nreduce-scatters (shard " << plan::name(s.parallel.shard) << ": one per layer, after its backward, over "
        << s.parallel.shard_ranks() << " ranks" << (s.parallel.shard_copies() > 1 ? ", then an all-reduce of the shard over its " +
                                                    std::to_string(s.parallel.shard_copies()) + " copies" : std::string()) << "):\n";
    else if (s.parallel.overlap_grad_reduce && s.parallel.ddp_buckets == plan::DdpBuckets::megatron)
      o << "\nDDP buckets (gradient-ready order; Megatron-core's: " << plan::megatron_bucket_params(s.parallel.replicas())
        << " parameters a bucket on stage 0, each other stage's gradients in one; parallel.ddp_buckets):\n";
    else if (s.parallel.overlap_grad_reduce)
      o << "\nDDP buckets (gradient-ready order; first " << s.parallel.first_bucket_mb << " MiB, then "
        << s.parallel.bucket_cap_mb << " MiB):\n";
    else
      o << "\nDDP buckets (overlap_grad_reduce: false: each stage's gradients in one, reduced after its last backward):\n";
    for (const auto& st : p.stages)
      for (const auto& b : st.buckets) {
        const std::vector<std::string> names = plan::param_names(p.layers(), b);
        o << "  stage " << b.stage << " bucket " << b.index << ": " << pad(format_bytes(b.bytes), 11) << names.size()
          << " tensors, " << names.front() << " .. " << names.back() << "\n";
      }
  }
  gathers_text(p, o);
  const int64_t capacity = hw.device.memory_bytes();
  o << "\nmemory per rank (device: " << format_bytes(capacity) << ")\n";
  // Every replica and tensor rank of a pipeline rank holds the same; past 64 ranks, one row each.
  const bool by_pipeline_rank = p.world_size > 64;
  if (by_pipeline_rank) o << "(one row per pipeline rank: its " << p.world_size / s.parallel.pipeline << " ranks hold the same)\n";
  // Sharding beyond the optimizer holds layers and gradients unsharded for a while: a column then.
  const bool gathers = s.parallel.sharded(plan::Shard::gradients);
  // Gradients freed by each optimizer step and the activations' peak apart: a column then.
  const bool apart = std::any_of(p.ranks.begin(), p.ranks.end(), [](const plan::RankPlan& r) { return r.memory.not_at_once() > 0; });
  o << pad(by_pipeline_rank ? "pp" : "rank", 6) << pad("params", 11) << pad("grads", 11) << pad("optimizer", 11)
    << pad("buckets", 11) << pad("activations", 27) << pad("transient", 11) << (gathers ? pad("unsharded", 11) : "")
    << (apart ? pad("not at once", 13) : "") << pad("reserve", 11) << "total\n";
  for (const auto& r : p.ranks) {
    if (by_pipeline_rank && (r.replica != 0 || r.tensor_rank != 0)) continue;
    const auto& m = r.memory;
    o << pad(std::to_string(by_pipeline_rank ? r.pipeline_rank : r.rank), 6) << pad(format_bytes(m.params), 11)
      << pad(format_bytes(m.gradients), 11) << pad(format_bytes(m.optimizer), 11) << pad(format_bytes(m.buckets), 11)
      << pad(format_bytes(m.activations) + " (" + std::to_string(m.peak_inflight) + " in flight)", 27)
      << pad(format_bytes(m.recompute), 11) << (gathers ? pad(format_bytes(m.gathered), 11) : "")
      << (apart ? pad(std::string("-").append(format_bytes(m.not_at_once())), 13) : "") << pad(format_bytes(m.reserve), 11) << format_bytes(m.total())
      << (hw.device.holds(m.total()) ? "" : "  DOES NOT FIT") << "\n";
  }
  if (apart && gathers)
    o << "not at once: taken off the total, what the activations' peak, the gradients, the transient and the unsharded "
         "part never hold together: the loss's gradients come at the backward's start, before any layer's gradients "
         "(the step freed the sharded ones), a layer's whole gradients and gathered neighbours later\n";
  else if (apart)
    o << "not at once: taken off the total, what the activations' peak, the gradients and the transient never hold "
         "together: each optimizer step frees the gradients (zero_grad(set_to_none)) and the step's first backward makes "
         "them after the activations' peak; a ZeRO-1 step's gradient slices come when the activations are gone\n";
  o << plan::reserve_rule(hw.device) << "\n";
  return o.str();
}

json schedule_json(const Plan& p) {
  json ranks = json::array();
  for (const auto& actions : p.schedule.ranks) {
    json ids = json::array();
    for (const auto& a : actions) ids.push_back(a.id());
    ranks.push_back(ids);
  }
  return {{"scenario", p.scenario.name},
          {"schedule", schedule::name(p.schedule.kind)},
          {"pipeline", p.schedule.pipeline},
          {"virtual", p.schedule.virtual_stages},
          {"chunks", p.schedule.chunks},
          {"grad_accumulation", p.schedule.grad_accumulation},
          {"ranks", ranks}};
}

std::string schedule_text(const Plan& p) {
  std::ostringstream o;
  o << "schedule " << schedule::name(p.schedule.kind)
    << (p.scenario.parallel.overlap_moe_expert_parallel_comm ? " combined (overlap_moe_expert_parallel_comm)" : "") << ": "
    << counted(p.schedule.pipeline, "pipeline rank") << ", " << counted(p.schedule.stages(), "stage") << ", "
    << counted(p.schedule.microbatches(), "micro-batch", "micro-batches") << " per step";
  if (p.world_size > p.schedule.pipeline) o << " (every replica runs the same lists)";
  o << "\n";
  for (size_t r = 0; r < p.schedule.ranks.size(); ++r) {
    o << "rank " << r << ":";
    for (const auto& a : p.schedule.ranks[r]) o << " " << a.id();
    o << "\n";
  }
  return o.str();
}

}  // namespace parallax::cli
