#pragma once
// Tracing. `Tracer` is what the training loop records through: complete action spans (or a
// begin timestamp and the span's end), instant marks and counters, all with timestamps in
// nanoseconds on the host's monotonic clock. Nothing it does may disturb the loop: no locks, no
// allocation, no exceptions on the recording path.
//
// `HostTracer` gives every recording thread its own buffer, allocated and touched when the thread
// registers (register_thread(), which each of the executor's recording threads calls as it
// starts); a record finds its thread's buffer through a small thread-local table and claims the
// next slot with a plain increment, so threads never contend and recording never allocates, not
// even on a thread's first record. A record that has no room (a full buffer, or a thread that
// never registered) is dropped and counted; the count travels with the trace. CLOCK_MONOTONIC is shared by all processes of a host, so ranks on
// one machine share a time axis as recorded (across hosts, see clock_sync.hpp).
#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "timeline/timeline.hpp"

namespace parallax::profiler {

/// Start timestamp in nanoseconds on the host's monotonic clock.
int64_t now_ns();

class Tracer {
 public:
  virtual ~Tracer() = default;
  /// A finished action span.
  virtual void span(timeline::Lane lane, const schedule::Action& action, int64_t start_ns, int64_t end_ns, int64_t bytes = 0,
                    int32_t step = 0) noexcept = 0;
  /// A point in time (`name` must outlive the tracer: a string literal).
  virtual void instant(const char* name, int64_t at_ns, int32_t step = 0) noexcept = 0;
  /// A counter's value from `at_ns` on (`name` a string literal).
  virtual void counter(const char* name, double value, int64_t at_ns) noexcept = 0;

  /// Begin of a span: its timestamp, to pass to end().
  static int64_t begin() noexcept { return now_ns(); }
  void end(timeline::Lane lane, const schedule::Action& action, int64_t begin_ns, int64_t bytes = 0, int32_t step = 0) noexcept {
    span(lane, action, begin_ns, now_ns(), bytes, step);
  }
};

class HostTracer final : public Tracer {
 public:
  /// `capacity`: spans each thread can hold; marks get a quarter of that.
  explicit HostTracer(int rank, size_t capacity = 1 << 16);
  ~HostTracer() override;

  /// Gives the calling thread its buffer (allocated and touched now, so recording never
  /// allocates). Every thread that records calls it first; again on the same thread does
  /// nothing. A thread can be registered with up to kTracersPerThread tracers at once (the
  /// oldest registration makes room for a newer one).
  void register_thread();
  static constexpr int kTracersPerThread = 4;
  /// Off: records return at once (to measure the tracer's own overhead).
  void set_enabled(bool on) { enabled_ = on; }

  void span(timeline::Lane lane, const schedule::Action& action, int64_t start_ns, int64_t end_ns, int64_t bytes = 0,
            int32_t step = 0) noexcept override;
  void instant(const char* name, int64_t at_ns, int32_t step = 0) noexcept override;
  void counter(const char* name, double value, int64_t at_ns) noexcept override;

  /// Everything recorded, every thread's, spans in time order (call once recording has stopped).
  std::vector<timeline::TimelineEvent> events() const;
  std::vector<timeline::Instant> instants() const;
  std::vector<timeline::Counter> counters() const;
  /// Records dropped: no room in their thread's buffer, or a thread that never registered.
  uint64_t dropped() const;

 private:
  struct Mark {
    const char* name;
    int64_t at_ns;
    double value;
    int32_t step;
    bool is_counter;
  };
  struct ThreadBuffer {
    std::vector<timeline::TimelineEvent> spans;
    size_t used_spans = 0;
    std::vector<Mark> marks;
    size_t used_marks = 0;
    std::atomic<uint64_t> dropped{0};
  };
  ThreadBuffer* buffer() const noexcept;
  void mark(const Mark& m) noexcept;

  const uint64_t id_;  // tells this tracer's thread-local cache entries from another's
  int rank_;
  size_t capacity_;
  bool enabled_ = true;
  mutable std::mutex registry_mu_;  // taken when a thread registers, never on the recording path
  std::vector<std::unique_ptr<ThreadBuffer>> buffers_;
  std::atomic<uint64_t> unregistered_{0};  // records from threads that never registered
};

}  // namespace parallax::profiler
