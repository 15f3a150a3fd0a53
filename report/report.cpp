#include "report/report.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <array>
#include <map>

#include "report/assets.hpp"
#include "timeline/compare.hpp"
#include "timeline/metrics.hpp"

namespace parallax::report {
namespace {

using nlohmann::json;

constexpr double kMiB = 1024.0 * 1024.0;
constexpr size_t kLinksShown = 24;  // the busiest; a 1,024-rank plan has thousands of links

/// The step of a timeline the report shows: the first (simulations hold one).
int first_step(const timeline::Timeline& t) {
  const auto steps = timeline::steps_of(t);
  return steps.empty() ? 0 : steps.front();
}

/// The events of one step as columns of integers, times in ns from the step's start. `index`
/// receives, for each event of the timeline, its column position (-1 when not in the step).
json timeline_columns(const timeline::Timeline& t, int step, std::vector<int32_t>* index = nullptr) {
  const int64_t origin = timeline::step_times(t, step).start.count_ns();
  json rank = json::array(), lane = json::array(), kind = json::array(), stage = json::array(), mb = json::array(),
       bucket = json::array(), start = json::array(), end = json::array();
  json overlap = json::object();  // OVERLAP_F_B events (few): index -> [its backward's stage, micro-batch]
  if (index) index->assign(t.events.size(), -1);
  for (size_t i = 0; i < t.events.size(); ++i) {
    const auto& e = t.events[i];
    if (e.step != step) continue;
    if (index) (*index)[i] = static_cast<int32_t>(rank.size());
    rank.push_back(e.rank);
    lane.push_back(static_cast<int>(e.lane));
    kind.push_back(static_cast<int>(e.action.kind));
    stage.push_back(e.action.stage);
    mb.push_back(e.action.mb);
    // The bucket column carries an ALL_TO_ALL's or ALL_GATHER's place (the page's actionId reads it so).
    bucket.push_back(schedule::is_measured_inside(e.action.kind) ? e.action.exchange : e.action.bucket);
    if (e.action.kind == schedule::ActionKind::OVERLAP_F_B) overlap[std::to_string(rank.size() - 1)] = {e.action.b_stage, e.action.b_mb};
    start.push_back(e.start.count_ns() - origin);
    end.push_back(e.end.count_ns() - origin);
  }
  return {{"step", step}, {"rank", rank},     {"lane", lane}, {"kind", kind}, {"stage", stage},
          {"mb", mb},     {"bucket", bucket}, {"start", start}, {"end", end}, {"overlap", overlap}};
}

/// Per rank: bubble and exposed communication, predicted and (when measured) measured.
json ranks_json(const timeline::StepTimes& predicted, const timeline::CompareReport* cmp) {
  json out = json::array();
  if (cmp) {
    for (const auto& r : cmp->ranks)
      out.push_back({{"rank", r.rank},
                     {"bubble_ms", {r.predicted_bubble.to_ms(), r.measured_bubble.to_ms()}},
                     {"bubble_fraction", {r.predicted_bubble_fraction, r.measured_bubble_fraction}},
                     {"imbalance_fraction", {r.predicted_imbalance_fraction, r.measured_imbalance_fraction}},
                     {"exposed_comm_ms", {r.predicted_exposed_comm.to_ms(), r.measured_exposed_comm.to_ms()}}});
    return out;
  }
  for (const auto& r : predicted.ranks)
    out.push_back({{"rank", r.rank},
                   {"bubble_ms", {r.bubble.to_ms()}},
                   {"bubble_fraction", {r.bubble_fraction}},
                   {"imbalance_fraction", {r.imbalance_fraction}},
                   {"exposed_comm_ms", {r.exposed_comm.to_ms()}}});
  return out;
}

/// Bubble per pipeline rank (the stages it holds), averaged over the replicas that play it.
json stages_json(const json& ranks, const timeline::PlanSummary& plan) {
  std::map<int, int> pipeline_rank_of;
  std::map<int, std::vector<int>> stages_of;
  // A timeline's rank r is tensor group r (its first rank, r x tensor, in the plan's numbering).
  for (const timeline::RankSummary& r : plan.ranks) {
    if (r.tensor_rank != 0) continue;
    pipeline_rank_of[r.rank / plan.tensor] = r.pipeline_rank;
    stages_of[r.pipeline_rank] = r.stages;
  }
  // pipeline rank -> [bubble predicted, measured, imbalance predicted, measured, count]
  std::map<int, std::array<double, 5>> sums;
  for (const auto& r : ranks) {
    const int rank = r["rank"].get<int>();
    const auto it = pipeline_rank_of.find(rank);
    auto& s = sums[it == pipeline_rank_of.end() ? rank : it->second];
    const auto& f = r["bubble_fraction"];
    const auto& i = r["imbalance_fraction"];
    s[0] += f[0].get<double>();
    s[1] += f.size() > 1 ? f[1].get<double>() : 0.0;
    s[2] += i[0].get<double>();
    s[3] += i.size() > 1 ? i[1].get<double>() : 0.0;
    s[4] += 1;
  }
  const bool measured = !ranks.empty() && ranks[0]["bubble_fraction"].size() > 1;
  json out = json::array();
  for (const auto& [pr, s] : sums) {
    json bubble = {s[0] / s[4]}, imbalance = {s[2] / s[4]};
    if (measured) bubble.push_back(s[1] / s[4]), imbalance.push_back(s[3] / s[4]);
    out.push_back({{"pipeline_rank", pr}, {"stages", stages_of.count(pr) ? json(stages_of[pr]) : json::array({pr})},
                   {"bubble_fraction", bubble}, {"imbalance_fraction", imbalance}});
  }
  return out;
}

/// Memory per rank against the device: the plan's estimate, and with a measured run that recorded
/// it, what each rank's training took, as compare reports it (null for ranks without a figure).
json memory_json(const timeline::PlanSummary& plan, const timeline::CompareReport* cmp) {
  json out = json::array();
  std::map<int, double> measured_mb;
  if (cmp)
    for (const auto& r : cmp->ranks)
      if (r.measured_memory_mb >= 0) measured_mb[r.rank] = r.measured_memory_mb;
  const auto mb = [](int64_t bytes) { return static_cast<double>(bytes) / kMiB; };
  for (const timeline::MemorySummary& m : plan.memory) {
    const auto it = measured_mb.find(m.rank);
    out.push_back({{"rank", m.rank},
                   {"measured_mb", it == measured_mb.end() ? json() : json(it->second)},
                   {"params_mb", mb(m.params)},
                   {"gradients_mb", mb(m.gradients)},
                   {"optimizer_mb", mb(m.optimizer)},
                   {"activations_mb", mb(m.activations + m.buckets)},
                   {"allocated_mb", mb(m.allocated())},  // the tensors, as compare sets them against a run's
                   {"total_mb", mb(m.total)},            // with the reserve the fit check adds
                   {"device_mb", mb(m.device_bytes)}});
  }
  return out;
}

/// Link bandwidth over the step from the predicted link counters (GB/s held until the next
/// sample): the average over the step and the peak, busiest links first.
json links_json(const timeline::Timeline& t, const timeline::StepTimes& step) {
  const int64_t from = step.start.count_ns(), to = from + step.step_time.count_ns();
  struct Link {
    std::string name;
    double avg = 0, peak = 0;
  };
  std::vector<Link> links;
  for (const auto& c : t.counters) {
    if (c.unit != "GB/s" || to <= from) continue;
    Link l{c.name};
    double integral = 0;  // GB/s x ns
    for (size_t i = 0; i < c.samples.size(); ++i) {
      const int64_t a = std::max(from, c.samples[i].first.count_ns());
      const int64_t b = std::min(to, i + 1 < c.samples.size() ? c.samples[i + 1].first.count_ns() : to);
      if (b <= a) continue;
      integral += c.samples[i].second * static_cast<double>(b - a);
      l.peak = std::max(l.peak, c.samples[i].second);
    }
    l.avg = integral / static_cast<double>(to - from);
    if (l.peak > 0) links.push_back(l);
  }
  std::stable_sort(links.begin(), links.end(), [](const Link& a, const Link& b) { return a.avg > b.avg; });
  json shown = json::array();
  for (size_t i = 0; i < std::min(links.size(), kLinksShown); ++i)
    shown.push_back({{"name", links[i].name}, {"avg_gbps", links[i].avg}, {"peak_gbps", links[i].peak}});
  return {{"count", links.size()}, {"busiest", shown}};
}

/// The critical path as the page lists it, with each action's position in the embedded columns.
json critical_json(const ReportInput& in, const timeline::StepTimes& step, const std::vector<int32_t>& column_of) {
  json actions = json::array();
  for (int32_t i : in.critical_path) {
    if (i < 0 || static_cast<size_t>(i) >= in.predicted.events.size()) continue;
    const auto& e = in.predicted.events[i];
    actions.push_back({{"rank", e.rank},
                       {"action", e.action.id()},
                       {"lane", timeline::name(e.lane)},
                       {"start_ms", (e.start - step.start).to_ms()},
                       {"duration_ms", (e.end - e.start).to_ms()},
                       {"event", column_of[i]}});
  }
  return {{"known", !in.critical_path.empty()}, {"actions", actions}};
}

json kinds_json(const timeline::CompareReport& r) {
  json out = json::array();
  for (const auto& k : r.kinds)
    out.push_back({{"kind", k.kind}, {"actions", k.actions}, {"mean_abs_error", k.mean_abs_error},
                   {"worst_error", k.worst_error}, {"worst_action", k.worst_action},
                   {"total_ms", {k.predicted.to_ms(), k.measured.to_ms()}}});
  return out;
}

json worst_json(const timeline::CompareReport& r) {
  json out = json::array();
  for (const auto& a : r.worst)
    out.push_back({{"rank", a.rank}, {"action", a.action}, {"difference_ms", a.difference.to_ms()},
                   {"predicted", {a.predicted_start.to_ms(), a.predicted_duration.to_ms()}},
                   {"measured", {a.measured_start.to_ms(), a.measured_duration.to_ms()}}});
  return out;
}

std::string html_escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '&': out += "&amp;"; break;
      case '"': out += "&quot;"; break;
      default: out += c;
    }
  }
  return out;
}

