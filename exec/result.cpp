// RankResult as JSON, to hand each rank's result to rank 0 through the c10d store, and every
// rank's results as one measured timeline.
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdint>
#include <map>
#include <utility>

#include "exec/runtime.hpp"
#include "timeline/metrics.hpp"

namespace parallax::exec {

void append_timed_actions(const std::vector<std::pair<int64_t, int64_t>>& times, const std::vector<schedule::Action>& timed,
                          int rank, int64_t step, std::vector<timeline::DeviceSpan>* spans) {
  for (size_t i = 0; i < times.size() && i < timed.size(); ++i) {
    timeline::DeviceSpan d;
    d.rank = rank;
    d.lane = kCudaEventLane;
    d.name = timed[i].id();
    d.start = plan::Time::ns(times[i].first);
    d.end = plan::Time::ns(times[i].second);
    d.attributed = true;
    d.action = timed[i];
    d.step = static_cast<int32_t>(step);
    spans->push_back(std::move(d));
  }
}

// Puts this rank's spans on rank 0's clock (drift corrected between the two estimates).
void align_to_rank0(const std::vector<profiler::RoundTrip>& start, const std::vector<profiler::RoundTrip>& end,
                    RankResult* result) {
  result->clock.rank = result->rank;
  if (start.empty()) return;  // rank 0 is the reference
  const profiler::ClockModel model(profiler::estimate_offset(start), profiler::estimate_offset(end));
  for (auto& e : result->events) {
    e.start = plan::Time::ns(model.to_reference(e.start.count_ns()));
    e.end = plan::Time::ns(model.to_reference(e.end.count_ns()));
  }
  for (auto& i : result->instants) i.at = plan::Time::ns(model.to_reference(i.at.count_ns()));
  for (auto& d : result->device) {
    d.start = plan::Time::ns(model.to_reference(d.start.count_ns()));
    d.end = plan::Time::ns(model.to_reference(d.end.count_ns()));
  }
  result->clock.offset_ns = model.offset_at_start();
  result->clock.drift_ppm = model.drift_ppm();
  result->clock.error_bound_ns = model.error_bound();
}

std::string result_to_json(const RankResult& r) {
  nlohmann::json steps = nlohmann::json::array(), events = nlohmann::json::array(), instants = nlohmann::json::array();
  for (const auto& i : r.instants) instants.push_back({i.at.count_ns(), i.name, i.step});
  nlohmann::json device = nlohmann::json::array();
  for (const auto& d : r.device)
    device.push_back({d.lane, d.name, d.start.count_ns(), d.end.count_ns(), d.attributed, d.attributed ? d.action.id() : "",
                      d.step, d.bytes});
  nlohmann::json probe = nlohmann::json::array();
  for (const auto& [step, us] : r.host_probe) probe.push_back({step, us});
  for (const auto& s : r.steps) steps.push_back({s.step, s.loss_sum, s.loss_count, s.step_time.count_ns(), s.loss_scale, s.skipped});
  for (const auto& e : r.events) {
    events.push_back({static_cast<int>(e.lane), static_cast<int>(e.action.kind), e.action.stage, e.action.mb,
                      e.action.bucket, e.start.count_ns(), e.end.count_ns(), e.bytes, e.step});
    if (e.action.kind == schedule::ActionKind::OVERLAP_F_B) {  // and its backward's stage and micro-batch
      events.back().push_back(e.action.b_stage);
      events.back().push_back(e.action.b_mb);
    }
    if (schedule::is_measured_inside(e.action.kind)) events.back().push_back(e.action.exchange);  // its place
  }
  return nlohmann::json{{"rank", r.rank},
                        {"correct", r.correct},
                        {"tested", r.tested},
                        {"dropped", r.dropped},
                        {"clock", {r.clock.offset_ns, r.clock.drift_ppm, r.clock.error_bound_ns}},
                        {"memory", {r.memory.peak_bytes, r.memory.baseline_bytes, r.memory.peak_rss_bytes}},
                        {"steps", steps},
                        {"instants", instants},
                        {"host_probe", probe},
                        {"device", device},
                        {"events", events}}
      .dump();
}

RankResult result_from_json(const std::string& text) {
  const auto j = nlohmann::json::parse(text);
  RankResult r;
  r.rank = j["rank"];
  r.correct = j["correct"];
  r.tested = j["tested"];
  r.dropped = j["dropped"];
  r.clock = {r.rank, j["clock"][0], j["clock"][1], j["clock"][2]};
  r.memory = {r.rank, j["memory"][0], j["memory"][1], j["memory"][2]};
  for (const auto& s : j["steps"])
    r.steps.push_back({s[0], s[1], s[2], plan::Time::ns(s[3].get<int64_t>()), s[4], s[5]});
  for (const auto& i : j["instants"]) r.instants.push_back({r.rank, plan::Time::ns(i[0]), i[1], i[2]});
  for (const auto& p : j["host_probe"]) r.host_probe.emplace_back(p[0], p[1]);
  for (const auto& d : j["device"]) {
    timeline::DeviceSpan s;
    s.rank = r.rank;
    s.lane = d[0];
    s.name = d[1];
    s.start = plan::Time::ns(d[2]);
    s.end = plan::Time::ns(d[3]);
    s.attributed = d[4] && schedule::parse_action_id(d[5].get<std::string>(), &s.action);
    s.step = d[6];
    s.bytes = d[7];
    r.device.push_back(std::move(s));
  }
  for (const auto& e : j["events"]) {
    timeline::TimelineEvent ev;
    ev.rank = r.rank;
    ev.lane = static_cast<timeline::Lane>(e[0].get<int>());
    ev.action = {static_cast<schedule::ActionKind>(e[1].get<int>()), e[2], e[3], e[4]};
    if (e.size() > 10) ev.action.b_stage = e[9], ev.action.b_mb = e[10];
    if (schedule::is_measured_inside(ev.action.kind)) ev.action.exchange = e.at(9);
    ev.start = plan::Time::ns(e[5]);
    ev.end = plan::Time::ns(e[6]);
    ev.bytes = e[7];
    ev.step = e[8];
    r.events.push_back(ev);
  }
  return r;
}

namespace {

// The rank's host probe as a counter, "host probe rank R" in us, sampled at its steps' starts.
void add_host_probe(const RankResult& r, int64_t origin, timeline::Timeline* t) {
  std::map<int32_t, plan::Time> starts;
  for (const auto& i : r.instants)
    if (i.name == "step") starts[i.step] = i.at - plan::Time::ns(origin);
  timeline::Counter c{std::string(timeline::kHostProbeCounter) + " rank " + std::to_string(r.rank), "us", {}};
  for (const auto& [step, us] : r.host_probe)
    if (auto it = starts.find(step); it != starts.end()) c.samples.emplace_back(it->second, us);
  if (!c.samples.empty()) t->counters.push_back(std::move(c));
}

}  // namespace

timeline::Timeline measured_timeline(const std::vector<RankResult>& results, const std::string& scenario, int world_size) {
  timeline::Timeline t;
  t.kind = "measured";
  t.scenario = scenario;
  t.world_size = world_size;
  int64_t origin = INT64_MAX;
  for (const auto& r : results) {
    for (const auto& e : r.events) origin = std::min(origin, e.start.count_ns());
    for (const auto& i : r.instants) origin = std::min(origin, i.at.count_ns());
  }
  if (origin == INT64_MAX) origin = 0;
  for (const auto& r : results) t.clocks.push_back(r.clock);
  for (const auto& r : results) t.memory.push_back(r.memory);
  for (const auto& r : results) {
    // On a GPU a compute action's time is its kernels' (CUDA events); the host span, from the
    // first launch to the last one queued, moves to a device lane of its own.
    std::map<std::pair<int32_t, std::string>, const timeline::DeviceSpan*> on_gpu;
    for (const auto& d : r.device)
      if (d.lane == kCudaEventLane && d.attributed) on_gpu[{d.step, d.action.id()}] = &d;
    for (auto e : r.events) {
      if (e.lane == timeline::Lane::compute && !on_gpu.empty()) {
        if (auto it = on_gpu.find({e.step, e.action.id()}); it != on_gpu.end()) {
          timeline::DeviceSpan host{r.rank, kHostLaunchLane, e.action.id(), e.start - plan::Time::ns(origin),
                                e.end - plan::Time::ns(origin), true, e.action, e.step, 0};
          t.device.push_back(std::move(host));
          e.start = it->second->start;
          e.end = it->second->end;
        }
      }
      e.start -= plan::Time::ns(origin);
      e.end -= plan::Time::ns(origin);
      t.events.push_back(e);
    }
    for (auto i : r.instants) {
      i.at -= plan::Time::ns(origin);
      t.instants.push_back(i);
    }
    add_host_probe(r, origin, &t);
    for (auto d : r.device) {
      d.start -= plan::Time::ns(origin);
      d.end -= plan::Time::ns(origin);
      t.device.push_back(d);
    }
  }
  return t;
}

}  // namespace parallax::exec
