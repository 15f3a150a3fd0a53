#include "fit/from_trace.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <set>

#include <nlohmann/json.hpp>

#include "fit/in_run.hpp"
#include "plan/calibration.hpp"
#include "plan/cost.hpp"
#include "plan/error.hpp"
#include "plan/timeline_metrics.hpp"
#include "profiler/compare.hpp"
#include "profiler/step_statistic.hpp"
#include "sim/simulator.hpp"

namespace parallax::fit {

namespace {

using nlohmann::json;
using plan::Action;
using plan::ActionKind;

[[noreturn]] void refuse(const profiler::LoadedTrace& t, const std::string& why) {
  throw plan::InputError(plan::Location{t.path}, why);
}

std::string number(double v) {
  char s[32];
  std::snprintf(s, sizeof s, "%g", v);
  return s;
}

// The first difference between the plan a Parallax trace ran and `plan`, in words; "" when none.
std::string job_difference(const json& ran, const plan::Plan& plan) {
  const plan::Scenario& s = plan.scenario;
  const json& layers = ran.value("layers", json::array());
  if (layers.size() != plan.layers().size())
    return "the trace's model has " + std::to_string(layers.size()) + " layers, the scenario's " +
           std::to_string(plan.layers().size()) + " (" + s.model_description + ")";
  for (size_t i = 0; i < layers.size(); ++i) {
    const plan::Layer& l = plan.layers()[i];
    const std::string kind = layers[i].value("kind", ""), name = layers[i].value("name", "");
    const int64_t params = layers[i].value("param_count", int64_t{-1});
    if (kind != plan::name(l.kind) || params != l.param_count())
      return "layer " + std::to_string(i) + ": the trace's is " + name + " (" + kind + ", " + std::to_string(params) +
             " parameters), the scenario's " + l.name + " (" + plan::name(l.kind) + ", " +
             std::to_string(l.param_count()) + " parameters)";
  }
  const json& grid = ran.value("grid", json::object());
  const std::pair<const char*, int> layout[] = {{"data", s.parallel.data},
                                                {"pipeline", s.parallel.pipeline},
                                                {"tensor", s.parallel.tensor},
                                                {"virtual", s.parallel.virtual_stages}};
  for (const auto& [key, mine] : layout)
    if (grid.value(key, -1) != mine)
      return std::string("the trace ran parallel.") + key + " " + std::to_string(grid.value(key, -1)) +
             ", the scenario has " + std::to_string(mine);
  if (ran.value("schedule", "") != plan::name(s.parallel.schedule))
    return "the trace ran schedule " + ran.value("schedule", std::string("?")) + ", the scenario has " +
           plan::name(s.parallel.schedule);
  if (ran.value("chunks", -1) != plan.chunks())
    return "the trace ran " + std::to_string(ran.value("chunks", -1)) + " chunks, the scenario has " +
           std::to_string(plan.chunks());
  if (ran.value("microbatch_size", -1) != plan.microbatch_size)
    return "the trace's micro-batches are of " + std::to_string(ran.value("microbatch_size", -1)) +
           " samples, the scenario's of " + std::to_string(plan.microbatch_size);
  if (ran.value("precision", "") != plan::name(s.parallel.precision))
    return "the trace ran " + ran.value("precision", std::string("?")) + ", the scenario " +
           plan::name(s.parallel.precision);
  if (ran.value("partition_len", std::vector<int>{}) != plan.partition)
    return "the trace's stages hold " + ran.value("partition_len", json::array()).dump() +
           " layers, the scenario's " + json(plan.partition).dump() +
           " (give the run's partition: --set \"parallel.partition_len=" + ran.value("partition_len", json::array()).dump() + "\")";
  return "";
}

plan::Timeline parallax_actions(const profiler::LoadedTrace& t, const plan::Plan& plan) {
  if (t.kind != "measured") refuse(t, "a " + t.kind + " trace; fit from a measured one (`parallax run -o TRACE`)");
  const json ran = json::parse(t.timeline.plan_summary, nullptr, false);
  if (!ran.is_object()) refuse(t, "the trace carries no plan, so which job it measured is unknown");
  if (const std::string d = job_difference(ran, plan); !d.empty()) refuse(t, "not a run of this job: " + d);
  return t.timeline;
}

// torch.distributed.pipelining's span name for an action: "PP:" + str(_Action).
constexpr const char* kPipeliningPrefix = "PP:";

plan::Lane lane_of(ActionKind k) {
  switch (k) {
    case ActionKind::SEND_F:
    case ActionKind::SEND_B: return plan::Lane::send;
    case ActionKind::RECV_F:
    case ActionKind::RECV_B: return plan::Lane::recv;
    default: return plan::Lane::compute;
  }
}

// The step of a span on `rank`: the ProfilerStep#N around its start, else the count of the same
// action on the rank so far (one per schedule step).
class StepOf {
 public:
  explicit StepOf(const profiler::LoadedTrace& t) : steps_(t.steps) {}
  int operator()(int rank, const std::string& id, int64_t start_ns) {
    for (const auto& s : steps_)
      if (s.rank == rank && s.start_ns <= start_ns && start_ns < s.end_ns) return s.step;
    return seen_[{rank, id}]++;
  }