/// JSON that is safe inside <script>: every '<' is written \u003c (the same string to a JSON
/// parser), so that no "</script>" or "<!--" in a scenario's name or a path can end or hide the
/// element. '<' appears in JSON only inside strings.
std::string script_safe_json(const json& data) {
  const std::string text = data.dump(-1, ' ', false, json::error_handler_t::replace);
  std::string out;
  out.reserve(text.size());
  for (char c : text) {
    if (c == '<') out += "\\u003c";
    else out += c;
  }
  return out;
}

void replace_once(std::string& text, const std::string& marker, const std::string& value) {
  const size_t at = text.find(marker);
  if (at != std::string::npos) text.replace(at, marker.size(), value);
}

/// The action and lane vocabulary, from the C++ enums, so that the page keeps no copy of it: each
/// kind's name in the enum's order (what the timeline columns' kind numbers index), each lane's,
/// and one action of each kind with its id as Action::id() prints it, which the page checks its
/// own ids against.
json vocabulary_json() {
  json kinds = json::array(), lanes = json::array(), examples = json::array();
  for (int k = 0; k < schedule::kActionKinds; ++k) {
    const auto kind = static_cast<schedule::ActionKind>(k);
    kinds.push_back(schedule::name(kind));
    schedule::Action a{kind, 2, 5, kind == schedule::ActionKind::ALLREDUCE ? 3 : -1};
    if (schedule::is_measured_inside(kind)) a.exchange = 3;
    json overlap = nullptr;
    if (kind == schedule::ActionKind::OVERLAP_F_B) {
      a.b_stage = 3, a.b_mb = 1;
      overlap = {a.b_stage, a.b_mb};
    }
    examples.push_back({{"kind", k}, {"stage", a.stage}, {"mb", a.mb}, {"bucket", schedule::is_measured_inside(kind) ? a.exchange : a.bucket}, {"overlap", overlap}, {"id", a.id()}});
  }
  for (int l = 0; l < timeline::kLaneCount; ++l) lanes.push_back(timeline::name(static_cast<timeline::Lane>(l)));
  return {{"kinds", kinds}, {"lanes", lanes}, {"examples", examples}};
}

}  // namespace

