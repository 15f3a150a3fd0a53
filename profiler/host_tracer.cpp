#include "profiler/host_tracer.hpp"

#include <algorithm>
#include <ctime>

namespace parallax::profiler {

int64_t now_ns() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

HostTracer::HostTracer(int rank, size_t capacity) : rank_(rank), events_(capacity) {}

std::vector<plan::TimelineEvent> HostTracer::events() const {
  const size_t n = std::min(next_.load(), events_.size());
  return {events_.begin(), events_.begin() + static_cast<std::ptrdiff_t>(n)};
}

}  // namespace parallax::profiler
