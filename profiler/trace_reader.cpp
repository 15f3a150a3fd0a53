#include "profiler/trace_reader.hpp"

#include <zlib.h>

#include <cmath>
#include <map>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "plan/error.hpp"
#include "plan/trace_writer.hpp"

namespace parallax::profiler {
namespace {

using nlohmann::json;

plan::Location position(const std::string& name, const std::string& text, size_t byte) {
  int line = 1, column = 1;
  for (size_t i = 0; i < byte && i < text.size(); ++i) {
    if (text[i] == '\n') {
      ++line;
      column = 1;
    } else {
      ++column;
    }
  }
  return {name, line, column};
}

[[noreturn]] void bad_event(const std::string& name, size_t index, const std::string& why) {
  throw plan::InputError(plan::Location{name}, "traceEvents[" + std::to_string(index) + "]: " + why);
}

int64_t to_ns(const json& v) { return std::llround(v.get<double>() * 1000.0); }

bool number(const json& e, const char* key) { return e.contains(key) && e[key].is_number(); }

void read_parallax(const json& root, const std::string& name, LoadedTrace& out) {
  const json& header = root["parallax"];
  out.format = "parallax";
  out.kind = header.value("kind", "");
  out.world_size = header.value("world_size", 0);
  out.timeline.kind = out.kind;
  out.timeline.scenario = header.value("scenario", "");
  out.timeline.world_size = out.world_size;
  const json& events = root["traceEvents"];
  std::map<std::pair<int, int>, std::string> device_lanes;  // (pid, tid) -> lane name
  for (const json& e : events)
    if (e.is_object() && e.value("ph", "") == "M" && e.value("name", "") == "thread_name" && number(e, "pid") &&
        number(e, "tid") && e["tid"].get<int>() >= plan::kFirstDeviceTid && e.contains("args") && e["args"].is_object())
      device_lanes[{e["pid"].get<int>(), e["tid"].get<int>()}] = e["args"].value("name", "device");
  for (size_t i = 0; i < events.size(); ++i) {
    const json& e = events[i];
    if (!e.is_object()) bad_event(name, i, "not an object");
    if (e.value("ph", "") != "X") continue;
    if (!number(e, "ts") || !number(e, "dur") || !number(e, "pid") || !number(e, "tid"))
      bad_event(name, i, "an X event needs numeric ts, dur, pid and tid");
    const int rank = e["pid"], lane = e["tid"];
    if (rank < 0 || rank >= out.world_size) bad_event(name, i, "pid " + std::to_string(rank) + " is not a rank of this " + std::to_string(out.world_size) + "-rank trace");
    if (lane >= plan::kFirstDeviceTid) {
      plan::DeviceSpan d;
      d.rank = rank;
      d.lane = device_lanes.count({rank, lane}) ? device_lanes[{rank, lane}] : "device " + std::to_string(lane);
      d.name = e.value("name", "");
      d.start = plan::Time::ns(to_ns(e["ts"]));
      d.end = d.start + plan::Time::ns(to_ns(e["dur"]));
      const json& args = e.contains("args") && e["args"].is_object() ? e["args"] : json::object();
      d.step = args.value("step", 0);
      d.bytes = args.value("bytes", int64_t{0});
      if (args.contains("action") && args["action"].is_string()) d.attributed = plan::parse_action_id(args["action"], &d.action);
      out.timeline.device.push_back(d);
      out.events.push_back({rank, d.lane, d.name, "gpu", d.start.count_ns(), d.end.count_ns(), d.lane.ends_with(" nccl")});
      continue;
    }
    if (lane < 0 || lane >= plan::kLaneCount) bad_event(name, i, "tid " + std::to_string(lane) + " is not a lane (0-3)");
    if (!e.contains("args") || !e["args"].contains("action") || !e["args"]["action"].is_string())
      bad_event(name, i, "missing args.action");
    plan::TimelineEvent ev;
    if (!plan::parse_action_id(e["args"]["action"], &ev.action))
      bad_event(name, i, "args.action '" + e["args"]["action"].get<std::string>() + "' is not an action id");
    ev.rank = rank;
    ev.lane = static_cast<plan::Lane>(lane);
    ev.start = plan::Time::ns(to_ns(e["ts"]));
    ev.end = ev.start + plan::Time::ns(to_ns(e["dur"]));
    ev.bytes = e["args"].value("bytes", int64_t{0});
    ev.step = e["args"].value("step", 0);
    const std::string algorithm = e["args"].value("algorithm", "none");
    ev.algorithm = algorithm == "ring" ? plan::Algorithm::ring
                   : algorithm == "hierarchical" ? plan::Algorithm::hierarchical
                                                 : plan::Algorithm::none;
    out.timeline.events.push_back(ev);
    out.events.push_back({rank, plan::name(ev.lane), ev.action.id(), e.value("cat", ""), ev.start.count_ns(),
                          ev.end.count_ns(), ev.lane != plan::Lane::compute});
  }
}

// Kineto ids are numbers or strings ("tid": "PyTorch Profiler"): either way, as text.
std::string id_text(const json& e, const char* key) {
  if (!e.contains(key)) return "0";
  const json& v = e[key];
  return v.is_string() ? v.get<std::string>() : v.dump();
}

std::string kineto_lane(const json& e, const std::string& cat, bool* communication) {
  const json& args = e.contains("args") && e["args"].is_object() ? e["args"] : json::object();
  const std::string stream = args.contains("stream") ? id_text(args, "stream") : id_text(e, "tid");
  const std::string name = e.value("name", "");
  if (cat == "kernel") {
    if (name.rfind("nccl", 0) == 0 || name.find("ncclKernel") != std::string::npos || name.find("ncclDevKernel") != std::string::npos) {
      *communication = true;
      return "gpu stream " + stream + " nccl";
    }
    return "gpu stream " + stream;
  }
  if (cat == "gpu_memcpy" || cat == "gpu_memset") return "gpu stream " + stream + " memcpy";
  const std::string tid = id_text(e, "tid");
  if (cat == "cpu_op") return "cpu thread " + tid;
  if (cat == "cuda_runtime") return "cuda runtime (thread " + tid + ")";
  if (cat == "user_annotation" || cat == "gpu_user_annotation") return "annotations";
  return cat.empty() ? "other" : cat;
}

void read_kineto(const json& root, const std::string& name, int default_rank, LoadedTrace& out) {
  out.format = "kineto";
  int rank = default_rank;
  if (root.contains("distributedInfo") && root["distributedInfo"].is_object()) {
    rank = root["distributedInfo"].value("rank", default_rank);
    out.world_size = root["distributedInfo"].value("world_size", 0);
  }
  const json& events = root["traceEvents"];
  for (size_t i = 0; i < events.size(); ++i) {
    const json& e = events[i];
    if (!e.is_object()) bad_event(name, i, "not an object");
    if (e.value("ph", "") != "X") continue;
    if (!number(e, "ts") || !number(e, "dur")) bad_event(name, i, "an X event needs numeric ts and dur");
    const std::string cat = e.value("cat", "");
    if (cat == "Trace") continue;  // the profiler's own span over the whole capture
    TraceEvent ev;
    ev.rank = rank;
    ev.lane = kineto_lane(e, cat, &ev.communication);
    ev.name = e.value("name", "");
    ev.category = cat;
    ev.start_ns = to_ns(e["ts"]);
    ev.end_ns = ev.start_ns + to_ns(e["dur"]);
    if (cat == "user_annotation" && ev.name.rfind("ProfilerStep#", 0) == 0) {
      try {
        out.steps.push_back({rank, std::stoi(ev.name.substr(13)), ev.start_ns, ev.end_ns});
      } catch (const std::exception&) {
      }
    }
    out.events.push_back(std::move(ev));
  }
}

}  // namespace

std::string read_file_maybe_gzip(const std::string& path) {
  gzFile f = gzopen(path.c_str(), "rb");  // reads plain files as they are
  if (!f) throw plan::InputError(plan::Location{path}, "cannot open the trace (does it exist?)");
  std::string text;
  char buf[1 << 16];
  int n;
  while ((n = gzread(f, buf, sizeof buf)) > 0) text.append(buf, static_cast<size_t>(n));
  int err = 0;
  const char* msg = gzerror(f, &err);
  const bool failed = n < 0 || (err != Z_OK && err != Z_STREAM_END);
  const std::string why = failed ? msg : "";
  gzclose(f);
  if (failed) throw plan::InputError(plan::Location{path}, "cannot decompress the trace: " + why + " (truncated .gz?)");
  return text;
}

LoadedTrace parse_trace(const std::string& text, const std::string& name, int default_rank) {
  json root;
  try {
    root = json::parse(text);
  } catch (const json::parse_error& e) {
    std::string what = e.what();
    if (const auto p = what.find("parse error"); p != std::string::npos) what = what.substr(p);
    throw plan::InputError(position(name, text, e.byte > 0 ? e.byte - 1 : 0),
                           "not valid JSON (" + what + "); is the file truncated?");
  }
  if (!root.is_object() || !root.contains("traceEvents") || !root["traceEvents"].is_array())
    throw plan::InputError(plan::Location{name, 1, 1}, "not a Chrome trace: expected an object with a \"traceEvents\" list");
  LoadedTrace out;
  out.path = name;
  if (root.contains("parallax") && root["parallax"].is_object()) read_parallax(root, name, out);
  else read_kineto(root, name, default_rank, out);
  return out;
}

LoadedTrace read_trace(const std::string& path, int default_rank) {
  return parse_trace(read_file_maybe_gzip(path), path, default_rank);
}

}  // namespace parallax::profiler
