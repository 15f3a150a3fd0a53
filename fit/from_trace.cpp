#include "fit/from_trace.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <set>
#include <tuple>

#include <nlohmann/json.hpp>

#include "fit/in_run.hpp"
#include "plan/calibration.hpp"
#include "plan/cost.hpp"
#include "plan/error.hpp"
#include "sim/simulator.hpp"
#include "timeline/compare.hpp"
#include "timeline/metrics.hpp"
#include "timeline/step_statistic.hpp"

namespace parallax::fit {

namespace {

using nlohmann::json;
using schedule::Action;
using schedule::ActionKind;

[[noreturn]] void refuse(const timeline::LoadedTrace& t, const std::string& why) {
  throw plan::InputError(plan::Location{t.path}, why);
}

std::string number(double v) {
  char s[32];
  std::snprintf(s, sizeof s, "%g", v);
  return s;
}

// The first difference between the plan a Parallax trace ran and `plan`, in words; "" when none.
std::string job_difference(const timeline::PlanSummary& ran, const plan::Plan& plan) {
  const plan::Scenario& s = plan.scenario;
  if (ran.layers.size() != plan.layers().size())
    return "the trace's model has " + std::to_string(ran.layers.size()) + " layers, the scenario's " +
           std::to_string(plan.layers().size()) + " (" + s.model_description + ")";
  for (size_t i = 0; i < ran.layers.size(); ++i) {
    const plan::Layer& l = plan.layers()[i];
    const timeline::LayerSummary& theirs = ran.layers[i];
    if (theirs.kind != plan::name(l.kind) || theirs.param_count != l.param_count())
      return "layer " + std::to_string(i) + ": the trace's is " + theirs.name + " (" + theirs.kind + ", " +
             std::to_string(theirs.param_count) + " parameters), the scenario's " + l.name + " (" + plan::name(l.kind) +
             ", " + std::to_string(l.param_count()) + " parameters)";
  }
  const std::tuple<const char*, int, int> layout[] = {{"data", ran.data, s.parallel.data},
                                                      {"pipeline", ran.pipeline, s.parallel.pipeline},
                                                      {"tensor", ran.tensor, s.parallel.tensor},
                                                      {"virtual", ran.virtual_stages, s.parallel.virtual_stages}};
  for (const auto& [key, theirs, mine] : layout)
    if (theirs != mine)
      return std::string("the trace ran parallel.") + key + " " + std::to_string(theirs) + ", the scenario has " +
             std::to_string(mine);
  if (ran.schedule != schedule::name(s.parallel.schedule))
    return "the trace ran schedule " + ran.schedule + ", the scenario has " + schedule::name(s.parallel.schedule);
  if (ran.chunks != plan.chunks())
    return "the trace ran " + std::to_string(ran.chunks) + " chunks, the scenario has " + std::to_string(plan.chunks());
  if (ran.microbatch_size != plan.microbatch_size)
    return "the trace's micro-batches are of " + std::to_string(ran.microbatch_size) + " samples, the scenario's of " +
           std::to_string(plan.microbatch_size);
  if (ran.precision != plan::name(s.parallel.precision))
    return "the trace ran " + ran.precision + ", the scenario " + plan::name(s.parallel.precision);
  // (Unknown in a trace written before they were recorded: not held against it.)
  if (!ran.optimizer.empty() && ran.optimizer != s.optimizer.kind)
    return "the trace's optimizer is " + ran.optimizer + ", the scenario's " + s.optimizer.kind;
  if (!ran.data_source.empty() && ran.data_source != s.data.source)
    return "the trace's data came from " + ran.data_source + ", the scenario's from " + s.data.source;
  if (ran.partition_len != plan.partition)
    return "the trace's stages hold " + json(ran.partition_len).dump() + " layers, the scenario's " +
           json(plan.partition).dump() + " (give the run's partition: --set \"parallel.partition_len=" +
           json(ran.partition_len).dump() + "\")";
  return "";
}

timeline::Timeline parallax_actions(const timeline::LoadedTrace& t, const plan::Plan& plan) {
  if (t.kind != "measured") refuse(t, "a " + t.kind + " trace; fit from a measured one (`parallax run -o TRACE`)");
  if (!t.timeline.plan) refuse(t, "the trace carries no plan, so which job it measured is unknown");
  if (const std::string d = job_difference(*t.timeline.plan, plan); !d.empty()) refuse(t, "not a run of this job: " + d);
  // A fit corrects the profile of the machine that ran: a CPU run's factors on an H100's profile
  // would predict the CPU under the H100's name. A profile calibrated or fitted on the run's
  // machine keeps its base's device, so the devices tell (unknown in traces before 2026-12-07).
  const plan::HardwareProfile& hw = plan.scenario.hardware;
  if (const std::string& ran = t.timeline.plan->device; !ran.empty() && ran != hw.device.name)
    refuse(t, "a run on " + ran + " (profile '" + t.timeline.plan->hardware + "'), where the job's profile '" + hw.name +
                  "' describes " + hw.device.name + ": a fit corrects the profile of the machine that ran; give that one (--set hardware=" +
                  t.timeline.plan->hardware + ", or the profile calibrate wrote there)");
  return t.timeline;
}

// torch.distributed.pipelining's span name for an action: "PP:" + str(_Action).
constexpr const char* kPipeliningPrefix = "PP:";

timeline::Lane lane_of(ActionKind k) {
  switch (k) {
    case ActionKind::SEND_F:
    case ActionKind::SEND_B: return timeline::Lane::send;
    case ActionKind::RECV_F:
    case ActionKind::RECV_B: return timeline::Lane::recv;
    default: return timeline::Lane::compute;
  }
}

// The step of a span on `rank`: the ProfilerStep#N around its start, else the count of the same
// action on the rank so far (one per schedule step).
class StepOf {
 public:
  explicit StepOf(const timeline::LoadedTrace& t) : steps_(t.steps) {}
  int operator()(int rank, const std::string& id, int64_t start_ns) {
    for (const auto& s : steps_)
      if (s.rank == rank && s.start_ns <= start_ns && start_ns < s.end_ns) return s.step;
    return seen_[{rank, id}]++;
  }

