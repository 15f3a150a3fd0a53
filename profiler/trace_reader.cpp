#include "profiler/trace_reader.hpp"

#include <zlib.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>

#include "plan/error.hpp"
#include "plan/trace_writer.hpp"

namespace parallax::profiler {
namespace {

using nlohmann::json;
using ThreadKey = std::pair<std::string, std::string>;  // (pid, tid) as text

// Timestamps and durations are microseconds. Beyond 4e15 µs (127 years; Unix-epoch timestamps
// fit) a start plus a duration in nanoseconds could overflow int64.
constexpr double kMaxMicros = 4e15;
constexpr size_t kMaxWarnings = 8;
constexpr const char* kSpace = " \t\r\n";

// ---- Positions. nlohmann::json keeps none, so an event's place is found again in the text
// (only when something is reported, so a plain scan is fast enough).

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

// First byte of the JSON value, past whitespace and a UTF-8 byte order mark.
size_t value_start(const std::string& text) {
  const size_t from = text.rfind("\xEF\xBB\xBF", 0) == 0 ? 3 : 0;
  return text.find_first_not_of(kSpace, from);
}

// The closing quote of the string whose opening quote is at `open` (text.size() if none).
size_t string_end(const std::string& text, size_t open) {
  for (size_t i = open + 1; i < text.size(); ++i) {
    if (text[i] == '\\') ++i;
    else if (text[i] == '"') return i;
  }
  return text.size();
}

// Where the value of the root object's (last) `key` starts, if anywhere.
size_t root_value_at(const std::string& text, const std::string& key) {
  const std::string quoted = "\"" + key + "\"";
  size_t found = std::string::npos;
  int depth = 0;
  bool key_next = false;
  for (size_t i = value_start(text); i < text.size(); ++i) {
    const char c = text[i];
    if (c == '"') {
      const size_t end = string_end(text, i);
      if (depth == 1 && key_next && text.compare(i, end + 1 - i, quoted) == 0)
        found = text.find_first_not_of(" \t\r\n:", end + 1);
      key_next = false;
      i = end;
    } else if (c == '{' || c == '[') {
      key_next = ++depth == 1 && c == '{';
    } else if (c == '}' || c == ']') {
      --depth;
    } else if (c == ',') {
      key_next = depth == 1;
    }
  }
  return found;
}

// The '[' of the event list: the root array, or the root object's "traceEvents" value.
size_t event_list_at(const std::string& text) {
  const size_t root = value_start(text);
  if (root == std::string::npos || text[root] == '[') return root;
  const size_t list = root_value_at(text, "traceEvents");
  return list != std::string::npos && text[list] == '[' ? list : std::string::npos;
}

// Byte offset of element `index` of the list opening at `list`.
size_t element_at(const std::string& text, size_t list, size_t index) {
  size_t count = 0;
  int depth = 0;
  bool next = true;  // the next non-space byte starts an element
  for (size_t i = list + 1; i < text.size(); ++i) {
    const char c = text[i];
    if (next && !std::strchr(kSpace, c)) {
      if (count++ == index) return i;
      next = false;
    }
    if (c == '"') i = string_end(text, i);
    else if (c == '{' || c == '[') ++depth;
    else if ((c == '}' || c == ']') && depth-- == 0) break;
    else if (c == ',' && depth == 0) next = true;
  }
  return std::string::npos;
}

/// The text being read, for messages that say where: every error and warning names the event's
/// file:line:column.
class Source {
 public:
  Source(const std::string& text, const std::string& name) : text_(text), name_(name) {}

  plan::Location event_location(size_t index) const {
    const size_t list = event_list_at(text_);
    const size_t at = list == std::string::npos ? list : element_at(text_, list, index);
    return at == std::string::npos ? plan::Location{name_} : position(name_, text_, at);
  }
  /// The place of the root object's `key` value (the header of the trace).
  plan::Location key_location(const std::string& key) const {
    const size_t at = root_value_at(text_, key);
    return at == std::string::npos ? plan::Location{name_} : position(name_, text_, at);
  }
  [[noreturn]] void fail(size_t index, const std::string& why) const {
    throw plan::InputError(event_location(index), "event " + std::to_string(index) + ": " + why);
  }
  void warn(LoadedTrace& out, size_t index, const std::string& why) {
    if (warned_++ < kMaxWarnings) out.warnings.push_back(event_location(index).str() + ": " + why);
  }
  void finish(LoadedTrace& out) const {
    if (warned_ > kMaxWarnings)
      out.warnings.push_back("... and " + std::to_string(warned_ - kMaxWarnings) + " more event(s) left out");
  }

