#include "timeline/trace_writer.hpp"

#include <cinttypes>
#include <cstdio>
#include <algorithm>
#include <map>
#include <ostream>

#include <nlohmann/json.hpp>

namespace parallax::timeline {
namespace {

// The counters' pseudo-process, after every rank.
int counter_pid(const Timeline& t) { return t.world_size; }

void put_us(char* buf, size_t n, Time t) {
  const int64_t ns = t.count_ns();
  const int64_t abs_ns = ns < 0 ? -ns : ns;
  std::snprintf(buf, n, "%s%" PRId64 ".%03" PRId64, ns < 0 ? "-" : "", abs_ns / 1000, abs_ns % 1000);
}

}  // namespace

const char* name(Lane lane) {
  switch (lane) {
    case Lane::compute: return "compute";
    case Lane::send: return "send";
    case Lane::recv: return "recv";
    case Lane::allreduce: return "allreduce";
    case Lane::all_to_all: return "all_to_all";
    case Lane::all_gather: return "all_gather";
  }
  return "?";
}

const char* name(Algorithm a) {
  switch (a) {
    case Algorithm::none: return "none";
    case Algorithm::ring: return "ring";
    case Algorithm::hierarchical: return "hierarchical";
    case Algorithm::tree: return "tree";
    case Algorithm::nvls: return "nvls";
  }
  return "?";
}

const char* name(Protocol p) {
  switch (p) {
    case Protocol::none: return "none";
    case Protocol::ll: return "LL";
    case Protocol::ll128: return "LL128";
    case Protocol::simple: return "Simple";
  }
  return "?";
}

void write_chrome_trace(const Timeline& t, std::ostream& out) {
  nlohmann::json header = {{"kind", t.kind}, {"scenario", t.scenario}, {"world_size", t.world_size}};
  if (t.plan) header["plan"] = t.plan->document;
  if (!t.clocks.empty()) {
    auto& clocks = header["clock_alignment"] = nlohmann::json::array();
    for (const auto& c : t.clocks)
      clocks.push_back({{"rank", c.rank}, {"offset_ns", c.offset_ns}, {"drift_ppm", c.drift_ppm},
                        {"error_bound_ns", c.error_bound_ns}});
  }
  if (!t.memory.empty()) {
    auto& memory = header["memory"] = nlohmann::json::array();
    for (const auto& m : t.memory)
      memory.push_back({{"rank", m.rank}, {"peak_bytes", m.peak_bytes}, {"baseline_bytes", m.baseline_bytes},
                        {"peak_rss_bytes", m.peak_rss_bytes}});
  }
  out << "{\"parallax\": " << header.dump() << ",\n\"displayTimeUnit\": \"ns\",\n\"traceEvents\": [\n";
  char line[512];
  bool first = true;
  auto emit = [&](const char* text) {
    out << (first ? "" : ",\n") << text;
    first = false;
  };
  for (int r = 0; r < t.world_size; ++r) {
    // "rank 2 (pp 1, dp 0)": where the plan puts it, as the GUI and the report name their rows.
    const std::string role = t.plan ? rank_role(*t.plan, r, t.world_size) : "";
    std::snprintf(line, sizeof line,
                  "{\"ph\":\"M\",\"name\":\"process_name\",\"pid\":%d,\"args\":{\"name\":\"rank %d%s%s%s\"}}", r, r,
                  role.empty() ? "" : " (", role.c_str(), role.empty() ? "" : ")");
    emit(line);
    std::snprintf(line, sizeof line,
                  "{\"ph\":\"M\",\"name\":\"process_sort_index\",\"pid\":%d,\"args\":{\"sort_index\":%d}}", r, r);
    emit(line);
    for (int lane = 0; lane < kLaneCount; ++lane) {
      std::snprintf(line, sizeof line,
                    "{\"ph\":\"M\",\"name\":\"thread_name\",\"pid\":%d,\"tid\":%d,\"args\":{\"name\":\"%s\"}}", r,
                    lane, name(static_cast<Lane>(lane)));
      emit(line);
    }
  }
  // Device lanes: threads numbered from kFirstDeviceTid per rank, named after their lane.
  std::map<std::pair<int, std::string>, int> device_tid;
  for (const DeviceSpan& d : t.device) {
    const int next = kFirstDeviceTid + static_cast<int>(std::count_if(device_tid.begin(), device_tid.end(),
                                                                        [&](const auto& kv) { return kv.first.first == d.rank; }));
    if (device_tid.emplace(std::make_pair(d.rank, d.lane), next).second) {
      std::snprintf(line, sizeof line,
                    "{\"ph\":\"M\",\"name\":\"thread_name\",\"pid\":%d,\"tid\":%d,\"args\":{\"name\":%s}}", d.rank,
                    next, nlohmann::json(d.lane).dump().c_str());
      emit(line);
    }
  }
  char ts[32], dur[32];
  for (const TimelineEvent& e : t.events) {
    put_us(ts, sizeof ts, e.start);
    put_us(dur, sizeof dur, e.end - e.start);
    const std::string id = e.action.id();
    int n = std::snprintf(line, sizeof line,
                          "{\"ph\":\"X\",\"name\":\"%s\",\"cat\":\"%s\",\"pid\":%d,\"tid\":%d,\"ts\":%s,\"dur\":%s,"
                          "\"args\":{\"action\":\"%s\",\"stage\":%d,\"mb\":%d,\"bucket\":%d,\"bytes\":%" PRId64
                          ",\"step\":%d",
                          id.c_str(), name(e.action.kind), e.rank, static_cast<int>(e.lane), ts, dur, id.c_str(),
                          e.action.stage, e.action.mb, e.action.bucket, e.bytes, e.step);
    if (e.algorithm != Algorithm::none)
      n += std::snprintf(line + n, sizeof line - n, ",\"algorithm\":\"%s\"", name(e.algorithm));
    if (e.protocol != Protocol::none)
      n += std::snprintf(line + n, sizeof line - n, ",\"protocol\":\"%s\"", name(e.protocol));
    std::snprintf(line + n, sizeof line - n, "}}");
    emit(line);
  }
  for (const DeviceSpan& d : t.device) {
    put_us(ts, sizeof ts, d.start);
    put_us(dur, sizeof dur, d.end - d.start);
    nlohmann::json args = {{"step", d.step}, {"bytes", d.bytes}};
    if (d.attributed) args["action"] = d.action.id();
    out << (first ? "" : ",\n") << "{\"ph\":\"X\",\"cat\":\"gpu\",\"name\":" << nlohmann::json(d.name).dump()
        << ",\"pid\":" << d.rank << ",\"tid\":" << device_tid.at({d.rank, d.lane}) << ",\"ts\":" << ts
        << ",\"dur\":" << dur << ",\"args\":" << args.dump() << "}";
    first = false;
  }
  for (const Instant& i : t.instants) {
    put_us(ts, sizeof ts, i.at);
    const std::string quoted = nlohmann::json(i.name).dump();
    std::snprintf(line, sizeof line, "{\"ph\":\"i\",\"s\":\"p\",\"name\":%s,\"pid\":%d,\"tid\":0,\"ts\":%s,\"args\":{\"step\":%d}}",
                  quoted.c_str(), i.rank, ts, i.step);
    emit(line);
  }
  if (!t.counters.empty()) {
    std::snprintf(line, sizeof line,
                  "{\"ph\":\"M\",\"name\":\"process_name\",\"pid\":%d,\"args\":{\"name\":\"counters\"}}", counter_pid(t));
    emit(line);
  }
  for (const Counter& c : t.counters) {
    const std::string quoted = nlohmann::json(c.name + " (" + c.unit + ")").dump();
    for (const auto& [time, value] : c.samples) {
      put_us(ts, sizeof ts, time);
      std::snprintf(line, sizeof line, "{\"ph\":\"C\",\"name\":%s,\"pid\":%d,\"ts\":%s,\"args\":{\"value\":%.6g}}",
                    quoted.c_str(), counter_pid(t), ts, value);
      emit(line);
    }
  }
  out << "\n]}\n";
}

}  // namespace parallax::timeline
