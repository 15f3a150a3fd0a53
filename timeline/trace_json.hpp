#pragma once
// For the trace readers of profiler/ only: the JSON text being read (every error and warning names
// an event's file:line:column, found again in the text, since nlohmann::json keeps no positions),
// field accessors that check a value's type before reading it, and the reader of each format:
// Parallax's own traces (trace_reader.cpp) and PyTorch profiler and other Chrome traces
// (pytorch_trace.cpp).
#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "plan/error.hpp"
#include "timeline/trace_reader.hpp"

namespace parallax::timeline::detail {

using nlohmann::json;
using ThreadKey = std::pair<std::string, std::string>;  // (pid, tid) as text

// Timestamps and durations are microseconds. Beyond 4e15 µs (127 years; Unix-epoch timestamps
// fit) a start plus a duration in nanoseconds could overflow int64.
constexpr double kMaxMicros = 4e15;
constexpr size_t kMaxWarnings = 8;
constexpr const char* kSpace = " \t\r\n";

// ---- Positions (trace_json.cpp): offsets into the text, found only when something is reported.
plan::Location position(const std::string& name, const std::string& text, size_t byte);
size_t value_start(const std::string& text);
size_t root_value_at(const std::string& text, const std::string& key);
size_t event_list_at(const std::string& text);
size_t element_at(const std::string& text, size_t list, size_t index);

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

// ---- Fields (trace_json.cpp). Every accessor checks the type first: nlohmann throws its own
// exceptions (or, for numbers cast out of range, does undefined things) on values of the wrong kind.
const json* field(const json& e, const char* key);
std::string text_of(const json& e, const char* key);
/// Ids are numbers or strings ("tid": "PyTorch Profiler", "pid": "CPU functions"): either way,
/// as text.
std::string id_of(const json& e, const char* key);
const json& args_of(const json& e);
/// An integer value (a whole float counts), or nothing.
std::optional<int64_t> integer(const json& v);
/// An integer field of `e` (pid, tid) into *out; false when absent or not an integer.
bool int_key(const json& e, const char* key, int64_t* out);
/// A time field (microseconds) in nanoseconds; nothing when absent or not a number.
std::optional<int64_t> micros(const json& e, const char* key, const Source& src, size_t index);

// An integer field within [lo, hi], `fallback` when absent; anything else is reported by `bad`.
template <typename Bad>
inline int64_t int_field(const json& obj, const char* key, int64_t lo, int64_t hi, int64_t fallback, Bad bad) {
  const json* v = field(obj, key);
  if (!v) return fallback;
  const auto n = integer(*v);
  if (!n || *n < lo || *n > hi)
    bad(std::string(key) + " must be an integer from " + std::to_string(lo) + " to " + std::to_string(hi));
  return *n;
}

/// An event's start and end, in nanoseconds.
struct Span {
  int64_t start_ns, end_ns;
};
/// ts and dur of an X event, checked; `needs` says what is missing when they are not numbers.
Span complete_span(const json& e, const Source& src, size_t i, const char* needs);

// ---- The formats.
/// Parallax's own trace (trace_reader.cpp): its `parallax` header, then its events one at a time,
/// as the parser meets them (parse_trace never holds a Parallax trace's events as JSON).
class ParallaxReader {
 public:
  ParallaxReader(const json& header, const Source& src, LoadedTrace& out);
  /// traceEvents[i].
  void event(const json& e, size_t i);
  /// After the last event: the device lanes' names and the counters, in time order.
  void finish();

 private:
  struct DeviceSpanAt {
    size_t device, event;  ///< its index in out.timeline.device and in out.events
    int tid;
  };
  const Source& src_;
  LoadedTrace& out_;
  std::map<std::pair<int, int>, std::string> device_lanes_;  ///< (pid, tid) -> a thread_name's name
  std::vector<DeviceSpanAt> device_spans_;
  std::map<std::string, Counter> counters_;
};
/// A PyTorch profiler trace (Kineto's or the legacy profiler's) or another Chrome trace
/// (pytorch_trace.cpp), read as the parser meets its events: what rests on the whole file (the
/// flavour, the rank, the lanes' names, which Kineto writes last, and the pairs of B and E
/// events) waits for finish().
class OtherReader {
 public:
  enum class Flavor { kineto, legacy, chrome };
  /// What an event's lane is made of, kept from its JSON until the lanes' names are known.
  struct LaneInputs {
    std::string pid, tid, stream;  ///< stream: args.stream, else the tid
    std::string device;            ///< args.device, else the pid (Kineto's process of a GPU)
  };
  struct LaneNames {
    std::map<std::string, std::string> process;  ///< pid -> process_name
    std::map<ThreadKey, std::string> thread;     ///< (pid, tid) -> thread_name
  };

  OtherReader(Source& src, LoadedTrace& out) : src_(src), out_(out) {}
  /// traceEvents[i] (or the root list's).
  void event(const json& e, size_t i);
  /// After the last event, with the root as parsed (its events taken out).
  void finish(const json& root, int default_rank);

 private:
  struct Pending {
    TraceEvent event;  ///< all but its rank, lane and communication
    LaneInputs lane;
  };
  struct Edge {
    int64_t ts;
    size_t pending;  ///< into edge_events_
    size_t index;    ///< the event's index in the file
    bool begin;
  };
  static Pending pending(const json& e, Span s);
  void emit(Pending& p, Flavor flavor, int rank, bool devices);
  void add_step(const TraceEvent& ev);
  void pair_begins_and_ends(Flavor flavor, int rank, bool devices);

  Source& src_;
  LoadedTrace& out_;
  std::vector<Pending> events_;       ///< X and instant events, in file order
  std::vector<Pending> edge_events_;  ///< B and E events
  std::map<ThreadKey, std::vector<Edge>> edges_;
  LaneNames names_;
  bool legacy_ = false;   ///< an event of the legacy profiler's "CPU functions" / "CUDA functions"
  bool pytorch_ = false;  ///< an event of a category PyTorch's profiler writes
  std::set<int> steps_seen_;
};

}  // namespace parallax::timeline::detail