 private:
  const std::string& text_;
  const std::string& name_;
  size_t warned_ = 0;
};

// ---- Fields. Every accessor checks the type first: nlohmann throws its own exceptions (or,
// for numbers cast out of range, does undefined things) on values of the wrong kind.

const json* field(const json& e, const char* key) {
  const auto it = e.find(key);
  return it == e.end() ? nullptr : &*it;
}

std::string text_of(const json& e, const char* key) {
  const json* v = field(e, key);
  return v && v->is_string() ? v->get<std::string>() : "";
}

// Ids are numbers or strings ("tid": "PyTorch Profiler", "pid": "CPU functions"): either way,
// as text. Only numbers are dumped: dump() of a nested value recurses as deep as it goes.
std::string id_of(const json& e, const char* key) {
  const json* v = field(e, key);
  if (!v) return "0";
  if (v->is_string()) return v->get<std::string>();
  return v->is_number() ? v->dump() : "?";
}

const json& args_of(const json& e) {
  static const json empty = json::object();
  const json* v = field(e, "args");
  return v && v->is_object() ? *v : empty;
}

// An integer value (a whole float counts), or nothing.
std::optional<int64_t> integer(const json& v) {
  if (v.is_number_unsigned()) {
    const uint64_t u = v.get<uint64_t>();
    return u <= static_cast<uint64_t>(INT64_MAX) ? std::optional<int64_t>(static_cast<int64_t>(u)) : std::nullopt;
  }
  if (v.is_number_integer()) return v.get<int64_t>();
  if (v.is_number_float()) {
    const double d = v.get<double>();
    if (std::isfinite(d) && std::abs(d) < 9e15 && d == std::floor(d)) return static_cast<int64_t>(d);
  }
  return std::nullopt;
}

// An integer field of `e` (pid, tid) into *out; false when absent or not an integer.
bool int_key(const json& e, const char* key, int64_t* out) {
  const json* v = field(e, key);
  if (!v) return false;
  const auto n = integer(*v);
  if (n) *out = n.value();
  return n.has_value();
}

// An integer field within [lo, hi], `fallback` when absent; anything else is reported by `bad`.
template <typename Bad>
int64_t int_field(const json& obj, const char* key, int64_t lo, int64_t hi, int64_t fallback, Bad bad) {
  const json* v = field(obj, key);
  if (!v) return fallback;
  const auto n = integer(*v);
  if (!n || *n < lo || *n > hi)
    bad(std::string(key) + " must be an integer from " + std::to_string(lo) + " to " + std::to_string(hi));
  return *n;
}

// A time field (microseconds) in nanoseconds; nothing when absent or not a number.
std::optional<int64_t> micros(const json& e, const char* key, const Source& src, size_t index) {
  const json* v = field(e, key);
  if (!v || !v->is_number()) return std::nullopt;
  const double us = v->get<double>();
  if (!std::isfinite(us) || std::abs(us) > kMaxMicros)
    src.fail(index, std::string(key) + " is out of range (microseconds, at most 4e15 either side of zero)");
  return std::llround(us * 1000.0);
}

// ---- Parallax's own traces.

struct Span {
  int64_t start_ns, end_ns;
};

// ts and dur of an X event, checked.
Span complete_span(const json& e, const Source& src, size_t i, const char* needs) {
  const auto ts = micros(e, "ts", src, i), dur = micros(e, "dur", src, i);
  if (!ts || !dur) src.fail(i, needs);
  if (*dur < 0) src.fail(i, "dur is negative");
  return {*ts, *ts + *dur};
}

std::map<std::pair<int, int>, std::string> device_lane_names(const json& events) {
  std::map<std::pair<int, int>, std::string> names;  // (pid, tid) -> lane name
  for (const json& e : events) {
    if (!e.is_object() || text_of(e, "ph") != "M" || text_of(e, "name") != "thread_name") continue;
    int64_t p = 0, t = 0;
    if (int_key(e, "pid", &p) && int_key(e, "tid", &t) && t >= plan::kFirstDeviceTid && p <= INT32_MAX && t <= INT32_MAX)
      names[{static_cast<int>(p), static_cast<int>(t)}] = text_of(args_of(e), "name");
  }
  return names;
}

void read_device_span(const json& e, int rank, int lane, const std::string& lane_name, Span s, const Source& src,
                      size_t i, LoadedTrace& out) {
  const auto bad = [&](const std::string& why) { src.fail(i, "args." + why); };
  const json& args = args_of(e);
  plan::DeviceSpan d;
  d.rank = rank;
  d.lane = lane_name.empty() ? "device " + std::to_string(lane) : lane_name;
  d.name = text_of(e, "name");
  d.start = plan::Time::ns(s.start_ns);
  d.end = plan::Time::ns(s.end_ns);
  d.step = static_cast<int32_t>(int_field(args, "step", INT32_MIN, INT32_MAX, 0, bad));
  d.bytes = int_field(args, "bytes", 0, INT64_MAX, 0, bad);
  const std::string action = text_of(args, "action");
  if (!action.empty()) d.attributed = plan::parse_action_id(action, &d.action);
  out.timeline.device.push_back(d);
  out.events.push_back({rank, d.lane, d.name, "gpu", s.start_ns, s.end_ns, d.lane.ends_with(" nccl")});
}

void read_action_span(const json& e, int rank, int lane, Span s, const Source& src, size_t i, LoadedTrace& out) {
  const auto bad = [&](const std::string& why) { src.fail(i, "args." + why); };
  const json& args = args_of(e);
  const std::string action = text_of(args, "action");
  if (action.empty()) src.fail(i, "missing args.action");
  plan::TimelineEvent ev;
  if (!plan::parse_action_id(action, &ev.action)) src.fail(i, "args.action '" + action + "' is not an action id");
  ev.rank = rank;
  ev.lane = static_cast<plan::Lane>(lane);
  ev.start = plan::Time::ns(s.start_ns);
  ev.end = plan::Time::ns(s.end_ns);
  ev.bytes = int_field(args, "bytes", 0, INT64_MAX, 0, bad);
  ev.step = static_cast<int32_t>(int_field(args, "step", INT32_MIN, INT32_MAX, 0, bad));
  const std::string algorithm = text_of(args, "algorithm");
  ev.algorithm = plan::Algorithm::none;
  for (auto a : {plan::Algorithm::ring, plan::Algorithm::hierarchical, plan::Algorithm::tree, plan::Algorithm::nvls})
    if (algorithm == plan::name(a)) ev.algorithm = a;
  const std::string protocol = text_of(args, "protocol");
  ev.protocol = plan::Protocol::none;
  for (auto p : {plan::Protocol::ll, plan::Protocol::ll128, plan::Protocol::simple})
    if (protocol == plan::name(p)) ev.protocol = p;
  out.timeline.events.push_back(ev);
  out.events.push_back({rank, plan::name(ev.lane), ev.action.id(), text_of(e, "cat"), s.start_ns, s.end_ns,
                        ev.lane != plan::Lane::compute});
}

// A "C" sample of a predicted trace's link counters, named "LINK (UNIT)" by the writer. Samples that
// are not numbers are skipped: counters only decorate a timeline.
void read_counter_sample(const json& e, const Source& src, size_t i, std::map<std::string, plan::Counter>& counters) {
  const std::string name = text_of(e, "name");
  const json* value = field(args_of(e), "value");
  const auto ts = micros(e, "ts", src, i);
  const size_t open = name.rfind(" (");
  if (!ts || !value || !value->is_number() || open == std::string::npos || name.back() != ')') return;
  plan::Counter& c = counters[name];
  c.name = name.substr(0, open);
  c.unit = name.substr(open + 2, name.size() - open - 3);
  c.samples.emplace_back(plan::Time::ns(*ts), value->get<double>());
}

// The measured memory per rank of a Parallax trace's header ("memory": [{rank, peak_rss_bytes,
// baseline_rss_bytes}]); a malformed entry is reported by `bad`.
template <typename Bad>
std::vector<plan::RankMemory> read_memory(const json& header, int world_size, Bad bad) {
  std::vector<plan::RankMemory> out;
  const json* memory = field(header, "memory");
  if (!memory) return out;
  if (!memory->is_array()) bad("memory must be a list of {rank, peak_rss_bytes, baseline_rss_bytes}");
  for (const json& m : *memory) {
    if (!m.is_object()) bad("memory must be a list of {rank, peak_rss_bytes, baseline_rss_bytes}");
    plan::RankMemory r;
    r.rank = static_cast<int>(int_field(m, "rank", 0, std::max(0, world_size - 1), 0, bad));
    r.peak_rss_bytes = int_field(m, "peak_rss_bytes", 0, INT64_MAX, 0, bad);
    r.baseline_rss_bytes = int_field(m, "baseline_rss_bytes", 0, r.peak_rss_bytes, 0, bad);
    out.push_back(r);
  }
  return out;
}

void read_parallax(const json& header, const json& events, const Source& src, LoadedTrace& out) {
  const auto bad_header = [&](const std::string& why) { throw plan::InputError(src.key_location("parallax"), "parallax." + why); };
  out.format = "parallax";
  out.kind = text_of(header, "kind");
  out.world_size = static_cast<int>(int_field(header, "world_size", 0, 1 << 24, 0, bad_header));
  out.timeline.kind = out.kind;
  out.timeline.scenario = text_of(header, "scenario");
  out.timeline.world_size = out.world_size;
  if (const json* plan = field(header, "plan"); plan && plan->is_object()) out.timeline.plan_summary = plan->dump();
  out.timeline.memory = read_memory(header, out.world_size, bad_header);
  const auto device_lanes = device_lane_names(events);
  std::map<std::string, plan::Counter> counters;
  for (size_t i = 0; i < events.size(); ++i) {
    const json& e = events[i];
    if (!e.is_object()) src.fail(i, "not an object");
    if (text_of(e, "ph") == "C") read_counter_sample(e, src, i, counters);
    if (text_of(e, "ph") != "X") continue;
    const Span s = complete_span(e, src, i, "an X event needs numeric ts, dur, pid and tid");
    int64_t rank = 0, lane = 0;
    if (!int_key(e, "pid", &rank) || !int_key(e, "tid", &lane)) src.fail(i, "an X event needs numeric ts, dur, pid and tid");
    if (rank < 0 || rank >= out.world_size)
      src.fail(i, "pid " + std::to_string(rank) + " is not a rank of this " + std::to_string(out.world_size) + "-rank trace");
    const int r = static_cast<int>(rank);
    if (lane >= plan::kFirstDeviceTid && lane <= INT32_MAX) {
      const auto it = device_lanes.find({r, static_cast<int>(lane)});
      read_device_span(e, r, static_cast<int>(lane), it == device_lanes.end() ? "" : it->second, s, src, i, out);
      continue;
    }
    if (lane < 0 || lane >= plan::kLaneCount) src.fail(i, "tid " + std::to_string(lane) + " is not a lane (0-3)");
    read_action_span(e, r, static_cast<int>(lane), s, src, i, out);
  }
  for (auto& [name, c] : counters) {
    std::stable_sort(c.samples.begin(), c.samples.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
    out.timeline.counters.push_back(std::move(c));
  }
}

// ---- PyTorch profiler traces (Kineto and legacy) and other Chrome traces.

enum class Flavor { kineto, legacy, chrome };

struct Names {
  std::map<std::string, std::string> process;  // pid -> process_name
  std::map<ThreadKey, std::string> thread;     // (pid, tid) -> thread_name
};

Names lane_names(const json& events) {
  Names n;
  for (const json& e : events) {
    if (!e.is_object() || text_of(e, "ph") != "M") continue;
    const std::string what = text_of(e, "name"), value = text_of(args_of(e), "name");
    if (value.empty()) continue;
    if (what == "process_name") n.process[id_of(e, "pid")] = value;
    if (what == "thread_name") n.thread[{id_of(e, "pid"), id_of(e, "tid")}] = value;
  }
  return n;
}

// Kineto's categories as PyTorch 1.8 and 1.9 named them, in today's names.
std::string canonical_category(const std::string& cat) {
  static const std::map<std::string, std::string> old = {{"Operator", "cpu_op"},   {"Runtime", "cuda_runtime"},
                                                         {"Kernel", "kernel"},     {"Memcpy", "gpu_memcpy"},
                                                         {"Memset", "gpu_memset"}, {"Python", "python_function"}};
  const auto it = old.find(cat);
  return it == old.end() ? cat : it->second;
}

bool is_nccl_kernel(const std::string& name) {
  return name.rfind("nccl", 0) == 0 || name.find("ncclKernel") != std::string::npos ||
         name.find("ncclDevKernel") != std::string::npos;
}

// The lane of a PyTorch category, or "" for a category PyTorch does not write.
std::string pytorch_lane(const json& e, const std::string& cat, const Names& names, bool* communication) {
  const json& args = args_of(e);
  const std::string stream = field(args, "stream") ? id_of(args, "stream") : id_of(e, "tid");
  if (cat == "kernel") {
    *communication = is_nccl_kernel(text_of(e, "name"));
    return "gpu stream " + stream + (*communication ? " nccl" : "");
  }
  if (cat == "gpu_memcpy" || cat == "gpu_memset") return "gpu stream " + stream + " memcpy";
  const std::string tid = id_of(e, "tid");
  if (cat == "cpu_op") {
    const auto it = names.thread.find({id_of(e, "pid"), tid});
    return "cpu " + (it == names.thread.end() ? "thread " + tid : it->second);
  }
  if (cat == "cuda_runtime") return "cuda runtime (thread " + tid + ")";
  if (cat == "cuda_driver") return "cuda driver (thread " + tid + ")";
  if (cat == "user_annotation" || cat == "gpu_user_annotation") return "annotations";
  return "";
}

// "process / thread" by their metadata names, else by their ids.
std::string named_lane(const json& e, const Names& names) {
  const std::string pid = id_of(e, "pid"), tid = id_of(e, "tid");
  const auto p = names.process.find(pid);
  const auto t = names.thread.find({pid, tid});
  return (p == names.process.end() ? "pid " + pid : p->second) + " / " +
         (t == names.thread.end() ? "tid " + tid : t->second);
}

std::string lane_of(const json& e, const std::string& cat, Flavor flavor, const Names& names, bool* communication) {
  if (std::string lane = pytorch_lane(e, cat, names, communication); !lane.empty()) return lane;
  const std::string pid = id_of(e, "pid");
  // The legacy autograd profiler: CPU ops per thread, CUDA kernels per device (its tid).
  if (pid == "CPU functions") return "cpu thread " + id_of(e, "tid");
  if (pid == "CUDA functions") {
    *communication = is_nccl_kernel(text_of(e, "name"));
    return "gpu " + id_of(e, "tid") + (*communication ? " nccl" : "");
  }
  if (flavor == Flavor::kineto && !cat.empty()) return cat;
  return named_lane(e, names);
}

bool pytorch_category(const std::string& cat) {
  static const std::set<std::string> known = {"cpu_op", "kernel", "cuda_runtime", "user_annotation", "gpu_memcpy"};
  return known.count(canonical_category(cat)) > 0;
}

Flavor flavor_of(const json& root, const json& events) {
  if (root.is_object() &&
      (root.contains("schemaVersion") || root.contains("distributedInfo") || root.contains("deviceProperties")))
    return Flavor::kineto;
  bool pytorch = false;
  for (const json& e : events) {
    if (!e.is_object()) continue;
    const std::string pid = id_of(e, "pid");
    if (pid == "CPU functions" || pid == "CUDA functions") return Flavor::legacy;
    pytorch = pytorch || pytorch_category(text_of(e, "cat"));
  }
  if (!pytorch) return Flavor::chrome;
  return root.is_array() ? Flavor::legacy : Flavor::kineto;
}

const char* flavor_name(Flavor f) {
  return f == Flavor::kineto ? "kineto" : f == Flavor::legacy ? "pytorch-legacy" : "chrome";
}

/// Reads the events of a PyTorch profiler or other Chrome trace into `out`.
class EventReader {
 public:
  EventReader(const json& events, Flavor flavor, int rank, Source& src, LoadedTrace& out)
      : events_(events), flavor_(flavor), rank_(rank), names_(lane_names(events)), src_(src), out_(out) {}

  void read() {
    for (size_t i = 0; i < events_.size(); ++i) read_event(i);
    pair_begins_and_ends();
    src_.finish(out_);
  }

 private:
  struct Edge {
    int64_t ts;
    size_t index;
    bool begin;
  };

  void read_event(size_t i) {
    const json& e = events_[i];
    if (!e.is_object()) src_.fail(i, "not an object");
    const std::string ph = text_of(e, "ph");
    if (ph == "X") {
      const Span s = complete_span(e, src_, i, "an X event needs numeric ts and dur");
      if (canonical_category(text_of(e, "cat")) != "Trace") add(e, s);  // "Trace": the profiler's own span
    } else if (ph == "B" || ph == "E") {
      const auto ts = micros(e, "ts", src_, i);
      if (!ts) src_.fail(i, "a " + ph + " event needs a numeric ts");
      edges_[{id_of(e, "pid"), id_of(e, "tid")}].push_back({*ts, i, ph == "B"});
    } else if (ph == "i" || ph == "I") {
      const auto ts = micros(e, "ts", src_, i);
      if (!ts) src_.fail(i, "an instant event needs a numeric ts");
      add(e, {*ts, *ts});
    }
    // M was read for the names; C (counters), flows, async, samples and objects are not shown.
  }

  void add(const json& e, Span s) {
    TraceEvent ev;
    ev.rank = rank_;
    ev.category = canonical_category(text_of(e, "cat"));
    ev.lane = lane_of(e, ev.category, flavor_, names_, &ev.communication);
    ev.name = text_of(e, "name");
    ev.start_ns = s.start_ns;
    ev.end_ns = s.end_ns;
    if (ev.name.rfind("ProfilerStep#", 0) == 0 && (ev.category == "user_annotation" || ev.category == "cpu_op"))
      add_step(ev);
    out_.events.push_back(std::move(ev));
  }

  void add_step(const TraceEvent& ev) {
    int step = 0;
    const char* first = ev.name.data() + 13;
    const char* last = ev.name.data() + ev.name.size();
    const auto [end, err] = std::from_chars(first, last, step);
    if (err == std::errc() && end == last && steps_seen_.insert(step).second)
      out_.steps.push_back({rank_, step, ev.start_ns, ev.end_ns});
  }

  // B and E nest like a stack on their thread; Perfetto and Chrome pair them in time order, and
  // the format does not promise that a file lists them so.
  void pair_begins_and_ends() {
    for (auto& [thread, edges] : edges_) {
      std::stable_sort(edges.begin(), edges.end(), [](const Edge& a, const Edge& b) { return a.ts < b.ts; });
      std::vector<const Edge*> open;
      for (const Edge& edge : edges) {
        if (edge.begin) {
          open.push_back(&edge);
        } else if (open.empty()) {
          src_.warn(out_, edge.index, "an E event with no B open on its thread; left out");
        } else {
          const json& begin = events_[open.back()->index];
          add(text_of(begin, "name").empty() ? events_[edge.index] : begin, {open.back()->ts, edge.ts});
          open.pop_back();
        }
      }
      for (const Edge* edge : open) src_.warn(out_, edge->index, "a B event that never ends; left out");
    }
  }

  const json& events_;
  Flavor flavor_;
  int rank_;
  Names names_;
  Source& src_;
  LoadedTrace& out_;
  std::map<ThreadKey, std::vector<Edge>> edges_;
  std::set<int> steps_seen_;
};

void read_other(const json& root, const json& events, Source& src, int default_rank, LoadedTrace& out) {
  const Flavor flavor = flavor_of(root, events);
  out.format = flavor_name(flavor);
  int rank = default_rank;
  if (const json* info = root.is_object() ? field(root, "distributedInfo") : nullptr; info && info->is_object()) {
    const auto bad = [&](const std::string& why) {
      throw plan::InputError(src.key_location("distributedInfo"), "distributedInfo." + why);
    };
    rank = static_cast<int>(int_field(*info, "rank", 0, 1 << 24, default_rank, bad));
    out.world_size = static_cast<int>(int_field(*info, "world_size", 0, 1 << 24, 0, bad));
  }
  EventReader(events, flavor, rank, src, out).read();
}

// The array form may lack its closing bracket (the format allows it: a writer that streams
// events cannot always add it), possibly after a trailing comma. The text with it closed.
std::optional<std::string> close_array(const std::string& text) {
  const size_t first = value_start(text);
  if (first == std::string::npos || text[first] != '[') return std::nullopt;
  size_t last = text.find_last_not_of(kSpace);
  if (text[last] == ',') last = text.find_last_not_of(kSpace, last - 1);
  return text.substr(0, last + 1) + "]";
}

[[noreturn]] void not_json(const std::string& text, const std::string& name, const json::exception& e) {
  std::string what = e.what();
  what = what.substr(std::min(what.find(']') + 2, what.size()));  // drop nlohmann's "[json.exception...] "
  size_t byte = 0;
  if (const auto* p = dynamic_cast<const json::parse_error*>(&e)) {
    byte = p->byte > 0 ? p->byte - 1 : 0;
  } else if (const auto q = what.find('\''); q != std::string::npos) {
    // "number overflow parsing '1e999'": nlohmann gives no position, the token finds it.
    byte = std::min(text.find(what.substr(q + 1, what.rfind('\'') - q - 1)), text.size());
  }
  throw plan::InputError(position(name, text, byte), "not valid JSON (" + what + "); is the file truncated?");
}

json parse_json(const std::string& text, const std::string& name) {
  try {
    return json::parse(text);
  } catch (const json::exception& e) {
    if (const auto closed = close_array(text)) {
      try {
        return json::parse(*closed);
      } catch (const json::exception&) {
      }
    }
    not_json(text, name, e);
  }
}

}  // namespace

std::string gunzip(const std::string& bytes, const std::string& name) {
  const auto magic = [&](size_t at) {
    return bytes.size() >= at + 2 && static_cast<uint8_t>(bytes[at]) == 0x1f && static_cast<uint8_t>(bytes[at + 1]) == 0x8b;
  };
  if (!magic(0)) return bytes;
  const auto fail = [&](const std::string& why) {
    throw plan::InputError(plan::Location{name}, "cannot decompress the trace: " + why + " (truncated .gz?)");
  };
  struct Stream {
    z_stream z{};
    ~Stream() { inflateEnd(&z); }
  } s;
  if (inflateInit2(&s.z, 16 + MAX_WBITS) != Z_OK) fail("zlib cannot start");  // 16: gzip framing
  size_t fed = 0;  // zlib takes at most 4 GB at a time
  const auto feed = [&] {
    if (s.z.avail_in != 0 || fed == bytes.size()) return;
    const size_t n = std::min<size_t>(bytes.size() - fed, size_t{1} << 30);
    s.z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(bytes.data() + fed));
    s.z.avail_in = static_cast<uInt>(n);
    fed += n;
  };
  std::string out;
  char buf[1 << 16];
  for (;;) {
    feed();
    s.z.next_out = reinterpret_cast<Bytef*>(buf);
    s.z.avail_out = sizeof buf;
    const int rc = inflate(&s.z, Z_NO_FLUSH);
    out.append(buf, sizeof buf - s.z.avail_out);
    if (rc == Z_STREAM_END) {
      // Members can follow one another (cat a.gz b.gz); anything else after one is ignored, as gzread does.
      if (!magic(fed - s.z.avail_in)) break;
      inflateReset(&s.z);
    } else if (rc != Z_OK && rc != Z_BUF_ERROR) {
      fail(s.z.msg ? s.z.msg : "corrupt data");
    } else if (s.z.avail_in == 0 && fed == bytes.size() && s.z.avail_out != 0) {
      fail("the data ends inside the stream");
    }
  }
  return out;
}

std::string read_file_maybe_gzip(const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec))
    throw plan::InputError(plan::Location{path}, "cannot open the trace (does it exist, and is it a file?)");
  std::ifstream in(path, std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (!in && !in.eof()) throw plan::InputError(plan::Location{path}, "cannot read the trace");
  return gunzip(bytes, path);
}

LoadedTrace parse_trace(const std::string& text, const std::string& name, int default_rank) {
  const json root = parse_json(text, name);
  const json* events = root.is_array() ? &root : root.is_object() ? field(root, "traceEvents") : nullptr;
  if (!events || !events->is_array())
    throw plan::InputError(position(name, text, value_start(text)),
                           "not a Chrome trace: expected a list of events or an object with a \"traceEvents\" list");
  LoadedTrace out;
  out.path = name;
  Source src(text, name);
  const json* header = root.is_object() ? field(root, "parallax") : nullptr;
  if (header && header->is_object()) read_parallax(*header, *events, src, out);
  else read_other(root, *events, src, default_rank, out);
  return out;
}

LoadedTrace read_trace(const std::string& path, int default_rank) {
  return parse_trace(read_file_maybe_gzip(path), path, default_rank);
}

}  // namespace parallax::profiler
