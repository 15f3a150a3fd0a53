#include "cli/sim_report.hpp"

#include <algorithm>
#include <cstdio>
#include <optional>
#include <map>
#include <sstream>

#include "cli/output.hpp"
#include "cli/plan_report.hpp"
#include "timeline/plan_summary.hpp"

namespace parallax::cli {
namespace {

using nlohmann::json;

using plan::duration_text;
std::string pct(double f) { return fmt("%.1f%%", 100.0 * f); }

std::string event_label(const timeline::Timeline& t, int32_t i) {
  return t.events[i].action.id() + "@r" + std::to_string(t.events[i].rank);
}

// The pipeline rank whose F and B took longest as simulated (its first replica's tensor group),
// with its kernels: what they took beyond them is the collectives inside them (tensor parallel,
// the context ring, a MoE block's all-to-alls) and the slowdowns beside them, which "exposed"
// does not count (communication with compute idle). It need not be the rank of the most kernels.
struct InsideCompute {
  plan::StepKernels kernels;
  double compute_ms = 0;
  double beyond_ms() const { return compute_ms - kernels.total_us() / 1e3; }
};
std::optional<InsideCompute> inside_compute(const plan::Plan& plan, const sim::SimRun& run) {
  const auto& p = plan.scenario.parallel;
  std::vector<double> compute_ms(static_cast<size_t>(p.pipeline), 0.0);
  std::map<int, int> pipeline_rank_of;  // first replica's groups
  for (int pr = 0; pr < p.pipeline; ++pr) pipeline_rank_of[plan::group_of(p, 0, pr)] = pr;
  for (const auto& e : run.timeline.events)
    if (e.lane == timeline::Lane::compute && schedule::is_compute(e.action.kind))
      if (const auto it = pipeline_rank_of.find(e.rank); it != pipeline_rank_of.end())
        compute_ms[static_cast<size_t>(it->second)] += (e.end - e.start).to_ms();
  const int busiest = static_cast<int>(std::max_element(compute_ms.begin(), compute_ms.end()) - compute_ms.begin());
  const auto kernels = plan::step_kernels(plan, busiest);
  if (!kernels) return std::nullopt;  // no compute model
  return InsideCompute{*kernels, compute_ms[static_cast<size_t>(busiest)]};
}

// A step's rates, as trainers log them (plan::model_work): tokens (0 without a sequence) and
// samples a second per rank, and the MFU (0 without a 16-bit GPU peak). nullopt for a step of no time.
struct Rates {
  plan::ModelWork work;
  double tokens = 0, samples = 0, mfu = 0;
};
std::optional<Rates> rates_of(const plan::Plan& plan, plan::Time step) {
  Rates r{plan::model_work(plan)};
  const double seconds = step.to_ms() / 1e3;
  if (seconds <= 0 || r.work.gpus == 0) return std::nullopt;
  r.tokens = r.work.tokens / seconds / r.work.gpus;
  r.samples = r.work.samples / seconds / r.work.gpus;
  r.mfu = r.work.peak_flops > 0 ? r.work.flops / seconds / r.work.gpus / r.work.peak_flops : 0;
  return r;
}

// The `throughput` line; "" for a step of no time.
std::string throughput_text(const plan::Plan& plan, plan::Time step) {
  const auto r = rates_of(plan, step);
  if (!r) return "";
  const std::string per = plan.scenario.hardware.device.kind == plan::DeviceKind::cuda ? " per GPU" : " per rank";
  std::string line = (r->tokens > 0 ? fmt("%.0f tokens/s", r->tokens) : fmt("%.1f samples/s", r->samples)) + per;
  if (r->work.peak_flops > 0)
    line += fmt("; MFU %.1f%%", 100 * r->mfu) + fmt(" of the dense 16-bit peak (%.0f TFLOP/s)", r->work.peak_flops / 1e12) +
            ", model FLOPs as torchtitan and Megatron-LM count them (" +
            (r->tokens > 0 ? "6 x parameters a token passes through + 12 x layers x query width x sequence, a token" : "3 x the forward's") +
            "; recompute not counted)";
  return "throughput " + line + "\n";
}

// inside_compute as JSON: {pipeline_rank, compute_ms, kernels_ms}; null without a compute model.
json inside_json(const plan::Plan& plan, const sim::SimRun& run) {
  const auto in = inside_compute(plan, run);
  if (!in) return json();
  return {{"pipeline_rank", in->kernels.pipeline_rank}, {"compute_ms", in->compute_ms}, {"kernels_ms", in->kernels.total_us() / 1e3}};
}

// The `throughput` line as JSON: {tokens_per_s_per_gpu (null without a sequence),
// samples_per_s_per_gpu, model_flops_per_step, mfu and peak_tflops (null without a 16-bit peak)}.
json throughput_json(const plan::Plan& plan, plan::Time step) {
  const auto r = rates_of(plan, step);
  if (!r) return json();
  const bool peak = r->work.peak_flops > 0;
  return {{"tokens_per_s_per_gpu", r->tokens > 0 ? json(r->tokens) : json()},
          {"samples_per_s_per_gpu", r->samples},
          {"model_flops_per_step", r->work.flops},
          {"mfu", peak ? json(r->mfu) : json()},
          {"peak_tflops", peak ? json(r->work.peak_flops / 1e12) : json()}};
}

json textbook_json(const plan::Plan& plan) {
  const schedule::Schedule& s = plan.schedule;
  const auto book = schedule::textbook_bubble_fraction(s.kind, s.pipeline, s.virtual_stages, s.chunks);
  return book ? json(*book) : json();
}

// The bubble, split into fill and drain and imbalance (timeline/metrics.hpp), then per pipeline
// rank (every replica plays the same part).
std::string bubble_text(const plan::Plan& plan, const sim::Metrics& m) {
  const plan::ParallelSpec& p = plan.scenario.parallel;
  const schedule::Schedule& s = plan.schedule;
  std::string text = "bubble     mean " + pct(m.bubble_fraction);
  const std::string imbalance = "imbalance " + pct(m.imbalance_fraction) + " (waiting out the extra work of the rank with the most)";
  if (p.pipeline == 1) return text + (m.bubble_fraction > 0 ? ", " + imbalance : "") + "\n";
  text += ": fill and drain " + pct(m.bubble_fraction - m.imbalance_fraction) + " (the bubble of the rank with the most work";
  if (const auto book = schedule::textbook_bubble_fraction(s.kind, s.pipeline, s.virtual_stages, s.chunks))
    text += "; the textbook's for uniform stages " + pct(*book);
  text += "), " + imbalance + "\n           per pipeline rank (its imbalance):";
  for (int pr = 0; pr < p.pipeline; ++pr) {
    double bubble = 0, rank_imbalance = 0;
    int n = 0;
    for (const auto& r : m.ranks)
      if (plan::group_placement(p, r.rank).pipeline_rank == pr) bubble += r.bubble_fraction, rank_imbalance += r.imbalance_fraction, ++n;
    text += " " + std::to_string(pr) + ": " + pct(n ? bubble / n : 0) + " (" + pct(n ? rank_imbalance / n : 0) + ")";
  }
  return text + "\n";
}

}  // namespace

json simulate_json(const plan::Plan& plan, const sim::SimRun& run, const sim::Metrics& m) {
  json ranks = json::array();
  for (const auto& r : m.ranks) {
    ranks.push_back({{"rank", r.rank},
                     {"busy_ms", r.busy.to_ms()},
                     {"bubble_ms", r.bubble.to_ms()},
                     {"bubble_fraction", r.bubble_fraction},
                     {"imbalance_fraction", r.imbalance_fraction},
                     {"exposed_comm_ms", r.exposed_comm.to_ms()},
                     {"peak_memory_mb", static_cast<double>(r.peak_memory) / (1024.0 * 1024.0)},
                     {"fits", r.fits}});
  }
  json links = json::array();
  for (const auto& l : m.links) {
    links.push_back({{"name", l.name},
                     {"bytes", l.bytes},
                     {"avg_gbps", l.avg_gb_per_s},
                     {"peak_gbps", l.peak_gb_per_s},
                     {"utilization", l.utilization},
                     {"busy_fraction", l.busy_fraction}});
  }
  json path = json::array(), path_ranks = json::array();
  for (int32_t i : m.critical_path) {
    path.push_back(run.timeline.events[i].action.id());
    path_ranks.push_back(run.timeline.events[i].rank);
  }
  return {{"scenario", plan.scenario.name},
          {"step_time_ms", m.step_time.to_ms()},
          {"throughput", throughput_json(plan, m.step_time)},
          {"kernels", timeline::kernels_json(plan)},
          {"inside", inside_json(plan, run)},
          {"bubble_fraction", m.bubble_fraction},
          {"imbalance_fraction", m.imbalance_fraction},
          {"textbook_bubble_fraction", textbook_json(plan)},
          {"ranks", ranks},
          {"links", links},
          {"critical_path", path},
          {"critical_path_ranks", path_ranks},
          {"device_memory_mb", static_cast<double>(m.device_memory) / (1024.0 * 1024.0)},
          {"fits", m.fits},
          {"published_check", timeline::published_check_json(plan.scenario.hardware)},
          {"events", run.events},
          {"wall_ms", run.wall.to_ms()}};
}

std::string simulate_text(const plan::Plan& plan, const sim::SimRun& run, const sim::Metrics& m) {
  std::ostringstream o;
  const auto& p = plan.scenario.parallel;
  o << "simulated  " << plan.scenario.name << ": one optimizer step, " << plan.world_size << " ranks ("
    << p.data << (p.context > 1 ? " x c" + std::to_string(p.context) : "") << " x " << p.pipeline << (p.tensor > 1 ? " x " + std::to_string(p.tensor) : "")
    << (p.virtual_stages > 1 ? " x v" + std::to_string(p.virtual_stages) : "") << "), " << schedule::name(p.schedule) << ", "
    << plan.schedule.microbatches() << " micro-batches; " << run.events << " events in " << fmt("%.1f ms", run.wall.to_ms()) << "\n";
  if (p.tensor > 1)
    o << "tensor     " << p.tensor << "-way" << (p.sequence_parallel ? " with sequence parallelism" : "")
      << ": ranks below are tensor groups (rank r: ranks " << p.tensor << "r.." << p.tensor << "r+" << p.tensor - 1
      << "), their collectives inside each F and B\n";
  if (p.context > 1)
    o << "context    " << p.context << "-way: each holds 1/" << p.context << " of every sequence; the ranks below include each "
      << "context rank (they run alike), the ring of keys and values inside each F and B\n";
  o << framework_hint(plan.scenario) << fitted_precision_line(plan.scenario);
  o << "step time  " << duration_text(m.step_time) << "\n" << throughput_text(plan, m.step_time)
    << published_check_text(plan.scenario);
  if (const plan::Interference& in = plan.scenario.hardware.interference; in.compute != 1 || in.communication != 1)
    o << "overlap    compute " << fmt("%.2fx", in.compute) << " slower while communicating on its device; its ports carry "
      << fmt("1/%.2f", in.communication) << " under memory-bound compute (hardware.interference)\n";

  if (const auto k = plan::step_kernels(plan)) {
    o << "kernels    " << plan::whose(plan, *k) << "'s F and B kernels over the step's " << plan.schedule.microbatches()
      << " micro-batches (device.compute's model, without the collectives and slowdowns in them): " << plan::describe(*k) << "\n";
    if (const auto in = inside_compute(plan, run); in && in->beyond_ms() > 0.005 * in->compute_ms)
      o << "inside     " << plan::whose(plan, in->kernels) << "'s F and B took longest, " << fmt("%.1f ms", in->compute_ms) << ": "
        << fmt("%.1f ms", in->beyond_ms()) << " beyond their kernels (" << fmt("%.1f ms", in->kernels.total_us() / 1e3)
        << "), the collectives inside them (tensor-parallel, context ring, MoE all-to-alls) and the slowdowns beside them\n";
  }
  o << bubble_text(plan, m);
  const sim::RankMetrics* worst_comm = &m.ranks.front();
  const sim::RankMetrics* worst_mem = &m.ranks.front();
  double comm_sum = 0;
  for (const auto& r : m.ranks) {
    comm_sum += r.exposed_comm.to_ms();
    if (r.exposed_comm > worst_comm->exposed_comm) worst_comm = &r;
    if (r.peak_memory > worst_mem->peak_memory) worst_mem = &r;
  }
  o << "exposed    communication with compute idle: mean " << fmt("%.3f ms", comm_sum / m.ranks.size()) << ", max "
    << duration_text(worst_comm->exposed_comm) << " (rank " << worst_comm->rank << ")\n";
  const auto over = std::count_if(m.ranks.begin(), m.ranks.end(), [](const sim::RankMetrics& r) { return !r.fits; });
  // A rank below is a tensor group under tensor parallelism: the GPUs over the device are t times as many.
  const std::string over_text = p.tensor > 1 ? std::to_string(over) + " of " + std::to_string(m.ranks.size()) + " tensor groups, " +
                                                   std::to_string(over * p.tensor) + " of " + std::to_string(plan.world_size) + " GPUs,"
                                             : std::to_string(over) + " of " + std::to_string(m.ranks.size()) + " ranks";
  o << "memory     peak " << format_bytes(worst_mem->peak_memory) << " of " << format_bytes(m.device_memory) << " (rank " << worst_mem->rank
    << ")" << (m.fits ? "" : "  DOES NOT FIT (" + over_text + " over the device)") << "\n";
  if (m.links.empty()) {
    o << "links      no traffic\n";
  } else {
    o << "links      " << m.links.size() << " carried traffic; busiest:\n";
    for (size_t i = 0; i < std::min<size_t>(m.links.size(), 4); ++i) {
      const auto& l = m.links[i];
      o << "           " << l.name << ": " << format_bytes(static_cast<int64_t>(l.bytes)) << ", avg "
        << fmt("%.2f GB/s", l.avg_gb_per_s) << ", peak " << fmt("%.2f GB/s", l.peak_gb_per_s) << ", utilisation "
        << pct(l.utilization) << ", busy " << pct(l.busy_fraction) << "\n";
    }
  }
  // Critical path: its length by lane, then the chain, shortened in the middle.
  std::map<std::string, double> by_kind;
  for (int32_t i : m.critical_path) {
    const auto& e = run.timeline.events[i];
    by_kind[timeline::name(e.lane)] += (e.end - e.start).to_ms();
  }
  o << "critical   " << m.critical_path.size() << " actions (";
  bool first = true;
  for (const auto& [lane, t] : by_kind) {
    o << (first ? "" : ", ") << lane << " " << fmt("%.3f ms", t);
    first = false;
  }
  o << "):\n          ";
  const size_t n = m.critical_path.size();
  for (size_t i = 0; i < n; ++i) {
    if (n > 16 && i == 8) {
      o << " ... (" << n - 16 << " more)";
      i = n - 8;
    }
    o << " " << event_label(run.timeline, m.critical_path[i]);
  }
  o << "\n";
  return o.str();
}

timeline::Timeline predicted_timeline(const plan::Plan& plan, const sim::SimRun& run) {
  timeline::Timeline t = run.timeline;
  t.plan = timeline::summarize(plan);
  for (const auto& l : run.links) {
    if (l.bytes <= 0 || l.samples.empty()) continue;
    t.counters.push_back({l.name, "GB/s", l.samples});
  }
  return t;
}

}  // namespace parallax::cli