 private:
  const std::vector<profiler::LoadedTrace::Step>& steps_;
  std::map<std::pair<int, std::string>, int> seen_;
};

// Whether `e` is a host-side span (PyTorch writes record_function spans on the GPU's rows as
// gpu_user_annotation too; those are left out).
bool host_span(const profiler::TraceEvent& e) { return e.category.rfind("gpu_", 0) != 0; }

plan::TimelineEvent event_of(int rank, const Action& a, int64_t start_ns, int64_t end_ns, int step) {
  plan::TimelineEvent ev;
  ev.rank = rank;
  ev.lane = lane_of(a.kind);
  ev.action = a;
  ev.start = plan::Time::ns(start_ns);
  ev.end = plan::Time::ns(end_ns);
  ev.step = step;
  return ev;
}

// torch.distributed.pipelining: each action its PP:<action> span.
void pipelining_actions(const profiler::LoadedTrace& t, const plan::Plan& plan, plan::Timeline* out) {
  StepOf step_of(t);
  std::vector<const profiler::TraceEvent*> spans;
  for (const auto& e : t.events)
    if (e.name.rfind(kPipeliningPrefix, 0) == 0 && host_span(e)) spans.push_back(&e);
  std::sort(spans.begin(), spans.end(), [](auto* a, auto* b) { return a->start_ns < b->start_ns; });
  for (const profiler::TraceEvent* e : spans) {
    Action a;
    const std::string id = e->name.substr(std::char_traits<char>::length(kPipeliningPrefix));
    if (!plan::parse_action_id(id, &a)) refuse(t, "span '" + e->name + "' names no pipeline action");
    if (e->rank < 0 || e->rank >= plan.world_size)
      refuse(t, "rank " + std::to_string(e->rank) + " ran " + id + ", but the scenario's job has " +
                    std::to_string(plan.world_size) + " ranks");
    const auto& mine = plan.schedule.ranks[plan.ranks[e->rank].pipeline_rank];
    if (std::find(mine.begin(), mine.end(), a) == mine.end())
      refuse(t, "rank " + std::to_string(e->rank) + " ran " + id + ", which the scenario's schedule (" +
                    plan::name(plan.scenario.parallel.schedule) + ", " + std::to_string(plan.chunks()) +
                    " chunks) does not give it: not a run of this job");
    out->events.push_back(event_of(e->rank, a, e->start_ns, e->end_ns, step_of(e->rank, id, e->start_ns)));
  }
}

// A data-parallel job without a pipeline, one micro-batch a step: its phases as PyTorch and its
// users annotate them. Each phase's spans of a step on a rank make one action, from the first's
// start to the last's end: F from "## forward ##" (else DDP's "DistributedDataParallel.forward"),
// B from "## backward ##", OPTIM from "## optimizer ##" (else the optimizers' "Optimizer.step#...").
void phase_actions(const profiler::LoadedTrace& t, const plan::Plan& plan, plan::Timeline* out) {
  struct Phase {
    ActionKind kind;
    const char* annotation;
    const char* fallback_prefix;
  };
  const Phase phases[] = {{ActionKind::F, "## forward ##", "DistributedDataParallel.forward"},
                          {ActionKind::B, "## backward ##", nullptr},
                          {ActionKind::OPTIM, "## optimizer ##", "Optimizer.step#"}};
  StepOf step_of(t);
  for (const Phase& ph : phases) {
    const bool annotated = std::any_of(t.events.begin(), t.events.end(),
                                       [&](const auto& e) { return host_span(e) && e.name == ph.annotation; });
    std::map<std::pair<int, int>, std::pair<int64_t, int64_t>> span;  // (rank, step): first start, last end
    for (const auto& e : t.events) {
      const bool match = annotated ? e.name == ph.annotation
                                   : ph.fallback_prefix && e.name.rfind(ph.fallback_prefix, 0) == 0;
      if (!match || !host_span(e) || e.rank < 0 || e.rank >= plan.world_size) continue;
      auto [it, fresh] = span.try_emplace({e.rank, step_of(e.rank, ph.annotation, e.start_ns)}, e.start_ns, e.end_ns);
      if (!fresh) it->second = {std::min(it->second.first, e.start_ns), std::max(it->second.second, e.end_ns)};
    }
    const Action a = ph.kind == ActionKind::OPTIM ? Action{ActionKind::OPTIM, 0} : Action{ph.kind, 0, 0};
    for (const auto& [key, se] : span) out->events.push_back(event_of(key.first, a, se.first, se.second, key.second));
  }
  std::sort(out->events.begin(), out->events.end(), [](const auto& a, const auto& b) { return a.start < b.start; });
}

plan::Timeline kineto_actions(const profiler::LoadedTrace& t, const plan::Plan& plan) {
  plan::Timeline out;
  out.world_size = plan.world_size;
  pipelining_actions(t, plan, &out);
  const bool one_phase_each = plan.scenario.parallel.pipeline == 1 && plan.schedule.microbatches() == 1;
  if (out.events.empty() && one_phase_each) phase_actions(t, plan, &out);
  if (out.events.empty())
    refuse(t, "no torch.distributed.pipelining action spans (PP:<action>) in this " + t.format + " trace" +
                  (one_phase_each ? ", nor forward / backward / optimizer phases (## forward ##, "
                                    "DistributedDataParallel.forward, ## backward ##, ## optimizer ##, Optimizer.step#)"
                                  : "") +
                  "; profile the schedule's step() with torch.profiler");
  return out;
}

// A Kineto trace's kernels, each given to the action whose span (PP:<action>, or a phase) holds
// the CUDA runtime call that launched it: Kineto writes the same args.correlation on a kernel and
// on its launch (as HolisticTraceAnalysis pairs them). A kernel whose launch no action holds is
// left out.
std::vector<plan::DeviceSpan> kineto_kernels(const profiler::LoadedTrace& t, const plan::Timeline& actions) {
  std::map<std::pair<int, int64_t>, int64_t> launched;  // (rank, correlation): the launch's start
  for (const auto& e : t.events)
    if (e.category == "cuda_runtime" && e.correlation >= 0) launched[{e.rank, e.correlation}] = e.start_ns;
  std::map<int, std::vector<const plan::TimelineEvent*>> computed;  // by rank, in start order
  for (const auto& a : actions.events)
    if (a.lane == plan::Lane::compute) computed[a.rank].push_back(&a);
  for (auto& [rank, v] : computed)
    std::sort(v.begin(), v.end(), [](const auto* a, const auto* b) { return a->start < b->start; });
  std::vector<plan::DeviceSpan> out;
  for (const auto& e : t.events) {
    if (e.category != "kernel" || e.correlation < 0) continue;
    const auto launch = launched.find({e.rank, e.correlation});
    const auto mine = computed.find(e.rank);
    if (launch == launched.end() || mine == computed.end()) continue;
    const plan::Time at = plan::Time::ns(launch->second);
    const auto after = std::upper_bound(mine->second.begin(), mine->second.end(), at,
                                        [](plan::Time when, const auto* a) { return when < a->start; });
    if (after == mine->second.begin() || at > (*std::prev(after))->end) continue;
    const plan::TimelineEvent& a = **std::prev(after);
    plan::DeviceSpan d;
    d.rank = e.rank;
    d.lane = e.lane;
    d.name = e.name;
    d.start = plan::Time::ns(e.start_ns);
    d.end = plan::Time::ns(e.end_ns);
    d.attributed = true;
    d.action = a.action;
    d.step = a.step;
    out.push_back(std::move(d));
  }
  return out;
}

// The measured duration of each kind by stage, in us, over a timeline's steps: F, the backward
// (B, or a split backward's I and W of one micro-batch together), OPTIM.
struct StageDurations {
  std::map<int, std::vector<double>> forward, backward, optimizer;
};

StageDurations durations(const plan::Timeline& t) {
  StageDurations d;
  std::map<std::tuple<int, int, int, int>, double> split;  // (step, rank, stage, mb): I + W
  for (const auto& e : t.events) {
    if (e.lane != plan::Lane::compute) continue;
    const double us = (e.end - e.start).to_us();
    switch (e.action.kind) {
      case ActionKind::F: d.forward[e.action.stage].push_back(us); break;
      case ActionKind::B: d.backward[e.action.stage].push_back(us); break;
      case ActionKind::I:
      case ActionKind::W: split[{e.step, e.rank, e.action.stage, e.action.mb}] += us; break;
      case ActionKind::OPTIM: d.optimizer[e.action.stage].push_back(us); break;
      default: break;
    }
  }
  for (const auto& [key, us] : split) d.backward[std::get<2>(key)].push_back(us);
  return d;
}

double mean_of(const std::map<int, std::vector<double>>& by_stage, int stage) {
  const auto it = by_stage.find(stage);
  return it == by_stage.end() ? 0.0 : trimmed_mean(it->second);
}

// One round: each signature's factor times the time-weighted mean of measured / predicted over
// the stages holding it.
void refit_layers(const plan::Plan& p, const StageDurations& measured, const StageDurations& predicted, bool forward,
                  plan::FittedCosts* fc) {
  std::map<std::string, std::pair<double, double>> sum;  // signature: (weighted ratios, weights)
  for (const plan::Stage& st : p.stages) {
    const double m = mean_of(forward ? measured.forward : measured.backward, st.index);
    const double q = mean_of(forward ? predicted.forward : predicted.backward, st.index);
    if (m <= 0 || q <= 0) continue;
    for (int l = st.first_layer; l < st.first_layer + st.layer_count; ++l) {
      const plan::Layer& layer = p.layers()[l];
      const plan::LayerCost c = plan::estimate_layer_cost(layer, p.scenario.hardware, p.scenario.parallel,
                                                          p.microbatch_size, l > 0);
      const double w = (forward ? c.forward : c.backward).to_us();
      auto& [ratios, weights] = sum[plan::layer_signature(layer, p.scenario.parallel.precision)];
      ratios += w * m / q;
      weights += w;
    }
  }
  for (const auto& [signature, s] : sum) {
    if (s.second <= 0) continue;
    plan::FittedCosts::Layer& f = fc->layers[signature];
    (forward ? f.forward : f.backward) *= s.first / s.second;
  }
}

// Summed over the stages both sides have: measured / predicted; 0 when none.
double ratio_of(const std::map<int, std::vector<double>>& measured, const std::map<int, std::vector<double>>& predicted) {
  double m = 0, q = 0;
  for (const auto& [stage, v] : measured) {
    const double p = mean_of(predicted, stage);
    if (p <= 0) continue;
    m += trimmed_mean(v);
    q += p;
  }
  return q > 0 ? m / q : 0.0;
}

plan::Timeline predict(const plan::Plan& base, const plan::FittedCosts& fc, plan::Plan* with) {
  *with = base;
  with->scenario.hardware.fitted = fc;
  return sim::simulate(*with).timeline;
}

// A measured run's step statistic, over its steps after the warm-up.
plan::Time run_statistic(const plan::Timeline& t) {
  std::vector<int> steps = plan::steps_of(t);
  if (steps.size() > 1) steps.erase(steps.begin());
  std::vector<plan::Time> times;
  for (int s : steps) times.push_back(plan::step_times(t, s).step_time);
  return profiler::step_statistic(times).undisturbed;
}

plan::Time step_time(const plan::Timeline& t) {
  const auto steps = plan::steps_of(t);
  return steps.empty() ? plan::Time() : plan::step_times(t, steps.front()).step_time;
}

}  // namespace

plan::Timeline measured_actions(const profiler::LoadedTrace& trace, const plan::Plan& plan) {
  if (trace.format == "parallax") return parallax_actions(trace, plan);
  if (trace.format == "kineto" || trace.format == "pytorch-legacy" || trace.format == "chrome")
    return kineto_actions(trace, plan);
  refuse(trace, "a " + trace.format + " trace, which Parallax cannot fit from");
}

TraceFit fit_to_measured(const plan::Plan& plan, const std::vector<plan::Timeline>& measured,
                         const plan::FittedCosts::Kernels& kernels) {
  TraceFit r;
  plan::Timeline kept;  // every trace's undisturbed steps, steps renumbered apart
  std::vector<plan::Time> statistic;
  for (const auto& t : measured) {
    statistic.push_back(run_statistic(t));
    const plan::Timeline u = profiler::undisturbed_only(t);
    r.steps += static_cast<int>(profiler::undisturbed_steps(t).size());
    const int offset = kept.events.empty() ? 0 : plan::steps_of(kept).back() + 1;
    for (auto e : u.events) {
      e.step += offset;
      kept.events.push_back(e);
    }
  }
  kept.world_size = plan.world_size;
  r.measured_step = profiler::median(statistic);
  const StageDurations m = durations(kept);
  const plan::Time measured_allreduce = allreduce_time(kept);

  plan::FittedCosts fc;
  plan::Plan p;
  r.base_step = step_time(predict(plan, fc, &p));
  fc.kernels = kernels;
  // A few rounds: a profile's fixed costs per action (calls, in-run extras, the loss) do not
  // scale with a factor, so one round undershoots; four bring the stages within 0.1% here.
  constexpr int kRounds = 4;
  for (int round = 0; round < kRounds; ++round) {
    const plan::Timeline predicted = predict(plan, fc, &p);
    const StageDurations q = durations(predicted);
    refit_layers(p, m, q, true, &fc);
    refit_layers(p, m, q, false, &fc);
    if (const double f = ratio_of(m.optimizer, q.optimizer); f > 0) fc.optimizer *= f;
    if (const plan::Time a = allreduce_time(predicted); a > plan::Time() && measured_allreduce > plan::Time())
      fc.allreduce *= measured_allreduce / a;
  }
  r.costs = fc;
  r.fitted_step = step_time(predict(plan, fc, &p));

  if (fc.kernels != plan::FittedCosts::Kernels{})
    r.fitted.push_back("kernels: GEMMs x" + number(fc.kernels.gemm) + ", flash attention x" + number(fc.kernels.flash) +
                       ", memory-bound x" + number(fc.kernels.memory) + " (the compute model's, for every layer and layout)");
  for (const auto& [signature, f] : fc.layers)
    r.fitted.push_back(signature + ": forward x" + number(f.forward) + ", backward x" + number(f.backward) +
                       (fc.kernels != plan::FittedCosts::Kernels{} ? " over the kernels' factors" : ""));
  if (m.optimizer.empty()) r.kept.push_back("the optimizer step (no OPTIM in the traces)");
  else r.fitted.push_back("optimizer step x" + number(fc.optimizer));
  if (measured_allreduce > plan::Time()) r.fitted.push_back("all-reduces x" + number(fc.allreduce));
  else r.kept.push_back("all-reduces (none in the traces)");
  r.kept.push_back("point-to-point messages and their calls (the base's; a measured RECV holds its wait)");
  r.kept.push_back("memory, and layers of other signatures");
  return r;
}

std::vector<LaunchShare> launch_shares(const std::vector<profiler::LoadedTrace>& traces) {
  struct Samples {
    std::vector<double> host, device, after;
  };
  std::map<ActionKind, Samples> by_kind;
  for (const auto& t : traces) {
    if (t.format != "parallax") continue;
    std::map<std::tuple<int, int32_t, std::string>, const plan::DeviceSpan*> launch;  // (rank, step, action)
    for (const auto& d : t.timeline.device)
      if (d.lane == plan::kHostLaunchLane && d.attributed && d.step > 0) launch[{d.rank, d.step, d.action.id()}] = &d;
    if (launch.empty()) continue;
    for (const auto& e : t.timeline.events) {
      if (e.lane != plan::Lane::compute) continue;
      const auto it = launch.find({e.rank, e.step, e.action.id()});
      if (it == launch.end()) continue;
      Samples& s = by_kind[e.action.kind];
      s.host.push_back((it->second->end - it->second->start).to_us());
      s.device.push_back((e.end - e.start).to_us());
      s.after.push_back((e.end - it->second->end).to_us());
    }
  }
  std::vector<LaunchShare> out;
  for (const auto& [kind, s] : by_kind)
    out.push_back({kind, profiler::median(s.host), profiler::median(s.device), profiler::median(s.after),
                   static_cast<int>(s.host.size())});
  return out;
}

KernelKind kernel_kind(const std::string& name) {
  std::string n(name.size(), ' ');
  std::transform(name.begin(), name.end(), n.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  auto has = [&](const char* s) { return n.find(s) != std::string::npos; };
  if (has("nccl")) return KernelKind::communication;
  if (has("memcpy") || has("memset")) return KernelKind::copy;
  if (has("flash") || has("fmha")) return KernelKind::flash;
  // cuBLAS 12.8 and later name many of its GEMM kernels nvjet_* (an H200 with CUDA 13: nvjet_sm90_tst_...).
  if (has("gemm") || has("cutlass") || has("xmma") || has("cublas") || has("wgmma") || has("matmul") || has("nvjet"))
    return KernelKind::gemm;
  return KernelKind::memory;
}

plan::FittedCosts::Kernels fit_kernel_kinds(const plan::Plan& plan, const std::vector<profiler::LoadedTrace>& traces,
                                            std::vector<std::string>* said) {
  const auto& s = plan.scenario;
  // Each stage's model times by kind, forward and backward (a recompute's forward inside B).
  std::vector<plan::LayerKernelClasses> stage(plan.stages.size());
  for (const plan::Stage& st : plan.stages)
    for (int l = st.first_layer; l < st.first_layer + st.layer_count; ++l) {
      const auto c = plan::kernel_class_times(plan.layers()[l], s.hardware, s.parallel, plan.microbatch_size, l > 0);
      if (!c) {
        said->push_back(std::string("kernels: not fitted (") + s.hardware.name + " has no compute model at " +
                        plan::name(s.parallel.precision) + " to set them against)");
        return {};
      }
      auto& to = stage[st.index];
      const bool recompute = s.parallel.activation_checkpointing == plan::Recompute::layer ||
                             s.parallel.activation_checkpointing == plan::Recompute::stage;
      to.forward.gemm += c->forward.gemm, to.forward.flash += c->forward.flash, to.forward.memory += c->forward.memory;
      to.backward.gemm += c->backward.gemm + (recompute ? c->forward.gemm : 0.0);
      to.backward.flash += c->backward.flash + (recompute ? c->forward.flash : 0.0);
      to.backward.memory += c->backward.memory + (recompute ? c->forward.memory : 0.0);
    }
  plan::KernelClassTimes measured, model;
  std::set<std::tuple<int, int32_t, std::string>> actions;  // (rank, step, action) with kernels
  for (const auto& t : traces) {
    // Parallax's CUPTI traces attribute their kernels as they record them; a Kineto trace's are
    // attributed here, through their launches.
    std::vector<plan::DeviceSpan> attributed;
    if (t.format == "kineto") attributed = kineto_kernels(t, kineto_actions(t, plan));
    else if (t.format != "parallax") continue;
    const std::vector<plan::DeviceSpan>& spans = t.format == "kineto" ? attributed : t.timeline.device;
    // The trace's first step is its warm-up (Parallax's step 0; a profiler's first ProfilerStep).
    int32_t first = std::numeric_limits<int32_t>::max();
    for (const auto& d : spans)
      if (d.attributed) first = std::min(first, d.step);
    for (const auto& d : spans) {
      // Kernels only: not the actions' CUDA-event spans nor the host's launch spans beside them.
      if (d.lane == plan::kCudaEventLane || d.lane == plan::kHostLaunchLane) continue;
      if (!d.attributed || d.step == first || (d.action.kind != ActionKind::F && d.action.kind != ActionKind::B)) continue;
      const double us = (d.end - d.start).to_us();
      switch (kernel_kind(d.name)) {
        case KernelKind::gemm: measured.gemm += us; break;
        case KernelKind::flash: measured.flash += us; break;
        case KernelKind::memory: measured.memory += us; break;
        default: continue;
      }
      if (!actions.insert({d.rank, d.step, d.action.id()}).second) continue;
      const auto& c = d.action.kind == ActionKind::F ? stage[d.action.stage].forward : stage[d.action.stage].backward;
      model.gemm += c.gemm, model.flash += c.flash, model.memory += c.memory;
    }
  }
  if (actions.empty()) {
    said->push_back("kernels: not fitted (no trace shows the GPU's kernels of its F and B after its first step: Parallax's "
                    "measured GPU traces with CUPTI do, and PyTorch profiler traces with their kernels and launches)");
    return {};
  }
  plan::FittedCosts::Kernels k;
  auto fit = [&](double m, double q, double* f, const char* what) {
    if (m > 0 && q > 0) {
      *f = m / q;
      said->push_back(std::string("kernels: ") + what + " " + number(m / 1e3) + " ms measured over " + number(q / 1e3) +
                      " ms modelled, x" + number(*f) + " (" + std::to_string(actions.size()) + " F and B actions)");
    } else {
      said->push_back(std::string("kernels: ") + what + " kept (" + (m > 0 ? "none modelled" : "none in the traces") + ")");
    }
  };
  fit(measured.gemm, model.gemm, &k.gemm, "GEMMs");
  fit(measured.flash, model.flash, &k.flash, "flash attention");
  fit(measured.memory, model.memory, &k.memory, "memory-bound");
  return k;
}

}  // namespace parallax::fit
