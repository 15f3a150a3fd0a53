#pragma once
// The host tracer: records action spans on the CPU's monotonic clock into a buffer allocated up
// front. Recording never allocates, locks or throws (a slot is claimed with one atomic add); when
// the buffer is full the span is counted as dropped and reported with the trace. CLOCK_MONOTONIC
// is shared by all processes of a host, so ranks on one machine share a time axis as recorded.
#include <atomic>
#include <cstdint>
#include <vector>

#include "plan/timeline.hpp"

namespace parallax::profiler {

/// Start timestamp in nanoseconds on the host's monotonic clock.
int64_t now_ns();

class HostTracer {
 public:
  explicit HostTracer(int rank, size_t capacity = 1 << 20);

  /// Off: span() returns at once (to measure the tracer's own overhead).
  void set_enabled(bool on) { enabled_ = on; }

  /// Records one finished span. Safe from any thread; never blocks.
  void span(plan::Lane lane, const plan::Action& action, int64_t start_ns, int64_t end_ns, int64_t bytes = 0,
            int32_t step = 0) noexcept {
    if (!enabled_) return;
    const size_t i = next_.fetch_add(1, std::memory_order_relaxed);
    if (i >= events_.size()) {
      dropped_.fetch_add(1, std::memory_order_relaxed);
      return;
    }
    plan::TimelineEvent& e = events_[i];
    e.rank = rank_;
    e.lane = lane;
    e.action = action;
    e.start = plan::Time::ns(start_ns);
    e.end = plan::Time::ns(end_ns);
    e.bytes = bytes;
    e.step = step;
  }

  /// The recorded spans (call once recording has stopped).
  std::vector<plan::TimelineEvent> events() const;
  uint64_t dropped() const { return dropped_.load(); }

 private:
  int rank_;
  bool enabled_ = true;
  std::vector<plan::TimelineEvent> events_;
  std::atomic<size_t> next_{0};
  std::atomic<uint64_t> dropped_{0};
};

}  // namespace parallax::profiler
