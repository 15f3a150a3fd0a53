#pragma once
// The definitions of docs/architecture.md computed from any timeline, predicted or measured, so the
// simulator's summary and `parallax compare` mean the same thing by each number:
// step time = last end - first start of the step's events; busy = union of a rank's compute
// events; idle = step time - busy, split in two:
// - exposed communication: the part of the union of a rank's send, recv and all-reduce events
//   not covered by its compute events, where a point-to-point event counts only from the moment
//   both its SEND and its RECV were posted (before that the data could not flow);
// - bubble: the rest of idle, including waiting for data the peer has not yet sent. It is split
//   again, exactly: imbalance = the work (busy + exposed communication) the rank with the most had
//   beyond this rank's, at most its bubble; fill and drain = the rest, the same for every rank whose
//   imbalance is not capped: the bubble of the rank with the most work, which is what the schedule leaves idle
//   (with uniform stages the textbook (p-1)/(m+p-1)), while imbalance is the waiting on a slower
//   stage (or replica) that no schedule removes.
// Both sides are read the same way: a measured RECV that waited for its peer's compute counts as
// bubble there, as on the predicted side.
#include <cstdint>
#include <map>
#include <utility>
#include <vector>

#include "timeline/timeline.hpp"

namespace parallax::timeline {

struct RankTimes {
  int rank = 0;
  Time busy;
  Time bubble;
  double bubble_fraction = 0;
  Time imbalance;  ///< the part of `bubble` the most loaded rank's extra work explains
  double imbalance_fraction = 0;
  Time exposed_comm;
};

struct StepTimes {
  int step = 0;
  Time start;  ///< first event start, receives posted before any work of the step aside
  Time step_time;
  std::vector<RankTimes> ranks;  ///< every rank 0 .. world_size-1
  double bubble_fraction = 0;    ///< mean over ranks
  double imbalance_fraction = 0; ///< mean over ranks; bubble_fraction - this is the fill and drain
};

/// The numbers of one optimizer step (events of other steps are ignored).
StepTimes step_times(const Timeline& timeline, int step);
/// The length of the union of [start, end) intervals (ns).
int64_t union_length(std::vector<std::pair<int64_t, int64_t>> intervals);
/// The steps present in a timeline, ascending.
std::vector<int> steps_of(const Timeline& timeline);

/// A measured timeline's host-speed counters are named this, then " rank R" (in us).
inline constexpr const char* kHostProbeCounter = "host probe";

}  // namespace parallax::timeline
