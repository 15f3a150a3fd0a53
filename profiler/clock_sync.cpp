#include "profiler/clock_sync.hpp"

#include <algorithm>
#include <cassert>
#include <cstdlib>
#include <cmath>

namespace parallax::profiler {

OffsetEstimate estimate_offset(const std::vector<RoundTrip>& trips) {
  assert(!trips.empty());
  const RoundTrip* best = &trips.front();
  for (const RoundTrip& t : trips)
    if (t.local_receive - t.local_send < best->local_receive - best->local_send) best = &t;
  const int64_t mid = best->local_send + (best->local_receive - best->local_send) / 2;
  return {mid, best->reference - mid, (best->local_receive - best->local_send + 1) / 2};
}

ClockModel::ClockModel(const OffsetEstimate& start) : start_(start), bound_(start.error_bound) {}

ClockModel::ClockModel(const OffsetEstimate& start, const OffsetEstimate& end)
    : start_(start), bound_(std::max(start.error_bound, end.error_bound)) {
  // Drift is corrected only when the offset moved by more than the two estimates' uncertainty;
  // otherwise the "drift" would be noise amplified over the run.
  const int64_t span = end.at_local - start.at_local;
  const int64_t moved = end.offset - start.offset;
  if (span > 0 && std::llabs(moved) > start.error_bound + end.error_bound)
    slope_ = static_cast<double>(moved) / static_cast<double>(span);
}

int64_t ClockModel::to_reference(int64_t local) const {
  return local + start_.offset + std::llround(slope_ * static_cast<double>(local - start_.at_local));
}

}  // namespace parallax::profiler
