#include "plan/plan.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <map>
#include <set>
#include <stdexcept>

#include "plan/buckets.hpp"
#include "plan/cost.hpp"
#include "plan/memory.hpp"
#include "plan/partition.hpp"
#include "schedule/csv.hpp"
#include "schedule/validate.hpp"

namespace parallax::plan {

using schedule::ScheduleKind;

schedule::ComputeOrder schedule_order(const Scenario& scenario) {
  const ParallelSpec& p = scenario.parallel;
  if (p.overlap_moe_expert_parallel_comm) return schedule::combined_1f1b_order(p.pipeline, p.virtual_stages, p.chunks);
  if (p.schedule != ScheduleKind::csv) return schedule::generated_order(p.schedule, p.pipeline, p.virtual_stages, p.chunks);
  try {
    return schedule::read_schedule_csv(p.schedule_csv, p.pipeline, p.stages(), p.chunks);
  } catch (const schedule::CsvError& e) {
    throw InputError(Location{e.where().file, e.where().line, e.where().column}, e.message());
  }
}

namespace {

std::vector<int> choose_partition(const Scenario& s, int microbatch_size) {
  const ParallelSpec& p = s.parallel;
  const int stages = p.stages();
  const int layers = static_cast<int>(s.layers.size());
  switch (p.partition_len.mode) {
    case PartitionLen::Mode::per_stage: return std::vector<int>(stages, p.partition_len.per_stage);
    case PartitionLen::Mode::list: return p.partition_len.lens;
    case PartitionLen::Mode::balanced: break;
  }
  // Balance what a stage spends per micro-batch: forward + backward (+ recomputation).
  std::vector<int64_t> costs(layers);
  for (int i = 0; i < layers; ++i) {
    const LayerCost c = estimate_layer_cost(s.layers[i], s.hardware, p, microbatch_size, /*input_gradient=*/i > 0);
    const Time t = c.forward + c.backward + c.recompute;
    costs[i] = t.count_ns();
  }
  return balanced_partition(costs, stages);
}

// The first bucket's cap and every later one's, in gradient bytes. Without overlap, Megatron-LM's
// DDP reduces the whole buffer at once (bucket_size None). Megatron-core's buckets hold
// megatron_bucket_params parameters (its buffers close a bucket once it reaches that, as torch's
// DDP does by bytes), only on the first pipeline rank's first model chunk: it sets bucket_size to
// None on later pipeline ranks ("data-parallel communication on these stages is not on the
// critical path") and for model chunks after the first (disable_bucketing); in every
// stage order Parallax knows, that first chunk is stage 0.
std::pair<int64_t, int64_t> bucket_caps(const ParallelSpec& p, int stage, int gradient_bytes) {
  constexpr int64_t kWhole = std::numeric_limits<int64_t>::max();
  if (!p.overlap_grad_reduce) return {kWhole, kWhole};
  if (p.ddp_buckets == DdpBuckets::megatron) {
    if (stage != 0) return {kWhole, kWhole};
    const int64_t cap = megatron_bucket_params(p.replicas()) * gradient_bytes;
    return {cap, cap};
  }
  return {mib_to_bytes(p.first_bucket_mb), mib_to_bytes(p.bucket_cap_mb)};
}

std::vector<Bucket> stage_buckets(const Scenario& s, const Stage& stage) {
  // Gradient-ready order of a layer stack: last layer's last parameter first.
  std::vector<ParamRef> ready;
  std::vector<int64_t> bytes;
  const int gradient = bytes_per_parameter(s).gradient;  // what DDP reduces
  for (int l = stage.first_layer + stage.layer_count - 1; l >= stage.first_layer; --l)
    for (int i = static_cast<int>(s.layers[l].params.size()) - 1; i >= 0; --i) {
      ready.push_back({l, i});
      bytes.push_back(data_parallel_bytes(s.parallel, s.layers[l].params[i], gradient));
    }
  const auto [first_cap, cap] = bucket_caps(s.parallel, stage.index, gradient);
  auto groups = assign_buckets(bytes, first_cap, cap);
  // Sharded gradients: each layer (FSDP's unit) reduce-scatters its own once its backward is done.
  if (s.parallel.sharded(Shard::gradients)) {
    groups.clear();
    for (size_t i = 0; i < ready.size(); ++i) {
      if (i == 0 || ready[i].layer != ready[i - 1].layer) groups.emplace_back();
      groups.back().push_back(static_cast<int>(i));
    }
  }
  std::vector<Bucket> buckets;
  for (const auto& group : groups) {
    Bucket b;
    b.stage = stage.index;
    b.index = static_cast<int>(buckets.size());
    b.ready_layer = ready[group.back()].layer;
    b.params.reserve(group.size());
    for (int i : group) {
      b.bytes += bytes[i];
      b.params.push_back(ready[i]);
    }
    buckets.push_back(std::move(b));
  }
  return buckets;
}

// Tied embeddings with the head on another stage than the embedding: that stage holds its own copy
// of the word embeddings, as Megatron-LM keeps one on the last pipeline stage (their gradients are
// summed between the two stages; that small all-reduce is not simulated).
int64_t tied_copy(const Scenario& scenario, const Stage& st) {
  const auto& layers = scenario.layers;
  const int end = st.first_layer + st.layer_count;
  if (st.first_layer == 0 || end != static_cast<int>(layers.size()) || layers.back().kind != LayerKind::head ||
      !layers.back().shape.form.tie_embeddings || layers.front().kind != LayerKind::embedding)
    return 0;
  return layers.front().params.front().numel_on(scenario.parallel.tensor);
}

}  // namespace

// A parameter's bytes in a data-parallel collective over the stage's replicas (its gradient's in a
// bucket's reduction; its own in the gather after a sharded step). An expert's are reduced and gathered only over the ranks holding the same experts
// (ParallelSpec::expert_replicas, Megatron-core's expert-data-parallel group): none with one, else
// as the bytes that cost the same ring traffic over all replicas (2 (n - 1) / n of them per rank).
// The ring's latency and links are then the whole group's, not the smaller group's.
int64_t data_parallel_bytes(const ParallelSpec& p, const ParamSpec& param, int bytes_per_element) {
  const int64_t bytes = param.numel_on(p.tensor, p.expert, p.expert_tensor_ways()) * bytes_per_element;
  if (!param.expert || p.expert_replicas() == p.replicas()) return bytes;
  const double group = p.expert_replicas(), all = p.replicas();
  if (group <= 1) return 0;
  return std::llround(static_cast<double>(bytes) * ((group - 1) / group) / ((all - 1) / all));
}

std::vector<std::string> param_names(const std::vector<Layer>& layers, const Bucket& bucket) {
  std::vector<std::string> names;
  for (const ParamRef& r : bucket.params) names.push_back(layers[r.layer].params[r.index].name);
  return names;
}

// The one place the rank order is written out; everything else asks these two.
Placement placement_of(const ParallelSpec& p, int rank) {
  const int group = rank / p.tensor, tensor_rank = rank % p.tensor;
  if (p.rank_order == RankOrder::tensor_pipeline_data) return {group / p.pipeline, group % p.pipeline, tensor_rank};
  return {group % p.replicas(), group / p.replicas(), tensor_rank};
}

int rank_of(const ParallelSpec& p, const Placement& w) {
  const int group = p.rank_order == RankOrder::tensor_pipeline_data ? w.replica * p.pipeline + w.pipeline_rank
                                                                     : w.pipeline_rank * p.replicas() + w.replica;
  return group * p.tensor + w.tensor_rank;
}

int group_of(const ParallelSpec& p, int replica, int pipeline_rank) {
  return rank_of(p, {replica, pipeline_rank, 0}) / p.tensor;
}

Placement group_placement(const ParallelSpec& p, int group) { return placement_of(p, group * p.tensor); }

schedule::Schedule LoweredSchedules::get(const ParallelSpec& p, const std::vector<int>& buckets_per_stage,
                                         schedule::Collectives collectives, const std::function<schedule::BareSchedule()>& lower) {
  Key key{p.schedule, p.overlap_moe_expert_parallel_comm, p.pipeline, p.virtual_stages, p.chunks, p.grad_accumulation, collectives};
  std::shared_ptr<const schedule::BareSchedule> bare;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (const auto it = kept_.find(key); it != kept_.end()) bare = it->second;
  }
  if (bare) return schedule::with_all_reduces(*bare, buckets_per_stage);  // outside the lock, as lowering below
  bare = std::make_shared<const schedule::BareSchedule>(lower());
  size_t actions = 0;
  for (const auto& rank : bare->schedule.ranks) actions += rank.size();
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (actions <= kMaxActions && !kept_.count(key)) {
      while (actions_ + actions > kMaxActions && !order_.empty()) {
        for (const auto& rank : kept_.at(order_.front())->schedule.ranks) actions_ -= rank.size();
        kept_.erase(order_.front());
        order_.pop_front();
      }
      kept_.emplace(key, bare);
      order_.push_back(std::move(key));
      actions_ += actions;
    }
  }
  return schedule::with_all_reduces(*bare, buckets_per_stage);
}

