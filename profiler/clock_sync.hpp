#pragma once
// Putting ranks on one time axis. Each rank's clock differs from rank 0's by an offset that can
// drift. A rank estimates the offset with round trips to rank 0 (Cristian's method): it notes its
// time t1, asks rank 0 for its time r, notes t2 when the answer arrives; rank 0's clock read r
// somewhere in [t1, t2], so offset = r - (t1 + t2) / 2 within +/- (t2 - t1) / 2. Of several round
// trips the tightest wins. Estimates at the start and the end of a run give a linear correction
// for drift. The transport is whatever the caller has (the c10d store in the executor), which
// keeps this part pure and testable with injected offsets.
#include <cstdint>
#include <vector>

namespace parallax::profiler {

/// One round trip, in nanoseconds: local send time, the reference (rank 0) clock, local receive time.
struct RoundTrip {
  int64_t local_send = 0;
  int64_t reference = 0;
  int64_t local_receive = 0;
};

struct OffsetEstimate {
  int64_t at_local = 0;     ///< local time of the estimate (the midpoint of the round trip)
  int64_t offset = 0;       ///< reference - local
  int64_t error_bound = 0;  ///< half the round trip
};

/// The estimate from the tightest round trip. Requires at least one.
OffsetEstimate estimate_offset(const std::vector<RoundTrip>& trips);

/// Maps local times to the reference axis: offset at the start, corrected linearly for drift
/// when the offset moved by more than the estimates' error bounds between start and end.
class ClockModel {
 public:
  ClockModel() = default;
  explicit ClockModel(const OffsetEstimate& start);
  ClockModel(const OffsetEstimate& start, const OffsetEstimate& end);

  int64_t to_reference(int64_t local) const;
  int64_t offset_at_start() const { return start_.offset; }
  /// Reference seconds per local second, minus one, in parts per million.
  double drift_ppm() const { return slope_ * 1e6; }
  int64_t error_bound() const { return bound_; }

 private:
  OffsetEstimate start_;
  double slope_ = 0;  // change of offset per local nanosecond
  int64_t bound_ = 0;
};

}  // namespace parallax::profiler
