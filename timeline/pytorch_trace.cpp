// Reading PyTorch profiler traces (Kineto's object form, the legacy profiler's array form) and other
// Chrome traces, for viewing beside Parallax's own: lanes, steps, begin/end pairs (timeline/trace_json.hpp).
#include <algorithm>
#include <charconv>
#include <cmath>
#include <map>
#include <set>
#include <vector>

#include "timeline/trace_json.hpp"

namespace parallax::timeline::detail {
namespace {

// ---- PyTorch profiler traces (Kineto and legacy) and other Chrome traces.

using Flavor = OtherReader::Flavor;
using LaneInputs = OtherReader::LaneInputs;
using Names = OtherReader::LaneNames;

LaneInputs lane_inputs(const json& e) {
  const json& args = args_of(e);
  LaneInputs in{id_of(e, "pid"), id_of(e, "tid"), "", ""};
  in.stream = field(args, "stream") ? id_of(args, "stream") : in.tid;
  in.device = field(args, "device") ? id_of(args, "device") : in.pid;
  return in;
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

bool on_gpu(const std::string& category) { return category == "kernel" || category == "gpu_memcpy" || category == "gpu_memset"; }

// The lane of a PyTorch category, or "" for a category PyTorch does not write. `devices`: the
// trace has GPU work on more than one device, whose streams may share ids.
std::string pytorch_lane(const TraceEvent& ev, const LaneInputs& in, const Names& names, bool devices, bool* communication) {
  const std::string& cat = ev.category;
  const std::string gpu = devices ? "gpu " + in.device + " stream " : "gpu stream ";
  if (cat == "kernel") {
    *communication = is_nccl_kernel(ev.name);
    return gpu + in.stream + (*communication ? " nccl" : "");
  }
  if (cat == "gpu_memcpy" || cat == "gpu_memset") return gpu + in.stream + " memcpy";
  if (cat == "cpu_op") {
    const auto it = names.thread.find({in.pid, in.tid});
    return "cpu " + (it == names.thread.end() ? "thread " + in.tid : it->second);
  }
  if (cat == "cuda_runtime") return "cuda runtime (thread " + in.tid + ")";
  if (cat == "cuda_driver") return "cuda driver (thread " + in.tid + ")";
  if (cat == "user_annotation" || cat == "gpu_user_annotation") return "annotations";
  return "";
}

// "process / thread" by their metadata names, else by their ids.
std::string named_lane(const LaneInputs& in, const Names& names) {
  const auto p = names.process.find(in.pid);
  const auto t = names.thread.find({in.pid, in.tid});
  return (p == names.process.end() ? "pid " + in.pid : p->second) + " / " +
         (t == names.thread.end() ? "tid " + in.tid : t->second);
}

std::string lane_of(const TraceEvent& ev, const LaneInputs& in, Flavor flavor, const Names& names, bool devices, bool* communication) {
  if (std::string lane = pytorch_lane(ev, in, names, devices, communication); !lane.empty()) return lane;
  // The legacy autograd profiler: CPU ops per thread, CUDA kernels per device (its tid).
  if (in.pid == "CPU functions") return "cpu thread " + in.tid;
  if (in.pid == "CUDA functions") {
    *communication = is_nccl_kernel(ev.name);
    return "gpu " + in.tid + (*communication ? " nccl" : "");
  }
  if (flavor == Flavor::kineto && !ev.category.empty()) return ev.category;
  return named_lane(in, names);
}

bool pytorch_category(const std::string& cat) {
  static const std::set<std::string> known = {"cpu_op", "kernel", "cuda_runtime", "user_annotation", "gpu_memcpy"};
  return known.count(canonical_category(cat)) > 0;
}

const char* flavor_name(Flavor f) {
  return f == Flavor::kineto ? "kineto" : f == Flavor::legacy ? "pytorch-legacy" : "chrome";
}

}  // namespace

// Each event is read as the parser meets it into what a TraceEvent needs, and its JSON dropped:
// a 106 MB Kineto trace's DOM took 970 MB.
void OtherReader::event(const json& e, size_t i) {
  if (!e.is_object()) src_.fail(i, "not an object");
  const std::string ph = text_of(e, "ph");
  const std::string cat = text_of(e, "cat");
  const std::string pid = id_of(e, "pid");
  legacy_ = legacy_ || pid == "CPU functions" || pid == "CUDA functions";
  pytorch_ = pytorch_ || pytorch_category(cat);
  if (ph == "X") {
    const Span s = complete_span(e, src_, i, "an X event needs numeric ts and dur");
    if (canonical_category(cat) != "Trace") events_.push_back(pending(e, s));  // "Trace": the profiler's own span
  } else if (ph == "B" || ph == "E") {
    const auto ts = micros(e, "ts", src_, i);
    if (!ts) src_.fail(i, "a " + ph + " event needs a numeric ts");
    edges_[{pid, id_of(e, "tid")}].push_back({*ts, edge_events_.size(), i, ph == "B"});
    edge_events_.push_back(pending(e, {*ts, *ts}));
  } else if (ph == "i" || ph == "I") {
    const auto ts = micros(e, "ts", src_, i);
    if (!ts) src_.fail(i, "an instant event needs a numeric ts");
    events_.push_back(pending(e, {*ts, *ts}));
  } else if (ph == "M") {
    const std::string what = text_of(e, "name"), value = text_of(args_of(e), "name");
    if (value.empty()) return;
    if (what == "process_name") names_.process[pid] = value;
    if (what == "thread_name") names_.thread[{pid, id_of(e, "tid")}] = value;
  }
  // C (counters), flows, async, samples and objects are not shown.
}

OtherReader::Pending OtherReader::pending(const json& e, Span s) {
  Pending p;
  p.event.category = canonical_category(text_of(e, "cat"));
  p.event.name = text_of(e, "name");
  p.event.start_ns = s.start_ns;
  p.event.end_ns = s.end_ns;
  if (const json* c = field(args_of(e), "correlation"); c && c->is_number_integer()) p.event.correlation = c->get<int64_t>();
  p.lane = lane_inputs(e);
  return p;
}

void OtherReader::finish(const json& root, int default_rank) {
  const bool kineto_root = root.is_object() && (root.contains("schemaVersion") || root.contains("distributedInfo") ||
                                                root.contains("deviceProperties"));
  const Flavor flavor = kineto_root ? Flavor::kineto
                        : legacy_   ? Flavor::legacy
                        : !pytorch_ ? Flavor::chrome
                        : root.is_array() ? Flavor::legacy
                                          : Flavor::kineto;
  out_.format = flavor_name(flavor);
  int rank = default_rank;
  if (const json* info = root.is_object() ? field(root, "distributedInfo") : nullptr; info && info->is_object()) {
    const auto bad = [&](const std::string& why) {
      throw plan::InputError(src_.key_location("distributedInfo"), "distributedInfo." + why);
    };
    rank = static_cast<int>(int_field(*info, "rank", 0, 1 << 24, default_rank, bad));
    out_.world_size = static_cast<int>(int_field(*info, "world_size", 0, 1 << 24, 0, bad));
    if (out_.world_size > 0 && rank >= out_.world_size)
      bad("rank " + std::to_string(rank) + " is not a rank of world_size " + std::to_string(out_.world_size) + " (ranks count from 0)");
  }
  std::set<std::string> gpus;
  for (const Pending& p : events_)
    if (on_gpu(p.event.category)) gpus.insert(p.lane.device);
  const bool devices = gpus.size() > 1;
  out_.events.reserve(events_.size() + edge_events_.size() / 2);
  for (Pending& p : events_) emit(p, flavor, rank, devices);
  events_ = {};
  pair_begins_and_ends(flavor, rank, devices);
  src_.finish(out_);
}

void OtherReader::emit(Pending& p, Flavor flavor, int rank, bool devices) {
  TraceEvent& ev = p.event;
  ev.rank = rank;
  ev.lane = lane_of(ev, p.lane, flavor, names_, devices, &ev.communication);
  if (ev.name.rfind("ProfilerStep#", 0) == 0 && (ev.category == "user_annotation" || ev.category == "cpu_op")) add_step(ev);
  out_.events.push_back(std::move(ev));
}

void OtherReader::add_step(const TraceEvent& ev) {
  int step = 0;
  const char* first = ev.name.data() + 13;
  const char* last = ev.name.data() + ev.name.size();
  const auto [end, err] = std::from_chars(first, last, step);
  if (err == std::errc() && end == last && steps_seen_.insert(step).second)
    out_.steps.push_back({ev.rank, step, ev.start_ns, ev.end_ns});
}

// B and E nest like a stack on their thread; Perfetto and Chrome pair them in time order, and
// the format does not promise that a file lists them so.
void OtherReader::pair_begins_and_ends(Flavor flavor, int rank, bool devices) {
  for (auto& [thread, edges] : edges_) {
    std::stable_sort(edges.begin(), edges.end(), [](const Edge& a, const Edge& b) { return a.ts < b.ts; });
    std::vector<const Edge*> open;
    for (const Edge& edge : edges) {
      if (edge.begin) {
        open.push_back(&edge);
      } else if (open.empty()) {
        src_.warn(out_, edge.index, "an E event with no B open on its thread; left out");
      } else {
        const Pending& begin = edge_events_[open.back()->pending];
        Pending pair = begin.event.name.empty() ? edge_events_[edge.pending] : begin;
        pair.event.start_ns = open.back()->ts;
        pair.event.end_ns = edge.ts;
        emit(pair, flavor, rank, devices);
        open.pop_back();
      }
    }
    for (const Edge* edge : open) src_.warn(out_, edge->index, "a B event that never ends; left out");
  }
}

}  // namespace parallax::timeline::detail