namespace {

// The scenario's schedule as lowered, with the all-reduces of buckets_per_stage (none: empty).
schedule::Schedule schedule_with(const Scenario& scenario, const std::vector<int>& buckets_per_stage, LoweredSchedules* lowered) {
  const ParallelSpec& p = scenario.parallel;
  auto lower = [&] {
    return schedule::lower_bare(schedule_order(scenario), p.schedule, p.pipeline, p.virtual_stages, p.chunks, p.grad_accumulation,
                                scenario.hardware.collectives);
  };
  return lowered && p.schedule != ScheduleKind::csv ? lowered->get(p, buckets_per_stage, scenario.hardware.collectives, lower)
                                                    : schedule::with_all_reduces(lower(), buckets_per_stage);
}

RankPlan rank_plan(const Scenario& scenario, int rank, const std::vector<std::vector<int>>& stages_of) {
  RankPlan rp;
  rp.rank = rank;
  const Placement where = placement_of(scenario.parallel, rank);
  rp.replica = where.replica;
  rp.pipeline_rank = where.pipeline_rank;
  rp.tensor_rank = where.tensor_rank;
  rp.node = rank / scenario.hardware.devices_per_node;
  rp.local_rank = rank % scenario.hardware.devices_per_node;
  rp.stages = stages_of[rp.pipeline_rank];
  return rp;
}

}  // namespace

