#include "profiler/host_tracer.hpp"

#include <algorithm>
#include <ctime>
#include <map>
#include <string>

namespace parallax::profiler {
namespace {

std::atomic<uint64_t> next_tracer_id{1};

// The calling thread's buffers, by tracer id (0: free). Fixed size, so a lookup on the recording
// path is a scan of a few words and never allocates.
struct ThreadTable {
  uint64_t tracer[HostTracer::kTracersPerThread] = {};
  void* buffer[HostTracer::kTracersPerThread] = {};
  int next = 0;  // the slot a new registration takes when none is free (the oldest)
};
thread_local ThreadTable table;

}  // namespace

int64_t now_ns() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

HostTracer::HostTracer(int rank, size_t capacity) : id_(next_tracer_id++), rank_(rank), capacity_(capacity) {}

HostTracer::~HostTracer() {
  // Other threads' entries for this tracer stay behind, harmless: tracer ids are never reused.
  for (int i = 0; i < kTracersPerThread; ++i)
    if (table.tracer[i] == id_) table.tracer[i] = 0;
}

void HostTracer::register_thread() {
  if (buffer()) return;
  auto b = std::make_unique<ThreadBuffer>();
  // resize(), not reserve(): the elements are written now, so the pages are mapped before the
  // first record rather than faulted in by it.
  b->spans.resize(capacity_);
  b->marks.resize(std::max<size_t>(capacity_ / 4, 64));
  int slot = 0;
  while (slot < kTracersPerThread && table.tracer[slot] != 0) ++slot;
  if (slot == kTracersPerThread) slot = table.next++ % kTracersPerThread;
  table.tracer[slot] = id_;
  table.buffer[slot] = b.get();
  std::lock_guard<std::mutex> lock(registry_mu_);
  buffers_.push_back(std::move(b));
}

HostTracer::ThreadBuffer* HostTracer::buffer() const noexcept {
  for (int i = 0; i < kTracersPerThread; ++i)
    if (table.tracer[i] == id_) return static_cast<ThreadBuffer*>(table.buffer[i]);
  return nullptr;
}

void HostTracer::span(timeline::Lane lane, const schedule::Action& action, int64_t start_ns, int64_t end_ns, int64_t bytes,
                      int32_t step) noexcept {
  if (!enabled_) return;
  ThreadBuffer* b = buffer();
  if (!b) {
    unregistered_.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  if (b->used_spans == b->spans.size()) {
    b->dropped.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  timeline::TimelineEvent& e = b->spans[b->used_spans++];
  e.rank = rank_;
  e.lane = lane;
  e.action = action;
  e.start = plan::Time::ns(start_ns);
  e.end = plan::Time::ns(end_ns);
  e.bytes = bytes;
  e.step = step;
}

void HostTracer::mark(const Mark& m) noexcept {
  if (!enabled_) return;
  ThreadBuffer* b = buffer();
  if (!b) {
    unregistered_.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  if (b->used_marks == b->marks.size()) {
    b->dropped.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  b->marks[b->used_marks++] = m;
}

void HostTracer::instant(const char* name, int64_t at_ns, int32_t step) noexcept { mark({name, at_ns, 0.0, step, false}); }

void HostTracer::counter(const char* name, double value, int64_t at_ns) noexcept { mark({name, at_ns, value, 0, true}); }

std::vector<timeline::TimelineEvent> HostTracer::events() const {
  std::lock_guard<std::mutex> lock(registry_mu_);
  std::vector<timeline::TimelineEvent> out;
  for (const auto& b : buffers_) out.insert(out.end(), b->spans.begin(), b->spans.begin() + static_cast<std::ptrdiff_t>(b->used_spans));
  std::stable_sort(out.begin(), out.end(), [](const auto& x, const auto& y) { return x.start < y.start; });
  return out;
}

std::vector<timeline::Instant> HostTracer::instants() const {
  std::lock_guard<std::mutex> lock(registry_mu_);
  std::vector<timeline::Instant> out;
  for (const auto& b : buffers_)
    for (size_t i = 0; i < b->used_marks; ++i)
      if (!b->marks[i].is_counter) out.push_back({rank_, plan::Time::ns(b->marks[i].at_ns), b->marks[i].name, b->marks[i].step});
  std::stable_sort(out.begin(), out.end(), [](const auto& x, const auto& y) { return x.at < y.at; });
  return out;
}

std::vector<timeline::Counter> HostTracer::counters() const {
  std::lock_guard<std::mutex> lock(registry_mu_);
  std::map<std::string, timeline::Counter> by_name;
  for (const auto& b : buffers_)
    for (size_t i = 0; i < b->used_marks; ++i)
      if (b->marks[i].is_counter) {
        timeline::Counter& c = by_name[b->marks[i].name];
        c.name = b->marks[i].name;
        c.samples.emplace_back(plan::Time::ns(b->marks[i].at_ns), b->marks[i].value);
      }
  std::vector<timeline::Counter> out;
  for (auto& [name, c] : by_name) {
    std::stable_sort(c.samples.begin(), c.samples.end());
    out.push_back(std::move(c));
  }
  return out;
}

uint64_t HostTracer::dropped() const {
  std::lock_guard<std::mutex> lock(registry_mu_);
  uint64_t n = unregistered_.load();
  for (const auto& b : buffers_) n += b->dropped.load();
  return n;
}

}  // namespace parallax::profiler
