#include "timeline/plan_summary.hpp"

#include <algorithm>
#include <cstdio>
#include <map>

#include "plan/cost.hpp"
#include "plan/memory.hpp"

namespace parallax::timeline {
namespace {

using nlohmann::json;
using plan::Plan;

// Every key a trace's plan summary has: the one writer (docs/cli.md documents its shape).
json document_of(const Plan& p) {
  const auto& s = p.scenario;
  json out;
  out["scenario"] = s.name;
  out["file"] = s.file;
  out["model"] = s.model_description;
  out["framework"] = plan::name(s.framework);
  out["framework_set"] = s.framework_set;
  out["hardware"] = s.hardware.name;
  out["device"] = s.hardware.device.name;  // kept by the profiles calibrated or fitted from it
  out["world_size"] = p.world_size;
  out["nodes"] = p.nodes;
  out["grid"] = {{"data", s.parallel.data},
                 {"context", s.parallel.context},
                 {"pipeline", s.parallel.pipeline},
                 {"tensor", s.parallel.tensor},
                 {"sequence_parallel", s.parallel.sequence_parallel},
                 {"virtual", s.parallel.virtual_stages},
                 {"rank_order", plan::name(s.parallel.rank_order)}};
  if (const plan::Layer* moe = plan::first_moe_layer(p.layers())) {  // what the report shows of a MoE plan
    const plan::MoeShape& m = moe->shape.moe;
    const plan::ExpertTraffic x = plan::expert_traffic(*moe, s.parallel, p.microbatch_size);
    out["moe"] = {{"experts", m.experts},         {"top_k", m.top_k},
                  {"shared", m.shared},           {"blocks", plan::moe_block_count(p.layers())},
                  {"expert", s.parallel.expert},  {"imbalance", x.imbalance},
                  {"imbalance_stated", m.imbalance > 0},
                  {"all_to_alls", x.forward + x.backward},  // per block and micro-batch
                  {"all_to_all_bytes", x.all_to_all_bytes}};
  }
  if (!s.hardware.published_checks().empty()) out["published_check"] = published_check_json(s.hardware);
  out["kernels"] = kernels_json(p);  // what a step's compute is made of (the report and the GUI show it)
  out["schedule"] = schedule::name(s.parallel.schedule);
  out["microbatch_size"] = p.microbatch_size;
  // A transformer's sequence (its layers' own; 0 for other models): what a micro-batch's samples are long.
  int64_t seq_len = 0;
  for (const auto& l : p.layers()) seq_len = std::max(seq_len, l.shape.seq_len);
  out["seq_len"] = seq_len;
  out["chunks"] = p.chunks();
  out["grad_accumulation"] = s.parallel.grad_accumulation;
  out["global_batch"] = s.data.batch_size * s.parallel.grad_accumulation * s.parallel.data;
  out["precision"] = plan::name(s.parallel.precision);
  out["optimizer"] = s.optimizer.kind;  // what a fit from the run's trace costs (fit/from_trace.cpp)
  out["data_source"] = s.data.source;
  out["partition_len"] = p.partition;

  json layers = json::array();
  for (const auto& l : p.layers()) {
    json params = json::array();
    for (const auto& prm : l.params) params.push_back({{"name", prm.name}, {"shape", prm.shape}});
    layers.push_back({{"name", l.name},
                      {"kind", plan::name(l.kind)},
                      {"params", params},
                      {"param_count", l.param_count()},
                      {"activation_elems_per_sample", l.activation_elems_per_sample},
                      {"output_elems_per_sample", l.output_elems_per_sample},
                      {"flops_per_sample", l.flops_per_sample}});
    if (const auto& f = l.shape.form; f.decoder)  // what a reference model needs beyond the shapes
      layers.back()["form"] = {{"heads", l.shape.heads}, {"kv_heads", l.shape.kv_heads()}, {"mlp", plan::name(f.mlp)},
                               {"norm", plan::name(f.norm)}, {"rope", f.rope}, {"bias", f.bias}, {"qkv_bias", f.qkv_bias},
                               {"tie_embeddings", f.tie_embeddings}, {"head_dim", l.shape.head_dim()}, {"qk_norm", f.qk_norm}};
    if (const auto& m = l.shape.moe; m.on())
      layers.back()["form"]["moe"] = {{"experts", m.experts}, {"top_k", m.top_k}, {"shared", m.shared}, {"ffn", m.ffn}};
    if (const auto& m = l.shape.form.mla; m.on() && l.kind == plan::LayerKind::encoder)
      layers.back()["form"]["mla"] = {{"q_lora_rank", m.q_lora_rank}, {"kv_lora_rank", m.kv_lora_rank}, {"qk_nope_head_dim", m.qk_nope_head_dim},
                                      {"qk_rope_head_dim", m.qk_rope_head_dim}, {"v_head_dim", m.v_head_dim}};
    if (l.shape.mtp) layers.back()["form"]["mtp"] = true;
    if (l.shape.form.dropout > 0 && l.shape.form.decoder) layers.back()["form"]["dropout"] = l.shape.form.dropout;
    if (l.shape.window > 0) layers.back()["form"]["window"] = l.shape.window;
  }
  out["layers"] = layers;

  json stages = json::array(), buckets = json::array();
  for (const auto& st : p.stages) {
    json names = json::array();
    for (int l = st.first_layer; l < st.first_layer + st.layer_count; ++l) names.push_back(p.layers()[l].name);
    stages.push_back({{"index", st.index}, {"pipeline_rank", st.pipeline_rank}, {"layers", names},
                      {"param_bytes", st.param_bytes}, {"activation_bytes_per_microbatch", plan::stage_activation_bytes(p, st)}});
    for (const auto& b : st.buckets)
      buckets.push_back({{"stage", b.stage}, {"index", b.index}, {"bytes", b.bytes}, {"params", plan::param_names(p.layers(), b)},
                         {"ready_layer", p.layers()[b.ready_layer].name}});
  }
  out["stages"] = stages;
  out["buckets"] = buckets;

  json ranks = json::array(), memory = json::array();
  const int64_t capacity = s.hardware.device.memory_bytes();
  for (const auto& r : p.ranks) {
    ranks.push_back({{"rank", r.rank}, {"replica", r.replica}, {"pipeline_rank", r.pipeline_rank}, {"tensor_rank", r.tensor_rank},
                     {"node", r.node}, {"local_rank", r.local_rank}, {"stages", r.stages}});
    const auto& m = r.memory;
    memory.push_back({{"rank", r.rank}, {"params", m.params}, {"gradients", m.gradients}, {"optimizer", m.optimizer},
                      {"buckets", m.buckets}, {"activations", m.activations}, {"recompute", m.recompute}, {"gathered", m.gathered},
                      {"not_at_once", m.not_at_once()}, {"reserve", m.reserve}, {"peak_inflight", m.peak_inflight},
                      {"total", m.total()}, {"device_bytes", capacity}, {"fits", s.hardware.device.holds(m.total())}});
  }
  out["ranks"] = ranks;
  out["memory"] = memory;
  return out;
}

}  // namespace

nlohmann::json kernels_json(const plan::Plan& plan) {
  const auto k = plan::step_kernels(plan);
  if (!k) return nullptr;
  return {{"pipeline_rank", k->pipeline_rank}, {"gemm_ms", k->us.gemm / 1e3}, {"flash_ms", k->us.flash / 1e3},
          {"memory_ms", k->us.memory / 1e3}, {"whose", plan::whose(plan, *k)}, {"text", plan::describe(*k)}};
}

nlohmann::json published_check_json(const plan::HardwareProfile& hw) {
  json out = json::array();
  for (const plan::PublishedCheck& c : hw.published_checks())
    out.push_back({{"runs_of", c.runs_of},
                   {"bench", c.bench},
                   {"rows", c.rows},
                   {"mean_error_percent", c.mean_error},
                   {"mean_absolute_error_percent", c.mean_absolute_error},
                   {"worst_percent", c.worst},
                   {"results", c.results},
                   {"text", plan::describe(c)}});
  return out;
}

PlanSummary summarize(const Plan& plan) { return *read_plan_summary(document_of(plan)); }

std::string rank_role(const PlanSummary& plan, int rank, int timeline_ranks) {
  const bool groups = plan.tensor > 1 && int64_t{timeline_ranks} * plan.tensor == plan.world_size;
  const int global = groups ? rank * plan.tensor : rank;
  // The summary lists the ranks in order (document_of); an older or edited one is searched.
  const RankSummary* r = global >= 0 && global < static_cast<int>(plan.ranks.size()) && plan.ranks[global].rank == global
                             ? &plan.ranks[global]
                             : nullptr;
  for (size_t i = 0; !r && i < plan.ranks.size(); ++i)
    if (plan.ranks[i].rank == global) r = &plan.ranks[i];
  if (!r) return "";
  std::string role;
  const auto add = [&](const char* dimension, int degree, int index) {
    if (degree > 1) role.append(role.empty() ? "" : ", ").append(dimension).append(" ").append(std::to_string(index));
  };
  const int context = std::max(1, plan.context);  // replica = data index x context + context index (plan::Placement)
  add("pp", plan.pipeline, r->pipeline_rank);
  add("dp", plan.data, r->replica / context);
  add("cp", context, r->replica % context);
  if (!groups) add("tp", plan.tensor, r->tensor_rank);
  return role;
}

std::optional<PlanSummary> read_plan_summary(const json& document) {
  if (!document.is_object()) return std::nullopt;
  PlanSummary s;
  s.document = document;
  s.scenario = document.value("scenario", "");
  s.hardware = document.value("hardware", "");
  s.device = document.value("device", "");
  s.schedule = document.value("schedule", "");
  s.precision = document.value("precision", "");
  s.optimizer = document.value("optimizer", "");
  s.data_source = document.value("data_source", "");
  s.world_size = document.value("world_size", 0);
  const json grid = document.value("grid", json::object());
  s.data = grid.value("data", 1);
  s.context = grid.value("context", 1);
  s.pipeline = grid.value("pipeline", 1);
  s.tensor = grid.value("tensor", 1);
  s.virtual_stages = grid.value("virtual", 1);
  s.chunks = document.value("chunks", 1);
  s.grad_accumulation = document.value("grad_accumulation", 1);
  s.microbatch_size = document.value("microbatch_size", 0);
  s.partition_len = document.value("partition_len", std::vector<int>{});
  for (const json& l : document.value("layers", json::array()))
    if (l.is_object()) s.layers.push_back({l.value("name", ""), l.value("kind", ""), l.value("param_count", int64_t{-1})});
  for (const json& r : document.value("ranks", json::array()))
    if (r.is_object())
      s.ranks.push_back({r.value("rank", 0), r.value("replica", 0), r.value("pipeline_rank", 0), r.value("tensor_rank", 0),
                         r.value("stages", std::vector<int>{})});
  for (const json& m : document.value("memory", json::array())) {
    if (!m.is_object() || m.value("total", int64_t{-1}) < 0) continue;
    const auto bytes = [&](const char* key) { return m.value(key, int64_t{0}); };
    MemorySummary ms;
    ms.rank = m.value("rank", 0);
    ms.params = bytes("params"), ms.gradients = bytes("gradients"), ms.optimizer = bytes("optimizer");
    ms.buckets = bytes("buckets"), ms.activations = bytes("activations"), ms.recompute = bytes("recompute");
    ms.gathered = bytes("gathered"), ms.not_at_once = bytes("not_at_once");
    ms.total = bytes("total"), ms.reserve = bytes("reserve"), ms.device_bytes = bytes("device_bytes");
    ms.fits = m.value("fits", true);
    s.memory.push_back(ms);
  }
  return s;
}

// What sets two plans' actions or their precision apart, as "schedule: predicted gpipe, run
// 1f1b; chunks: ..."; "" when none does. A field either trace's summary lacks (an older trace's)
// is taken as equal: "" for the compared text.
namespace {

// Whether two summaries hold another model: its layers' count, names, kinds or parameters, in
// words ("" when alike, or when a summary lists no layers).
std::string model_difference(const PlanSummary& p, const PlanSummary& m) {
  if (p.layers.empty() || m.layers.empty()) return "";
  if (p.layers.size() != m.layers.size())
    return "predicted " + std::to_string(p.layers.size()) + " layers, run " + std::to_string(m.layers.size());
  for (size_t i = 0; i < p.layers.size(); ++i) {
    const LayerSummary &a = p.layers[i], &b = m.layers[i];
    if (a.name != b.name || a.kind != b.kind)
      return "layer " + std::to_string(i) + " predicted '" + a.name + "' (" + a.kind + "), run '" + b.name + "' (" + b.kind + ")";
    if (a.param_count != b.param_count)
      return "layer '" + a.name + "' predicted with " + std::to_string(a.param_count) + " parameters, run with " + std::to_string(b.param_count);
  }
  return "";
}

// A plan's DDP buckets in words, stage by stage ("stage 0: 2 of 0.25, 0.80 MiB"); "" when the
// summary does not list them.
std::string bucket_layout(const PlanSummary& s) {
  if (!s.document.contains("buckets") || !s.document["buckets"].is_array()) return "";
  std::map<int, std::vector<int64_t>> by_stage;
  for (const auto& b : s.document["buckets"]) by_stage[b.value("stage", 0)].push_back(b.value("bytes", int64_t{0}));
  std::string out;
  for (const auto& [stage, sizes] : by_stage) {
    out += (out.empty() ? "" : "; ") + std::string("stage ") + std::to_string(stage) + ": " + std::to_string(sizes.size()) + " of ";
    const size_t shown = std::min<size_t>(sizes.size(), 4);
    for (size_t i = 0; i < shown; ++i) {
      char mib[32];
      std::snprintf(mib, sizeof mib, "%s%.2f", i ? ", " : "", static_cast<double>(sizes[i]) / (1 << 20));
      out += mib;
    }
    out += sizes.size() > shown ? ", ... MiB" : " MiB";
  }
  return out.empty() ? "none" : out;
}

}  // namespace

std::string plan_differences(const PlanSummary& p, const PlanSummary& m) {
  std::string out;
  const auto differ = [&](const std::string& what, const std::string& a, const std::string& b) {
    if (a.empty() || b.empty() || a == b) return;
    out += (out.empty() ? "" : "; ") + what + ": predicted " + a + ", run " + b;
  };
  const auto stated = [&](const PlanSummary& s, const char* key, int value) {
    return s.document.contains(key) ? std::to_string(value) : std::string();
  };
  const auto list = [](const std::vector<int>& v) {
    std::string s;
    for (int x : v) s += (s.empty() ? "[" : ", ") + std::to_string(x);
    return s.empty() ? s : s + "]";
  };
  const auto grid = [](const PlanSummary& s) {
    return "data " + std::to_string(s.data) + " x context " + std::to_string(s.context) + " x pipeline " + std::to_string(s.pipeline) +
           " x tensor " + std::to_string(s.tensor);
  };
  // The model first: what else differs follows from it (another layer count splits otherwise).
  const std::string model = model_difference(p, m);
  if (!model.empty()) out = "model: " + model;
  const bool grids = p.document.contains("grid") && m.document.contains("grid");
  differ("grid", grids ? grid(p) : "", grids ? grid(m) : "");
  differ("schedule", p.schedule, m.schedule);
  differ("virtual stages", grids ? std::to_string(p.virtual_stages) : "", grids ? std::to_string(m.virtual_stages) : "");
  differ("chunks", stated(p, "chunks", p.chunks), stated(m, "chunks", m.chunks));
  differ("grad_accumulation", stated(p, "grad_accumulation", p.grad_accumulation), stated(m, "grad_accumulation", m.grad_accumulation));
  differ("micro-batch size", p.microbatch_size > 0 ? std::to_string(p.microbatch_size) : "",
         m.microbatch_size > 0 ? std::to_string(m.microbatch_size) : "");
  // "balanced" splits on the profile's costs, so a calibrated profile may split otherwise.
  // The hint only where the stages are alike: another grid's list would not fit the prediction's.
  const std::string predicted_lens = list(p.partition_len), lens = list(m.partition_len);
  differ("layers per stage", predicted_lens, lens);
  if (predicted_lens != lens && !lens.empty() && !predicted_lens.empty() && p.partition_len.size() == m.partition_len.size() && model.empty())
    out += ", which --set 'parallel.partition_len=" + lens + "' gives the prediction";
  differ("precision", p.precision, m.precision);
  differ("optimizer", p.optimizer, m.optimizer);
  // DDP's buckets (parallel.bucket_cap_mb, first_bucket_mb): another layout all-reduces other
  // sizes, and had been compared bucket by bucket as the same actions.
  differ("DDP buckets", bucket_layout(p), bucket_layout(m));
  return out;
}

}  // namespace parallax::timeline