void rebucket(Plan* plan, LoweredSchedules* lowered) {
  const Scenario& scenario = plan->scenario;
  const bool replicated = scenario.parallel.replicas() > 1;
  std::vector<int> buckets_per_stage;
  for (Stage& st : plan->stages) {
    st.buckets = replicated ? stage_buckets(scenario, st) : std::vector<Bucket>{};
    if (replicated) buckets_per_stage.push_back(static_cast<int>(st.buckets.size()));
  }
  plan->schedule = schedule_with(scenario, buckets_per_stage, lowered);
}

bool pad_vocabulary(Scenario* s) {
  if (s->model_vocab <= 0) return false;
  const int64_t vocab = padded_vocabulary(s->framework, s->model_vocab, s->parallel.tensor);
  const auto differs = [&](const Layer& l) {
    return (l.kind == LayerKind::embedding || l.kind == LayerKind::head) && l.shape.vocab != vocab;
  };
  if (std::any_of(s->layers.begin(), s->layers.end(), differs)) {
    std::vector<Layer> layers = s->layers;  // shared by the scenario's copies: changed on a copy
    for (Layer& l : layers) set_vocabulary(&l, vocab);
    s->layers = std::move(layers);
  }
  return vocab != s->model_vocab;
}

Plan resolve_plan(Scenario given, bool check_generated, LoweredSchedules* lowered, PlanDetail detail) {
  Plan plan;
  plan.scenario = std::move(given);  // a temporary's moved, not copied (the tuner resolves millions)
  if (pad_vocabulary(&plan.scenario)) plan.unpadded_vocab = plan.scenario.model_vocab;
  const Scenario& scenario = plan.scenario;
  const ParallelSpec& p = scenario.parallel;
  plan.world_size = p.world_size();
  plan.nodes = scenario.hardware.nodes_for(plan.world_size);
  plan.microbatch_size = scenario.data.batch_size / p.chunks;
  plan.partition = choose_partition(scenario, plan.microbatch_size);

  int first = 0;
  for (int s = 0; s < p.stages(); ++s) {
    Stage st;
    st.index = s;
    st.pipeline_rank = p.rank_of_stage(s);
    st.first_layer = first;
    st.layer_count = plan.partition[s];
    first += st.layer_count;
    for (int l = st.first_layer; l < st.first_layer + st.layer_count; ++l)
      st.param_count += scenario.layers[l].param_count(p.tensor, p.expert, p.expert_tensor_ways());
    st.param_count += tied_copy(scenario, st);
    st.param_bytes = st.param_count * kParamBytes;
    plan.stages.push_back(std::move(st));
  }
  if (detail == PlanDetail::whole) rebucket(&plan, lowered);
  else plan.schedule = schedule_with(scenario, {}, lowered);
  const bool imported = p.schedule == ScheduleKind::csv;
  const auto problems = imported || check_generated ? schedule::validate_schedule(plan.schedule) : std::vector<std::string>{};
  if (!problems.empty()) {
    if (imported)
      throw InputError(scenario.where("parallel.schedule"), "schedule " + p.schedule_csv + " cannot run: " + problems.front() +
                                                                (problems.size() > 1 ? " (and " + std::to_string(problems.size() - 1) + " more)" : ""));
    throw std::logic_error("generated schedule is invalid: " + problems.front());
  }

  std::vector<std::vector<int>> stages_of(p.pipeline);
  for (int s = 0; s < p.stages(); ++s) stages_of[p.rank_of_stage(s)].push_back(s);
  if (detail == PlanDetail::whole) {
    plan.ranks.reserve(plan.world_size);
    for (int rank = 0; rank < plan.world_size; ++rank) plan.ranks.push_back(rank_plan(scenario, rank, stages_of));
  } else {
    for (int r = 0; r < p.pipeline; ++r) plan.ranks.push_back(rank_plan(scenario, rank_of(p, {0, r, 0}), stages_of));
  }
  estimate_memory(&plan);
  return plan;
}


