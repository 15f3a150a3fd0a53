#include "timeline/trace_reader.hpp"

#include <zlib.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <map>
#include <optional>
#include <set>

#include "timeline/trace_json.hpp"
#include "timeline/trace_writer.hpp"

namespace parallax::timeline::detail {
namespace {

// ---- Parallax's own traces.

// A device span's lane is named once its thread_name has been read (ParallaxReader::finish).
void read_device_span(const json& e, int rank, Span s, const Source& src, size_t i, LoadedTrace& out) {
  const auto bad = [&](const std::string& why) { src.fail(i, "args." + why); };
  const json& args = args_of(e);
  timeline::DeviceSpan d;
  d.rank = rank;
  d.name = text_of(e, "name");
  d.start = plan::Time::ns(s.start_ns);
  d.end = plan::Time::ns(s.end_ns);
  d.step = static_cast<int32_t>(int_field(args, "step", INT32_MIN, INT32_MAX, 0, bad));
  d.bytes = int_field(args, "bytes", 0, INT64_MAX, 0, bad);
  const std::string action = text_of(args, "action");
  if (!action.empty()) d.attributed = schedule::parse_action_id(action, &d.action);
  out.timeline.device.push_back(d);
  out.events.push_back({rank, "", d.name, "gpu", s.start_ns, s.end_ns, false});
}

void read_action_span(const json& e, int rank, int lane, Span s, const Source& src, size_t i, LoadedTrace& out) {
  const auto bad = [&](const std::string& why) { src.fail(i, "args." + why); };
  const json& args = args_of(e);
  const std::string action = text_of(args, "action");
  if (action.empty()) src.fail(i, "missing args.action");
  timeline::TimelineEvent ev;
  if (!schedule::parse_action_id(action, &ev.action)) src.fail(i, "args.action '" + action + "' is not an action id");
  ev.rank = rank;
  ev.lane = static_cast<timeline::Lane>(lane);
  ev.start = plan::Time::ns(s.start_ns);
  ev.end = plan::Time::ns(s.end_ns);
  ev.bytes = int_field(args, "bytes", 0, INT64_MAX, 0, bad);
  ev.step = static_cast<int32_t>(int_field(args, "step", INT32_MIN, INT32_MAX, 0, bad));
  const std::string algorithm = text_of(args, "algorithm");
  ev.algorithm = timeline::Algorithm::none;
  for (auto a : {timeline::Algorithm::ring, timeline::Algorithm::hierarchical, timeline::Algorithm::tree, timeline::Algorithm::nvls})
    if (algorithm == name(a)) ev.algorithm = a;
  const std::string protocol = text_of(args, "protocol");
  ev.protocol = timeline::Protocol::none;
  for (auto p : {timeline::Protocol::ll, timeline::Protocol::ll128, timeline::Protocol::simple})
    if (protocol == name(p)) ev.protocol = p;
  out.timeline.events.push_back(ev);
  out.events.push_back({rank, timeline::name(ev.lane), ev.action.id(), text_of(e, "cat"), s.start_ns, s.end_ns,
                        ev.lane != timeline::Lane::compute});
}

// A "C" sample of a predicted trace's link counters, named "LINK (UNIT)" by the writer. Samples that
// are not numbers are skipped: counters only decorate a timeline.
void read_counter_sample(const json& e, const Source& src, size_t i, std::map<std::string, timeline::Counter>& counters) {
  const std::string name = text_of(e, "name");
  const json* value = field(args_of(e), "value");
  const auto ts = micros(e, "ts", src, i);
  const size_t open = name.rfind(" (");
  if (!ts || !value || !value->is_number() || open == std::string::npos || name.back() != ')') return;
  timeline::Counter& c = counters[name];
  c.name = name.substr(0, open);
  c.unit = name.substr(open + 2, name.size() - open - 3);
  c.samples.emplace_back(plan::Time::ns(*ts), value->get<double>());
}

// The measured memory per rank of a Parallax trace's header ("memory": [{rank, peak_bytes,
// baseline_bytes, peak_rss_bytes}]); a malformed entry is reported by `bad`. Traces written before
// 2026-11-27 measured a CPU rank by its resident set alone: {rank, peak_rss_bytes,
// baseline_rss_bytes}, read as the peak and baseline they were.
template <typename Bad>
std::vector<timeline::RankMemory> read_memory(const json& header, int world_size, Bad bad) {
  constexpr const char* kShape = "memory must be a list of {rank, peak_bytes, baseline_bytes, peak_rss_bytes}";
  std::vector<timeline::RankMemory> out;
  const json* memory = field(header, "memory");
  if (!memory) return out;
  if (!memory->is_array()) bad(kShape);
  for (const json& m : *memory) {
    if (!m.is_object()) bad(kShape);
    timeline::RankMemory r;
    r.rank = static_cast<int>(int_field(m, "rank", 0, std::max(0, world_size - 1), 0, bad));
    r.peak_rss_bytes = int_field(m, "peak_rss_bytes", 0, INT64_MAX, 0, bad);
    if (m.contains("peak_bytes")) {
      r.peak_bytes = int_field(m, "peak_bytes", 0, INT64_MAX, 0, bad);
      r.baseline_bytes = int_field(m, "baseline_bytes", 0, r.peak_bytes, 0, bad);
    } else {
      r.peak_bytes = r.peak_rss_bytes;
      r.baseline_bytes = int_field(m, "baseline_rss_bytes", 0, r.peak_bytes, 0, bad);
    }
    out.push_back(r);
  }
  return out;
}

}  // namespace

ParallaxReader::ParallaxReader(const json& header, const Source& src, LoadedTrace& out) : src_(src), out_(out) {
  const auto bad_header = [&](const std::string& why) { throw plan::InputError(src.key_location("parallax"), "parallax." + why); };
  out.format = "parallax";
  out.kind = text_of(header, "kind");
  out.world_size = static_cast<int>(int_field(header, "world_size", 0, 1 << 24, 0, bad_header));
  out.timeline.kind = out.kind;
  out.timeline.scenario = text_of(header, "scenario");
  out.timeline.world_size = out.world_size;
  if (const json* plan = field(header, "plan")) out.timeline.plan = read_plan_summary(*plan);
  out.timeline.memory = read_memory(header, out.world_size, bad_header);
}

void ParallaxReader::event(const json& e, size_t i) {
  if (!e.is_object()) src_.fail(i, "not an object");
  const std::string ph = text_of(e, "ph");
  if (ph == "M" && text_of(e, "name") == "thread_name") {
    int64_t p = 0, t = 0;
    if (int_key(e, "pid", &p) && int_key(e, "tid", &t) && t >= timeline::kFirstDeviceTid && p <= INT32_MAX && t <= INT32_MAX)
      device_lanes_[{static_cast<int>(p), static_cast<int>(t)}] = text_of(args_of(e), "name");
  }
  if (ph == "C") read_counter_sample(e, src_, i, counters_);
  if (ph != "X") return;
  const Span s = complete_span(e, src_, i, "an X event needs numeric ts, dur, pid and tid");
  int64_t rank = 0, lane = 0;
  if (!int_key(e, "pid", &rank) || !int_key(e, "tid", &lane)) src_.fail(i, "an X event needs numeric ts, dur, pid and tid");
  if (rank < 0 || rank >= out_.world_size)
    src_.fail(i, "pid " + std::to_string(rank) + " is not a rank of this " + std::to_string(out_.world_size) + "-rank trace");
  const int r = static_cast<int>(rank);
  if (lane >= timeline::kFirstDeviceTid && lane <= INT32_MAX) {
    device_spans_.push_back({out_.timeline.device.size(), out_.events.size(), static_cast<int>(lane)});
    read_device_span(e, r, s, src_, i, out_);
    return;
  }
  if (lane < 0 || lane >= timeline::kLaneCount) src_.fail(i, "tid " + std::to_string(lane) + " is not a lane (0-" + std::to_string(timeline::kLaneCount - 1) + ")");
  read_action_span(e, r, static_cast<int>(lane), s, src_, i, out_);
}

void ParallaxReader::finish() {
  // Device lanes take the names their thread_name events gave, wherever those came in the file.
  for (const DeviceSpanAt& at : device_spans_) {
    timeline::DeviceSpan& d = out_.timeline.device[at.device];
    const auto it = device_lanes_.find({d.rank, at.tid});
    d.lane = it == device_lanes_.end() || it->second.empty() ? "device " + std::to_string(at.tid) : it->second;
    out_.events[at.event].lane = d.lane;
    out_.events[at.event].communication = d.lane.ends_with(" nccl");
  }
  for (auto& [name, c] : counters_) {
    std::stable_sort(c.samples.begin(), c.samples.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
    out_.timeline.counters.push_back(std::move(c));
  }
}

}  // namespace parallax::timeline::detail

namespace parallax::timeline {

using namespace detail;  // this file's own readers and their helpers

namespace {

// The array form may lack its closing bracket (the format allows it: a writer that streams
// events cannot always add it), possibly after a trailing comma. The text with it closed, or
// nothing when the text is no such list.
std::optional<std::string> close_array(const std::string& text) {
  const size_t first = value_start(text);
  if (first == std::string::npos || text[first] != '[') return std::nullopt;
  size_t last = text.find_last_not_of(kSpace);
  if (text[last] == ']') return std::nullopt;
  if (text[last] == ',') last = text.find_last_not_of(kSpace, last - 1);
  return text.substr(0, last + 1) + "]";
}

[[noreturn]] void not_json(const std::string& text, const std::string& name, const json::exception& e, bool closed = false) {
  std::string what = e.what();
  what = what.substr(std::min(what.find(']') + 2, what.size()));  // drop nlohmann's "[json.exception...] "
  size_t byte = 0;
  if (const auto* p = dynamic_cast<const json::parse_error*>(&e)) {
    byte = p->byte > 0 ? p->byte - 1 : 0;
  } else if (const auto q = what.find('\''); q != std::string::npos) {
    // "number overflow parsing '1e999'": nlohmann gives no position, the token finds it.
    byte = std::min(text.find(what.substr(q + 1, what.rfind('\'') - q - 1)), text.size());
  }
  // A list closed here fails at its end where the file has no bracket: say so, at the file's end.
  const std::string added = closed && byte >= text.size() ? " (at the ']' added where the list ends without one)" : "";
  throw plan::InputError(position(name, text, std::min(byte, text.size())), "not valid JSON (" + what + ")" + added + "; is the file truncated?");
}

// What parse_json hands on as it parses: the root's "parallax" header, and each event of the
// event list (the root list, or the root's traceEvents).
struct Stream {
  std::function<void(const json& header)> header;
  std::function<void(const json& event, size_t index)> event;
};

// `text` as JSON, but for its events: each goes to `stream` as the parser meets it and is dropped
// from the result, so no trace is ever held as a JSON tree of its events (a 1.3M-event Parallax
// trace's took 2.2 GB, 12x its text; a Kineto trace's 9x). Dropping each one also keeps
// nlohmann's callback parser linear: after every object it kept, it searches the object's parent
// for a dropped value to erase, which over a list of kept events is quadratic (28 s for a 106 MB
// Kineto trace).
json parse_json(const std::string& text, const std::string& name, const Stream& stream) {
  using E = json::parse_event_t;
  std::string key;          // the root's key being read
  bool root_list = false;   // the root is the event list
  bool streaming = false;   // inside the event list, handing it to `stream`
  size_t index = 0;         // the next event's index in it
  const json::parser_callback_t each = [&](int depth, E event, json& parsed) {
    if (depth == 0 && event == E::array_start) root_list = streaming = true;
    if (!root_list && depth == 1) {
      if (event == E::key) key = parsed.get<std::string>();
      if (event == E::object_end && key == "parallax") stream.header(parsed);
      if (event == E::array_start) streaming = key == "traceEvents";
      if (event == E::array_end) streaming = false;
    }
    if (!streaming || depth != (root_list ? 1 : 2) || (event != E::object_end && event != E::value)) return true;
    stream.event(parsed, index++);
    return false;
  };
  // A list without its closing bracket is closed first: parsed as it is, it would fail at its end,
  // with its events already handed on.
  const std::optional<std::string> closed = close_array(text);
  try {
    return json::parse(closed ? *closed : text, each);
  } catch (const json::exception& e) {
    not_json(text, name, e, closed.has_value());
  }
}

// Whether the root's "parallax" header comes after its traceEvents (the writer puts it first).
bool header_last(const std::string& text) {
  const size_t header = root_value_at(text, "parallax");
  return header != std::string::npos && header > event_list_at(text);
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
  // A file, or a pipe (`<(zcat run.json.gz)`, /dev/stdin): read once, as every command reads a trace.
  std::error_code ec;
  const auto status = std::filesystem::status(path, ec);
  if (ec || !std::filesystem::exists(status) || std::filesystem::is_directory(status))
    throw plan::InputError(plan::Location{path}, std::filesystem::is_directory(status) ? "a folder, not a trace file"
                                                                                      : "cannot open the trace (does it exist?)");
  std::ifstream in(path, std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (!in && !in.eof()) throw plan::InputError(plan::Location{path}, "cannot read the trace");
  return gunzip(bytes, path);
}

LoadedTrace parse_trace(const std::string& text, const std::string& name, int default_rank) {
  if (value_start(text) == std::string::npos)
    throw plan::InputError(plan::Location{name}, text.empty() ? "an empty file: no trace in it" : "only white space: no trace in it");
  LoadedTrace out;
  out.path = name;
  Source src(text, name);
  std::optional<ParallaxReader> parallax;  // once a Parallax header has been read
  OtherReader other(src, out);             // every other trace's events
  const auto header = [&](const json& h) {
    if (h.is_object() && !parallax) parallax.emplace(h, src, out);
  };
  // A header after the events is read first, alone (its events dropped unread), then the events.
  if (header_last(text)) parse_json(text, name, {header, [](const json&, size_t) {}});
  const json root = parse_json(text, name, {header, [&](const json& e, size_t i) { parallax ? parallax->event(e, i) : other.event(e, i); }});
  const json* events = root.is_array() ? &root : root.is_object() ? field(root, "traceEvents") : nullptr;
  if (!events || !events->is_array())
    throw plan::InputError(position(name, text, value_start(text)),
                           "not a Chrome trace: expected a list of events or an object with a \"traceEvents\" list");
  if (parallax) {
    parallax->finish();
  } else {
    other.finish(root, default_rank);
  }
  return out;
}

LoadedTrace read_trace(const std::string& path, int default_rank) {
  return parse_trace(read_file_maybe_gzip(path), path, default_rank);
}

}  // namespace parallax::timeline
