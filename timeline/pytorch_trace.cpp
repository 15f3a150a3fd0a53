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
    if (const json* c = field(args_of(e), "correlation"); c && c->is_number_integer()) ev.correlation = c->get<int64_t>();
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

}  // namespace

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

}  // namespace parallax::timeline::detail