std::optional<std::vector<LayerKernelClasses>> stage_kernel_classes(const Plan& plan) {
  const auto& s = plan.scenario;
  std::vector<LayerKernelClasses> out(plan.stages.size());
  for (const Stage& st : plan.stages)
    for (int l = st.first_layer; l < st.first_layer + st.layer_count; ++l) {
      const bool recompute = s.parallel.recomputes_forward(plan.layers()[l].kind);
      const auto c = kernel_class_times(plan.layers()[l], s.hardware, s.parallel, plan.microbatch_size, l > 0);
      if (!c) return std::nullopt;
      auto& to = out[st.index];
      to.forward.gemm += c->forward.gemm, to.forward.flash += c->forward.flash, to.forward.memory += c->forward.memory;
      const KernelClassTimes& again = recompute ? c->forward : c->selective_recompute;
      to.backward.gemm += c->backward.gemm + again.gemm;
      to.backward.flash += c->backward.flash + again.flash;
      to.backward.memory += c->backward.memory + again.memory;
    }
  return out;
}

std::optional<StepKernels> step_kernels(const Plan& plan, int pipeline_rank) {
  const auto stages = stage_kernel_classes(plan);
  if (!stages) return std::nullopt;
  std::vector<StepKernels> by_rank(static_cast<size_t>(plan.scenario.parallel.pipeline));
  const double microbatches = plan.schedule.microbatches();
  for (const Stage& st : plan.stages) {
    const auto& c = (*stages)[static_cast<size_t>(st.index)];
    auto& to = by_rank[static_cast<size_t>(st.pipeline_rank)];
    to.pipeline_rank = st.pipeline_rank;
    to.us.gemm += (c.forward.gemm + c.backward.gemm) * microbatches;
    to.us.flash += (c.forward.flash + c.backward.flash) * microbatches;
    to.us.memory += (c.forward.memory + c.backward.memory) * microbatches;
  }
  if (const auto& fitted = plan.scenario.hardware.fitted)  // the kinds' factors, as ShapeModel applies them
    for (auto& r : by_rank) r.us.gemm *= fitted->kernels.gemm, r.us.flash *= fitted->kernels.flash, r.us.memory *= fitted->kernels.memory;
  if (pipeline_rank >= 0 && pipeline_rank < static_cast<int>(by_rank.size())) return by_rank[static_cast<size_t>(pipeline_rank)];
  return *std::max_element(by_rank.begin(), by_rank.end(), [](const auto& a, const auto& b) { return a.total_us() < b.total_us(); });
}