std::string tune_result_problem(const json& tune) {
  if (!tune.is_object()) return "not a JSON object";
  auto row_problem = [](const json& row, const std::string& where) -> std::string {
    if (!row.is_object()) return where + " is not an object";
    if (!row.contains("overrides") || !row["overrides"].is_object()) return where + " has no \"overrides\" object";
    for (const char* key : {"predicted_step_ms", "peak_memory_mb"})
      if (!row.contains(key) || !row[key].is_number()) return where + " has no number \"" + key + "\"";
    return "";
  };
  if (!tune.contains("ranked") || !tune["ranked"].is_array() || tune["ranked"].empty()) return "no \"ranked\" list of configurations";
  for (const char* key : {"best", "baseline"})
    if (std::string p = row_problem(tune.value(key, json()), std::string("\"") + key + "\""); !p.empty()) return p;
  for (const char* list : {"ranked", "pareto"}) {
    const json rows = tune.value(list, json::array());
    if (!rows.is_array()) return std::string("\"") + list + "\" is not a list";
    for (size_t i = 0; i < rows.size(); ++i)
      if (std::string p = row_problem(rows[i], std::string(list) + "[" + std::to_string(i) + "]"); !p.empty()) return p;
  }
  return "";
}

bool is_tune_result(const json& tune) { return tune_result_problem(tune).empty(); }