 private:
  const std::vector<timeline::LoadedTrace::Step>& steps_;
  std::map<std::pair<int, std::string>, int> seen_;
};

// Whether `e` is a host-side span (PyTorch writes record_function spans on the GPU's rows as
// gpu_user_annotation too; those are left out).
bool host_span(const timeline::TraceEvent& e) { return e.category.rfind("gpu_", 0) != 0; }

timeline::TimelineEvent event_of(int rank, const Action& a, int64_t start_ns, int64_t end_ns, int step) {
  timeline::TimelineEvent ev;
  ev.rank = rank;
  ev.lane = lane_of(a.kind);
  ev.action = a;
  ev.start = plan::Time::ns(start_ns);
  ev.end = plan::Time::ns(end_ns);
  ev.step = step;
  return ev;
}

// torch.distributed.pipelining: each action its PP:<action> span.
void pipelining_actions(const timeline::LoadedTrace& t, const plan::Plan& plan, timeline::Timeline* out) {
  StepOf step_of(t);
  std::vector<const timeline::TraceEvent*> spans;
  for (const auto& e : t.events)
    if (e.name.rfind(kPipeliningPrefix, 0) == 0 && host_span(e)) spans.push_back(&e);
  std::sort(spans.begin(), spans.end(), [](auto* a, auto* b) { return a->start_ns < b->start_ns; });
  for (const timeline::TraceEvent* e : spans) {
    Action a;
    const std::string id = e->name.substr(std::char_traits<char>::length(kPipeliningPrefix));
    if (!schedule::parse_action_id(id, &a)) refuse(t, "span '" + e->name + "' names no pipeline action");
    if (e->rank < 0 || e->rank >= plan.world_size)
      refuse(t, "rank " + std::to_string(e->rank) + " ran " + id + ", but the scenario's job has " +
                    std::to_string(plan.world_size) + " ranks");
    const auto& mine = plan.schedule.ranks[plan.ranks[e->rank].pipeline_rank];
    if (std::find(mine.begin(), mine.end(), a) == mine.end())
      refuse(t, "rank " + std::to_string(e->rank) + " ran " + id + ", which the scenario's schedule (" +
                    schedule::name(plan.scenario.parallel.schedule) + ", " + std::to_string(plan.chunks()) +
                    " chunks) does not give it: not a run of this job");
    out->events.push_back(event_of(e->rank, a, e->start_ns, e->end_ns, step_of(e->rank, id, e->start_ns)));
  }
}

// A data-parallel job without a pipeline, one micro-batch a step: its phases as PyTorch and its
// users annotate them. Each phase's spans of a step on a rank make one action, from the first's
// start to the last's end: F from "## forward ##" (else DDP's "DistributedDataParallel.forward"),
// B from "## backward ##", OPTIM from "## optimizer ##" (else the optimizers' "Optimizer.step#...").
void phase_actions(const timeline::LoadedTrace& t, const plan::Plan& plan, timeline::Timeline* out) {
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

// A profiler trace names its job's size and its own rank (distributedInfo): one of another size,
// or of a rank the job does not have, is not a run of this job.
void check_ranks(const timeline::LoadedTrace& t, const plan::Plan& plan) {
  const std::string job = ", where the scenario's job has " + std::to_string(plan.world_size) + " rank" +
                          (plan.world_size == 1 ? "" : "s") + ": not a run of this job (give its layout: --set parallel.data=...)";
  if (t.world_size > 0 && t.world_size != plan.world_size)
    refuse(t, "a run of " + std::to_string(t.world_size) + " ranks (distributedInfo.world_size)" + job);
  for (const auto& e : t.events)
    if (e.rank < 0 || e.rank >= plan.world_size) refuse(t, "a trace of rank " + std::to_string(e.rank) + job);
}

timeline::Timeline kineto_actions(const timeline::LoadedTrace& t, const plan::Plan& plan) {
  check_ranks(t, plan);
  timeline::Timeline out;
  out.world_size = plan.world_size;
  pipelining_actions(t, plan, &out);
  const bool one_phase_each = plan.scenario.parallel.pipeline == 1 && plan.schedule.microbatches() == 1;
  if (out.events.empty() && one_phase_each) phase_actions(t, plan, &out);
  if (out.events.empty())
    refuse(t, "no torch.distributed.pipelining action spans (PP:<action>) in this " + t.format + " trace" +
                  (one_phase_each ? ", nor forward / backward / optimizer phases (## forward ##, "
                                    "DistributedDataParallel.forward, ## backward ##, ## optimizer ##, Optimizer.step#)"
                                  : plan.scenario.parallel.pipeline == 1
                                        ? " (its phases, ## forward ## and the like, are read only for a job of one micro-batch a "
                                          "step, which the scenario's " + std::to_string(plan.schedule.microbatches()) +
                                          " micro-batches are not)"
                                        : "") +
                  "; profile the schedule's step() with torch.profiler");
  return out;
}

// The measured duration of each kind by stage, in us, over a timeline's steps: F, the backward
// (B, or a split backward's I and W of one micro-batch together), OPTIM.
struct StageDurations {
  std::map<int, std::vector<double>> forward, backward, optimizer;
  std::vector<double> send_forward, send_backward;  // every SEND_F and SEND_B: the sender's time in the call
};

StageDurations durations(const timeline::Timeline& t) {
  StageDurations d;
  std::map<std::tuple<int, int, int, int>, double> split;  // (step, rank, stage, mb): I + W
  for (const auto& e : t.events) {
    const double us = (e.end - e.start).to_us();
    if (e.action.kind == ActionKind::SEND_F) d.send_forward.push_back(us);
    if (e.action.kind == ActionKind::SEND_B) d.send_backward.push_back(us);
    if (e.lane != timeline::Lane::compute) continue;
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

timeline::Timeline predict(const plan::Plan& base, const plan::FittedCosts& fc, plan::Plan* with) {
  *with = base;
  with->scenario.hardware.fitted = fc;
  return sim::simulate(*with).timeline;
}


plan::Time step_time(const timeline::Timeline& t) {
  const auto steps = timeline::steps_of(t);
  return steps.empty() ? plan::Time() : timeline::step_times(t, steps.front()).step_time;
}

}  // namespace

timeline::Timeline measured_actions(const timeline::LoadedTrace& trace, const plan::Plan& plan) {
  if (trace.format == "parallax") return parallax_actions(trace, plan);
  if (trace.format == "kineto" || trace.format == "pytorch-legacy" || trace.format == "chrome")
    return kineto_actions(trace, plan);
  refuse(trace, "a " + trace.format + " trace, which Parallax cannot fit from");
}

TraceFit fit_to_measured(const plan::Plan& plan, const std::vector<timeline::Timeline>& measured,
                         const plan::FittedCosts::Kernels& kernels) {
  TraceFit r;
  timeline::Timeline kept;  // every trace's undisturbed steps, steps renumbered apart
  std::vector<plan::Time> statistic;
  for (const auto& t : measured) {
    statistic.push_back(timeline::measured_step(t).undisturbed);
    const timeline::Timeline u = timeline::undisturbed_only(t);
    r.steps += static_cast<int>(timeline::undisturbed_steps(t).size());
    const int offset = kept.events.empty() ? 0 : timeline::steps_of(kept).back() + 1;
    for (auto e : u.events) {
      e.step += offset;
      kept.events.push_back(e);
    }
  }
  kept.world_size = plan.world_size;
  r.measured_step = timeline::median(statistic);
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
    const timeline::Timeline predicted = predict(plan, fc, &p);
    const StageDurations q = durations(predicted);
    refit_layers(p, m, q, true, &fc);
    refit_layers(p, m, q, false, &fc);
    if (const double f = ratio_of(m.optimizer, q.optimizer); f > 0) fc.optimizer *= f;
    if (const plan::Time a = allreduce_time(predicted); a > plan::Time() && measured_allreduce > plan::Time())
      fc.allreduce *= measured_allreduce / a;
    // A send's call: the base's own plus what the measured ones took beyond it (never below none).
    auto refit_send = [](const std::vector<double>& measured_us, const std::vector<double>& predicted_us, double* extra) {
      if (!measured_us.empty() && !predicted_us.empty())
        *extra = std::max(0.0, *extra + trimmed_mean(measured_us) - trimmed_mean(predicted_us));
    };
    refit_send(m.send_forward, q.send_forward, &fc.send_forward_us);
    refit_send(m.send_backward, q.send_backward, &fc.send_backward_us);
  }
  r.costs = fc;
  r.fitted_step = step_time(predict(plan, fc, &p));

  if (fc.kernels != plan::FittedCosts::Kernels{})
    r.fitted.push_back("kernels: GEMMs x" + number(fc.kernels.gemm) + ", flash attention x" + number(fc.kernels.flash) +
                       ", memory-bound x" + number(fc.kernels.memory) + " (the compute model's, for every layer and layout)");
  // A kind of action the traces lack keeps the base's cost (its factor stays 1): said as kept, not fitted.
  const bool forward = !m.forward.empty(), backward = !m.backward.empty();
  for (const auto& [signature, f] : fc.layers) {
    std::string line = signature + ":";
    if (forward) line += " forward x" + number(f.forward);
    if (backward) line += std::string(forward ? "," : "") + " backward x" + number(f.backward);
    if (forward || backward)
      r.fitted.push_back(line + (fc.kernels != plan::FittedCosts::Kernels{} ? " over the kernels' factors" : ""));
  }
  if (!forward) r.missing.push_back("forward");
  if (!backward) r.missing.push_back("backward");
  for (const auto& kind : r.missing) r.kept.push_back("the layers' " + kind + " (none in the traces)");
  if (m.optimizer.empty()) {
    r.kept.push_back("the optimizer step (no OPTIM in the traces)");
    r.missing.push_back("optimizer step");
  } else {
    r.fitted.push_back("optimizer step x" + number(fc.optimizer));
  }
  if (measured_allreduce > plan::Time()) r.fitted.push_back("all-reduces x" + number(fc.allreduce));
  else r.kept.push_back("all-reduces (the actions read from the traces hold none: a profiler's trace gives its pipeline's "
                        "actions or its forward, backward and optimizer phases, not its collectives)");
  if (m.send_forward.empty() && m.send_backward.empty()) r.kept.push_back("point-to-point messages and their calls (none in the traces)");
  else {
    r.fitted.push_back("send calls: activations +" + number(fc.send_forward_us) + " us, gradients +" + number(fc.send_backward_us) +
                       " us each (the traces' SEND_F and SEND_B)");
    r.kept.push_back("point-to-point messages in flight (the base's; a measured RECV holds its wait)");
  }
  r.kept.push_back("memory, and layers of other signatures");
  return r;
}

}  // namespace parallax::fit
