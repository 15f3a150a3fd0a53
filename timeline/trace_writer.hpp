#pragma once
// Writes a Timeline as Chrome Trace Event JSON (docs/architecture.md, Traces), loadable in Perfetto UI and
// chrome://tracing: one process per rank ("rank 3", or "rank 3 (pp 1, dp 1)" where the timeline carries its plan: timeline::rank_role), one thread per lane, X events with
// ts/dur in microseconds (nanosecond decimals), args {action, stage, mb, bucket, bytes, step},
// counters (a prediction's links, a run's host probe) as C events under a "counters" process, and a top-level "parallax" object.
// Streams with printf-style formatting rather than building a JSON tree: a 16k-rank step is
// millions of events.
#include <iosfwd>

#include "timeline/timeline.hpp"

namespace parallax::timeline {

/// Device lanes (DeviceSpan) are threads from this number on, named after their lane.
constexpr int kFirstDeviceTid = 16;

void write_chrome_trace(const Timeline& timeline, std::ostream& out);

}  // namespace parallax::timeline