json report_data(const ReportInput& in) {
  const int pstep = first_step(in.predicted);
  const timeline::StepTimes predicted = timeline::step_times(in.predicted, pstep);
  static const timeline::PlanSummary kNoPlan;  // a trace without a plan: its fields' defaults
  const timeline::PlanSummary& plan = in.predicted.plan ? *in.predicted.plan : kNoPlan;
  std::vector<int32_t> column_of;
  json data;
  data["title"] = in.title.empty() ? in.predicted.scenario : in.title;
  data["scenario"] = in.predicted.scenario;
  data["world_size"] = in.predicted.world_size;
  // Where each timeline rank sits ("pp 1, dp 0"), the timeline's row names; empty without a plan.
  data["rank_roles"] = json::array();
  if (in.predicted.plan)
    for (int r = 0; r < in.predicted.world_size; ++r)
      data["rank_roles"].push_back(timeline::rank_role(plan, r, in.predicted.world_size));
  data["vocabulary"] = vocabulary_json();
  data["plan"] = {{"schedule", plan.schedule}, {"chunks", in.predicted.plan ? plan.chunks : 0}, {"grid", json::object()},
                  {"hardware", plan.hardware.empty() ? json() : json(plan.hardware)}};
  if (in.predicted.plan)
    data["plan"]["grid"] = {{"data", plan.data}, {"context", plan.context}, {"pipeline", plan.pipeline}, {"tensor", plan.tensor},
                            {"virtual", plan.virtual_stages}};
  data["plan"]["moe"] = plan.document.value("moe", json());  // a MoE plan's experts, all-to-alls and imbalance
  data["plan"]["published_check"] = plan.document.value("published_check", json());  // the profile's errors on published runs
  data["plan"]["kernels"] = plan.document.value("kernels", json());  // a step's compute kernels by kind (plan::step_kernels)
  data["timeline"]["predicted"] = timeline_columns(in.predicted, pstep, &column_of);
  data["critical_path"] = critical_json(in, predicted, column_of);
  data["links"] = links_json(in.predicted, predicted);
  data["tune"] = is_tune_result(in.tune) ? in.tune : json();

  json summary = {{"predicted_step_ms", predicted.step_time.to_ms()}, {"measured", false}};
  if (in.measured) {
    const timeline::CompareReport cmp = timeline::compare(in.predicted, *in.measured);
    const timeline::StepStatistic& m = cmp.measured_step;
    const int mstep = timeline::representative_step(*in.measured);
    summary = {{"predicted_step_ms", cmp.predicted_step.to_ms()},
               {"measured", true},
               {"statistic", timeline::kStatisticName},
               {"measured_step_ms", {{"undisturbed", m.undisturbed.to_ms()},
                                     {"median", m.median.to_ms()},
                                     {"min", m.min.to_ms()},
                                     {"max", m.max.to_ms()},
                                     {"disturbed_share", m.disturbed_share},
                                     {"steps", m.steps}}},
               {"step_error", cmp.step_error},
               {"median_error", cmp.median_error},
               {"measured_steps", cmp.measured_steps},
               {"shown_step", mstep},
               {"only_predicted", cmp.only_predicted.size()},
               {"only_measured", cmp.only_measured.size()}};
    json warnings = in.warnings;
    if (const std::string few = timeline::few_steps_warning(m.steps); !few.empty()) warnings.push_back(few);
    summary["warnings"] = warnings;
    data["timeline"]["measured"] = timeline_columns(*in.measured, mstep);
    data["ranks"] = ranks_json(predicted, &cmp);
    data["kinds"] = kinds_json(cmp);
    data["worst"] = worst_json(cmp);
    data["memory"] = memory_json(plan, &cmp);
  } else {
    data["memory"] = memory_json(plan, nullptr);
    data["ranks"] = ranks_json(predicted, nullptr);
    data["kinds"] = json::array();
    data["worst"] = json::array();
  }
  data["summary"] = summary;
  data["stages"] = stages_json(data["ranks"], plan);
  return data;
}

std::string render_html(const ReportInput& input, size_t max_chars) {
  const json data = report_data(input);
  std::string page = kPageHtml;
  // Last marker first: each replacement finds the first occurrence, and what is put in (a title or
  // data naming a marker, say a scenario called "PARALLAX_DATA") must not be found in its place.
  replace_once(page, "/*PARALLAX_JS*/", kPageJs);
  const std::string embedded = script_safe_json(data);
  // The page parses its data from one string; Chromium's V8 holds at most 2^29 - 24 characters in
  // one (v8::String::kMaxLength on 64-bit), and a page beyond it opened blank (an 898 MB report of
  // 8,192 GPUs). Said now, with nothing written.
  if (embedded.size() > max_chars)
    throw std::runtime_error("the page's data would be " + std::to_string(embedded.size() / 1000000) +
                             " MB, more than a browser holds in one JavaScript string (Chromium: 535 MB), so the page would open "
                             "blank; nothing written. The simulator plays data replicas alike: report the plan with fewer "
                             "(parallel.data), or open `parallax simulate -o` in Perfetto");
  replace_once(page, "PARALLAX_DATA", embedded);
  replace_once(page, "/*PARALLAX_CSS*/", kPageCss);
  replace_once(page, "PARALLAX_TITLE", html_escape(data["title"].get<std::string>()));
  return page;
}

}  // namespace parallax::report
