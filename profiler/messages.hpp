#pragma once
// What point-to-point messages cost inside a measured run, read off its timeline (clock-aligned
// across ranks). Gloo's TCP transport moves a message once both sides have posted
// (gloo/transport/tcp/pair.cc), and the executor posts every receive of a step at the step's
// start (exec/runtime.cpp), so the sender writes the payload in its own send call. Measured:
// - the sender's main-thread time for each SEND, from the SEND span's start (the runtime stamps
//   it before converting and posting the tensor) to the start of that rank's next compute or
//   receive;
// - delivery, for a message whose receiver was already waiting in its RECV when the send began
//   (so the RECV's end is when the data arrived): from the send call's end to the RECV's end.
// calibrate fits both from its probe run; they hold what a ping-pong between idle ranks misses
// (threads waking on busy shared cores).
#include <vector>

#include "plan/plan.hpp"
#include "timeline/timeline.hpp"

namespace parallax::profiler {

struct MessageTiming {
  std::vector<double> send_us;      ///< one per SEND followed by main-thread work
  std::vector<double> bytes;        ///< the sizes of those sends
  std::vector<double> delivery_us;  ///< one per message whose receiver waited from before its send
};

/// Over the steps after the first. `parallel` places each rank (plan::placement_of), and so
/// names the sender of each receive.
MessageTiming message_timing(const timeline::Timeline& measured, const plan::ParallelSpec& parallel);

}  // namespace parallax::profiler
