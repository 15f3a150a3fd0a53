#include "cli/trace_report.hpp"

#include <cxxabi.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <map>
#include <set>
#include <sstream>

#include "cli/output.hpp"
#include "fit/from_trace.hpp"
#include "plan/error.hpp"
#include "timeline/metrics.hpp"

namespace parallax::cli {
namespace {

using nlohmann::json;

// Length of the union of intervals.
int64_t union_ns(std::vector<std::pair<int64_t, int64_t>> v) {
  std::sort(v.begin(), v.end());
  int64_t total = 0, end = INT64_MIN;
  for (const auto& [s, e] : v) {
    if (s > end) {
      total += e - s;
      end = e;
    } else if (e > end) {
      total += e - end;
      end = e;
    }
  }
  return total;
}

using Intervals = std::vector<std::pair<int64_t, int64_t>>;

const char* kind_name(fit::KernelKind k) {
  switch (k) {
    case fit::KernelKind::gemm: return "gemm";
    case fit::KernelKind::flash: return "attention";
    case fit::KernelKind::memory: return "memory-bound";
    case fit::KernelKind::communication: return "communication";
    case fit::KernelKind::copy: return "copy";
  }
  return "?";
}

struct Kernel {
  int rank;
  const std::string* name;
  int64_t start_ns, end_ns;
};

// The GPU's own spans: a Kineto trace's kernels, copies and sets; a Parallax GPU run's CUPTI
// kernels (not its per-action CUDA-event spans nor the host's launch spans, which are not kernels).
std::vector<Kernel> kernels_of(const std::vector<timeline::LoadedTrace>& traces) {
  std::vector<Kernel> out;
  for (const auto& t : traces) {
    for (const auto& e : t.events)
      if (e.category == "kernel" || e.category == "gpu_memcpy" || e.category == "gpu_memset")
        out.push_back({e.rank, &e.name, e.start_ns, e.end_ns});
    for (const auto& d : t.timeline.device)
      if (d.lane != timeline::kCudaEventLane && d.lane != timeline::kHostLaunchLane)
        out.push_back({d.rank, &d.name, d.start.count_ns(), d.end.count_ns()});
  }
  return out;
}

// A CUPTI kernel name as C++ spells it (Kineto's traces are demangled already; CUPTI's records are
// not): "_ZN2at6native..." -> "void at::native::...". A name that is not mangled stays as it is.
std::string demangled(const std::string& name) {
  int status = 0;
  char* d = abi::__cxa_demangle(name.c_str(), nullptr, nullptr, &status);
  std::string out = status == 0 && d ? d : name;
  std::free(d);
  return out;
}

// One rank's kernels by kind (as what-if sorts them: fit::kernel_kind), the device's busy time, how
// much of the communication kernels' time compute kernels overlap, and the kernels that took longest.
json kernel_breakdown(const std::vector<const Kernel*>& kernels) {
  constexpr size_t kTop = 5;
  std::map<fit::KernelKind, std::pair<size_t, int64_t>> by_kind;  // kind -> (kernels, ns)
  std::map<std::string, std::pair<size_t, int64_t>> by_name;
  Intervals all, compute, communication;
  int64_t total = 0;
  for (const Kernel* k : kernels) {
    const fit::KernelKind kind = fit::kernel_kind(*k->name);
    const int64_t ns = k->end_ns - k->start_ns;
    total += ns;
    by_kind[kind].first++;
    by_kind[kind].second += ns;
    by_name[*k->name].first++;
    by_name[*k->name].second += ns;
    all.emplace_back(k->start_ns, k->end_ns);
    if (kind == fit::KernelKind::communication) communication.emplace_back(k->start_ns, k->end_ns);
    else if (kind != fit::KernelKind::copy) compute.emplace_back(k->start_ns, k->end_ns);
  }
  json kinds = json::array();
  for (const auto& [kind, v] : by_kind)
    kinds.push_back({{"kind", kind_name(kind)}, {"kernels", v.first}, {"ms", static_cast<double>(v.second) / 1e6},
                     {"share", total > 0 ? static_cast<double>(v.second) / static_cast<double>(total) : 0.0}});
  std::vector<std::pair<std::string, std::pair<size_t, int64_t>>> longest(by_name.begin(), by_name.end());
  std::sort(longest.begin(), longest.end(), [](const auto& a, const auto& b) { return a.second.second > b.second.second; });
  json top = json::array();
  for (size_t i = 0; i < std::min(kTop, longest.size()); ++i)
    top.push_back({{"name", demangled(longest[i].first)}, {"kind", kind_name(fit::kernel_kind(longest[i].first))},
                   {"kernels", longest[i].second.first}, {"ms", static_cast<double>(longest[i].second.second) / 1e6}});
  // |compute ∩ communication| = |compute| + |communication| - |compute ∪ communication|
  const int64_t comm_ns = union_ns(communication), compute_ns = union_ns(compute);
  Intervals either = compute;
  either.insert(either.end(), communication.begin(), communication.end());
  const int64_t overlapped = compute_ns + comm_ns - union_ns(std::move(either));
  return {{"kernel_ms", static_cast<double>(total) / 1e6},
          {"busy_ms", static_cast<double>(union_ns(std::move(all))) / 1e6},
          {"kinds", kinds},
          {"communication_ms", static_cast<double>(comm_ns) / 1e6},
          {"communication_overlapped_ms", static_cast<double>(overlapped) / 1e6},
          {"top", top}};
}

}  // namespace

json trace_summary_json(const std::vector<timeline::LoadedTrace>& traces) {
  // rank -> lane -> intervals; rank -> communication intervals.
  std::map<int, std::map<std::string, std::vector<std::pair<int64_t, int64_t>>>> lanes;
  std::map<int, std::vector<std::pair<int64_t, int64_t>>> comm;
  std::map<int, std::pair<int64_t, int64_t>> extent;
  json files = json::array(), steps = json::array();
  size_t events = 0;
  // A rank's lanes are idle against its own first to last event, or, in a Parallax trace (every
  // rank on one clock), against the whole job's: a pipeline's later ranks wait before their first
  // event and after their last, and their own span would hide that fill and drain.
  const bool one_clock = std::all_of(traces.begin(), traces.end(), [](const auto& t) { return t.format == "parallax"; });
  std::pair<int64_t, int64_t> job{INT64_MAX, INT64_MIN};
  for (const auto& t : traces) {
    files.push_back({{"path", t.path}, {"format", t.format}, {"kind", t.kind.empty() ? json() : json(t.kind)},
                     {"events", t.events.size()}, {"warnings", t.warnings}});
    events += t.events.size();
    for (const auto& e : t.events) {
      lanes[e.rank][e.lane].emplace_back(e.start_ns, e.end_ns);
      if (e.communication) comm[e.rank].emplace_back(e.start_ns, e.end_ns);
      auto [it, fresh] = extent.emplace(e.rank, std::make_pair(e.start_ns, e.end_ns));
      if (!fresh) it->second = {std::min(it->second.first, e.start_ns), std::max(it->second.second, e.end_ns)};
      job = {std::min(job.first, e.start_ns), std::max(job.second, e.end_ns)};
    }
    if (t.format == "parallax") {  // a step of every rank at once: rank null
      for (int s : timeline::steps_of(t.timeline))
        steps.push_back({{"rank", json()}, {"step", s}, {"step_time_ms", timeline::step_times(t.timeline, s).step_time.to_ms()}});
    }
    for (const auto& s : t.steps)
      steps.push_back({{"rank", s.rank}, {"step", s.step}, {"step_time_ms", static_cast<double>(s.end_ns - s.start_ns) / 1e6}});
  }
  // By rank (a whole job's steps first), then step: files list them in their own order.
  std::stable_sort(steps.begin(), steps.end(), [](const json& a, const json& b) {
    const int ra = a["rank"].is_null() ? -1 : a["rank"].get<int>(), rb = b["rank"].is_null() ? -1 : b["rank"].get<int>();
    return std::make_pair(ra, a["step"].get<int>()) < std::make_pair(rb, b["step"].get<int>());
  });
  const std::vector<Kernel> kernels = kernels_of(traces);
  std::map<int, std::vector<const Kernel*>> kernels_by_rank;
  for (const Kernel& k : kernels) kernels_by_rank[k.rank].push_back(&k);
  json ranks = json::array();
  for (auto& [rank, by_lane] : lanes) {
    const double span_ms = static_cast<double>(extent[rank].second - extent[rank].first) / 1e6;
    const auto& over = one_clock ? job : extent[rank];
    const double idle_over_ms = static_cast<double>(over.second - over.first) / 1e6;
    json lane_list = json::array();
    for (auto& [lane, iv] : by_lane) {
      const size_t n = iv.size();
      const double busy = static_cast<double>(union_ns(std::move(iv))) / 1e6;
      lane_list.push_back({{"lane", lane}, {"events", n}, {"busy_ms", busy}, {"idle_ms", idle_over_ms - busy}});
    }
    ranks.push_back({{"rank", rank},
                     {"span_ms", span_ms},
                     {"idle_over_ms", idle_over_ms},
                     {"lanes", lane_list},
                     {"communication_ms", static_cast<double>(union_ns(comm[rank])) / 1e6}});
    if (const auto k = kernels_by_rank.find(rank); k != kernels_by_rank.end()) ranks.back()["kernels"] = kernel_breakdown(k->second);
  }
  return {{"files", files}, {"events", events}, {"ranks", ranks}, {"steps", steps}};
}

namespace {

std::string kernels_text(const json& k, double span_ms) {
  std::ostringstream o;
  const double busy = k["busy_ms"].get<double>(), comm = k["communication_ms"].get<double>();
  o << "  kernels: " << fmt("%.3f ms", k["kernel_ms"].get<double>()) << " summed, the GPU busy " << fmt("%.3f ms", busy)
    << (span_ms > 0 ? fmt(" (%.0f%% of the span)", 100 * busy / span_ms) : "") << "\n";
  char line[256];
  for (const auto& kind : k["kinds"]) {
    std::snprintf(line, sizeof line, "    %-14s %8zu kernels %10.3f ms %5.1f%%\n", kind["kind"].get<std::string>().c_str(),
                  kind["kernels"].get<size_t>(), kind["ms"].get<double>(), 100 * kind["share"].get<double>());
    o << line;
  }
  if (comm > 0)
    o << "    communication overlapped by compute kernels: " << fmt("%.3f ms", k["communication_overlapped_ms"].get<double>())
      << " of " << fmt("%.3f ms", comm) << fmt(" (%.0f%%)\n", 100 * k["communication_overlapped_ms"].get<double>() / comm);
  o << "    longest (total):";
  for (const auto& t : k["top"]) {
    std::string name = t["name"].get<std::string>();
    if (name.size() > 70) name = name.substr(0, 67) + "...";
    std::snprintf(line, sizeof line, "\n      %10.3f ms %6zu x ", t["ms"].get<double>(), t["kernels"].get<size_t>());
    o << line << name;
  }
  o << "\n";
  return o.str();
}

}  // namespace

std::string trace_summary_text(const json& s) {
  std::ostringstream o;
  for (const auto& f : s["files"])
    o << f["path"].get<std::string>() << ": " << f["format"].get<std::string>()
      << (f["kind"].is_null() ? "" : " (" + f["kind"].get<std::string>() + ")") << ", "
      << f["events"].get<size_t>() << " events\n";
  for (const auto& f : s["files"])
    for (const auto& w : f["warnings"]) o << "warning: " << w.get<std::string>() << "\n";
  o << s["ranks"].size() << " rank(s), " << s["events"].get<size_t>() << " events\n";
  for (const auto& r : s["ranks"]) {
    const double span = r["span_ms"].get<double>(), over = r["idle_over_ms"].get<double>();
    o << "\nrank " << r["rank"].get<int>() << ": " << fmt("%.3f ms", span) << " traced"
      << (over > span + 5e-4 ? " (lanes idle against the job's " + fmt("%.3f ms", over) + ")" : "") << ", communication running "
      << fmt("%.3f ms", r["communication_ms"].get<double>()) << "\n";
    for (const auto& l : r["lanes"]) {
      char line[256];
      std::snprintf(line, sizeof line, "  %-40s %8zu events  busy %10.3f ms  idle %10.3f ms\n",
                    l["lane"].get<std::string>().c_str(), l["events"].get<size_t>(), l["busy_ms"].get<double>(),
                    l["idle_ms"].get<double>());
      o << line;
    }
    if (r.contains("kernels")) o << kernels_text(r["kernels"], r["span_ms"].get<double>());
  }
  if (!s["steps"].empty()) {
    o << "\nsteps:";
    size_t shown = 0;
    for (const auto& st : s["steps"]) {
      if (shown++ == 12) {
        o << " ...";
        break;
      }
      o << " " << st["step"].get<int>() << " " << fmt("%.3f ms", st["step_time_ms"].get<double>());
      o << (st["rank"].is_number() ? " (rank " + std::to_string(st["rank"].get<int>()) + ")" : "") << ";";
    }
    o << "\n";
  }
  return o.str();
}

timeline::LoadedTrace read_trace_of_kind(const std::string& path, const std::string& kind, const std::string& command,
                                         const std::string& role) {
  timeline::LoadedTrace t = timeline::read_trace(path);
  if (t.format != "parallax")
    throw plan::InputError(plan::Location{path}, command + " needs Parallax traces (from parallax simulate -o or parallax run -o); "
                                                 "this one is a " + t.format + " trace");
  if (t.kind != kind)
    throw plan::InputError(plan::Location{path}, role + " needs a " + kind + " trace (parallax " +
                                                     (kind == "predicted" ? "simulate" : "run") + " -o); this one is " +
                                                     (t.kind.empty() ? "of no kind" : t.kind));
  return t;
}


std::vector<std::string> check_same_job(const timeline::Timeline& predicted, const timeline::Timeline& measured,
                                        const std::string& measured_path) {
  std::vector<std::string> warnings;
  // A run that trained no step (resumed from a checkpoint already at data.steps) measured nothing
  // to set a prediction against: no step time of 0.
  if (measured.events.empty())
    throw plan::InputError(plan::Location{measured_path}, "holds no actions: the run it records trained no step, so there is nothing to compare");
  // Ranks are matched by number: jobs of different sizes have nothing to join.
  if (predicted.world_size != measured.world_size)
    throw plan::InputError(plan::Location{measured_path}, "a run of " + std::to_string(measured.world_size) +
                                                              " ranks, against a prediction of " + std::to_string(predicted.world_size) +
                                                              ": a prediction and a run of the same plan are needed");
  if (predicted.plan && measured.plan) {
    if (const std::string differ = timeline::plan_differences(*predicted.plan, *measured.plan); !differ.empty())
      throw plan::InputError(plan::Location{measured_path},
                             "a run of another plan than the prediction's (" + differ +
                                 "): a prediction is set beside a run of the same plan only; simulate the run's scenario with the "
                                 "--set values the run was given (to predict another plan from this run: parallax calibrate --from-trace)");
  }
  if (predicted.scenario != measured.scenario)
    warnings.push_back("the prediction is of scenario '" + predicted.scenario + "', the run of '" + measured.scenario + "'");
  // A prediction for other hardware than the run's (an A100 plan against a CPU run) compares
  // machines, not the model. A profile calibrated or fitted on the run's machine is named
  // otherwise but keeps its base's device: the devices tell (the names where a trace lacks them).
  const auto other_machine = [](const timeline::PlanSummary& p, const timeline::PlanSummary& m) {
    return !p.device.empty() && !m.device.empty() ? p.device != m.device : p.hardware != m.hardware;
  };
  if (predicted.plan && measured.plan && other_machine(*predicted.plan, *measured.plan))
    warnings.push_back("the prediction is for hardware '" + predicted.plan->hardware + "', the run was on '" + measured.plan->hardware +
                       "': set a prediction on the run's machine beside it (parallax calibrate writes that machine's profile)");
  // A rank with actions predicted but none measured: its trace is missing (a rank that failed
  // before writing it, or a merge that left its file out). Named, as its rows compare to nothing.
  std::vector<bool> ran(static_cast<size_t>(measured.world_size), false), planned(static_cast<size_t>(predicted.world_size), false);
  for (const auto& e : measured.events)
    if (e.rank >= 0 && e.rank < measured.world_size) ran[static_cast<size_t>(e.rank)] = true;
  for (const auto& e : predicted.events)
    if (e.rank >= 0 && e.rank < predicted.world_size) planned[static_cast<size_t>(e.rank)] = true;
  std::string missing;
  for (size_t r = 0; r < ran.size(); ++r)
    if (planned[r] && !ran[r]) missing += (missing.empty() ? "" : ", ") + std::to_string(r);
  if (!missing.empty())
    warnings.push_back(measured_path + " holds no actions of rank" + (missing.find(',') != std::string::npos ? "s " : " ") + missing +
                       ", which the prediction has: a rank that stopped before writing its trace, or a merge that left a file out");
  return warnings;
}

json compare_json(const timeline::CompareReport& r) {
  json ranks = json::array(), kinds = json::array(), worst = json::array();
  for (const auto& c : r.ranks)
    ranks.push_back({{"rank", c.rank},
                     {"bubble_ms", {{"predicted", c.predicted_bubble.to_ms()}, {"measured", c.measured_bubble.to_ms()}}},
                     {"bubble_fraction",
                      {{"predicted", c.predicted_bubble_fraction},
                       {"measured", c.measured_bubble_fraction},
                       {"difference", c.predicted_bubble_fraction - c.measured_bubble_fraction}}},
                     {"imbalance_fraction", {{"predicted", c.predicted_imbalance_fraction}, {"measured", c.measured_imbalance_fraction}}},
                     {"exposed_comm_ms", {{"predicted", c.predicted_exposed_comm.to_ms()}, {"measured", c.measured_exposed_comm.to_ms()}}},
                     {"memory_mb",
                      {{"predicted", c.predicted_memory_mb < 0 ? json() : json(c.predicted_memory_mb)},
                       {"measured", c.measured_memory_mb < 0 ? json() : json(c.measured_memory_mb)}}}});
  for (const auto& k : r.kinds)
    kinds.push_back({{"kind", k.kind}, {"actions", k.actions}, {"mean_abs_error", k.mean_abs_error},
                     {"worst_error", k.worst_error}, {"worst_action", k.worst_action},
                     {"total_ms", {{"predicted", k.predicted.to_ms()}, {"measured", k.measured.to_ms()}}}});
  for (const auto& a : r.worst)
    worst.push_back({{"rank", a.rank}, {"action", a.action}, {"difference_ms", a.difference.to_ms()},
                     {"predicted", {{"start_ms", a.predicted_start.to_ms()}, {"duration_ms", a.predicted_duration.to_ms()}}},
                     {"measured", {{"start_ms", a.measured_start.to_ms()}, {"duration_ms", a.measured_duration.to_ms()}}}});
  return {{"step_time_ms",
           {{"predicted", r.predicted_step.to_ms()},
            {"measured", r.measured_step.undisturbed.to_ms()},
            {"statistic", timeline::kStatisticName},
            {"error", r.step_error},
            {"measured_median", r.measured_step.median.to_ms()},
            {"median_error", r.median_error},
            {"measured_min", r.measured_step.min.to_ms()},
            {"measured_max", r.measured_step.max.to_ms()},
            {"disturbed_share", r.measured_step.disturbed_share},
            {"steps", r.measured_step.steps}}},
          {"measured_steps", r.measured_steps},
          {"ranks", ranks},
          {"kinds", kinds},
          {"worst", worst},
          {"missing", {{"only_predicted", r.only_predicted}, {"only_measured", r.only_measured}}},
          {"measured_exchanges", r.measured_exchanges},
          {"measured_gathers", r.measured_gathers}};
}

std::string compare_text(const timeline::CompareReport& r) {
  std::ostringstream o;
  const timeline::StepStatistic& m = r.measured_step;
  o << "step time   predicted " << fmt("%.3f ms", r.predicted_step.to_ms()) << ", measured " << fmt("%.3f ms", m.undisturbed.to_ms())
    << " (" << (r.measured_steps.size() == 1 && m.steps == 1 && r.measured_steps.front() == 0
                    ? std::string("its only step, the warm-up: nothing after it to take")  // steps_after_warmup keeps a lone step
                    : std::string(timeline::kStatisticName) + " of " + std::to_string(m.steps) + " steps after warm-up")
    << "): error "
    << fmt("%+.1f%%", 100 * r.step_error) << "\n";
  o << "            median " << fmt("%.3f ms", m.median.to_ms()) << " (error " << fmt("%+.1f%%", 100 * r.median_error)
    << "), min " << fmt("%.3f", m.min.to_ms()) << ", max " << fmt("%.3f", m.max.to_ms()) << "; "
    << fmt("%.0f%%", 100 * m.disturbed_share) << " of the steps disturbed (over "
    << fmt("%.0f%%", 100 * timeline::kDisturbedMargin) << " slower); action and rank figures are over the undisturbed "
    << r.measured_steps.size() << " of them\n";
  if (const std::string few = timeline::few_steps_warning(m.steps); !few.empty()) o << "            " << few << "\n";
  o << "\n";
  o << "rank  bubble predicted  measured  difference  of it imbalance   exposed comm predicted  measured\n";
  for (const auto& c : r.ranks) {
    char line[220];
    std::snprintf(line, sizeof line, "%-5d %7.3f ms %5.1f%%  %7.3f ms %5.1f%%  %+6.1f pts  %5.1f%% / %5.1f%%  %10.3f ms  %10.3f ms\n",
                  c.rank, c.predicted_bubble.to_ms(), 100 * c.predicted_bubble_fraction, c.measured_bubble.to_ms(),
                  100 * c.measured_bubble_fraction, 100 * (c.predicted_bubble_fraction - c.measured_bubble_fraction),
                  100 * c.predicted_imbalance_fraction, 100 * c.measured_imbalance_fraction, c.predicted_exposed_comm.to_ms(),
                  c.measured_exposed_comm.to_ms());
    o << line;
  }
  if (std::any_of(r.ranks.begin(), r.ranks.end(), [](const auto& c) { return c.measured_memory_mb >= 0; })) {
    o << "\nmemory per rank: the plan's estimate without its reserve, and what the run took (less the size before\n"
         "the model was built: the peak of live tensors, on a GPU the CUDA allocator's peak of allocated bytes)\n";
    for (const auto& c : r.ranks) {
      char line[160];
      if (c.predicted_memory_mb >= 0 && c.measured_memory_mb > 0)
        std::snprintf(line, sizeof line, "  rank %-4d predicted %9.1f MiB  measured %9.1f MiB  error %+6.1f%%\n", c.rank,
                      c.predicted_memory_mb, c.measured_memory_mb,
                      100 * (c.predicted_memory_mb - c.measured_memory_mb) / c.measured_memory_mb);
      else
        std::snprintf(line, sizeof line, "  rank %-4d predicted %9.1f MiB  measured %9.1f MiB\n", c.rank,
                      c.predicted_memory_mb, c.measured_memory_mb);
      o << line;
    }
  }
  o << "\nduration error by kind (predicted vs measured)\n";
  for (const auto& k : r.kinds) {
    char line[200];
    std::snprintf(line, sizeof line, "  %-10s %5d actions  mean |error| %6.1f%%  worst %+7.1f%% (%s)\n", k.kind.c_str(),
                  k.actions, 100 * k.mean_abs_error, 100 * k.worst_error, k.worst_action.c_str());
    o << line;
  }
  o << "\nlargest timing differences (start and end relative to the step's start)\n";
  for (const auto& a : r.worst) {
    char line[240];
    std::snprintf(line, sizeof line,
                  "  rank %d %-14s predicted %9.3f ms +%8.3f   measured %9.3f ms +%8.3f   differs %8.3f ms\n", a.rank,
                  a.action.c_str(), a.predicted_start.to_ms(), a.predicted_duration.to_ms(), a.measured_start.to_ms(),
                  a.measured_duration.to_ms(), a.difference.to_ms());
    o << line;
  }
  if (r.measured_exchanges > 0)
    o << "\n" << r.measured_exchanges << " MoE all-to-all actions measured (ALL_TO_ALL); the prediction folds them into F and B\n";
  if (r.measured_gathers > 0)
    o << "\n" << r.measured_gathers
      << " parameter all-gathers measured (ALL_GATHER); the prediction folds them into F, B and OPTIM\n";
  if (!r.only_predicted.empty() || !r.only_measured.empty()) {
    o << "\nWARNING: the plans differ: " << r.only_predicted.size() << " actions only predicted, "
      << r.only_measured.size() << " only measured";
    if (!r.only_predicted.empty()) o << " (e.g. " << r.only_predicted.front() << ")";
    if (!r.only_measured.empty()) o << " (e.g. " << r.only_measured.front() << ")";
    o << "\n";
  }
  return o.str();
}

}  // namespace parallax::cli