namespace {
// A layer's parameters a token passes through: a MoE block's top-k of its routed experts.
double active_params(const Layer& l) {
  const MoeShape& moe = l.shape.moe;
  const double routed = static_cast<double>(l.expert_param_count(1, 1, 1));
  return static_cast<double>(l.param_count()) - (moe.on() ? routed * (1.0 - static_cast<double>(moe.top_k) / static_cast<double>(moe.experts)) : 0.0);
}
}  // namespace

int64_t active_param_count(const std::vector<Layer>& layers) {
  double n = 0;
  for (const auto& l : layers) n += active_params(l);
  return std::llround(n);
}

ModelWork model_work(const Plan& plan) {
  const Scenario& s = plan.scenario;
  ModelWork w;
  w.samples = static_cast<double>(s.parallel.data) * s.data.batch_size * s.parallel.grad_accumulation;
  w.gpus = plan.world_size;
  int64_t seq = 0;
  double matrix = 0, attention = 0;  // per token
  for (const Layer& l : plan.layers()) {
    if (tensor_splits(l.kind)) seq = std::max(seq, l.shape.seq_len);  // the transformer kinds
    if (l.kind == LayerKind::embedding) continue;  // a lookup
    matrix += active_params(l);
    if (l.kind == LayerKind::head && l.shape.form.tie_embeddings) matrix += static_cast<double>(l.shape.hidden) * l.shape.vocab;  // the table, as the head
    if (l.kind == LayerKind::encoder) attention += 12.0 * static_cast<double>(l.shape.heads * l.shape.head_dim()) * l.shape.seq_len;
  }
  if (seq > 0) {
    w.tokens = w.samples * static_cast<double>(seq);
    w.flops = (6 * matrix + attention) * w.tokens;
  } else {  // no sequence: each sample through every layer, forward and backward
    double per_sample = 0;
    for (const Layer& l : plan.layers()) per_sample += l.flops_per_sample;
    w.flops = 3 * per_sample * w.samples;
  }
  const auto& peaks = s.hardware.device.peak_tflops;
  if (s.hardware.device.kind == DeviceKind::cuda)
    for (Precision p : {Precision::bf16, Precision::fp16})
      if (const auto it = peaks.find(p); it != peaks.end() && w.peak_flops == 0) w.peak_flops = it->second * 1e12;
  return w;
}

std::string whose(const Plan& plan, const StepKernels& k) {
  return plan.scenario.parallel.pipeline > 1 ? "pipeline rank " + std::to_string(k.pipeline_rank) : "a rank";
}

std::string describe(const StepKernels& k) {
  const double total = k.total_us();
  auto part = [&](const char* what, double us) {
    char text[96];
    std::snprintf(text, sizeof text, "%s %.1f ms (%.0f%%)", what, us / 1e3, total > 0 ? 100 * us / total : 0.0);
    return std::string(text);
  };
  return part("GEMMs", k.us.gemm) + ", " + part("flash attention", k.us.flash) + ", " + part("memory-bound", k.us.memory);
}

}  // namespace parallax::plan
