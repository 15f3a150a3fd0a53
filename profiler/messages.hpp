#pragma once
// What point-to-point messages cost inside a measured run, read off its timeline (clock-aligned
// across ranks):
// - the sender's main-thread time for a SEND: from the SEND span's start (the runtime stamps it
//   before converting and posting the tensor) to the start of that rank's next compute or
//   receive;
// - delivery: from the moment the data left the sender (SEND start + that main-thread time) to
//   the end of the matching RECV, counted only for receives already waiting by then (otherwise
//   the receiver, not the message, set the end).
// calibrate takes the medians from its probe run; they hold what a ping-pong between idle ranks
// misses (threads waking on busy shared cores).
#include <vector>

#include "plan/timeline.hpp"

namespace parallax::profiler {

struct MessageTiming {
  std::vector<double> send_us;      ///< one per SEND followed by main-thread work
  std::vector<double> delivery_us;  ///< one per RECV that was waiting when its data left
  std::vector<double> bytes;        ///< the sizes of the sends measured
};

/// Over the steps after the first. `pipeline` maps a stage to its rank within a replica.
MessageTiming message_timing(const plan::Timeline& measured, int pipeline);

}  // namespace parallax::profiler
